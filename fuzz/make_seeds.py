#!/usr/bin/env python3
"""Write the seed corpora fuzz/corpus/<target>/seed-* and the dictionaries fuzz/<target>.dict.

Run with the project's venv:  .venv/bin/python fuzz/make_seeds.py

Sources (all optional except our own packages):
  - the google/psp reference captures (/work/shared/reference/psp/encrypted/*.pcap, or
    $PE_REFERENCE_DIR/psp/encrypted), read with pecore.capture.read_capture;
  - their configs (cfg/*.cfg) for the key-file target;
  - packets made here with pypsp.Encryptor and pyeesp.SA under the keys the
    harnesses hold (fuzz/common.c: reference master keys, derived-key table,
    the EESP SA table mirrored in EESP_SAS below) and demo/keys.txt;
  - hex packet fields of vectors/**/*.json and tests/data/*.json when present.

Only files named seed-* are replaced; regress-* (minimized crashes) and
other files someone promoted from fuzz/corpus-new/ are left alone.  Output
is deterministic.
"""
from __future__ import annotations

import glob
import json
import os
import random
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyeesp  # noqa: E402
import pypsp  # noqa: E402
from pecore.capture import CaptureWriter, read_capture  # noqa: E402
from pecore.protocol import checksum, eesp_suite  # noqa: E402

FUZZ = ROOT / "fuzz"
CORPUS = FUZZ / "corpus"
REF = Path(os.environ.get("PE_REFERENCE_DIR", "/work/shared/reference")) / "psp"
TARGETS = ["psp_hdr", "psp_open", "psp_decap", "eesp_hdr", "eesp_decap", "eesp_open", "keyfile", "capture", "ip",
           "diff", "backend_diff"]
MAX_PER_TARGET = 90

MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
ROOT_00_1F = bytes(range(32))
K_40_63 = bytes(range(0x40, 0x64))
K_80 = bytes(range(0x80, 0xC0))

# fuzz/common.c FZ_EESP_SAS, as pyeesp.SA keyword arguments (keep in step), plus the sender-only
# settings the seeds use (crypt_offset, udp_encap) and which inner packets / Sub SAs suit the SA.
EESP_SAS = [
    dict(spi=0x1000, suite="aes-gcm-16", key_bits=128, root_key=ROOT_00_1F, sskdf="hkdf-sha256", mode="tunnel",
         max_sub_sa_id=7, _subs=(0, 3, 7)),
    dict(spi=0x2000, suite="chacha20-poly1305", key=K_40_63, mode="transport", udp_encap=True),
    dict(spi=0x3000, suite="aes-gcm-16", key_bits=256, root_key=K_80, sskdf="hkdf-sha512", mode="tunnel",
         format="full", replay_window=64, max_crypt_offset=63, crypt_offset=8, _subs=(0, 1, 65535)),
    dict(spi=0x4000, suite="aes-gmac", key_bits=128, key=K_80[:20], mode="transport", replay_window=128,
         max_crypt_offset=16, crypt_offset=2),
    dict(spi=0x5000, suite="aes-ccm-12", key_bits=192, key=K_80[:27], mode="tunnel", format="full",
         aad="linux-xfrm", anti_replay=False, max_crypt_offset=63, crypt_offset=6),
    dict(spi=0x6000, suite="aes-gcm-16-iiv", key_bits=128, key=K_40_63[:20], mode="transport", replay_window=64,
         strict=True, dst="192.0.2.2", _dst4="192.0.2.2", _v4only=True),
    dict(spi=0x6000, suite="aes-ccm-8-iiv", key_bits=256, root_key=K_80[:48], sskdf="hkdf-sha384", mode="tunnel",
         format="optimized", _subs=(0, 9), _dst4="192.0.2.99"),
    dict(spi=0x7000, suite="aes-gcm-8", key_bits=128, key=ROOT_00_1F[:20], mode="tunnel", seq=False,
         anti_replay=False),
    dict(spi=0x8000, suite="chacha20-poly1305-iiv", root_key=K_80[:32], sskdf="hkdf-sha256", mode="tunnel",
         format="optimized", max_sub_sa_id=0, dst="2001:db8::2", _v6=True),
    dict(spi=0x9000, suite="aes-gcm-12", key_bits=256, key=K_40_63, mode="transport", format="optimized",
         aad="linux-xfrm", max_crypt_offset=0, crypt_offset=0, _ipip=True),
]

# fuzz/common.c FZ_PSP_USER_KEYS entries that are not derived from the master keys.
PSP_USER_KEYS = [(0x00000001, bytes(range(1, 17))), (0x80000002, bytes(range(0x20, 0x40)))]


# ----------------------------------------------------------------------------------------------- packets

def csum(data: bytes) -> int:
    return checksum(data)


def ipv4(proto: int, payload: bytes, src=b"\xc0\x00\x02\x01", dst=b"\xc0\x00\x02\x02", opts=b"") -> bytes:
    ihl = 5 + len(opts) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(payload), 0x1234, 0x4000, 64, proto, 0, src,
                    dst) + opts
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def ipv6(nh: int, payload: bytes, src="2001:db8::1", dst="2001:db8::2", ext=b"") -> bytes:
    import ipaddress
    return (struct.pack("!IHBB", 0x60000000, len(ext) + len(payload), nh, 64) + ipaddress.ip_address(src).packed +
            ipaddress.ip_address(dst).packed + ext + payload)


def udp(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def tcp(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, 0x18, 1024, 0, 0) + data


def inner_packets(rng: random.Random):
    """A handful of plain IP packets of assorted shapes."""
    data = bytes(rng.randrange(256) for _ in range(40))
    yield ipv4(17, udp(1234, 5678, data))
    yield ipv4(6, tcp(40000, 443, data[:7]))
    yield ipv4(1, b"\x08\x00\x00\x00\x00\x01\x00\x01" + data[:12], opts=b"\x01\x01\x01\x00")
    yield ipv6(17, udp(5353, 53, data[:21]))
    # Hop-by-Hop, then Destination Options, then TCP (D14 keeps only the first in transport mode)
    yield ipv6(0, tcp(1, 2, data[:3]), ext=bytes([60, 0, 1, 4, 0, 0, 0, 0]) + bytes([6, 0, 1, 4, 0, 0, 0, 0]))
    yield ipv4(17, udp(7, 7, b""))


def ip_proto(ip: bytes) -> tuple[int, int]:
    """(upper-layer protocol, its offset) of an IPv4/IPv6 packet (Hop-by-Hop, Routing, Destination Options skipped)."""
    if ip[0] >> 4 == 4:
        return ip[9], (ip[0] & 0xF) * 4
    off, nh = 40, ip[6]
    while nh in (0, 43, 60):
        nh, off = ip[off], off + (ip[off + 1] + 1) * 8
    return nh, off


def l4_offset(ip: bytes) -> int:
    return ip_proto(ip)[1]


def udp_payload(ip: bytes) -> bytes:
    return ip[l4_offset(ip) + 8:]


def eesp_octets(ip: bytes) -> bytes:
    proto, off = ip_proto(ip)
    return ip[off + 8:] if proto == 17 else ip[off:]


def open_ctl(ip: bytes) -> int:
    """fuzz_eesp_open's ctl bits for the packet's outer destination: bit 3 IPv6; bits 4-5 192.0.2.2 / 2001:db8::2 / none."""
    if ip[0] >> 4 == 4:
        return 0x10 if ip[16:20] == bytes([192, 0, 2, 2]) else 0x00
    return 0x08 | (0x20 if ip[24:40] == bytes.fromhex("20010db8000000000000000000000002") else 0x00)


def record(ctl: int, data: bytes) -> bytes:
    return bytes([ctl]) + struct.pack("!H", len(data)) + data


# ----------------------------------------------------------------------------------------------- sources

def reference_packets():
    """(name, linktype, frame, ip packet) of every reference capture record, and the capture files."""
    enc = REF / "encrypted"
    for path in sorted(glob.glob(str(enc / "*.pcap"))):
        for i, rec in enumerate(read_capture(path)):
            ip = rec.ip_packet()
            if ip is not None:
                yield Path(path).name.replace(".enc.pcap", ""), i, rec.linktype, rec.data, ip


def psp_packets(rng: random.Random):
    """(name, ip packet) made by pypsp under keys the harness receivers hold."""
    configs = []
    for version in range(4):
        gmac = version >= 2
        for mode in ("transport", "tunnel"):
            for vc in (None, bytes(range(8))):
                co = 0 if gmac else (1 if mode == "transport" else 6) + (2 if vc else 0)
                spi = rng.choice([0x9A345678, 0x1A345678, 0x12345678, 0x00000042, 0x80000042])
                configs.append((f"v{version}-{mode}-{'vc' if vc else 'novc'}-{spi:08x}",
                                dict(spi=spi, master_keys=(MK0, MK1), version=version, mode=mode,
                                     crypt_offset=co, vc=vc, crypt_offset_ipv6=None if gmac else co + 5)))
    # The crypt offset leaving part of the VC encrypted, S/D bits, IVs near the end.
    configs.append(("v0-vc-cut", dict(spi=0x9A345678, master_keys=(MK0, MK1), vc=b"\xde\xad\xbe\xef" * 2,
                                      crypt_offset=1, sample=True, drop=True)))
    configs.append(("v1-iv-end", dict(spi=0x1A345678, master_keys=(MK0, MK1), version=1, first_iv=2**64 - 2)))
    for spi, key in PSP_USER_KEYS:  # the derived-key receiver's own keys
        for version in ((0, 2) if len(key) == 16 else (1, 3)):
            configs.append((f"user-{spi:08x}-v{version}", dict(spi=spi, key=key, version=version)))
    inners = list(inner_packets(rng))
    for name, kw in configs:
        enc = pypsp.Encryptor(**kw)
        for j, pkt in enumerate(rng.sample(inners, 2)):
            try:
                wire = enc.encrypt(pkt)
            except pypsp.PspError:
                continue
            # plaintext form for the re-seal mode: P = VC || (transport: L4 segment; tunnel: the packet)
            body = (kw.get("vc") or b"") + (pkt if kw.get("mode") == "tunnel" else pkt[l4_offset(pkt):])
            psp_off = len(wire) - len(udp_payload(wire))
            plain = wire[:psp_off + 16] + body + bytes(16)
            yield f"{name}-{j}", wire, plain


def eesp_sequences(rng: random.Random):
    """(name, [outer packets]) per SA of the table, several Sub SAs and shapes each."""
    for s in EESP_SAS:
        kw = {k: v for k, v in s.items() if not k.startswith("_")}
        sa = pyeesp.SA(**kw)
        pkts = []
        v6 = s.get("_v6")
        dst4 = s.get("_dst4", "192.0.2.2")
        import ipaddress
        d4 = ipaddress.ip_address(dst4).packed
        for sub in s.get("_subs", (0,)):
            data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 60)))
            if s.get("_ipip"):
                inner = [ipv4(4, ipv4(17, udp(1, 2, data)), dst=d4)]
            elif v6:
                inner = [ipv6(17, udp(3, 4, data)), ipv6(6, tcp(5, 6, data))]
            else:
                inner = [ipv4(17, udp(1000, 4500, data), dst=d4), ipv6(17, udp(9, 9, data)),
                         ipv4(6, tcp(80, 8080, data), dst=d4)]
                if s.get("_v4only"):
                    inner = [p for p in inner if p[0] >> 4 == 4]
            for pkt in inner:
                try:
                    pkts.append(sa.encrypt(pkt, sub_sa_id=sub))
                except pyeesp.EespError:
                    pass
        if pkts:
            rx = pyeesp.SA(**kw)  # a fresh receiver for the plaintext forms
            plains = [eesp_plain_form(s, rx, p) for p in pkts]
            yield f"{s['spi']:04x}-{kw['suite']}-{kw['mode']}", pkts, [p for p in plains if p]


def eesp_plain_form(s: dict, sa, wire: bytes) -> bytes | None:
    """The packet as the re-seal mode wants it: headers as sent, the plaintext where the ciphertext was."""
    try:
        dec = sa.decrypt(wire)
    except pyeesp.EespError:
        return None
    e = eesp_octets(wire)
    e_off = len(wire) - len(e)
    suite = eesp_suite(s["suite"])  # explicit IV and ICV octets from the core's table (eesp.md §10)
    assert suite is not None, s["suite"]
    iv_len, icv_len = suite.iv_len, suite.icv_len
    payload_off = 8 + e[1] + (8 if s.get("seq", True) else 0) + iv_len
    region = len(e) - payload_off - icv_len
    pih = 4 if dec.full_format else 0
    inner_len = region - pih - dec.pad_len
    inner = dec.packet[len(dec.packet) - inner_len:]
    plain = (bytes([0, 0, dec.next_header, dec.pad_len]) if pih else b"") + inner + bytes(dec.pad_len)
    return wire[:e_off] + e[:payload_off] + plain + bytes(icv_len)


def vector_packets():
    """Hex packet-like fields of vectors/**/*.json and tests/data/*.json: (name, octets)."""
    files = sorted(f for f in glob.glob(str(ROOT / "vectors" / "**" / "*.json"), recursive=True) if "/schema/" not in f)
    files += sorted(glob.glob(str(ROOT / "tests" / "data" / "*.json")))
    keys = ("packet", "ciphertext", "plaintext", "wire", "frame", "encrypted", "decrypted", "inner", "outer")

    def walk(obj, path):
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from walk(v, path + [str(k)])
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                yield from walk(v, path + [str(i)])
        elif isinstance(obj, str) and len(obj) >= 40 and len(obj) % 2 == 0 and path and \
                any(k in path[-1].lower() for k in keys):
            try:
                yield "-".join(path[-3:]), bytes.fromhex(obj)
            except ValueError:
                pass

    for f in files:
        try:
            with open(f) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        for name, octets in walk(doc, []):
            yield f"{Path(f).stem}-{name}", octets


# ----------------------------------------------------------------------------------------------- output

class Corpus:
    def __init__(self) -> None:
        self.files: dict[str, dict[str, bytes]] = {t: {} for t in TARGETS}

    def add(self, target: str, name: str, data: bytes, over_cap: bool = False) -> None:
        files = self.files[target]
        if (len(files) >= MAX_PER_TARGET and not over_cap) or data in files.values():
            return
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:80]
        files[f"seed-{safe}"] = data

    def write(self) -> None:
        total = 0
        for target, files in self.files.items():
            d = CORPUS / target
            d.mkdir(parents=True, exist_ok=True)
            for old in d.glob("seed-*"):
                old.unlink()
            for name, data in sorted(files.items()):
                (d / name).write_bytes(data)
            size = sum(len(v) for v in files.values())
            total += size
            print(f"{target:12} {len(files):4} seeds {size:8} octets")
        print(f"{'total':12} {sum(len(f) for f in self.files.values()):4} seeds {total:8} octets")


def main() -> None:
    rng = random.Random(20240607)
    c = Corpus()

    # --- reference captures
    ref_frames = []
    for name, i, linktype, frame, ip in reference_packets():
        n = f"ref-{name}-{i}"
        c.add("psp_decap", n, b"\x00" + ip)
        c.add("psp_open", n, b"\x00" + udp_payload(ip))
        c.add("psp_hdr", n, udp_payload(ip)[:24])
        c.add("ip", n, b"\x01" + frame if linktype == 1 else b"\x00" + ip)
        ref_frames.append((linktype, frame))
    for path in sorted(glob.glob(str(REF / "encrypted" / "*.pcap"))):
        if "crypt_off_128" in path or "empty" in path or "err" in path:  # a sample is enough
            c.add("capture", "ref-" + Path(path).stem, Path(path).read_bytes())

    # --- pypsp
    psp_all = list(psp_packets(rng))
    psp_pkts = [(name, ip) for name, ip, _ in psp_all]
    for name, ip in psp_pkts:
        c.add("psp_decap", f"pypsp-{name}", b"\x00" + ip)
        c.add("psp_open", f"pypsp-{name}", b"\x00" + udp_payload(ip))
        c.add("psp_hdr", f"pypsp-{name}", udp_payload(ip)[:32])
        c.add("ip", f"pypsp-{name}", b"\x00" + ip)
    for k, (name, _, plain) in enumerate(psp_all[::3]):  # re-seal / flip variants (ctl bits, see the harnesses)
        ctl = [0x01, 0x03, 0x05, 0x25, 0x47, 0xF1][k % 6]
        c.add("psp_decap", f"pypsp-{name}-ctl{ctl:02x}", bytes([ctl]) + plain)
        c.add("psp_open", f"pypsp-{name}-ctl{ctl:02x}", bytes([ctl]) + udp_payload(plain))

    # --- pyeesp: sequences per SA, and all SAs interleaved
    all_pkts = []
    for name, pkts, plains in eesp_sequences(rng):
        all_pkts += pkts
        seq = b"".join(record(0x00, p) for p in pkts)
        replayed = b"".join(record(0x02, p) for p in pkts) + record(0x00, pkts[0])
        # re-seal mode (ctl bit 0) takes plaintext forms; with bit 2 a flipped copy goes first
        tampered = b"".join(record(0x07 | (i << 3), p) for i, p in enumerate(plains))
        c.add("eesp_decap", f"pyeesp-{name}", seq)
        c.add("eesp_decap", f"pyeesp-{name}-replay", replayed)
        c.add("eesp_decap", f"pyeesp-{name}-tamper", tampered)
        for p in pkts[:2]:
            e = eesp_octets(p)
            c.add("eesp_hdr", f"pyeesp-{name}", e[: 8 + e[1] + 16])
            c.add("ip", f"pyeesp-{name}", b"\x00" + p)
        c.add("eesp_open", f"pyeesp-{name}", b"".join(
            record(open_ctl(p), eesp_octets(p)) for p in pkts))
        c.add("eesp_open", f"pyeesp-{name}-noreplay", b"".join(
            record(open_ctl(p) | 0x02, eesp_octets(p)) for p in pkts * 2))
        c.add("eesp_open", f"pyeesp-{name}-reseal", b"".join(
            record(open_ctl(p) | 0x05, eesp_octets(p)) for p in plains))
    rng.shuffle(all_pkts)
    c.add("eesp_decap", "pyeesp-mixed", b"".join(record(0x00, p) for p in all_pkts[:16]))
    # ctl bit 6 on the first record: also through pe_batch_transform, compared with one call per packet
    c.add("eesp_decap", "pyeesp-mixed-batch", b"".join(record(0x40 if i == 0 else 0, p) for i, p in enumerate(all_pkts[:12])))
    # UDP 4500 neighbours: keepalive, IKE (non-ESP marker), ESP-in-UDP
    for n, payload in (("keepalive", b"\xff"), ("ike", b"\0\0\0\0" + bytes(28)), ("esp", b"\x00\x00\x10\x00" + bytes(24))):
        c.add("eesp_decap", f"udp4500-{n}", record(0, ipv4(17, udp(4500, 4500, payload))))
        c.add("eesp_hdr", f"udp4500-{n}", payload)

    # --- handcrafted headers
    c.add("eesp_hdr", "options-all", bytes([0x80, 12, 0, 1, 0, 0, 0x10, 0]) + b"\x02\x02\x1c\x80\x00\x01\x02\x00\x00\xe0\x00\x00")
    c.add("eesp_hdr", "crypt-offset-twice", bytes([0x80, 8, 0, 0, 0, 0, 0, 1]) + b"\x02\x02\x1c\x80" * 2)
    c.add("psp_hdr", "hdrextlen-max", bytes([17, 255, 0x3F, 0xFF]) + bytes(12) + bytes(range(256)) * 8)

    # --- key files
    c.add("keyfile", "demo-keys", (ROOT / "demo" / "keys.txt").read_bytes())
    for path in sorted(glob.glob(str(REF / "cfg" / "*.cfg"))):
        c.add("keyfile", "refcfg-" + Path(path).stem, Path(path).read_bytes())
    mk = f"key0={MK0.hex()} key1={MK1.hex()}"
    c.add("keyfile", "psp-all", "\n".join([
        f"psp-master {mk}",
        "psp-key spi=1 key=0102030405060708090a0b0c0d0e0f10",
        f"psp-key spi=80000002 key={bytes(range(0x20, 0x40)).hex()} version=3",
        "psp-sa spi=0x9a345678 version=0 mode=transport crypt-offset=1 sample=1 drop=0 first-iv=0xfffffffffffffffe",
        "psp-sa spi=1a345678 version=1 mode=tunnel crypt-offset-ipv4=8 crypt-offset-ipv6=13 vc=00000000deadbeef",
        "psp-sa spi=2 version=2 mode=transport", "other-kind a=b c=d   # kept as a generic line", ""]).encode())
    for s in EESP_SAS:
        kv = [f"spi={s['spi']:#x}", f"suite={s['suite']}"]
        if "key_bits" in s:
            kv.append(f"key-bits={s['key_bits']}")
        kv.append(f"root-key={s['root_key'].hex()} sskdf={s['sskdf']}" if "root_key" in s else f"key={s['key'].hex()}")
        for k in ("mode", "format", "aad", "replay_window", "max_sub_sa_id", "max_crypt_offset", "crypt_offset", "dst"):
            if k in s:
                kv.append(f"{k.replace('_', '-')}={s[k]}")
        for k, word in (("seq", "seq"), ("anti_replay", "anti-replay"), ("strict", "strict"), ("udp_encap", "udp-encap")):
            if k in s:
                kv.append(f"{word}={int(s[k])}")
        c.add("keyfile", f"eesp-{s['spi']:04x}", ("eesp-sa " + " ".join(kv) + "\n").encode())
    for n, text in (("dup", f"psp-master {mk}\npsp-master {mk}\n"), ("bad-hex", "psp-key spi=1 key=zz\n"),
                    ("nul", "psp-key spi=1\0 key=00\n"), ("crlf", f"psp-master {mk}\r\n# c\r\n"),
                    ("eesp-dst6", "eesp-sa spi=5 suite=aes-gcm-16-iiv key=" + bytes(20).hex() +
                     " dst=2001:db8::2 src=* sub-sas=3 ip-protocol=253 align=0\n")):
        c.add("keyfile", n, text.encode())

    # --- captures of our own: pcap (nsec), pcapng, raw IP, Linux SLL/SLL2 with VLAN-tagged Ethernet inside pcapng
    tmp = FUZZ / ".seeds.tmp"
    eth = lambda ip, vlan=False: (b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02" + (b"\x81\x00\x00\x05" if vlan else b"") +
                                  (b"\x08\x00" if ip[0] >> 4 == 4 else b"\x86\xdd") + ip)
    sll = lambda ip: struct.pack("!HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01\0\0", 0x0800 if ip[0] >> 4 == 4 else 0x86DD) + ip
    sll2 = lambda ip: struct.pack("!HHIHBB8s", 0x0800 if ip[0] >> 4 == 4 else 0x86DD, 0, 2, 1, 0, 6,
                                  b"\x02\0\0\0\0\x01\0\0") + ip
    some = [ip for _, ip in psp_pkts[:4]] + all_pkts[:4]
    for fmt, lt, wrap, n in (("pcapng", 1, lambda ip: eth(ip, True), "pcapng-eth-vlan"),
                             ("pcap-nsec", 101, lambda ip: ip, "pcap-nsec-raw"),
                             ("pcap", 113, sll, "pcap-sll"), ("pcapng", 276, sll2, "pcapng-sll2"),
                             ("pcap", 228, lambda ip: ip, "pcap-ipv4-linktype")):
        try:
            with CaptureWriter(tmp, linktype=lt, fmt=fmt) as w:
                for k, ip in enumerate(some):
                    if lt == 228 and ip[0] >> 4 != 4:
                        continue
                    w.write(wrap(ip), ts=(1700000000 + k, 123456789 if fmt != "pcap" else 123456000))
            data = tmp.read_bytes()
            c.add("capture", n, data)
            if fmt == "pcap":  # the same file big-endian
                c.add("capture", n + "-be", pcap_swap(data))
        finally:
            if tmp.exists():
                tmp.unlink()
    for lt, frame in ref_frames[:2]:
        c.add("ip", f"sll-{lt}", b"\x04" + sll(frame[14:]))
        c.add("ip", f"sll2-{lt}", b"\x05" + sll2(frame[14:]))
        c.add("ip", f"vlan-{lt}", b"\x01" + eth(frame[14:], True))

    # --- vectors (when the generator has written them): 16 per target, spread over all files
    picks: dict[str, list] = {}
    for name, octets in vector_packets():
        if len(octets) < 8:
            continue
        if octets[0] >> 4 in (4, 6):
            picks.setdefault("ip", []).append((name, b"\x00" + octets))
            try:
                proto, off = ip_proto(octets)
            except IndexError:
                continue
            dport = struct.unpack("!H", octets[off + 2:off + 4])[0] if len(octets) >= off + 4 else 0
            if proto == 17 and dport == 1000:
                picks.setdefault("psp_decap", []).append((name, b"\x00" + octets))
                picks.setdefault("psp_open", []).append((name, b"\x00" + octets[off + 8:]))
                picks.setdefault("psp_hdr", []).append((name, octets[off + 8:off + 40]))
            elif proto == 49 or (proto == 17 and dport == 4500):
                e = eesp_octets(octets)
                picks.setdefault("eesp_decap", []).append((name, record(0, octets)))
                picks.setdefault("eesp_open", []).append((name, record(open_ctl(octets), e)))
                picks.setdefault("eesp_hdr", []).append((name, e[:64]))
    for t, cands in sorted(picks.items()):
        step = max(1, len(cands) // 16)
        for name, data in cands[::step][:16]:
            c.add(t, f"vec-{name}", data, over_cap=True)

    # vectors/pcap: key files (every eesp-sa / psp-sa shape the generator uses) and a few small captures
    keys = sorted(glob.glob(str(ROOT / "vectors" / "pcap" / "*.keys")))
    for path in keys[:: max(1, len(keys) // 16)][:16]:
        c.add("keyfile", "vec-" + Path(path).stem, Path(path).read_bytes(), over_cap=True)
    pcaps = [p for p in sorted(glob.glob(str(ROOT / "vectors" / "pcap" / "*.pcap*"))) if os.path.getsize(p) < 3000]
    for path in pcaps[:: max(1, len(pcaps) // 6)][:6]:
        c.add("capture", "vec-" + Path(path).name, Path(path).read_bytes(), over_cap=True)

    # --- differential: parameter blobs (the harness reads parameters from the front)
    for k in range(48):
        sel = k & 1
        blob = bytes([sel]) + bytes(rng.randrange(256) for _ in range(rng.randrange(40, 400)))
        c.add("diff", f"random-{k:02d}-{'eesp' if sel else 'psp'}", blob)

    for name, blob in backend_diff_seeds():
        c.add("backend_diff", name, blob)

    c.write()
    write_dicts()


def backend_diff_seeds():
    """fuzz_backend_diff's inputs (layout in its header comment): each of its 19 suites once with every AAD
    and plaintext split, and the shapes aead_imb.c treats apart - no payload (GMAC), a split AAD past its
    512-octet room, CCM's AAD past the 46 octets ipsec-mb takes - with each flip target."""
    rng = random.Random(20261202)
    shapes = [  # (AAD parts, AAD octets, plaintext parts, plaintext octets, in-place mask)
        (1, 8, 1, 64, 0), (2, 20, 3, 1500, 5), (4, 600, 2, 300, 2), (0, 0, 0, 0, 0), (3, 513, 1, 17, 1),
        (1, 47, 2, 2000, 3), (2, 46, 3, 1, 7), (4, 3, 1, 0, 0)]
    for suite in range(19):
        key_len = 16 if suite in (0, 1, 2, 9, 10, 11) else 24 if suite in (3, 4, 5, 12, 13, 14) else 32
        nonce_len = 11 if 9 <= suite <= 17 else 12
        for k, (n_aad, aad_len, n_pt, pt_len, in_place) in enumerate(shapes):
            if (suite + k) % 3:  # a third of the pairs: 51 seeds
                continue
            flags = n_aad | n_pt << 3 | in_place << 5
            flags2 = (k & 1) | (suite & 1) << 1 | (k % 4) << 2 | (0x10 if k == 3 else 0) | (0x20 if k == 5 else 0)
            head = bytes([suite, flags, flags2]) + rng.randbytes(key_len + nonce_len)
            head += struct.pack("!H", aad_len) + b"".join(struct.pack("!H", rng.randrange(aad_len + 1))
                                                           for _ in range(3))
            head += struct.pack("!H", pt_len) + b"".join(struct.pack("!H", rng.randrange(pt_len + 1))
                                                          for _ in range(3))
            head += struct.pack("!HB", rng.randrange(65536), rng.randrange(8))
            yield f"s{suite:02d}-aad{aad_len}x{n_aad}-pt{pt_len}x{n_pt}", head + rng.randbytes(aad_len + pt_len)


def pcap_swap(data: bytes) -> bytes:
    """A little-endian pcap rewritten big-endian (header and record headers)."""
    out = bytearray(struct.pack(">IHHiIII", *struct.unpack("<IHHiIII", data[:24])))
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack("<IIII", data[off:off + 16])
        out += struct.pack(">IIII", sec, frac, incl, orig) + data[off + 16:off + 16 + incl]
        off += 16 + incl
    return bytes(out)


# ----------------------------------------------------------------------------------------------- dictionaries

def tok(b: bytes) -> str:
    return '"' + "".join(f"\\x{x:02x}" for x in b) + '"'


PSP_TOKENS = ([bytes([v]) for v in (0x01, 0x03, 0x05, 0x07, 0x09, 0x0B, 0x0D, 0x0F, 0xC1, 0x3F)] +
              [b"\x11\x01\x00\x01", b"\x06\x01\x01\x01", b"\x04\x02\x08\x07", b"\x29\x01\x0b\x05", b"\x11\x02\x02\x03",
               b"\x9a\x34\x56\x78", b"\x1a\x34\x56\x78", b"\x12\x34\x56\x78", b"\x80\x00\x00\x02", b"\x00\x00\x00\x01",
               b"\x00\x00\x00\x00\x00\x00\x00\x01", b"\xff\xff\xff\xff\xff\xff\xff\xff", b"\x03\xe8", b"\x00\x00"])
IP_TOKENS = [b"\x45\x00", b"\x46\x00", b"\x4f", b"\x60\x00\x00\x00", b"\x08\x00", b"\x86\xdd", b"\x81\x00", b"\x88\xa8",
             b"\x11", b"\x06", b"\x2c", b"\x3c", b"\x2b", b"\x00\x00", b"\x20\x00", b"\x3f\xff", b"\x40\x00", b"\xff\xff"]
EESP_TOKENS = [b"\x80", b"\x80\x00", b"\x80\x04\x00\x00", b"\x02\x02", b"\x02\x02\x1c\x80", b"\x01\x00", b"\x01\x02\x00\x00",
               b"\x00\x00\x10\x00", b"\x00\x00\x20\x00", b"\x00\x00\x30\x00", b"\x00\x00\x40\x00", b"\x00\x00\x50\x00",
               b"\x00\x00\x60\x00", b"\x00\x00\x70\x00", b"\x00\x00\x80\x00", b"\x00\x00\x90\x00", b"\x00\x07", b"\xff\xff",
               b"\x11\x94", b"\x31", b"\xff", b"\x00\x00\x00\x00", b"\x00\x00\x04", b"\x00\x00\x29", b"\x00\x00\x3b",
               b"\x00\x00\x00\x00\x00\x00\x00\x01", b"\xc0\x00\x02\x02", b"\x20\x01\x0d\xb8"]
CAPTURE_TOKENS = [b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x0a\x0d\x0d\x0a",
                  b"\x4d\x3c\x2b\x1a", b"\x1a\x2b\x3c\x4d", b"\x01\x00\x00\x00", b"\x06\x00\x00\x00", b"\x03\x00\x00\x00",
                  b"\x02\x00\x00\x00", b"\x05\x00\x00\x00", b"\x09\x00\x01\x00", b"\x89\x00\x01\x00", b"\x01\x00",
                  b"\x65\x00\x00\x00", b"\xe4\x00\x00\x00", b"\xe5\x00\x00\x00", b"\x71\x00\x00\x00", b"\x14\x01\x00\x00",
                  b"\xff\xff\xff\xff\xff\xff\xff\xff", b"\x00\x00\x04\x00"] + IP_TOKENS[:8]
KEYFILE_WORDS = ["psp-master", "psp-key", "psp-sa", "eesp-sa", "key0=", "key1=", "spi=", "spi=0x", "key=", "version=",
                 "mode=transport", "mode=tunnel", "crypt-offset=", "crypt-offset-ipv4=", "crypt-offset-ipv6=", "vc=",
                 "sample=1", "drop=1", "first-iv=0x", "suite=", "aes-gcm-16", "aes-gcm-16-iiv", "aes-ccm-8", "aes-gmac",
                 "chacha20-poly1305", "ENCR_AES_GCM_16", "key-bits=256", "root-key=", "sskdf=hkdf-sha256",
                 "sskdf=hkdf-sha512", "format=optimized", "format=full", "seq=0", "aad=linux-xfrm", "anti-replay=0",
                 "replay-window=1048576", "max-sub-sa-id=65535", "max-crypt-offset=255", "align=0", "strict=1",
                 "ip-protocol=", "udp-encap=1", "src=*", "dst=", "dst=192.0.2.2", "dst=2001:db8::2", "sub-sas=65536",
                 "#", "\n", "\r\n", "\t", "=", "aes-gcm-128", "aes-gcm-256", "transport", "tunnel", "no-vc",
                 "00000000deadbeef", MK0.hex(), "0102030405060708090a0b0c0d0e0f10", "18446744073709551615"]


def write_dicts() -> None:
    sets = {
        "psp_hdr": PSP_TOKENS, "psp_open": PSP_TOKENS, "psp_decap": PSP_TOKENS + IP_TOKENS,
        "eesp_hdr": EESP_TOKENS, "eesp_open": EESP_TOKENS, "eesp_decap": EESP_TOKENS + IP_TOKENS,
        "ip": IP_TOKENS + [b"\x03\xe8", b"\x11\x94", b"\x31"], "capture": CAPTURE_TOKENS,
        "keyfile": [w.encode() for w in KEYFILE_WORDS],
    }
    for target, tokens in sets.items():
        lines = [f"# libFuzzer dictionary for fuzz_{target} (written by fuzz/make_seeds.py)"]
        lines += [tok(t) for t in dict.fromkeys(tokens)]
        (FUZZ / f"{target}.dict").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
