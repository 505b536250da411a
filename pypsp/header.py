"""The PSP header (psp.md §2): parse from bytes, build to bytes, every field readable."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pecore import ops
from pecore.protocol import PSP_VERSIONS
from pecore.util import Buffer, packet_buffer
from pypsp.errors import raise_psp

VERSION_NAMES = {v.version: v.name for v in PSP_VERSIONS}


@dataclass(frozen=True)
class Header:
    """A PSP header.  ``vc`` is the Virtualization Cookie when ``virt`` is set;
    ``extension`` is the whole extension area after the IV (VC included)."""

    next_header: int
    spi: int
    iv: int = 0
    version: int = 0
    crypt_offset: int = 0
    hdr_ext_len: Optional[int] = None
    sample: bool = False
    drop: bool = False
    virt: bool = False
    always_one: bool = True
    reserved: int = 0
    extension: bytes = b""

    def __post_init__(self) -> None:
        from pypsp.errors import ConfigurationError

        limits = {
            "next_header": 0xFF,
            "spi": 0xFFFFFFFF,
            "iv": 0xFFFFFFFFFFFFFFFF,
            "version": 0xF,
            "crypt_offset": 63,
            "reserved": 3,
        }
        for name, top in limits.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ConfigurationError(f"{name} must be an integer in 0..{top}, not {value!r}")
        if self.hdr_ext_len is not None and (
            isinstance(self.hdr_ext_len, bool) or not isinstance(self.hdr_ext_len, int) or not 0 <= self.hdr_ext_len <= 255
        ):
            raise ConfigurationError(f"hdr_ext_len must be an integer in 0..255, not {self.hdr_ext_len!r}")
        if not isinstance(self.extension, (bytes, bytearray)):
            raise ConfigurationError(f"extension must be bytes, not {type(self.extension).__name__}")
        room = self.header_len - 16
        if len(self.extension) > max(room, 0):
            raise ConfigurationError(f"extension of {len(self.extension)} octets does not fit Hdr Ext Len {self._hdr_ext_len}")

    @property
    def vc(self) -> Optional[bytes]:
        """The 8-octet VC, or None without V."""
        return self.extension[:8] if self.virt else None

    @property
    def header_len(self) -> int:
        return (self._hdr_ext_len + 1) * 8

    @property
    def _hdr_ext_len(self) -> int:
        if self.hdr_ext_len is not None:
            return self.hdr_ext_len
        # Room for the extension octets, and at least for the VC when V is set.
        return max(1 + (len(self.extension) + 7) // 8, 2 if self.virt else 1)

    @property
    def key_phase(self) -> int:
        """Which master key the SPI selects (its MSB)."""
        return self.spi >> 31

    @property
    def version_name(self) -> str:
        return VERSION_NAMES.get(self.version, f"reserved ({self.version})")

    @property
    def tunnel(self) -> bool:
        """Tunnel mode iff Next Header is IPv4 (4) or IPv6 (41)."""
        return self.next_header in (4, 41)

    @classmethod
    def _from_fields(cls, fields: dict) -> "Header":
        # The core parsed these fields (pecore.ops.psp_header_fields), so they are in range: skip
        # __post_init__'s checks, which cost more than the core call itself.
        self = object.__new__(cls)
        self.__dict__.update(fields)
        return self

    @classmethod
    def parse(cls, data: Buffer) -> "Header":
        """Parse the header at the start of ``data`` (a UDP payload); raises on a malformed header."""
        st, fields = ops.psp_header_parse(packet_buffer(data, "data"))
        if st != ops.OK:
            raise_psp(st)
        return cls._from_fields(fields)

    @classmethod
    def parse_lenient(cls, data: Buffer) -> "tuple[Optional[Header], str]":
        """Parse as far as possible (for display): the fields read and the status name ("ok" when valid)."""
        fields, status = ops.psp_header_parse_lenient(data)
        return (None if fields is None else cls._from_fields(fields)), status

    def build(self) -> bytes:
        """The header's wire bytes (``header_len`` octets)."""
        fields = dict(next_header=self.next_header, hdr_ext_len=self._hdr_ext_len, reserved=self.reserved,
                      crypt_offset=self.crypt_offset, sample=self.sample, drop=self.drop, version=self.version,
                      virt=self.virt, always_one=self.always_one, spi=self.spi, iv=self.iv)
        st, wire = ops.psp_header_build(fields, self.extension, self.header_len)
        if st != ops.OK:
            raise_psp(st)
        return wire
