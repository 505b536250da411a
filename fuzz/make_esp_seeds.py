#!/usr/bin/env python3
"""Write the seed corpora fuzz/corpus/esp_decap/seed-* and fuzz/corpus/esp_open/seed-* (fuzz/esp_seq.h).

Run with the project's venv:  .venv/bin/python fuzz/make_esp_seeds.py

Each seed is a few records ctl(1) | len(2) | plain IP packet with ctl bit 0 set, so the harness seals them
with SA (ctl >> 4) and the fuzzer starts past the ICV; one seed holds UDP 4500 packets that are not ESP.
Only seed-* files are replaced; regress-* inputs stay.  Output is deterministic.
"""
from __future__ import annotations

import struct
from pathlib import Path

from scapy.all import IP, TCP, UDP, IPv6, Raw, raw
from scapy.layers.inet6 import IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop

CORPUS = Path(__file__).resolve().parent / "corpus"
N_SAS = 9  # FZ_ESP_SAS in esp_seq.h


def rec(ctl: int, b: bytes) -> bytes:
    return bytes([ctl]) + struct.pack("!H", len(b)) + b


def main() -> None:
    v4 = raw(IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1000, dport=2000) / Raw(b"seed-payload-v4"))
    v6 = raw(IPv6(src="2001:db8::1", dst="2001:db8::2") / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
             / TCP(sport=1, dport=2) / Raw(b"seed-v6"))
    keepalive = raw(IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=4500, dport=4500) / Raw(b"\xff"))
    ike = raw(IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=4500, dport=4500) / Raw(b"\x00\x00\x00\x00ike"))
    seeds = {}
    for sa in range(N_SAS):
        seeds[f"seed-sa{sa}-v4"] = rec(1 | sa << 4, v4) + rec(3 | sa << 4, v4) + rec(5 | sa << 4, v6)
        seeds[f"seed-sa{sa}-v6-tamper"] = rec(7 | sa << 4, v6) + rec(13 | sa << 4, v4)
    seeds["seed-udp4500-not-esp"] = rec(0, keepalive) + rec(0, ike) + rec(0x31, v4)
    for target in ("esp_decap", "esp_open"):
        d = CORPUS / target
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("seed-*"):
            old.unlink()
        for name, data in seeds.items():
            (d / name).write_bytes(data)


if __name__ == "__main__":
    main()
