#!/usr/bin/env python3
"""Write the atheris seed corpora (fuzz/atheris/corpus/<harness>/) from the project's vectors.

Deterministic: the same vectors give the same files.  Run it again after the
vectors or a harness's input framing change (the framing is _common.frame);
regression inputs (crashes found and fixed) live beside the seeds as
``regress-*`` files and are kept.

    .venv/bin/python fuzz/atheris/make_corpus.py
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
from _common import CORPUS, PCAPS, VECTORS, frame  # noqa: E402

from pecore._native import ffi, lib  # noqa: E402
from pecore.capture import CaptureWriter, read_capture  # noqa: E402

PER_GROUP = 3  # tests taken from each vector group (distinct flag sets first)


# ------------------------------------------------------------------ vectors


def groups(kind: str):
    """(key file path, group, tests) for every PSP or EESP packet-vector group, in key-file order."""
    out = []
    for path in sorted(glob.glob(os.path.join(VECTORS, f"{kind}_*_test.json"))):
        doc = json.load(open(path))
        stem = os.path.basename(path)[: -len("_test.json")]
        for gi, g in enumerate(doc["testGroups"], start=1):
            if g["type"] not in ("PspPacketTest", "EespPacketTest"):
                continue
            keys = os.path.join(PCAPS, f"{stem}_g{gi:02d}.keys")
            out.append((keys, g, g["tests"]))
    return out


def pick(tests, n: int = PER_GROUP):
    """Up to n tests with different flag sets (valid ones first), deterministic."""
    chosen, seen = [], set()
    for t in sorted(tests, key=lambda t: (t["result"] != "valid", t["tcId"])):
        flags = tuple(sorted(t["flags"])) + (t["result"],)
        if flags in seen:
            continue
        seen.add(flags)
        chosen.append(t)
        if len(chosen) == n:
            break
    return chosen


def wire(t) -> bytes:
    return bytes.fromhex(t["inputs"]["ciphertextPacket"])


def udp_payload(ip: bytes):
    u = ffi.new("pe_udp_view *")
    if lib.pe_ip_udp(ip, len(ip), u) != lib.PE_OK:
        return None
    return ip[u.payload_offset : u.payload_offset + u.payload_len]


def eesp_part(ip: bytes):
    info = ffi.new("pe_ip_info *")
    if lib.pe_ip_parse(ip, len(ip), info) != lib.PE_OK:
        return None
    if info.protocol == 49:
        return ip[info.l4_offset : info.len]
    return udp_payload(ip)


# ------------------------------------------------------------------ output


class Corpus:
    def __init__(self, name: str) -> None:
        self.dir = os.path.join(CORPUS, name)
        os.makedirs(self.dir, exist_ok=True)
        for f in os.listdir(self.dir):  # seeds are regenerated; regression inputs stay
            if not f.startswith("regress-"):
                os.remove(os.path.join(self.dir, f))
        self.n = self.bytes = 0
        self.digests = set()

    def add(self, label: str, data: bytes) -> None:
        digest = hashlib.sha1(data).hexdigest()
        if digest in self.digests:
            return
        self.digests.add(digest)
        with open(os.path.join(self.dir, f"{label}-{digest[:8]}"), "wb") as f:
            f.write(data)
        self.n += 1
        self.bytes += len(data)


def esp_corpus() -> "Corpus":
    """fuzz_esp: packets of every SA in _common.ESP_SAS (IPv4 and IPv6 inside), whole, bare and cut, and what
    else UDP 4500 carries (modes as in fuzz_esp.MODES)."""
    from pecore.protocol import checksum, locate_esp

    def ipv4(proto: int, payload: bytes) -> bytes:
        h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0,
                                  bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])))
        h[10:12] = struct.pack("!H", checksum(bytes(h)))
        return bytes(h) + payload

    def udp(data: bytes, port: int = 53) -> bytes:
        return struct.pack("!HHHH", 4000, port, 8 + len(data), 0) + data

    def ipv6(payload: bytes) -> bytes:
        return struct.pack("!IHBB16s16s", 0x60000000, len(payload), 17, 64, bytes(15) + b"\1",
                           bytes(15) + b"\2") + payload

    c = Corpus("esp")
    inners = [ipv4(17, udp(b"hello esp")), ipv6(udp(bytes(range(40))))]
    for sa in _common.esp_sas():
        for n, inner in enumerate(inners):
            w = sa.encrypt(inner)
            loc, _ = locate_esp(w)
            esp = w[loc.offset : loc.offset + loc.length]
            c.add(f"header-{sa.spi:x}-{n}", frame(w if n else esp, [0]))
            c.add(f"decrypt-{sa.spi:x}-{n}", frame(w, [1]))
            c.add(f"open-{sa.spi:x}-{n}", frame(esp, [2, n]))
            if n == 0:
                c.add(f"decrypt-cut-{sa.spi:x}", frame(w[:-3], [1]))
                c.add(f"open-dummy-{sa.spi:x}", frame(sa.seal(b"dummy", 59), [2, 0]))
    for label, data in (("keepalive", b"\xff"), ("ike", bytes(4) + b"\x01" * 28), ("eesp", b"\x80" + bytes(27))):
        c.add(f"decrypt-udp-4500-{label}", frame(ipv4(17, udp(data, 4500)), [1]))
        c.add(f"header-udp-4500-{label}", frame(ipv4(17, udp(data, 4500)), [0]))
    return c


def stem(path: str) -> str:
    return os.path.basename(path)[: -len(".keys")]


def main() -> int:
    psp_files = _common.psp_key_files()
    eesp_groups = groups("eesp")
    psp_groups = groups("psp")
    made = []

    # header: PSP (strict and lenient) and EESP parts
    c = Corpus("header")
    for keys, _g, tests in psp_groups:
        for t in pick(tests, 2):
            part = udp_payload(wire(t))
            if part is not None:
                c.add(f"psp-{stem(keys)}-tc{t['tcId']}", frame(part, [0]))
                c.add(f"psp-lenient-{stem(keys)}-tc{t['tcId']}", frame(part[:40], [1]))
    for keys, _g, tests in eesp_groups:
        for t in pick(tests, 1):
            part = eesp_part(wire(t))
            if part is not None:
                c.add(f"eesp-{stem(keys)}-tc{t['tcId']}", frame(part, [2]))
    made.append(c)

    # decrypt: PSP packets with their group's Decryptor (whole and bare), EESP packets
    c = Corpus("decrypt")
    for keys, _g, tests in psp_groups:
        gi = psp_files.index(keys)
        for t in pick(tests):
            c.add(f"psp-{stem(keys)}-tc{t['tcId']}", frame(wire(t), [0, gi]))
        t = pick(tests, 1)[0]
        part = udp_payload(wire(t))
        if part is not None:
            c.add(f"psp-open-{stem(keys)}-tc{t['tcId']}", frame(part, [1, gi]))
    for keys, _g, tests in eesp_groups:
        for t in pick(tests):
            c.add(f"eesp-{stem(keys)}-tc{t['tcId']}", frame(wire(t), [2]))
    made.append(c)

    # keyfile: every vector key file, the demo's, and reference-tool configs
    c = Corpus("keyfile")
    texts = sorted(glob.glob(os.path.join(PCAPS, "*.keys"))) + [os.path.join(_common.ROOT, "demo", "keys.txt")]
    for i, path in enumerate(texts):
        data = open(path, "rb").read()
        c.add(f"text-{os.path.basename(path)}", frame(data, [0]))
        if i % 10 == 0:
            c.add(f"file-{os.path.basename(path)}", frame(data, [1]))
    c.add("file-not-utf8", frame(b"psp-master key0=\xff\xfe\n", [1]))
    for keys, g, tests in psp_groups:
        if g.get("version") not in (0, 1) or g.get("vc") is None:
            continue
        t = next((t for t in tests if "masterKey0" in t["inputs"] and "masterKey1" in t["inputs"]), None)
        if t is None:
            continue
        i = t["inputs"]
        mk = [" ".join(f"{b:02x}" for b in bytes.fromhex(i[k])) for k in ("masterKey0", "masterKey1")]
        enc = "\n".join(mk + [i["spi"].upper(), g["mode"], "aes-gcm-128" if g["version"] == 0 else "aes-gcm-256",
                              *[str(i["cryptOffset"])] * 3, "vc" if g["vc"] else "no-vc"]) + "\n"
        c.add(f"ref-encrypt-{stem(keys)}", frame(enc.encode(), [2]))
        c.add(f"ref-decrypt-{stem(keys)}", frame(("\n".join(mk) + "\n").encode(), [2]))
    made.append(c)

    # capture: small vector pcaps as they are, decrypted with their keys, and as pcapng / nanosecond pcap
    c = Corpus("capture")
    pcaps = []
    for keys, _g, _t in psp_groups[:: max(1, len(psp_groups) // 4)]:
        pcaps.append((keys[: -len(".keys")] + ".pcap", 1, psp_files.index(keys)))
    for keys, _g, _t in eesp_groups[:: max(1, len(eesp_groups) // 6)]:
        pcaps.append((keys[: -len(".keys")] + ".pcap", 2, 0))
    tmp = tempfile.mkdtemp()
    try:
        for path, mode, gi in pcaps:
            data = open(path, "rb").read()
            if len(data) > 8192:
                continue
            c.add(f"read-{os.path.basename(path)}", frame(data, [0, 0]))
            c.add(f"decrypt-{os.path.basename(path)}", frame(data, [mode, gi]))
        for path, mode, gi in pcaps[:2] + pcaps[-2:]:
            records = list(read_capture(path))[:4]
            for fmt in ("pcapng", "pcap-nsec"):
                out = os.path.join(tmp, f"x.{fmt}")
                with CaptureWriter(out, linktype=records[0].linktype, fmt=fmt) as w:
                    for r in records:
                        w.write(r.data, (r.ts_sec, r.ts_nsec))
                data = open(out, "rb").read()
                c.add(f"read-{fmt}-{os.path.basename(path)}", frame(data, [0, 0]))
                c.add(f"decrypt-{fmt}-{os.path.basename(path)}", frame(data, [mode, gi]))
    finally:
        shutil.rmtree(tmp)
    made.append(c)

    # scapy: PSP and EESP parts, alone and in IPv4 (modes as in fuzz_scapy.MODES)
    c = Corpus("scapy")
    for keys, _g, tests in psp_groups:
        t = pick(tests, 1)[0]
        part = udp_payload(wire(t))
        if part is not None:
            c.add(f"psp-{stem(keys)}", frame(part, [0]))
            c.add(f"ip-udp-1000-{stem(keys)}", frame(part, [2]))
    for n, (keys, _g, tests) in enumerate(eesp_groups):
        t = pick(tests, 1)[0]
        part = eesp_part(wire(t))
        if part is None:
            continue
        c.add(f"eesp-{stem(keys)}", frame(part, [1]))
        if n % 4 == 0:
            c.add(f"ip-proto-49-{stem(keys)}", frame(part, [3]))
            c.add(f"ip-udp-4500-{stem(keys)}", frame(part, [4]))
            c.add(f"udp-4500-dispatch-{stem(keys)}", frame(part, [5]))
        if n < 5:  # the registered layouts (fuzz_scapy.LAYOUTS): the same octets under their SPIs
            spi = 0x101 + n
            c.add(f"eesp-layout-{spi:#x}", frame(part[:4] + struct.pack("!I", spi) + part[8:], [1]))
    for label, data in (("keepalive", b"\xff"), ("ike", bytes(4) + b"\x01" * 28), ("esp", b"\x00\x00\x10\x00" + bytes(20))):
        c.add(f"ip-udp-4500-{label}", frame(data, [4]))
        c.add(f"udp-4500-dispatch-{label}", frame(data, [5]))
    made.append(c)

    # diagnose: the harness's PSP group and EESP SAs, as octets and as hex text
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    c = Corpus("diagnose")
    psp0 = psp_files[0]
    for keys, _g, tests in psp_groups:
        if keys != psp0:
            continue
        for t in pick(tests, 6):
            c.add(f"psp-{t['tcId']}", frame(wire(t), [0, 2]))
            c.add(f"psp-hex-{t['tcId']}", frame(wire(t).hex().encode(), [1, 1]))
    want = ("eesp_aes-gcm-16_g01", "eesp_chacha20-poly1305_g04", "eesp_aes-gmac_g01", "eesp_aes-ccm-8-iiv_g03")
    for keys, _g, tests in eesp_groups:
        if stem(keys) not in want:
            continue
        for t in pick(tests, 4):
            c.add(f"eesp-{stem(keys)}-{t['tcId']}", frame(wire(t), [2, 2]))
        t = pick(tests, 1)[0]
        c.add(f"eesp-hex-{stem(keys)}-{t['tcId']}", frame(wire(t).hex().encode(), [3, 1]))
    made.append(c)

    made.append(esp_corpus())

    for c in made:
        print(f"{os.path.relpath(c.dir, _common.ROOT)}: {c.n} seeds, {c.bytes} octets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
