"""RFC 4303 §3.1 framing of the ESP vector files (:mod:`pyesp.tools.vectors`, :mod:`pyesp.tools.vectors_cbc`):
where ESP goes in a transport-mode packet, and the outer IP (and UDP 4500) headers around the ESP octets."""
from __future__ import annotations

import struct
from typing import Optional, Tuple

from pecore.tools.vectors import IPPROTO_UDP, fix_ip, l4_checksum

IPPROTO_ESP = 50


def transport_split(pkt: bytes) -> Tuple[int, int]:
    """(octets kept in front of ESP, offset of the octet that names what follows them): RFC 4303 §3.1.1, with a
    Destination Options header in front only when a Routing header follows it (the core's placement)."""
    if pkt[0] >> 4 == 4:
        return (pkt[0] & 0xF) * 4, 9
    chain, nh, off = [], pkt[6], 40
    while nh in (0, 43, 44, 60):
        n = 8 if nh == 44 else (pkt[off + 1] + 1) * 8
        chain.append((nh, off, n))
        nh, off = pkt[off], off + n
    keep, at = 40, 6
    for i, (t, o, n) in enumerate(chain):
        if t in (0, 43, 44) or (t == 60 and any(c[0] == 43 for c in chain[i + 1 :])):
            keep, at = o + n, o
        else:
            break
    return keep, at


def frame(mode: str, udp: bool, pkt: bytes, esp: bytes, *, outer: Optional[bytes], udp_sport: int = 4500,
          udp_dport: int = 4500) -> bytes:
    """The wire packet: the tunnel's outer header, or the packet's own kept headers (transport), then ESP (in UDP
    4500 with ``udp``); lengths and checksums set."""
    if mode == "tunnel":
        assert outer is not None
        head, at = bytearray(outer), 9 if outer[0] >> 4 == 4 else 6
    else:
        keep, at = transport_split(pkt)
        head = bytearray(pkt[:keep])
    if udp:  # RFC 3948 §2.1: checksum 0 over IPv4
        esp = struct.pack(">HHHH", udp_sport, udp_dport, 8 + len(esp), 0) + esp
    head[at] = IPPROTO_UDP if udp else IPPROTO_ESP
    w = fix_ip(bytes(head) + esp)
    if udp and w[0] >> 4 == 6:  # RFC 8200 §8.1: computed over IPv6 (eesp.md D17)
        u = len(head)
        w = w[:u] + l4_checksum(w[8:24], w[24:40], IPPROTO_UDP, w[u:], 6)
    return w


def split(mode: str, pkt: bytes) -> Tuple[bytes, int]:
    """(what ESP carries, its Next Header): the whole packet in tunnel mode, what follows the kept headers in
    transport mode."""
    if mode == "tunnel":
        return pkt, 4 if pkt[0] >> 4 == 4 else 41
    keep, at = transport_split(pkt)
    return pkt[keep:], pkt[at]
