"""pecore.protocol: the protocol facts the front ends read from the core instead of keeping copies."""
from __future__ import annotations

import struct

import pytest

import pyeesp
import pypsp
from pecore import protocol as p
from pyeesp.header import Header as EespHeader
from pyeesp.sa import SUITES


def _ipv4(proto: int, payload: bytes, src: bytes = bytes([192, 0, 2, 1]), dst: bytes = bytes([192, 0, 2, 2])) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0, 64, proto, 0, src, dst)
    return hdr[:10] + struct.pack("!H", p.checksum(hdr)) + hdr[12:] + payload


def _udp(sport: int, dport: int, payload: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def test_suite_table_matches_the_python_names_and_ids():
    assert {s.name: s.id for s in p.EESP_SUITES} == SUITES == {
        "aes-ccm-8": 14, "aes-ccm-12": 15, "aes-ccm-16": 16, "aes-gcm-8": 18, "aes-gcm-12": 19, "aes-gcm-16": 20,
        "aes-gmac": 21, "chacha20-poly1305": 28, "aes-ccm-8-iiv": 29, "aes-gcm-16-iiv": 30,
        "chacha20-poly1305-iiv": 31}  # eesp.md §10
    gcm = p.eesp_suite("aes-gcm-16")
    assert gcm == p.eesp_suite(20) == p.eesp_suite("encr_aes_gcm_16")
    assert (gcm.salt_len, gcm.iv_len, gcm.icv_len, gcm.key_lens, gcm.aead) == (4, 8, 16, (16, 24, 32), "aes-gcm")
    ccm = p.eesp_suite("aes-ccm-8-iiv")
    assert (ccm.salt_len, ccm.iv_len, ccm.implicit_iv, ccm.icv_len) == (3, 0, True, 8)
    assert p.eesp_suite("chacha20-poly1305").key_lens == (32,) and p.eesp_suite("aes-gmac").integrity_only
    assert p.eesp_suite("AES-GCM-16") is None and p.eesp_suite(17) is None and p.eesp_suite(-1) is None
    assert p.eesp_suite(True) is None and p.eesp_suite(None) is None  # type: ignore[arg-type]
    assert gcm.keymat_len(256) == 36 and ccm.keymat_len() == 19
    with pytest.raises(ValueError):
        gcm.keymat_len(100)


def test_psp_version_table():
    assert [(v.version, v.name, v.key_len, v.gmac) for v in p.PSP_VERSIONS] == [
        (0, "AES-GCM-128", 16, False), (1, "AES-GCM-256", 32, False),
        (2, "AES-GMAC-128", 16, True), (3, "AES-GMAC-256", 32, True)]
    assert p.psp_version(4) is None and p.psp_version(-1) is None


def test_checksums():
    data = bytes.fromhex("0001f203f4f5f6f7")  # RFC 1071 §3: the sum is 0xddf2
    assert p.checksum(data) == 0xFFFF ^ 0xDDF2
    assert p.checksum(bytearray(data)) == p.checksum(memoryview(data))
    assert p.checksum(b"") == 0xFFFF and p.checksum(b"\x12") == 0xFFFF ^ 0x1200
    pkt = bytearray(_ipv4(17, _udp(1, 2, b"hello")))
    assert p.checksum(pkt[:20]) == 0
    c = p.udp_checksum(pkt)
    pkt[26:28] = struct.pack("!H", c)
    assert p.udp_checksum(pkt) == c  # its own field does not count
    with pytest.raises(ValueError, match="not-udp"):
        p.udp_checksum(_ipv4(6, bytes(20)))
    with pytest.raises(TypeError):
        p.checksum("abc")  # type: ignore[arg-type]


def test_crypt_offset_codec():
    assert p.crypt_offset_decode(0x1C30) == (7, 3, 0)
    assert p.crypt_offset_encode(7, 3) == 0x1C30
    assert p.CRYPT_OFFSET_FIELD_BITS == (6, 6, 4)
    for bad in ((64, 0, 0), (0, 64, 0), (0, 0, 16), (-1, 0, 0)):
        with pytest.raises(ValueError):
            p.crypt_offset_encode(*bad)
    assert pyeesp.Option.crypt_offset(7, 3).data == b"\x1c\x30"
    assert pyeesp.Option.crypt_offset(7, 3).crypt_offset_value == 3


def test_locate():
    psp = _ipv4(17, _udp(4242, 1000, b"x" * 40))
    loc, st = p.locate_psp(psp)
    assert st == "ok" and (loc.offset, loc.length, loc.udp_sport, loc.ip_version) == (28, 40, 4242, 4)
    assert p.locate_psp(psp, 1001) == (None, "udp-wrong-port")
    eesp = _ipv4(17, _udp(4500, 4500, b"\x80" + bytes(30)))
    loc, st = p.locate_eesp(eesp)
    assert st == "ok" and loc.udp_encap and (loc.offset, loc.length) == (28, 31)
    assert p.locate_eesp(_ipv4(17, _udp(4500, 4500, b"\xff")))[1] == "nat-keepalive"
    assert p.locate_eesp(_ipv4(17, _udp(4500, 4500, bytes(8))))[1] == "ike-non-esp-marker"
    back = _ipv4(17, _udp(4500, 9999, b"\x80" + bytes(30)))
    assert p.locate_eesp(back)[1] == "not-eesp" and p.locate_eesp(back, either_port=True)[1] == "ok"
    loc, st = p.locate_eesp(_ipv4(49, b"\x80" + bytes(20)))
    assert st == "ok" and not loc.udp_encap and loc.offset == 20


def test_eesp_header_parse_lenient():
    # A repeated Crypt Offset option: the strict parse refuses, the lenient one lists both.
    raw = bytes([0x80, 8, 0, 1, 0, 0, 0, 7, 2, 2, 0x1C, 0x30, 2, 2, 0x04, 0x10])
    with pytest.raises(pyeesp.EespError):
        EespHeader.parse(raw)
    h, st = EespHeader.parse_lenient(raw)
    assert st == "eesp-bad-crypt-offset-option" and h.spi == 7 and len(h.options) == 2
    assert h.crypt_offset_option.payload_offset == 7
    assert EespHeader.parse_lenient(raw[:5]) == (None, "eesp-truncated")
    h, st = EespHeader.parse_lenient(raw[:10])
    assert st == "eesp-truncated" and h.spi == 7 and h.options == ()


def test_psp_scapy_seal_is_the_core_bare_seal():
    pytest.importorskip("scapy")
    from pypsp.scapy import PSP

    key = bytes(range(16))
    pkt = PSP(nexthdr=17, cryptoffset=1, spi=0x12345678, iv=(5).to_bytes(8, "big"), data=b"payload!" * 3)
    pkt.encrypt(key)
    enc = pypsp.Encryptor(spi=0x12345678, key=key, crypt_offset=1, first_iv=5)
    whole = enc.encrypt(_ipv4(17, b"payload!" * 3))
    assert bytes(pkt) == whole[28:]
