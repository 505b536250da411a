"""Shared by the pyeesp API tests (test_eesp_api_*.py): keys, the suite table
from the spec, packets built with struct and the §19 vectors.

Expected values come from the spec (docs/spec/eesp.md §3, §4, §7, §10, §12,
§19, D1-D16) or from an independent computation with the `cryptography`
package, never from the core.
"""
from __future__ import annotations

import struct

from pecore.protocol import checksum


ROOT = bytes(range(32))  # §19: root 000102..1f
SPI = 0x1000

# §10 / docs/keys.md: name -> (ENCR ID, IKEv2 name, salt, explicit IV, ICV, key sizes)
SUITE_TABLE = {
    "aes-gcm-8": (18, "ENCR_AES_GCM_8", 4, 8, 8, (128, 192, 256)),
    "aes-gcm-12": (19, "ENCR_AES_GCM_12", 4, 8, 12, (128, 192, 256)),
    "aes-gcm-16": (20, "ENCR_AES_GCM_16", 4, 8, 16, (128, 192, 256)),
    "aes-ccm-8": (14, "ENCR_AES_CCM_8", 3, 8, 8, (128, 192, 256)),
    "aes-ccm-12": (15, "ENCR_AES_CCM_12", 3, 8, 12, (128, 192, 256)),
    "aes-ccm-16": (16, "ENCR_AES_CCM_16", 3, 8, 16, (128, 192, 256)),
    "aes-gmac": (21, "ENCR_NULL_AUTH_AES_GMAC", 4, 8, 16, (128, 192, 256)),
    "chacha20-poly1305": (28, "ENCR_CHACHA20_POLY1305", 4, 8, 16, (256,)),
    "aes-ccm-8-iiv": (29, "ENCR_AES_CCM_8_IIV", 3, 0, 8, (128, 192, 256)),
    "aes-gcm-16-iiv": (30, "ENCR_AES_GCM_16_IIV", 4, 0, 16, (128, 192, 256)),
    "chacha20-poly1305-iiv": (31, "ENCR_CHACHA20_POLY1305_IIV", 4, 0, 16, (256,)),
}
SUITE_KEYS = [(name, bits) for name, row in SUITE_TABLE.items() for bits in row[5]]
IIV_SUITES = [n for n, row in SUITE_TABLE.items() if row[3] == 0]


def keymat_len(suite: str, bits: int) -> int:
    return bits // 8 + SUITE_TABLE[suite][2]


def keymat(suite: str, bits: int, seed: int = 0) -> bytes:
    return bytes((seed * 7 + i) & 0xFF for i in range(keymat_len(suite, bits)))


def iv_len(suite: str) -> int:
    return SUITE_TABLE[suite][3]


def icv_len(suite: str) -> int:
    return SUITE_TABLE[suite][4]


# --------------------------------------------------------------------------- packets


def _csum(data: bytes) -> int:
    """The one's-complement sum folded to 16 bits (not complemented), from the core's checksum."""
    return 0xFFFF ^ checksum(data)


V4_SRC, V4_DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
V6_SRC, V6_DST = bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db8000000000000000000000002")


def ipv4(proto: int, payload: bytes, *, ident: int = 0, flags: int = 0x4000, src=V4_SRC, dst=V4_DST) -> bytes:
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags, 64, proto, 0, src, dst))
    struct.pack_into("!H", h, 10, 0xFFFF ^ _csum(bytes(h)))
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes, *, src=V6_SRC, dst=V6_DST) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64, src, dst) + payload


def udp_segment(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def tcp_segment(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, 0x18, 512, 0, 0) + data


def udp4(n: int = 40, sport: int = 11111, dport: int = 22222, seed: int = 0) -> bytes:
    return ipv4(17, udp_segment(sport, dport, bytes((seed + i) & 0xFF for i in range(n))))


def udp6(n: int = 40, sport: int = 11111, dport: int = 22222, seed: int = 0) -> bytes:
    return ipv6(17, udp_segment(sport, dport, bytes((seed + i) & 0xFF for i in range(n))))


def tcp4(n: int = 40, seed: int = 0) -> bytes:
    return ipv4(6, tcp_segment(443, 50123, bytes((seed * 3 + i) & 0xFF for i in range(n))))


def tcp6(n: int = 40, seed: int = 0) -> bytes:
    return ipv6(6, tcp_segment(443, 50123, bytes((seed * 3 + i) & 0xFF for i in range(n))))


def ip_header_len(pkt: bytes) -> int:
    return (pkt[0] & 15) * 4 if pkt[0] >> 4 == 4 else 40


def eesp_part(outer: bytes) -> bytes:
    """The EESP packet inside an outer IP packet without IPv6 extension headers (UDP 4500 or not)."""
    ih = ip_header_len(outer)
    proto = outer[9] if outer[0] >> 4 == 4 else outer[6]
    return outer[ih + 8 :] if proto == 17 else outer[ih:]


def seq_of(outer: bytes) -> int:
    e = eesp_part(outer)
    return struct.unpack("!Q", e[8 + e[1] : 16 + e[1]])[0]


# §19 vectors
E_INNER = bytes.fromhex("4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef")
E1_WIRE = bytes.fromhex(
    "8000000100001000" "0000000000000001" "0000000000000001"
    "f3a49d2ace1a4832df0ff8647572df85a1c6f8b9c69784174c9c329573ba8209" "8066790b5676b7b8929158143a11642f"
)


