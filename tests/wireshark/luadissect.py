"""Shared by the tests of the Lua dissectors inside tshark (test_lua_dissectors.py,
test_lua_beside_plugin.py): the keys, captures made by pypsp / pyeesp, tshark runs and their fixtures.
"""
from __future__ import annotations

import functools
import importlib.util
import ipaddress
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


def home() -> Optional[Path]:
    """The throwaway HOME of this run, read when a test runs (an import would copy the None it starts as)."""
    return _HOME


@pytest.fixture(scope="session", autouse=True)
def tshark_home():
    # Imported by each Lua dissector test module, so it may be set up once per module: each instance removes
    # only its own folder, and the last one standing stays in _HOME.
    global _HOME
    mine = ws.shared_dir("pe-lua-home-")
    before, _HOME = _HOME, mine
    yield mine
    shutil.rmtree(mine, ignore_errors=True)
    if _HOME == mine:
        _HOME = before


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


