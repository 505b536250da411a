"""Protocol facts from the core, for the Python faces and tools: tables, checksums, where a packet is.

Nothing here knows PSP, EESP or ESP itself: the suite and version tables, the
Crypt Offset option's layout, the Internet checksum and the rules that find
PSP/EESP/ESP inside an IP packet all come from the C core, so that every front
end (CLIs, diagnose, scapy layers, the Wireshark plugin) reads them from one
place.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

from pecore.binding import ffi, lib
from pecore.errors import status_name
from pecore.util import Buffer, aead_alg_names, packet_buffer

_AEAD_NAMES = aead_alg_names()

PSP_UDP_PORT = 1000
EESP_UDP_PORT = 4500
EESP_IP_PROTOCOL = 49  # provisional, test-only (D7)
ESP_IP_PROTOCOL = lib.PE_ESP_IPPROTO  # 50 (RFC 4303)
ESP_UDP_PORT = lib.PE_ESP_UDP_PORT  # 4500 (RFC 3948), shared with EESP


def _text(p) -> str:
    return ffi.string(p).decode()


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class EespSuite:
    """One AEAD suite EESP can use (eesp.md §10), as the core's table has it."""

    id: int                  #: IKEv2 ENCR transform ID
    name: str                #: the project's name ("aes-gcm-16"): key files, CLIs, plugin
    ikev2_name: str          #: "ENCR_AES_GCM_16"
    aead: str                #: "aes-gcm", "aes-ccm" or "chacha20-poly1305"
    salt_len: int
    iv_len: int              #: explicit IV on the wire: 8, or 0 with an implicit IV
    icv_len: int
    implicit_iv: bool        #: RFC 8750: the Sequence Number is the IV
    integrity_only: bool     #: AES-GMAC: payload in clear
    key_lens: Tuple[int, ...]  #: key octets without salt: (16, 24, 32) for AES, (32,) for ChaCha20-Poly1305
    #: ESP's encryption + integrity rows (:data:`ESP_SUITES`): the IKEv2 INTEG ID (0 with an AEAD), its name and
    #: the integrity key's octets, which follow the encryption key in the KEYMAT (RFC 7296 §2.17)
    integ: int = 0
    ikev2_integ_name: Optional[str] = None
    integ_key_len: int = 0

    @property
    def key_bits(self) -> Tuple[int, ...]:
        return tuple(8 * n for n in self.key_lens)

    def keymat_len(self, key_bits: int = 0) -> int:
        """Key || salt octets for a key size (0: the suite's only or smallest size)."""
        key_len = key_bits // 8 if key_bits else self.key_lens[0]
        if key_len not in self.key_lens:
            raise ValueError(f"{self.name} takes keys of {', '.join(map(str, self.key_bits))} bits, not {key_bits}")
        return key_len + self.salt_len + self.integ_key_len


#: The cipher of ESP's rows with an integrity transform, in the ``aead`` field's place.
ESP_CBC_CIPHER = "aes-cbc"


def _suite(row) -> EespSuite:
    integ = int(row.integ)
    return EespSuite(id=row.encr, name=_text(row.name), ikev2_name=_text(row.ikev2_name),
                     aead=ESP_CBC_CIPHER if integ else _AEAD_NAMES[row.alg], salt_len=row.salt_len,
                     iv_len=row.iv_len, icv_len=row.icv_len, implicit_iv=bool(row.implicit_iv),
                     integrity_only=bool(row.integrity_only),
                     key_lens=tuple(row.key_lens[i] for i in range(row.n_key_lens)), integ=integ,
                     ikev2_integ_name=_text(row.ikev2_integ_name) if integ else None,
                     integ_key_len=row.integ_key_len)


#: Every suite, in ENCR ID order.
EESP_SUITES: Tuple[EespSuite, ...] = tuple(_suite(lib.pe_ipsec_suite_at(i)) for i in range(lib.pe_ipsec_suite_count()))
#: ESP's suites: the rows above, then AES-CBC with HMAC-SHA1-96 and HMAC-SHA-256-128 (pe_ipsec_esp_suite_at).
ESP_SUITES: Tuple[EespSuite, ...] = tuple(_suite(lib.pe_ipsec_esp_suite_at(i))
                                          for i in range(lib.pe_ipsec_esp_suite_count()))


def esp_suite(suite: Union[str, int]) -> Optional[EespSuite]:
    """One of :data:`ESP_SUITES` by the project's name, the IKEv2 name in any case ("ENCR_AES_CBC+AUTH_HMAC_SHA1_96",
    also without ``ENCR_``) or, for a combined-mode suite, its ENCR ID (ENCR_AES_CBC alone names no suite); None if
    unknown."""
    if isinstance(suite, str):
        key = suite.strip().lower()
        for row in ESP_SUITES:
            if key in (row.name, row.ikev2_name.lower(), row.ikev2_name.lower().removeprefix("encr_")):
                return row
    return eesp_suite(suite)


def eesp_suite(suite: Union[str, int]) -> Optional[EespSuite]:
    """A suite by ENCR ID, by the project's name ("aes-gcm-16") or by IKEv2 name in any case; None if unknown."""
    if isinstance(suite, bool):
        return None
    if isinstance(suite, int):
        row = lib.pe_ipsec_suite_by_id(suite) if 0 <= suite <= 0xFFFFFFFF else ffi.NULL
    elif isinstance(suite, str):
        row = lib.pe_ipsec_suite_by_name(suite.encode())
    else:
        return None
    return None if row == ffi.NULL else _suite(row)


def encr_id(suite: Union[str, int], protocol: str, error: type) -> int:
    """IKEv2 ENCR ID from a suite name ("aes-gcm-16", "ENCR_AES_GCM_16") or the ID itself: ESP's and EESP's
    ``suite_id`` (one suite table for both).  An unknown suite raises ``error`` with the protocol's
    ``<protocol>-bad-suite`` code."""
    ids = {s.name: s.id for s in EESP_SUITES}
    code = f"{protocol.lower()}-bad-suite"
    if isinstance(suite, int) and not isinstance(suite, bool):
        if suite in ids.values():
            return suite
        raise error(f"unknown {protocol} suite ID {suite}", code)
    if isinstance(suite, str) and suite.strip().isdigit():
        return encr_id(int(suite), protocol, error)
    if isinstance(suite, str):
        name = suite.strip().lower().removeprefix("encr_").replace("_", "-")
        name = {"null-auth-aes-gmac": "aes-gmac"}.get(name, name)
        if name in ids:
            return ids[name]
    raise error(f"unknown {protocol} suite {suite!r}; one of {', '.join(ids)}", code)


def _either(items) -> str:  # type: ignore[no-untyped-def]
    """"16", "16 or 32", "16, 24 or 32"."""
    words = [str(x) for x in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def keymat_key_bits(encr: int, key: Optional[bytes], key_bits: Optional[int], protocol: str, error: type) -> int:
    """The ``key_bits`` of ESP's and EESP's SA config for a KEYMAT ``key`` (key || salt; None: none given): the AES
    key size given, or the one the KEYMAT's length says; 0 for ChaCha20-Poly1305, whose size is fixed.  A size
    the suite lacks raises ``error`` (``<protocol>-bad-suite``), a KEYMAT of another length ``bad-key-length``,
    both saying what the suite takes."""
    row = eesp_suite(encr)
    if row is None:
        raise error(f"unknown {protocol} suite ID {encr}", f"{protocol.lower()}-bad-suite")
    sizes = [8 * n for n in row.key_lens]
    if key_bits is not None and key_bits not in sizes:
        raise error(f"{row.name} takes {_either(sizes)}-bit keys, not key_bits={key_bits}",
                    f"{protocol.lower()}-bad-suite")
    if key is not None:
        lens = row.key_lens if key_bits is None else (key_bits // 8,)
        if len(key) - row.salt_len not in lens:
            size = "" if key_bits is None else f" with {key_bits}-bit keys"
            raise error(f"key must be key || salt for {row.name}{size}: {_either(n + row.salt_len for n in lens)} "
                        f"octets (a {_either(lens)}-octet key and a {row.salt_len}-octet salt), not {len(key)}",
                        "bad-key-length")
        key_bits = 8 * (len(key) - row.salt_len)
    return 0 if len(sizes) == 1 else sizes[0] if key_bits is None else key_bits


@dataclass(frozen=True)
class PspVersion:
    """One PSP crypto version (psp.md §3)."""

    version: int
    name: str      #: "AES-GCM-128"
    key_len: int   #: derived key octets: 16 or 32
    icv_len: int
    gmac: bool     #: AES-GMAC: payload in clear, crypt offset 0


def psp_version(version: int) -> Optional[PspVersion]:
    """The version's row, or None for a reserved version."""
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= 0xFFFFFFFF:
        return None
    row = lib.pe_psp_version_info_get(version)
    if row == ffi.NULL:
        return None
    return PspVersion(version=row.version, name=_text(row.name), key_len=row.key_len, icv_len=row.icv_len,
                      gmac=bool(row.gmac))


#: Versions 0-3.
PSP_VERSIONS: Tuple[PspVersion, ...] = tuple(v for v in map(psp_version, range(16)) if v is not None)


# --------------------------------------------------------------------------- Crypt Offset option


#: Bit widths of the option's fields, high to low: PayloadOffset, CryptOffset, R (for declarative layouts like scapy's).
CRYPT_OFFSET_FIELD_BITS: Tuple[int, int, int] = (
    16 - lib.PE_EESP_CO_PAYLOAD_OFFSET_SHIFT,
    lib.PE_EESP_CO_PAYLOAD_OFFSET_SHIFT - lib.PE_EESP_CO_CRYPT_OFFSET_SHIFT,
    lib.PE_EESP_CO_CRYPT_OFFSET_SHIFT,
)


def crypt_offset_decode(value: int) -> Tuple[int, int, int]:
    """(PayloadOffset, CryptOffset, R) of the Crypt Offset option's 16-bit data (D3)."""
    co = lib.pe_eesp_crypt_offset_decode(value & 0xFFFF)
    return co.payload_offset, co.crypt_offset, co.reserved


def crypt_offset_encode(payload_offset: int, crypt_offset: int, reserved: int = 0) -> int:
    """The option's 16-bit data; ValueError when a field does not fit its width (6, 6, 4 bits)."""
    fields = (payload_offset, crypt_offset, reserved)
    if any(isinstance(f, bool) or not isinstance(f, int) or not 0 <= f <= 0xFF for f in fields):
        raise ValueError(f"Crypt Offset fields must be small non-negative integers, not {fields!r}")
    co = ffi.new("pe_eesp_crypt_offset *", {"payload_offset": payload_offset, "crypt_offset": crypt_offset,
                                            "reserved": reserved})
    out = ffi.new("uint16_t *")
    if lib.pe_eesp_crypt_offset_encode(co, out) != lib.PE_OK:
        raise ValueError("PayloadOffset and CryptOffset are 6 bits (0..63), R is 4 bits (0..15): "
                         f"not {payload_offset}, {crypt_offset}, {reserved}")
    return out[0]


# --------------------------------------------------------------------------- checksums


def checksum(data: Buffer) -> int:
    """The Internet checksum (RFC 1071) of ``data``: the complemented 16-bit one's-complement sum.

    Over a header whose checksum field holds the right value it is 0.
    """
    buf = packet_buffer(data, "data")
    return lib.pe_ip_checksum(buf, len(buf))


def udp_checksum(ip_packet: Buffer) -> int:
    """The UDP checksum the UDP datagram in this IPv4/IPv6 packet should carry (its own field not counted).

    ValueError (with the core's status name) when the packet carries no well-formed UDP datagram.
    """
    buf = packet_buffer(ip_packet, "ip_packet")
    out = ffi.new("uint16_t *")
    st = lib.pe_udp_checksum(buf, len(buf), out)
    if st != lib.PE_OK:
        raise ValueError(status_name(st))
    return out[0]


# --------------------------------------------------------------------------- lenient header parses


def parse_lenient(ctype: str, parse, data: Buffer, min_len: int):
    """Run a core header parse for display: the filled ``ctype`` (None below ``min_len`` octets) and the status name.

    The core's parsers fill what the octets allow also when they return an error.
    """
    h = ffi.new(ctype + " *")
    buf = packet_buffer(data, "data")
    st = parse(buf, len(buf), h)
    return (None if len(buf) < min_len else h), status_name(st)


# --------------------------------------------------------------------------- where the packet is


@dataclass(frozen=True)
class PspLocation:
    """Where PSP is in an IP packet: ``packet[offset : offset + length]`` is the UDP payload."""

    ip_version: int
    udp_offset: int
    offset: int
    length: int
    udp_sport: int


@dataclass(frozen=True)
class EespLocation:
    """Where EESP is in an IP packet: ``packet[offset : offset + length]`` from the Base Header on."""

    ip_version: int
    udp_encap: bool
    offset: int
    length: int
    l4_offset: int  #: the EESP header, or the UDP header when encapsulated


def locate_psp(ip_packet: Buffer, port: int = PSP_UDP_PORT) -> Tuple[Optional[PspLocation], str]:
    """The PSP part of an IP packet (UDP to ``port``), and the core's status name ("ok" when found)."""
    buf = packet_buffer(ip_packet, "ip_packet")
    loc = ffi.new("pe_psp_location *")
    st = lib.pe_psp_locate(buf, len(buf), port, loc)
    if st != lib.PE_OK:
        return None, status_name(st)
    return PspLocation(loc.ip_version, loc.udp_offset, loc.offset, loc.len, loc.udp_sport), "ok"


def locate_eesp(ip_packet: Buffer, ip_protocol: int = EESP_IP_PROTOCOL, port: int = EESP_UDP_PORT, *,
                either_port: bool = False, check_udp_checksum: bool = False) -> Tuple[Optional[EespLocation], str]:
    """The EESP part of an IP packet (IP protocol ``ip_protocol``, or UDP ``port`` demultiplexed as EESP, §14).

    ``either_port`` matches UDP by source port too (tools looking at both directions).
    Returns the location (or None) and the core's status name ("ok", "not-eesp", "nat-keepalive", ...).
    """
    buf = packet_buffer(ip_packet, "ip_packet")
    loc = ffi.new("pe_eesp_location *")
    flags = (lib.PE_EESP_LOCATE_EITHER_PORT if either_port else 0) | (
        lib.PE_EESP_LOCATE_UDP_CHECKSUM if check_udp_checksum else 0)
    st = lib.pe_eesp_locate(buf, len(buf), ip_protocol, port, flags, loc)
    if st != lib.PE_OK:
        return None, status_name(st)
    return EespLocation(loc.ip_version, bool(loc.udp_encap), loc.offset, loc.len, loc.l4_offset), "ok"


@dataclass(frozen=True)
class EspLocation:
    """Where ESP is in an IP packet: ``packet[offset : offset + length]`` from the SPI on."""

    ip_version: int
    udp_encap: bool
    offset: int
    length: int


def locate_esp(ip_packet: Buffer, port: int = ESP_UDP_PORT, *, either_port: bool = False,
               eesp_on_port: bool = True, receiver=None) -> Tuple[Optional[EspLocation], str]:  # type: ignore[no-untyped-def]
    """The ESP part of an IP packet (IP protocol 50 after any IPv6 extension headers, or UDP ``port`` as
    RFC 3948 and eesp.md §14 demultiplex it), and the core's status name ("ok", "not-esp", "nat-keepalive",
    "ike-non-esp-marker", "eesp-in-udp", "ip-fragment", "udp-bad-length", ...): pe_esp_locate, the steps
    pe_esp_decap takes.

    ``either_port`` matches UDP by source port too (tools looking at both directions); ``receiver`` (a
    ``pe_esp_rx *``) makes its SAs' SPIs ESP whatever their first octet (§14 step 3); ``eesp_on_port=False``
    takes what §14 calls EESP as ESP too (a host without EESP).
    """
    buf = packet_buffer(ip_packet, "ip_packet")
    loc = ffi.new("pe_esp_location *")
    flags = (lib.PE_ESP_LOCATE_EITHER_PORT if either_port else 0) | (0 if eesp_on_port else lib.PE_ESP_LOCATE_NO_EESP)
    st = lib.pe_esp_locate(buf, len(buf), port, flags, receiver if receiver is not None else ffi.NULL, loc)
    if st != lib.PE_OK:
        return None, status_name(st)
    return EspLocation(loc.ip_version, bool(loc.udp_encap), loc.offset, loc.len), "ok"


__all__ = [
    "CRYPT_OFFSET_FIELD_BITS", "EESP_IP_PROTOCOL", "EESP_SUITES", "EESP_UDP_PORT", "ESP_CBC_CIPHER",
    "ESP_IP_PROTOCOL", "ESP_SUITES", "ESP_UDP_PORT", "EespLocation", "EespSuite", "EspLocation", "PSP_UDP_PORT",
    "PSP_VERSIONS", "PspLocation", "PspVersion", "checksum", "crypt_offset_decode", "crypt_offset_encode",
    "eesp_suite", "encr_id", "esp_suite", "keymat_key_bits", "locate_eesp", "locate_esp", "locate_psp",
    "parse_lenient", "psp_version", "udp_checksum",
]
