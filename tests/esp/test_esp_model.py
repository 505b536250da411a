"""Known-answer and property tests of the independent ESP model (tests/esp_model.py). No core, no pecore.

The published vectors anchor the model without the core: the fourteen AES-GCM ESP packets of
draft-mcgrew-gcm-test-01 §4 (32-bit and extended sequence numbers, 128/192/256-bit keys), its AES-GMAC packet
and its two last GCM packets (ciphertext only), and RFC 7634 Appendix A (ChaCha20-Poly1305, tunnel mode).  The
bytes are the ones core/tests/test_esp.c holds; their one Python copy, pyesp/tools/esp_kat.json, also feeds the
vectors, and this file opens it by path, so that it runs no project code.  Each packet opens to the published
plaintext, and sealing that plaintext with the published IV gives the published octets back (the sender side
too, although the documents' IVs are random).
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import esp_model as m

# The published bytes, from the one file that also feeds the vectors (read by path: no project code runs)
KAT = json.loads((Path(__file__).resolve().parents[2] / "pyesp" / "tools" / "esp_kat.json").read_text(encoding="utf-8"))
MCGREW = KAT["mcgrewGcm"]["cases"]  # key, nonce (salt || IV), plaintext (payload || padding || trailer), AAD, ciphertext, ICV
# AES-GMAC (RFC 4543): SPI 0x4321, Seq 7, IV 0; keymat, payload || padding || trailer, ICV
MCGREW_GMAC = tuple(KAT["mcgrewGmac"][k] for k in ("keymat", "body", "icv"))
# its two last AES-GCM packets, ciphertext only: keymat, AAD (SPI || Seq high || Seq low), IV, ciphertext || ICV
MCGREW_LAST = KAT["mcgrewLastGcm"]["cases"]
# RFC 7634 Appendix A: keymat (key || salt), the ESP packet, the inner packet
RFC7634_KEYMAT, RFC7634_ESP, RFC7634_INNER = (KAT["rfc7634"][k] for k in ("keymat", "esp", "inner"))


def mcgrew_case(i: int):
    key, nonce, pt, aad, ct, tag = (bytes.fromhex(x) for x in MCGREW[i])
    esn = len(aad) == 12
    seq = struct.unpack(">Q", aad[4:12])[0] if esn else struct.unpack(">I", aad[4:8])[0]
    sa = m.SA(spi=struct.unpack(">I", aad[:4])[0], encr_id=20, keymat=key + nonce[:4], mode="transport", esn=esn,
              replay_top=seq - 1)
    esp = aad[:4] + aad[-4:] + nonce[4:] + ct + tag
    return sa, esp, pt, seq, nonce[4:]


@pytest.mark.parametrize("i", range(len(MCGREW)), ids=lambda i: f"case{i + 1}")
def test_mcgrew_gcm_packets(i):
    sa, esp, pt, seq, iv = mcgrew_case(i)
    opened = m.open({sa.spi: sa}, esp)
    pad = pt[-2]
    assert (opened.payload, opened.pad_len, opened.next_header, opened.seq) == (pt[: -2 - pad], pad, pt[-1], seq)
    assert m.seal(sa, opened.payload, pt[-1], seq, iv=iv, padding=pt[-2 - pad : -2]) == esp
    with pytest.raises(m.EspModelError, match="replay-duplicate"):
        m.open({sa.spi: sa}, esp)
    sa2, *_ = mcgrew_case(i)
    with pytest.raises(m.EspModelError, match="authentication-failed"):
        m.open({sa2.spi: sa2}, esp[:-1] + bytes([esp[-1] ^ 1]))


def test_mcgrew_esn_high_half_is_authenticated():
    """Case 5 has ESN: the same octets under a 32-bit SA (AAD SPI || Seq low) fail.  (Case 1 has ESN too, with
    low half 0: a 32-bit receiver refuses that as sequence number 0 before any ICV check.)"""
    sa, esp, *_ = mcgrew_case(4)
    assert sa.esn
    sa = m.SA(spi=sa.spi, encr_id=20, keymat=sa.keymat, mode="transport")
    with pytest.raises(m.EspModelError, match="authentication-failed"):
        m.open({sa.spi: sa}, esp)
    sa, esp, *_ = mcgrew_case(0)
    sa = m.SA(spi=sa.spi, encr_id=20, keymat=sa.keymat, mode="transport")
    with pytest.raises(m.EspModelError, match="esp-sequence-zero"):
        m.open({sa.spi: sa}, esp)


def test_mcgrew_gmac_packet():
    keymat, body, icv = (bytes.fromhex(x) for x in MCGREW_GMAC)
    sa = m.SA(spi=0x4321, encr_id=21, keymat=keymat, mode="transport", replay_top=6)
    esp = struct.pack(">II", 0x4321, 7) + bytes(8) + body + icv
    opened = m.open({sa.spi: sa}, esp)
    assert opened.payload == body[:-4] and (opened.pad_len, opened.next_header) == (2, 1)
    assert m.seal(sa, opened.payload, 1, 7, iv=bytes(8)) == esp
    sa = m.SA(spi=0x4321, encr_id=21, keymat=keymat, mode="transport", replay_top=6)
    with pytest.raises(m.EspModelError, match="authentication-failed"):  # the IV is in the AAD
        m.open({sa.spi: sa}, esp[:12] + bytes([esp[12] ^ 1]) + esp[13:])


@pytest.mark.parametrize("i", range(len(MCGREW_LAST)))
def test_mcgrew_last_gcm_packets_open_with_default_padding(i):
    keymat, aad, iv, rest = (bytes.fromhex(x) for x in MCGREW_LAST[i])
    spi, seq = struct.unpack(">I", aad[:4])[0], struct.unpack(">Q", aad[4:])[0]
    sa = m.SA(spi=spi, encr_id=20, keymat=keymat, mode="transport", esn=True, replay_top=seq - 1)
    opened = m.open({spi: sa}, aad[:4] + aad[8:] + iv + rest)
    assert opened.seq == seq
    assert m.seal(sa, opened.payload, opened.next_header, seq, iv=iv) == aad[:4] + aad[8:] + iv + rest


def test_rfc7634_appendix_a():
    esp, inner = bytes.fromhex(RFC7634_ESP), bytes.fromhex(RFC7634_INNER)
    sa = m.SA(spi=0x01020304, encr_id=28, keymat=bytes.fromhex(RFC7634_KEYMAT), mode="tunnel")
    opened = m.open({sa.spi: sa}, esp)
    assert (opened.payload, opened.seq, opened.next_header, opened.pad_len) == (inner, 5, 4, 2)
    assert m.seal(sa, inner, 4, 5, iv=esp[8:16]) == esp


# ------------------------------------------------------------------ ESN inference (RFC 4303 Appendix A2.2)


def test_infer_seq_cases():
    w = 64
    assert m.infer_seq(0x1_FFFF_FFF0, w, 5) == 0x2_0000_0005  # Case A, Seql below Bl: next subspace
    assert m.infer_seq(0x1_FFFF_FFF0, w, 0xFFFF_FFE0) == 0x1_FFFF_FFE0  # Case A, in the window
    assert m.infer_seq(0x2_0000_0005, w, 0xFFFF_FFF0) == 0x1_FFFF_FFF0  # Case B, Seql >= Bl: previous
    assert m.infer_seq(0x2_0000_0005, w, 0x10) == 0x2_0000_0010  # Case B, ahead
    assert m.infer_seq(5, w, 0xFFFF_FFF0) == 0xFFFF_FFF0  # Case B in subspace 0: nothing below it
    assert m.infer_seq(0x1_0000_0000, w, 0) == 0x1_0000_0000  # low half 0 is a real number with ESN


@given(st.integers(0, 2**63), st.sampled_from([64, 128, 1024]), st.integers(0, 2**32 - 1))
def test_infer_seq_recovers_every_number_from_the_window_on(top, w, ahead):
    """Every number from the window's bottom to 2^32 - W beyond the top is recovered from its low half."""
    seq = top - w + 1 + ahead
    if seq < 1 or ahead > 2**32 - 1:
        return
    assert m.infer_seq(top, w, seq & 0xFFFFFFFF) == seq


# ------------------------------------------------------------------ round trips and receiver rules

IPV4_UDP = bytes.fromhex("45000024123440004011" "0000" "c0000201c6336407" "9c409c41001000000102030405060708")
IPV6_TCP = bytes.fromhex("6000000000180640" + "20010db8" + "00" * 11 + "01" + "20010db8" + "00" * 11 + "02"
                         + "9c409c42000000010000000150180100" + "00000000" + "aabbccdd")


def _v4(pkt: bytes) -> bytes:
    h = bytearray(pkt)
    h[10:12] = struct.pack(">H", m.inet_checksum(bytes(h[:20])))
    return bytes(h)


@pytest.mark.parametrize("mode", ["tunnel", "transport"])
@pytest.mark.parametrize("encr", sorted(m.SUITES))
@pytest.mark.parametrize("esn,udp", [(False, False), (True, False), (False, True)])
def test_round_trip(mode, encr, esn, udp):
    s = m.SUITES[encr]
    keymat = bytes(range(32 if s.kind == "chacha" else 16)) + bytes(range(100, 100 + s.salt_len))
    sa = m.SA(spi=0x1234, encr_id=encr, keymat=keymat, mode=mode, esn=esn, udp_encap=udp)
    rx = {0x1234: m.SA(spi=0x1234, encr_id=encr, keymat=keymat, mode=mode, esn=esn, udp_encap=udp,
                       replay_top=(7 << 32) if esn else 0)}
    outer6 = bytes.fromhex("60000000000032ff" + "20010db8ffff" + "00" * 9 + "01" + "20010db8eeee" + "00" * 9 + "02")
    for i, pkt in enumerate((_v4(IPV4_UDP), IPV6_TCP)):
        seq = ((7 << 32) if esn else 0) + 3 + i
        wire = m.encap(sa, pkt, seq, outer=outer6 if mode == "tunnel" else None)
        opened, got = m.decap(rx, wire)
        assert got == pkt and opened.seq == seq
        assert (len(wire) - (40 if mode == "tunnel" or pkt[0] >> 4 == 6 else 20)) % 4 == (0 if not udp else 0)
        with pytest.raises(m.EspModelError, match="replay-duplicate"):
            m.decap(rx, wire)


def test_receiver_rules():
    keymat = bytes(20)
    def sa(**kw):
        return m.SA(spi=9, encr_id=20, keymat=keymat, **kw)
    tx = sa(mode="tunnel")
    inner = _v4(IPV4_UDP)
    esp = m.seal(tx, inner, 4, 1)
    rx = {9: sa(mode="tunnel")}
    assert m.open(rx, esp).payload == inner
    with pytest.raises(m.EspModelError, match="esp-dummy-packet"):
        m.open({9: sa()}, m.seal(tx, b"junk", 59, 2))
    with pytest.raises(m.EspModelError, match="esp-bad-next-header"):
        m.open({9: sa()}, m.seal(tx, inner, 17, 2))
    with pytest.raises(m.EspModelError, match="esp-bad-inner-packet"):
        m.open({9: sa()}, m.seal(tx, inner, 41, 2))
    with pytest.raises(m.EspModelError, match="esp-bad-padding") as e:
        m.open({9: sa()}, m.seal(tx, inner[:-1], 4, 2, padding=b"\0\0\0"))
    assert e.value.icv_valid
    with pytest.raises(m.EspModelError, match="esp-sequence-zero"):
        m.open({9: sa()}, m.seal(tx, inner, 4, 0))
    with pytest.raises(m.EspModelError, match="esp-no-sa"):
        m.open({10: sa()}, esp)
    with pytest.raises(m.EspModelError, match="esp-truncated"):
        m.open({9: sa()}, esp[:8 + 8 + 2 + 15])
    r = {9: sa(replay_window=64, replay_top=200)}
    with pytest.raises(m.EspModelError, match="replay-too-old"):
        m.open(r, m.seal(tx, inner, 4, 136))
    with pytest.raises(m.EspModelError, match="replay-duplicate"):  # resumed at 200: it and all below it received
        m.open(r, m.seal(tx, inner, 4, 137))
    assert m.open(r, m.seal(tx, inner, 4, 201)).seq == 201


def test_the_kat_file_holds_the_bytes_of_the_c_tests():
    """esp_kat.json and core/tests/test_esp.c hold the same published bytes (the C tests keep their own copy)."""
    import re

    c = (Path(__file__).resolve().parents[2] / "core" / "tests" / "test_esp.c").read_text()
    blob = "".join(re.findall(r'"([0-9a-fA-F ]*)"', c)).replace(" ", "").lower()
    values = [v for case in MCGREW + MCGREW_LAST for v in case] + list(MCGREW_GMAC)
    values += [RFC7634_KEYMAT, RFC7634_ESP, RFC7634_INNER]
    assert [v for v in values if v not in blob] == []
