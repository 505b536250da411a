"""Captures as streams (issue 14): `-` for standard input and output in both CLIs, -F pcap|pcapng, header fields
kept (snap length, pcapng SHB/IDB options, packet comments, other blocks), show --json as JSON Lines written as it
goes, a truncated input's summary and exit status 3, and memory that does not grow with the capture."""
from __future__ import annotations

import json
import os
import pty
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pypsp
from cliutil import default_sigint
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, CaptureError, CaptureWriter, read_capture

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import capture_memory  # noqa: E402  (bench/capture_memory.py: the same measurement bench/run makes at 1 GiB)

MK0 = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
ETH = bytes.fromhex("020000000002020000000001")
PSP = ["pypsp", "--master-key0", MK0]
EESP_SA = ["--spi", "1000", "--root-key", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"]


def udp4(payload: bytes, sport: int = 1234, dport: int = 5678) -> bytes:
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 1, 0, 64, 17, 0, bytes([10, 0, 0, 1]),
                      bytes([10, 0, 0, 2]))
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:] + seg


def eth(ip: bytes) -> bytes:
    return ETH + b"\x08\x00" + ip


def pcap_bytes(frames, snaplen: int = 9014, nsec: bool = False, linktype: int = LINKTYPE_ETHERNET) -> bytes:
    out = [struct.pack("<IHHiIII", 0xA1B23C4D if nsec else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 123456789 if nsec else 123456, len(f), len(f)) + f)
    return b"".join(out)


# --- pcapng by hand (not with the writer under test) ---


def opt(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) % 4)


def block(btype: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    n = 12 + len(body)
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


SHB_OPTS = opt(1, b"a section comment") + opt(2, b"test hardware") + opt(3, b"Linux 6.1") + opt(4, b"dumpcap 4.4") \
    + opt(0, b"")
IDB_OPTS = opt(2, b"eth0") + opt(9, b"\x09") + opt(1, b"an interface comment") + opt(0, b"")


def shb() -> bytes:
    return block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + SHB_OPTS)


def idb(linktype: int = LINKTYPE_ETHERNET, snaplen: int = 9014, opts: bytes = IDB_OPTS) -> bytes:
    return block(1, struct.pack("<HHI", linktype, 0, snaplen) + opts)


def epb(frame: bytes, iface: int = 0, ts: int = 1_700_000_000_123_456_789, comment: bytes = b"") -> bytes:
    data = frame + bytes(-len(frame) % 4)
    opts = (opt(1, comment) + opt(0, b"")) if comment else b""
    return block(6, struct.pack("<IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, len(frame), len(frame)) + data + opts)


def blocks(data: bytes):
    """(type, raw block) of a little-endian pcapng."""
    out, off = [], 0
    while off < len(data):
        btype, n = struct.unpack_from("<II", data, off)
        out.append((btype, data[off:off + n]))
        off += n
    return out


def sample_pcapng(n: int = 3, snaplen: int = 9014) -> bytes:
    frames = [eth(udp4(bytes([i]) * (40 + i))) for i in range(n)]
    nrb = block(4, opt(0, b""))  # an empty Name Resolution Block
    custom = block(0x00000BAD, struct.pack("<I", 32473) + b"custom data!")
    isb = block(5, struct.pack("<III", 0, 0, 0))
    return shb() + idb(snaplen=snaplen) + nrb + b"".join(epb(f, comment=f"packet {i}".encode()) for i, f in enumerate(frames)) \
        + custom + isb


def cli(args, *, stdin: bytes = b"", check_rc=None, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", *map(str, args)], input=stdin, capture_output=True, timeout=300,
                       cwd=str(ROOT), **kw)
    if check_rc is not None:
        assert p.returncode == check_rc, (p.returncode, p.stderr.decode(errors="replace"))
    return p


def psp(cmd: str, *args, **kw):
    extra = ["--spi", "12345678"] if cmd == "encrypt" else []
    return cli(["pypsp", cmd, *args, "--master-key0", MK0, *extra], **kw)


def eesp(cmd: str, *args, **kw):
    return cli(["pyeesp", cmd, *args, *EESP_SA], **kw)


# ------------------------------------------------------------------ standard input and output


@pytest.mark.parametrize("tool", [psp, eesp], ids=["pypsp", "pyeesp"])
@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_stdin_to_stdout_round_trip(tool, fmt, tmp_path):
    """`- -` both ways: standard output carries the capture and nothing else; the summary goes to standard error.
    (Snap lengths that an encryption to a pipe keeps: 262144 and pcapng's 0; see the snap-length test.)"""
    clear = pcap_bytes([eth(udp4(b"x" * n)) for n in range(10, 60)], snaplen=262144) if fmt == "pcap" \
        else sample_pcapng(20, snaplen=0)
    enc = tool("encrypt", "-", "-", stdin=clear, check_rc=0)
    assert b"packets read:    " in enc.stderr and b"encrypted:" in enc.stderr
    assert enc.stdout[:4] == clear[:4] and enc.stdout != clear
    dec = tool("decrypt", "-", "-", stdin=enc.stdout, check_rc=0)
    assert dec.stdout == clear  # byte for byte: headers, options, blocks and every record
    assert b"decrypted:       " in dec.stderr
    # a path on one side, - on the other
    (tmp_path / "in").write_bytes(enc.stdout)
    assert tool("decrypt", tmp_path / "in", "-", check_rc=0).stdout == clear
    assert tool("decrypt", "-", tmp_path / "out", stdin=enc.stdout, check_rc=0).stdout.startswith(b"packets read:")
    assert (tmp_path / "out").read_bytes() == clear
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]  # no temporary file left


def test_stdin_and_stdout_as_real_pipes(tmp_path):
    """A shell pipeline: cat | encrypt - - | decrypt - - > file."""
    clear = tmp_path / "c.pcap"
    clear.write_bytes(pcap_bytes([eth(udp4(b"y" * n)) for n in range(1, 300)], snaplen=262144))
    sh = (f"cat {clear} | {sys.executable} -m pypsp encrypt - - --master-key0 {MK0} --spi 12345678 -q"
          f" | {sys.executable} -m pypsp decrypt - - --master-key0 {MK0} -q > {tmp_path / 'd.pcap'}")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", sh], capture_output=True, timeout=120, cwd=str(ROOT))
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert (tmp_path / "d.pcap").read_bytes() == clear.read_bytes()


def test_show_reads_stdin(tmp_path):
    enc = psp("encrypt", "-", "-", stdin=pcap_bytes([eth(udp4(b"z" * 30))] * 3), check_rc=0).stdout
    r = cli(["pypsp", "show", "-", "--master-key0", MK0, "--json"], stdin=enc, check_rc=0)
    assert [json.loads(line)["decrypt"] for line in r.stdout.splitlines()] == ["ok"] * 3
    r = cli(["pyeesp", "show", "-"], stdin=eesp("encrypt", "-", "-", stdin=pcap_bytes([eth(udp4(b"z"))]),
                                               check_rc=0).stdout, check_rc=0)
    assert b"EESP spi=0x00001000" in r.stdout


@pytest.mark.parametrize("where", ["input", "output"])
def test_dash_on_a_terminal_is_refused(where, tmp_path):
    """A capture is binary: `-` must be a pipe or a redirect, never a terminal (usage error, status 2)."""
    master, slave = pty.openpty()
    try:
        args = ["pypsp", "decrypt", "-" if where == "input" else tmp_path / "nope",
                "-" if where == "output" else tmp_path / "o", "--master-key0", MK0]
        kw = {"stdin": slave} if where == "input" else {"stdout": slave}
        p = subprocess.run([sys.executable, "-m", *map(str, args)], stderr=subprocess.PIPE, timeout=60,
                           cwd=str(ROOT), **kw)
    finally:
        os.close(slave)
        os.close(master)
    assert p.returncode == 2
    assert b"terminal" in p.stderr and b"pypsp: error:" in p.stderr


def test_a_reader_that_leaves_ends_the_run_quietly(tmp_path):
    enc = tmp_path / "e.pcap"
    clear = tmp_path / "c.pcap"
    clear.write_bytes(pcap_bytes([eth(udp4(b"q" * 1000))] * 20000))
    psp("encrypt", clear, enc, check_rc=0)
    sh = f"{sys.executable} -m pypsp decrypt {enc} - --master-key0 {MK0} | head -c 100 > /dev/null"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", sh], capture_output=True, timeout=120, cwd=str(ROOT))
    assert r.returncode == 141 and b"Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------ -F and header fields


@pytest.mark.parametrize("nsec", [False, True])
def test_format_pcap_to_pcapng_and_back(tmp_path, nsec):
    """-F pcapng then -F pcap gives the original pcap back byte for byte, its resolution (us/ns) and snap length."""
    clear = pcap_bytes([eth(udp4(b"r" * n)) for n in range(5, 40)], snaplen=9014, nsec=nsec)
    ng = psp("encrypt", "-", _write(tmp_path / "e.pcapng", b""), "-F", "pcapng", stdin=clear, check_rc=0).stdout
    ng = (tmp_path / "e.pcapng").read_bytes()
    assert ng[:4] == b"\x0a\x0d\x0d\x0a"
    kinds = blocks(ng)
    assert [k for k, _ in kinds[:2]] == [0x0A0D0D0A, 1] and all(k == 6 for k, _ in kinds[2:])
    snaplen = struct.unpack_from("<I", kinds[1][1], 12)[0]
    assert snaplen == 9014
    assert (b"\x09\x00\x01\x00\x09" in kinds[1][1]) == nsec  # if_tsresol 9 only for a nanosecond input
    psp("decrypt", "-", tmp_path / "back.pcap", "-F", "pcap", stdin=ng, check_rc=0)
    assert (tmp_path / "back.pcap").read_bytes() == clear
    # to a pipe the snap length is 262144: a later interface could need more, and a pipe cannot be patched
    back = psp("decrypt", "-", "-", "-F", "pcap", stdin=ng, check_rc=0).stdout
    assert back[:16] + back[20:] == clear[:16] + clear[20:] and struct.unpack_from("<I", back, 16)[0] == 262144
    # the same conversion on clear records (nothing to decrypt) keeps the timestamps
    a = list(read_capture(_write(tmp_path / "a.pcap", clear)))
    b = list(read_capture(_write(tmp_path / "b.pcapng", psp("decrypt", "-", "-", "-F", "pcapng", stdin=clear,
                                                             check_rc=0).stdout)))
    assert [(r.ts_sec, r.ts_nsec, r.data) for r in a] == [(r.ts_sec, r.ts_nsec, r.data) for r in b]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_format_pcapng_to_pcap_keeps_the_resolution_and_back(tmp_path):
    src = sample_pcapng(5)  # if_tsresol 9: nanoseconds
    eesp("decrypt", "-", tmp_path / "o.pcap", "-F", "pcap", stdin=src, check_rc=0)
    assert struct.unpack_from("<II", (tmp_path / "o.pcap").read_bytes(), 16) == (9014, LINKTYPE_ETHERNET)
    as_pcap = eesp("decrypt", "-", "-", "-F", "pcap", stdin=src, check_rc=0).stdout
    assert as_pcap[:4] == struct.pack("<I", 0xA1B23C4D)  # nanosecond pcap
    assert struct.unpack_from("<II", as_pcap, 16) == (262144, LINKTYPE_ETHERNET)  # a pipe: see the snap-length rule
    assert struct.unpack_from("<II", as_pcap, 24) == (1_700_000_000, 123_456_789)
    again = eesp("decrypt", "-", "-", "-F", "pcapng", stdin=as_pcap, check_rc=0).stdout
    assert [k for k, _ in blocks(again)] == [0x0A0D0D0A, 1] + [6] * 5


def test_pcapng_with_two_link_types_cannot_become_pcap(tmp_path):
    data = shb() + idb(LINKTYPE_ETHERNET) + idb(LINKTYPE_RAW) + epb(eth(udp4(b"a"))) + epb(udp4(b"b"), iface=1)
    r = psp("decrypt", "-", tmp_path / "o.pcap", "-F", "pcap", stdin=data)
    assert r.returncode == 2 and b"capture-cannot-convert" in r.stderr, r.stderr
    assert b"several link types" in r.stderr
    assert list(tmp_path.iterdir()) == []  # an error leaves no output
    assert psp("decrypt", "-", "-", stdin=data, check_rc=0).stdout == data  # kept as pcapng: fine
    # two interfaces of one link type become one pcap (editcap does the same)
    same = shb() + idb() + idb(opts=opt(2, b"eth1") + opt(9, b"\x09") + opt(0, b"")) + epb(eth(udp4(b"a"))) + epb(eth(udp4(b"b")), 1)
    out = psp("decrypt", "-", "-", "-F", "pcap", stdin=same, check_rc=0).stdout
    assert len(list(read_capture(_write(tmp_path / "s.pcap", out)))) == 2


@pytest.mark.parametrize("tool", [psp, eesp], ids=["pypsp", "pyeesp"])
def test_pcap_snaplen_9014_is_kept(tool, tmp_path):
    """A file output keeps the input's snap length when no transformed frame exceeds it; a decryption keeps it
    on a pipe too (it never lengthens packets)."""
    clear = pcap_bytes([eth(udp4(b"s" * 100))] * 3, snaplen=9014)
    tool("encrypt", "-", tmp_path / "e.pcap", stdin=clear, check_rc=0)
    enc = (tmp_path / "e.pcap").read_bytes()
    assert struct.unpack_from("<I", enc, 16)[0] == 9014
    assert tool("decrypt", "-", "-", stdin=enc, check_rc=0).stdout == clear
    tool("decrypt", tmp_path / "e.pcap", tmp_path / "d.pcap", check_rc=0)
    assert (tmp_path / "d.pcap").read_bytes() == clear


def test_snaplen_raised_only_when_a_transformed_packet_exceeds_it(tmp_path):
    """The rule (docs/captures.md): a file output's snap length becomes the longest transformed frame when one
    exceeds it; a pipe output cannot be patched, so an encryption to a pipe raises it up front (262144)."""
    clear = pcap_bytes([eth(udp4(b"l" * 1448)), eth(udp4(b"s" * 10))], snaplen=1500)  # a 1490-octet frame
    psp("encrypt", "-", tmp_path / "e.pcap", stdin=clear, check_rc=0)
    enc = (tmp_path / "e.pcap").read_bytes()
    longest = max(r.origlen for r in read_capture(tmp_path / "e.pcap"))
    assert longest > 1500 and struct.unpack_from("<I", enc, 16)[0] == longest
    piped = psp("encrypt", "-", "-", stdin=clear, check_rc=0).stdout
    assert struct.unpack_from("<I", piped, 16)[0] == 262144
    # decryption never lengthens: the snap length stays, to a pipe too
    assert struct.unpack_from("<I", psp("decrypt", "-", "-", stdin=enc, check_rc=0).stdout, 16)[0] == longest
    # pcapng: the IDB's SnapLen, same rule
    ng = shb() + idb(snaplen=1500) + epb(eth(udp4(b"l" * 1448)))
    psp("encrypt", "-", tmp_path / "e.pcapng", stdin=ng, check_rc=0)
    idb_out = blocks((tmp_path / "e.pcapng").read_bytes())[1][1]
    assert struct.unpack_from("<I", idb_out, 12)[0] > 1500 and idb_out[16:] == idb(snaplen=1500)[16:]


@pytest.mark.parametrize("tool", [psp, eesp], ids=["pypsp", "pyeesp"])
def test_pcapng_options_and_blocks_survive_encrypt_and_decrypt(tool, tmp_path):
    src = sample_pcapng(4)
    tool("encrypt", "-", tmp_path / "e.pcapng", stdin=src, check_rc=0)
    enc = (tmp_path / "e.pcapng").read_bytes()
    dec_path = tmp_path / "d.pcapng"
    tool("decrypt", "-", dec_path, stdin=enc, check_rc=0)
    got, want = blocks(dec_path.read_bytes()), blocks(src)
    assert [k for k, _ in got] == [k for k, _ in want]
    assert got == want  # SHB options (comment, hardware, OS, application), IDB options, EPB comments, NRB/custom/ISB
    enc_blocks = blocks(enc)
    assert enc_blocks[0] == want[0] and enc_blocks[1] == want[1]
    assert all(b"packet %d" % i in raw for i, (_, raw) in enumerate(enc_blocks[3:7]))


# ------------------------------------------------------------------ show --json: JSON Lines, streamed


def test_show_json_streams_its_first_line_at_once(tmp_path):
    """On a 200,000-packet capture the first line is there long before the run could end; then we stop it."""
    clear, enc = tmp_path / "c.pcap", tmp_path / "e.pcap"
    clear.write_bytes(pcap_bytes([eth(udp4(b"j" * 20))] * 200_000))
    pypsp.encrypt_capture(pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), None), spi=0x12345678), clear, enc)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "pypsp", "show", str(enc), "--master-key0", MK0, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(ROOT))
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no line within 60 s"
        first = proc.stdout.readline()  # type: ignore[union-attr]
        elapsed = time.monotonic() - t0
        assert proc.poll() is None, "the run had ended before its first line arrived"
        info = json.loads(first)
        assert info["frame"] == 1 and info["decrypt"] == "ok" and info["spi"] == "0x12345678"
        assert elapsed < 30
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ truncated input


@pytest.mark.parametrize("tool", [psp, eesp], ids=["pypsp", "pyeesp"])
def test_truncated_input_summary_output_and_status(tool, tmp_path):
    frames = [eth(udp4(b"t" * 50))] * 10
    enc = tool("encrypt", "-", "-", stdin=pcap_bytes(frames, snaplen=262144), check_rc=0).stdout
    cut = enc[:-7]  # the last record loses its end
    whole = 24 + 9 * ((len(enc) - 24) // 10)  # ten records of one length: where the tenth starts
    _write(tmp_path / "cut.pcap", cut)
    prog = "pypsp" if tool is psp else "pyeesp"
    r = tool("decrypt", tmp_path / "cut.pcap", tmp_path / "d.pcap")
    assert r.returncode == 3, r.stderr
    out, err = r.stdout.decode(), r.stderr.decode()
    assert out.startswith("packets read:    9\ndecrypted:       9\n")  # the summary a complete run prints
    assert err.strip().splitlines() == [
        f"{prog}: input truncated: {tmp_path / 'cut.pcap'}: capture file ends in the middle of a record "
        f"(at octet {whole:,}; the 9 packets before it were processed)"]
    assert (tmp_path / "d.pcap").read_bytes() == pcap_bytes(frames[:9], snaplen=262144)  # all whole records
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.pcap", "d.pcap"]
    # through pipes: the summary on standard error, the 9 records on standard output
    r = tool("decrypt", "-", "-", stdin=cut)
    assert r.returncode == 3 and r.stdout == pcap_bytes(frames[:9], snaplen=262144)
    assert b"packets read:    9" in r.stderr and b"input truncated: standard input" in r.stderr
    # show: what it read, then the line and status 3
    r = cli([prog, "show", tmp_path / "cut.pcap", "--json"])
    assert r.returncode == 3 and len(r.stdout.splitlines()) == 9
    assert f"at octet {whole:,}".encode() in r.stderr


def test_truncated_capture_error_in_the_library(tmp_path):
    enc = psp("encrypt", "-", "-", stdin=pcap_bytes([eth(udp4(b"u" * 50))] * 4), check_rc=0).stdout
    _write(tmp_path / "cut.pcap", enc[:-1])
    dec = pypsp.Decryptor(master_keys=(bytes.fromhex(MK0), None))
    with pytest.raises(pypsp.CaptureError) as e:
        pypsp.decrypt_capture(dec, tmp_path / "cut.pcap", tmp_path / "d.pcap")
    assert e.value.code == "capture-truncated" and e.value.summary.packets == 3 and e.value.output_kept
    assert e.value.offset == 24 + 3 * ((len(enc) - 24) // 4)
    assert len(list(read_capture(tmp_path / "d.pcap"))) == 3
    with pytest.raises(CaptureError) as e2:
        list(read_capture(tmp_path / "cut.pcap"))
    assert e2.value.offset == e.value.offset


def test_a_record_longer_than_the_limit_is_a_typed_error():
    huge = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + struct.pack("<IIII", 0, 0, 20 << 20, 20 << 20)
    r = psp("decrypt", "-", "-", stdin=huge + bytes(100))
    assert r.returncode == 2 and b"capture-record-too-large" in r.stderr, r.stderr


# ------------------------------------------------------------------ memory


def test_decrypt_through_pipes_stays_under_64_mib(tmp_path):
    """A 300 MB capture through `decrypt - -` on pipes: the decrypting process's peak RSS stays under 64 MiB
    (the old reader held the whole input), and the output is the clear capture byte for byte."""
    r = capture_memory.measure(300, tmp_path)
    assert r["returncode"] == 0, r["stderr"]
    assert r["matches_clear"] and r["input_bytes"] > 300_000_000
    if os.environ.get("PE_EXPECT_SANITIZED"):
        return  # ASan's shadow memory and quarantine are in the RSS: the bound is the plain build's to keep
    assert r["peak_rss_bytes"] < 64 << 20, f"peak RSS {r['peak_rss_bytes'] / (1 << 20):.1f} MiB"


def test_ctrl_c_with_standard_output_says_what_was_written(tmp_path):
    """Ctrl-C stops a run to standard output within a few thousand packets (status 130); what was written to
    standard output stays there, and the message says so instead of "no output was written"."""
    import signal
    import threading

    clear = _write(tmp_path / "c.pcap", pcap_bytes([eth(udp4(b"i" * 1000))] * 50_000))
    proc = subprocess.Popen([sys.executable, "-m", "pypsp", "encrypt", str(clear), "-", "--master-key0", MK0,
                             "--spi", "12345678"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT),
                            preexec_fn=default_sigint)
    got = [proc.stdout.read(65536)]  # type: ignore[union-attr]  # the run is under way
    proc.send_signal(signal.SIGINT)
    t = threading.Thread(target=lambda: got.append(proc.stdout.read()))  # type: ignore[union-attr]
    t.start()
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    proc.wait(timeout=60)
    t.join()
    assert proc.returncode == 130, err
    assert "pypsp: interrupted after" in err and "standard output has the records written before" in err, err
    assert "Traceback" not in err
    out = b"".join(got)
    assert out[:4] == struct.pack("<I", 0xA1B2C3D4) and len(out) < clear.stat().st_size


def test_a_cut_file_header_is_no_capture(tmp_path):
    """Cut inside the file header there is nothing whole to keep: an error (status 2) and no output; show says
    the same (docs/captures.md), from a file or standard input, in every CLI."""
    clear = pcap_bytes([eth(udp4(b"h"))])
    for cut in (clear[:10], sample_pcapng(1)[:40]):
        r = psp("decrypt", "-", tmp_path / "o.pcap", stdin=cut)
        assert r.returncode == 2 and b"capture-truncated" in r.stderr, r.stderr
        assert list(tmp_path.iterdir()) == []
        cut_file = _write(tmp_path / "cut.pcap", cut)
        for prog in ("pypsp", "pyeesp", "pyesp"):
            for where, stdin in ((cut_file, b""), ("-", cut)):
                r = cli([prog, "show", where], stdin=stdin)
                assert r.returncode == 2 and b"error:" in r.stderr and b"capture-truncated" in r.stderr, \
                    (prog, r.returncode, r.stderr)
                assert r.stdout == b""
        cut_file.unlink()


@pytest.mark.parametrize("prog", ["pypsp", "pyeesp"])
def test_diagnose_reads_a_capture_or_hex_from_stdin(prog, tmp_path):
    """diagnose -: a capture on standard input (by its magic), else the hex of one packet as before."""
    if prog == "pypsp":
        enc = psp("encrypt", "-", "-", stdin=pcap_bytes([eth(udp4(b"d" * 40))] * 2), check_rc=0).stdout
        keys = ["--master-key0", MK0]
    else:
        enc = eesp("encrypt", "-", "-", stdin=pcap_bytes([eth(udp4(b"d" * 40))] * 2), check_rc=0).stdout
        keys = EESP_SA
    from_file = cli([prog, "diagnose", _write(tmp_path / "e.pcap", enc), *keys, "--json"])
    from_stdin = cli([prog, "diagnose", "-", *keys, "--json"], stdin=enc)
    assert from_stdin.returncode == from_file.returncode == 0, from_stdin.stderr
    a, b = json.loads(from_file.stdout), json.loads(from_stdin.stdout)
    assert a["counts"] == b["counts"] and sum(a["counts"].values()) == 2
    first = list(read_capture(tmp_path / "e.pcap"))[0].ip_packet()
    one = cli([prog, "diagnose", "-", *keys, "--json"], stdin=first.hex().encode() + b"\n")
    assert one.returncode == 0 and sum(json.loads(one.stdout)["counts"].values()) == 1, one.stderr
