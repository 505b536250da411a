"""The ESP header (RFC 4303 §2): SPI and Sequence Number, 8 octets, in clear before the IV and the payload.

What follows it (IV, payload, padding, Pad Length, Next Header, ICV) is only readable with the SA: the IV's
and the ICV's lengths are the suite's, and the trailer is encrypted.  :class:`pyesp.Decrypted` carries the
trailer's fields (``pad_len``, ``next_header``) and the IV of a decrypted packet.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

from pecore import ops
from pecore.protocol import ESP_IP_PROTOCOL, ESP_UDP_PORT
from pecore.util import Buffer, check_range, packet_buffer
from pyesp.errors import ConfigurationError, TruncatedPacketError

HEADER_LEN = 8  #: SPI (4) and Sequence Number (4): PE_ESP_HDR_LEN, which the cffi binding does not declare
TRAILER_LEN = 2  #: Pad Length (1) and Next Header (1): PE_ESP_TRAILER_LEN
NEXT_HEADER_DUMMY = ops.ESP_NH_NO_NEXT  #: dummy packet (RFC 4303 §2.6)
IP_PROTOCOL = ESP_IP_PROTOCOL  #: 50
UDP_PORT = ESP_UDP_PORT        #: 4500 (RFC 3948)


@dataclass(frozen=True)
class Header:
    """An ESP header.  ``seq`` is the Sequence Number field: the low 32 bits of the number with ESN
    (RFC 4303 §2.2.1: the high half never travels; :attr:`pyesp.Decrypted.seq` has all 64 bits)."""

    spi: int
    seq: int

    def __post_init__(self) -> None:
        check_range("spi", self.spi, 0xFFFFFFFF, ConfigurationError)
        check_range("seq", self.seq, 0xFFFFFFFF, ConfigurationError)

    @classmethod
    def parse(cls, data: Buffer) -> "Header":
        """The header at the start of ``data`` (any bytes-like object, from the SPI on); raises
        :class:`~pyesp.TruncatedPacketError` below 8 octets."""
        buf = packet_buffer(data, "data")
        if len(buf) < HEADER_LEN:
            raise TruncatedPacketError(f"{len(buf)} octets: the ESP header has {HEADER_LEN}", "esp-truncated")
        spi, seq = struct.unpack_from("!II", ops.octets(buf, HEADER_LEN))
        return cls(spi, seq)

    @classmethod
    def parse_lenient(cls, data: Buffer) -> "tuple[Optional[Header], str]":
        """For display: the header (None below 8 octets) and a status name ("ok", "esp-truncated")."""
        try:
            return cls.parse(data), "ok"
        except TruncatedPacketError as e:
            return None, e.code

    @property
    def header_len(self) -> int:
        return HEADER_LEN

    def build(self) -> bytes:
        """The 8 wire octets."""
        return struct.pack("!II", self.spi, self.seq)
