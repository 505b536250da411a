"""The Wireshark plugin (dissectors/plugin: psp_eesp.so) driven through tshark.

Captures are made by pypsp and pyeesp; what tshark says about every packet (``-T fields``, ``-T json``)
is compared with what the Python libraries say it holds: header fields from ``pypsp.Header`` /
``pyeesp.Receiver``, the decrypted inner packet (addresses, ports and payload of the inner layers,
dissected by Wireshark from the plugin's decrypted data source) against the cleartext packet.

- registration (``-G fields``, ``-G plugins``: the module of build/plugin, not the installed one);
- PSP: versions 0-3 x transport/tunnel x inner IPv4/IPv6, VC, crypt offsets, S/D bits, both master keys,
  derived keys; keys from the key file, from the ``psp_keys`` UAT file, and from ``-o uat:psp_keys:...``;
  failures (wrong key, no key, GMAC without key, truncated, unknown version, snap-length cut);
- EESP: a suite of each family (GCM, CCM, ChaCha20, GMAC, implicit IV), full/optimized, tunnel/transport, Crypt Offset option, extra options,
  no Sequence Number, the Linux XFRM AAD, Sub SAs from a root key, SAs bound to a destination, UDP
  encapsulation; keys from the key file and the ``eesp_sa`` UAT file; failures; per-Sub SA sequence analysis;
- UDP 4500 shared by EESP, ESP, IKE and keepalives; the port / IP protocol / dispatch preferences;
- the google/psp reference captures (../shared/reference/psp) with the reference master keys;
- robustness: every capture fuzzed with ``editcap -E`` and cut with ``editcap -s`` through the plain and the
  ASan/UBSan build of the plugin.

tshark runs through tests/wireshark.py (as ``nobody`` when root, WIRESHARK_PLUGIN_DIR=build/plugin...):
every file it reads lives in a world-readable directory.  The module builds the plugin (cmake) when
needed and skips only when tshark is not installed.
"""
from __future__ import annotations

import csv
import fcntl
import ipaddress
import json
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

import pytest

import pyeesp
import pypsp
import wireshark as ws
from conftest import SHARED_DIR
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, CaptureWriter, read_capture
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE
from pecore.keys import load_psp_ref_config
from pecore.protocol import checksum

REFERENCE = SHARED_DIR / "reference" / "psp"
PLUGIN_SRC = ws.ROOT / "dissectors" / "plugin"
BUILD_DIRS = {"plain": ws.BUILD / "plugin", "asan": ws.BUILD / "plugin-asan"}

# The public master keys of the PSP specification vectors and the reference tools (docs/keys.md).
MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
PSP_PORT = 1000

# Messages on stderr that mean the plugin (or a dissector it called) misbehaved.
CRASH_MARKERS = ("Dissector bug", "Lua Error", "AddressSanitizer", "runtime error", "Segmentation fault",
                 "Aborted", "malformed packet in", "assertion failed", "CRITICAL", "WARNING **")


def status_expert(proto: str, status: str) -> str:
    """The expert item a status gets: one per category of the core (core/include/pe/status.h)."""
    return f"{proto}.expert.{CATEGORY_BY_CODE[status].replace('-', '_')}"


# Group and severity of each category's item (epan/proto.h PI_* values, as -T json gives them); the Lua
# dissectors register the same.
PI_CHECKSUM, PI_SEQUENCE, PI_UNDECODED, PI_MALFORMED = 0x01000000, 0x02000000, 0x05000000, 0x07000000
PI_PROTOCOL, PI_SECURITY, PI_DECRYPTION = 0x09000000, 0x0A000000, 0x0C000000
PI_NOTE, PI_WARN, PI_ERROR = 0x00400000, 0x00600000, 0x00800000
CATEGORY_LOOK = {
    "malformed": (PI_MALFORMED, PI_ERROR), "authentication": (PI_CHECKSUM, PI_ERROR),
    "replay": (PI_SEQUENCE, PI_WARN), "policy": (PI_SECURITY, PI_NOTE), "no-key": (PI_DECRYPTION, PI_NOTE),
    "not-this-protocol": (PI_PROTOCOL, PI_NOTE), "cut-by-capture": (PI_UNDECODED, PI_NOTE),
    "configuration": (PI_DECRYPTION, PI_WARN), "io": (PI_DECRYPTION, PI_WARN), "limit": (PI_UNDECODED, PI_WARN),
    "internal": (PI_UNDECODED, PI_ERROR),
}
# Our own expert infos, by field name: a packet that decrypted must carry none of them.
CATEGORY_EXPERTS = {p: tuple(f"{p}.expert.{c.replace('-', '_')}" for c in CATEGORIES if c != "ok")
                    for p in ("psp", "eesp")}
PSP_EXPERTS = CATEGORY_EXPERTS["psp"] + ("psp.expert.gmac_unverified", "psp.expert.udp_zero_checksum")
EESP_EXPERTS = CATEGORY_EXPERTS["eesp"] + ("eesp.expert.seq_wrong", "eesp.expert.udp_zero_checksum",
                                           "eesp.expert.udp_bad_checksum")
# Other dissectors' opinions we do not want to depend on.
QUIET = ("-o", "tcp.analyze_sequence_numbers:FALSE", "-o", "tcp.check_checksum:FALSE",
         "-o", "udp.check_checksum:FALSE", "-o", "udp.ignore_ipv6_zero_checksum:TRUE")


# --------------------------------------------------------------------------- building and running tshark


def _locked_build(flavour: str) -> None:
    """Configure (once) and build one flavour of the plugin; incremental, so cheap when up to date."""
    bdir = BUILD_DIRS[flavour]
    bdir.mkdir(parents=True, exist_ok=True)
    args = ["-DCMAKE_BUILD_TYPE=RelWithDebInfo"] + (["-DPE_SANITIZE=ON"] if flavour == "asan" else [])
    with open(ws.BUILD / f".{bdir.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # other test sessions may build the same tree
        cache = bdir / "CMakeCache.txt"
        needs_configure = not cache.exists() or (
            flavour == "asan" and "PE_SANITIZE:BOOL=ON" not in cache.read_text(errors="replace"))
        steps = ([["cmake", "-S", str(PLUGIN_SRC), "-B", str(bdir), *args]] if needs_configure else []) + [
            ["cmake", "--build", str(bdir), "-j2"]]
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.fail(f"building the {flavour} plugin failed: {' '.join(cmd)}\n{proc.stdout[-3000:]}\n"
                            f"{proc.stderr[-3000:]}")
    if not ws.plugin_path(flavour).exists():
        pytest.fail(f"the build did not produce {ws.plugin_path(flavour)}")


@pytest.fixture(scope="module", autouse=True)
def plugin_built():
    """tshark installed (else skip), the plugin of this tree built."""
    if not Path(ws.TSHARK).exists():
        pytest.skip(ws.available() or "tshark is not installed")
    _locked_build("plain")
    why = ws.available()
    if why:
        pytest.fail(why)


@pytest.fixture(scope="module")
def asan_env():
    """Build the ASan/UBSan flavour; the environment tshark needs to load it."""
    _locked_build("asan")
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        p = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        if not p or not Path(p).exists():
            pytest.fail(f"gcc has no {name}: the sanitizer runtime is needed for the ASan plugin")
        libs.append(os.path.realpath(p))
    return {"LD_PRELOAD": ":".join(libs), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
            "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


@pytest.fixture(scope="module")
def work():
    """A world-readable directory for captures, key files and profiles (tshark runs as nobody)."""
    d = ws.shared_dir("pe-wsplugin-")
    yield d
    if os.environ.get("PE_KEEP_TSHARK_FILES"):  # for debugging: keep the captures and key files
        print(f"\ntshark test files kept in {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def empty_profile(work):
    return _profile(work, "empty", {})


def _readable(p: Path) -> Path:
    p.chmod(0o644)
    return p


def _profile(work: Path, name: str, files: Dict[str, str]) -> Path:
    d = work / f"profile-{name}"
    d.mkdir()
    d.chmod(0o777)
    for fname, text in files.items():
        write_text(d / fname, text)
    return d


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return _readable(path)


def _check_stderr(proc: subprocess.CompletedProcess, allow_stderr: bool) -> None:
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr, proc.stderr[-4000:]
    if not allow_stderr:
        assert proc.stderr.strip() == "", f"tshark complained:\n{proc.stderr[-4000:]}"


def tshark(args: Sequence[str], *, profile: Path, plugin: str = "plain", env=None, allow_stderr=False):
    proc = ws.run(list(args), profile=profile, plugin=plugin, env=env)
    _check_stderr(proc, allow_stderr)
    return proc


def fields(cap: Path, names: Sequence[str], *, profile: Path, opts: Sequence[str] = (), extra: Sequence[str] = (),
           **kw) -> List[Dict[str, List[str]]]:
    """``-T fields``: per packet, field name -> its occurrences (empty list when absent)."""
    args = ["-n", "-r", str(cap), *QUIET, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|"]
    for n in names:
        args += ["-e", n]
    for o in opts:
        args += ["-o", o]
    proc = tshark([*args, *extra], profile=profile, **kw)
    lines = [line.split("\t") for line in proc.stdout.splitlines()]
    for cols in lines:
        assert len(cols) == len(names), cols
    # Booleans as 1/0 on every Wireshark (4.4+ prints True/False).
    lines = ws.normalise_field_rows(lines, names, "|", plugin=kw.get("plugin", "plain"))
    return [{n: (c.split("|") if c else []) for n, c in zip(names, cols)} for cols in lines]


def packets_json(cap: Path, *, profile: Path, opts: Sequence[str] = (), **kw) -> list:
    args = ["-n", "-r", str(cap), *QUIET, "-T", "json", "--no-duplicate-keys"]
    for o in opts:
        args += ["-o", o]
    pkts = json.loads(tshark(args, profile=profile, **kw).stdout or "[]")
    if ws.prints_true_false():
        ws.normalise_json(pkts, ws.boolean_fields(kw.get("plugin", "plain")))
    return pkts


def experts(pkt: dict) -> List[str]:
    """The expert infos of one ``-T json`` packet, by field name (psp.expert.authentication, ...)."""
    found: List[str] = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "_ws.expert":
                    for e in v if isinstance(v, list) else [v]:
                        found.extend(n for n in e if not n.startswith("_ws.expert"))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(pkt["_source"]["layers"])
    return found


def expert_items(pkt: dict) -> List[tuple]:
    """(field name, message, group, severity) of every expert info of one ``-T json`` packet."""
    found: List[tuple] = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "_ws.expert":
                    for e in v if isinstance(v, list) else [v]:
                        for n in e:
                            if not n.startswith("_ws.expert"):
                                found.append((n, e.get("_ws.expert.message", ""), int(e["_ws.expert.group"]),
                                              int(e["_ws.expert.severity"])))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(pkt["_source"]["layers"])
    return found


def layer(pkt: dict, name: str) -> dict:
    v = pkt["_source"]["layers"].get(name)
    return v[0] if isinstance(v, list) else (v or {})


# --------------------------------------------------------------------------- packets


def _csum(data: bytes) -> int:
    return checksum(data)


def _addr(a: str) -> bytes:
    return ipaddress.ip_address(a).packed


def l4(proto: int, src: str, dst: str, sport: int, dport: int, data: bytes, seq: int = 1) -> bytes:
    """A UDP or TCP segment with a correct checksum."""
    if proto == 17:
        seg = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
        at = 6
    else:
        seg = struct.pack("!HHIIBBHHH", sport, dport, seq, 1, 0x50, 0x18, 8192, 0, 0) + data
        at = 16
    s, d = _addr(src), _addr(dst)
    c = _csum(s + d + struct.pack("!BBH", 0, proto, len(seg)) + seg if len(s) == 4
              else s + d + struct.pack("!IxxxB", len(seg), proto) + seg)
    if proto == 17 and c == 0:
        c = 0xFFFF
    return seg[:at] + struct.pack("!H", c) + seg[at + 2:]


def ip_pkt(src: str, dst: str, proto: int, payload: bytes, ident: int = 0) -> bytes:
    s, d = _addr(src), _addr(dst)
    if len(s) == 4:
        h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident & 0xFFFF, 0x4000, 64, proto, 0,
                                  s, d))
        h[10:12] = struct.pack("!H", _csum(bytes(h)))
        return bytes(h) + payload
    return struct.pack("!IHBB", 0x60000000 | (ident & 0xFFFFF), len(payload), proto, 64) + s + d + payload


V4 = ("10.1.0.1", "10.1.0.2", "10.1.0.3", "192.0.2.7")
V6 = ("2001:db8:1::1", "2001:db8:1::2", "2001:db8:1::3", "2001:db8:ffff::7")


def flow_packet(i: int, family: int, proto: int) -> bytes:
    """The i-th cleartext packet: ports, sizes and contents all depend on i."""
    src, dst = (V4[0], V4[1 + i % 2]) if family == 4 else (V6[0], V6[1 + i % 2])
    data = bytes((i * 7 + k) & 0xFF for k in range(16 + (i * 37) % 200))
    # ports without a Wireshark dissector (49999-54328 has none), so that the payload stays data
    sport, dport = 52000 + i, (50000 if proto == 17 else 51000) + i
    return ip_pkt(src, dst, proto, l4(proto, src, dst, sport, dport, data, seq=1000 * i + 1), ident=i)


@dataclass
class Parsed:
    family: int
    dst: str
    proto: int
    payload: bytes


def parse_ip(pkt: bytes) -> Parsed:
    if pkt[0] >> 4 == 4:
        ihl = (pkt[0] & 15) * 4
        return Parsed(4, str(ipaddress.IPv4Address(pkt[16:20])), pkt[9], pkt[ihl:struct.unpack("!H", pkt[2:4])[0]])
    return Parsed(6, str(ipaddress.IPv6Address(pkt[24:40])), pkt[6], pkt[40:])


def l4_fields(proto: int, seg: bytes) -> Dict[str, List[str]]:
    """What tshark reports for a UDP/TCP segment: destination port and payload."""
    if proto == 17:
        return {"udp.dstport": [str(struct.unpack("!H", seg[2:4])[0])], "udp.payload": [seg[8:].hex()] if seg[8:] else []}
    if proto == 6:
        off = (seg[12] >> 4) * 4
        return {"tcp.dstport": [str(struct.unpack("!H", seg[2:4])[0])], "tcp.payload": [seg[off:].hex()] if seg[off:] else []}
    return {}


LAYER_FIELDS = ("ip.dst", "ipv6.dst", "udp.dstport", "udp.payload", "tcp.dstport", "tcp.payload")


def expected_layers(outer: bytes, outer_l4: Optional[int], inner: bytes, inner_is_ip: bool, inner_proto: int) -> Dict[str, List[str]]:
    """The LAYER_FIELDS occurrences of a packet: the outer IP (and its UDP, for PSP and EESP-in-UDP), then the
    decrypted part: an inner IP packet (tunnel) or the upper-layer segment (transport)."""
    out: Dict[str, List[str]] = {f: [] for f in LAYER_FIELDS}

    def add(d):
        for k, v in d.items():
            out[k] += v

    o = parse_ip(outer)
    add({"ip.dst" if o.family == 4 else "ipv6.dst": [o.dst]})
    if outer_l4 == 17:
        add(l4_fields(17, o.payload))
    if inner_is_ip:
        p = parse_ip(inner)
        add({"ip.dst" if p.family == 4 else "ipv6.dst": [p.dst]})
        add(l4_fields(p.proto, p.payload))
    else:
        add(l4_fields(inner_proto, inner))
    return out


MAC = bytes.fromhex("020000000002") + bytes.fromhex("020000000001")


def write_capture(path: Path, packets: Iterable[bytes], fmt: str = "pcap", linktype: int = LINKTYPE_ETHERNET) -> Path:
    with CaptureWriter(path, linktype=linktype, fmt=fmt) as w:
        for i, p in enumerate(packets):
            frame = p if linktype == LINKTYPE_RAW else MAC + (b"\x08\x00" if p[0] >> 4 == 4 else b"\x86\xdd") + p
            w.write(frame, (1_700_000_000 + i, 1000 * i))
    return _readable(path)


def editcap(*args: str) -> None:
    subprocess.run(["editcap", *args], check=True, capture_output=True)
    _readable(Path(args[-1]))


def psp_of(outer: bytes) -> bytes:
    """The UDP payload of an outer PSP packet."""
    return parse_ip(outer).payload[8:]


# --------------------------------------------------------------------------- PSP captures


PSP_DERIVED = {  # SPI -> (version or None, derived key): keys no master key derives, so only the derived key works
    0x00000777: (1, bytes(range(0x40, 0x60))),
    0x80000778: (None, bytes(range(0x60, 0x70))),  # unversioned 16 octets: versions 0 and 2
}


@dataclass
class PspCase:
    label: str
    outer: bytes
    clear: bytes
    mode: str
    header: pypsp.Header
    extra: dict = field(default_factory=dict)
    vc: Optional[bytes] = None  # the VC as decrypted (a crypt offset below 2 words encrypts it)


def _psp_sas():
    """(label, Encryptor kwargs, inner family) for every version x mode x inner family, with variations."""
    out = []
    i = 0
    for version in range(4):
        for mode in ("transport", "tunnel"):
            for family in (4, 6):
                gmac = version >= 2
                kw = dict(spi=((i % 2) << 31) | 0x00100000 | (version << 8) | i, version=version, mode=mode,
                          master_keys=(MK0, MK1))
                if not gmac:
                    kw["crypt_offset"] = (0, 1, 3, 13)[i % 4] if mode == "tunnel" else (0, 1, 2, 3)[i % 4]
                if i % 3 == 0:
                    kw["vc"] = (0xDEADBEEF00000000 | i).to_bytes(8, "big")
                if i % 5 == 1:
                    kw["sample"] = True
                if i % 5 == 2:
                    kw["sample"] = kw["drop"] = True
                if i % 7 == 3:
                    kw["drop"] = True
                if i % 4 == 2:
                    kw["first_iv"] = 2**40 + i
                if mode == "tunnel" and i % 8 in (6, 7):  # versions 1 and 3: the other family outside
                    kw["tunnel_header"] = (ip_pkt(V4[0], V4[3], 0, b"") if family == 6 else ip_pkt(V6[0], V6[3], 0, b""))
                out.append((f"v{version}-{mode}-ip{family}-{i}", kw, family))
                i += 1
    out.append(("derived-v1", dict(spi=0x00000777, version=1, mode="tunnel", key=PSP_DERIVED[0x777][1],
                                   vc=bytes(8)), 4))
    out.append(("derived-v2-unversioned", dict(spi=0x80000778, version=2, mode="transport",
                                               key=PSP_DERIVED[0x80000778][1], sample=True), 6))
    return out


def psp_keyfile_text() -> str:
    lines = [f"psp-master key0={MK0.hex()} key1={MK1.hex()}"]
    for spi, (version, key) in PSP_DERIVED.items():
        lines.append(f"psp-key spi={spi:08x} key={key.hex()}" + ("" if version is None else f" version={version}"))
    return "\n".join(lines) + "\n"


def uat_row(*cols: str) -> str:
    return ",".join(f'"{c}"' for c in cols)


def psp_uat_rows() -> List[str]:
    rows = [uat_row("*", "*", "master-pair", MK0.hex(), MK1.hex())]
    for spi, (version, key) in PSP_DERIVED.items():
        rows.append(uat_row(f"0x{spi:08x}", "*" if version is None else str(version), "derived", key.hex(), ""))
    return rows


@pytest.fixture(scope="module")
def psp_cases() -> List[PspCase]:
    cases = []
    dec = pypsp.Decryptor(master_keys=(MK0, MK1), keys={s: k for s, (_, k) in PSP_DERIVED.items()})
    n = 0
    for label, kw, family in _psp_sas():
        enc = pypsp.Encryptor(**kw)
        for proto in (17, 6):
            clear = flow_packet(n, family, proto)
            n += 1
            outer = enc.encrypt(clear)
            got = dec.decrypt(outer)
            assert got.packet == clear  # the library's own view, which tshark must share
            cases.append(PspCase(f"{label}-{'udp' if proto == 17 else 'tcp'}", outer, clear, kw["mode"],
                                 pypsp.Header.parse(psp_of(outer)), vc=got.header.vc))
    return cases


@pytest.fixture(scope="module")
def psp_files(work, psp_cases):
    keyfile = write_text(work / "psp-keys.txt", psp_keyfile_text())
    return {
        "pcapng-ether": write_capture(work / "psp.pcapng", [c.outer for c in psp_cases], "pcapng"),
        "pcap-raw": write_capture(work / "psp-raw.pcap", [c.outer for c in psp_cases], "pcap", LINKTYPE_RAW),
        "pcap-nsec-ether": write_capture(work / "psp-nsec.pcap", [c.outer for c in psp_cases], "pcap-nsec"),
        "keyfile": keyfile,
    }


PSP_FIELDS = ("psp.nexthdr", "psp.hdrextlen", "psp.reserved0", "psp.cryptoffset", "psp.reserved1", "psp.sample", "psp.drop",
              "psp.version", "psp.is_virt", "psp.one_bit", "psp.spi", "psp.master_key", "psp.iv", "psp.vc",
              "psp.sectoken", "psp.virtkey", "psp.ext", "psp.payload", "psp.icv", "psp.status", "psp.icv_good",
              "psp.icv_bad", "frame.protocols", "_ws.expert.message") + LAYER_FIELDS


def b(flag: bool) -> List[str]:
    return ["1" if flag else "0"]


def expected_psp_header(h: pypsp.Header, psp: bytes, vc: Optional[bytes] = None) -> Dict[str, List[str]]:
    """What tshark shows for a decrypted packet; ``vc``: the decrypted VC (default: as on the wire)."""
    hlen = h.header_len
    vc = vc if vc is not None else h.vc
    ext = h.extension[8:] if h.virt else h.extension
    return {
        "psp.nexthdr": [str(h.next_header)],
        "psp.hdrextlen": [str(h.hdr_ext_len)],
        "psp.reserved0": [str(h.reserved)],
        "psp.cryptoffset": [str(h.crypt_offset)],
        "psp.reserved1": [str(h.sample << 1 | h.drop)],  # google/psp's name for the S and D bits
        "psp.sample": b(h.sample),
        "psp.drop": b(h.drop),
        "psp.version": [str(h.version)],
        "psp.is_virt": b(h.virt),
        "psp.one_bit": b(h.always_one),
        "psp.spi": [f"0x{h.spi:08x}"],
        "psp.master_key": [str(h.key_phase)],
        "psp.iv": [f"0x{h.iv:016x}"],
        "psp.vc": [f"0x{vc.hex()}"] if vc is not None else [],
        "psp.sectoken": [f"0x{vc[:4].hex()}"] if vc is not None else [],
        "psp.virtkey": [f"0x{vc[4:].hex()}"] if vc is not None else [],
        "psp.ext": [ext.hex()] if ext else [],
        "psp.payload": [psp[hlen:-16].hex()] if len(psp) - 16 > hlen else [],
        "psp.icv": [psp[-16:].hex()],
    }


def check_psp_decrypted(row: Dict[str, List[str]], case: PspCase) -> None:
    psp = psp_of(case.outer)
    for name, want in expected_psp_header(case.header, psp, case.vc).items():
        assert row[name] == want, (case.label, name)
    assert row["psp.status"] == ["ok"], case.label
    assert (row["psp.icv_good"], row["psp.icv_bad"]) == (["1"], ["0"]), case.label
    tunnel = case.mode == "tunnel"
    want = expected_layers(case.outer, 17, case.clear if tunnel else parse_ip(case.clear).payload, tunnel,
                           parse_ip(case.clear).proto)
    for name in LAYER_FIELDS:
        assert row[name] == want[name], (case.label, name)
    protos = row["frame.protocols"][0].split(":")
    assert protos[protos.index("psp") + 1] == ({4: "ip", 41: "ipv6", 17: "udp", 6: "tcp"}[case.header.next_header])
    assert row["_ws.expert.message"] == [], (case.label, row["_ws.expert.message"])


# --------------------------------------------------------------------------- 1. registration


def test_wireshark_md_filter_example_prints_what_it_says():
    """docs/wireshark.md's filter on decrypted traffic, run as written on the demo's capture (made as
    scripts/demo.sh makes it), prints the lines the document shows."""
    import shlex
    import sys

    doc = (ws.ROOT / "docs" / "wireshark.md").read_text()
    (block,) = [b for b in re.findall(r"^```sh\n(.*?)^```", doc, re.S | re.M) if b.startswith("$ tshark") and
                "psp_9a345678" in b]
    lines = block.replace("\\\n", " ").splitlines()
    command, shown = lines[0][2:], [ln for ln in lines[1:] if ln.strip()]
    assert shown, "the example shows no output"
    out = ws.shared_dir("pe-docfilter-")
    demo = ws.ROOT / "demo"
    env = {**os.environ, "PYTHONPATH": str(ws.ROOT)}
    subprocess.run([sys.executable, str(demo / "sample_traffic.py"), str(out / "sample.pcapng"), "--packets", "2000"],
                   check=True, env=env, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "pypsp", "encrypt", str(out / "sample.pcapng"), str(out / "psp_9a345678.pcapng"),
                    "--key-file", str(demo / "keys.txt"), "--spi", "9a345678", "-q"],
                   check=True, env=env, capture_output=True, timeout=300)
    shutil.copy(demo / "keys.txt", out / "keys.txt")
    for f in out.iterdir():
        f.chmod(0o644)
    args = shlex.split(command.replace("$PWD/demo/keys.txt", str(out / "keys.txt")))
    assert args[0] == "tshark"
    args = [str(out / a[len("out/demo/"):]) if a.startswith("out/demo/") else a for a in args[1:]]
    proc = ws.run(args)
    assert proc.stdout.splitlines() == shown, proc.stdout


def test_fields_and_experts_are_registered(empty_profile):
    out = tshark(["-G", "fields"], profile=empty_profile).stdout
    names = {line.split("\t")[2] for line in out.splitlines() if line.startswith(("F\t", "P\t"))}
    want = {"psp", "eesp", *PSP_FIELDS[:22], *PSP_EXPERTS, *EESP_EXPERTS,
            *("eesp." + n for n in (
                "compat", "version", "reserved", "opt_len", "session_id", "spi", "option", "option.type",
                "option.len", "option.data", "option.payload_offset", "option.crypt_offset", "option.co_reserved",
                "seq", "iv", "payload", "icv", "data", "next_header", "pad_len", "format", "suite", "status",
                "icv_good", "icv_bad", "sequence_analysis_expected_sn", "sequence_analysis_previous_frame",
                "replay"))}
    assert want <= names, sorted(want - names)


def test_plugin_is_the_build_under_test(empty_profile):
    out = tshark(["-G", "plugins"], profile=empty_profile).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.startswith(ws.PLUGIN_NAME)]
    assert len(rows) == 1, out
    assert rows[0][2].strip() == "dissector"
    assert Path(rows[0][3].strip()).resolve() == ws.plugin_path("plain").resolve()


def test_preferences_are_registered(empty_profile):
    out = tshark(["-G", "defaultprefs"], profile=empty_profile).stdout
    for pref in ("psp.keyfile", "psp.encrypted_payload: TRUE", "eesp.keyfile", "eesp.ip_protocol: 49", "eesp.udp_port: 4500",
                 "eesp.udp_dispatch: TRUE", "eesp.do_sequence_analysis: TRUE"):
        assert f"#{pref}" in out, pref
    # an enum: 4.0 writes its name, 4.4 and later its description
    assert "#eesp.udp_classify: auto\n" in out or "#eesp.udp_classify: Auto (eesp.md §14)\n" in out


# --------------------------------------------------------------------------- 2. PSP: every version and mode


@pytest.mark.parametrize("keys,capture", [("keyfile", "pcapng-ether"), ("uat-file", "pcap-raw"),
                                          ("uat-option", "pcap-nsec-ether")])
def test_psp_decrypts_every_version_and_mode(work, psp_cases, psp_files, empty_profile, keys, capture):
    """Header fields as pypsp parses them, status ok, the inner packet dissected as it was sent."""
    profile, opts = empty_profile, []
    if keys == "keyfile":
        opts = [f"psp.keyfile:{psp_files['keyfile']}"]
    elif keys == "uat-file":
        profile = _profile(work, "psp-uat", {"psp_keys": "\n".join(psp_uat_rows()) + "\n"})
    else:
        opts = [f"uat:psp_keys:{r}" for r in psp_uat_rows()]
    rows = fields(psp_files[capture], PSP_FIELDS, profile=profile, opts=opts)
    assert len(rows) == len(psp_cases)
    for row, case in zip(rows, psp_cases):
        check_psp_decrypted(row, case)
    # the matrix covered what it claims
    hs = [c.header for c in psp_cases]
    assert {h.version for h in hs} == {0, 1, 2, 3}
    assert {h.key_phase for h in hs} == {0, 1} and any(h.virt for h in hs) and any(h.crypt_offset for h in hs)
    assert any(h.sample and h.drop for h in hs) and any(h.drop and not h.sample for h in hs)
    assert {(c.mode, parse_ip(c.clear).family, parse_ip(c.outer).family) for c in psp_cases} >= {
        ("transport", 4, 4), ("transport", 6, 6), ("tunnel", 4, 4), ("tunnel", 6, 6), ("tunnel", 6, 4),
        ("tunnel", 4, 6)}


def test_psp_json_matches_the_header(psp_cases, psp_files, empty_profile):
    """-T json: the PSP layer of each packet holds pypsp's header fields, and no expert info."""
    pkts = packets_json(psp_files["pcap-raw"], profile=empty_profile,
                        opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    assert len(pkts) == len(psp_cases)
    for pkt, case in zip(pkts, psp_cases):
        psp = layer(pkt, "psp")
        h = case.header
        assert psp["psp.spi"] == f"0x{h.spi:08x}"
        assert psp["psp.iv"] == f"0x{h.iv:016x}"
        assert psp["psp.version"] == str(h.version)
        assert psp["psp.cryptoffset"] == str(h.crypt_offset)
        assert psp["psp.status"] == "ok"
        assert psp["psp.icv"] == psp_of(case.outer)[-16:].hex(":")
        if h.virt:
            assert psp["psp.vc"] == f"0x{case.vc.hex()}"  # decrypted when the crypt offset covers it
        assert not [e for e in experts(pkt) if e.startswith("psp.")], case.label


def test_psp_derived_key_wins_over_the_master_pair(work, psp_cases, psp_files, empty_profile):
    """Without the derived-key rows the master pair derives another key: ICV bad, for those SPIs only."""
    rows = fields(psp_files["pcap-raw"], ("psp.spi", "psp.status"), profile=empty_profile,
                  opts=[f"uat:psp_keys:{psp_uat_rows()[0]}"])
    for row, case in zip(rows, psp_cases):
        want = "authentication-failed" if case.header.spi in PSP_DERIVED else "ok"
        assert row["psp.status"] == [want], case.label


def test_psp_keyfile_and_table_together(work, psp_cases, psp_files):
    """The table's master pair with the file's derived keys: everything decrypts."""
    keyfile = write_text(work / "psp-derived-only.txt", "\n".join(l for l in psp_keyfile_text().splitlines() if l.startswith("psp-key")) + "\n")
    profile = _profile(work, "psp-master-only", {"psp_keys": psp_uat_rows()[0] + "\n"})
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=profile, opts=[f"psp.keyfile:{keyfile}"])
    assert [r["psp.status"] for r in rows] == [["ok"]] * len(psp_cases)


def test_psp_master_key_selection_by_spi_msb(work, psp_cases, psp_files, empty_profile):
    """A table row with key 0 only decrypts the SPIs whose MSB is 0; the others have no key."""
    rows = fields(psp_files["pcap-raw"], ("psp.spi", "psp.status", "psp.master_key"), profile=empty_profile,
                  opts=[f"uat:psp_keys:{uat_row('*', '*', 'master-pair', MK0.hex(), '')}"])
    for row, case in zip(rows, psp_cases):
        if case.header.spi in PSP_DERIVED:
            continue
        assert row["psp.status"] == (["ok"] if case.header.key_phase == 0 else ["no-key"]), case.label


def test_psp_table_row_restricted_to_one_version(psp_cases, psp_files, empty_profile):
    """A master pair for version 1 only: version 1 packets decrypt, the others find no key."""
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=empty_profile,
                  opts=[f"uat:psp_keys:{uat_row('*', '1', 'master-pair', MK0.hex(), MK1.hex())}"])
    for row, case in zip(rows, psp_cases):
        if case.header.spi in PSP_DERIVED:
            continue
        assert row["psp.status"] == (["ok"] if case.header.version == 1 else ["no-key"]), case.label


# Each row becomes one key-file line (keys.c): a line break inside a field would add lines of its own.
# \x0a is how a UAT file and -o uat: write a newline inside a quoted field.
_K777 = PSP_DERIVED[0x777][1].hex()
_K778 = PSP_DERIVED[0x80000778][1].hex()
_INJECTED = f"\\x0apsp-key spi=0x00000777 key={_K777} version=1"
PSP_INJECTIONS = {
    "master-key1": uat_row("*", "*", "master-pair", MK0.hex(), MK1.hex() + _INJECTED),
    "derived-key0": uat_row("0x80000778", "*", "derived", _K778 + _INJECTED, ""),
    "derived-spi": uat_row(f"0x80000778{_INJECTED}", "*", "derived", _K778, ""),
}


@pytest.mark.parametrize("where", sorted(PSP_INJECTIONS))
@pytest.mark.parametrize("source", ["uat-file", "uat-option"])
def test_psp_table_row_with_a_line_break_is_refused(work, psp_cases, psp_files, empty_profile, where, source):
    """A row whose field holds a newline and a second key line is refused with an error naming the field
    (like an EESP row whose Options hold one): neither the injected key nor the row's own keys decrypt
    anything, and no key reaches the message.  From a UAT file tshark reports the row and goes on; an
    -o uat: value it refuses outright, as any invalid -o."""
    row = PSP_INJECTIONS[where]
    if source == "uat-file":
        profile, opts = _profile(work, f"psp-inject-{where}", {"psp_keys": row + "\n"}), []
    else:
        profile, opts = empty_profile, [f"uat:psp_keys:{row}"]
    proc = ws.run(["-n", "-r", str(psp_files["pcap-raw"]), "-T", "fields", "-e", "psp.spi", "-e", "psp.status",
                   *[a for o in opts for a in ("-o", o)]], profile=profile, check=False)
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr, proc.stderr[-4000:]
    assert re.search(r"(SPI|Key [01]) must be one line", proc.stderr), proc.stderr[-2000:]
    # tshark quotes a refused -o value itself ('Invalid -o flag "...": '); our message follows it.
    ours = "\n".join(line.rsplit('": ', 1)[-1] for line in proc.stderr.splitlines())
    assert _K777 not in ours and _K778 not in ours and MK1.hex() not in ours, ours
    statuses = {case.header.spi: line.split("\t")[1] for line, case in zip(proc.stdout.splitlines(), psp_cases)}
    if source == "uat-option":
        assert proc.returncode != 0 and statuses == {}, proc.stdout[-2000:]
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(statuses) == len({c.header.spi for c in psp_cases}), proc.stdout[-2000:]
    assert statuses[0x00000777] != "ok", "the injected psp-key line was loaded"
    assert set(statuses.values()) == {"no-key"}, f"the row was accepted: {statuses}"


# --------------------------------------------------------------------------- 3. PSP failures


@pytest.fixture(scope="module")
def psp_error_capture(work):
    """(path, list of (label, outer packet))."""
    items = []
    clear = flow_packet(900, 4, 17)
    wrong = pypsp.Encryptor(spi=0x00000901, master_keys=(bytes(32), bytes(32)), version=0)
    items.append(("wrong-key", wrong.encrypt(clear)))
    # The key file below holds key 0 only: an SPI with MSB 1 has no key.
    items.append(("no-key", pypsp.Encryptor(spi=0x80000902, master_keys=(MK0, MK1), version=1,
                                            mode="tunnel").encrypt(clear)))
    items.append(("gmac-no-key-transport", pypsp.Encryptor(spi=0x80000903, master_keys=(MK0, MK1), version=2,
                                                           mode="transport").encrypt(clear)))
    items.append(("gmac-no-key-tunnel", pypsp.Encryptor(spi=0x80000904, master_keys=(MK0, MK1), version=3,
                                                        mode="tunnel").encrypt(flow_packet(901, 6, 6))))
    good = pypsp.Encryptor(spi=0x00000905, master_keys=(MK0, MK1), version=0)
    ok = good.encrypt(clear)
    items.append(("ok", ok))
    psp = psp_of(ok)
    src, dst = V4[0], V4[1]

    def udp_psp(data: bytes) -> bytes:
        return ip_pkt(src, dst, 17, struct.pack("!HHHH", 4000, PSP_PORT, 8 + len(data), 0) + data)

    items.append(("truncated-10", udp_psp(psp[:10])))
    items.append(("truncated-header-no-icv", udp_psp(psp[:20])))
    items.append(("empty", udp_psp(b"")))
    items.append(("bad-hdr-ext-len", udp_psp(psp[:1] + b"\x20" + psp[2:])))
    items.append(("unknown-version", udp_psp(psp[:3] + bytes([(psp[3] & ~0x3C) | (5 << 2)]) + psp[4:])))
    items.append(("icv-flipped", udp_psp(psp[:-1] + bytes([psp[-1] ^ 1]))))
    path = write_capture(work / "psp-errors.pcap", [p for _, p in items])
    keyfile = write_text(work / "psp-key0-only.txt", f"psp-master key0={MK0.hex()}\n")
    return path, items, keyfile


def test_psp_failures_are_flagged(psp_error_capture, empty_profile):
    path, items, keyfile = psp_error_capture
    opts = [f"psp.keyfile:{keyfile}"]
    pkts = packets_json(path, profile=empty_profile, opts=opts)
    rows = fields(path, ("psp.status", "psp.icv_good", "psp.icv_bad", "udp.dstport", "tcp.dstport",
                         "frame.protocols", "psp.version"), profile=empty_profile, opts=opts)
    got = {label: (row, experts(pkt)) for (label, _), row, pkt in zip(items, rows, pkts)}
    assert len(got) == len(items) == len(rows)

    row, ex = got["wrong-key"]
    assert row["psp.status"] == ["authentication-failed"]
    assert (row["psp.icv_good"], row["psp.icv_bad"]) == (["0"], ["1"])
    assert "psp.expert.authentication" in ex and row["udp.dstport"] == [str(PSP_PORT)]

    row, ex = got["icv-flipped"]
    assert row["psp.status"] == ["authentication-failed"] and "psp.expert.authentication" in ex

    row, ex = got["no-key"]
    assert row["psp.status"] == ["no-key"] and "psp.expert.no_key" in ex
    assert row["psp.icv_good"] == row["psp.icv_bad"] == []
    assert row["frame.protocols"][0].endswith(":psp")

    # GMAC without a key: the payload is in clear, dissected and marked as not verified.
    clear = flow_packet(900, 4, 17)
    row, ex = got["gmac-no-key-transport"]
    assert row["psp.status"] == ["no-key"] and {"psp.expert.no_key", "psp.expert.gmac_unverified"} <= set(ex)
    assert row["udp.dstport"] == [str(PSP_PORT), str(struct.unpack("!H", parse_ip(clear).payload[2:4])[0])]
    row, ex = got["gmac-no-key-tunnel"]
    assert "psp.expert.gmac_unverified" in ex
    assert row["tcp.dstport"] == [str(51000 + 901)]
    assert row["frame.protocols"][0].split(":psp:")[1].startswith("ipv6:tcp")

    row, ex = got["ok"]
    assert row["psp.status"] == ["ok"] and not [e for e in ex if e.startswith("psp.")]

    assert got["empty"][0]["psp.status"] == []  # UDP hands no empty payload on
    for label in ("truncated-10", "truncated-header-no-icv", "bad-hdr-ext-len"):
        row, ex = got[label]
        assert row["psp.status"] and row["psp.status"] != ["ok"], label
        assert "psp.expert.malformed" in ex, (label, ex)
    assert got["truncated-10"][0]["psp.status"] == ["psp-truncated"]
    assert got["bad-hdr-ext-len"][0]["psp.status"] == ["psp-bad-hdr-ext-len"]

    row, ex = got["unknown-version"]
    assert row["psp.version"] == ["5"] and row["psp.status"] == ["psp-unsupported-version"]
    assert "psp.expert.malformed" in ex


def test_psp_without_any_key(psp_files, psp_cases, empty_profile):
    """No key configured at all: every packet no-key, GMAC payloads still dissected."""
    rows = fields(psp_files["pcap-raw"], ("psp.status", "_ws.expert.message", "udp.dstport", "tcp.dstport"),
                  profile=empty_profile)
    for row, case in zip(rows, psp_cases):
        assert row["psp.status"] == ["no-key"], case.label
        inner = parse_ip(case.clear)
        inner_dport = str(struct.unpack("!H", inner.payload[2:4])[0])
        seen = row["udp.dstport"][1:] + row["tcp.dstport"]
        if case.header.version >= 2:
            assert inner_dport in seen, case.label
        else:
            assert seen == [], case.label


@pytest.fixture(scope="module")
def psp_cut_capture(work, psp_files):
    cut = work / "psp-cut.pcapng"
    # Ethernet + IPv6 + UDP + the 16-octet PSP header fit in 90 octets; every packet is longer
    editcap("-s", "90", str(psp_files["pcapng-ether"]), str(cut))
    return cut


def test_psp_snap_length_cut(psp_cut_capture, psp_files, psp_cases, empty_profile):
    """Status capture-packet-cut; what was captured of the header is shown, the VC too (as sent: a cut packet
    cannot be decrypted, so a VC under a crypt offset below 2 words shows encrypted)."""
    rows = fields(psp_cut_capture, ("psp.status", "psp.spi", "psp.vc", "psp.sectoken", "psp.virtkey", "psp.ext",
                                    "frame.cap_len", "frame.len", "_ws.col.Info"), profile=empty_profile,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    pkts = packets_json(psp_cut_capture, profile=empty_profile, opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    for row, pkt, case in zip(rows, pkts, psp_cases):
        h = case.header
        assert row["frame.cap_len"] == ["90"] and int(row["frame.len"][0]) > 90
        assert row["psp.spi"] == [f"0x{h.spi:08x}"]
        assert row["psp.status"] == ["capture-packet-cut"], case.label
        assert "psp.expert.cut_by_capture" in experts(pkt)
        # Ethernet + IPv6 + UDP + header + VC is 86 octets: every VC was captured
        assert row["psp.vc"] == ([f"0x{h.vc.hex()}"] if h.virt else []), case.label
        assert row["psp.sectoken"] == ([f"0x{h.vc[:4].hex()}"] if h.virt else []), case.label
        assert row["psp.virtkey"] == ([f"0x{h.vc[4:].hex()}"] if h.virt else []), case.label
        captured = len(psp_of(case.outer)) - (int(row["frame.len"][0]) - 90)
        ext = (h.extension[8:] if h.virt else h.extension)[:max(0, captured - 16 - (8 if h.virt else 0))]
        assert row["psp.ext"] == ([ext.hex()] if ext else []), case.label
        assert "[no key]" not in row["_ws.col.Info"][0]
    assert any(c.header.virt and parse_ip(c.outer).family == 6 for c in psp_cases)


def test_psp_cut_packet_shows_no_icv(psp_cut_capture, psp_files, psp_cases, empty_profile):
    """The ICV is the last 16 octets of the *reported* packet: a cut packet did not capture it, so the
    dissector must not label the last captured octets as the ICV (nor the rest as the payload up to it)."""
    rows = fields(psp_cut_capture, ("psp.icv", "psp.status"), profile=empty_profile,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    bad = [(c.label, r["psp.icv"]) for r, c in zip(rows, psp_cases) if r["psp.icv"]]
    assert bad == [], f"{len(bad)} cut packets show an ICV taken from the captured octets, e.g. {bad[:2]}"


def test_psp_encrypted_payload_off_dissects_cleartext_captures(work, empty_profile):
    """google/psp's psp.lua setting, for captures taken before encryption: header, then the payload in clear
    and no ICV; the payload is dissected by the header's Next Header."""
    inners = [(17, parse_ip(flow_packet(950, 4, 17)).payload, False, 17), (4, flow_packet(951, 4, 6), True, 6),
              (41, flow_packet(952, 6, 17), True, 17), (6, parse_ip(flow_packet(953, 6, 6)).payload, False, 6)]
    outers, headers = [], []
    for i, (nh, inner, _, _) in enumerate(inners):
        h = pypsp.Header(next_header=nh, spi=0x1000 + i, iv=i + 1, version=i, virt=i == 2,
                         extension=bytes(range(8)) if i == 2 else b"")
        headers.append(h)
        udp = l4(17, V4[0], V4[1], 4000, PSP_PORT, h.build() + inner)
        outers.append(ip_pkt(V4[0], V4[1], 17, udp))
    path = write_capture(work / "psp-clear.pcap", outers)
    rows = fields(path, ("psp.spi", "psp.version", "psp.nexthdr", "psp.icv", "psp.status", "psp.payload")
                  + LAYER_FIELDS, profile=empty_profile, opts=["psp.encrypted_payload:FALSE"])
    for row, outer, h, (nh, inner, is_ip, proto) in zip(rows, outers, headers, inners):
        assert row["psp.spi"] == [f"0x{h.spi:08x}"] and row["psp.version"] == [str(h.version)]
        assert row["psp.icv"] == row["psp.status"] == []
        assert row["psp.payload"] == [inner.hex()]
        want = expected_layers(outer, 17, inner, is_ip, proto)
        for name in LAYER_FIELDS:
            assert row[name] == want[name], (nh, name)


# --------------------------------------------------------------------------- 4. EESP


ROOT32 = bytes(range(32))
ROOT48 = bytes(range(0x80, 0x80 + 48))
ROOT64 = bytes(range(0x20, 0x20 + 64))


def _key(n: int, seed: int) -> bytes:
    return bytes((seed * 31 + k * 7) & 0xFF for k in range(n))


ICV_LEN = {"aes-ccm-8": 8, "aes-ccm-12": 12, "aes-ccm-16": 16, "aes-gcm-8": 8, "aes-gcm-12": 12, "aes-gcm-16": 16,
           "aes-gmac": 16, "chacha20-poly1305": 16, "aes-ccm-8-iiv": 8, "aes-gcm-16-iiv": 16,
           "chacha20-poly1305-iiv": 16}
SUITE_NAME = {s: "ENCR_" + s.upper().replace("-", "_") for s in ICV_LEN}
SUITE_NAME["aes-gmac"] = "ENCR_NULL_AUTH_AES_GMAC"


@dataclass
class EespSpec:
    """One EESP SA: the pyeesp settings, the key-file/UAT view of them, and how the test sends on it."""

    name: str
    spi: int
    suite: str
    key_bits: int = 128
    key: Optional[bytes] = None
    root_key: Optional[bytes] = None
    sskdf: Optional[str] = None
    mode: str = "tunnel"
    options: Dict[str, str] = field(default_factory=dict)  # further key-file settings (also the UAT Options column)
    sa_kw: Dict[str, object] = field(default_factory=dict)  # the same settings as pyeesp.SA keywords
    sub_sas: Sequence[int] = (0,)
    families: Sequence[int] = (4, 6)
    dst: Optional[str] = None

    def sa(self) -> pyeesp.SA:
        kw = dict(self.sa_kw)
        if self.key is not None:
            kw["key"] = self.key
        else:
            kw.update(root_key=self.root_key, sskdf=self.sskdf)
        if self.dst:
            kw["dst"] = self.dst
        bits = None if self.suite.startswith("chacha") else self.key_bits  # ChaCha20-Poly1305: 256 only
        return pyeesp.SA(self.spi, self.suite, key_bits=bits, mode=self.mode, **kw)

    def keyfile_line(self) -> str:
        parts = [f"eesp-sa spi=0x{self.spi:08x} suite={self.suite}"]
        if not self.suite.startswith("chacha"):
            parts.append(f"key-bits={self.key_bits}")
        parts.append(f"key={self.key.hex()}" if self.key is not None else f"root-key={self.root_key.hex()} sskdf={self.sskdf}")
        parts.append(f"mode={self.mode}")
        if self.dst:
            parts.append(f"dst={self.dst}")
        parts += [f"{k}={v}" for k, v in self.options.items()]
        return " ".join(parts)

    def uat_row(self) -> str:
        return uat_row("*", self.dst or "*", f"0x{self.spi:08x}", self.suite,
                       "256" if self.suite.startswith("chacha") else str(self.key_bits),
                       (self.key if self.key is not None else self.root_key).hex(), self.sskdf or "none", self.mode,
                       " ".join(f"{k}={v}" for k, v in self.options.items()))


PADN4 = b"\x01\x02\x00\x00"  # a PadN option of 4 octets


def eesp_specs() -> List[EespSpec]:
    return [
        EespSpec("gcm16-tunnel-subsas", 0x00001001, "aes-gcm-16", root_key=ROOT32, sskdf="hkdf-sha256",
                 sub_sas=(0, 1, 7), options={"max-sub-sa-id": "15"}, sa_kw={"max_sub_sa_id": 15}),
        EespSpec("gcm8-256-transport-xfrm", 0x00001002, "aes-gcm-8", key_bits=256, key=_key(36, 2), mode="transport",
                 options={"aad": "linux-xfrm", "align": "0"}, sa_kw={"aad": "linux-xfrm", "align_options": False}),
        EespSpec("ccm8-tunnel-full", 0x00001003, "aes-ccm-8", key=_key(19, 3), options={"format": "full"},
                 sa_kw={"format": "full"}),
        EespSpec("ccm16-192-transport-noseq", 0x00001004, "aes-ccm-16", key_bits=192, key=_key(27, 4),
                 mode="transport", options={"seq": "0"}, sa_kw={"seq": False}),
        EespSpec("gmac-transport-padn", 0x00001005, "aes-gmac", key=_key(20, 5), mode="transport",
                 sa_kw={"options": PADN4}),
        EespSpec("chacha-transport-udp-cryptoffset", 0x80001006, "chacha20-poly1305", key=_key(36, 6),
                 mode="transport", options={"udp-encap": "1", "crypt-offset": "2", "max-crypt-offset": "4"},
                 sa_kw={"udp_encap": True, "crypt_offset": 2, "max_crypt_offset": 4}),
        EespSpec("gcm16iiv-tunnel-full", 0x00001007, "aes-gcm-16-iiv", key=_key(20, 7), options={"format": "full"},
                 sa_kw={"format": "full"}),
        EespSpec("ccm8iiv-tunnel-sha384", 0x00001008, "aes-ccm-8-iiv", root_key=ROOT48, sskdf="hkdf-sha384",
                 sub_sas=(2, 3)),
        EespSpec("chachaiiv-tunnel-udp-sha512", 0x00001009, "chacha20-poly1305-iiv", root_key=ROOT64,
                 sskdf="hkdf-sha512", sub_sas=(0, 65535), options={"udp-encap": "1"}, sa_kw={"udp_encap": True}),
        EespSpec("gcm12-tunnel-dst-bound", 0x0000100A, "aes-gcm-12", key=_key(20, 10), families=(4,), dst=V4[1]),
        EespSpec("gcm12-tunnel-other-dst", 0x0000100A, "aes-gcm-12", key=_key(20, 11), families=(4,), dst=V4[2]),
        EespSpec("ccm12-tunnel-v6-in-v4", 0x0000100B, "aes-ccm-12", key=_key(19, 12), families=(6,),
                 sa_kw={"tunnel_header": ip_pkt(V4[0], V4[3], 0, b"")}),
    ]


@dataclass
class EespCase:
    label: str
    spec: EespSpec
    outer: bytes
    clear: bytes
    got: pyeesp.Decrypted


@pytest.fixture(scope="module")
def eesp_cases() -> List[EespCase]:
    specs = eesp_specs()
    rx = pyeesp.Receiver([s.sa() for s in specs if s.dst is None])
    # SAs bound to a destination: one receiver per destination, as docs/keys.md says a tool does
    bound = {s.dst: pyeesp.Receiver([s.sa()]) for s in specs if s.dst}
    cases = []
    n = 0
    for spec in specs:
        sa = spec.sa()
        for family in spec.families:
            for proto in (17, 6):
                for sub in spec.sub_sas:
                    clear = flow_packet(200 + n, family, proto)
                    if spec.dst:  # the SA is bound to this (outer = inner) destination
                        clear = ip_pkt(V4[0], spec.dst, proto, l4(proto, V4[0], spec.dst, 53000 + n, 53500 + n,
                                                                  bytes(range(n, n + 40))), ident=n)
                    n += 1
                    outer = sa.encrypt(clear, sub)
                    got = (bound[spec.dst] if spec.dst else rx).decrypt(outer)
                    assert got.packet == clear
                    cases.append(EespCase(f"{spec.name}-ip{family}-{proto}-sub{sub}", spec, outer, clear, got))
    return cases


def eesp_keyfile_text() -> str:
    return "\n".join(s.keyfile_line() for s in eesp_specs()) + "\n"


@pytest.fixture(scope="module")
def eesp_files(work, eesp_cases):
    keyfile = write_text(work / "eesp-keys.txt", eesp_keyfile_text())
    return {
        "pcap-ether": write_capture(work / "eesp.pcap", [c.outer for c in eesp_cases], "pcap"),
        "pcapng-raw": write_capture(work / "eesp-raw.pcapng", [c.outer for c in eesp_cases], "pcapng", LINKTYPE_RAW),
        "keyfile": keyfile,
    }


EESP_FIELDS = ("eesp.compat", "eesp.version", "eesp.reserved", "eesp.opt_len", "eesp.session_id", "eesp.spi",
               "eesp.option.type", "eesp.option.len", "eesp.option.payload_offset", "eesp.option.crypt_offset",
               "eesp.option.co_reserved", "eesp.option.data", "eesp.seq", "eesp.iv", "eesp.payload", "eesp.icv",
               "eesp.data", "eesp.next_header", "eesp.pad_len", "eesp.format", "eesp.suite", "eesp.status",
               "eesp.icv_good", "eesp.icv_bad", "eesp.sequence_analysis_expected_sn", "eesp.replay",
               "frame.protocols", "_ws.expert.message") + LAYER_FIELDS


def eesp_bytes(outer: bytes, udp_encap: bool) -> bytes:
    p = parse_ip(outer).payload
    return p[8:] if udp_encap else p


def check_eesp_decrypted(row: Dict[str, List[str]], case: EespCase) -> None:
    got, spec = case.got, case.spec
    h = got.header
    wire = eesp_bytes(case.outer, got.udp_encap)
    icv_len = ICV_LEN[spec.suite]
    want = {
        "eesp.compat": ["1"], "eesp.version": ["0"], "eesp.reserved": ["0x00"],
        "eesp.opt_len": [str(h.opt_len)],
        "eesp.session_id": [str(h.session_id)],
        "eesp.spi": [f"0x{h.spi:08x}"],
        "eesp.option.type": [str(o.type) for o in h.options],
        "eesp.option.len": [str(len(o.data)) for o in h.options if o.type != 0],
        "eesp.seq": [str(got.seq)] if got.seq is not None else [],
        "eesp.iv": [got.iv.hex()] if got.iv else [],
        "eesp.icv": [wire[-icv_len:].hex()],
        "eesp.data": [],
        "eesp.next_header": [str(got.next_header)],
        "eesp.pad_len": [str(got.pad_len)],
        "eesp.format": ["full" if got.full_format else "optimized"],
        "eesp.suite": [SUITE_NAME[spec.suite]],
        "eesp.status": ["ok"],
        "eesp.icv_good": ["1"], "eesp.icv_bad": ["0"],
        "eesp.replay": [],
    }
    co = h.crypt_offset_option
    want["eesp.option.crypt_offset"] = [str(co.crypt_offset_value)] if co else []
    want["eesp.option.payload_offset"] = [str(co.payload_offset)] if co else []
    for name, value in want.items():
        assert row[name] == value, (case.label, name)
    # the payload runs from after [Seq][IV] (or the Crypt Offset's PayloadOffset) to the ICV
    assert row["eesp.payload"] and wire.endswith(bytes.fromhex(row["eesp.payload"][0]) + wire[-icv_len:]), case.label
    tunnel = spec.mode == "tunnel"
    inner = case.clear if tunnel else parse_ip(case.clear).payload
    layers = expected_layers(case.outer, 17 if got.udp_encap else None, inner, tunnel, parse_ip(case.clear).proto)
    for name in LAYER_FIELDS:
        assert row[name] == layers[name], (case.label, name)
    assert row["_ws.expert.message"] == [], (case.label, row["_ws.expert.message"])


@pytest.mark.parametrize("keys,capture", [("keyfile", "pcap-ether"), ("uat-file", "pcapng-raw")])
def test_eesp_decrypts_every_suite_format_and_mode(work, eesp_cases, eesp_files, empty_profile, keys, capture):
    profile, opts = empty_profile, []
    if keys == "keyfile":
        opts = [f"eesp.keyfile:{eesp_files['keyfile']}"]
    else:
        profile = _profile(work, "eesp-uat", {"eesp_sa": "\n".join(s.uat_row() for s in eesp_specs()) + "\n"})
    rows = fields(eesp_files[capture], EESP_FIELDS, profile=profile, opts=opts)
    assert len(rows) == len(eesp_cases)
    for row, case in zip(rows, eesp_cases):
        check_eesp_decrypted(row, case)
    # what the matrix covers
    gots = [c.got for c in eesp_cases]
    assert {c.spec.suite for c in eesp_cases} >= {"aes-gcm-16", "aes-ccm-8", "chacha20-poly1305", "aes-gmac",
                                                  "aes-gcm-16-iiv", "aes-ccm-8-iiv", "chacha20-poly1305-iiv"}
    assert {g.full_format for g in gots} == {True, False} and {g.udp_encap for g in gots} == {True, False}
    assert any(g.header.crypt_offset_option for g in gots) and any(g.seq is None for g in gots)
    assert any(g.header.options and not g.header.crypt_offset_option for g in gots)
    assert len({g.header.session_id for g in gots}) >= 5


def test_eesp_uat_from_the_command_line(eesp_cases, eesp_files, empty_profile):
    specs = eesp_specs()
    rows = fields(eesp_files["pcap-ether"], ("eesp.spi", "eesp.status"), profile=empty_profile,
                  opts=[f"uat:eesp_sa:{s.uat_row()}" for s in specs])
    assert [r["eesp.status"] for r in rows] == [["ok"]] * len(eesp_cases)


def test_eesp_json_options_and_layout(eesp_cases, eesp_files, empty_profile):
    """-T json: the option tree of the Crypt Offset and PadN SAs, the Sub SA IDs, generated fields."""
    pkts = packets_json(eesp_files["pcapng-raw"], profile=empty_profile,
                        opts=[f"eesp.keyfile:{eesp_files['keyfile']}"])
    assert len(pkts) == len(eesp_cases)
    for pkt, case in zip(pkts, eesp_cases):
        e = layer(pkt, "eesp")
        assert e["eesp.spi"] == f"0x{case.got.header.spi:08x}"
        assert e["eesp.session_id"] == str(case.got.header.session_id)
        assert e["eesp.status"] == "ok" and e["eesp.next_header"] == str(case.got.next_header)
        assert not [x for x in experts(pkt) if x.startswith("eesp.")], case.label
        text = json.dumps(e)
        co = case.got.header.crypt_offset_option
        if co:
            assert f'"eesp.option.crypt_offset": "{co.crypt_offset_value}"' in text
            assert f'"eesp.option.payload_offset": "{co.payload_offset}"' in text
        if case.spec.sa_kw.get("options") == PADN4:
            assert '"eesp.option.type": "1"' in text and '"eesp.option.data": "00:00"' in text


def test_eesp_sub_sas_each_decrypt(eesp_cases, eesp_files, empty_profile):
    rows = fields(eesp_files["pcap-ether"], ("eesp.spi", "eesp.session_id", "eesp.status"), profile=empty_profile,
                  opts=[f"eesp.keyfile:{eesp_files['keyfile']}"])
    seen = {}
    for row, case in zip(rows, eesp_cases):
        if case.spec.root_key is not None:
            seen.setdefault(case.spec.spi, set()).add((row["eesp.session_id"][0], row["eesp.status"][0]))
    assert seen[0x1001] == {("0", "ok"), ("1", "ok"), ("7", "ok")}
    assert seen[0x1008] == {("2", "ok"), ("3", "ok")}
    assert seen[0x1009] == {("0", "ok"), ("65535", "ok")}


@pytest.fixture(scope="module")
def eesp_error_capture(work):
    items = []
    good = EespSpec("err-good", 0x00002001, "aes-gcm-16", key=_key(20, 40), mode="transport")
    clear = flow_packet(700, 4, 17)
    ok = good.sa().encrypt(clear)
    items.append(("ok", ok))
    wrong = EespSpec("err-wrong", 0x00002001, "aes-gcm-16", key=_key(20, 41), mode="transport")
    items.append(("wrong-key", wrong.sa().encrypt(flow_packet(701, 4, 17))))
    items.append(("no-sa", EespSpec("err-nosa", 0x00002999, "aes-gcm-16", key=_key(20, 42)).sa().encrypt(clear)))
    sub = EespSpec("err-sub", 0x00002002, "aes-gcm-16", root_key=ROOT32, sskdf="hkdf-sha256")
    items.append(("sub-sa-out-of-range", sub.sa().encrypt(clear, 9)))
    co = EespSpec("err-co", 0x00002003, "aes-gcm-16", key=_key(20, 43), mode="transport",
                  sa_kw={"crypt_offset": 1, "max_crypt_offset": 4})
    items.append(("crypt-offset-not-allowed", co.sa().encrypt(clear)))
    eesp = parse_ip(ok).payload

    def ip49(data: bytes) -> bytes:
        return ip_pkt(V4[0], V4[1], 49, data)

    items.append(("truncated-5", ip49(eesp[:5])))
    items.append(("truncated-after-base", ip49(eesp[:12])))
    items.append(("bad-version", ip49(bytes([eesp[0] | 0x08]) + eesp[1:])))  # version 1
    # Opt Len 4 holding a PadN that claims 5 data octets
    items.append(("options-overrun", ip49(eesp[:1] + b"\x04" + eesp[2:8] + b"\x01\x05\x00\x00" + eesp[8:])))
    items.append(("icv-flipped", ip49(eesp[:-1] + bytes([eesp[-1] ^ 0x80]))))
    items.append(("empty", ip49(b"")))
    path = write_capture(work / "eesp-errors.pcapng", [p for _, p in items], "pcapng")
    keyfile = write_text(work / "eesp-err-keys.txt", "\n".join([good.keyfile_line(), sub.keyfile_line() + " max-sub-sa-id=3",
                                  # the receiver announced no Crypt Offset
                                  EespSpec("err-co", 0x00002003, "aes-gcm-16", key=_key(20, 43),
                                           mode="transport").keyfile_line()]) + "\n")
    return path, items, keyfile


def test_eesp_failures_are_flagged(eesp_error_capture, empty_profile):
    path, items, keyfile = eesp_error_capture
    opts = [f"eesp.keyfile:{keyfile}"]
    pkts = packets_json(path, profile=empty_profile, opts=opts)
    rows = fields(path, ("eesp.status", "eesp.icv_good", "eesp.icv_bad", "eesp.data", "eesp.spi",
                         "eesp.session_id", "eesp.payload", "eesp.version", "udp.dstport"),
                  profile=empty_profile, opts=opts)
    got = {label: (row, experts(pkt)) for (label, _), row, pkt in zip(items, rows, pkts)}
    assert len(rows) == len(items)

    row, ex = got["ok"]
    assert row["eesp.status"] == ["ok"] and not [e for e in ex if e.startswith("eesp.")]

    for label in ("wrong-key", "icv-flipped"):
        row, ex = got[label]
        assert row["eesp.status"] == ["authentication-failed"], label
        assert (row["eesp.icv_good"], row["eesp.icv_bad"]) == (["0"], ["1"]), label
        assert "eesp.expert.authentication" in ex, label

    row, ex = got["no-sa"]
    assert row["eesp.status"] == ["eesp-no-sa"] and "eesp.expert.no_key" in ex
    assert row["eesp.spi"] == ["0x00002999"] and row["eesp.data"] and row["eesp.payload"] == []

    row, ex = got["sub-sa-out-of-range"]
    assert row["eesp.session_id"] == ["9"] and row["eesp.status"] == ["eesp-sub-sa-out-of-range"]
    assert "eesp.expert.policy" in ex
    row, ex = got["crypt-offset-not-allowed"]
    assert row["eesp.status"] == ["eesp-crypt-offset-not-allowed"] and "eesp.expert.policy" in ex

    assert got["empty"][0]["eesp.status"] == []  # IP hands no empty payload on
    for label in ("truncated-5", "truncated-after-base", "options-overrun"):
        row, ex = got[label]
        assert row["eesp.status"] and row["eesp.status"] != ["ok"], label
        assert "eesp.expert.malformed" in ex, (label, ex)
    assert got["truncated-5"][0]["eesp.status"] == ["eesp-truncated"]
    assert got["options-overrun"][0]["eesp.status"] == ["eesp-options-overrun"]
    row, ex = got["bad-version"]
    assert row["eesp.version"] == ["1"] and row["eesp.status"] == ["eesp-unsupported-version"]
    assert "eesp.expert.malformed" in ex


def test_eesp_without_sa_shows_base_header_and_data(eesp_cases, eesp_files, empty_profile):
    rows = fields(eesp_files["pcap-ether"], ("eesp.spi", "eesp.session_id", "eesp.status", "eesp.data",
                                             "eesp.option.type", "eesp.seq", "eesp.icv"), profile=empty_profile)
    for row, case in zip(rows, eesp_cases):
        h = case.got.header
        wire = eesp_bytes(case.outer, case.got.udp_encap)
        assert row["eesp.spi"] == [f"0x{h.spi:08x}"] and row["eesp.session_id"] == [str(h.session_id)]
        assert row["eesp.status"] == ["eesp-no-sa"], case.label
        assert row["eesp.option.type"] == [str(o.type) for o in h.options]
        assert row["eesp.data"] == [wire[h.header_len:].hex()], case.label
        assert row["eesp.seq"] == row["eesp.icv"] == []


def test_eesp_snap_length_cut(work, eesp_files, eesp_cases, empty_profile):
    cut = work / "eesp-cut.pcap"
    # Ethernet + IPv6 + UDP + the EESP Base Header fit in 80 octets; every packet is longer
    editcap("-s", "80", str(eesp_files["pcap-ether"]), str(cut))
    opts = [f"eesp.keyfile:{eesp_files['keyfile']}"]
    rows = fields(cut, ("eesp.status", "eesp.spi", "eesp.icv", "frame.len"), profile=empty_profile, opts=opts)
    pkts = packets_json(cut, profile=empty_profile, opts=opts)
    for row, pkt, case in zip(rows, pkts, eesp_cases):
        assert int(row["frame.len"][0]) > 80
        assert row["eesp.spi"] == [f"0x{case.got.header.spi:08x}"]
        assert row["eesp.status"] == ["capture-packet-cut"], case.label
        assert row["eesp.icv"] == []
        assert "eesp.expert.cut_by_capture" in experts(pkt)


def test_bad_key_files_are_reported_by_line_without_key_material(work, empty_profile):
    """A key file with an error: tshark says which file and line (docs/keys.md: "The error gives the 1-based
    line and a message"), never a key, decrypts nothing from that file, and does not fail.  It says so once per
    load on the console (also when it reads the capture twice), and on every packet the file may have cost its
    key: an expert item of category configuration naming the file, the line and the core's message."""
    secret = "96c22dc799198090b74b70ae468e4e30"
    psp_bad = write_text(work / "bad-psp-keys.txt", f"# keys\npsp-master key0={MK0.hex()}\n"
                                                     f"psp-key spi=1 version=1 key={secret}\n")
    eesp_bad = write_text(work / "bad-eesp-keys.txt", "# keys\n\neesp-sa spi=0x6001 suite=aes-gcm-16 "
                                                       f"key={secret}\n")
    sa = EespSpec("bad", 0x00006001, "aes-gcm-16", key=_key(20, 70)).sa()
    enc = pypsp.Encryptor(spi=0x00006002, master_keys=(MK0, MK1))
    packets = [enc.encrypt(flow_packet(960, 4, 17)), sa.encrypt(flow_packet(961, 4, 17)),
               enc.encrypt(flow_packet(962, 6, 6)), sa.encrypt(flow_packet(963, 6, 17)),
               enc.encrypt(flow_packet(964, 4, 6))]
    path = write_capture(work / "bad-keys.pcap", packets)
    opts = ["-o", f"psp.keyfile:{psp_bad}", "-o", f"eesp.keyfile:{eesp_bad}"]
    proc = tshark(["-n", "-r", str(path), "-2", "-T", "fields", "-e", "psp.status", "-e", "eesp.status", *opts],
                  profile=empty_profile, allow_stderr=True)
    assert [line.split("\t") for line in proc.stdout.splitlines()] == [
        ["no-key", ""], ["", "eesp-no-sa"], ["no-key", ""], ["", "eesp-no-sa"], ["no-key", ""]]
    err = proc.stderr
    assert secret not in err and MK0.hex() not in err
    psp_msgs = [l for l in err.splitlines() if str(psp_bad) in l]
    eesp_msgs = [l for l in err.splitlines() if str(eesp_bad) in l]
    assert len(psp_msgs) == 1 and len(eesp_msgs) == 1, err
    assert re.search(r"\bline 3\b|:3\b", psp_msgs[0]), f"no line number in {psp_msgs[0]!r}"
    assert re.search(r"\bline 3\b|:3\b", eesp_msgs[0]), f"no line number in {eesp_msgs[0]!r}"

    pkts = packets_json(path, profile=empty_profile, opts=[o for o in opts if o != "-o"], allow_stderr=True)
    for i, pkt in enumerate(pkts):
        proto, bad = ("psp", psp_bad) if i % 2 == 0 else ("eesp", eesp_bad)
        items = [(n, m, g, sv) for n, m, g, sv in expert_items(pkt) if n == f"{proto}.expert.configuration"]
        assert len(items) == 1, (i, expert_items(pkt))
        name, msg, group, severity = items[0]
        assert f"{bad}, line 3: " in msg and "(keyfile-bad-value)" in msg, msg
        assert secret not in msg and MK0.hex() not in msg
        assert (group, severity) == CATEGORY_LOOK["configuration"]
        assert status_expert(proto, "no-key" if proto == "psp" else "eesp-no-sa") in experts(pkt)


def test_unreadable_key_file_is_an_io_problem_on_every_packet(work, psp_files, psp_cases, empty_profile):
    """A key file that cannot be opened: the core's io category, on every packet left without a key."""
    missing = work / "no-such-keys.txt"
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=empty_profile, opts=[f"psp.keyfile:{missing}"],
                  allow_stderr=True)
    pkts = packets_json(psp_files["pcap-raw"], profile=empty_profile, opts=[f"psp.keyfile:{missing}"],
                        allow_stderr=True)
    for row, pkt, case in zip(rows, pkts, psp_cases):
        assert row["psp.status"] == ["no-key"], case.label
        io = [m for n, m, _, _ in expert_items(pkt) if n == "psp.expert.io"]
        assert len(io) == 1 and f"PSP key file {missing}: cannot open key file" in io[0] and "(capture-io)" in io[0]


# --------------------------------------------------------------------------- 5. sequence analysis


@pytest.fixture(scope="module")
def seq_capture(work):
    """Two Sub SAs interleaved; on Sub SA 1 a duplicate and a gap; Sub SA 2 in order throughout."""
    # one outer source and destination: a real SA runs between two hosts (the analysis keys on SPI + destination)
    spec = EespSpec("seq", 0x00003001, "aes-gcm-16", root_key=ROOT32, sskdf="hkdf-sha256",
                    sa_kw={"tunnel_header": ip_pkt(V4[0], V4[3], 0, b"")})
    sa = spec.sa()
    p = [flow_packet(500 + i, 4, 17) for i in range(12)]
    s1 = [sa.encrypt(p[i], 1) for i in range(3)]  # seq 1, 2, 3 on Sub SA 1
    s2 = [sa.encrypt(p[3 + i], 2) for i in range(4)]  # seq 1..4 on Sub SA 2
    sa.set_next_seq(6, 1)
    s1_gap = sa.encrypt(p[8], 1)  # seq 6 on Sub SA 1: 4 and 5 never sent
    s1_next = sa.encrypt(p[9], 1)  # seq 7
    frames = [
        ("1:1", s1[0]), ("2:1", s2[0]), ("1:2", s1[1]), ("2:2", s2[1]),
        ("1:2 dup", s1[1]),  # frame 5: a duplicate of frame 3
        ("1:3", s1[2]), ("2:3", s2[2]),
        ("1:6 gap", s1_gap),  # frame 8: expected 4
        ("2:4", s2[3]), ("1:7", s1_next),
    ]
    path = write_capture(work / "eesp-seq.pcapng", [f for _, f in frames], "pcapng")
    keyfile = write_text(work / "eesp-seq-keys.txt", spec.keyfile_line() + "\n")
    return path, frames, keyfile


@pytest.mark.parametrize("two_pass", [False, True], ids=["one-pass", "two-pass"])
def test_eesp_sequence_analysis_per_sub_sa(seq_capture, empty_profile, two_pass):
    path, frames, keyfile = seq_capture
    opts = [f"eesp.keyfile:{keyfile}"]
    extra = ["-2"] if two_pass else []
    rows = fields(path, ("eesp.session_id", "eesp.seq", "eesp.status", "eesp.replay",
                         "eesp.sequence_analysis_expected_sn", "eesp.sequence_analysis_previous_frame"),
                  profile=empty_profile, opts=opts, extra=extra)
    pkts = json.loads(tshark(["-n", "-r", str(path), "-T", "json", "--no-duplicate-keys", "-o", opts[0], *extra],
                             profile=empty_profile).stdout)
    want_seq = ["1", "1", "2", "2", "2", "3", "3", "6", "4", "7"]
    want_expected = ["1", "1", "2", "2", "3", "3", "3", "4", "4", "7"]
    want_prev = [[], [], ["1"], ["2"], ["3"], ["5"], ["4"], ["6"], ["7"], ["8"]]
    for i, (row, pkt, (label, _)) in enumerate(zip(rows, pkts, frames)):
        ex = experts(pkt)
        assert row["eesp.status"] == ["ok"], label
        assert row["eesp.session_id"] == [label[0]] and row["eesp.seq"] == [want_seq[i]], label
        assert row["eesp.sequence_analysis_expected_sn"] == [want_expected[i]], label
        assert row["eesp.sequence_analysis_previous_frame"] == want_prev[i], label
        if "dup" in label:
            assert row["eesp.replay"] == ["1"] and "eesp.expert.replay" in ex, label
        else:
            assert row["eesp.replay"] == [] and "eesp.expert.replay" not in ex, label
        if "gap" in label or "dup" in label:
            assert "eesp.expert.seq_wrong" in ex, label
        else:  # in order on its own Sub SA, however interleaved with the other
            assert "eesp.expert.seq_wrong" not in ex, (label, ex)


def test_eesp_sequence_analysis_can_be_switched_off(seq_capture, empty_profile):
    path, frames, keyfile = seq_capture
    rows = fields(path, ("eesp.status", "eesp.replay", "eesp.sequence_analysis_expected_sn", "_ws.expert.message"),
                  profile=empty_profile, opts=[f"eesp.keyfile:{keyfile}", "eesp.do_sequence_analysis:FALSE"])
    for row in rows:
        assert row["eesp.status"] == ["ok"]
        assert row["eesp.replay"] == row["eesp.sequence_analysis_expected_sn"] == row["_ws.expert.message"] == []


# --------------------------------------------------------------------------- 6. UDP 4500 and the preferences


def _esp_in_udp(i: int, sport: int = 4500, dport: int = 4500) -> bytes:
    esp = struct.pack("!II", 0x00001234 + i, i + 1) + bytes(range(40))
    return ip_pkt(V4[0], V4[1], 17, l4(17, V4[0], V4[1], sport, dport, esp))


def _ike(i: int, v6: bool = False) -> bytes:
    # non-ESP marker, then an IKE_SA_INIT request header (length 28: header only)
    ike = b"\0\0\0\0" + bytes.fromhex("0123456789abcdef" "0000000000000000") + bytes([0, 0x20, 34, 0x08]) + \
        struct.pack("!II", i, 28)
    src, dst = (V6[0], V6[1]) if v6 else (V4[0], V4[1])
    return ip_pkt(src, dst, 17, l4(17, src, dst, 4500, 4500, ike))


def _keepalive(v6: bool = False) -> bytes:
    src, dst = (V6[0], V6[1]) if v6 else (V4[0], V4[1])
    return ip_pkt(src, dst, 17, l4(17, src, dst, 4500, 4500, b"\xff"))


@pytest.fixture(scope="module")
def udp4500_capture(work):
    spec = EespSpec("udp", 0x80004001, "aes-gcm-16", key=_key(20, 50), mode="transport", options={"udp-encap": "1"},
                    sa_kw={"udp_encap": True})
    spec6 = EespSpec("udp6", 0x80004002, "chacha20-poly1305", key=_key(36, 51), options={"udp-encap": "1"},
                     sa_kw={"udp_encap": True}, families=(6,))
    sa, sa6 = spec.sa(), spec6.sa()
    items = []
    for i in range(4):
        items.append(("eesp", sa.encrypt(flow_packet(600 + i, 4, 17 if i % 2 else 6))))
        items.append(("esp", _esp_in_udp(i)))
        items.append(("ike", _ike(i, v6=i == 3)))
        items.append(("keepalive", _keepalive(v6=i == 2)))
        items.append(("eesp", sa6.encrypt(flow_packet(610 + i, 6, 17))))
    path = write_capture(work / "udp4500.pcapng", [p for _, p in items], "pcapng")
    keyfile = write_text(work / "udp4500-keys.txt", spec.keyfile_line() + "\n" + spec6.keyfile_line() + "\n")
    return path, items, keyfile


UDP4500_FIELDS = ("frame.protocols", "eesp.spi", "eesp.status", "esp.spi", "esp.sequence", "isakmp.ispi",
                  "isakmp.exchangetype", "udpencap.nat_keepalive", "udpencap.non_esp_marker", "udp.dstport")


def test_udp_4500_each_to_its_dissector(udp4500_capture, empty_profile):
    path, items, keyfile = udp4500_capture
    rows = fields(path, UDP4500_FIELDS, profile=empty_profile, opts=[f"eesp.keyfile:{keyfile}"])
    assert len(rows) == len(items)
    esp_i = 0
    for n, (row, (kind, pkt)) in enumerate(zip(rows, items), 1):
        protos = row["frame.protocols"][0].split(":")
        if kind == "eesp":
            assert "eesp" in protos and "esp" not in protos and "udpencap" not in protos, (n, protos)
            assert row["eesp.status"] == ["ok"], n
            assert row["udp.dstport"][0] == "4500" and row["esp.spi"] == [], n
        elif kind == "esp":
            assert protos[-2:] == ["udpencap", "esp"], (n, protos)
            assert row["esp.spi"] == [f"0x{0x1234 + esp_i:08x}"] and row["esp.sequence"] == [str(esp_i + 1)]
            assert row["eesp.spi"] == []
            esp_i += 1
        elif kind == "ike":
            assert "isakmp" in protos and "udpencap" in protos, (n, protos)
            assert row["isakmp.ispi"] == ["0123456789abcdef"] and row["isakmp.exchangetype"] == ["34"]
            assert row["udpencap.non_esp_marker"] == ["1"], n
            assert row["eesp.spi"] == []
        else:
            assert protos[-1] == "udpencap" and row["eesp.spi"] == [], (n, protos)
            assert row["udpencap.nat_keepalive"] == ["1"], n


def test_udp_4500_non_eesp_is_not_labelled_eesp(udp4500_capture, empty_profile):
    """ESP, IKE and keepalives go to udpencap "as before": the protocol stack must not claim an EESP layer
    (frame.protocols feeds the protocol hierarchy statistics and the `eesp` display filter's neighbours)."""
    path, items, keyfile = udp4500_capture
    rows = fields(path, ("frame.protocols",), profile=empty_profile, opts=[f"eesp.keyfile:{keyfile}"])
    wrong = [(n, r["frame.protocols"][0]) for n, (r, (kind, _)) in enumerate(zip(rows, items), 1)
             if kind != "eesp" and "eesp" in r["frame.protocols"][0].split(":")]
    assert wrong == [], f"non-EESP frames with an eesp layer: {wrong[:4]}"
    plain = fields(path, ("frame.protocols",), profile=empty_profile, plugin=None)
    for r, p, (kind, _) in zip(rows, plain, items):
        if kind != "eesp":
            assert r["frame.protocols"] == p["frame.protocols"]


def test_udp_dispatch_off_leaves_port_4500_to_udpencap(udp4500_capture, empty_profile):
    path, items, keyfile = udp4500_capture
    rows = fields(path, ("eesp.spi", "esp.spi", "isakmp.ispi"), profile=empty_profile,
                  opts=[f"eesp.keyfile:{keyfile}", "eesp.udp_dispatch:FALSE"])
    for row, (kind, pkt) in zip(rows, items):
        assert row["eesp.spi"] == [], kind
        if kind == "eesp":  # ESP's dissector reads the Base Header as an ESP header
            spi = struct.unpack("!I", eesp_bytes(pkt, True)[:4])[0]
            assert row["esp.spi"] == [f"0x{spi:08x}"]
        if kind == "ike":
            assert row["isakmp.ispi"] == ["0123456789abcdef"]


def test_udp_port_and_ip_protocol_preferences(work, empty_profile):
    spec_udp = EespSpec("port", 0x00005001, "aes-gcm-16", key=_key(20, 60), mode="transport",
                        sa_kw={"udp_encap": True, "udp_sport": 4600, "udp_dport": 4600})
    spec_ip = EespSpec("proto", 0x00005002, "aes-gcm-16", key=_key(20, 61), sa_kw={"ip_protocol": 253})
    spec_49 = EespSpec("proto49", 0x00005003, "aes-gcm-16", key=_key(20, 62))
    items = [("udp4600", spec_udp.sa().encrypt(flow_packet(800, 4, 17))),
             ("proto253", spec_ip.sa().encrypt(flow_packet(801, 4, 17))),
             ("proto49", spec_49.sa().encrypt(flow_packet(802, 6, 6))),
             ("esp4500", _esp_in_udp(5)), ("ike4500", _ike(5))]
    path = write_capture(work / "prefs.pcap", [p for _, p in items])
    keyfile = write_text(work / "prefs-keys.txt", "\n".join(s.keyfile_line() for s in (spec_udp, spec_ip, spec_49)) + "\n")
    names = ("eesp.spi", "eesp.status", "esp.spi", "isakmp.ispi")
    base = [f"eesp.keyfile:{keyfile}"]

    rows = fields(path, names, profile=empty_profile, opts=base)
    assert [r["eesp.status"] for r in rows] == [[], [], ["ok"], [], []]

    rows = fields(path, names, profile=empty_profile, opts=base + ["eesp.udp_port:4600", "eesp.ip_protocol:253"])
    assert [r["eesp.status"] for r in rows] == [["ok"], ["ok"], [], [], []]
    # port 4500 went back to udpencap
    assert rows[3]["esp.spi"] == [f"0x{0x1234 + 5:08x}"] and rows[4]["isakmp.ispi"] == ["0123456789abcdef"]


# --------------------------------------------------------------------------- 7. reference captures


def _manifest() -> List[dict]:
    m = REFERENCE / "manifest.csv"
    if not m.exists():
        return []
    with open(m, newline="") as f:
        return list(csv.DictReader(f))


def _ref_master_keys():
    return load_psp_ref_config(REFERENCE / "cfg" / "decrypt.cfg").master_keys


def _ref_keyfile_text() -> str:
    key0, key1 = _ref_master_keys()
    return f"psp-master key0={key0.hex()} key1={key1.hex()}\n"


REF_FIELDS = ("psp.status", "psp.spi", "psp.version", "psp.cryptoffset", "psp.is_virt", "psp.vc", "psp.iv",
              "psp.nexthdr", "psp.reserved0", "psp.icv", "psp.icv_bad") + LAYER_FIELDS


@pytest.fixture(scope="module")
def reference_run(work, empty_profile):
    """All reference captures in one tshark run each for the encrypted and the clear ones (manifest order)."""
    if not REFERENCE.is_dir():
        pytest.skip(f"reference captures not present: {REFERENCE}")
    cases = _manifest()
    enc = work / "ref-enc.pcapng"
    clear = work / "ref-clear.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(enc),
                    *(str(REFERENCE / "encrypted" / f"{c['case']}.enc.pcap") for c in cases)], check=True)
    subprocess.run(["mergecap", "-a", "-w", str(clear),
                    *(str(REFERENCE / "clear" / c["cleartext"]) for c in cases)], check=True)
    _readable(enc), _readable(clear)
    keyfile = write_text(work / "ref-keys.txt", _ref_keyfile_text())
    opts = [f"psp.keyfile:{keyfile}"]
    enc_rows = fields(enc, REF_FIELDS, profile=empty_profile, opts=opts)
    enc_json = packets_json(enc, profile=empty_profile, opts=opts)
    clear_rows = fields(clear, LAYER_FIELDS, profile=empty_profile)
    assert len(enc_rows) == len(clear_rows) == len(cases) == len(enc_json)
    frames = [r.data for c in cases for r in read_capture(REFERENCE / "encrypted" / f"{c['case']}.enc.pcap")]
    return {c["case"]: (c, e, j, cl, f) for c, e, j, cl, f in zip(cases, enc_rows, enc_json, clear_rows, frames)}


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
@pytest.mark.parametrize("case", [c["case"] for c in _manifest()])
def test_reference_capture(reference_run, case):
    info, row, pkt, clear, frame = reference_run[case]
    ip = frame[14:]
    h = pypsp.Header.parse(psp_of(ip))
    assert row["psp.spi"] == [f"0x{h.spi:08x}"] and row["psp.version"] == [str(h.version)]
    assert row["psp.cryptoffset"] == [str(h.crypt_offset)] and row["psp.iv"] == [f"0x{h.iv:016x}"]
    vc = h.vc
    if h.virt and row["psp.status"] == ["ok"]:  # shown decrypted when the crypt offset covers it
        vc = pypsp.Decryptor(master_keys=_ref_master_keys()).decrypt(ip).header.vc
    assert row["psp.is_virt"] == b(h.virt) and row["psp.vc"] == ([f"0x{vc.hex()}"] if h.virt else [])
    ex = experts(pkt)
    if info["kind"] == "corrupt-after-seal":
        # the reference tool set a reserved bit after sealing: the header shows it, the ICV fails
        assert row["psp.reserved0"] != ["0"]
        assert row["psp.status"] == ["authentication-failed"] and row["psp.icv_bad"] == ["1"]
        assert "psp.expert.authentication" in ex
        return
    assert row["psp.status"] == ["ok"]
    assert not [e for e in ex if e.startswith("psp.")], ex
    # the decrypted inner layers are the clear capture's layers
    tunnel = "_tunnel_" in case
    for name in ("ip.dst", "ipv6.dst"):
        if clear[name]:
            assert row[name][-1] == clear[name][-1], name
    assert row["udp.dstport"] == [str(PSP_PORT)] + clear["udp.dstport"]
    assert row["udp.payload"][1:] == clear["udp.payload"]
    assert len(row["ip.dst"] + row["ipv6.dst"]) == (2 if tunnel else 1)


# --------------------------------------------------------------------------- 8. robustness


@pytest.fixture(scope="module")
def fuzz_inputs(work, psp_files, psp_error_capture, eesp_files, eesp_error_capture, seq_capture, udp4500_capture):
    """Every capture above (and the reference ones), fuzzed at several rates and cut at several lengths, merged
    into one file; one key file with all the keys."""
    sources = [psp_files["pcapng-ether"], psp_files["pcap-raw"], psp_error_capture[0], eesp_files["pcap-ether"],
               eesp_files["pcapng-raw"], eesp_error_capture[0], seq_capture[0], udp4500_capture[0]]
    if REFERENCE.is_dir():
        sources += sorted((REFERENCE / "encrypted").glob("*.pcap"))
    base = work / "fuzz-base.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(base), *map(str, sources)], check=True)
    variants = []
    for rate in ("0.01", "0.05", "0.2"):
        for seed in ("1", "2", "3"):
            out = work / f"fuzz-E{rate}-s{seed}.pcapng"
            editcap("-E", rate, "--seed", seed, str(base), str(out))
            variants.append(out)
        # the same rate past the Ethernet + IPv4 + UDP headers, so that more of the errors land in PSP/EESP
        out = work / f"fuzz-E{rate}-o42.pcapng"
        editcap("-E", rate, "--seed", "4", "-o", "42", str(base), str(out))
        variants.append(out)
    for snap in ("20", "40", "60"):
        out = work / f"fuzz-s{snap}.pcapng"
        editcap("-s", snap, str(base), str(out))
        variants.append(out)
    merged = work / "fuzz-all.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(merged), *map(str, variants)], check=True)
    _readable(merged)
    keyfile = write_text(work / "fuzz-keys.txt", psp_keyfile_text() + eesp_keyfile_text() +
                       "\n".join(l for l in open(seq_capture[2]).read().splitlines()) + "\n" +
                       open(udp4500_capture[2]).read())
    return merged, variants, keyfile


def _fuzz_args(cap: Path, keyfile: Optional[Path]) -> List[str]:
    """Two passes (sequence analysis revisits packets) and the full tree; with the keys every decryption path
    runs, without them the Base Header / GMAC-in-clear paths do."""
    keys = ["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"] if keyfile else []
    return ["-n", "-r", str(cap), "-2", "-V", *keys, "-o", "eesp.do_sequence_analysis:TRUE"]


def _check_fuzz_run(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, f"{what}: tshark exited {proc.returncode}\n{proc.stderr[-4000:]}"
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr, f"{what}: {marker!r} on stderr\n{proc.stderr[-4000:]}"
    assert "Dissector bug" not in proc.stdout, what
    assert "PSP Security Protocol" in proc.stdout and "Enhanced Encapsulating Security Payload" in proc.stdout


@pytest.mark.parametrize("keys", [True, False], ids=["keys", "no-keys"])
def test_fuzzed_and_cut_captures_plain(fuzz_inputs, empty_profile, keys):
    merged, variants, keyfile = fuzz_inputs
    proc = ws.run([*QUIET, *_fuzz_args(merged, keyfile if keys else None)], profile=empty_profile, check=False,
                  timeout=300)
    _check_fuzz_run(proc, "plain plugin")


@pytest.mark.parametrize("keys", [True, False], ids=["keys", "no-keys"])
def test_fuzzed_and_cut_captures_asan(fuzz_inputs, empty_profile, asan_env, keys):
    merged, variants, keyfile = fuzz_inputs
    proc = ws.run([*QUIET, *_fuzz_args(merged, keyfile if keys else None)], profile=empty_profile, plugin="asan",
                  env=asan_env, check=False, timeout=600)
    _check_fuzz_run(proc, "ASan plugin")


def test_clean_captures_asan(psp_files, eesp_files, seq_capture, empty_profile, asan_env, psp_cases):
    """The ASan build decrypts as the plain one does (so the fuzz run above did load it)."""
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=empty_profile, plugin="asan", env=asan_env,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    assert [r["psp.status"] for r in rows] == [["ok"]] * len(psp_cases)
    rows = fields(eesp_files["pcap-ether"], ("eesp.status",), profile=empty_profile, plugin="asan", env=asan_env,
                  opts=[f"eesp.keyfile:{eesp_files['keyfile']}"], extra=["-2"])
    assert {r["eesp.status"][0] for r in rows} == {"ok"}


# --------------------------------------------------------------------------- 9. one expert item per status category


VECTORS = ws.ROOT / "vectors" / "pcap"
# Vector groups (vectors/README.md) that hold, between them, every packet status of both protocols the core's
# vectors have: the decoder's rejections, no key, dummy packets, replays (stateful group 6).
WALK_VECTORS = ("psp_v0_g01", "psp_v0_g05", "eesp_aes-ccm-12_g01", "eesp_aes-ccm-12_g02", "eesp_aes-ccm-12_g06",
                "eesp_aes-ccm-12_g07")
# Every status the walk must meet: each one the plugin shows for a packet, a capture or a key file.
WALK_STATUSES = {
    "authentication-failed", "no-key", "psp-truncated", "psp-always-one-bit-clear", "psp-unsupported-version",
    "psp-bad-hdr-ext-len", "psp-vc-without-room", "psp-crypt-offset-past-payload",
    "eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
    "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-bad-payload-offset",
    "eesp-crypt-offset-past-payload", "eesp-crypt-offset-not-allowed", "eesp-unknown-option", "eesp-no-sa",
    "eesp-sub-sa-out-of-range", "eesp-sequence-zero", "eesp-bad-pad-length", "eesp-bad-inner-packet",
    "eesp-dummy-packet", "replay-duplicate", "capture-packet-cut",
    "keyfile-syntax", "keyfile-bad-value", "keyfile-duplicate", "capture-io", "invalid-argument",
}
STATUS_IN_MESSAGE = re.compile(r"\(([a-z0-9-]+)\)$")


def category_items(pkt: dict) -> List[tuple]:
    """(protocol, category, status named by the message, field, group, severity) of a packet's status items."""
    out = []
    for name, msg, group, severity in expert_items(pkt):
        proto, _, cat = name.partition(".expert.")
        if proto in ("psp", "eesp") and cat.replace("_", "-") in CATEGORY_LOOK:
            m = STATUS_IN_MESSAGE.search(msg)
            assert m, f"{name}: the message names no status: {msg!r}"
            out.append((proto, cat.replace("_", "-"), m.group(1), name, group, severity))
    return out


@pytest.fixture(scope="module")
def status_walk(work, empty_profile, psp_files, eesp_files, psp_cut_capture) -> List[tuple]:
    """(where, -T json packet) of every run: the vector groups with their keys, cut captures, bad key files."""
    runs = []
    for group in WALK_VECTORS:
        cap, keys = work / f"{group}.pcap", work / f"{group}.keys"
        shutil.copy(VECTORS / f"{group}.pcap", cap)
        shutil.copy(VECTORS / f"{group}.keys", keys)
        _readable(cap), _readable(keys)
        runs.append((group, cap, [f"psp.keyfile:{keys}", f"eesp.keyfile:{keys}"], ["-2"]))
    eesp_cut = work / "walk-eesp-cut.pcap"
    editcap("-s", "80", str(eesp_files["pcap-ether"]), str(eesp_cut))
    runs.append(("psp cut", psp_cut_capture, [f"psp.keyfile:{psp_files['keyfile']}"], []))
    runs.append(("eesp cut", eesp_cut, [f"eesp.keyfile:{eesp_files['keyfile']}"], []))
    both = work / "walk-both.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(both), str(VECTORS / "psp_v0_g05.pcap"),
                    str(VECTORS / "eesp_aes-ccm-12_g02.pcap")], check=True)
    _readable(both)
    sa_line = next(l for l in (VECTORS / "eesp_aes-ccm-12_g02.keys").read_text().splitlines()
                   if l.startswith("eesp-sa"))
    bad_files = {
        "keyfile-syntax": ("psp-master key0\n", "key0=00\n"),
        "keyfile-bad-value": (f"psp-master key0={MK0.hex()[:-1]}z\n", "eesp-sa spi=0x6001 suite=nonsense key=00\n"),
        "keyfile-duplicate": (f"psp-master key0={MK0.hex()}\npsp-master key1={MK1.hex()}\n",
                              f"{sa_line}\n{sa_line}\n"),
        "capture-io": (None, None),
    }
    for status, (psp_text, eesp_text) in bad_files.items():
        opts = []
        for proto, text in (("psp", psp_text), ("eesp", eesp_text)):
            path = work / f"walk-{status}-{proto}.keys"
            if text is not None:
                write_text(path, text)
            opts.append(f"{proto}.keyfile:{path}")
        runs.append((status, both, opts, []))
    # Above the core's limit for a key file (a sparse file: nothing is written); the same SA in the table and
    # the file (the receiver refuses the second).
    huge = work / "walk-huge.keys"
    with open(huge, "wb") as f:
        f.truncate(16 * 1024 * 1024 + 1)
    _readable(huge)
    dup = EespSpec("walk-dup", 0x00006101, "aes-gcm-16", key=_key(20, 90))
    dup_keys = write_text(work / "walk-dup.keys", dup.keyfile_line() + "\n")
    runs.append(("invalid-argument", both, [f"psp.keyfile:{huge}", f"eesp.keyfile:{dup_keys}",
                                            f"uat:eesp_sa:{dup.uat_row()}"], []))
    out = []
    for where, cap, opts, extra in runs:
        args = ["-n", "-r", str(cap), *QUIET, "-T", "json", "--no-duplicate-keys", *extra]
        for o in opts:
            args += ["-o", o]
        proc = tshark(args, profile=empty_profile, allow_stderr=True)
        out += [(where, pkt) for pkt in json.loads(proc.stdout)]
    return out


def test_every_status_gets_the_expert_item_of_its_category(status_walk):
    """Every status the plugin shows (a packet's, a replay found by sequence analysis, a key file's) gets the
    expert item its core category names, <proto>.expert.<category>, with that category's group and severity;
    the item's message ends in the status name."""
    seen = set()
    for where, pkt in status_walk:
        items = category_items(pkt)
        for proto in ("psp", "eesp"):
            status = layer(pkt, proto).get(f"{proto}.status")
            if status and status != "ok":
                assert any(i[3] == status_expert(proto, status) and i[2] == status for i in items), \
                    (where, proto, status, items)
        for proto, category, status, name, group, severity in items:
            seen.add(status)
            assert status in CATEGORY_BY_CODE, (where, status)
            assert name == status_expert(proto, status), (where, status, name)
            assert (group, severity) == CATEGORY_LOOK[category], (where, name)
    assert WALK_STATUSES <= seen, f"never met: {sorted(WALK_STATUSES - seen)}"


def test_every_category_has_its_expert_item_per_protocol(empty_profile):
    """One item per category (but ok) and protocol: the names the Lua dissectors register too."""
    out = tshark(["-G", "fields"], profile=empty_profile).stdout
    names = {line.split("\t")[2] for line in out.splitlines() if line.startswith("F\t")}
    for proto in ("psp", "eesp"):
        ours = {n for n in names if n.startswith(f"{proto}.expert.")}
        assert set(CATEGORY_EXPERTS[proto]) <= ours
        assert len(CATEGORY_EXPERTS[proto]) == len(CATEGORIES) - 1
        # the items not about a status
        assert ours - set(CATEGORY_EXPERTS[proto]) == {
            "psp": {"psp.expert.gmac_unverified", "psp.expert.udp_zero_checksum"},
            "eesp": {"eesp.expert.seq_wrong", "eesp.expert.udp_zero_checksum", "eesp.expert.udp_bad_checksum"}}[proto]


# --------------------------------------------------------------------------- 10. google/psp reference configs


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
@pytest.mark.parametrize("cfg", ["decrypt.cfg", "encrypt_tunnel_crypt_off_256_vc.cfg",
                                 "encrypt_transport_no_crypt_off_128.cfg"])
def test_reference_config_as_key_file(work, reference_run, empty_profile, cfg):
    """docs/keys.md: every reader takes the google/psp reference configs unchanged.  The key-file preference
    reads one's master keys (psp_decrypt reads only those): the reference captures decrypt as with a key file;
    as the EESP key file it gives no SA and no complaint."""
    path = work / f"ref-{cfg}"
    shutil.copy(REFERENCE / "cfg" / cfg, path)
    _readable(path)
    enc = work / "ref-enc.pcapng"
    rows = fields(enc, ("psp.status",), profile=empty_profile,
                  opts=[f"psp.keyfile:{path}", f"eesp.keyfile:{path}"])
    want = [row["psp.status"] for _, row, _, _, _ in reference_run.values()]
    assert [r["psp.status"] for r in rows] == want
    assert {s for w in want for s in w} == {"ok", "authentication-failed"}


def test_broken_reference_config_is_reported(work, psp_files, empty_profile):
    """A reference config cut short: a configuration problem naming the file and the line, never a key."""
    text = (REFERENCE / "cfg" / "decrypt.cfg").read_text() if REFERENCE.is_dir() else \
        " ".join(f"{b:02x}" for b in MK0) + "\n" + " ".join(f"{b:02x}" for b in MK1) + "\n"
    lines = text.splitlines()
    broken = write_text(work / "ref-broken.cfg", lines[0] + "\n" + " ".join(lines[1].split()[:10]) + "\n")
    pkts = packets_json(psp_files["pcap-raw"], profile=empty_profile, opts=[f"psp.keyfile:{broken}"],
                        allow_stderr=True)
    for pkt in pkts:
        msgs = [m for n, m, _, _ in expert_items(pkt) if n == "psp.expert.configuration"]
        assert len(msgs) == 1 and f"PSP key file {broken}, line 2: google/psp reference config: " in msgs[0], msgs
        assert "(keyfile-syntax)" in msgs[0]
        assert lines[1].split()[9] + " " not in msgs[0].split("config: ", 1)[1]


# --------------------------------------------------------------------------- 11. PSP and EESP win on their ports


DNS_QUERY = bytes.fromhex("12340100000100000000000003777777076578616d706c6503636f6d0000010001")


def _with_udp_ports(outer: bytes, sport: Optional[int] = None, dport: Optional[int] = None) -> bytes:
    """The IPv4 packet with other UDP ports and no UDP checksum (0: none, for IPv4)."""
    ihl = (outer[0] & 15) * 4
    udp = bytearray(outer[ihl:])
    if sport is not None:
        udp[0:2] = struct.pack("!H", sport)
    if dport is not None:
        udp[2:4] = struct.pack("!H", dport)
    udp[6:8] = b"\0\0"
    return outer[:ihl] + bytes(udp)


@pytest.fixture(scope="module")
def low_udp_ports(empty_profile) -> Dict[int, str]:
    """Every UDP port below 1024 with a dissector of the tshark under test (without the plugin), but 0."""
    out = ws.run(["-G", "decodes"], plugin=None, profile=empty_profile).stdout
    ports = {}
    for line in out.splitlines():
        table, port, name = (line.split("\t") + ["", "", ""])[:3]
        if table == "udp.port" and 0 < int(port) < 1024 and int(port) != PSP_PORT:
            ports[int(port)] = name
    assert len(ports) > 40, out[-2000:]  # 4.0 has 57
    return ports


@pytest.fixture(scope="module")
def precedence_capture(work, low_udp_ports):
    """For every low port p: PSP p -> 1000, EESP p -> 4500 (then ESP and IKE p -> 4500); traffic that is not to our
    ports: 1000 -> p and p -> 40000 (a DNS query's bytes)."""
    enc = pypsp.Encryptor(spi=0x00007001, master_keys=(MK0, MK1), version=1)
    spec = EespSpec("prec", 0x80007002, "aes-gcm-16", key=_key(20, 80), mode="transport",
                    options={"udp-encap": "1"}, sa_kw={"udp_encap": True})
    sa = spec.sa()
    items = []
    for i, p in enumerate(sorted(low_udp_ports)):
        items.append(("psp", p, _with_udp_ports(enc.encrypt(flow_packet(1000 + i, 4, 17)), sport=p)))
        items.append(("eesp", p, _with_udp_ports(sa.encrypt(flow_packet(1300 + i, 4, 17)), sport=p)))
        items.append(("esp", p, _esp_in_udp(i, sport=p)))
        items.append(("ike", p, _with_udp_ports(_ike(i), sport=p)))
        items.append(("from-psp-port", p, ip_pkt(V4[0], V4[1], 17, l4(17, V4[0], V4[1], PSP_PORT, p, DNS_QUERY))))
        items.append(("unrelated", p, ip_pkt(V4[0], V4[1], 17, l4(17, V4[0], V4[1], p, 40000, DNS_QUERY))))
    path = write_capture(work / "precedence.pcap", [pkt for _, _, pkt in items])
    keyfile = write_text(work / "precedence-keys.txt", f"psp-master key0={MK0.hex()} key1={MK1.hex()}\n"
                                                       + spec.keyfile_line() + "\n")
    return path, items, keyfile


PRECEDENCE_FIELDS = ("frame.protocols", "psp.status", "eesp.status")


def _check_precedence(rows, plain, items, low_udp_ports, psp_port=PSP_PORT):
    assert len(rows) == len(plain) == len(items)
    for row, base, (kind, p, _) in zip(rows, plain, items):
        protos = row["frame.protocols"][0].split(":")
        where = (kind, p, low_udp_ports[p], row["frame.protocols"][0])
        if kind == "psp":
            assert protos[protos.index("udp") + 1] == "psp" and row["psp.status"] == ["ok"], where
        elif kind == "eesp":
            assert protos[protos.index("udp") + 1] == "eesp" and row["eesp.status"] == ["ok"], where
        elif kind in ("esp", "ike", "unrelated"):
            # not EESP, or not to our ports: where Wireshark sends it without the plugin
            assert row["frame.protocols"] == base["frame.protocols"], where
            assert row["psp.status"] == row["eesp.status"] == [], where
        elif p > psp_port:
            # from PSP's port to a higher one: UDP tries the lower port first, PSP's, as it always did
            assert protos[protos.index("udp") + 1] == "psp", where
        else:
            # from PSP's port to a lower one: that port's dissector first, as UDP has it; PSP only where it declines
            if row["frame.protocols"] != base["frame.protocols"]:
                assert protos[-1] == "psp" and low_udp_ports[p] not in base["frame.protocols"][0].split(":"), where


def test_psp_and_eesp_win_on_their_destination_port(precedence_capture, low_udp_ports, empty_profile):
    """A PSP packet to 1000 (an EESP one to 4500) is PSP (EESP) from every source port below 1024 that has a UDP
    dissector of its own; other traffic from or to those ports goes where Wireshark sends it without the plugin."""
    path, items, keyfile = precedence_capture
    opts = [f"psp.keyfile:{keyfile}", f"eesp.keyfile:{keyfile}"]
    rows = fields(path, PRECEDENCE_FIELDS, profile=empty_profile, opts=opts)
    plain = fields(path, ("frame.protocols",), profile=empty_profile, plugin=None)
    _check_precedence(rows, plain, items, low_udp_ports)
    assert {p for k, p, _ in items if k == "psp"} == set(low_udp_ports)
    # a low port the plugin had to beat: 631 (CUPS) in the issue, DNS and IKE here
    assert {53, 500} <= set(low_udp_ports)


def test_precedence_survives_decode_as_and_follows_the_port_preference(work, precedence_capture, low_udp_ports):
    """A profile's Decode As entries (loading them resets every changed entry) leave the precedence in place; a
    Decode As of PSP's own port to another protocol is the user's choice and wins; the port preference moves
    PSP's precedence with PSP."""
    path, items, keyfile = precedence_capture
    opts = [f"psp.keyfile:{keyfile}", f"eesp.keyfile:{keyfile}"]
    header = "# \"Decode As\" entries file for Wireshark.\n"
    other = _profile(work, "decode-as-other", {"decode_as_entries": header + "decode_as_entry: udp.port,5555,(none),DNS\n"})
    rows = fields(path, PRECEDENCE_FIELDS, profile=other, opts=opts)
    plain = fields(path, ("frame.protocols",), profile=other, plugin=None)
    _check_precedence(rows, plain, items, low_udp_ports)

    mine = _profile(work, "decode-as-psp-port", {"decode_as_entries": header + f"decode_as_entry: udp.port,{PSP_PORT},PSP,DNS\n"})
    rows = fields(path, PRECEDENCE_FIELDS, profile=mine, opts=opts)
    for row, (kind, p, _) in zip(rows, items):
        if kind == "psp":
            assert row["psp.status"] == [] and "dns" in row["frame.protocols"][0].split(":"), (p, row)

    moved = [_with_udp_ports(pkt, dport=2000) if kind == "psp" else pkt for kind, _, pkt in items]
    moved_path = write_capture(work / "precedence-2000.pcap", moved)
    rows = fields(moved_path, PRECEDENCE_FIELDS, profile=_profile(work, "psp-port-2000", {}),
                  opts=opts + ["psp.udp.port:2000"])
    for row, (kind, p, _) in zip(rows, items):
        if kind == "psp":
            assert row["psp.status"] == ["ok"], (p, row)


# --------------------------------------------------------------------------- 12. what a person sees


def test_no_key_packets_say_so_in_the_info_column(psp_files, eesp_files, psp_cases, eesp_cases, empty_profile):
    """"[no key]" in the Info column of a packet no key opens; a GMAC one keeps it before the inner packet's."""
    for cap, cases in ((psp_files["pcap-raw"], psp_cases), (eesp_files["pcap-ether"], eesp_cases)):
        rows = fields(cap, ("_ws.col.Info",), profile=empty_profile)
        assert len(rows) == len(cases)
        for row, case in zip(rows, cases):
            info = row["_ws.col.Info"][0]
            if getattr(case, "header", None) is not None and case.header.version >= 2:
                assert re.search(r" AES-GMAC-(128|256) \[no key\] \S", info), (case.label, info)
            else:
                assert info.endswith(" [no key]"), (case.label, info)
    rows = fields(psp_files["pcap-raw"], ("_ws.col.Info",), profile=empty_profile,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    assert not [r for r in rows if "[no key]" in r["_ws.col.Info"][0]]


def test_sd_bits_are_shown_once(psp_files, psp_cases, empty_profile):
    """The S and D bits have their rows; google/psp's name for them (psp.reserved1) stays a filter, not a row."""
    out = tshark(["-n", "-r", str(psp_files["pcap-raw"]), *QUIET, "-V", "-O", "psp"], profile=empty_profile).stdout
    assert "Sample (S)" in out and "Drop after sampling (D)" in out
    assert "S/D bits" not in out and "google/psp" not in out
    both = [i + 1 for i, c in enumerate(psp_cases) if c.header.sample and c.header.drop]
    rows = fields(psp_files["pcap-raw"], ("frame.number",), profile=empty_profile, extra=["-Y", "psp.reserved1 == 3"])
    assert [int(r["frame.number"][0]) for r in rows] == both and both


def test_ipv6_zero_udp_checksum_is_explained(work, empty_profile):
    """Wireshark calls checksum 0 over IPv6 illegal (udp.checksum.zero, an error on every packet the PSP reference
    sends).  RFC 6936 allows it for tunnels, and PSP's reference sends it: PSP adds a note saying so and naming
    UDP's preference; with the preference set Wireshark flags nothing, and neither does PSP.  EESP over IPv6
    computes the checksum (eesp.md D17): a zero one, or a wrong one, gets EESP's warning whatever UDP's
    preferences say, on a packet decrypted all the same.  A real checksum, or IPv4, gets nothing."""
    enc = pypsp.Encryptor(spi=0x00007101, master_keys=(MK0, MK1))
    sa = EespSpec("zero", 0x80007102, "aes-gcm-16", key=_key(20, 81), mode="transport", options={"udp-encap": "1"},
                  sa_kw={"udp_encap": True}).sa()
    v6 = enc.encrypt(flow_packet(1400, 6, 17))
    o = parse_ip(v6)
    v6_summed = v6[:40] + l4(17, V6[0], o.dst, *struct.unpack("!HH", v6[40:44]), v6[48:])
    e6 = sa.encrypt(flow_packet(1402, 6, 17))
    assert e6[46:48] != b"\0\0"
    e6_zero, e6_wrong = e6[:46] + b"\0\0" + e6[48:], e6[:46] + bytes([e6[46] ^ 1, e6[47]]) + e6[48:]
    packets = [v6, v6_summed, enc.encrypt(flow_packet(1401, 4, 17)), e6, e6_zero, e6_wrong]
    assert v6[46:48] == b"\0\0" and v6_summed[46:48] != b"\0\0"
    path = write_capture(work / "zero-checksum.pcap", packets)
    ours = ("udp.checksum.zero", "psp.expert.udp_zero_checksum", "eesp.expert.udp_zero_checksum",
            "eesp.expert.udp_bad_checksum")
    want = [["udp.checksum.zero", "psp.expert.udp_zero_checksum"], [], [], [],
            ["udp.checksum.zero", "eesp.expert.udp_zero_checksum"], ["eesp.expert.udp_bad_checksum"]]
    quiet = [[], [], [], [], ["eesp.expert.udp_zero_checksum"], ["eesp.expert.udp_bad_checksum"]]
    for ignore, expect in (("FALSE", want), ("TRUE", quiet)):
        proc = ws.run(["-n", "-r", str(path), "-T", "json", "--no-duplicate-keys", "-o",
                       f"udp.ignore_ipv6_zero_checksum:{ignore}"], profile=empty_profile)
        pkts = json.loads(proc.stdout)
        got = [[n for n in experts(p) if n in ours] for p in pkts]
        assert got == expect, ignore
        items = {n: (g, sv) for p in pkts for n, _, g, sv in expert_items(p) if n in ours[1:]}
        assert items.pop("psp.expert.udp_zero_checksum", (PI_CHECKSUM, PI_NOTE)) == (PI_CHECKSUM, PI_NOTE)
        assert set(items.values()) == {(PI_CHECKSUM, PI_WARN)} and len(items) == 2, items
