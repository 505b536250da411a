"""Independent pure-Python model of the PSP Security Protocol (header version 0, crypto versions 0-3).

This is a second implementation written from the project's specification (docs/spec/psp.md) for the tests.
It shares no code with the C core or with pypsp and uses only the standard library, the `cryptography`
package and what the three models share (tests/model_common.py: the error type, the IP checksum). It favours being obviously right over being fast or complete.

Section numbers (§) refer to psp.md.

Layout of a PSP packet as this model names its parts::

    outer IP | UDP | H16 | P = extension area (VC, ...) + payload | ICV
                     \\____________ the "PSP part" ____________________/

    H16      the first 16 header octets (octets 0-3, SPI, IV)
    body / P every octet after the IV up to the ICV (§4 notation); on encap this is VC || L4 or VC || inner packet
    n        4 * crypt offset: P[:n] is authenticated in clear, P[n:] is encrypted (versions 0/1)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.cmac import CMAC

from model_common import ModelError, inet_checksum

__all__ = [
    "PSP_UDP_PORT", "HDR_LEN", "ICV_LEN", "VC_LEN", "KEY_LEN", "GMAC_VERSIONS", "SUPPORTED_VERSIONS",
    "PspModelError", "check_psp", "kdf_label", "kdf_block", "derive_key", "master_key_for_spi", "Header", "build_header",
    "parse_header", "gcm_seal", "seal", "open", "unseal", "IpInfo", "parse_ip", "udp_sport_xor", "encap",
    "decap", "encap_frame", "decap_frame", "ipv4_checksum", "udp_checksum", "make_cleartext_frame",
    "ethernet_header",
]

PSP_UDP_PORT = 1000
HDR_LEN = 16  # H16: octets 0-3, SPI, IV
ICV_LEN = 16
VC_LEN = 8
UDP_LEN = 8
KEY_LEN = {0: 16, 1: 32, 2: 16, 3: 32}  # §3.2
GMAC_VERSIONS = frozenset({2, 3})
SUPPORTED_VERSIONS = frozenset(KEY_LEN)
CRYPT_OFFSET_MAX = 63  # §9.2
IPPROTO_IPV4 = 4
IPPROTO_TCP = 6
IPPROTO_UDP = 17
IPPROTO_IPV6 = 41
IPV6_EXT_HEADERS = (0, 43, 44, 60)  # hop-by-hop, routing, fragment, destination options
IPV6_FRAGMENT = 44


class PspModelError(ModelError):
    """Any failure of the model. `code` uses the same kebab-case vocabulary as the core where one exists."""


# --------------------------------------------------------------------------------------------------------
# §5 key derivation: SP 800-108 counter mode, PRF = AES-256-CMAC, one 16-octet input block per 128 bits.
# --------------------------------------------------------------------------------------------------------


def kdf_label(version: int) -> int:
    """"Pv0" = 0x50763000, with the version OR-ed into octet 6 ("Pv1", and the assumed "Pv2"/"Pv3")."""
    return 0x50763000 | (version << 8)


def kdf_block(counter: int, label: int, spi: int, length_bits: int) -> bytes:
    return struct.pack(">IIII", counter, label, spi, length_bits)


def _cmac(key: bytes, data: bytes) -> bytes:
    c = CMAC(algorithms.AES(key))
    c.update(data)
    return c.finalize()


def derive_key(master_key: bytes, spi: int, version: int, label: int | None = None) -> bytes:
    """The derived key for (SPI, version) under one 256-bit master key (the caller picks it by the SPI MSB)."""
    if len(master_key) != 32:
        raise PspModelError("bad-master-key", "master keys are 32 octets")
    if version not in KEY_LEN:
        raise PspModelError("psp-unsupported-version", f"version {version}")
    if label is None:
        label = kdf_label(version)
    bits = KEY_LEN[version] * 8
    blocks = bits // 128
    return b"".join(_cmac(master_key, kdf_block(i, label, spi, bits)) for i in range(1, blocks + 1))


def master_key_for_spi(master_keys, spi: int) -> bytes | None:
    """§3.4: the SPI's MSB selects master key 0 or 1."""
    return master_keys[(spi >> 31) & 1]


# --------------------------------------------------------------------------------------------------------
# §2 header
# --------------------------------------------------------------------------------------------------------


@dataclass
class Header:
    """All header fields as parsed. `extension` is the extension area minus the VC (empty in practice)."""

    next_header: int
    hdr_ext_len: int
    reserved: int
    crypt_offset: int
    sample: bool
    drop: bool
    version: int
    virt: bool
    always_one: int
    spi: int
    iv: int
    vc: bytes | None = None
    extension: bytes = field(default=b"")

    @property
    def length(self) -> int:
        """Header length in octets: (HdrExtLen + 1) * 8."""
        return (self.hdr_ext_len + 1) * 8

    def build(self) -> bytes:
        """The whole header: H16 followed by the extension area (VC first when V = 1)."""
        h16 = build_header(
            self.next_header, self.spi, self.iv, version=self.version, crypt_offset=self.crypt_offset,
            virt=self.virt, sample=self.sample, drop=self.drop, reserved=self.reserved,
            hdr_ext_len=self.hdr_ext_len, always_one=self.always_one,
        )
        return h16 + (self.vc or b"") + self.extension


def build_header(
    next_header: int,
    spi: int,
    iv: int,
    *,
    version: int = 0,
    crypt_offset: int = 0,
    virt: bool = False,
    sample: bool = False,
    drop: bool = False,
    reserved: int = 0,
    hdr_ext_len: int | None = None,
    always_one: int = 1,
) -> bytes:
    """H16, the first 16 header octets (§6 step 2). The VC is not part of it: it leads the body."""
    if hdr_ext_len is None:
        hdr_ext_len = 2 if virt else 1
    octet2 = ((reserved & 0x3) << 6) | (crypt_offset & 0x3F)
    octet3 = (
        (0x80 if sample else 0)
        | (0x40 if drop else 0)
        | ((version & 0xF) << 2)
        | (0x02 if virt else 0)
        | (always_one & 1)
    )
    return struct.pack(">BBBBIQ", next_header & 0xFF, hdr_ext_len & 0xFF, octet2, octet3, spi, iv)


def parse_header(psp: bytes) -> Header:
    """Decode the header fields from the start of a PSP part. No validity checks (see `check_psp`)."""
    if len(psp) < HDR_LEN:
        raise PspModelError("psp-truncated", "shorter than the 16-octet header")
    nh, hel, o2, o3, spi, iv = struct.unpack(">BBBBIQ", psp[:HDR_LEN])
    virt = bool(o3 & 0x02)
    area = psp[HDR_LEN : (hel + 1) * 8] if hel >= 1 else b""
    vc = area[:VC_LEN] if virt and len(area) >= VC_LEN else None
    ext = area[VC_LEN:] if vc is not None else area
    return Header(nh, hel, o2 >> 6, o2 & 0x3F, bool(o3 & 0x80), bool(o3 & 0x40), (o3 >> 2) & 0xF, virt,
                  o3 & 1, spi, iv, vc, ext)


def check_psp(psp: bytes, supported_versions=SUPPORTED_VERSIONS) -> Header:
    """§7 receiver checks 2-6, in order, on a whole PSP part (header .. ICV). Returns the parsed header."""
    if len(psp) < HDR_LEN + ICV_LEN:
        raise PspModelError("psp-truncated", f"PSP part of {len(psp)} octets")
    hdr = parse_header(psp)
    if hdr.always_one != 1:
        raise PspModelError("psp-always-one-bit-clear")
    if hdr.version not in supported_versions:
        raise PspModelError("psp-unsupported-version", f"version {hdr.version}")
    if hdr.hdr_ext_len < 1 or hdr.length + ICV_LEN > len(psp):
        raise PspModelError("psp-bad-hdr-ext-len", f"HdrExtLen {hdr.hdr_ext_len}")
    if hdr.virt and hdr.hdr_ext_len < 2:
        raise PspModelError("psp-vc-without-room")
    if 4 * hdr.crypt_offset > len(psp) - HDR_LEN - ICV_LEN:
        raise PspModelError("psp-crypt-offset-past-payload", f"crypt offset {hdr.crypt_offset}")
    return hdr


# --------------------------------------------------------------------------------------------------------
# §4 sealing and opening
# --------------------------------------------------------------------------------------------------------


def gcm_seal(key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
    """Plain AES-GCM: returns (ciphertext, 16-octet tag)."""
    out = AESGCM(key).encrypt(nonce, plaintext, aad)
    return out[:-ICV_LEN], out[-ICV_LEN:]


def seal(key: bytes, hdr, body: bytes, crypt_offset: int, version: int) -> bytes:
    """§4 / §6 step 5: returns the PSP part hdr16 || body[:n] || ciphertext || ICV.

    `hdr` is H16 (16 octets) or a dict of `build_header` keyword arguments. `body` is P (VC || payload).
    `crypt_offset` (words) and `version` drive the computation; they normally equal the header's fields.
    GMAC versions (2/3) authenticate H16 || P and encrypt nothing, whatever crypt_offset is.
    """
    hdr16 = build_header(**hdr) if isinstance(hdr, dict) else bytes(hdr)
    if len(hdr16) != HDR_LEN:
        raise PspModelError("bad-header", "hdr must be the 16-octet H16")
    if version not in KEY_LEN:
        raise PspModelError("psp-unsupported-version", f"version {version}")
    if len(key) != KEY_LEN[version]:
        raise PspModelError("bad-key-length", f"version {version} needs {KEY_LEN[version]} octets")
    nonce = hdr16[4:16]  # SPI || IV as on the wire
    n = len(body) if version in GMAC_VERSIONS else 4 * crypt_offset
    if n > len(body):
        raise PspModelError("crypt-offset-past-payload", f"{n} > {len(body)}")
    ct, icv = gcm_seal(key, nonce, hdr16 + body[:n], body[n:])
    return hdr16 + body[:n] + ct + icv


def unseal(key: bytes, psp: bytes, supported_versions=SUPPORTED_VERSIONS) -> tuple[Header, bytes]:
    """§7 checks 2-6 and 8 on a PSP part. Returns (header, P in clear). The ICV is always verified."""
    hdr = check_psp(psp, supported_versions)
    if len(key) != KEY_LEN[hdr.version]:
        raise PspModelError("no-key", f"no {KEY_LEN[hdr.version]}-octet key for version {hdr.version}")
    p = psp[HDR_LEN:-ICV_LEN]
    tag = psp[-ICV_LEN:]
    # Versions 2/3 authenticate all of P whatever the (reserved) crypt offset says (§4.2, our reading).
    n = len(p) if hdr.version in GMAC_VERSIONS else 4 * hdr.crypt_offset
    try:
        clear = AESGCM(key).decrypt(psp[4:16], p[n:] + tag, psp[:HDR_LEN] + p[:n])
    except InvalidTag:
        raise PspModelError("authentication-failed") from None
    p = p[:n] + clear
    # Re-read the header over the recovered P: with Crypt Offset < 2 the VC itself travelled encrypted.
    return parse_header(psp[:HDR_LEN] + p), p


open = unseal  # the name the test plan uses; this module never needs the builtin


# --------------------------------------------------------------------------------------------------------
# IP helpers
# --------------------------------------------------------------------------------------------------------



def ipv4_checksum(hdr: bytes) -> int:
    """Header checksum of an IPv4 header (its own checksum field is treated as zero)."""
    return inet_checksum(hdr[:10] + b"\0\0" + hdr[12:])


def _with_ipv4_checksum(hdr: bytes) -> bytes:
    return hdr[:10] + struct.pack(">H", ipv4_checksum(hdr)) + hdr[12:]


def udp_checksum(src: bytes, dst: bytes, udp: bytes) -> int:
    """UDP checksum over the pseudo header (IPv4 or IPv6 addresses); 0 is sent as 0xFFFF."""
    if len(src) == 4:
        pseudo = src + dst + struct.pack(">BBH", 0, IPPROTO_UDP, len(udp))
    else:
        pseudo = src + dst + struct.pack(">IxxxB", len(udp), IPPROTO_UDP)
    c = inet_checksum(pseudo + udp[:6] + b"\0\0" + udp[8:])
    return c or 0xFFFF


@dataclass
class IpInfo:
    version: int  # 4 or 6
    length: int  # octets covered by the IP length field
    hdr_len: int  # IPv4: IHL*4; IPv6: 40 + extension headers in front of the L4 header
    protocol: int  # the L4 protocol (after any IPv6 extension headers)
    proto_field: int  # offset of the octet that holds `protocol`
    non_first_fragment: bool  # ports are not in this packet


def parse_ip(pkt: bytes) -> IpInfo:
    """Find the L4 header of an IPv4/IPv6 packet, walking IPv6 extension headers 0/43/44/60."""
    if len(pkt) < 1:
        raise PspModelError("ip-truncated")
    ver = pkt[0] >> 4
    if ver == 4:
        if len(pkt) < 20:
            raise PspModelError("ip-truncated")
        ihl = (pkt[0] & 0xF) * 4
        total = struct.unpack(">H", pkt[2:4])[0]
        if ihl < 20 or total < ihl or total > len(pkt):
            raise PspModelError("ip-bad-length")
        frag = struct.unpack(">H", pkt[6:8])[0] & 0x1FFF
        return IpInfo(4, total, ihl, pkt[9], 9, frag != 0)
    if ver == 6:
        if len(pkt) < 40:
            raise PspModelError("ip-truncated")
        total = 40 + struct.unpack(">H", pkt[4:6])[0]
        if total > len(pkt):
            raise PspModelError("ip-bad-length")
        nh, field_at, off, nonfirst = pkt[6], 6, 40, False
        while nh in IPV6_EXT_HEADERS:
            if off + 8 > total:
                raise PspModelError("ip-truncated", "extension header")
            if nh == IPV6_FRAGMENT:
                elen = 8
                nonfirst = nonfirst or (struct.unpack(">H", pkt[off + 2 : off + 4])[0] >> 3) != 0
            else:
                elen = (pkt[off + 1] + 1) * 8
            if off + elen > total:
                raise PspModelError("ip-truncated", "extension header")
            nh, field_at, off = pkt[off], off, off + elen
        return IpInfo(6, total, off, nh, field_at, nonfirst)
    raise PspModelError("not-ip", f"IP version nibble {ver}")


def _set_ip_length(pkt: bytearray, info_version: int, total: int) -> None:
    if info_version == 4:
        if total > 0xFFFF:
            raise PspModelError("too-long")
        pkt[2:4] = struct.pack(">H", total)
    else:
        if total - 40 > 0xFFFF:
            raise PspModelError("too-long")
        pkt[4:6] = struct.pack(">H", total - 40)


def udp_sport_xor(pkt: bytes) -> int:
    """§8 `xor` policy: inner sport ^ dport when the inner L4 is TCP/UDP with its ports present, else 1000.

    Our reading for cases the reference never meets: IPv6 extension headers are walked to the L4 header,
    IPv4 options are skipped by IHL, and a non-first fragment (no ports in it) gets 1000.
    """
    info = parse_ip(pkt)
    l4 = pkt[info.hdr_len : info.length]
    if info.protocol in (IPPROTO_TCP, IPPROTO_UDP) and not info.non_first_fragment and len(l4) >= 4:
        sport, dport = struct.unpack(">HH", l4[:4])
        return sport ^ dport
    return PSP_UDP_PORT


# --------------------------------------------------------------------------------------------------------
# §6 encapsulation and §7 decapsulation of whole IP packets
# --------------------------------------------------------------------------------------------------------


def encap(
    ip_packet: bytes,
    mode: str,
    *,
    key: bytes,
    spi: int,
    iv: int,
    version: int = 0,
    crypt_offset: int = 0,
    vc: bytes | None = None,
    sample: bool = False,
    drop: bool = False,
    udp_sport="xor",
) -> bytes:
    """Encapsulate one IPv4/IPv6 packet; returns the outer IP packet. `crypt_offset` is in words."""
    if version not in SUPPORTED_VERSIONS:
        raise PspModelError("psp-unsupported-version", f"version {version}")
    if not 0 <= crypt_offset <= CRYPT_OFFSET_MAX:
        raise PspModelError("bad-crypt-offset", f"{crypt_offset} words")
    if version in GMAC_VERSIONS and crypt_offset != 0:
        raise PspModelError("bad-crypt-offset", "GMAC versions take crypt offset 0")
    if vc is not None and len(vc) != VC_LEN:
        raise PspModelError("bad-vc", "the VC is 8 octets")
    if not 0 <= spi <= 0xFFFFFFFF or not 0 <= iv <= 0xFFFFFFFFFFFFFFFF:
        raise PspModelError("bad-argument", "SPI is 32 bits, IV 64 bits")

    info = parse_ip(ip_packet)
    pkt = ip_packet[: info.length]  # drop any link-layer padding
    if mode == "transport":
        next_header = info.protocol
        payload = pkt[info.hdr_len :]
    elif mode == "tunnel":
        next_header = IPPROTO_IPV4 if info.version == 4 else IPPROTO_IPV6
        payload = pkt
    else:
        raise PspModelError("bad-mode", mode)

    body = (vc or b"") + payload
    if 4 * crypt_offset > len(body):
        raise PspModelError("crypt-offset-past-payload", f"{4 * crypt_offset} > {len(body)}")
    hdr16 = build_header(next_header, spi, iv, version=version, crypt_offset=crypt_offset,
                         virt=vc is not None, sample=sample, drop=drop)
    psp = seal(key, hdr16, body, crypt_offset, version)

    sport = udp_sport_xor(pkt) if udp_sport == "xor" else int(udp_sport)
    udp = struct.pack(">HHHH", sport, PSP_UDP_PORT, UDP_LEN + len(psp), 0)
    if UDP_LEN + len(psp) > 0xFFFF:
        raise PspModelError("too-long")

    if mode == "transport":
        outer = bytearray(pkt[: info.hdr_len])  # IP header, IPv4 options and IPv6 extension headers stay
        outer[info.proto_field] = IPPROTO_UDP
    elif info.version == 4:
        outer = bytearray(pkt[:20])  # a copy of the inner header, IHL forced to 5
        outer[0] = 0x45
        outer[9] = IPPROTO_UDP
        # Our reading (the spec is silent): keep DF but never copy MF / fragment offset, which would make
        # the outer packet a bogus fragment. The reference inputs never are fragments.
        outer[6] &= 0x40
        outer[7] = 0
    else:
        outer = bytearray(pkt[:40])  # a copy of the fixed inner header
        outer[6] = IPPROTO_UDP
    _set_ip_length(outer, info.version, len(outer) + len(udp) + len(psp))
    if info.version == 4:
        outer[:] = _with_ipv4_checksum(bytes(outer))  # over the whole header, options included
    return bytes(outer) + udp + psp


def whole_ip_packet(pkt: bytes) -> bool:
    """IPv4: IHL >= 5 and Total Length = len >= IHL*4; IPv6: 40 + Payload Length = len."""
    if pkt[0] >> 4 == 4:
        ihl = (pkt[0] & 0xF) * 4
        return len(pkt) >= 20 and ihl >= 20 and struct.unpack(">H", pkt[2:4])[0] == len(pkt) >= ihl
    if pkt[0] >> 4 == 6:
        return len(pkt) >= 40 and 40 + struct.unpack(">H", pkt[4:6])[0] == len(pkt)
    return False


def decap(
    ip_packet: bytes,
    *,
    key: bytes | None = None,
    keys: dict | None = None,
    master_keys=None,
    udp_port: int = PSP_UDP_PORT,
    supported_versions=SUPPORTED_VERSIONS,
) -> tuple[Header, bytes]:
    """§7: decapsulate one outer IP packet; returns (header, recovered IP packet).

    The key comes from `key`, else `keys[spi]`, else the master pair (MSB rule) and the KDF.
    """
    info = parse_ip(ip_packet)
    pkt = ip_packet[: info.length]
    if info.protocol != IPPROTO_UDP or info.non_first_fragment:
        raise PspModelError("not-psp", "not UDP")
    udp = pkt[info.hdr_len :]
    if len(udp) < UDP_LEN:
        raise PspModelError("udp-truncated")
    _sport, dport, ulen, _csum_ = struct.unpack(">HHHH", udp[:UDP_LEN])
    if dport != udp_port:
        raise PspModelError("not-psp", f"UDP destination port {dport}")
    if ulen != len(udp):
        raise PspModelError("udp-length-mismatch", f"UDP length {ulen}, IP says {len(udp)}")
    psp = udp[UDP_LEN:]

    hdr = check_psp(psp, supported_versions)
    if key is None and keys is not None:
        key = keys.get(hdr.spi)
    if key is None and master_keys is not None:
        mk = master_key_for_spi(master_keys, hdr.spi)
        if mk is not None:
            key = derive_key(mk, hdr.spi, hdr.version)
    if key is None:
        raise PspModelError("no-key", f"SPI {hdr.spi:08x}")
    hdr, p = unseal(key, psp, supported_versions)
    inner = p[hdr.length - HDR_LEN :]

    if hdr.next_header in (IPPROTO_IPV4, IPPROTO_IPV6):  # tunnel mode
        # The project's decision: only one whole IP packet (of the version its nibble gives) is delivered.
        if inner and not whole_ip_packet(inner):
            raise PspModelError("psp-bad-inner-packet", f"{len(inner)} octets")
        return hdr, inner
    out = bytearray(pkt[: info.hdr_len])
    out[info.proto_field] = hdr.next_header
    _set_ip_length(out, info.version, len(out) + len(inner))
    if info.version == 4:
        out[:] = _with_ipv4_checksum(bytes(out))
    return hdr, bytes(out) + inner


# --------------------------------------------------------------------------------------------------------
# Ethernet frames (the reference tools work on these) and §10.3 cleartext frames
# --------------------------------------------------------------------------------------------------------

ETH_DST = bytes.fromhex("008899aabb00")
ETH_SRC = bytes.fromhex("002233445500")
ETHERTYPE = {4: 0x0800, 6: 0x86DD}


def ethernet_header(ipv: int, dst: bytes = ETH_DST, src: bytes = ETH_SRC) -> bytes:
    return dst + src + struct.pack(">H", ETHERTYPE[ipv])


def encap_frame(frame: bytes, mode: str, **kw) -> bytes:
    """encap() on an Ethernet frame; the Ethernet header is kept as is (as the reference does)."""
    return frame[:14] + encap(frame[14:], mode, **kw)


def decap_frame(frame: bytes, **kw) -> tuple[Header, bytes]:
    """decap() on an Ethernet frame; in tunnel mode the Ethertype follows the inner version nibble."""
    hdr, pkt = decap(frame[14:], **kw)
    eth = frame[:12] + struct.pack(">H", ETHERTYPE.get(pkt[0] >> 4, struct.unpack(">H", frame[12:14])[0]))
    return hdr, eth + pkt


def make_cleartext_frame(i: int = 0, ipv: int = 4, empty: bool = False) -> bytes:
    """Frame i (0-based) of a google/psp `create_pcap` run (§10.3)."""
    payload_len = 0 if empty else (1392 if ipv == 4 else 1372)
    payload = bytes((i + k) & 0xFF for k in range(payload_len))
    udp_len = UDP_LEN + payload_len
    udp = struct.pack(">HHHH", 11111, 22222, udp_len, 0) + payload
    if ipv == 4:
        src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, IPPROTO_UDP, 0, src, dst)
        ip = _with_ipv4_checksum(ip)
    elif ipv == 6:
        src = bytes([10] + [0] * 14 + [1])
        dst = bytes([10] + [0] * 14 + [2])
        ip = struct.pack(">IHBB16s16s", 0x60000000, udp_len, IPPROTO_UDP, 64, src, dst)
    else:
        raise ValueError("ipv must be 4 or 6")
    udp = udp[:6] + struct.pack(">H", udp_checksum(src, dst, udp)) + udp[8:]
    return ethernet_header(ipv) + ip + udp
