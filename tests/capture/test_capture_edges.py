"""Nothing silently wrong at the edges of a capture (issue 21): what a transform writes must read back, in
libpcap, tshark and scapy, as what it claims to be. Each test here failed on the code before its fix."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

import indep_readers as ir
from test_capture_stream import MK0, block, cli, epb, eth, idb, opt, pcap_bytes, shb, udp4

MK1 = "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"
PSP_KEYS = ["--master-key0", MK0, "--master-key1", MK1]

needs_tshark = pytest.mark.skipif(ir.TSHARK is None, reason="tshark is not installed (scripts/install.sh)")
needs_libpcap = pytest.mark.skipif(ir.libpcap_version() is None, reason="libpcap.so is not installed")


def psp(cmd: str, src: Path, dst: Path, *extra: str, rc: int = 0) -> None:
    spi = ["--spi", "9a345678"] if cmd == "encrypt" else []
    cli(["pypsp", cmd, src, dst, *PSP_KEYS, *spi, "-q", *extra], check_rc=rc)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@needs_tshark
def test_pcap_to_pcapng_snaplen_patch_lands_in_the_idb(tmp_path):
    """The grown snap length was written 28 octets past the IDB, into the first EPB's length (tshark: "total
    block length 124 of an EPB is too small for 1554 bytes")."""
    src = write(tmp_path / "in.pcap", pcap_bytes([eth(udp4(b"a" * 10)), eth(udp4(b"b" * 1472))], snaplen=1514))
    psp("encrypt", src, tmp_path / "out.pcapng", "-F", "pcapng")
    recs = ir.tshark(tmp_path / "out.pcapng")
    assert [(r.caplen, r.origlen) for r in recs] == [(92, 92), (1554, 1554)]
    idb_out = (tmp_path / "out.pcapng").read_bytes()[28:48]
    assert struct.unpack_from("<II", idb_out, 0)[0] == 1 and struct.unpack_from("<I", idb_out, 12)[0] == 1554


# ---- FCS ---------------------------------------------------------------------------------------------------

FCS_PCAP_LINKTYPE = 1 | 0x04000000 | (2 << 28)  # Ethernet, P bit, FCS len 2 16-bit words


def with_fcs(frame: bytes) -> bytes:
    return frame + struct.pack("<I", zlib.crc32(frame))


def epb_flags(frame: bytes, flags: int, extra_opts: bytes = b"") -> bytes:
    data = frame + bytes(-len(frame) % 4)
    return block(6, struct.pack("<IIIII", 0, 0, 1000, len(frame), len(frame)) + data
                 + opt(2, struct.pack("<I", flags)) + extra_opts + opt(0, b""))


def fcs_inputs():
    frames = [with_fcs(eth(udp4(bytes([i]) * (20 + 7 * i)))) for i in range(4)]
    yield "pcap-linktype", pcap_bytes(frames, linktype=FCS_PCAP_LINKTYPE), "pcap"
    yield "idb-if_fcslen", shb() + idb(opts=opt(13, b"\x04") + opt(0, b"")) + b"".join(
        epb(f, ts=1000 + i) for i, f in enumerate(frames)), "pcapng"
    hash_opt = opt(3, b"\x02" + bytes(16))  # epb_hash, an MD5 of sorts: it must not survive a change of data
    yield "epb-flags", shb() + idb(opts=opt(0, b"")) + b"".join(
        epb_flags(f, 4 << 5, hash_opt) for f in frames), "pcapng"


@needs_tshark
@pytest.mark.parametrize("name,data,fmt", list(fcs_inputs()), ids=[n for n, _, _ in fcs_inputs()])
@pytest.mark.parametrize("out_fmt", ["pcap", "pcapng"])
def test_declared_fcs_is_right_after_encrypt_and_decrypt(name, data, fmt, out_fmt, tmp_path):
    """A frame declared with an FCS came out without one while the file still declared it (tshark took the
    packet's last 4 octets as the FCS); pcap -> pcapng dropped the declaration. Now every frame tshark reads as
    having an FCS has a correct one, and decryption gives back the input frames."""
    src = write(tmp_path / f"in.{fmt}", data)
    enc, dec = tmp_path / f"enc.{out_fmt}", tmp_path / f"dec.{out_fmt}"
    psp("encrypt", src, enc, "-F", out_fmt)
    psp("decrypt", enc, dec, "-F", out_fmt)
    clear = ir.tshark(src)
    assert all(r.fcs_good for r in clear)
    for path in (enc, dec):
        recs = ir.tshark(path)
        assert len(recs) == len(clear)
        # declared and right, or (EPB flags have no place in pcap) no longer declared and stripped
        if name == "epb-flags" and out_fmt == "pcap":
            assert all(r.fcs_good is None for r in recs)
        else:
            assert all(r.fcs_good for r in recs), [r.fcs_good for r in recs]
    want = [r.data for r in ir.scapy(src)]
    got = [r.data for r in ir.scapy(dec)]
    if name == "epb-flags" and out_fmt == "pcap":
        want = [w[:-4] for w in want]
    assert got == want
    if out_fmt == "pcapng" and name == "epb-flags":
        raw = enc.read_bytes()
        assert hash_present(src.read_bytes()) and not hash_present(raw)


def hash_present(data: bytes) -> bool:
    """Any epb_hash option in a little-endian pcapng's EPBs."""
    off = 0
    while off < len(data):
        btype, n = struct.unpack_from("<II", data, off)
        if btype == 6:
            caplen = struct.unpack_from("<I", data, off + 20)[0]
            o = off + 28 + caplen + (-caplen % 4)
            while o < off + n - 4:
                code, olen = struct.unpack_from("<HH", data, o)
                if code == 0:
                    break
                if code == 3:
                    return True
                o += 4 + olen + (-olen % 4)
        off += n
    return False


# ---- Simple Packet Blocks cut by the snap length -----------------------------------------------------------


def spb(frame: bytes, origlen: int) -> bytes:
    return block(3, struct.pack("<I", origlen) + frame)


@needs_tshark
@pytest.mark.parametrize("to", ["file", "pipe"])
def test_a_cut_spb_reads_back_after_the_snaplen_is_raised(to, tmp_path):
    """An SPB's captured length is min(original length, SnapLen): once encryption raised the SnapLen, a cut SPB
    was read as longer than it is (tshark: "SPB is too small for 100 bytes"; our reader: padding as data)."""
    cut = eth(udp4(b"c" * 58))  # 100 octets
    data = shb() + idb(snaplen=97, opts=opt(0, b"")) + spb(cut[:97], 100) + spb(eth(udp4(b"w" * 30)), 72) \
        + epb(eth(udp4(b"g" * 50)))
    src = write(tmp_path / "in.pcapng", data)
    out = tmp_path / "out.pcapng"
    # exit status 1: the cut packet is not encrypted (capture-packet-cut), and is kept as it was
    if to == "file":
        psp("encrypt", src, out, rc=1)
    else:
        out.write_bytes(cli(["pypsp", "encrypt", "-", "-", *PSP_KEYS, "--spi", "9a345678", "-q"], stdin=data,
                            check_rc=1).stdout)
    for reader in (ir.tshark, ir.scapy):
        recs = reader(out)
        assert (recs[0].caplen, recs[0].origlen) == (97, 100), reader
    assert ir.scapy(out)[0].data == cut[:97]
    from pecore.capture import read_capture
    first = next(iter(read_capture(out)))
    assert (len(first.data), first.origlen, first.data) == (97, 100, cut[:97])


# ---- pcapng -> pcap: one snap length for every interface ---------------------------------------------------


@needs_libpcap
@pytest.mark.parametrize("to", ["file", "pipe"])
def test_pcapng_to_pcap_snaplen_holds_every_interface(to, tmp_path):
    """The pcap header took the first IDB's snap length only, so libpcap cut the records of a second interface
    with a longer one."""
    small, big = eth(udp4(b"s" * 30)), eth(udp4(b"B" * 1400))
    data = shb() + idb(snaplen=128, opts=opt(0, b"")) + idb(snaplen=9000, opts=opt(0, b"")) \
        + epb(small, 0, ts=1_700_000_000_000_000) + epb(big, 1, ts=1_700_000_000_000_001)
    src = write(tmp_path / "in.pcapng", data)
    out = tmp_path / "out.pcap"
    if to == "file":
        psp("decrypt", src, out, "-F", "pcap")
    else:
        out.write_bytes(cli(["pypsp", "decrypt", "-", "-", *PSP_KEYS, "-q", "-F", "pcap"], stdin=data,
                            check_rc=0).stdout)
    assert [r.data for r in ir.libpcap(out)] == [small, big]


# ---- if_tsresol --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tsresol,units_per_s,magic", [
    (0x80 | 20, 1 << 20, 0xA1B23C4D),  # 2^-20: finer than a microsecond
    (0x80 | 7, 1 << 7, 0xA1B23C4D),  # 2^-7 s is 7812.5 us: not whole microseconds
    (0x80 | 6, 1 << 6, 0xA1B2C3D4),  # 2^-6 s = 15625 us exactly
    (9, 10 ** 9, 0xA1B23C4D),
    (6, 10 ** 6, 0xA1B2C3D4),
    (3, 10 ** 3, 0xA1B2C3D4),
])
def test_pcapng_to_pcap_timestamps_at_the_best_precision(tsresol, units_per_s, magic, tmp_path):
    """if_tsresol 2^-20 made a microsecond pcap (the test was `> 20`). Now a pcap holds every timestamp exactly
    when it can, else to the nanosecond (rounded down)."""
    ts = [1_700_000_000 * units_per_s + k * units_per_s // 7 + k for k in range(5)]
    data = shb() + idb(opts=opt(9, bytes([tsresol])) + opt(0, b"")) + b"".join(
        epb(eth(udp4(b"t" * 12)), ts=t) for t in ts)
    src = write(tmp_path / "in.pcapng", data)
    out = tmp_path / "out.pcap"
    psp("decrypt", src, out, "-F", "pcap")
    raw = out.read_bytes()
    assert struct.unpack_from("<I", raw)[0] == magic
    want = [t * 10 ** 9 // units_per_s for t in ts]
    if magic == 0xA1B2C3D4:
        assert all(w % 1000 == 0 for w in want)  # exact in microseconds
    for reader in ([ir.libpcap] if ir.libpcap_version() else []) + [ir.scapy]:
        assert [r.ts_ns for r in reader(out)] == want, reader


def test_fcs_that_cannot_be_kept_right_is_refused_not_left_wrong(tmp_path):
    """pcap declares one FCS length for the file: an interface without one, after one with one, cannot go to
    pcap; and an FCS the transform cannot recompute (Ethernet with a 2-octet FCS) fails the packet, kept as it
    was."""
    f = with_fcs(eth(udp4(b"m" * 20)))
    mixed = shb() + idb(opts=opt(13, b"\x04") + opt(0, b"")) + idb(opts=opt(0, b"")) + epb(f, 0, ts=5) \
        + epb(f[:-4], 1, ts=6)
    r = cli(["pypsp", "decrypt", write(tmp_path / "m.pcapng", mixed), tmp_path / "m.pcap", *PSP_KEYS, "-F", "pcap"])
    assert r.returncode == 2 and b"capture-cannot-convert" in r.stderr and b"FCS lengths" in r.stderr
    two = shb() + idb(opts=opt(13, b"\x02") + opt(0, b"")) + epb(f[:-2], ts=5)
    src = write(tmp_path / "two.pcapng", two)
    r = cli(["pypsp", "encrypt", src, tmp_path / "o.pcapng", *PSP_KEYS, "--spi", "9a345678"], check_rc=1)
    assert b"capture-unsupported-linktype: 1" in r.stdout
    assert (tmp_path / "o.pcapng").read_bytes()[-len(epb(f[:-2], ts=5)):] == epb(f[:-2], ts=5)
