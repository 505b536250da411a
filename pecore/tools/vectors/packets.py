"""Cleartext packets and wire surgery for the vector generators: IP/UDP/TCP builders (documentation address
ranges, correct checksums) and the edits that mutations make."""
from __future__ import annotations

import ipaddress
import struct
from typing import Any, Iterable, Optional, Tuple

from pecore.protocol import checksum
from pecore.tools.vectors.rng import Rng


IPPROTO_HOPOPTS, IPPROTO_IPV4, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_IPV6 = 0, 4, 6, 17, 41
IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_DSTOPTS = 1, 58, 60
_IPV6_EXT = (0, 43, 44, 60)


def inet_sum(data: bytes) -> int:
    """RFC 1071 checksum (complemented), from the core."""
    return checksum(data)


def ipv4_header(src: str, dst: str, proto: int, payload_len: int, *, ident: int = 0, ttl: int = 64,
                flags_frag: int = 0x4000, tos: int = 0) -> bytes:
    h = struct.pack(">BBHHHBBH4s4s", 0x45, tos, 20 + payload_len, ident, flags_frag, ttl, proto, 0,
                    ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return h[:10] + struct.pack(">H", inet_sum(h)) + h[12:]


def ipv6_header(src: str, dst: str, nh: int, payload_len: int, *, hop: int = 64, flow: int = 0) -> bytes:
    return struct.pack(">IHBB16s16s", 0x60000000 | (flow & 0xFFFFF), payload_len, nh, hop,
                       ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed)


def _pseudo(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    if len(src) == 4:
        return src + dst + struct.pack(">BBH", 0, proto, length)
    return src + dst + struct.pack(">IxxxB", length, proto)


def l4_checksum(src: bytes, dst: bytes, proto: int, segment: bytes, at: int) -> bytes:
    """The segment with its checksum (at offset ``at``) filled in; UDP sends 0 as 0xffff."""
    seg = segment[:at] + b"\0\0" + segment[at + 2 :]
    c = inet_sum(_pseudo(src, dst, proto, len(seg)) + seg)
    if proto == IPPROTO_UDP and c == 0:
        c = 0xFFFF
    return seg[:at] + struct.pack(">H", c) + seg[at + 2 :]


def udp_segment(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload


def tcp_segment(sport: int, dport: int, seq: int, ack: int, payload: bytes, flags: int = 0x18, window: int = 0xFFFF) -> bytes:
    return struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, window, 0, 0) + payload


def ip_packet(src: str, dst: str, proto: int, segment: bytes, *, ext: bytes = b"", ext_nh: Optional[int] = None,
              **kw: Any) -> bytes:
    """An IPv4 or IPv6 packet (by the address family) around an L4 segment, checksums filled in.

    ``ext`` is an IPv6 extension-header chain placed before the segment; its first header type is ``ext_nh``
    (the chain's own Next Header octets must already lead to ``proto``).
    """
    v6 = ":" in src
    s = ipaddress.ip_address(src).packed
    d = ipaddress.ip_address(dst).packed
    if proto in (IPPROTO_UDP, IPPROTO_TCP, IPPROTO_ICMPV6) or (proto == IPPROTO_ICMP and not v6):
        at = {IPPROTO_UDP: 6, IPPROTO_TCP: 16, IPPROTO_ICMP: 2, IPPROTO_ICMPV6: 2}[proto]
        if proto == IPPROTO_ICMP:
            seg = segment[:2] + b"\0\0" + segment[4:]
            segment = seg[:2] + struct.pack(">H", inet_sum(seg)) + seg[4:]
        else:
            segment = l4_checksum(s, d, proto, segment, at)
    if v6:
        return ipv6_header(src, dst, proto if not ext else ext_nh, len(ext) + len(segment), **kw) + ext + segment
    return ipv4_header(src, dst, proto, len(segment), **kw) + segment


def ip_version(pkt: bytes) -> int:
    return pkt[0] >> 4 if pkt else 0


def l4_offset(pkt: bytes, stop: Iterable[int] = ()) -> Tuple[int, int, int]:
    """(offset of the first header that is not an IPv6 extension header (or is in ``stop``), its protocol,
    offset of the octet that names it).  IPv4: the IHL."""
    if ip_version(pkt) == 4:
        return (pkt[0] & 0xF) * 4, pkt[9], 9
    nh, field_at, off = pkt[6], 6, 40
    stop = tuple(stop)
    while nh in _IPV6_EXT and nh not in stop and off + 8 <= len(pkt):
        elen = 8 if nh == 44 else (pkt[off + 1] + 1) * 8
        nh, field_at, off = pkt[off], off, off + elen
    return off, nh, field_at


def fix_ip(pkt: bytes, udp_at: Optional[int] = None) -> bytes:
    """Recompute the IP length (and IPv4 header checksum) from the packet length, and the UDP length of a UDP
    header at ``udp_at`` (and over IPv6 its checksum, unless it is 0)."""
    b = bytearray(pkt)
    if ip_version(b) == 4:
        ihl = (b[0] & 0xF) * 4
        b[2:4] = struct.pack(">H", len(b))
        b[10:12] = b"\0\0"
        b[10:12] = struct.pack(">H", inet_sum(bytes(b[:ihl])))
    else:
        b[4:6] = struct.pack(">H", len(b) - 40)
    if udp_at is not None:
        b[udp_at + 4 : udp_at + 6] = struct.pack(">H", len(b) - udp_at)
        if ip_version(b) == 6 and b[udp_at + 6 : udp_at + 8] != b"\0\0":  # a computed IPv6 checksum stays right
            return bytes(b[:udp_at]) + l4_checksum(bytes(b[8:24]), bytes(b[24:40]), IPPROTO_UDP, bytes(b[udp_at:]), 6)
    return bytes(b)


def ipv4_recheck(pkt: bytes) -> bytes:
    """Recompute only the IPv4 header checksum (after editing a header field)."""
    if ip_version(pkt) != 4:
        return pkt
    ihl = (pkt[0] & 0xF) * 4
    h = pkt[:10] + b"\0\0" + pkt[12:ihl]
    return h[:10] + struct.pack(">H", inet_sum(h)) + pkt[12:]


def flip(data: bytes, offset: int, mask: int = 0x01) -> bytes:
    if offset < 0:
        offset += len(data)
    return data[:offset] + bytes([data[offset] ^ mask]) + data[offset + 1 :]


def put(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


class Inner:
    """Cleartext packets from documentation address ranges, drawn from an Rng."""

    V4 = ("192.0.2.", "198.51.100.")
    V6 = ("2001:db8:1::", "2001:db8:2::")

    def __init__(self, rng: Rng) -> None:
        self.rng = rng

    def addrs(self, ipv: int) -> Tuple[str, str]:
        if ipv == 4:
            return self.V4[0] + str(self.rng.int(1, 254)), self.V4[1] + str(self.rng.int(1, 254))
        return self.V6[0] + format(self.rng.int(1, 0xFFFF), "x"), self.V6[1] + format(self.rng.int(1, 0xFFFF), "x")

    def port(self) -> int:
        return self.rng.int(1024, 65535)

    def payload(self, n: int) -> bytes:
        return self.rng.bytes(n)

    def udp(self, ipv: int, n: int) -> bytes:
        src, dst = self.addrs(ipv)
        seg = udp_segment(self.port(), self.port(), self.payload(n))
        kw = {"ident": self.rng.int(0, 0xFFFF)} if ipv == 4 else {}
        return ip_packet(src, dst, IPPROTO_UDP, seg, **kw)

    def tcp(self, ipv: int, n: int) -> bytes:
        src, dst = self.addrs(ipv)
        seg = tcp_segment(self.port(), self.port(), self.rng.int(0, 2**32 - 1), self.rng.int(0, 2**32 - 1),
                          self.payload(n))
        if ipv == 4:
            return ip_packet(src, dst, IPPROTO_TCP, seg, ident=self.rng.int(0, 0xFFFF))
        return ip_packet(src, dst, IPPROTO_TCP, seg)

    def icmp(self, ipv: int, n: int) -> bytes:
        """An echo request."""
        src, dst = self.addrs(ipv)
        body = struct.pack(">BBHHH", 8 if ipv == 4 else 128, 0, 0, self.rng.int(0, 0xFFFF), self.rng.int(0, 0xFFFF))
        body += self.payload(n)
        return ip_packet(src, dst, IPPROTO_ICMP if ipv == 4 else IPPROTO_ICMPV6, body)

    def by_kind(self, kind: str, ipv: int, n: int) -> bytes:
        return {"udp": self.udp, "tcp": self.tcp, "icmp": self.icmp}[kind](ipv, n)


def hopopts(next_header: int, pad_octets: int = 6) -> bytes:
    """An 8-octet Hop-by-Hop / Destination Options header holding one PadN option."""
    return bytes([next_header, 0, 1, pad_octets - 2]) + bytes(pad_octets - 2)
