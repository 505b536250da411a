"""The EESP Base Header and its Options (eesp.md §3, §4): parse from bytes, build to bytes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

from pecore import ops
from pecore.protocol import crypt_offset_decode, crypt_offset_encode
from pecore.util import Buffer, check_range, packet_buffer
from pyeesp.errors import ConfigurationError, raise_eesp

PAD1, PADN, CRYPT_OFFSET = 0, 1, 2
_NAMES = {PAD1: "Pad1", PADN: "PadN", CRYPT_OFFSET: "CryptOffset"}


@dataclass(frozen=True)
class Option:
    """One option TLV.  Pad1 has no length octet and no data."""

    type: int
    data: bytes = b""

    def __post_init__(self) -> None:
        check_range("option type", self.type, 255, ConfigurationError)
        if self.type == PAD1 and self.data:
            raise ConfigurationError("Pad1 carries no data")
        if len(self.data) > 253:
            raise ConfigurationError(f"option data of {len(self.data)} octets does not fit Opt Len")

    @classmethod
    def pad1(cls) -> "Option":
        return cls(PAD1)

    @classmethod
    def padn(cls, total_len: int) -> "Option":
        """PadN covering ``total_len`` ≥ 2 octets."""
        check_range("PadN length", total_len, 255, ConfigurationError, bottom=2)
        return cls(PADN, bytes(total_len - 2))

    @classmethod
    def crypt_offset(cls, payload_offset: int, crypt_offset: int, reserved: int = 0) -> "Option":
        """A Crypt Offset option (D3: two data octets, PayloadOffset(6) | CryptOffset(6) | R(4))."""
        v = crypt_offset_encode(
            check_range("payload_offset", payload_offset, 63, ConfigurationError),
            check_range("crypt_offset", crypt_offset, 63, ConfigurationError),
            check_range("reserved", reserved, 15, ConfigurationError),
        )
        return cls(CRYPT_OFFSET, v.to_bytes(2, "big"))

    @property
    def name(self) -> str:
        return _NAMES.get(self.type, f"Unknown({self.type})")

    @property
    def wire_len(self) -> int:
        return 1 if self.type == PAD1 else 2 + len(self.data)

    def _co_fields(self) -> Optional[Tuple[int, int, int]]:
        if self.type != CRYPT_OFFSET or len(self.data) != 2:
            return None
        return crypt_offset_decode(int.from_bytes(self.data, "big"))

    @property
    def payload_offset(self) -> Optional[int]:
        f = self._co_fields()
        return None if f is None else f[0]

    @property
    def crypt_offset_value(self) -> Optional[int]:
        f = self._co_fields()
        return None if f is None else f[1]


@dataclass(frozen=True)
class Header:
    """An EESP Base Header with its options."""

    spi: int
    session_id: int = 0
    options: Tuple[Option, ...] = field(default_factory=tuple)
    version: int = 0
    reserved: int = 0
    esp_compat: bool = True

    def __post_init__(self) -> None:
        check_range("spi", self.spi, 0xFFFFFFFF, ConfigurationError)
        check_range("session_id", self.session_id, 0xFFFF, ConfigurationError)
        check_range("version", self.version, 15, ConfigurationError)
        check_range("reserved", self.reserved, 7, ConfigurationError)
        object.__setattr__(self, "options", tuple(self.options))
        if self.opt_len > 255:
            raise ConfigurationError(f"options take {self.opt_len} octets; Opt Len holds at most 255")

    @property
    def opt_len(self) -> int:
        return sum(o.wire_len for o in self.options)

    @property
    def header_len(self) -> int:
        return 8 + self.opt_len

    @property
    def crypt_offset_option(self) -> Optional[Option]:
        return next((o for o in self.options if o.type == CRYPT_OFFSET), None)

    @property
    def unknown_options(self) -> Tuple[Option, ...]:
        return tuple(o for o in self.options if o.type not in _NAMES)

    @classmethod
    def _from_fields(cls, fields: dict) -> "Header":
        """A Header of what the core read (pecore.ops.eesp_header_fields)."""
        self = object.__new__(cls)  # the core validated it: skip __post_init__
        self.__dict__.update(fields, options=tuple(Option(t, data) for t, data in fields["options"]))
        return self

    @classmethod
    def parse(cls, data: Buffer) -> "Header":
        """Parse the Base Header and options at the start of ``data``; raises on malformed input."""
        st, fields = ops.eesp_header_parse(packet_buffer(data, "data"))
        if st != ops.OK:
            raise_eesp(st)
        return cls._from_fields(fields)

    @classmethod
    def parse_lenient(cls, data: Buffer) -> "tuple[Optional[Header], str]":
        """Parse as far as possible (for display): the fields read and the status name ("ok" when valid).

        None below the 8-octet Base Header; the options are listed whenever they are framed within
        Opt Len, also past a bad Base Header or Crypt Offset option (the core's lenient parse).
        """
        fields, status = ops.eesp_header_parse_lenient(data)
        return (None if fields is None else cls._from_fields(fields)), status

    def build(self) -> bytes:
        """Base Header and options as wire octets."""
        fields = dict(esp_compat=self.esp_compat, version=self.version, reserved=self.reserved,
                      session_id=self.session_id, spi=self.spi)
        st, wire = ops.eesp_header_build(fields, [(o.type, o.data) for o in self.options])
        if st != ops.OK:
            raise_eesp(st)
        return wire

