"""The Lua dissectors (dissectors/lua/psp.lua, eesp.lua) and their C module pelua, inside tshark.

Captures come from the Python packages (pypsp / pyeesp encrypt_capture); what each packet holds
is computed again with the libraries (pypsp.Header / Decryptor, pyeesp.Receiver) and compared
with tshark's fields.  tshark runs without the C plugin (plugin=None): the plugin registers the
same field names.  One tshark run per capture, with many fields, keeps the file fast.

Without pelua the scripts decrypt in Lua where Wireshark has GcryptCipher (4.6+) and only
dissect elsewhere; tests/wireshark/test_lua_pure.py checks that path against the core in depth.

Every path must show what the C plugin shows: the same status for a packet and the same expert
items (one per status category, named after it), also for bad input (cut, truncated, a bad key
file); the "beside the plugin" tests run both on the same captures and compare.
"""
from __future__ import annotations

import csv
import functools
import importlib.util
import ipaddress
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

import wireshark as ws
from conftest import REPO_ROOT, SHARED_DIR

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")
from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter, read_capture  # noqa: E402
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE  # noqa: E402
from pecore.keys import load_psp_ref_config  # noqa: E402

if not Path(ws.TSHARK).exists():
    pytest.skip("tshark is not installed (bash scripts/install.sh installs it)", allow_module_level=True)

PSP_LUA = ws.LUA_DIR / "psp.lua"
EESP_LUA = ws.LUA_DIR / "eesp.lua"
SCRIPTS = [PSP_LUA, EESP_LUA]
PELUA = ws.LUA_MODULE_DIR / "pelua.so"
REF = SHARED_DIR / "reference" / "psp"

# The public master keys of the PSP spec vectors and the reference configs (docs/keys.md).
MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
EESP_ROOT = bytes(range(32))
EESP_KEY_2000 = bytes(range(0x40, 0x64))  # chacha20-poly1305 key || salt (36 octets)
KEYS = f"""# test keys (public test values only)
psp-master key0={MK0.hex()} key1={MK1.hex()}
eesp-sa spi=0x1000 suite=aes-gcm-16 root-key={EESP_ROOT.hex()} sskdf=hkdf-sha256 mode=tunnel max-sub-sa-id=7
eesp-sa spi=0x2000 suite=chacha20-poly1305 key={EESP_KEY_2000.hex()} mode=transport udp-encap=1
eesp-sa spi=0x3000 suite=aes-gcm-16 key={bytes(range(20)).hex()} mode=tunnel ip-protocol=253
eesp-sa spi=0x4000 suite=aes-gcm-16 key={bytes(range(1, 21)).hex()} mode=transport max-crypt-offset=8
eesp-sa spi=0x5000 suite=aes-gcm-16 key={bytes(range(2, 22)).hex()} mode=transport
"""
WRONG_KEYS = f"psp-master key0={bytes(32).hex()} key1={(bytes([0x11]) * 32).hex()}\n"

PSP_FIELDS = [
    "frame.number", "psp.spi", "psp.iv", "psp.version", "psp.nexthdr", "psp.hdrextlen", "psp.cryptoffset",
    "psp.is_virt", "psp.one_bit", "psp.master_key", "psp.vc", "psp.sectoken", "psp.virtkey", "psp.status",
    "psp.icv_good", "psp.icv_bad", "psp.icv", "ip.dst", "ipv6.dst", "udp.dstport", "tcp.dstport", "_ws.expert",
    "_ws.expert.message", "_ws.malformed", "frame.protocols",
]
EESP_FIELDS = [
    "frame.number", "eesp.spi", "eesp.session_id", "eesp.seq", "eesp.compat", "eesp.version", "eesp.opt_len",
    "eesp.option.type", "eesp.option.len", "eesp.option.payload_offset", "eesp.option.crypt_offset", "eesp.iv", "eesp.icv", "eesp.next_header", "eesp.pad_len", "eesp.format", "eesp.suite",
    "eesp.status", "eesp.icv_good", "eesp.icv_bad", "eesp.data", "ip.dst", "ipv6.dst", "udp.dstport",
    "tcp.dstport", "esp.spi", "isakmp.ispi", "_ws.expert.message", "_ws.malformed", "frame.protocols",
]


# ---------------------------------------------------------------------------------------------- helpers

def _sample_traffic():
    spec = importlib.util.spec_from_file_location("sample_traffic", REPO_ROOT / "demo" / "sample_traffic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def write_frames(path: Path, ip_packets: Sequence[bytes], ts0: int = 1_700_000_000) -> Path:
    st = _sample_traffic()
    with CaptureWriter(path, LINKTYPE_ETHERNET, "pcap") as w:
        for i, pkt in enumerate(ip_packets):
            etype = b"\x08\x00" if pkt[0] >> 4 == 4 else b"\x86\xdd"
            w.write(st.MAC_B + st.MAC_A + etype + pkt, (ts0 + i, 1000 * i))
    path.chmod(0o644)
    return path


def clear_packets(n: int = 8, seed: int = 0) -> List[bytes]:
    """Small IPv4/IPv6, TCP/UDP packets with distinct destination ports."""
    st = _sample_traffic()
    v6a = bytes.fromhex("20010db8000000000000000000000001")
    v6b = bytes.fromhex("20010db8000000000000000000000002")
    out = []
    for i in range(n):
        proto = (17, 6)[i % 2]
        dport = 5000 + 10 * seed + i
        size = (0, 3, 40, 100)[i % 4]
        payload = bytes((i * 7 + j) & 0xFF for j in range(size))
        if (i // 2) % 2 == 0:
            out.append(st.ipv4("10.1.0.1", f"10.1.{seed}.{i + 2}", proto, 40000 + i, dport, payload, i))
        else:
            dst = v6b[:-1] + bytes([i + 2 + seed])
            out.append(st.ipv6(v6a, dst, proto, 40000 + i, dport, payload, i))
    return out


def ip_payload(ip: bytes) -> Tuple[int, bytes, int, bytes]:
    """(version, destination octets, protocol, payload) of an IPv4/IPv6 packet without extension headers."""
    if ip[0] >> 4 == 4:
        ihl = (ip[0] & 0xF) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        return 4, ip[16:20], ip[9], ip[ihl:total]
    plen = struct.unpack("!H", ip[4:6])[0]
    return 6, ip[24:40], ip[6], ip[40 : 40 + plen]


def udp_payload(ip: bytes) -> bytes:
    _, _, proto, l4 = ip_payload(ip)
    assert proto == 17
    return l4[8:]


def addr_text(raw: bytes) -> str:
    return str(ipaddress.ip_address(raw))


def l4_dport(proto: int, seg: bytes) -> Optional[str]:
    if proto in (6, 17) and len(seg) >= 4:
        return str(struct.unpack("!H", seg[2:4])[0])
    return None


def frames_of(path: Path) -> List[bytes]:
    return [rec.ip_packet() for rec in read_capture(path)]


def merge(out: Path, parts: Sequence[Path]) -> Path:
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(out), *map(str, parts)], check=True)
    out.chmod(0o644)
    return out


_HOME: Optional[Path] = None  # one throwaway HOME / WIRESHARK_CONFIG_DIR for every run of this file


def run(args: Sequence[str], **kw) -> subprocess.CompletedProcess:
    kw.setdefault("profile", _HOME)
    return ws.run(args, **kw)


def rows(capture: Path, names: Sequence[str], *, extra: Sequence[str] = (), scripts=SCRIPTS, **kw) -> List[Dict[str, str]]:
    kw.setdefault("profile", _HOME)
    out = ws.fields(capture, names, extra=extra, plugin=None, lua_scripts=scripts, **kw)
    return [dict(zip(names, line)) for line in out]


def occurrences(value: str) -> List[str]:
    return [v for v in value.split(",") if v] if value else []


@functools.lru_cache(maxsize=None)
def lua_has_gcrypt() -> bool:
    """Whether this tshark's Lua has GcryptCipher (4.6+): without pelua the scripts then decrypt in Lua."""
    d = ws.shared_dir("pe-lua-probe-")
    try:
        probe = d / "probe.lua"
        probe.write_text('io.stderr:write("pe-gcrypt=", tostring(GcryptCipher ~= nil), "\\n")\n')
        probe.chmod(0o644)
        pcap = d / "empty.pcap"
        pcap.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        pcap.chmod(0o644)
        proc = ws.run(["-r", str(pcap)], plugin=None, lua_scripts=[probe], profile=d, check=False)
        return "pe-gcrypt=true" in proc.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


NO_ENGINE = "decryption needs the pelua module (see docs/wireshark.md) or Wireshark 4.6 or later"


def status_expert(proto: str, status: str) -> str:
    """The expert item a status gets: one per category of the core (core/include/pe/status.h)."""
    return f"{proto}.expert.{CATEGORY_BY_CODE[status].replace('-', '_')}"


# Group and severity of each category's item (epan/proto.h PI_* values, as -T json gives them), as the C plugin
# registers them (dissectors/plugin/experts.c).
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
# What each script registers: the plugin's items, and the note only a Lua path needs.
LUA_EXPERTS = {
    p: {f"{p}.expert.{c.replace('-', '_')}" for c in CATEGORIES if c != "ok"} | extra | {f"{p}.expert.no_module"}
    for p, extra in (("psp", {"psp.expert.gmac_unverified", "psp.expert.udp_zero_checksum"}),
                     ("eesp", {"eesp.expert.seq_wrong", "eesp.expert.udp_zero_checksum",
                               "eesp.expert.udp_bad_checksum"}))
}
# A decrypted packet whose own dissector fails: Wireshark's Lua API hands the script an error where the plugin's
# packet gets Wireshark's own [Malformed Packet] item, so the scripts note it in their layer (not a status).
INNER_FAILED = "decrypted packet could not be dissected: "
STATUS_IN_MESSAGE = re.compile(r"\(([a-z0-9-]+)\)$")


def layer_items(pkt: dict, proto: str) -> List[tuple]:
    """(field, message, group, severity) of the proto's own expert items in one ``-T json`` packet, sorted."""
    found: List[tuple] = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "_ws.expert":
                    for e in v if isinstance(v, list) else [v]:
                        found.extend((n, e.get("_ws.expert.message", ""), int(e["_ws.expert.group"]),
                                      int(e["_ws.expert.severity"])) for n in e if n.startswith(f"{proto}.expert."))
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(pkt["_source"]["layers"].get(proto))
    return sorted(found)


def layer_values(pkt: dict, proto: str, field: str) -> List[str]:
    """A field's values in every layer of the proto (a PSP packet in an EESP tunnel has two of some)."""
    lay = pkt["_source"]["layers"].get(proto)
    out = []
    for one in lay if isinstance(lay, list) else [lay] if lay else []:
        v = one.get(field)
        out += v if isinstance(v, list) else [] if v is None else [v]
    return out


def check_category_items(items: Sequence[tuple], proto: str, where) -> None:
    """Every status item is the one its status's category names, with that category's group and severity."""
    for name, msg, group, severity in items:
        category = name.partition(".expert.")[2].replace("_", "-")
        if category not in CATEGORY_LOOK or msg.startswith(INNER_FAILED):
            continue
        m = STATUS_IN_MESSAGE.search(msg)
        assert m, (where, f"{name}: the message names no status: {msg!r}")
        assert name == status_expert(proto, m.group(1)), (where, name, msg)
        assert (group, severity) == CATEGORY_LOOK[category], (where, name)


def no_lua_error(proc: subprocess.CompletedProcess) -> None:
    assert "Lua Error" not in proc.stdout and "Lua Error" not in proc.stderr, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "[string" not in proc.stderr, proc.stderr[-3000:]


# ---------------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def pelua_built() -> Path:
    """build/lua/pelua.so: configured and built when missing, else brought up to date (a no-op when fresh)."""
    if PELUA.exists() and not (ws.LUA_MODULE_DIR / "CMakeCache.txt").exists():
        return PELUA  # built some other way: use it as it is
    if shutil.which("cmake") is None:
        if PELUA.exists():
            return PELUA
        pytest.skip("cmake is needed to build pelua (cmake -S dissectors/lua -B build/lua)")
    cmds = [["cmake", "--build", str(ws.LUA_MODULE_DIR)]]
    if not (ws.LUA_MODULE_DIR / "CMakeCache.txt").exists():
        cmds.insert(0, ["cmake", "-S", str(ws.LUA_DIR), "-B", str(ws.LUA_MODULE_DIR)])
    for cmd in cmds:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
        if proc.returncode != 0:
            if "Lua 5.2 headers not found" in proc.stdout + proc.stderr:
                pytest.skip("liblua5.2-dev is not installed: pelua cannot be built")
            pytest.fail(f"building pelua failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    assert PELUA.exists()
    return PELUA


@pytest.fixture(scope="session", autouse=True)
def tshark_home():
    global _HOME
    _HOME = ws.shared_dir("pe-lua-home-")
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)
    _HOME = None


@pytest.fixture(scope="session")
def work() -> Path:
    d = ws.shared_dir("pe-lua-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def keyfile(work: Path) -> Path:
    p = work / "keys.txt"
    p.write_text(KEYS)
    p.chmod(0o644)  # tshark runs as nobody; these are public test keys
    return p


# The PSP SAs: every version, transport and tunnel, a VC in clear and a VC the crypt offset encrypts.
PSP_SAS = [
    dict(spi=0x9A345678, version=0, mode="transport", crypt_offset=1),
    dict(spi=0x1A345678, version=1, mode="tunnel", crypt_offset_ipv4=8, crypt_offset_ipv6=13,
         vc=bytes.fromhex("00000000deadbeef")),
    dict(spi=0x1A345679, version=2, mode="transport"),
    dict(spi=0x9A34567A, version=3, mode="tunnel", vc=bytes.fromhex("0102030405060708")),
    dict(spi=0x1A34567B, version=0, mode="transport", crypt_offset=0, vc=bytes.fromhex("a1a2a3a4b1b2b3b4")),
]


@pytest.fixture(scope="session")
def psp_capture(work: Path) -> Tuple[Path, List[dict]]:
    """One capture holding packets of every PSP SA, and per packet what the libraries say it holds."""
    parts, sas = [], []
    for i, sa in enumerate(PSP_SAS):
        clear = write_frames(work / f"psp_clear_{i}.pcap", clear_packets(4, seed=i))
        enc = pypsp.Encryptor(master_keys=(MK0, MK1), **sa)
        out = work / f"psp_{i}.pcap"
        pypsp.encrypt_capture(enc, clear, out)
        parts.append(out)
        sas += [sa] * 4
    cap = merge(work / "psp.pcap", parts)
    dec = pypsp.Decryptor(master_keys=(MK0, MK1))
    expected = []
    for ip, sa in zip(frames_of(cap), sas):
        hdr = pypsp.Header.parse(udp_payload(ip))
        inner = dec.decrypt(ip).packet  # transport: the original packet; tunnel: the inner packet
        version, dst, proto, seg = ip_payload(inner)
        expected.append(dict(sa=sa, hdr=hdr, inner_version=version, inner_dst=addr_text(dst), proto=proto,
                             dport=l4_dport(proto, seg)))
    return cap, expected


@pytest.fixture(scope="session")
def eesp_capture(work: Path) -> Tuple[Path, List[Optional[dict]]]:
    """EESP tunnel over 8 Sub SAs (IP protocol 49), EESP transport in UDP 4500, and ESP / IKE / a
    keepalive on UDP 4500 that must go to Wireshark's own dissectors."""
    st = _sample_traffic()
    tunnel = pyeesp.SA(0x1000, "aes-gcm-16", root_key=EESP_ROOT, sskdf="hkdf-sha256", mode="tunnel", max_sub_sa_id=7)
    transport = pyeesp.SA(0x2000, "chacha20-poly1305", key=EESP_KEY_2000, key_bits=256, mode="transport",
                          udp_encap=True)
    parts = []
    clear = write_frames(work / "eesp_clear_t.pcap", clear_packets(8, seed=1))
    pyeesp.encrypt_capture(tunnel, clear, work / "eesp_tunnel.pcap", sub_sas=8)
    parts.append(work / "eesp_tunnel.pcap")
    clear = write_frames(work / "eesp_clear_u.pcap", clear_packets(4, seed=2))
    pyeesp.encrypt_capture(transport, clear, work / "eesp_udp.pcap")
    parts.append(work / "eesp_udp.pcap")
    # A Crypt Offset option (PIH and ports in clear) with Pad options for alignment (IPv6 outer);
    # SA 0x5000 sends one too, but the key file's receiver allows none: a receiver drops those.
    exposed = pyeesp.SA(0x4000, "aes-gcm-16", key=bytes(range(1, 21)), mode="transport", crypt_offset=2,
                        max_crypt_offset=8)
    refused = pyeesp.SA(0x5000, "aes-gcm-16", key=bytes(range(2, 22)), mode="transport", crypt_offset=2,
                        max_crypt_offset=8)
    v6 = [p for p in clear_packets(8, seed=3) if p[0] >> 4 == 6]
    parts.append(write_frames(work / "eesp_co.pcap", [exposed.encrypt(v6[0]), exposed.encrypt(v6[1]),
                                                      refused.encrypt(v6[2])]))

    def udp4500(payload: bytes) -> bytes:
        return st.ipv4("192.0.2.1", "192.0.2.2", 17, 4500, 4500, payload, 7)

    esp = struct.pack("!II", 0x01020304, 1) + bytes(range(48))  # ESP SPI MSB 0
    # Non-ESP marker, then an IKEv2 header alone (IKE_SA_INIT, no payload, 28 octets).
    ike = bytes(4) + bytes.fromhex("1122334455667788") + bytes(8) + bytes([0, 0x20, 34, 0x08]) + bytes(4) + \
        struct.pack("!I", 28)
    others = write_frames(work / "eesp_others.pcap", [udp4500(esp), udp4500(ike), udp4500(b"\xff")])
    parts.append(others)
    cap = merge(work / "eesp.pcap", parts)

    rx = pyeesp.Receiver([tunnel, transport, exposed, refused])
    expected: List[Optional[dict]] = []
    frames = frames_of(cap)
    for i, ip in enumerate(frames):
        if i >= len(frames) - 3:
            expected.append(None)  # ESP, IKE, keepalive: not EESP
            continue
        _, _, proto, _ = ip_payload(ip)
        d = rx.decrypt(ip)
        inner = d.packet
        version, dst, iproto, iseg = ip_payload(inner)
        expected.append(dict(d=d, inner_dst=addr_text(dst), inner_version=version, proto=iproto,
                             dport=l4_dport(iproto, iseg), udp=proto == 17, refused=d.header.spi == 0x5000))
    return cap, expected


# ---------------------------------------------------------------------------------------------- tests

def test_pelua_builds_without_liblua(pelua_built: Path) -> None:
    """The module exports luaopen_pelua and leaves the Lua API to the host (no liblua linked)."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(pelua_built)], capture_output=True, text=True, check=True)
    assert "luaopen_pelua" in nm.stdout
    assert not any(line.split()[-1].startswith("pe_") for line in nm.stdout.splitlines() if line.strip())
    ldd = subprocess.run(["ldd", str(pelua_built)], capture_output=True, text=True)
    assert "liblua" not in ldd.stdout


def test_fields_registered(pelua_built: Path) -> None:
    # -G must come first, before the -X lua_script options wireshark.run() would put there.
    proc = run(["-G", "fields", *[a for s in SCRIPTS for a in ("-X", f"lua_script:{s}")]], plugin=None)
    assert "Lua" not in proc.stderr and "lua" not in proc.stderr, proc.stderr  # (-G fields lists _ws.lua.error)
    have = {}
    for line in proc.stdout.splitlines():
        cols = line.split("\t")
        if cols[0] == "F" and (cols[2].startswith("psp.") or cols[2].startswith("eesp.")):
            have[cols[2]] = cols[3]
    want = {
        "psp.nexthdr": "FT_UINT8", "psp.hdrextlen": "FT_UINT8", "psp.reserved0": "FT_UINT8",
        "psp.cryptoffset": "FT_UINT8", "psp.sample": "FT_BOOLEAN", "psp.drop": "FT_BOOLEAN",
        "psp.version": "FT_UINT8", "psp.is_virt": "FT_BOOLEAN", "psp.one_bit": "FT_BOOLEAN",
        "psp.spi": "FT_UINT32", "psp.master_key": "FT_UINT32", "psp.iv": "FT_UINT64", "psp.vc": "FT_UINT64",
        "psp.sectoken": "FT_UINT32", "psp.virtkey": "FT_UINT32", "psp.ext": "FT_BYTES", "psp.payload": "FT_BYTES",
        "psp.icv": "FT_BYTES", "psp.status": "FT_STRING", "psp.icv_good": "FT_BOOLEAN", "psp.icv_bad": "FT_BOOLEAN",
        "eesp.compat": "FT_BOOLEAN", "eesp.version": "FT_UINT8", "eesp.reserved": "FT_UINT8",
        "eesp.opt_len": "FT_UINT8", "eesp.session_id": "FT_UINT16", "eesp.spi": "FT_UINT32",
        "eesp.option": "FT_BYTES", "eesp.option.type": "FT_UINT8", "eesp.option.len": "FT_UINT8",
        "eesp.option.data": "FT_BYTES", "eesp.option.payload_offset": "FT_UINT16",
        "eesp.option.crypt_offset": "FT_UINT16", "eesp.option.co_reserved": "FT_UINT16", "eesp.seq": "FT_UINT64",
        "eesp.iv": "FT_BYTES", "eesp.payload": "FT_BYTES", "eesp.icv": "FT_BYTES", "eesp.next_header": "FT_UINT8",
        "eesp.pad_len": "FT_UINT8", "eesp.format": "FT_STRING", "eesp.suite": "FT_STRING",
        "eesp.status": "FT_STRING", "eesp.icv_good": "FT_BOOLEAN", "eesp.icv_bad": "FT_BOOLEAN",
        "eesp.data": "FT_BYTES", "eesp.sequence_analysis_expected_sn": "FT_UINT64",
        "eesp.sequence_analysis_previous_frame": "FT_FRAMENUM", "eesp.replay": "FT_BOOLEAN",
    }
    missing = {k: v for k, v in want.items() if have.get(k) != v}
    assert not missing, f"missing or wrongly typed: {missing}"
    # Exactly the C plugin's expert items (and the note for "cannot decrypt here"), nothing of their own.
    registered = {c[2] for c in (line.split("\t") for line in proc.stdout.splitlines())
                  if len(c) > 2 and c[0] == "F" and ".expert." in c[2]}
    for proto, want_experts in LUA_EXPERTS.items():
        assert {n for n in registered if n.startswith(f"{proto}.expert.")} == want_experts, proto


def test_psp_all_versions_decrypt(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    cap, expected = psp_capture
    got = rows(cap, PSP_FIELDS, extra=["-o", f"psp.keyfile:{keyfile}"])
    assert len(got) == len(expected) == 4 * len(PSP_SAS)
    for r, x in zip(got, expected):
        hdr, sa = x["hdr"], x["sa"]
        where = f"packet {r['frame.number']} (SPI {sa['spi']:#x})"
        assert r["psp.spi"] == f"{hdr.spi:#010x}", where
        assert int(r["psp.iv"], 16) == hdr.iv, where
        assert r["psp.version"] == str(hdr.version) == str(sa["version"]), where
        assert r["psp.nexthdr"] == str(hdr.next_header), where
        assert r["psp.hdrextlen"] == str(hdr.hdr_ext_len), where
        assert r["psp.cryptoffset"] == str(hdr.crypt_offset), where
        assert r["psp.one_bit"] == "1", where
        assert r["psp.master_key"] == str(hdr.spi >> 31), where
        assert r["psp.status"] == "ok", (where, r["_ws.expert.message"])
        assert r["psp.icv_good"] == "1" and r["psp.icv_bad"] == "0", where
        assert "Lua Error" not in r["_ws.expert.message"], where
        if "vc" in sa:
            vc = int.from_bytes(sa["vc"], "big")
            assert r["psp.is_virt"] == "1" and int(r["psp.vc"], 16) == vc, where  # decrypted when the offset hid it
            assert int(r["psp.sectoken"], 16) == vc >> 32 and int(r["psp.virtkey"], 16) == vc & 0xFFFFFFFF, where
        else:
            assert r["psp.is_virt"] == "0" and r["psp.vc"] == "", where
        # The decrypted inner packet went through Wireshark's own dissectors.
        assert "udp:psp" in r["frame.protocols"], where
        if sa["mode"] == "tunnel":
            field = "ip.dst" if x["inner_version"] == 4 else "ipv6.dst"
            assert occurrences(r[field])[-1] == x["inner_dst"], where
            assert hdr.next_header in (4, 41)
        else:
            assert hdr.next_header == x["proto"]
        port_field = "udp.dstport" if x["proto"] == 17 else "tcp.dstport"
        assert occurrences(r[port_field])[-1] == x["dport"], where
        assert occurrences(r["udp.dstport"])[0] == "1000", where


def test_psp_wrong_key(pelua_built: Path, psp_capture, work: Path) -> None:
    cap, expected = psp_capture
    wrong = work / "wrong_keys.txt"
    wrong.write_text(WRONG_KEYS)
    wrong.chmod(0o644)
    got = rows(cap, PSP_FIELDS, extra=["-o", f"psp.keyfile:{wrong}"])
    assert len(got) == len(expected)
    for r in got:
        assert r["psp.status"] == "authentication-failed", r
        assert r["psp.icv_good"] == "0" and r["psp.icv_bad"] == "1"
        assert "ICV verification failed" in r["_ws.expert.message"]
        assert occurrences(r["udp.dstport"]) == ["1000"]  # nothing decrypted, nothing dissected inside


def test_psp_without_pelua(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    """The Lua C path without pelua: decrypted in Lua where Wireshark has GcryptCipher (4.6+); elsewhere the
    headers are still dissected and a note says what would decrypt."""
    cap, expected = psp_capture
    empty = ws.shared_dir("pe-no-pelua-")
    try:
        got = rows(cap, PSP_FIELDS, extra=["-o", f"psp.keyfile:{keyfile}"],
                   env={"LUA_CPATH_5_2": f"{empty}/?.so"})
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    assert len(got) == len(expected)
    in_lua = lua_has_gcrypt()
    for r, x in zip(got, expected):
        assert r["psp.spi"] == f"{x['hdr'].spi:#010x}"
        assert int(r["psp.iv"], 16) == x["hdr"].iv
        assert r["psp.version"] == str(x["hdr"].version)
        if in_lua:
            assert r["psp.status"] == "ok" and r["psp.icv_good"] == "1", r
            assert NO_ENGINE not in r["_ws.expert.message"]
            port_field = "udp.dstport" if x["proto"] == 17 else "tcp.dstport"
            assert occurrences(r[port_field])[-1] == x["dport"]
        else:
            assert r["psp.status"] == ""
            assert NO_ENGINE in r["_ws.expert.message"]
            assert occurrences(r["udp.dstport"]) == ["1000"]


def test_psp_loaded_twice(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    """A second psp.lua (as beside the C plugin) says so and registers nothing: no Lua error."""
    cap, expected = psp_capture
    args = ["-n", "-r", str(cap), "-T", "fields", "-e", "psp.spi", "-e", "psp.status", "-o", f"psp.keyfile:{keyfile}"]
    proc = run(args, plugin=None, lua_scripts=[PSP_LUA, PSP_LUA, EESP_LUA, EESP_LUA])
    no_lua_error(proc)
    assert "already registered" in proc.stderr and "not registering the Lua PSP dissector" in proc.stderr
    assert "not registering the Lua EESP dissector" in proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(expected) and all(line.endswith("\tok") for line in lines)


@pytest.mark.skipif(not ws.plugin_path().exists(), reason="the C plugin is not built (build/plugin)")
def test_beside_c_plugin(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    cap, _ = psp_capture
    proc = run(["-n", "-r", str(cap), "-T", "fields", "-e", "psp.spi"], plugin="plain", lua_scripts=SCRIPTS)
    no_lua_error(proc)
    assert "not registering the Lua PSP dissector" in proc.stderr
    assert "not registering the Lua EESP dissector" in proc.stderr


# ---------------------------------------------------------------------------------------------- beside the plugin
#
# The C plugin and the scripts on the same captures (each alone in its tshark): per packet the same status and the
# same expert items of psp/eesp (field, message, group, severity).  Headers only (no pelua, Lua without
# GcryptCipher) the scripts know the statuses the core finds before it looks for a key, and those must be the
# plugin's; for the rest they show no status and note what would decrypt.

VECTORS = REPO_ROOT / "vectors" / "pcap"
# The vector groups that hold, between them, every packet status of both protocols (as the plugin's walk:
# tests/wireshark/test_wireshark_plugin.py): the decoder's rejections, no key, dummy packets, replays (group 6).
WALK_VECTORS = ("psp_v0_g01", "psp_v0_g05", "eesp_aes-ccm-12_g01", "eesp_aes-ccm-12_g02", "eesp_aes-ccm-12_g06",
                "eesp_aes-ccm-12_g07")
WALK_STATUSES = {
    "ok", "authentication-failed", "no-key", "psp-truncated", "psp-always-one-bit-clear", "psp-unsupported-version",
    "psp-bad-hdr-ext-len", "psp-vc-without-room", "psp-crypt-offset-past-payload",
    "eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
    "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-bad-payload-offset",
    "eesp-crypt-offset-past-payload", "eesp-crypt-offset-not-allowed", "eesp-unknown-option", "eesp-no-sa",
    "eesp-sub-sa-out-of-range", "eesp-sequence-zero", "eesp-bad-pad-length", "eesp-bad-inner-packet",
    "eesp-dummy-packet", "capture-packet-cut",
}
# The ones a path without decryption finds as well: the checks before the key or SA lookup, and the lookup
# itself when no key file is set.
HEADER_STATUSES = {
    "no-key", "psp-truncated", "psp-always-one-bit-clear", "psp-unsupported-version", "psp-bad-hdr-ext-len",
    "psp-vc-without-room", "psp-crypt-offset-past-payload", "eesp-truncated", "eesp-compat-bit-clear",
    "eesp-unsupported-version", "eesp-reserved-bits-set", "eesp-no-sa", "capture-packet-cut",
}
# Those found before the lookup only: with a key file set, a path without decryption must still find them (EESP
# shorter than its headers and ICV is also found after the SA lookup).
BEFORE_LOOKUP = HEADER_STATUSES - {"no-key", "eesp-no-sa", "eesp-truncated"}
# Problems of a key file, each the core's status of it (its category picks the item every affected packet gets).
KEYFILE_STATUSES = {"keyfile-syntax", "keyfile-bad-value", "keyfile-duplicate", "capture-io", "invalid-argument"}


def readable(path: Path) -> Path:
    path.chmod(0o644)
    return path


def editcap(*args: str) -> None:
    subprocess.run(["editcap", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def no_pelua_dir() -> Path:
    d = ws.shared_dir("pe-no-pelua-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def lua_engine_kw(engine: str, no_pelua_dir: Path) -> dict:
    kw: dict = dict(plugin=None, lua_scripts=SCRIPTS)
    if engine == "no-pelua":
        kw["env"] = {"LUA_CPATH_5_2": f"{no_pelua_dir}/?.so"}
    return kw


# Ethernet + IPv4 is 34 octets: 38 keeps 4 octets of EESP on IP, 45 three of EESP in UDP, 50 eight of PSP.
BAD_INPUT_SNAPS = (38, 45, 50, 70)


@pytest.fixture(scope="module")
def bad_input_capture(work: Path) -> Path:
    """Packets cut short on the wire (a PSP payload of 9 octets, EESP of 5 and 20) and by the capture's snap
    length (inside the EESP Base Header on IP and in UDP, inside the PSP header, and later)."""
    st = _sample_traffic()
    inner = clear_packets(2, seed=6)
    psp_ok = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0).encrypt(inner[0])
    eesp_ip = pyeesp.SA(0x5000, "aes-gcm-16", key=bytes(range(2, 22)), mode="transport").encrypt(inner[0])
    eesp_udp = pyeesp.SA(0x2000, "chacha20-poly1305", key=EESP_KEY_2000, key_bits=256, mode="transport",
                         udp_encap=True).encrypt(inner[1])
    psp = udp_payload(psp_ok)
    _, _, _, eesp_octets = ip_payload(eesp_ip)

    def on_ip(proto: int, data: bytes) -> bytes:
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), 1, 0, 64, proto, 0, bytes([192, 0, 2, 1]),
                        bytes([192, 0, 2, 2]))
        return h + data

    def udp(dport: int, data: bytes) -> bytes:
        return st.ipv4("192.0.2.1", "192.0.2.2", 17, 40000, dport, data, 4)

    wire = write_frames(work / "bad_input_wire.pcap", [
        udp(1000, psp[:9]), udp(1000, psp[:20]), on_ip(49, eesp_octets[:5]), on_ip(49, eesp_octets[:20]),
        udp(4500, eesp_octets[:6]), psp_ok, eesp_ip, eesp_udp])
    parts = [wire]
    for snap in BAD_INPUT_SNAPS:
        out = work / f"bad_input_cut_{snap}.pcap"
        editcap("-s", str(snap), str(wire), str(out))
        parts.append(readable(out))
    return merge(work / "bad_input.pcap", parts)


@pytest.fixture(scope="module")
def zero_checksum_capture(work: Path) -> Path:
    """IPv6 UDP with checksum 0 (the PSP reference sends it; UDP flags it), a real checksum, IPv4, EESP in UDP
    over IPv6 (its checksum computed, then 0, then wrong: eesp.md D17), EESP on IP: PSP notes UDP's own zero
    checksum over IPv6; EESP warns of a zero or a wrong one whatever UDP says."""
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0)
    v6 = [p for p in clear_packets(8, seed=8) if p[0] >> 4 == 6]
    v4 = [p for p in clear_packets(8, seed=8) if p[0] >> 4 == 4]
    udp6 = pyeesp.SA(0x2000, "chacha20-poly1305", key=EESP_KEY_2000, key_bits=256, mode="transport",
                     udp_encap=True)
    on_ip = pyeesp.SA(0x5000, "aes-gcm-16", key=bytes(range(2, 22)), mode="transport")
    psp6 = enc.encrypt(v6[0])
    assert psp6[46:48] == b"\0\0"
    e6 = udp6.encrypt(v6[1])
    assert e6[46:48] != b"\0\0"
    pkts = [psp6, enc.encrypt(v4[0]), e6, on_ip.encrypt(v6[2]), e6[:46] + b"\0\0" + e6[48:],
            e6[:46] + bytes([e6[46] ^ 0x10, e6[47]]) + e6[48:]]
    return write_frames(work / "zero_checksum.pcap", pkts)


@pytest.fixture(scope="module")
def beside_runs(work: Path, keyfile: Path, bad_input_capture: Path, zero_checksum_capture: Path):
    """(label, capture, tshark arguments, whether a key file is set, the plugin's -T json packets) of every run."""
    if not ws.plugin_path().exists():
        pytest.skip("the C plugin is not built (build/plugin)")
    runs = []
    walk = []
    for group in WALK_VECTORS:
        cap, keys = work / f"{group}.pcap", work / f"{group}.keys"
        shutil.copy(VECTORS / f"{group}.pcap", cap)
        shutil.copy(VECTORS / f"{group}.keys", keys)
        readable(cap), readable(keys)
        walk.append(cap)
        runs.append((group, cap, ["-o", f"psp.keyfile:{keys}", "-o", f"eesp.keyfile:{keys}", "-2"], True))
        # Cut inside the EESP and PSP headers (Ethernet + IPv4 + UDP is 42 octets), and after them.
        for snap in (38, 48, 60):
            cut = work / f"{group}_cut{snap}.pcap"
            editcap("-s", str(snap), str(cap), str(cut))
            runs.append((f"{group} cut at {snap}", readable(cut), ["-o", f"psp.keyfile:{keys}",
                                                                  "-o", f"eesp.keyfile:{keys}"], True))
    both = merge(work / "walk_all.pcap", walk)
    runs.append(("no key file", both, ["-2"], False))
    for where in ("keys", "no keys"):
        opts = ["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"] if where == "keys" else []
        runs.append((f"bad input, {where}", bad_input_capture, opts, where == "keys"))
        runs.append((f"zero checksum, {where}", zero_checksum_capture, opts, where == "keys"))
    sa_line = next(line for line in (VECTORS / "eesp_aes-ccm-12_g02.keys").read_text().splitlines()
                   if line.startswith("eesp-sa"))
    secret = "96c22dc799198090b74b70ae468e4e30"
    bad_files = {
        "keyfile-syntax": ("psp-master key0\n", "key0=00\n"),
        "keyfile-bad-value": (f"# keys\npsp-master key0={MK0.hex()}\npsp-key spi=1 version=1 key={secret}\n",
                              f"# keys\n\neesp-sa spi=0x6001 suite=aes-gcm-16 key={secret}\n"),
        "keyfile-duplicate": (f"psp-master key0={MK0.hex()}\npsp-master key1={MK1.hex()}\n",
                              f"{sa_line}\n{sa_line}\n"),
        "capture-io": (None, None),
        "google/psp reference config": (" ".join(f"{b:02x}" for b in MK0) + "\n34 44\n", None),
    }
    for status, (psp_text, eesp_text) in bad_files.items():
        opts = []
        for proto, text in (("psp", psp_text), ("eesp", eesp_text)):
            path = work / f"bad-{status.replace('/', '_').replace(' ', '_')}-{proto}.keys"
            if text is not None:
                path.write_text(text)
                readable(path)
            opts += ["-o", f"{proto}.keyfile:{path}"]
        runs.append((status, both, opts, True))
    # Above the core's limit for a key file (a sparse file: nothing is written).
    huge = work / "huge.keys"
    with open(huge, "wb") as fh:
        fh.truncate(16 * 1024 * 1024 + 1)
    readable(huge)
    runs.append(("invalid-argument", both, ["-o", f"psp.keyfile:{huge}", "-o", f"eesp.keyfile:{huge}"], True))
    out = []
    for label, cap, opts, keyed in runs:
        pkts = ws.packets_json(cap, extra=["--no-duplicate-keys", *opts], profile=_HOME, plugin="plain")
        out.append((label, cap, opts, keyed, pkts))
    return out


def compare_with_plugin(runs, engine: str, no_pelua_dir: Path) -> Tuple[set, set]:
    """Runs the scripts beside each plugin run; returns the statuses both showed and the items seen."""
    decrypts = engine == "pelua" or lua_has_gcrypt()
    seen, names = set(), set()
    for label, cap, opts, keyed, plugin_pkts in runs:
        lua_pkts = ws.packets_json(cap, extra=["--no-duplicate-keys", *opts], profile=_HOME,
                                   **lua_engine_kw(engine, no_pelua_dir))
        assert len(lua_pkts) == len(plugin_pkts), label
        for n, (p, q) in enumerate(zip(plugin_pkts, lua_pkts), 1):
            for proto in ("psp", "eesp"):
                where = (label, n, proto, engine)
                want, got = layer_values(p, proto, f"{proto}.status"), layer_values(q, proto, f"{proto}.status")
                want_items = layer_items(p, proto)
                got_items = [i for i in layer_items(q, proto) if not i[1].startswith(INNER_FAILED)]
                check_category_items(got_items, proto, where)
                names.update(i[0] for i in got_items)
                if decrypts or not keyed or got == want:
                    assert got == want, (where, got, want, got_items)
                    assert got_items == want_items, (where, got_items, want_items)
                    seen.update(want)
                    if want:
                        assert want[0] == "ok" or status_expert(proto, want[0]) in {i[0] for i in got_items}, where
                    for name in ("icv_good", "icv_bad"):
                        assert layer_values(q, proto, f"{proto}.{name}") == layer_values(p, proto, f"{proto}.{name}"), \
                            (where, name)
                else:
                    # Not opened here: the statuses that need a key are the plugin's alone.
                    assert not got and want and not set(want) & BEFORE_LOOKUP, (where, got, want)
                    notes = [i for i in layer_items(q, "psp") + layer_items(q, "eesp") if i[0].endswith(".no_module")]
                    assert notes and all(NO_ENGINE in i[1] for i in notes), where
                    zero = [i for i in want_items if i[0].endswith((".udp_zero_checksum", ".udp_bad_checksum"))]
                    assert [i for i in got_items if not i[0].endswith(".no_module")] == zero, where
    return seen, names


@pytest.mark.parametrize("engine", ["pelua", "no-pelua"])
def test_statuses_and_experts_are_the_plugins(pelua_built: Path, beside_runs, engine: str,
                                               no_pelua_dir: Path) -> None:
    """Every vector group with every packet status, cut captures, truncated packets, no key file, bad key files
    (each problem's expert on every packet it may have cost its key), IPv6 zero UDP checksums: with pelua, and
    without it (in Lua on 4.6+, headers only before), the same status and expert items as the C plugin; every
    status item is the one its core category names."""
    seen, names = compare_with_plugin(beside_runs, engine, no_pelua_dir)
    if engine == "pelua" or lua_has_gcrypt():
        assert WALK_STATUSES <= seen, WALK_STATUSES - seen
        for proto in ("psp", "eesp"):
            for category in ("configuration", "io", "malformed", "authentication", "no-key", "cut-by-capture"):
                assert f"{proto}.expert.{category.replace('-', '_')}" in names, (proto, category)
        assert {"eesp.expert.replay", "eesp.expert.policy", "eesp.expert.not_this_protocol",
                "eesp.expert.seq_wrong", "psp.expert.gmac_unverified"} <= names
    else:
        assert HEADER_STATUSES <= seen, HEADER_STATUSES - seen
    assert {"psp.expert.udp_zero_checksum", "eesp.expert.udp_zero_checksum", "eesp.expert.udp_bad_checksum"} <= names


@pytest.mark.parametrize("engine", ["pelua", "no-pelua"])
def test_truncated_and_cut_packets(pelua_built: Path, bad_input_capture: Path, keyfile: Path, engine: str,
                                   no_pelua_dir: Path) -> None:
    """A PSP payload of 9 or 20 octets and EESP of 5 (on IP and in UDP) are too short, as the plugin says, on
    every path; cut by the capture's snap length, inside a header or later, a packet says the capture cut it
    (category cut-by-capture), never that it is malformed."""
    names = ["frame.cap_len", "frame.len", "psp.status", "eesp.status", "_ws.expert.message"]
    got = rows(bad_input_capture, names, extra=["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"],
               **{k: v for k, v in lua_engine_kw(engine, no_pelua_dir).items() if k == "env"})
    decrypts = engine == "pelua" or lua_has_gcrypt()
    n = len(got) // (1 + len(BAD_INPUT_SNAPS))
    assert len(got) == n * (1 + len(BAD_INPUT_SNAPS)) and n == 8
    wire = [r["psp.status"] or r["eesp.status"] for r in got[:n]]
    opened = "ok" if decrypts else ""
    assert wire == ["psp-truncated", "psp-truncated", "eesp-truncated", "eesp-truncated" if decrypts else "",
                    "eesp-truncated", opened, opened, opened], wire
    for r, status in zip(got[:n], wire):
        if status == "psp-truncated":
            assert "Malformed: PSP packet shorter than its header and ICV (psp-truncated)" in r["_ws.expert.message"]
        elif status == "eesp-truncated":
            assert "Malformed: EESP packet shorter than its headers and ICV (eesp-truncated)" in \
                r["_ws.expert.message"]
    cut_in_header = {38: "eesp", 45: "eesp", 50: "psp"}  # where the snap length falls inside that header
    for i, snap in enumerate(BAD_INPUT_SNAPS, 1):
        part = got[i * n : (i + 1) * n]
        for r in part:
            status = r["psp.status"] or r["eesp.status"]
            if int(r["frame.cap_len"]) < int(r["frame.len"]) and status:
                assert status == "capture-packet-cut", (snap, r)
                assert "Cut by the capture: packet was cut by the capture snap length (capture-packet-cut)" in \
                    r["_ws.expert.message"] and "Malformed" not in r["_ws.expert.message"], (snap, r)
            elif int(r["frame.cap_len"]) == int(r["frame.len"]):
                assert status in wire, (snap, r)
        if snap in cut_in_header:
            proto = cut_in_header[snap]
            assert any(r[f"{proto}.status"] == "capture-packet-cut" for r in part), (snap, proto)


@pytest.mark.parametrize("engine", ["pelua", "no-pelua"])
def test_bad_key_file_is_said_once_on_the_console(pelua_built: Path, work: Path, engine: str,
                                                  no_pelua_dir: Path) -> None:
    """A key-file line the core refuses: once per load on stderr (also when tshark reads the capture twice), naming
    the file and line and never a key; every packet left without a key says so too (checked beside the plugin
    above).  Without a way to decrypt the file is never read: nothing is said of it, each packet notes why."""
    secret = "96c22dc799198090b74b70ae468e4e30"
    bad = work / "console-bad.keys"
    bad.write_text(f"# keys\npsp-master key0={MK0.hex()}\npsp-key spi=1 version=1 key={secret}\n")
    readable(bad)
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x9A345678)
    sa = pyeesp.SA(0x6001, "aes-gcm-16", key=bytes(range(20)), mode="tunnel")
    cap = write_frames(work / "console.pcap", [enc.encrypt(p) for p in clear_packets(3, seed=4)] +
                       [sa.encrypt(clear_packets(1, seed=5)[0])])
    kw = lua_engine_kw(engine, no_pelua_dir)
    proc = run(["-n", "-r", str(cap), "-2", "-T", "fields", "-e", "psp.status", "-e", "eesp.status", "-e",
                "_ws.expert.message",
                "-o", f"psp.keyfile:{bad}", "-o", f"eesp.keyfile:{bad}"], **kw)
    no_lua_error(proc)
    assert secret not in proc.stderr + proc.stdout and MK0.hex() not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if str(bad) in line]
    if engine == "pelua" or lua_has_gcrypt():
        message = f"{bad}, line 3: psp-key: field 'key' is 16 bytes but version 1 needs 32"
        assert lines == [f"psp.lua: PSP key file {message}", f"eesp.lua: EESP key file {message}"], proc.stderr
        rows = [row.split("\t") for row in proc.stdout.splitlines()]
        assert [r[0] or r[1] for r in rows] == ["no-key", "no-key", "no-key", "eesp-no-sa"]
        for (_, _, msgs), proto in zip(rows, ["PSP"] * 3 + ["EESP"]):
            assert f"Configuration: {proto} key file {message} (keyfile-bad-value)" in msgs, msgs
    else:
        assert lines == [], proc.stderr
        rows = [row.split("\t") for row in proc.stdout.splitlines()]
        assert len(rows) == 4 and all(r[0] == r[1] == "" and NO_ENGINE in r[2] for r in rows), rows


def test_eesp_tunnel_and_udp(pelua_built: Path, eesp_capture, keyfile: Path) -> None:
    cap, expected = eesp_capture
    got = rows(cap, EESP_FIELDS, extra=["-o", f"eesp.keyfile:{keyfile}"])
    assert len(got) == len(expected)
    sessions = set()
    for r, x in zip(got, expected):
        where = f"packet {r['frame.number']}"
        assert "Lua Error" not in r["_ws.expert.message"], where
        if x is None:
            assert r["eesp.spi"] == "", where  # ESP, IKE, keepalive: Wireshark's own dissectors
            continue
        d = x["d"]
        sessions.add(d.header.session_id)
        assert r["eesp.spi"] == f"{d.header.spi:#010x}", where
        assert r["eesp.session_id"] == str(d.header.session_id), where
        assert r["eesp.compat"] == "1" and r["eesp.version"] == "0", where
        assert r["eesp.opt_len"] == str(d.header.opt_len), where
        assert occurrences(r["eesp.option.type"]) == [str(o.type) for o in d.header.options], where
        co = d.header.crypt_offset_option
        if co is not None:
            assert r["eesp.option.payload_offset"] == str(co.payload_offset), where
            assert r["eesp.option.crypt_offset"] == str(co.crypt_offset_value), where
        assert r["eesp.seq"] == str(d.seq), where
        if x["refused"]:
            assert r["eesp.status"] == "eesp-crypt-offset-not-allowed", where
            assert r["eesp.icv_good"] == "1", where
            assert "Crypt Offset option not allowed" in r["_ws.expert.message"], where
            continue
        assert r["eesp.status"] == "ok", (where, r["_ws.expert.message"])
        assert r["eesp.icv_good"] == "1" and r["eesp.icv_bad"] == "0", where
        assert r["eesp.next_header"] == str(d.next_header), where
        assert r["eesp.pad_len"] == str(d.pad_len), where
        assert r["eesp.format"] == ("full" if d.full_format else "optimized"), where
        assert r["eesp.iv"] == (d.iv.hex() if d.iv else ""), where
        assert r["eesp.data"] == "", where
        if x["udp"]:
            assert r["eesp.suite"] == "ENCR_CHACHA20_POLY1305", where
            assert occurrences(r["udp.dstport"])[0] == "4500", where
            assert "udp:eesp_udp:eesp" in r["frame.protocols"], where
            assert d.next_header == x["proto"]
        elif d.header.spi == 0x1000:
            assert r["eesp.suite"] == "ENCR_AES_GCM_16", where
            field = "ip.dst" if x["inner_version"] == 4 else "ipv6.dst"
            assert occurrences(r[field])[-1] == x["inner_dst"], where
        else:
            assert d.header.crypt_offset_option is not None and r["eesp.format"] == "full", where
        port_field = "udp.dstport" if x["proto"] == 17 else "tcp.dstport"
        assert occurrences(r[port_field])[-1] == x["dport"], where
    assert len(sessions) > 1, "the tunnel SA should spread flows over several Sub SAs"
    assert any(x and x["d"].header.crypt_offset_option for x in expected)
    assert any(x and x["refused"] for x in expected)
    others = [r for r, x in zip(got, expected) if x is None]
    assert len(others) == 3
    esp, ike, keepalive = others
    assert esp["esp.spi"] == "0x01020304" and "udpencap:esp" in esp["frame.protocols"]
    assert ike["isakmp.ispi"] == "1122334455667788" and "isakmp" in ike["frame.protocols"]
    assert "udpencap" in keepalive["frame.protocols"] and "esp" not in keepalive["frame.protocols"].split(":")


def test_eesp_without_key_or_module(pelua_built: Path, eesp_capture, keyfile: Path, work: Path) -> None:
    """Without an SA the octets after the options are eesp.data; without pelua a note says what would decrypt
    (where Wireshark has GcryptCipher, 4.6+, the script decrypts in Lua instead)."""
    cap, expected = eesp_capture
    empty = ws.shared_dir("pe-no-pelua-")
    only_psp = work / "only_psp.txt"
    only_psp.write_text(f"psp-master key0={MK0.hex()}\n")
    only_psp.chmod(0o644)
    try:
        no_module = rows(cap, EESP_FIELDS, extra=["-o", f"eesp.keyfile:{keyfile}"],
                         env={"LUA_CPATH_5_2": f"{empty}/?.so"})
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    no_sa = rows(cap, EESP_FIELDS, extra=["-o", f"eesp.keyfile:{only_psp}"])
    in_lua = lua_has_gcrypt()
    for label, got in (("no module", no_module), ("no SA", no_sa)):
        assert len(got) == len(expected)
        for r, x in zip(got, expected):
            if x is None:
                continue
            assert r["eesp.spi"] == f"{x['d'].header.spi:#010x}", label
            assert r["eesp.session_id"] == str(x["d"].header.session_id), label
            if label == "no module" and in_lua:
                assert r["eesp.status"] == ("eesp-crypt-offset-not-allowed" if x["refused"] else "ok"), r
                assert r["eesp.seq"] == str(x["d"].seq) and r["eesp.data"] == "", label
                continue
            assert r["eesp.seq"] == "" and r["eesp.data"] != "", label
            if label == "no module":
                assert r["eesp.status"] == "" and NO_ENGINE in r["_ws.expert.message"]
            else:
                assert r["eesp.status"] == "eesp-no-sa", r
                assert "No key: no EESP SA for this SPI (eesp-no-sa)" in r["_ws.expert.message"]


def test_eesp_sequence_analysis(pelua_built: Path, work: Path) -> None:
    """Per Sub SA (SPI, Session ID, destination), as the C plugin does it: expected numbers, previous frames,
    a replay and a gap, on one and on two passes; and off when the preference says so."""
    root = bytes(range(0x20, 0x60))
    tx = pyeesp.SA(0x3001, "aes-gcm-16", root_key=root, sskdf="hkdf-sha512", mode="tunnel",
                   tunnel_header=_sample_traffic().ipv4("192.0.2.1", "192.0.2.2", 17, 1, 2, b"", 0)[:20])
    p = clear_packets(12, seed=9)
    s1 = [tx.encrypt(p[i], 1) for i in range(3)]  # seq 1, 2, 3 on Sub SA 1
    s2 = [tx.encrypt(p[3 + i], 2) for i in range(4)]  # seq 1..4 on Sub SA 2
    tx.set_next_seq(6, 1)
    gap, after = tx.encrypt(p[8], 1), tx.encrypt(p[9], 1)  # 6 and 7: 4 and 5 never sent
    labels = ["1:1", "2:1", "1:2", "2:2", "1:2 dup", "1:3", "2:3", "1:6 gap", "2:4", "1:7"]
    cap = write_frames(work / "eesp_seq.pcap", [s1[0], s2[0], s1[1], s2[1], s1[1], s1[2], s2[2], gap, s2[3], after])
    keys = work / "eesp_seq.txt"
    keys.write_text(f"eesp-sa spi=0x3001 suite=aes-gcm-16 root-key={root.hex()} sskdf=hkdf-sha512 mode=tunnel\n")
    keys.chmod(0o644)
    names = ["eesp.session_id", "eesp.seq", "eesp.status", "eesp.replay", "eesp.sequence_analysis_expected_sn",
             "eesp.sequence_analysis_previous_frame", "_ws.expert.message"]
    want_seq = ["1", "1", "2", "2", "2", "3", "3", "6", "4", "7"]
    want_expected = ["1", "1", "2", "2", "3", "3", "3", "4", "4", "7"]
    want_prev = ["", "", "1", "2", "3", "5", "4", "6", "7", "8"]
    for extra in ([], ["-2"]):
        got = rows(cap, names, extra=["-o", f"eesp.keyfile:{keys}", *extra])
        assert len(got) == len(labels)
        for i, (r, label) in enumerate(zip(got, labels)):
            assert r["eesp.status"] == "ok", label
            assert r["eesp.session_id"] == label[0] and r["eesp.seq"] == want_seq[i], label
            assert r["eesp.sequence_analysis_expected_sn"] == want_expected[i], (label, extra)
            assert r["eesp.sequence_analysis_previous_frame"] == want_prev[i], (label, extra)
            msg = r["_ws.expert.message"]
            if "dup" in label:
                assert r["eesp.replay"] == "1", label
                assert "Replay: sequence number already received (replay) (replay-duplicate)" in msg
            else:
                assert r["eesp.replay"] == "" and "Replay:" not in msg, label
            wrong = f"Wrong sequence number for this Sub SA: {want_seq[i]}, expected {want_expected[i]}"
            assert (wrong in msg) == ("gap" in label or "dup" in label), (label, msg)
    off = rows(cap, names, extra=["-o", f"eesp.keyfile:{keys}", "-o", "eesp.do_sequence_analysis:FALSE"])
    for r in off:
        assert r["eesp.status"] == "ok" and r["eesp.sequence_analysis_expected_sn"] == "" and r["eesp.replay"] == ""
        assert "Replay:" not in r["_ws.expert.message"] and "Wrong sequence" not in r["_ws.expert.message"]


def test_preferences_move_registrations(pelua_built: Path, work: Path, keyfile: Path) -> None:
    """psp.udp_port and eesp.ip_protocol re-register the dissectors."""
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0, udp_dport=2000)
    sa = pyeesp.SA(0x3000, "aes-gcm-16", key=bytes(range(20)), mode="tunnel", ip_protocol=253)
    pkts = clear_packets(2, seed=5)
    cap = write_frames(work / "prefs.pcap", [enc.encrypt(pkts[0]), sa.encrypt(pkts[1])])
    names = ["psp.spi", "psp.status", "eesp.spi", "eesp.status", "udp.dstport", "tcp.dstport"]
    got = rows(cap, names, extra=["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}",
                                  "-o", "psp.udp_port:2000", "-o", "eesp.ip_protocol:253"])
    assert got[0]["psp.spi"] == "0x1a345678" and got[0]["psp.status"] == "ok"
    assert got[1]["eesp.spi"] == "0x00003000" and got[1]["eesp.status"] == "ok"
    default = rows(cap, names, extra=["-o", f"psp.keyfile:{keyfile}"])
    assert default[0]["psp.spi"] == "" and default[1]["eesp.spi"] == ""


@pytest.mark.needs_shared
@pytest.mark.skipif(not (REF / "manifest.csv").exists(), reason="reference captures absent")
@pytest.mark.parametrize("keys", ["decrypt.cfg", "encrypt_tunnel_crypt_off_256_vc.cfg", "key file"])
def test_reference_captures(pelua_built: Path, work: Path, keys: str) -> None:
    """google/psp's outputs decrypt with the reference master keys, given as its own configs (the decrypt config,
    or an encrypt config, whose master keys are used as psp_decrypt uses them) or as a key file; the `_err` cases
    do not."""
    if keys == "key file":
        cfg = load_psp_ref_config(REF / "cfg" / "decrypt.cfg")
        kf = work / "ref_keys.txt"
        kf.write_text(f"psp-master key0={cfg.master_keys[0].hex()} key1={cfg.master_keys[1].hex()}\n")
    else:
        kf = work / keys
        shutil.copyfile(REF / "cfg" / keys, kf)
    kf.chmod(0o644)
    with open(REF / "manifest.csv", newline="") as f:
        cases = list(csv.DictReader(f))
    files = [REF / "encrypted" / f"{c['case']}.enc.pcap" for c in cases]
    cap = merge(work / "reference.pcap", files)
    names = ["psp.spi", "psp.version", "psp.status", "psp.icv_good", "udp.dstport", "_ws.expert.message"]
    proc = run(["-n", "-r", str(cap), "-T", "fields", *[a for n in names for a in ("-e", n)],
                "-o", f"psp.keyfile:{kf}"], plugin=None, lua_scripts=[PSP_LUA])
    no_lua_error(proc)
    assert "psp.lua:" not in proc.stderr, proc.stderr  # the file loaded: no problem to report
    got = [dict(zip(names, line.split("\t"))) for line in proc.stdout.splitlines()]
    got = [{k: ws.bool_text(v) if k == "psp.icv_good" else v for k, v in r.items()} for r in got]
    assert len(got) == len(cases)
    for case, r in zip(cases, got):
        enc_cfg = load_psp_ref_config(REF / "cfg" / case["encrypt_cfg"])
        assert r["psp.spi"] == f"{enc_cfg.spi:#010x}", case["case"]
        assert r["psp.version"] == str(enc_cfg.version), case["case"]
        if case["kind"] == "normal":
            assert r["psp.status"] == "ok", (case["case"], r)
            clear_ip = frames_of(REF / "clear" / case["cleartext"])[0]
            _, _, proto, seg = ip_payload(clear_ip)
            assert occurrences(r["udp.dstport"])[-1] == l4_dport(proto, seg), case["case"]
        else:
            assert r["psp.status"] not in ("", "ok"), (case["case"], r)
            assert r["psp.icv_good"] == "0"


def test_fuzzed_and_truncated_captures(pelua_built: Path, psp_capture, eesp_capture, keyfile: Path,
                                       work: Path) -> None:
    """Corrupted octets (editcap -E) and cut packets (editcap -s): no Lua error, exit status 0."""
    variants = []
    for name, (cap, _) in (("psp", psp_capture), ("eesp", eesp_capture)):
        for seed in (1, 2, 3, 4):
            out = work / f"fuzz_{name}_{seed}.pcap"
            subprocess.run(["editcap", "--seed", str(seed), "-E", "0.05", str(cap), str(out)], check=True,
                           capture_output=True)
            variants.append(out)
        for snap in (15, 43, 50, 60, 70, 90):
            out = work / f"cut_{name}_{snap}.pcap"
            subprocess.run(["editcap", "-s", str(snap), str(cap), str(out)], check=True, capture_output=True)
            variants.append(out)
    cap = merge(work / "fuzz.pcap", variants)
    proc = run(["-n", "-r", str(cap), "-V", "-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"],
                  plugin=None, lua_scripts=SCRIPTS, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_lua_error(proc)
    assert proc.stdout.count("Frame ") >= len(variants)


def replay_model(seqs: Sequence[int], size: int = 1024) -> List[Optional[str]]:
    """RFC 4303 §3.4.3 as a set: what the core's window (replay.c, the C plugin's default size) says of each."""
    top, seen, out = 0, set(), []
    for s in seqs:
        if s > top:
            top = s
            verdict = None
        elif top >= size and s <= top - size:
            verdict = "replay-too-old"
        elif s in seen:
            verdict = "replay-duplicate"
        else:
            verdict = None
        if verdict is None:
            seen.add(s)
        out.append(verdict)
    return out


def test_eesp_replay_window(pelua_built: Path, work: Path) -> None:
    """Jumps of less and more than the window, numbers left of it, duplicates inside it after a slide."""
    key = bytes(range(0x70, 0x84))
    tx = pyeesp.SA(0x3002, "aes-gcm-16", key=key, mode="tunnel")
    seqs = [1, 2000, 1, 1500, 1500, 977, 976, 3000, 2000, 1977, 1976, 3001, 70000, 3001, 68977, 68977, 68976, 69999,
            69999]
    pkts = {}
    inner = clear_packets(1)[0]  # one outer destination: the analysis keys on SPI, Session ID and destination
    for s in sorted(set(seqs)):
        tx.set_next_seq(s)
        pkts[s] = tx.encrypt(inner)
    cap = write_frames(work / "eesp_replay.pcap", [pkts[s] for s in seqs])
    keys = work / "eesp_replay.txt"
    keys.write_text(f"eesp-sa spi=0x3002 suite=aes-gcm-16 key={key.hex()} mode=tunnel\n")
    keys.chmod(0o644)
    got = rows(cap, ["eesp.seq", "eesp.status", "eesp.replay", "_ws.expert.message"],
               extra=["-o", f"eesp.keyfile:{keys}"])
    want = replay_model(seqs)
    assert want.count("replay-too-old") >= 3 and want.count("replay-duplicate") >= 3
    messages = {"replay-duplicate": "sequence number already received (replay)",
                "replay-too-old": "sequence number is left of the replay window"}
    for r, s, verdict in zip(got, seqs, want):
        assert r["eesp.status"] == "ok" and r["eesp.seq"] == str(s)
        if verdict:
            assert r["eesp.replay"] == "1", (s, verdict)
            assert f"Replay: {messages[verdict]} ({verdict})" in r["_ws.expert.message"], (s, verdict)
        else:
            assert r["eesp.replay"] == "" and "Replay:" not in r["_ws.expert.message"], s
