"""Known-answer and property tests of the independent EESP model (tests/eesp_model.py). No core needed.

Data: tests/data/eesp_kat.json, typed from docs/spec/eesp.md §19. Those vectors are self-computed
(source = self): they anchor our reading of the drafts, they do not prove it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305
from hypothesis import given
from hypothesis import strategies as st

import eesp_model as m
import eesp_strategies as es

KAT = json.loads((Path(__file__).parents[1] / "data" / "eesp_kat.json").read_text())
VEC = {v["name"]: v for v in KAT["vectors"]}
COMMON = KAT["common"]
ROOT = bytes.fromhex(COMMON["root"])
INNER = bytes.fromhex(COMMON["innerIpv4Udp"])
SPI = int(COMMON["spi"], 16)
MALFORMED_OR_AUTH = set(m.ERROR_CODES)


def unhex(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


def kat_sa(vec=None, **kw) -> m.SA:
    """The §19 common SA (AES-128-GCM-16, SSKDF-SHA256 root 00..1f, SPI 0x1000) with per-vector settings."""
    args = dict(spi=SPI, encr_id=COMMON["encrId"], sskdf=COMMON["sskdfId"], root_key=ROOT)
    if vec is not None:
        args.update(encr_id=vec["encrId"], mode=vec["mode"])
        if "maxCryptOffset" in vec:
            args["max_crypt_offset"] = vec["maxCryptOffset"]
    args.update(kw)
    return m.SA(**args)


def code_of(fn, *a, **kw) -> str:
    with pytest.raises(m.EespModelError) as e:
        fn(*a, **kw)
    return e.value.code


def flip(data: bytes, bit: int) -> bytes:
    b = bytearray(data)
    b[bit // 8] ^= 0x80 >> (bit % 8)
    return bytes(b)


# --------------------------------------------------------------------------------------------------------
# §12 SSKDF and §19 table
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", KAT["sskdf"]["rows"], ids=lambda r: f"{r['sskdf']}-sid{r['sessionId']}-L{r['L']}")
def test_sskdf_table(row):
    root = unhex(row["root"])
    assert len(root) == m.sskdf_root_len(row["sskdfId"])
    out = m.derive_sub_sa_key(row["sskdfId"], root, row["sessionId"], row["L"])
    assert out == m.derive_sub_sa_key(row["sskdf"], root, row["sessionId"], row["L"])  # name form
    if "keymat" in row:
        assert out.hex() == row["keymat"]
    else:
        assert out.hex() == row["key"] + row["salt"]
        encr_id = 20 if row["L"] == 20 else 28  # AES-128-GCM / ChaCha20-Poly1305 (L = 36)
        assert m.split_keymat(encr_id, out) == (unhex(row["key"]), unhex(row["salt"]))


def test_sskdf_prefix_property_and_sub_sa_keys():
    # HKDF-Expand output for a shorter L is a prefix of the longer one (the table relies on it)
    assert m.derive_sub_sa_key(1, ROOT, 1, 36)[:20] == m.derive_sub_sa_key(1, ROOT, 1, 20)
    sa = kat_sa()
    assert sa.sub_sa_keymat(1) == (unhex(COMMON["key"]), unhex(COMMON["salt"]))
    assert sa.sub_sa_keymat(0) != sa.sub_sa_keymat(1)
    # L = key + salt: 19/27/35 for CCM, 20/28/36 for GCM and GMAC (D15), 36 for ChaCha20-Poly1305
    for encr_id, bits, want in [(16, 128, 19), (16, 192, 27), (29, 256, 35), (20, 192, 28), (21, 128, 20),
                                (21, 256, 36), (28, 256, 36), (31, 256, 36)]:
        s = kat_sa(encr_id=encr_id, key_bits=bits)
        assert s.keymat_len == want
        key, salt = s.sub_sa_keymat(7)
        assert len(key) == bits // 8 and len(salt) == m.SUITES[encr_id].salt_len
        assert key + salt == m.derive_sub_sa_key(1, ROOT, 7, want)


def test_config_refusals():
    assert code_of(m.derive_sub_sa_key, 4, bytes(32), 0, 20) == "bad-config"
    with pytest.raises(m.EespModelError, match="SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02"):
        kat_sa(sskdf=m.SSKDF_AES256_CMAC)
    with pytest.raises(m.EespModelError, match="SSKDF_AES256_CMAC is not defined"):
        kat_sa(sskdf="SSKDF_AES256_CMAC")
    assert code_of(kat_sa, encr_id=21, aad="linux-xfrm") == "bad-config"  # D12
    for iiv in (29, 30, 31):
        assert code_of(kat_sa, encr_id=iiv, key_bits=256, seq=False) == "bad-config"  # §10
    assert code_of(kat_sa, encr_id=28, key_bits=128) == "bad-config"
    assert code_of(kat_sa, root_key=bytes(31)) == "bad-config"
    assert code_of(m.SA, spi=1, keymat=bytes(19)) == "bad-config"
    assert code_of(kat_sa, encr_id=99) == "bad-config"


# --------------------------------------------------------------------------------------------------------
# §19 E1-E5 and Fig. 19
# --------------------------------------------------------------------------------------------------------


def test_kat_internally_consistent():
    """The typed vectors agree with plain AES-GCM (no EESP framing involved), so a typo shows up here."""
    key, salt = unhex(COMMON["key"]), unhex(COMMON["salt"])
    for v in KAT["vectors"]:
        assert v["nonce"].startswith(salt.hex())
        variants = v.get("variants", {"draft": v})
        for var in variants.values():
            plain = unhex(v["plaintext"]) if "plaintext" in v else unhex("deadbeef")
            out = AESGCM(key).encrypt(unhex(v["nonce"]), plain, unhex(var["aad"]))
            assert out.hex() == v["ciphertext"] + var["icv"]
            assert unhex(var["wire"]).endswith(unhex(v["ciphertext"] + var["icv"]))
            assert unhex(var["wire"]).startswith(unhex(v["base"] + v["options"]))
        if "wireLen" in v:
            assert len(unhex(v["wire"])) == v["wireLen"]
    assert len(unhex(VEC["E3"]["aad"])) == VEC["E3"]["aadLen"]


@pytest.mark.parametrize("variant", ["draft", "linux-xfrm"])
def test_e1_tunnel_optimized(variant):
    v = VEC["E1"]
    sa = kat_sa(v, aad=variant)
    assert sa.packet_format(False) == "optimized"
    wire = m.seal(sa, INNER, next_header=4, session_id=1, seq=v["seq"], iv=v["iv"])
    want = v["variants"][variant]
    assert wire.hex() == want["wire"]
    assert wire[24:-16].hex() == v["ciphertext"] and wire[-16:].hex() == want["icv"]
    assert m.seal(sa, INNER, next_header=4, session_id=1, seq=1) == wire  # IV defaults to the sequence number
    o = m.open(sa, wire)
    assert (o.payload, o.next_header, o.pad_len, o.format, o.seq, o.iv, o.session_id) == (
        INNER, 4, 0, "optimized", 1, 1, 1)
    other = "linux-xfrm" if variant == "draft" else "draft"
    assert code_of(m.open, kat_sa(v, aad=other), wire) == "authentication-failed"


@pytest.mark.parametrize("name,ipv", [("E2", 4), ("E5", 6)])
def test_e2_e5_transport_full(name, ipv):
    v = VEC[name]
    sa = kat_sa(v)
    l4 = unhex(v["l4"])
    wire = m.seal(sa, l4, next_header=v["nextHeader"], session_id=1, seq=v["seq"], outer_ip_version=ipv)
    assert wire.hex() == v["wire"] and len(wire) == v["wireLen"]
    hdr_len = len(unhex(v["base"] + v["options"])) + 16
    assert hdr_len + 4 == v.get("nextLayerOffset", hdr_len + 4)
    o = m.open(sa, wire)
    assert (o.payload, o.next_header, o.pad_len, o.format) == (l4, 17, v["padLen"], "full")
    assert m.build_pih(17, v["padLen"]) + l4 + bytes(v["padLen"]) == unhex(v["plaintext"])
    if name == "E5":
        assert o.options == [m.padn(4)]
        # without alignment the same packet is E2's layout
        assert m.seal(kat_sa(v, align_options=False), l4, next_header=17, session_id=1, seq=4,
                      outer_ip_version=6)[:8].hex() == "8000000100001000"


def test_e3_crypt_offset():
    v = VEC["E3"]
    sa = kat_sa(v)
    assert sa.packet_format(True) == "full"  # D2
    wire = m.seal(sa, INNER, next_header=4, session_id=1, seq=3, crypt_offset=v["cryptOffset"])
    assert wire.hex() == v["wire"]
    assert wire[: v["aadLen"]] == unhex(v["aad"])  # the AAD is every clear octet before the ciphertext
    o = m.open(sa, wire)
    assert o.crypt_offset == (v["payloadOffset"], v["cryptOffset"], 0)
    assert (o.payload, o.next_header, o.format, o.options) == (INNER, 4, "full", [(2, unhex("1c80"))])
    # the receiver did not announce a maximum: dropped after the ICV check, which passed
    with pytest.raises(m.EespModelError) as e:
        m.open(kat_sa(v, max_crypt_offset=None), wire)
    assert e.value.code == "eesp-crypt-offset-not-allowed" and e.value.icv_valid is True
    with pytest.raises(m.EespModelError) as e:
        m.open(kat_sa(v, max_crypt_offset=7), wire)  # above the maximum
    assert e.value.code == "eesp-crypt-offset-not-allowed" and e.value.icv_valid is True
    with pytest.raises(m.EespModelError) as e:
        m.open(kat_sa(v, max_crypt_offset=7), flip(wire, len(wire) * 8 - 1))
    assert e.value.code == "eesp-crypt-offset-not-allowed" and e.value.icv_valid is False
    assert m.open(kat_sa(v, max_crypt_offset=8), wire).payload == INNER
    # the sender refuses what the peer did not allow
    assert code_of(m.seal, kat_sa(v, max_crypt_offset=None), INNER, next_header=4, session_id=1, seq=3,
                   crypt_offset=8) == "eesp-crypt-offset-not-allowed"


def test_e4_iiv():
    v = VEC["E4"]
    sa = kat_sa(v)
    assert sa.iv_len == 0
    wire = m.seal(sa, INNER, next_header=4, session_id=1, seq=5)
    assert wire.hex() == v["wire"]
    assert m.seal(sa, INNER, next_header=4, session_id=1, seq=5, iv=12345) == wire  # no IV field: ignored
    o = m.open(sa, wire)
    assert (o.payload, o.seq, o.iv) == (INNER, 5, None)
    # linux-xfrm has no IV to leave out with IIV: same packet
    assert m.seal(kat_sa(v, aad="linux-xfrm"), INNER, next_header=4, session_id=1, seq=5) == wire


def test_figure19_option_octets():
    fig = KAT["figure19"]
    opt = m.crypt_offset_option(fig["payloadOffset"], fig["cryptOffset"])
    assert opt.hex() == fig["option"] == "02021c80"
    assert m.parse_options(opt) == [(2, opt[2:])]
    assert m.parse_crypt_offset(opt[2:]) == (7, 8, 0)
    assert m.parse_crypt_offset(unhex("1c8f")) == (7, 8, 15)
    assert m.crypt_offset_option(63, 63, 15).hex() == "0202ffff"
    # Fig. 19's case: tunnel, Seq + 8-octet IV, 28 octets to the PIH, PIH + IPv4 + UDP exposed (32 octets)
    assert 8 + 4 + 8 + 8 == 4 * 7 and 4 + 20 + 8 == 4 * 8


# --------------------------------------------------------------------------------------------------------
# header pieces
# --------------------------------------------------------------------------------------------------------


@given(compat=st.integers(0, 1), version=st.integers(0, 15), r=st.integers(0, 7), opt_len=st.integers(0, 255),
       sid=st.integers(0, 0xFFFF), spi=st.integers(0, 2**32 - 1))
def test_base_header_roundtrip(compat, version, r, opt_len, sid, spi):
    raw = m.build_base_header(opt_len, sid, spi, version=version, reserved=r, compat=compat)
    h = m.parse_base_header(raw)
    assert (h.compat, h.version, h.reserved, h.opt_len, h.session_id, h.spi) == (compat, version, r, opt_len, sid, spi)
    assert h.build() == raw
    assert raw[0] == (compat << 7) | (version << 3) | r


def test_base_header_v0_and_pih_layout():
    assert m.build_base_header(0, 1, 0x1000).hex() == "8000000100001000"
    assert m.build_pih(17, 3).hex() == "00001103"
    assert m.parse_pih(unhex("f0ab3b07")) == (59, 7, 0xF0AB)
    assert m.encode_options([m.pad1(), m.padn(2), m.padn(5), (200, b"xy")]).hex() == "00" "0100" "0103000000" "c8027879"


@pytest.mark.parametrize("raw,want", [
    ("", []),
    ("00", [(0, b"")]),
    ("0000", [(0, b""), (0, b"")]),
    ("0100", [(1, b"")]),
    ("01020000", [(1, b"\0\0")]),
    ("02021c80", [(2, unhex("1c80"))]),
    ("c80178" "00", [(200, b"x"), (0, b"")]),
])
def test_parse_options(raw, want):
    assert m.parse_options(unhex(raw)) == want
    assert m.encode_options(want) == unhex(raw)


@pytest.mark.parametrize("raw", ["01", "0101", "010300", "c8", "02030000", "0002"])
def test_parse_options_overrun(raw):
    assert code_of(m.parse_options, unhex(raw)) == "eesp-options-overrun"


# --------------------------------------------------------------------------------------------------------
# §16 receiver checks: codes and order
# --------------------------------------------------------------------------------------------------------


def raw_packet(sa: m.SA, session_id: int, seq: int | None, iv: int | None, options: bytes, body: bytes,
               clear_len: int = 0, opt_len: int | None = None) -> bytes:
    """An authentic AES-GCM packet assembled by hand (draft AAD): for layouts the sender refuses to build."""
    assert sa.suite.kind == "gcm" and not sa.suite.iiv and sa.aad == "draft"
    key, salt = sa.sub_sa_keymat(session_id)
    head = m.build_base_header(len(options) if opt_len is None else opt_len, session_id, sa.spi) + options
    head += (struct.pack(">Q", seq) if seq is not None else b"") + struct.pack(">Q", iv)
    aad = head + body[:clear_len]
    out = AESGCM(key).encrypt(salt + struct.pack(">Q", iv), body[clear_len:], aad)
    return aad + out[: -16] + out[-16:][: sa.icv_len]


SA_T = kat_sa(mode="transport", max_crypt_offset=63, max_sub_sa_id=3)  # full format, Sub SAs 0..3
L4 = bytes(range(13))


def good(seq=1, sid=1, **kw):
    return m.seal(SA_T, L4, next_header=6, session_id=sid, seq=seq, **kw)


def with_octet(pkt: bytes, at: int, value: int) -> bytes:
    return pkt[:at] + bytes([value]) + pkt[at + 1 :]


@pytest.mark.parametrize("pkt,code", [
    (b"", "eesp-truncated"),
    (unhex("80000001000010"), "eesp-truncated"),
    (with_octet(good(), 0, 0x00), "eesp-compat-bit-clear"),
    (with_octet(good(), 0, 0x7F), "eesp-compat-bit-clear"),  # before version and R
    (with_octet(good(), 0, 0x88), "eesp-unsupported-version"),
    (with_octet(good(), 0, 0xF9), "eesp-unsupported-version"),  # before R
    (with_octet(good(), 0, 0x81), "eesp-reserved-bits-set"),
    (with_octet(good(), 0, 0x84), "eesp-reserved-bits-set"),
    (with_octet(with_octet(good(), 0, 0x84), 7, 0x01), "eesp-reserved-bits-set"),  # before the SA lookup
    (with_octet(good(), 7, 0x01), "eesp-no-sa"),
    (unhex("80ff000100001000"), "eesp-truncated"),  # Opt Len past the packet
    (good(options=[(200, b"")])[:10], "eesp-truncated"),  # Opt Len 4, 2 option octets present
    (with_octet(good(options=unhex("01020000")), 1, 3), "eesp-options-overrun"),
    (with_octet(good(options=[(9, b"abc")]), 9, 7), "eesp-options-overrun"),  # 09 07 ... in 8 octets
    (good(options=unhex("02030000")), "eesp-options-overrun"),
    (good(options=unhex("0201ff00"), check=False), "eesp-bad-crypt-offset-option"),  # D3: length 1
    (good(options=unhex("02030000" "00000000"), check=False), "eesp-bad-crypt-offset-option"),  # length 3
    (good(options=unhex("02021c80"), crypt_offset=0, check=False), "eesp-bad-crypt-offset-option"),  # two (D13)
    (good(options=unhex("02021800")), "eesp-bad-payload-offset"),  # says 24, the header is 28
    (with_octet(good(crypt_offset=1), 10, 0x00), "eesp-bad-payload-offset"),
    (with_octet(with_octet(good(crypt_offset=0), 10, 0x1F), 11, 0xF0), "eesp-crypt-offset-past-payload"),
    (with_octet(with_octet(good(crypt_offset=0), 10, 0x1C), 11, 0x50), "authentication-failed"),  # fits
    (with_octet(good(sid=3), 3, 4), "eesp-sub-sa-out-of-range"),
    (with_octet(good(sid=3), 2, 1), "eesp-sub-sa-out-of-range"),
    (good()[:8 + 16 + 4 + 15], "eesp-truncated"),  # step 7: header + PIH + ICV do not fit
    (good(seq=0), "eesp-sequence-zero"),
    (flip(good(), 8 * 30), "authentication-failed"),
    (flip(good(), 8 * len(good()) - 1), "authentication-failed"),
])
def test_receiver_check_codes(pkt, code):
    assert code_of(m.open, SA_T, pkt) == code


def test_error_code_vocabulary():
    assert set(m.ERROR_CODES) == {
        "eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
        "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-bad-payload-offset",
        "eesp-crypt-offset-past-payload", "eesp-crypt-offset-not-allowed", "eesp-unknown-option", "eesp-no-sa",
        "eesp-sub-sa-out-of-range", "eesp-sequence-zero", "replay-duplicate", "replay-too-old",
        "authentication-failed", "eesp-bad-pad-length", "eesp-bad-inner-packet", "eesp-dummy-packet"}
    assert len(m.ERROR_CODES) == 19


def test_receiver_check_order_details():
    # strict: unknown options after overrun / Crypt Offset checks, before the PayloadOffset check
    strict = kat_sa(mode="transport", max_crypt_offset=63, strict=True)
    pkt = good(options=[(3, b"zz")])
    assert m.open(SA_T, pkt).unknown_options == [(3, b"zz")]
    assert code_of(m.open, strict, pkt) == "eesp-unknown-option"
    assert code_of(m.open, strict, good(options=unhex("0201ff") + b"\x03\x00", check=False)) == \
        "eesp-bad-crypt-offset-option"
    assert code_of(m.open, strict, good(options=[(3, b""), (2, unhex("0000"))], check=False)) == "eesp-unknown-option"
    # a registered private type is neither reported nor strict-dropped
    priv = kat_sa(mode="transport", strict=True, known_option_types={250})
    o = m.open(priv, m.seal(priv, L4, next_header=6, session_id=1, seq=1, options=[(250, b"p")]))
    assert o.unknown_options == [] and o.options[0] == (250, b"p")
    # without an SSKDF there is one Sub SA: a non-zero Session ID is out of range (D9)
    plain = m.SA(spi=5, keymat=bytes(20), mode="transport")
    assert code_of(m.open, plain, with_octet(m.seal(plain, L4, next_header=6, seq=1), 3, 1)) == \
        "eesp-sub-sa-out-of-range"
    assert code_of(m.seal, plain, L4, next_header=6, seq=1, session_id=1) == "eesp-sub-sa-out-of-range"
    # with an SSKDF and no announcement every Session ID is valid (D6)
    anyid = kat_sa(mode="transport")
    assert m.open(anyid, m.seal(anyid, L4, next_header=6, session_id=0xFFFF, seq=1)).session_id == 0xFFFF
    # the sequence-zero check runs before the ICV check
    assert code_of(m.open, SA_T, flip(good(seq=0), 8 * 40)) == "eesp-sequence-zero"


def test_not_allowed_crypt_offset_is_checked_after_earlier_drops():
    sender = kat_sa(max_crypt_offset=63)
    receiver = kat_sa(max_crypt_offset=None)
    pkt = m.seal(sender, INNER, next_header=4, session_id=1, seq=3, crypt_offset=2)
    # malformed offsets are immediate drops even when the option is not allowed
    assert code_of(m.open, receiver, with_octet(pkt, 10, pkt[10] ^ 0x04)) == "eesp-bad-payload-offset"
    # the seq-zero and replay pre-checks still run first; the window is never touched
    windows = {(SPI, 1): m.ReplayModel()}
    windows[(SPI, 1)].update(3)
    assert code_of(m.open, receiver, pkt, windows=windows) == "replay-duplicate"
    windows = {}
    with pytest.raises(m.EespModelError) as e:
        m.open(receiver, pkt, windows=windows)
    assert e.value.code == "eesp-crypt-offset-not-allowed" and e.value.icv_valid
    assert windows == {}


def test_post_decryption_checks():
    sa = SA_T
    pih = m.build_pih(6, 3)  # for L4 (13 octets) + 3 octets of padding
    # full format: 4 + Pad Length beyond the decrypted length
    bad = raw_packet(sa, 1, 1, 1, unhex("00000000"), m.build_pih(6, 14) + bytes(12))
    assert code_of(m.open, sa, bad) == "eesp-bad-pad-length"
    ok = raw_packet(sa, 1, 1, 1, unhex("00000000"), m.build_pih(6, 12) + bytes(12))
    assert m.open(sa, ok).payload == b""
    # D16 on receive: a Crypt Offset that reaches into the padding is malformed (after the ICV)
    leak = m.seal(sa, L4, next_header=6, session_id=1, seq=1, crypt_offset=5, check=False)
    assert code_of(m.seal, sa, L4, next_header=6, session_id=1, seq=1, crypt_offset=5) == \
        "eesp-crypt-offset-past-payload"
    assert code_of(m.open, sa, leak) == "eesp-crypt-offset-past-payload"
    assert m.open(sa, m.seal(sa, L4, next_header=6, session_id=1, seq=1, crypt_offset=4)).payload == L4
    # any order of options is accepted on receive (PadN before the Crypt Offset)
    opts = unhex("01020000") + m.crypt_offset_option(8, 1)
    pkt = raw_packet(sa, 1, 1, 1, opts, pih + L4 + bytes(3), clear_len=4)
    o = m.open(sa, pkt)
    assert (o.payload, o.crypt_offset) == (L4, (8, 1, 0))
    # R bits of the Crypt Offset option are ignored (they are authenticated like every header octet)
    pkt = raw_packet(sa, 1, 1, 1, m.crypt_offset_option(7, 1, r=0xF), pih + L4 + bytes(3), clear_len=4)
    assert m.open(sa, pkt).crypt_offset == (7, 1, 15)
    # dummy packet: NH 59 after a valid ICV
    assert code_of(m.open, sa, m.seal(sa, b"", next_header=59, session_id=1, seq=1)) == "eesp-dummy-packet"
    assert code_of(m.open, sa, flip(m.seal(sa, b"", next_header=59, session_id=1, seq=1), 200)) == \
        "authentication-failed"
    # PIH reserved bits, the 0x0 nibble included, are ignored (D5)
    o = m.open(sa, m.seal(sa, L4, next_header=6, session_id=1, seq=1, pih_reserved=0xFFFF))
    assert (o.payload, o.pih_reserved) == (L4, 0xFFFF)
    # any padding is accepted
    for pad in (0, 1, 255):
        o = m.open(sa, m.seal(sa, L4, next_header=6, session_id=1, seq=1, pad_len=pad))
        assert (o.payload, o.pad_len) == (L4, pad)


def test_optimized_format_receiver_rules():
    sa = kat_sa()  # tunnel: optimized
    def seal(payload, **kw):
        return m.seal(sa, payload, next_header=4, session_id=1, seq=1, **kw)
    # the version nibble gives Next Header
    v6 = struct.pack(">IHBB16s16s", 0x60000000, 3, 59, 1, bytes(16), bytes(16)) + b"abc"
    o = m.open(sa, seal(v6))
    assert (o.next_header, o.payload, o.pad_len) == (41, v6, 1)
    for nibble in (0, 5, 15):
        assert code_of(m.open, sa, seal(bytes([nibble << 4]) + INNER[1:])) == "eesp-bad-inner-packet"
    assert code_of(m.open, sa, seal(b"")) == "eesp-bad-inner-packet"
    assert code_of(m.open, sa, seal(b"\x45\x00", pad_len=0)) == "eesp-bad-inner-packet"  # no Total Length
    # Pad Length = decrypted length - inner length, 0..255
    assert code_of(m.open, sa, seal(INNER[:-4])) == "eesp-bad-pad-length"  # inner claims more than is there
    assert m.open(sa, seal(INNER + bytes(255 - 32 % 4), pad_len=0)).pad_len == 255
    assert code_of(m.open, sa, seal(INNER + bytes(256), pad_len=0)) == "eesp-bad-pad-length"
    assert m.open(sa, seal(INNER, pad_len=200)).pad_len == 200
    # no PIH: a dummy packet cannot be expressed; a short packet is still authenticated first
    assert code_of(m.open, sa, flip(seal(b"\x60"), 8 * 30)) == "authentication-failed"


# --------------------------------------------------------------------------------------------------------
# D1 AAD, suites, nonces
# --------------------------------------------------------------------------------------------------------


SUITE_GRID = [(e, b) for e in sorted(m.SUITES) for b in m.SUITES[e].key_bits]


def _key_sa(encr_id, bits, **kw):
    s = m.SUITES[encr_id]
    return m.SA(spi=0x42, encr_id=encr_id, key_bits=bits, keymat=bytes(range(bits // 8 + s.salt_len)), **kw)


@pytest.mark.parametrize("encr_id,bits,aad", [(e, b, a) for e, b in SUITE_GRID for a in ("draft", "linux-xfrm")
                                               if not (m.SUITES[e].kind == "gmac" and a == "linux-xfrm")])  # D12
def test_suite_aead_directly(encr_id, bits, aad):
    """ICV = the AEAD tag over (D1 AAD, ciphertext), nonce = salt || IV or salt || seq (IIV)."""
    s = m.SUITES[encr_id]
    sa = _key_sa(encr_id, bits, mode="transport", aad=aad)
    key, salt = sa.keymat[: -s.salt_len], sa.keymat[-s.salt_len :]
    pkt = m.seal(sa, L4, next_header=6, seq=9, iv=None if s.iiv else 0x0102030405060708)
    hdr_len = 8 + 8 + s.iv_len
    iv_field = pkt[16:hdr_len]
    nonce = salt + (struct.pack(">Q", 9) if s.iiv else iv_field)
    plain = m.build_pih(6, 3) + L4 + bytes(3)
    assert len(pkt) == hdr_len + len(plain) + s.icv_len
    if s.kind == "gmac":
        assert pkt[hdr_len:-16] == plain  # in clear
        want_icv = AESGCM(key).encrypt(nonce, b"", pkt[:-16])
        assert pkt[-16:] == want_icv
    else:
        a = pkt[:16] if aad == "linux-xfrm" else pkt[:hdr_len]
        if s.kind == "gcm":
            out = AESGCM(key).encrypt(nonce, plain, a)
            out = out[: len(plain)] + out[len(plain) : len(plain) + s.icv_len]
        elif s.kind == "ccm":
            assert len(nonce) == 11
            out = AESCCM(key, tag_length=s.icv_len).encrypt(nonce, plain, a)
        else:
            out = ChaCha20Poly1305(key).encrypt(nonce, plain, a)
        assert pkt[hdr_len:] == out
    assert m.open(sa, pkt).payload == L4


def test_linux_xfrm_aad_with_options_and_crypt_offset():
    sa = kat_sa(aad="linux-xfrm", max_crypt_offset=63)
    pkt = m.seal(sa, INNER, next_header=4, session_id=1, seq=3, crypt_offset=8, options=[(7, b"ab")])
    key, salt = sa.sub_sa_keymat(1)
    hdr_len = 8 + pkt[1] + 16
    aad = pkt[: hdr_len - 8] + pkt[hdr_len : hdr_len + 32]  # everything clear but the IV field
    out = AESGCM(key).encrypt(salt + pkt[hdr_len - 8 : hdr_len], INNER[28:], aad)
    assert pkt[hdr_len + 32 :] == out
    assert m.open(sa, pkt).payload == INNER


def test_gmac_with_crypt_offset_and_sub_sas():
    sa = kat_sa(encr_id=21, mode="transport", max_crypt_offset=63, key_bits=256)
    pkt = m.seal(sa, L4, next_header=6, session_id=2, seq=1, crypt_offset=1)
    assert L4 in pkt  # no confidentiality
    assert m.open(sa, pkt).payload == L4
    assert m.seal(sa, L4, next_header=6, session_id=3, seq=1, crypt_offset=1)[-16:] != pkt[-16:]


# --------------------------------------------------------------------------------------------------------
# §7 / D11 / D13 layout on send
# --------------------------------------------------------------------------------------------------------


@given(data=st.data())
def test_send_layout(data):
    cfg = data.draw(es.sa_configs(modes=("tunnel", "transport", "beet", "iptfs")))
    sa = m.SA(**cfg)
    payload = data.draw(st.binary(max_size=80))
    if sa.packet_format(False) == "optimized":
        payload = INNER
    p = data.draw(es.seal_params(cfg, len(payload)))
    seq = data.draw(st.integers(1, m.MAX_SEQ)) if sa.seq else None
    iv = None if sa.suite.iiv else data.draw(st.integers(0, m.MAX_SEQ))
    pkt = m.seal(sa, payload, next_header=6, seq=seq, iv=iv, **p)
    base = m.parse_base_header(pkt)
    assert (base.compat, base.version, base.reserved, base.spi, base.session_id) == (1, 0, 0, sa.spi, p["session_id"])
    opts = m.parse_options(pkt[8 : 8 + base.opt_len])
    user = m.parse_options(m.encode_options(p["options"]))
    fmt = sa.packet_format(p["crypt_offset"] is not None)
    pih = 4 if fmt == "full" else 0
    hdr_len = 8 + base.opt_len + sa.seq_len + sa.iv_len
    # D13: Crypt Offset first, then the caller's options, then only alignment padding
    if p["crypt_offset"] is not None:
        assert opts[0] == (2, m.crypt_offset_option(hdr_len // 4, p["crypt_offset"])[2:])
        opts = opts[1:]
    assert opts[: len(user)] == user
    tail = opts[len(user) :]
    if sa.align_options:
        align = 4 if p["outer_ip_version"] == 4 else 8
        assert (hdr_len + pih) % align == 0  # the next-layer header is aligned
        n = len(m.encode_options(tail))
        assert n < align and tail == m.alignment_padding(n)
    else:
        assert tail == []
    if sa.seq:
        assert pkt[8 + base.opt_len : 16 + base.opt_len] == struct.pack(">Q", seq)
    if iv is not None:
        assert pkt[hdr_len - 8 : hdr_len] == struct.pack(">Q", iv)
    # D11: PIH? + payload + padding is the smallest multiple of 4
    body_len = len(pkt) - hdr_len - sa.icv_len
    assert body_len == pih + len(payload) + (-(pih + len(payload)) % 4)
    o = m.open(sa, pkt) if not (sa.strict and any(t not in (0, 1, 2) and t not in sa.known_option_types
                                                  for t, _ in user)) else None
    if o is not None:
        assert (o.payload, o.format, o.seq, o.iv) == (payload, fmt, seq, iv)
        assert o.next_header == (6 if fmt == "full" else 4)


def test_send_refusals():
    sa = kat_sa(mode="transport", max_crypt_offset=63, align_options=False)
    # the header must be expressible as a PayloadOffset (multiple of 4, at most 252 octets)
    assert code_of(m.seal, sa, L4, next_header=6, session_id=1, seq=1, crypt_offset=1,
                   options=[(9, b"x")]) == "eesp-bad-payload-offset"
    assert code_of(m.seal, sa, L4, next_header=6, session_id=1, seq=1, crypt_offset=1,
                   options=[(9, bytes(226))]) == "eesp-bad-payload-offset"
    assert code_of(m.seal, sa, L4, next_header=6, session_id=1, seq=1, options=[(9, bytes(254))]) == \
        "eesp-options-too-long"
    assert code_of(m.seal, sa, L4, next_header=6, session_id=1, seq=1, crypt_offset=1,
                   options=[(2, b"\0\0")]) == "eesp-bad-crypt-offset-option"
    assert code_of(m.seal, sa, L4, next_header=6, session_id=1, seq=None) == "bad-argument"
    nosn = kat_sa(mode="transport", seq=False)
    assert code_of(m.seal, nosn, L4, next_header=6, session_id=1) == "bad-argument"  # needs an IV
    pkt = m.seal(nosn, L4, next_header=6, session_id=1, iv=77)
    assert len(pkt) == 8 + 8 + 4 + 16 + 16
    o = m.open(nosn, pkt, windows={})
    assert (o.seq, o.iv, o.payload) == (None, 77, L4)


# --------------------------------------------------------------------------------------------------------
# §11 anti-replay model and sender state
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size,seqs,want", [
    (64, [1, 2, 3, 2], ["ok", "ok", "ok", "replay-duplicate"]),
    (64, [5, 1, 5, 1, 4], ["ok", "ok", "replay-duplicate", "replay-duplicate", "ok"]),
    (64, [100, 36, 37, 37, 101, 37, 38], ["ok", "replay-too-old", "ok", "replay-duplicate", "ok",
                                          "replay-too-old", "ok"]),
    (4, [10, 6, 7, 9, 8, 7, 11, 7, 8, 12], ["ok", "replay-too-old", "ok", "ok", "ok", "replay-duplicate",
                                            "ok", "replay-too-old", "replay-duplicate", "ok"]),
    (1, [3, 3, 2, 4, 3], ["ok", "replay-duplicate", "replay-too-old", "ok", "replay-too-old"]),
    (64, [2**64 - 1, 2**64 - 64, 2**64 - 65, 2**64 - 1], ["ok", "ok", "replay-too-old", "replay-duplicate"]),
])
def test_replay_model_sequences(size, seqs, want):
    r = m.ReplayModel(size)
    assert [r.accept(s) for s in seqs] == want


def test_replay_through_open():
    sa, snd = SA_T, m.Sender(SA_T)
    pkts = [snd.seal(L4, next_header=6, session_id=1) for _ in range(70)]
    windows = {}
    assert m.open(sa, pkts[69], windows=windows).seq == 70
    assert code_of(m.open, sa, pkts[69], windows=windows) == "replay-duplicate"
    assert code_of(m.open, sa, pkts[5], windows=windows) == "replay-too-old"  # 6 <= 70 - 64
    assert m.open(sa, pkts[6], windows=windows).seq == 7
    # a forged packet does not move the window (update only after the ICV verifies)
    forged = flip(m.seal(sa, L4, next_header=6, session_id=1, seq=1000), 8 * 40)
    assert code_of(m.open, sa, forged, windows=windows) == "authentication-failed"
    assert windows[(SPI, 1)].top == 70
    # windows are per Sub SA and created lazily after a valid ICV
    other = m.Sender(SA_T).seal(L4, next_header=6, session_id=2)
    assert code_of(m.open, sa, flip(other, 8 * 40), windows=windows) == "authentication-failed"
    assert (SPI, 2) not in windows
    assert m.open(sa, other, windows=windows).seq == 1
    assert windows[(SPI, 2)].accepted == {1}


def test_sender_counters():
    snd = m.Sender(SA_T)
    assert [snd.next(1) for _ in range(3)] == [(1, 1), (2, 2), (3, 3)]
    assert snd.next(2) == (1, 1) and snd.next(0) == (1, 1)
    assert code_of(snd.seal, L4, next_header=6, session_id=4) == "eesp-sub-sa-out-of-range"
    assert 4 not in snd.last
    # refuse to wrap (D10): 2^64 - 1 is the last sequence number
    snd.last[1] = m.MAX_SEQ - 1
    pkt = snd.seal(L4, next_header=6, session_id=1)
    assert m.open(SA_T, pkt).seq == m.MAX_SEQ
    assert code_of(snd.seal, L4, next_header=6, session_id=1) == "sequence-overflow"
    # IIV: no IV; SN = None: IV from a per-Sub-SA counter
    assert m.Sender(kat_sa(encr_id=30)).next(1) == (1, None)
    nosn = m.Sender(kat_sa(seq=False))
    assert [nosn.next(1), nosn.next(1), nosn.next(2)] == [(None, 1), (None, 2), (None, 1)]
    nosn.last[1] = m.MAX_SEQ
    assert code_of(nosn.next, 1) == "sequence-overflow"


def test_sub_sas_use_different_keys():
    snd = m.Sender(SA_T)
    a, b = snd.seal(L4, next_header=6, session_id=1), snd.seal(L4, next_header=6, session_id=2)
    assert a[2:4] != b[2:4] and a[8:24] == b[8:24]  # same Seq and IV ...
    assert a[24:] != b[24:]  # ... different keys
    assert code_of(m.open, SA_T, a[:2] + b[2:4] + a[4:]) == "authentication-failed"


# --------------------------------------------------------------------------------------------------------
# whole packets: transport / tunnel / UDP encapsulation
# --------------------------------------------------------------------------------------------------------


def ipv4(proto: int, l4: bytes, options: bytes = b"", src=b"\x0a\0\0\x01", dst=b"\x0a\0\0\x02") -> bytes:
    ihl = 5 + len(options) // 4
    hdr = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(l4), 1, 0x4000, 64, proto, 0, src, dst) + options
    return hdr[:10] + struct.pack(">H", m.ipv4_checksum(hdr)) + hdr[12:] + l4


def ipv6(chain: list[int], final: int, l4: bytes) -> bytes:
    ext, nh = b"", final
    for t in reversed(chain):
        ext = (struct.pack(">BBHI", nh, 0, 0, 0x1234) if t == 44 else bytes([nh, 0]) + bytes(6)) + ext
        nh = t
    return struct.pack(">IHBB16s16s", 0x60000000, len(ext) + len(l4), nh, 64, bytes(15) + b"\1",
                       bytes(15) + b"\2") + ext + l4


def check_ipv4(pkt: bytes):
    ihl = (pkt[0] & 0xF) * 4
    assert struct.unpack(">H", pkt[2:4])[0] == len(pkt)
    assert m.ipv4_checksum(pkt[:ihl]) == struct.unpack(">H", pkt[10:12])[0]


def test_transport_ipv4_with_options():
    inner = ipv4(6, L4, options=bytes([1, 1, 1, 0]))
    sa = kat_sa(mode="transport")
    out = m.encap(sa, inner, session_id=1, seq=1)
    check_ipv4(out)
    assert out[9] == 49 and out[:2] == inner[:2] and out[4:9] == inner[4:9] and out[12:24] == inner[12:24]
    eesp = out[24:]
    assert eesp[:8].hex() == "8000000100001000"
    o, back = m.decap(sa, out)
    assert back == inner and o.next_header == 6
    # UDP encapsulation: port 4500, checksum 0, any source port
    su = kat_sa(mode="transport", udp_encap=True)
    out = m.encap(su, inner, session_id=1, seq=1, udp_sport=33333)
    check_ipv4(out)
    assert out[9] == 17
    assert struct.unpack(">HHHH", out[24:32]) == (33333, 4500, len(out) - 24, 0)
    assert out[32:] == eesp
    assert m.decap(su, out)[1] == inner


@pytest.mark.parametrize("chain,inside,nh", [
    ([], [], 6),
    ([0], [], 6),
    ([0, 43, 44], [], 6),
    ([0, 60, 43], [], 6),  # Destination Options before a Routing header stays outside
    ([60, 43, 44], [], 6),
    ([0, 43], [60], 60),  # a later Destination Options travels inside (PIH NH 60)
    ([0, 60, 43, 44], [60], 60),
    ([], [60], 60),
])
def test_transport_ipv6_placement_d14(chain, inside, nh):
    inner = ipv6(chain + inside, 6, L4)
    out_len = 40 + 8 * len(chain)
    assert m.ipv6_insertion_point(inner)[0] == out_len
    sa = kat_sa(mode="transport")
    out = m.encap(sa, inner, session_id=1, seq=1)
    assert out[:4] == inner[:4] and struct.unpack(">H", out[4:6])[0] == len(out) - 40
    nh_field = 6 if not chain else out_len - 8
    assert out[nh_field] == 49
    assert out[out_len] == 0x80 and out[out_len + 2 : out_len + 8].hex() == "000100001000"
    hdr_len = 8 + out[out_len + 1] + 16
    assert (hdr_len + 4) % 8 == 0  # IPv6 alignment
    o, back = m.decap(sa, out)
    assert (o.next_header, back) == (nh, inner)
    assert o.payload == inner[out_len:]


@pytest.mark.parametrize("inner_v,outer_v", [(4, 4), (4, 6), (6, 4), (6, 6)])
@pytest.mark.parametrize("udp", [False, True])
def test_tunnel_mixed_versions(inner_v, outer_v, udp):
    inner = ipv4(17, L4) if inner_v == 4 else ipv6([0], 17, L4)
    template = ipv4(0, b"")[:20] if outer_v == 4 else ipv6([60], 255, b"")[:48]
    sa = kat_sa(udp_encap=udp, ip_proto=253)
    out = m.encap(sa, inner, session_id=1, seq=1, outer=template)
    at = 20 if outer_v == 4 else 48
    if outer_v == 4:
        check_ipv4(out)
        assert out[9] == (17 if udp else 253)
    else:
        assert out[40] == (17 if udp else 253) and out[6] == 60
        assert struct.unpack(">H", out[4:6])[0] == len(out) - 40
    eesp = out[at + (8 if udp else 0) :]
    assert len(eesp) == 8 + 16 + len(inner) + (-len(inner) % 4) + 16  # optimized: no PIH, no options here
    o, back = m.decap(sa, out)
    assert back == inner and o.next_header == (4 if inner_v == 4 else 41) and o.format == "optimized"
    if not udp:
        assert code_of(m.decap, sa, out, ip_proto=49) == "not-eesp"


def test_tunnel_full_format_needs_an_ip_next_header():
    sa = kat_sa(format="full")
    eesp = m.seal(sa, INNER, next_header=6, session_id=1, seq=1)
    out = ipv4(49, eesp)
    assert m.open(sa, eesp).next_header == 6
    assert code_of(m.decap, sa, out) == "eesp-bad-inner-packet"
    assert m.decap(sa, ipv4(49, m.seal(sa, INNER, next_header=4, session_id=1, seq=1)))[1] == INNER


def test_udp_demux_and_fragments():
    assert m.classify_udp_payload(b"\xff") == "keepalive"
    assert m.classify_udp_payload(bytes(4) + b"ike") == "ike"
    assert m.classify_udp_payload(b"\x80abc") == "eesp"
    assert m.classify_udp_payload(b"\x7f\0\0\0") == "esp"
    assert m.classify_udp_payload(b"\x00\0\0") == "esp"
    sa = kat_sa(udp_encap=True)
    for payload, kind in [(b"\xff", "keepalive"), (bytes(8), "ike"), (b"\x01\x02\x03\x04abcd", "esp")]:
        pkt = ipv4(17, struct.pack(">HHHH", 4500, 4500, 8 + len(payload), 0) + payload)
        with pytest.raises(m.EespModelError) as e:
            m.decap(sa, pkt)
        assert (e.value.code, str(e.value)) == ("not-eesp", f"not-eesp: {kind}")
    out = m.encap(kat_sa(), INNER, session_id=1, seq=1, outer=ipv4(0, b""))
    frag = bytearray(out)
    frag[6] |= 0x20  # MF
    assert code_of(m.decap, kat_sa(), bytes(frag)) == "eesp-fragment"


@given(data=st.data())
def test_encap_decap_roundtrip(data):
    cfg, pkt, params = data.draw(es.sa_and_packet())
    sa = m.SA(**cfg)
    snd = m.Sender(sa)
    unknown = any(t not in (0, 1, 2) and t not in sa.known_option_types for t, _ in params["options"])
    windows = {}
    outs = [snd.encap(pkt, **params) for _ in range(2)]
    for i, out in enumerate(outs):
        if out[0] >> 4 == 4:
            check_ipv4(out)
        if sa.strict and unknown:
            assert code_of(m.decap, sa, out, windows=windows) == "eesp-unknown-option"
            continue
        o, back = m.decap(sa, out, windows=windows)
        assert back == pkt
        assert o.session_id == params["session_id"]
        assert o.seq == (i + 1 if sa.seq else None)
        assert [u for u in o.unknown_options] == [(t, bytes(d)) for t, d in params["options"]
                                                  if t not in (0, 1, 2) and t not in sa.known_option_types]
        if sa.seq:
            assert code_of(m.decap, sa, out, windows=windows) == "replay-duplicate"


SEAL_GRID = [
    dict(encr_id=e, key_bits=b, mode=mode, format=fmt, aad=aad, seq=seq)
    for e, b in SUITE_GRID
    for mode in ("tunnel", "transport")
    for fmt in (None, "full", "optimized")
    for aad in ("draft", "linux-xfrm")
    for seq in (True, False)
    if not (m.SUITES[e].kind == "gmac" and aad == "linux-xfrm")
    and not (m.SUITES[e].iiv and not seq)
    and not (mode == "transport" and fmt == "optimized")
]


@pytest.mark.parametrize("cfg", SEAL_GRID, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_roundtrip_grid(cfg):
    """Every suite x key size x mode x format x AAD variant x SN on/off x IIV, with and without Crypt Offset
    and Sub SAs, IPv4 and IPv6 (inner and outer), IP and UDP encapsulation."""
    s = m.SUITES[cfg["encr_id"]]
    km = bytes(range(cfg["key_bits"] // 8 + s.salt_len))
    for udp, ipv, co, sskdf in [(False, 4, None, False), (True, 6, 3, True), (True, 4, 0, False),
                                (False, 6, None, True)]:
        keys = dict(sskdf=2, root_key=bytes(range(48)), max_sub_sa_id=9) if sskdf else dict(keymat=km)
        sa = m.SA(spi=0x80000001, udp_encap=udp, max_crypt_offset=63, **keys, **cfg)
        inner = ipv4(17, L4) if ipv == 4 else ipv6([0, 60], 17, L4)
        kw = dict(session_id=9 if sskdf else 0, crypt_offset=co, options=[(5, b"opt")])
        if sa.mode == "tunnel":
            kw["outer"] = ipv4(0, b"")[:20] if ipv == 4 else ipv6([], 255, b"")[:40]
        out = m.Sender(sa).encap(inner, **kw)
        at = eesp_offset(out)
        assert out[at : at + 8] == m.build_base_header(out[at + 1], kw["session_id"], sa.spi)
        o, back = m.decap(sa, out)
        assert o.seq == (1 if sa.seq else None) and o.iv == (None if s.iiv else 1)
        assert back == inner and o.format == sa.packet_format(co is not None)
        assert o.unknown_options == [(5, b"opt")]


def eesp_offset(out: bytes) -> int:
    """Where the EESP packet starts in an outer IP packet (after any IPv6 extension headers and UDP)."""
    if out[0] >> 4 == 4:
        at, proto = (out[0] & 0xF) * 4, out[9]
    else:
        at, proto = 40, out[6]
        while proto in (0, 43, 44, 60):
            proto, at = out[at], at + (8 if proto == 44 else (out[at + 1] + 1) * 8)
    return at + (8 if proto == 17 else 0)


FLIP_GRID = [
    cfg
    for e, b in SUITE_GRID
    for mode, co in (("tunnel", None), ("tunnel", 1), ("transport", 1))
    for aad in ("draft", "linux-xfrm")
    for seq in (True, False)
    if not (m.SUITES[e].kind == "gmac" and aad == "linux-xfrm")
    and not (m.SUITES[e].iiv and not seq)
    and (b == 128 or m.SUITES[e].key_bits == (256,))
    for cfg in [dict(encr_id=e, key_bits=b, mode=mode, aad=aad, seq=seq, co=co)]
]


@pytest.mark.parametrize("cfg", FLIP_GRID, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_every_bit_flip_rejected(cfg):
    """Every single-bit flip of a sealed EESP packet (optimized, or full with a Crypt Offset; an unknown
    option; Sub SA 2) is rejected, by the ICV check or by an earlier malformed-packet check."""
    cfg = dict(cfg)
    co = cfg.pop("co")
    sa = m.SA(spi=0x80000001, sskdf=1, root_key=bytes(32), max_sub_sa_id=2, max_crypt_offset=63, **cfg)
    inner = ipv4(17, L4)
    payload = inner if sa.mode == "tunnel" else L4
    eesp = m.seal(sa, payload, next_header=4 if sa.mode == "tunnel" else 17, session_id=2,
                  seq=5 if sa.seq else None, iv=None if sa.suite.iiv else 6, crypt_offset=co, options=[(5, b"o")])
    assert m.open(sa, eesp).payload == payload
    for bit in range(len(eesp) * 8):
        with pytest.raises(m.EespModelError) as e:
            m.open(sa, flip(eesp, bit))
        assert e.value.code in MALFORMED_OR_AUTH
