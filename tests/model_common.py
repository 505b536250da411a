"""What the independent protocol models (tests/psp_model.py, eesp_model.py, esp_model.py) share.

The models are independent of the core and of pecore, not of each other: each is written from its protocol's
documents, and what is the same for all three (how a model reports a drop, the RFC 1071 checksum of its IP
framing) is written once here, with the standard library only.
"""
from __future__ import annotations

import struct


class ModelError(Exception):
    """Any failure of a model. `code` is the reason in the core's kebab-case status vocabulary (where the core
    has a name for it); `icv_valid` is set when the drop came after the ICV check."""

    def __init__(self, code: str, message: str = "", icv_valid: bool | None = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.icv_valid = icv_valid


def udp_encap_header(ip_head: bytes, sport: int, dport: int, payload: bytes) -> bytes:
    """The UDP header of UDP-encapsulated ESP/EESP: RFC 3948 §2.1's checksum 0 is IPv4's; over IPv6
    RFC 8200 §8.1 has the sender compute it (pseudo header: the fixed header's addresses), 0 sent as 0xFFFF."""
    n = 8 + len(payload)
    if ip_head[0] >> 4 == 4:
        return struct.pack(">HHHH", sport, dport, n, 0)
    pseudo = bytes(ip_head[8:40]) + struct.pack(">I3xB", n, 17)
    c = inet_checksum(pseudo + struct.pack(">HHHH", sport, dport, n, 0) + payload)
    return struct.pack(">HHHH", sport, dport, n, c or 0xFFFF)


def udp_checksum_verdict(datagram: bytes, udp_at: int, zero_ok_v6: bool = False) -> str | None:
    """What a receiving endpoint's UDP makes of the checksum: RFC 1122 §4.1.3.4 discards a wrong non-zero one,
    RFC 8200 §8.1 a zero one over IPv6 (unless RFC 6936's zero-checksum mode is on); 0 over IPv4 means none."""
    udp = datagram[udp_at:]
    field = struct.unpack(">H", udp[6:8])[0]
    v6 = datagram[0] >> 4 == 6
    if field == 0:
        return "udp-zero-checksum" if v6 and not zero_ok_v6 else None
    addrs = datagram[8:40] if v6 else datagram[12:20]
    pseudo = addrs + (struct.pack(">I3xB", len(udp), 17) if v6 else struct.pack(">xBH", 17, len(udp)))
    return None if inet_checksum(pseudo + udp) == 0 else "udp-bad-checksum"


def inet_checksum(data: bytes) -> int:
    """RFC 1071 one's-complement sum, folded and complemented."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
