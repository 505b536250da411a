"""Shared by the tests of the Wireshark plugin (dissectors/plugin: psp_eesp.so) through tshark
(test_wireshark_plugin*.py): building the plugin, running tshark, and the PSP and EESP captures made by pypsp
and pyeesp with what the Python libraries say each packet holds.
"""
from __future__ import annotations

import fcntl
import ipaddress
import json
import os
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
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, CaptureWriter
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE
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

@pytest.fixture(scope="module")
def psp_cut_capture(work, psp_files):
    cut = work / "psp-cut.pcapng"
    # Ethernet + IPv6 + UDP + the 16-octet PSP header fit in 90 octets; every packet is longer
    editcap("-s", "90", str(psp_files["pcapng-ether"]), str(cut))
    return cut

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

