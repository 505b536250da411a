"""Independent readers at the capture boundary (issue 21, item 2).

A matrix of inputs, written by this file's own small writer (not the project's): pcap in microseconds and
nanoseconds, both byte orders, snap lengths below and above the records, an FCS declared in each of the three
ways, Simple Packet Blocks whole and cut, several IDBs with different link types, snap lengths and `if_tsresol`
(6, 9, 2^-20, 3), comments, several sections, unknown blocks. Each goes through `encrypt` and then `decrypt`,
for each `-F` (none, pcap, pcapng), to a file and to standard output (from standard input), with `pypsp` (all of
it) and `pyeesp` and `pyesp` (the files). Every output is read by libpcap, tshark and scapy, none of which shares
code with the core. They must agree with each other and with what the input says: the record count, the
captured and original lengths and the timestamps (to the precision the format holds); decryption must give back
every input packet's octets; and a frame that tshark reads as having an FCS has a correct one.

Where a reader cannot read a valid file, or misreads part of it, `known_limits` says which reader, what it
gets wrong and why, from the facts of the file itself; a reader that refuses is checked to refuse still (so a
limit that goes away is noticed), and the other readers carry the check.

Size and time (2 cores shared with other jobs): 11 inputs; 88 cases (pypsp: 11 x 3 -F x file/stdout; pyeesp,
pyesp: 11 x the input's format x file), each an encrypt and a decrypt and three readers on both outputs (and
once on each input): 176 CLI runs, 187 tshark runs, 117 s measured (`pytest tests/capture/test_capture_matrix.py`).
"""
from __future__ import annotations

import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import List, Optional

import pytest

import indep_readers as ir
from test_capture_edges import with_fcs
from test_capture_stream import ROOT, eth, udp4

pytestmark = pytest.mark.skipif(ir.TSHARK is None or ir.libpcap_version() is None,
                                reason="needs tshark and libpcap (scripts/install.sh)")

# ---- this test's own writer --------------------------------------------------------------------------------

LT_ETHERNET, LT_RAW = 1, 101


@dataclass
class Pkt:
    """What the input says of one packet."""
    linktype: int
    data: bytes  # the captured octets
    origlen: int
    ts: Optional[Fraction]  # seconds; None: an SPB has no timestamp
    fcs: bool  # the frame is declared to end in a 4-octet FCS


@dataclass
class Input:
    name: str
    data: bytes
    fmt: str
    pkts: List[Pkt] = field(default_factory=list)
    first_res_ns: int = 1  # the first interface's (pcap: the file's) resolution in nanoseconds, 1 if finer
    to_pcap_refused: bool = False  # pcap cannot hold it (several link types)
    fcs_by_flags: bool = False  # the FCS is declared by EPB flags only


def pcap_input(name: str, frames, *, be=False, nsec=False, snaplen=65535, linktype=LT_ETHERNET, fcs=False):
    bo = ">" if be else "<"
    lt = linktype | ((0x04000000 | 2 << 28) if fcs else 0)
    out = [struct.pack(bo + "IHHiIII", 0xA1B23C4D if nsec else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, lt)]
    inp = Input(name, b"", "pcap")
    per_s = 10 ** 9 if nsec else 10 ** 6
    for i, f in enumerate(frames):
        f = with_fcs(f) if fcs else f
        sec, frac = 1_700_000_000 + i, (123_456_789 + 7_654_321 * i) % per_s
        cap = f[:snaplen]
        out.append(struct.pack(bo + "IIII", sec, frac, len(cap), len(f)) + cap)
        inp.pkts.append(Pkt(linktype, cap, len(f), sec + Fraction(frac, per_s), fcs))
    inp.data = b"".join(out)
    inp.first_res_ns = 1 if nsec else 1000
    return inp


class Ng:
    """A pcapng being written: sections, IDBs, EPBs, SPBs, other blocks; and what it says of each packet."""

    def __init__(self, name: str) -> None:
        self.inp = Input(name, b"", "pcapng")
        self.parts: List[bytes] = []
        self.bo = "<"
        self.ifs: List[dict] = []
        self.seen_idb = False

    def opt(self, code: int, value: bytes) -> bytes:
        return struct.pack(self.bo + "HH", code, len(value)) + value + bytes(-len(value) % 4)

    def block(self, btype: int, body: bytes) -> None:
        body += bytes(-len(body) % 4)
        n = 12 + len(body)
        self.parts.append(struct.pack(self.bo + "II", btype, n) + body + struct.pack(self.bo + "I", n))

    def section(self, be: bool = False, comment: bytes = b"") -> "Ng":
        self.bo = ">" if be else "<"
        self.ifs = []
        opts = (self.opt(1, comment) + self.opt(4, b"matrix writer") + self.opt(0, b"")) if comment else b""
        self.block(0x0A0D0D0A, struct.pack(self.bo + "IHHq", 0x1A2B3C4D, 1, 0, -1) + opts)
        return self

    def idb(self, linktype=LT_ETHERNET, snaplen=65535, tsresol: Optional[int] = None, fcslen: int = 0,
            comment: bytes = b"") -> "Ng":
        opts = b""
        if tsresol is not None:
            opts += self.opt(9, bytes([tsresol]))
        if fcslen:
            opts += self.opt(13, bytes([fcslen]))
        if comment:
            opts += self.opt(1, comment)
        if opts:
            opts += self.opt(0, b"")
        self.block(1, struct.pack(self.bo + "HHI", linktype, 0, snaplen) + opts)
        res = 6 if tsresol is None else tsresol
        units = (1 << (res & 0x7F)) if res & 0x80 else 10 ** res
        self.ifs.append(dict(linktype=linktype, snaplen=snaplen, units=units, fcs=fcslen == 4))
        if not self.seen_idb:  # the file's first IDB
            self.seen_idb = True
            self.inp.first_res_ns = 10 ** 9 // units if 10 ** 9 % units == 0 else 1
        return self

    def epb(self, iface: int, frame: bytes, units: int, flags_fcs: bool = False, comment: bytes = b"") -> "Ng":
        i = self.ifs[iface]
        fcs = i["fcs"] or flags_fcs
        frame = with_fcs(frame) if fcs else frame
        cap = frame[:i["snaplen"]] if i["snaplen"] else frame
        opts = b""
        if flags_fcs:
            opts += self.opt(2, struct.pack(self.bo + "I", 4 << 5 | 1))  # inbound, FCS length 4
        if comment:
            opts += self.opt(1, comment)
        if opts:
            opts += self.opt(0, b"")
        self.block(6, struct.pack(self.bo + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(cap), len(frame))
                   + cap + bytes(-len(cap) % 4) + opts)
        self.inp.pkts.append(Pkt(i["linktype"], cap, len(frame), Fraction(units, i["units"]), fcs))
        return self

    def spb(self, frame: bytes) -> "Ng":
        i = self.ifs[0]
        frame = with_fcs(frame) if i["fcs"] else frame
        cap = frame[:i["snaplen"]] if i["snaplen"] else frame
        self.block(3, struct.pack(self.bo + "I", len(frame)) + cap)
        self.inp.pkts.append(Pkt(i["linktype"], cap, len(frame), None, i["fcs"]))
        return self

    def other(self, btype: int, body: bytes) -> "Ng":
        self.block(btype, body)
        return self

    def done(self, **kw) -> Input:
        self.inp.data = b"".join(self.parts)
        for k, v in kw.items():
            setattr(self.inp, k, v)
        return self.inp


def frames(n: int, seed: int, big: int = 0):
    """Ethernet frames of UDP over IPv4, one not IP (ARP), sizes spread; `big` adds frames of about that size."""
    out = [eth(udp4(bytes([(seed + i) & 0xFF]) * (3 + (seed * 37 + i * 53) % 400))) for i in range(n)]
    out.insert(n // 2, bytes.fromhex("ffffffffffff0200000000010806") + bytes(28))  # ARP: not IP, passed through
    if big:
        out.append(eth(udp4(b"B" * (big - 42))))
    return out


def t_units(i: int, units: int) -> int:
    return 1_700_000_000 * units + (i * 7_654_321 * units) // 10 ** 7 + i


def inputs() -> List[Input]:
    out = [
        pcap_input("pcap-us-le", frames(6, 1)),
        pcap_input("pcap-ns-be", frames(6, 2), be=True, nsec=True),
        pcap_input("pcap-us-be-snap-below", frames(5, 3, big=1400), be=True, snaplen=200),
        pcap_input("pcap-ns-le-snap-above", frames(5, 4, big=1400), nsec=True, snaplen=1500),
        pcap_input("pcap-fcs-bits", frames(5, 5), fcs=True),
    ]
    ng = Ng("pcapng-fcslen-comments-unknown").section(comment=b"section one").idb(fcslen=4, comment=b"eth0")
    ng.other(4, ng.opt(0, b""))  # an empty Name Resolution Block
    for i, f in enumerate(frames(5, 6)):
        ng.epb(0, f, t_units(i, 10 ** 6), comment=b"packet %d" % i)
    ng.other(0x00000BAD, struct.pack("<I", 32473) + b"custom block")  # custom, copyable
    ng.other(0x0000F00D, b"a block type no one knows")  # unknown: kept where it stood
    out.append(ng.done())
    ng = Ng("pcapng-be-epb-flags-fcs").section(be=True).idb(tsresol=9)
    for i, f in enumerate(frames(5, 7)):
        ng.epb(0, f, t_units(i, 10 ** 9), flags_fcs=True)
    out.append(ng.done(fcs_by_flags=True))
    ng = Ng("pcapng-spb-whole-and-cut").section().idb(snaplen=97)
    for f in frames(4, 8) + [eth(udp4(b"c" * 200))]:
        ng.spb(f)
    out.append(ng.done())
    # several IDBs: link types, snap lengths and resolutions 6, 9, 2^-20, 3
    ng = Ng("pcapng-idbs-linktypes").section().idb(snaplen=65535).idb(LT_RAW, 2000, tsresol=9) \
        .idb(snaplen=0, tsresol=0x80 | 20).idb(snaplen=1500, tsresol=3)
    units = [10 ** 6, 10 ** 9, 1 << 20, 10 ** 3]
    for i, f in enumerate(frames(7, 9)):
        k = i % 4
        ng.epb(k, f[14:] if k == 1 else f, t_units(i, units[k]))
    out.append(ng.done(to_pcap_refused=True))
    # the first IDB decides the pcap's resolution (2^-20: nanoseconds) and must not decide its snap length
    ng = Ng("pcapng-idbs-one-linktype").section().idb(snaplen=128, tsresol=0x80 | 20).idb(snaplen=9000) \
        .idb(snaplen=0, tsresol=9).idb(snaplen=1500, tsresol=3)
    units = [1 << 20, 10 ** 6, 10 ** 9, 10 ** 3]
    for i, f in enumerate(frames(7, 10, big=1200)):
        ng.epb(i % 4, f, t_units(i, units[i % 4]))
    not_ip = bytes.fromhex("020000000002020000000001" "88b5") + b"n" * 1000  # passed through as it is
    ng.epb(1, not_ip, t_units(20, units[1]))
    out.append(ng.done())
    ng = Ng("pcapng-two-sections").section(comment=b"first").idb()
    for i, f in enumerate(frames(3, 11)):
        ng.epb(0, f, t_units(i, 10 ** 6))
    ng.section(be=True, comment=b"second, big-endian").idb(tsresol=9)
    for i, f in enumerate(frames(3, 12)):
        ng.epb(0, f, t_units(10 + i, 10 ** 9))
    out.append(ng.done())
    return out


INPUTS = {i.name: i for i in inputs()}

# ---- what the readers cannot do -----------------------------------------------------------------------------


def pcapng_facts(raw: bytes) -> dict:
    """Of a pcapng: each section's byte order, every IDB's (link type, snap length), whether it has SPBs."""
    facts = dict(orders=[], idbs=[], spb=False)
    off, bo = 0, "<"
    while off + 12 <= len(raw):
        if raw[off:off + 4] == b"\x0a\x0d\x0d\x0a":
            bo = "<" if raw[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            facts["orders"].append(bo)
        btype, n = struct.unpack_from(bo + "II", raw, off)
        if btype == 1:
            facts["idbs"].append(struct.unpack_from(bo + "HHI", raw, off + 8)[::2])
        facts["spb"] |= btype == 3
        off += n
    return facts


def known_limits(raw: bytes) -> dict:
    """reader -> (what it cannot do with this valid file, why). "refuses": it cannot read it (checked: it still
    cannot); "times" or "lengths": it reads it and gets those wrong (compared on everything else)."""
    if raw[:4] != b"\x0a\x0d\x0d\x0a":
        return {}
    f = pcapng_facts(raw)
    out = {}
    if len(set(f["idbs"])) > 1:
        out["libpcap"] = ("refuses", "libpcap (1.10) gives one link type and one snap length per file: it refuses "
                                     "an IDB whose link type or snap length differs from the first's")
    elif len(set(f["orders"])) > 1:
        out["libpcap"] = ("refuses", "libpcap (1.10) reads a later section in the first one's byte order "
                                     "(\"pcapng block size 1275068416 > maximum\")")
    if len(f["orders"]) > 1:
        out["scapy"] = ("times", "scapy (2.8) keeps the first section's interfaces at a new SHB, so a later "
                                 "section's packets get the first one's if_tsresol")
    elif f["spb"] and f["idbs"] and f["idbs"][0][1] == 0:
        out["scapy"] = ("lengths", "scapy (2.8) takes an SPB's captured length as min(original length, SnapLen) "
                                   "with SnapLen 0 (no limit) as 0")
    return out


# ---- running the CLIs --------------------------------------------------------------------------------------

KEYS = {
    "pypsp": ("psp-master key0=34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
              " key1=563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739\n", "9a345678"),
    "pyeesp": ("eesp-sa spi=0x00001000 suite=aes-gcm-16 key-bits=128 sskdf=hkdf-sha256"
               " root-key=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f mode=tunnel\n", "1000"),
    "pyesp": ("esp-sa spi=0x1000 suite=aes-gcm-16 key=" + "ab" * 20 + " mode=transport\n", "1000"),
}


def run_cli(prog: str, cmd: str, src: Path, dst: Path, out_fmt: Optional[str], to_stdout: bool, keys: Path):
    args = [sys.executable, "-m", prog, cmd, "-" if to_stdout else src, "-" if to_stdout else dst, "-k", keys, "-q"]
    if cmd == "encrypt":
        args += ["--spi", KEYS[prog][1]]
    if out_fmt:
        args += ["-F", out_fmt]
    p = subprocess.run([str(a) for a in args], input=src.read_bytes() if to_stdout else None, capture_output=True,
                       cwd=str(ROOT), timeout=120)
    if to_stdout and p.returncode in (0, 1):
        dst.write_bytes(p.stdout)
    return p


# ---- the checks --------------------------------------------------------------------------------------------

READERS = {"libpcap": ir.libpcap, "tshark": ir.tshark, "scapy": ir.scapy}


def read_all(path: Path, inp: Input):
    got = {}
    limits = known_limits(path.read_bytes())
    for name, reader in READERS.items():
        if limits.get(name, ("",))[0] == "refuses":
            with pytest.raises(ir.Unreadable):  # still a limit of that reader; if not, known_limits is wrong
                reader(path)
            continue
        try:
            got[name] = reader(path)
        except ir.Unreadable as e:
            pytest.fail(f"{name} cannot read {path.name} ({inp.name}): {e}")
    return got


def output_fmt(inp: Input, out_fmt: Optional[str]) -> str:
    return out_fmt or inp.fmt


def want_ns(p: Pkt, out: str, out_us: bool) -> int:
    """The timestamp the output can hold: exact, or rounded down to its microseconds or nanoseconds."""
    if p.ts is None:
        return 0
    ns = p.ts * 10 ** 9
    q = 1000 if out_us else 1
    return int(ns // q) * q


def check_lengths_and_times(got, inp: Input, out: str, out_path: Path, *, same_lengths: bool):
    limits = known_limits(out_path.read_bytes())
    times_wrong = {n for n, (kind, _) in limits.items() if kind == "times"}
    lengths_wrong = {n for n, (kind, _) in limits.items() if kind == "lengths"}
    raw = out_path.read_bytes()
    # a pcap is microsecond only where that holds the times exactly (the input's, or the first IDB's)
    out_us = out == "pcap" and inp.first_res_ns % 1000 == 0
    if out == "pcap":
        assert (raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4")) == out_us
    strip = out == "pcap" and inp.fcs_by_flags  # EPB flags have no place in pcap: the FCS goes with them
    for name, recs in got.items():
        assert len(recs) == len(inp.pkts), (name, len(recs), len(inp.pkts))
        for i, (r, p) in enumerate(zip(recs, inp.pkts)):
            ts = 0 if r.ts_ns is None else r.ts_ns  # an SPB: tshark and scapy say none, libpcap and pcap 0
            assert name in times_wrong or ts == want_ns(p, out, out_us), (name, i, ts, want_ns(p, out, out_us))
            if same_lengths and name not in lengths_wrong:
                cut = 4 if strip and p.fcs else 0
                assert (r.caplen, r.origlen) == (len(p.data) - cut, p.origlen - cut), (name, i)
    # the three agree on every record's lengths
    lengths = {name: [(r.caplen, r.origlen) for r in recs] for name, recs in got.items() if name not in lengths_wrong}
    assert len(set(map(tuple, lengths.values()))) == 1, lengths
    if "tshark" in got:
        assert all(r.fcs_good is not False for r in got["tshark"]), [r.fcs_good for r in got["tshark"]]
        for r, p in zip(got["tshark"], inp.pkts):
            if p.fcs and len(p.data) == p.origlen and not strip:
                assert r.fcs_good is True  # declared and right


def check_octets(got, inp: Input, out: str, out_path: Path):
    strip = out == "pcap" and inp.fcs_by_flags
    limits = known_limits(out_path.read_bytes())
    checked = 0
    for name in ("libpcap", "scapy"):
        if name in got and limits.get(name, ("times",))[0] == "times":
            checked += 1
            want = [p.data[:-4] if strip and p.fcs else p.data for p in inp.pkts]
            assert [r.data for r in got[name]] == want, name
    assert checked, "no reader that hands out the octets could read the file"


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_inputs_read_as_the_writer_says(name, tmp_path):
    """Every input is what this file's writer says it is, to every reader that can read it."""
    inp = INPUTS[name]
    src = tmp_path / f"in.{inp.fmt}"
    src.write_bytes(inp.data)
    got = read_all(src, inp)
    check_lengths_and_times(got, inp, inp.fmt, src, same_lengths=True)
    check_octets(got, inp, inp.fmt, src)


CASES = [(prog, inp, fmt, std) for inp in INPUTS for fmt in (None, "pcap", "pcapng") for std in (False, True)
         for prog in ("pypsp", "pyeesp", "pyesp") if prog == "pypsp" or (not std and fmt is None)]
TIMES: dict = {}


@pytest.mark.parametrize("prog,name,out_fmt,to_stdout", CASES,
                         ids=[f"{p}-{n}-{f or 'same'}-{'stdout' if s else 'file'}" for p, n, f, s in CASES])
def test_matrix(prog, name, out_fmt, to_stdout, tmp_path):
    t0 = time.monotonic()
    inp = INPUTS[name]
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS[prog][0])
    src = tmp_path / f"in.{inp.fmt}"
    src.write_bytes(inp.data)
    out = output_fmt(inp, out_fmt)
    enc, dec = tmp_path / f"enc.{out}", tmp_path / f"dec.{out}"
    p = run_cli(prog, "encrypt", src, enc, out_fmt, to_stdout, keys)
    if out == "pcap" and inp.to_pcap_refused and inp.fmt == "pcapng":
        assert p.returncode == 2 and b"capture-cannot-convert" in p.stderr, p.stderr
        return
    cut = any(len(q.data) < q.origlen for q in inp.pkts)
    assert p.returncode == (1 if cut else 0), p.stderr  # 1: the cut packets are kept, not encrypted
    got = read_all(enc, inp)
    check_lengths_and_times(got, inp, out, enc, same_lengths=False)
    some = next(iter(got.values()))
    assert any(r.caplen != len(q.data) for r, q in zip(some, inp.pkts))  # it did encrypt
    # decrypt the encrypted output (now of format `out`) into the same format
    p = run_cli(prog, "decrypt", enc, dec, None, to_stdout, keys)
    assert p.returncode == (1 if cut else 0), p.stderr
    got = read_all(dec, inp)
    check_lengths_and_times(got, inp, out, dec, same_lengths=True)
    check_octets(got, inp, out, dec)
    TIMES[(prog, name, out_fmt, to_stdout)] = time.monotonic() - t0
