"""scapy helpers shared by pypsp.scapy and pyeesp.scapy (importing this binds nothing)."""
from __future__ import annotations

import struct
from typing import Optional

from scapy.compat import raw
from scapy.config import conf
from scapy.fields import XStrField
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6


class LenientDissect:
    """Dissect as far as the octets allow: a field that runs past the end stops the
    dissection, and what is left becomes a Raw payload, so a truncated or malformed
    packet never raises (scapy's own layers raise when used at top level).
    ``stopped_at`` names the first field the octets did not cover (None when complete);
    fields from there on show their defaults."""

    stopped_at = None

    def do_dissect(self, s):  # type: ignore[no-untyped-def]
        _raw = s
        self.raw_packet_cache_fields = {}
        # A run of BitFields hands (octets, bits done) from one to the next: remember the last octet
        # boundary and the bit fields read since, so that a run cut short is undone as a whole.
        aligned, pending = s, []
        for f in self.fields_desc:
            try:
                rest, fval = f.getfield(self, s)
            except Exception:
                if conf.debug_dissector:
                    raise
                for name in pending:  # a bit run cut short: back to its first octet
                    self.fields.pop(name, None)
                self.stopped_at = pending[0] if pending else f.name
                s = aligned
                break
            s = rest
            if isinstance(s, tuple):
                pending.append(f.name)
            else:
                aligned, pending = s, []
            if f.isconditional and fval is None:
                continue
            if (f.islist or f.holds_packets or f.ismutable) and fval is not None:
                self.raw_packet_cache_fields[f.name] = self._raw_packet_cache_field_value(f, fval, copy=True)
            self.fields[f.name] = fval
        self.raw_packet_cache = _raw[: -len(s)] if s else _raw
        self.explicit = 1
        return s


class UpToTrailerField(XStrField):
    """Octets up to a trailer of ``trailer_len(pkt)`` octets (the ICV), which the next field takes."""

    __slots__ = ["trailer_len"]

    def __init__(self, name, default, trailer_len):  # type: ignore[no-untyped-def]
        super().__init__(name, default)
        self.trailer_len = trailer_len

    def getfield(self, pkt, s):  # type: ignore[no-untyped-def]
        cut = max(len(s) - self.trailer_len(pkt), 0)
        return s[cut:], self.m2i(pkt, s[:cut])


def ip_bytes(pkt, what: str = "pkt") -> bytes:  # type: ignore[no-untyped-def]
    """Wire octets of an IP/IPv6 packet (or bytes), without Ethernet padding."""
    if isinstance(pkt, (bytes, bytearray, memoryview)):
        return bytes(pkt)
    if not isinstance(pkt, (IP, IPv6)):
        raise TypeError(f"{what} must be an IP or IPv6 packet (or bytes), not {type(pkt).__name__}")
    b = raw(pkt)
    if len(b) >= 20 and b[0] >> 4 == 4:
        return b[: max(struct.unpack("!H", b[2:4])[0], 20)]
    if len(b) >= 40 and b[0] >> 4 == 6:
        return b[: 40 + struct.unpack("!H", b[4:6])[0]]
    return b


def ip_packet(b: bytes):  # type: ignore[no-untyped-def]
    """An IP or IPv6 scapy packet from wire octets."""
    return IPv6(b) if b and b[0] >> 4 == 6 else IP(b)


def header_template(tunnel_header) -> Optional[bytes]:  # type: ignore[no-untyped-def]
    if tunnel_header is None or isinstance(tunnel_header, (bytes, bytearray)):
        return None if tunnel_header is None else bytes(tunnel_header)
    if not isinstance(tunnel_header, (IP, IPv6)):
        raise TypeError("tunnel_header must be an IP or IPv6 instance (or header bytes)")
    th = tunnel_header.copy()
    th.remove_payload()
    return raw(th)
