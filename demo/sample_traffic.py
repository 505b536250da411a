"""Write a sample capture of ordinary traffic for the demo: IPv4 and IPv6,
TCP and UDP flows of assorted sizes, plus a few ARP frames that encryption
must pass through untouched."""
from __future__ import annotations

import argparse
import random
import struct

from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter

MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _l4(proto: int, sport: int, dport: int, payload: bytes, pseudo: bytes, seq: int) -> bytes:
    if proto == 17:
        hdr = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
        csum_at = 6
    else:
        hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x18, 65535, 0, 0)
        csum_at = 16
    seg = hdr + payload
    c = _csum(pseudo + bytes([0, proto]) + struct.pack("!H", len(seg)) + seg)
    if proto == 17 and c == 0:
        c = 0xFFFF
    return seg[:csum_at] + struct.pack("!H", c) + seg[csum_at + 2 :]


def ipv4(src: str, dst: str, proto: int, sport: int, dport: int, payload: bytes, ident: int) -> bytes:
    s, d = bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))
    seg = _l4(proto, sport, dport, payload, s + d, ident)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), ident & 0xFFFF, 0x4000, 64, proto, 0, s, d)
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:] + seg


def ipv6(src: bytes, dst: bytes, proto: int, sport: int, dport: int, payload: bytes, seq: int) -> bytes:
    seg = _l4(proto, sport, dport, payload, src + dst, seq)
    return struct.pack("!IHBB", 6 << 28, len(seg), proto, 64) + src + dst + seg


def arp(i: int) -> bytes:
    return MAC_B + MAC_A + b"\x08\x06" + bytes.fromhex("0001080006040001") + MAC_A + bytes([10, 0, 0, 1]) + bytes(6) + bytes([10, 0, 0, i % 250 + 2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("output")
    ap.add_argument("-n", "--packets", type=int, default=2000)
    ap.add_argument("--format", default="pcapng", choices=("pcap", "pcapng"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    v6a, v6b = bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db8000000000000000000000002")
    ts = 1_700_000_000
    with CaptureWriter(args.output, LINKTYPE_ETHERNET, args.format) as w:
        for i in range(args.packets):
            if i % 100 == 99:
                frame = arp(i)
            else:
                size = rng.choice((0, 40, 200, 512, 1000, 1400))
                payload = bytes(rng.getrandbits(8) for _ in range(size))
                proto = rng.choice((6, 17))
                ports = (rng.choice((443, 53, 8080)), 40000 + i % 16)
                if rng.random() < 0.5:
                    pkt, etype = ipv4("10.1.0.1", "10.1.0.2", proto, *ports, payload, i), b"\x08\x00"
                else:
                    pkt, etype = ipv6(v6a, v6b, proto, *ports, payload, i), b"\x86\xdd"
                frame = MAC_B + MAC_A + etype + pkt
            w.write(frame, (ts + i // 1000, (i % 1000) * 1_000_000 + 123))


if __name__ == "__main__":
    main()
