"""Whole capture files through pypsp.encrypt_capture / decrypt_capture.

Captures are written with pecore.capture.CaptureWriter (pcap, pcap-nsec,
pcapng; Ethernet and raw-IP link types) and read back with
pecore.capture.read_capture.  A round trip must give back every IP packet byte
for byte with its timestamp, leave non-IP frames alone, and count every packet
once in the summary.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import pypsp
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, CaptureWriter, read_capture
from pecore.capture import CaptureError as CoreCaptureError
from pypsp import CaptureError, Decryptor, Encryptor, PspError
from pecore.protocol import checksum

KEY16 = bytes.fromhex("00112233445566778899aabbccddeeff")
KEY32 = bytes(range(32))
SPI = 0x9A345678

V4_SRC, V4_DST = bytes([192, 168, 1, 10]), bytes([192, 168, 1, 20])
V6_SRC = bytes.fromhex("20010db8000000000000000000000001")
V6_DST = bytes.fromhex("20010db8000000000000000000000002")
MAC_DST, MAC_SRC = bytes.fromhex("008899aabb00"), bytes.fromhex("002233445500")


def _csum(data: bytes) -> int:
    """The one's-complement sum folded to 16 bits (not complemented), from the core's checksum."""
    return 0xFFFF ^ checksum(data)


def ipv4(proto: int, payload: bytes, ident: int = 0, flags: int = 0x4000) -> bytes:
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags, 64, proto, 0, V4_SRC, V4_DST))
    h[10:12] = struct.pack("!H", 0xFFFF ^ _csum(bytes(h)))
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60012345, len(payload), nh, 64, V6_SRC, V6_DST) + payload


def udp(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def tcp(sport: int, dport: int, data: bytes, seq: int = 1) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 0x50, 0x18, 1024, 0, 0) + data


def payload(i: int, n: int) -> bytes:
    return bytes((i + k) & 0xFF for k in range(n))


def ip_packet(i: int) -> bytes:
    """The i-th IP packet of a mix: IPv4/IPv6 × TCP/UDP, sizes 18..1400 (no Ethernet padding needed)."""
    n = 18 + (i * 97) % 1380
    kind = i % 4
    if kind == 0:
        return ipv4(17, udp(5000 + i % 100, 53, payload(i, n)), ident=i & 0xFFFF)
    if kind == 1:
        return ipv4(6, tcp(443, 40000 + i % 1000, payload(i, n), seq=i))
    if kind == 2:
        return ipv6(17, udp(5353, 5353, payload(i, n)))
    return ipv6(6, tcp(50000, 22, payload(i, n), seq=i))


def ether(ethertype: int, body: bytes) -> bytes:
    return MAC_DST + MAC_SRC + struct.pack("!H", ethertype) + body


def ether_ip(pkt: bytes) -> bytes:
    return ether(0x0800 if pkt[0] >> 4 == 4 else 0x86DD, pkt)


def arp(i: int) -> bytes:
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, MAC_SRC, V4_SRC, bytes(6), bytes([192, 168, 1, i & 0xFF]))
    return ether(0x0806, body + bytes(18))  # padded to the 60-octet minimum


def vlan_ip(pkt: bytes) -> bytes:
    return MAC_DST + MAC_SRC + struct.pack("!HHH", 0x8100, 0x0064, 0x0800 if pkt[0] >> 4 == 4 else 0x86DD) + pkt


FRAGMENT = ipv4(6, tcp(80, 8080, payload(9, 64)), ident=0x4242, flags=0x2000)  # MF: transport mode refuses it


def timestamp(i: int, fmt: str):
    nsec = (i * 123_456_789) % 1_000_000_000
    if fmt == "pcap":
        nsec -= nsec % 1000  # microsecond resolution survives exactly
    return (1_700_000_000 + i * 3, nsec)


def build_capture(path: Path, fmt: str, linktype: int, n_ip: int = 40):
    """Write a mixed capture.  Returns (frames written, kinds) where kind is 'ip', 'non-ip' or 'fragment'."""
    frames, kinds = [], []
    for i in range(n_ip):
        pkt = ip_packet(i)
        if linktype == LINKTYPE_RAW:
            frames.append(pkt)
        else:
            frames.append(vlan_ip(pkt) if i % 10 == 7 else ether_ip(pkt))
        kinds.append("ip")
        if i % 8 == 3:  # a non-IP frame now and then
            frames.append(arp(i) if linktype == LINKTYPE_ETHERNET else b"\x00\x01\x02\x03" + bytes(30))
            kinds.append("non-ip")
        if i == 5:
            frames.append(FRAGMENT if linktype == LINKTYPE_RAW else ether_ip(FRAGMENT))
            kinds.append("fragment")
    with CaptureWriter(path, linktype=linktype, fmt=fmt) as w:
        for i, f in enumerate(frames):
            w.write(f, timestamp(i, fmt))
    return frames, kinds


def records(path):
    return list(read_capture(path))


FORMATS = ["pcap", "pcap-nsec", "pcapng"]
LINKTYPES = [LINKTYPE_ETHERNET, LINKTYPE_RAW]


@pytest.fixture
def sa():
    enc = Encryptor(spi=SPI, key=KEY16, crypt_offset=1)
    dec = Decryptor(keys={SPI: KEY16})
    return enc, dec


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("linktype", LINKTYPES)
def test_round_trip(tmp_path, fmt, linktype, sa):
    enc, dec = sa
    src, mid, out = tmp_path / "in", tmp_path / "enc", tmp_path / "dec"
    frames, kinds = build_capture(src, fmt, linktype)
    n_ip, n_non, n_frag = kinds.count("ip"), kinds.count("non-ip"), kinds.count("fragment")
    original = records(src)
    assert [r.data for r in original] == frames
    if fmt == "pcap":  # the writer's microseconds come back as nanoseconds
        assert [(r.ts_sec, r.ts_nsec) for r in original] == [timestamp(i, fmt) for i in range(len(frames))]

    s = pypsp.encrypt_capture(enc, src, mid)
    assert (s.packets, s.transformed, s.passed, s.failed) == (len(frames), n_ip, n_non, n_frag)
    assert s.passed_by_reason == {"not-ip": n_non}
    assert s.failed_by_reason == {"ip-fragment": n_frag}
    assert enc.next_iv() == 1 + n_ip  # the refused fragment spent no IV

    encrypted = records(mid)
    assert len(encrypted) == len(frames)
    ref = Encryptor(spi=SPI, key=KEY16, crypt_offset=1)  # the same SA, packet by packet
    for r, o, kind in zip(encrypted, original, kinds):
        assert (r.ts_sec, r.ts_nsec, r.linktype) == (o.ts_sec, o.ts_nsec, o.linktype)
        if kind != "ip":
            assert r.data == o.data  # untouched
            continue
        ip = r.ip_packet()
        assert r.l2_header() == o.l2_header()  # same version: same Ethertype
        assert ip == ref.encrypt(o.ip_packet())
        assert r.origlen == len(r.data)

    s = pypsp.decrypt_capture(dec, mid, out)
    assert (s.packets, s.transformed, s.passed, s.failed) == (len(frames), n_ip, n_non + n_frag, 0)
    assert s.passed_by_reason == {"not-ip": n_non, "not-udp": n_frag}
    assert s.failed_by_reason == {}

    restored = records(out)
    assert len(restored) == len(original)
    for i, (r, o) in enumerate(zip(restored, original)):
        assert r.data == o.data, f"frame {i} ({kinds[i]}) differs"
        assert (r.ts_sec, r.ts_nsec, r.linktype, r.origlen) == (o.ts_sec, o.ts_nsec, o.linktype, o.origlen)


@pytest.mark.parametrize("fmt", FORMATS)
def test_tunnel_mode_changes_and_restores_the_ethertype(tmp_path, fmt):
    tmpl = ipv6(0, b"")
    enc = Encryptor(spi=SPI, key=KEY32, version=1, mode="tunnel", tunnel_header=tmpl, crypt_offset_ipv4=6,
                    crypt_offset_ipv6=11)
    dec = Decryptor(keys={SPI: KEY32})
    src, mid, out = tmp_path / "in", tmp_path / "enc", tmp_path / "dec"
    frames, kinds = build_capture(src, fmt, LINKTYPE_ETHERNET, n_ip=24)
    s = pypsp.encrypt_capture(enc, src, mid)
    assert s.transformed == kinds.count("ip") + kinds.count("fragment")  # tunnel mode carries fragments whole
    assert s.failed == 0
    for r, kind in zip(records(mid), kinds):
        if kind == "non-ip":
            continue
        ip = r.ip_packet()
        assert ip[0] >> 4 == 6 and ip[8:40] == tmpl[8:40]
        assert r.l2_header()[-2:] == b"\x86\xdd"  # the outer is IPv6, also around IPv4 and in VLAN frames
    s = pypsp.decrypt_capture(dec, mid, out)
    assert s.transformed == kinds.count("ip") + kinds.count("fragment") and s.failed == 0
    assert [r.data for r in records(out)] == frames


def test_ethernet_padding_is_dropped_but_the_ip_packet_restored(tmp_path, sa):
    enc, dec = sa
    small = ipv4(17, udp(1, 2, b"hi"))  # 30 octets: a 44-octet frame, padded to 60
    padded = ether_ip(small) + b"\xee" * 16
    src, mid, out = tmp_path / "in", tmp_path / "enc", tmp_path / "dec"
    with CaptureWriter(src) as w:
        w.write(padded, (1, 2000))
    assert pypsp.encrypt_capture(enc, src, mid).transformed == 1
    assert pypsp.decrypt_capture(dec, mid, out).transformed == 1
    (r,) = records(out)
    assert r.data == ether_ip(small) and r.ip_packet() == small and (r.ts_sec, r.ts_nsec) == (1, 2000)


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_key_keeps_or_drops_the_failed_packets(tmp_path, fmt, sa):
    enc, _ = sa
    src, mid = tmp_path / "in", tmp_path / "enc"
    frames, kinds = build_capture(src, fmt, LINKTYPE_ETHERNET)
    n_ip = kinds.count("ip")
    pypsp.encrypt_capture(enc, src, mid)
    encrypted = records(mid)

    wrong = Decryptor(keys={SPI: bytes(16)})
    s = pypsp.decrypt_capture(wrong, mid, tmp_path / "kept")
    assert (s.packets, s.transformed, s.failed) == (len(frames), 0, n_ip)
    assert s.failed_by_reason == {"authentication-failed": n_ip}
    assert s.passed == len(frames) - n_ip
    kept = records(tmp_path / "kept")
    assert [(r.data, r.ts_sec, r.ts_nsec) for r in kept] == [(r.data, r.ts_sec, r.ts_nsec) for r in encrypted]

    s = pypsp.decrypt_capture(wrong, mid, tmp_path / "dropped", drop_failed=True)
    assert s.failed == n_ip and s.failed_by_reason == {"authentication-failed": n_ip}
    dropped = records(tmp_path / "dropped")
    survivors = [r for r, k in zip(encrypted, kinds) if k != "ip"]
    assert [(r.data, r.ts_sec, r.ts_nsec) for r in dropped] == [(r.data, r.ts_sec, r.ts_nsec) for r in survivors]

    # a receiver without any key for the SPI: no-key, per packet
    s = pypsp.decrypt_capture(Decryptor(keys={SPI + 1: KEY16}), mid, tmp_path / "nokey")
    assert s.failed_by_reason == {"no-key": n_ip}


def test_mixed_failure_reasons_are_counted_by_name(tmp_path, sa):
    enc, dec = sa
    good = [enc.encrypt(ip_packet(i)) for i in range(6)]
    tampered = bytearray(good[1])
    tampered[-1] ^= 1
    v9 = bytearray(good[2])
    psp = (v9[0] & 15) * 4 + 8 if v9[0] >> 4 == 4 else 48
    v9[psp + 3] = 9 << 2 | 1
    other_spi = Encryptor(spi=SPI + 1, key=KEY16).encrypt(ip_packet(7))
    frames = [good[0], bytes(tampered), bytes(v9), other_spi, good[3], ip_packet(8)]
    src = tmp_path / "in"
    with CaptureWriter(src, linktype=LINKTYPE_RAW, fmt="pcapng") as w:
        for i, f in enumerate(frames):
            w.write(f, (i, i))
    s = pypsp.decrypt_capture(dec, src, tmp_path / "out")
    assert (s.packets, s.transformed, s.passed, s.failed) == (6, 2, 1, 3)
    assert s.failed_by_reason == {"authentication-failed": 1, "psp-unsupported-version": 1, "no-key": 1}
    assert s.passed_by_reason == {"udp-wrong-port": 1}
    out = records(tmp_path / "out")
    assert [r.data for r in out] == [ip_packet(0), bytes(tampered), bytes(v9), other_spi, ip_packet(3), ip_packet(8)]
    assert "authentication-failed" in s.format("decrypted")


def test_snaplen_cut_packets_are_refused_and_kept(tmp_path, sa):
    enc, _ = sa
    src, mid = tmp_path / "in", tmp_path / "enc"
    long_pkt, short_pkt = ip_packet(40), ip_packet(4)  # 1166 and 434 octets of IP
    with CaptureWriter(src, snaplen=200) as w:
        w.write(ether_ip(long_pkt), (1, 0))
        w.write(ether_ip(short_pkt)[:150], (2, 0))  # short enough: not cut by the writer
    s = pypsp.encrypt_capture(enc, src, mid)
    # frame 0 was cut by the snap length (caplen < origlen): refused; frame 1 holds a cut IP packet
    assert s.failed_by_reason.get("capture-packet-cut") == 1
    assert s.failed == 2 and s.transformed == 0
    assert [r.data for r in records(mid)] == [r.data for r in records(src)]


def test_unsupported_link_type_is_counted_per_packet(tmp_path, sa):
    enc, _ = sa
    src = tmp_path / "in"
    with CaptureWriter(src, linktype=105) as w:  # IEEE 802.11
        for i in range(3):
            w.write(bytes(40) + ip_packet(i), (i, 0))
    s = pypsp.encrypt_capture(enc, src, tmp_path / "out")
    assert (s.packets, s.failed) == (3, 3)
    assert s.failed_by_reason == {"capture-unsupported-linktype": 3}
    assert [r.data for r in records(tmp_path / "out")] == [r.data for r in records(src)]


# --------------------------------------------------------------------------- progress


def test_progress_is_called_and_can_abort(tmp_path, sa):
    enc, _ = sa
    src = tmp_path / "in"
    frames, _ = build_capture(src, "pcap", LINKTYPE_ETHERNET)
    calls = []

    def progress(done, total, packets):
        calls.append((done, total, packets))

    s = pypsp.encrypt_capture(enc, src, tmp_path / "out", progress=progress)
    assert calls and calls[-1] == (os.path.getsize(src), os.path.getsize(src), len(frames))
    assert s.packets == len(frames)

    with pytest.raises(CaptureError) as ei:
        pypsp.encrypt_capture(enc, src, tmp_path / "aborted", progress=lambda d, t, p: False)
    err = ei.value
    assert err.code == "capture-aborted" and isinstance(err, PspError) and str(err)
    assert err.summary is not None and err.summary.packets == len(frames)
    # An exception in the callback (a KeyboardInterrupt too) stops the run and comes out as itself.
    for exc in (ZeroDivisionError, KeyboardInterrupt):
        def boom(d, t, p, exc=exc):
            raise exc()
        with pytest.raises(exc) as ei2:
            pypsp.encrypt_capture(enc, src, tmp_path / "aborted", progress=boom)
        assert ei2.value.summary.packets == len(frames)
    assert not (tmp_path / "aborted").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []  # no temp file left

    # None and True do not abort
    for ok in (lambda d, t, p: None, lambda d, t, p: True):
        assert pypsp.decrypt_capture(Decryptor(keys={SPI: KEY16}), src, tmp_path / "ok", progress=ok).packets == len(frames)


# --------------------------------------------------------------------------- bad files


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_garbage_and_truncated_files(tmp_path, fmt, sa):
    enc, dec = sa
    good = tmp_path / "good"
    frames, _ = build_capture(good, fmt, LINKTYPE_ETHERNET, n_ip=6)
    data = good.read_bytes()
    header = 24 if fmt != "pcapng" else 28 + 32  # file header, or SHB + IDB as our writer makes them

    def fails(path, code, fn=pypsp.encrypt_capture, ctx=enc):
        with pytest.raises(CaptureError) as ei:
            fn(ctx, path, tmp_path / "out")
        err = ei.value
        assert err.code == code, (path, err.code)
        assert isinstance(err, PspError) and isinstance(err, OSError)
        assert str(err) and os.fspath(path) in str(err)
        return err

    fails(_write(tmp_path / "empty", b""), "capture-bad-format")
    fails(_write(tmp_path / "garbage", bytes((i * 37 + 11) & 0xFF for i in range(500))), "capture-bad-format")
    fails(_write(tmp_path / "text", b"this is not a capture file\n" * 10), "capture-bad-format", pypsp.decrypt_capture, dec)
    fails(tmp_path / "does-not-exist", "capture-io")
    # a known magic, then the file header cut short; and too short for any magic
    fails(_write(tmp_path / "short-header", data[:header - 5]), "capture-truncated")
    fails(_write(tmp_path / "magic-only", data[:4]), "capture-truncated")
    fails(_write(tmp_path / "tiny", data[:3]), "capture-bad-format")
    # cut inside the last record / block: the packets before it were processed and are in the summary
    err = fails(_write(tmp_path / "cut", data[:-7]), "capture-truncated")
    assert err.summary.packets == len(frames) - 1
    # cut inside a record header
    rec_cut = header + (8 if fmt != "pcapng" else 6)
    fails(_write(tmp_path / "cut-early", data[:rec_cut]), "capture-truncated")
    # a record length running past the end
    bad = bytearray(data)
    if fmt == "pcapng":
        bad[header + 4 : header + 8] = struct.pack("<I", 0x7FFFFFF0)  # first EPB's Block Total Length
    else:
        bad[header + 8 : header + 12] = struct.pack("<I", len(data))  # first record's caplen
    fails(_write(tmp_path / "overlong", bytes(bad)), "capture-truncated")
    # the same bad files through read_capture
    with pytest.raises(CoreCaptureError) as ei:
        records(tmp_path / "garbage")
    assert ei.value.code == "capture-bad-format"


def test_output_problems(tmp_path, sa):
    enc, _ = sa
    src = tmp_path / "in"
    build_capture(src, "pcap", LINKTYPE_RAW, n_ip=4)
    before = src.read_bytes()
    with pytest.raises(CaptureError) as ei:
        pypsp.encrypt_capture(enc, src, tmp_path / "no-such-dir" / "out.pcap")
    # the output is named, with the system's reason (not the input, as once)
    assert ei.value.code == "capture-write-failed"
    assert "no-such-dir/out.pcap" in str(ei.value) and "No such file or directory" in str(ei.value)
    with pytest.raises(CaptureError) as ei:
        pypsp.encrypt_capture(enc, src, tmp_path)  # a directory as the output
    assert ei.value.code == "capture-write-failed" and "is a directory" in str(ei.value)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    with pytest.raises(CaptureError) as ei:
        pypsp.encrypt_capture(enc, src, src)  # in place: refused, the input is left intact
    assert ei.value.code and str(ei.value)
    assert src.read_bytes() == before
    assert enc.next_iv() == 1


# --------------------------------------------------------------------------- size


def test_twenty_thousand_packets(tmp_path):
    n = 20_000
    enc = Encryptor(spi=SPI, master_keys=(None, bytes(range(32))), version=1, crypt_offset=1, vc=b"\x11" * 8)
    dec = Decryptor(master_keys=(None, bytes(range(32))))
    src, mid, out = tmp_path / "in.pcapng", tmp_path / "enc.pcapng", tmp_path / "dec.pcapng"
    with CaptureWriter(src, fmt="pcapng") as w:
        for i in range(n):
            if i % 1000 == 999:
                w.write(arp(i), timestamp(i, "pcapng"))
            else:
                w.write(ether_ip(ip_packet(i % 997)), timestamp(i, "pcapng"))
    n_arp = n // 1000
    calls = []
    s = pypsp.encrypt_capture(enc, src, mid, progress=lambda d, t, p: calls.append((d, t, p)))
    assert (s.packets, s.transformed, s.passed, s.failed) == (n, n - n_arp, n_arp, 0)
    assert enc.next_iv() == 1 + n - n_arp
    assert len(calls) >= n // 4096 and [c[2] for c in calls] == sorted(c[2] for c in calls)
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[-1][2] == n
    s = pypsp.decrypt_capture(dec, mid, out)
    assert (s.packets, s.transformed, s.passed, s.failed) == (n, n - n_arp, n_arp, 0)
    a, b = records(src), records(out)
    assert len(a) == len(b) == n
    assert all(x.data == y.data and x.ts_sec == y.ts_sec and x.ts_nsec == y.ts_nsec for x, y in zip(a, b))
    # every IV in the encrypted file is distinct
    ivs = set()
    for r in records(mid):
        ip = r.ip_packet()
        if ip is not None:
            off = 28 if ip[0] >> 4 == 4 else 48
            ivs.add(ip[off + 8 : off + 16])
    assert len(ivs) == n - n_arp


def test_outputs_that_are_not_regular_files_are_written_in_place(tmp_path, sa):
    """/dev/null, a FIFO and a symbolic link: written through, never replaced by a rename (a rename once turned
    /dev/null into a regular file)."""
    import stat
    import threading

    enc, _ = sa
    src = tmp_path / "in"
    build_capture(src, "pcap", LINKTYPE_RAW, n_ip=4)
    pypsp.encrypt_capture(enc, src, os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    pypsp.encrypt_capture(enc, src, fifo)
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got and got[0][:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4")
    real = tmp_path / "real.pcap"
    real.write_bytes(b"old")
    link = tmp_path / "link.pcap"
    link.symlink_to(real)
    pypsp.encrypt_capture(enc, src, link)
    assert link.is_symlink() and real.read_bytes() != b"old" and len(real.read_bytes()) > 24
