"""The core's IP and UDP parsing (ip.h), for code that has to find a protocol inside a captured packet."""
from __future__ import annotations

from typing import NamedTuple, Optional

from pecore.binding import ffi, lib
from pecore.util import Buffer, packet_buffer


class IpInfo(NamedTuple):
    """What pe_ip_parse found: the version, the (last) protocol number, where L4 starts, the IP length."""

    version: int
    protocol: int
    l4_offset: int
    length: int
    is_fragment: bool


class UdpView(NamedTuple):
    """A UDP datagram inside an IP packet: ports, and where its header and payload sit in the packet."""

    sport: int
    dport: int
    udp_offset: int
    payload_offset: int
    payload_len: int


def parse_ip(packet: Buffer) -> Optional[IpInfo]:
    """The IPv4/IPv6 header chain of ``packet``, or None when the core finds no well-formed one."""
    buf = packet_buffer(packet, "packet")
    info = ffi.new("pe_ip_info *")
    if lib.pe_ip_parse(buf, len(buf), info) != lib.PE_OK:
        return None
    return IpInfo(info.version, info.protocol, info.l4_offset, info.len, bool(info.is_fragment))


def parse_udp(packet: Buffer) -> Optional[UdpView]:
    """The UDP datagram an IPv4/IPv6 packet carries, or None (not UDP, a fragment, broken lengths)."""
    buf = packet_buffer(packet, "packet")
    udp = ffi.new("pe_udp_view *")
    if lib.pe_ip_udp(buf, len(buf), udp) != lib.PE_OK:
        return None
    return UdpView(udp.sport, udp.dport, udp.udp_offset, udp.payload_offset, udp.payload_len)
