"""The pyeesp API: suites and SA configuration, Sub SA key derivation and the
Header / Option codec.

Expected values come from the spec (docs/spec/eesp.md §3, §4, §7, §10, §12,
§19, D1-D16) or from an independent computation with the `cryptography`
package, never from the core (tests/eesp/eespapi.py builds the inputs).
"""
from __future__ import annotations

import struct

import pytest

import pyeesp
from pecore.errors import CoreError
from pyeesp import (
    SA,
    SUITES,
    ConfigurationError,
    EespError,
    Header,
    MalformedPacketError,
    NotEespError,
    Option,
    TruncatedPacketError,
    UnsupportedVersionError,
    derive_sub_sa_key,
    suite_id,
)

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test extra
    given = None

from eespapi import E1_WIRE, E_INNER, ROOT, SPI, SUITE_KEYS, SUITE_TABLE, eesp_part, keymat, keymat_len


# --------------------------------------------------------------------------- suites


def test_suite_table_matches_the_spec():
    assert SUITES == {name: row[0] for name, row in SUITE_TABLE.items()}
    for name, row in SUITE_TABLE.items():
        assert suite_id(name) == row[0]
        assert suite_id(row[1]) == row[0]
        assert suite_id(row[1].lower()) == row[0]
        assert suite_id(name.upper()) == row[0]
        assert suite_id(row[0]) == row[0]


@pytest.mark.parametrize("bad", ["aes-foo", "", "aes-gcm-16x", "ENCR_AES_CBC", 17, 0, 99, -1, True, None, 20.0])
def test_unknown_suite(bad):
    with pytest.raises(ConfigurationError) as ei:
        suite_id(bad)
    assert ei.value.code == "eesp-bad-suite" and str(ei.value)
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, bad, key=bytes(20))
    assert ei.value.code == "eesp-bad-suite"


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("suite,bits", SUITE_KEYS)
def test_key_length_of_every_suite(suite, bits):
    n = keymat_len(suite, bits)
    SA(SPI, suite, key=bytes(n), key_bits=bits)  # the right length works
    salt = SUITE_TABLE[suite][2]
    other_salt = n - salt + (3 if salt == 4 else 4)  # the salt length of the other AES family
    for wrong in sorted({n - 1, n + 1, bits // 8, 0, other_salt}):
        with pytest.raises(ConfigurationError) as ei:
            SA(SPI, suite, key=bytes(wrong), key_bits=bits)
        err = ei.value
        assert err.code == "bad-key-length", (wrong, err.code)
        assert isinstance(err, ValueError) and isinstance(err, EespError) and str(err)


@pytest.mark.parametrize("suite", ["aes-gcm-16", "aes-ccm-8", "chacha20-poly1305", "aes-gmac"])
def test_aes_key_size_and_key_must_agree(suite):
    # a 128-bit KEYMAT with key_bits=256 (and vice versa) is a length error
    if suite.startswith("chacha"):
        with pytest.raises(ConfigurationError) as ei:
            SA(SPI, suite, key=bytes(36), key_bits=192)
        assert ei.value.code == "eesp-bad-suite"  # ChaCha20-Poly1305 is 256-bit only
        return
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, suite, key=bytes(keymat_len(suite, 128)), key_bits=256)
    assert ei.value.code == "bad-key-length"
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, suite, key=bytes(keymat_len(suite, 256)), key_bits=128)
    assert ei.value.code == "bad-key-length"


@pytest.mark.parametrize(
    "sskdf,good",
    [("hkdf-sha256", 32), ("hkdf-sha384", 48), ("hkdf-sha512", 64)],
)
def test_root_key_length_per_sskdf(sskdf, good):
    SA(SPI, root_key=bytes(good), sskdf=sskdf)
    for wrong in (good - 1, good + 1, 16, 0):
        with pytest.raises(ConfigurationError) as ei:
            SA(SPI, root_key=bytes(wrong), sskdf=sskdf)
        assert ei.value.code == "bad-key-length"


def test_root_key_defaults_to_hkdf_sha256():
    a = SA(SPI, root_key=ROOT)
    b = SA(SPI, root_key=ROOT, sskdf="hkdf-sha256")
    assert a.encrypt(E_INNER, 1) == b.encrypt(E_INNER, 1)


@pytest.mark.parametrize(
    "kw,code",
    [
        (dict(), "invalid-argument"),  # neither key nor root_key
        (dict(key=bytes(20), root_key=ROOT), "invalid-argument"),  # both
        (dict(key=bytes(20), root_key=ROOT, sskdf="hkdf-sha256"), "invalid-argument"),
        (dict(key=bytes(20), replay_window=63), "invalid-argument"),
        (dict(key=bytes(20), replay_window=0), "invalid-argument"),
        (dict(key=bytes(20), replay_window=(1 << 20) + 1), "invalid-argument"),
        (dict(key=bytes(20), replay_window=True), "invalid-argument"),
        (dict(key=bytes(20), replay_window=1024.0), "invalid-argument"),
        (dict(key=bytes(20), crypt_offset=64), "invalid-argument"),
        (dict(key=bytes(20), crypt_offset=-1), "invalid-argument"),
        (dict(key=bytes(20), max_crypt_offset=256), "invalid-argument"),
        (dict(key=bytes(20), max_sub_sa_id=65536), "invalid-argument"),
        (dict(key=bytes(20), max_sub_sa_id=-2), "invalid-argument"),
        (dict(key=bytes(20), mode="beet"), "invalid-argument"),
        (dict(key=bytes(20), mode="TUNNEL"), "invalid-argument"),
        (dict(key=bytes(20), format="compact"), "invalid-argument"),
        (dict(key=bytes(20), aad="xfrm"), "invalid-argument"),
        (dict(key=bytes(20), key_bits=100), "eesp-bad-suite"),
        (dict(key=bytes(20), ip_protocol=256), "invalid-argument"),
        (dict(key=bytes(20), udp_sport=65536), "invalid-argument"),
        (dict(key=bytes(20), udp_dport=-1), "invalid-argument"),
        (dict(key=bytes(20), tunnel_header=bytes(20)), "invalid-argument"),
        (dict(key=bytes(20), options=bytes([2, 2, 0, 0])), "eesp-bad-config"),  # the SA places Crypt Offset itself
        (dict(key="zz" * 20), "invalid-argument"),
        (dict(key=1234), "invalid-argument"),
        (dict(root_key=ROOT, sskdf="md5"), "invalid-argument"),
        (dict(root_key=ROOT, sskdf="aes256-cmac"), "sskdf-undefined"),
        (dict(root_key=ROOT, sskdf="SSKDF_AES256_CMAC"), "sskdf-undefined"),
        (dict(suite="aes-gcm-16-iiv", key=bytes(20), seq=False), "eesp-iiv-needs-seq"),
        (dict(suite="aes-ccm-8-iiv", key=bytes(19), seq=False), "eesp-iiv-needs-seq"),
        (dict(suite="chacha20-poly1305-iiv", key=bytes(36), seq=False), "eesp-iiv-needs-seq"),
        (dict(suite="aes-gmac", key=bytes(20), aad="linux-xfrm"), "eesp-gmac-linux-xfrm"),
        (dict(suite="aes-gmac", key=bytes(36), key_bits=256, aad="linux-xfrm"), "eesp-gmac-linux-xfrm"),
    ],
)
def test_sa_configuration_errors(kw, code):
    kw = dict(kw)
    suite = kw.pop("suite", "aes-gcm-16")
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, suite, **kw)
    err = ei.value
    assert err.code == code, (kw, err.code, str(err))
    assert isinstance(err, ValueError) and isinstance(err, EespError) and isinstance(err, CoreError)
    assert str(err).strip()


@pytest.mark.parametrize("spi", [-1, 2**32, "1000", None])
def test_spi_must_be_32_bits(spi):
    with pytest.raises(ConfigurationError):
        SA(spi, key=bytes(20))


def test_sskdf_aes256_cmac_message_names_the_draft():
    # D8: refused with a clear error, never silently replaced
    for call in (
        lambda: SA(SPI, root_key=ROOT, sskdf="aes256-cmac"),
        lambda: SA(SPI, root_key=ROOT, sskdf="sskdf-aes256-cmac"),
        lambda: derive_sub_sa_key(ROOT, 1, 20, "aes256-cmac"),
    ):
        with pytest.raises(ConfigurationError) as ei:
            call()
        msg = str(ei.value)
        assert ei.value.code == "sskdf-undefined"
        assert "SSKDF_AES256_CMAC" in msg and "draft-ietf-ipsecme-eesp-ikev2-02" in msg


def test_refused_combinations_name_the_problem():
    # Each refused combination has its own code and a message that names it (D12, §10).
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, "aes-gcm-16-iiv", key=bytes(20), seq=False)
    assert any(w in str(ei.value).lower() for w in ("implicit", "iiv", "sequence")), str(ei.value)
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, "aes-gmac", key=bytes(20), aad="linux-xfrm")
    assert "gmac" in str(ei.value).lower() and "linux-xfrm" in str(ei.value).lower(), str(ei.value)


@pytest.mark.parametrize("kw", [dict(options=bytes([200, 5, 1])), dict(options=bytes(256)),
                                dict(options=bytes(252), crypt_offset=1, max_crypt_offset=1)])
def test_bad_extra_options_are_a_configuration_error(kw):
    # Caller options that are not whole TLVs or do not fit in Opt Len are a configuration error.
    with pytest.raises(EespError) as ei:
        SA(SPI, key=bytes(20), **kw)
    assert isinstance(ei.value, ConfigurationError) and isinstance(ei.value, ValueError), repr(ei.value)


def test_sender_crypt_offset_needs_the_peers_maximum():
    # §13 / §15 step 4: the option is sent only within the peer's EESP_MAX_CRYPT_OFFSET, so the
    # SA refuses crypt_offset without max_crypt_offset, or above it.
    # The refusal is a ConfigurationError (a setting), not a packet-drop class.
    SA(SPI, key=bytes(20), crypt_offset=8, max_crypt_offset=8)
    for kw in (dict(crypt_offset=8), dict(crypt_offset=8, max_crypt_offset=7), dict(crypt_offset=0)):
        with pytest.raises(EespError) as ei:
            SA(SPI, key=bytes(20), **kw)
        assert ei.value.code == "eesp-crypt-offset-not-allowed", kw
        assert isinstance(ei.value, ConfigurationError), repr(ei.value)


def test_sskdf_with_a_plain_key_is_refused():
    # sskdf= derives Sub SA keys from root_key=; with key= it is refused, as the key-file reader does.
    with pytest.raises(ConfigurationError):
        SA(SPI, key=bytes(20), sskdf="hkdf-sha384")


def test_replay_window_limits_are_inclusive():
    SA(SPI, key=bytes(20), replay_window=64)
    SA(SPI, key=bytes(20), replay_window=1 << 20)
    SA(SPI, key=bytes(20), crypt_offset=63, max_crypt_offset=63)  # the option's field is 6 bits
    SA(SPI, key=bytes(20), max_crypt_offset=255, max_sub_sa_id=65535)


@pytest.mark.parametrize("suite,bits", [("aes-gcm-16", 256), ("aes-gcm-8", 192), ("aes-ccm-12", 256),
                                        ("aes-gmac", 128), ("aes-gcm-16-iiv", 256)])
def test_key_size_from_the_keymat_length_as_pyesp(suite, bits):
    """Without key_bits the KEYMAT's length says the AES key size, as for pyesp.SA: the same packets as with
    key_bits given (the explicit path is the one the models check)."""
    import pyesp

    km = keymat(suite, bits, 5)
    inferred, given = SA(SPI, suite, key=km), SA(SPI, suite, key=km, key_bits=bits)
    assert inferred.encrypt(E_INNER) == given.encrypt(E_INNER)
    assert given.decrypt(inferred.encrypt(E_INNER)).packet == E_INNER
    for face in (pyeesp, pyesp):  # a length no key size fits: the message says which lengths the suite takes
        with pytest.raises(face.ConfigurationError) as ei:
            face.SA(SPI, suite, key=km + b"\0")
        salt = SUITE_TABLE[suite][2]
        want = f"{16 + salt}, {24 + salt} or {32 + salt} octets"
        assert ei.value.code == "bad-key-length" and want in str(ei.value) and str(len(km) + 1) in str(ei.value)
        with pytest.raises(face.ConfigurationError) as ei:
            face.SA(SPI, suite, key=km, key_bits=128 if bits != 128 else 256)
        assert ei.value.code == "bad-key-length" and "-bit keys: " in str(ei.value), str(ei.value)


def test_chacha_accepts_default_and_256_key_bits():
    a = SA(SPI, "chacha20-poly1305", key=keymat("chacha20-poly1305", 256))
    b = SA(SPI, "chacha20-poly1305", key=keymat("chacha20-poly1305", 256), key_bits=256)
    assert a.encrypt(E_INNER) == b.encrypt(E_INNER)


def test_keys_as_hex_strings():
    km = keymat("aes-gcm-16", 128, 3)
    forms = [km, km.hex(), "0x" + km.hex().upper(), " ".join(f"{b:02x}" for b in km),
             ":".join(f"{b:02x}" for b in km), bytearray(km), memoryview(km)]
    outs = {SA(SPI, key=k).encrypt(E_INNER) for k in forms}
    assert len(outs) == 1
    out = outs.pop()
    for k in forms:
        assert SA(SPI, key=k).decrypt(out).packet == E_INNER
    roots = [ROOT, ROOT.hex(), "0x" + ROOT.hex(), ":".join(f"{b:02x}" for b in ROOT)]
    outs = {SA(SPI, root_key=r).encrypt(E_INNER, 1) for r in roots}
    assert len(outs) == 1 and eesp_part(outs.pop()) == E1_WIRE
    assert derive_sub_sa_key(ROOT.hex(), 1, 20) == derive_sub_sa_key(ROOT, 1, 20)


# --------------------------------------------------------------------------- Sub SA keys (§12, §19)

SSKDF_TABLE = [
    ("hkdf-sha256", ROOT, 0, 20, "472a557f71f01e8d125da03ec21f6b77" "0f62b36f"),
    ("hkdf-sha256", ROOT, 1, 20, "bfb9feca177e0964367d975ca7e41bd6" "4f44224a"),
    ("hkdf-sha256", ROOT, 1, 36, "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd" "aeb0b4a1"),
    ("hkdf-sha384", bytes(range(48)), 1, 36,
     "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c4258d74111"),
    ("hkdf-sha512", bytes(range(64)), 1, 36,
     "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a9134f558"),
]


@pytest.mark.parametrize("sskdf,root,sid,length,want", SSKDF_TABLE)
def test_derive_sub_sa_key_spec_table(sskdf, root, sid, length, want):
    assert derive_sub_sa_key(root, sid, length, sskdf) == bytes.fromhex(want)
    assert derive_sub_sa_key(root.hex(), sub_sa_id=sid, length=length, sskdf=sskdf) == bytes.fromhex(want)
    # aliases of the SSKDF name
    alias = {"hkdf-sha256": "SSKDF_HKDF_SHA2_256", "hkdf-sha384": "sha384", "hkdf-sha512": "HKDF_SHA512"}[sskdf]
    assert derive_sub_sa_key(root, sid, length, alias) == bytes.fromhex(want)
    # a shorter output is a prefix (HKDF-Expand)
    assert derive_sub_sa_key(root, sid, 7, sskdf) == bytes.fromhex(want)[:7]


@pytest.mark.parametrize("sskdf,hash_name,nk", [("hkdf-sha256", "SHA256", 32), ("hkdf-sha384", "SHA384", 48),
                                                 ("hkdf-sha512", "SHA512", 64)])
@pytest.mark.parametrize("sid", [0, 1, 2, 255, 256, 0x1234, 0xFFFF])
def test_derive_sub_sa_key_matches_independent_hkdf(sskdf, hash_name, nk, sid):
    hashes = pytest.importorskip("cryptography.hazmat.primitives.hashes")
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    root = bytes((i * 13 + 5) & 0xFF for i in range(nk))
    for length in (19, 20, 27, 28, 35, 36, 100):
        want = HKDFExpand(getattr(hashes, hash_name)(), length, struct.pack("!H", sid)).derive(root)
        assert derive_sub_sa_key(root, sid, length, sskdf) == want


def test_sub_sa_keys_are_the_derived_ones():
    # Sub SA 1 of the spec's root key is key bfb9...d6 / salt 4f44224a: an SA given that KEYMAT
    # directly produces E1 on Sub SA 0, except for the Session ID in the (authenticated) header.
    direct = SA(SPI, key=derive_sub_sa_key(ROOT, 1, 20))
    sub = SA(SPI, root_key=ROOT)
    a, b = direct.encrypt(E_INNER), sub.encrypt(E_INNER, 1)
    assert eesp_part(b) == E1_WIRE
    assert eesp_part(a)[:24] == E1_WIRE[:2] + b"\0\0" + E1_WIRE[4:24]
    assert eesp_part(a)[24:56] == E1_WIRE[24:56]  # same key, nonce and plaintext: same ciphertext
    assert eesp_part(a)[56:] != E1_WIRE[56:]  # the AAD differs


@pytest.mark.parametrize(
    "args,code",
    [
        ((ROOT[:31], 1, 20), "bad-key-length"),
        ((ROOT + b"\0", 1, 20), "bad-key-length"),
        ((ROOT, 1, 20, "hkdf-sha384"), "bad-key-length"),
        ((ROOT, -1, 20), "invalid-argument"),
        ((ROOT, 65536, 20), "invalid-argument"),
        ((ROOT, 1, 0), "invalid-argument"),
        ((ROOT, 1, -5), "invalid-argument"),
        ((ROOT, 1, 20, "md5"), "invalid-argument"),
        ((ROOT, 1, 20, "none"), "invalid-argument"),
        ((ROOT, 1, 20, "aes256-cmac"), "sskdf-undefined"),
        (("zz" * 32, 1, 20), "invalid-argument"),
        ((12345, 1, 20), "invalid-argument"),
    ],
)
def test_derive_sub_sa_key_errors(args, code):
    with pytest.raises(ConfigurationError) as ei:
        derive_sub_sa_key(*args)
    assert ei.value.code == code and str(ei.value)


@pytest.mark.parametrize("sskdf,hash_len,nk", [("hkdf-sha256", 32, 32), ("hkdf-sha384", 48, 48)])
def test_derive_sub_sa_key_length_limit(sskdf, hash_len, nk):
    # RFC 5869: L <= 255 * HashLen.
    # HKDF-Expand yields at most 255 hash lengths: longer requests are a ConfigurationError naming the limit.
    root = bytes(nk)
    assert len(derive_sub_sa_key(root, 1, 255 * hash_len, sskdf)) == 255 * hash_len
    with pytest.raises(ConfigurationError):
        derive_sub_sa_key(root, 1, 255 * hash_len + 1, sskdf)


# --------------------------------------------------------------------------- Header / Option


def test_header_wire_examples_from_the_spec():
    # §3: v0 octet 0 is 0x80; §19 E1 / E3 / E5 Base Headers and options
    assert Header(SPI, 1).build() == bytes.fromhex("8000000100001000")
    e3 = Header(SPI, 1, (Option.crypt_offset(7, 8),))
    assert e3.build() == bytes.fromhex("8004000100001000" "02021c80")
    e5 = Header(SPI, 1, (Option.padn(4),))
    assert e5.build() == bytes.fromhex("8004000100001000" "01020000")
    # the draft's Fig. 19 example: PayloadOffset 7, CryptOffset 8 -> 02 02 1C 80
    o = Option.crypt_offset(7, 8)
    assert o.data == bytes.fromhex("1c80") and o.payload_offset == 7 and o.crypt_offset_value == 8
    assert Option.crypt_offset(63, 63, 15).data == b"\xff\xff"
    assert Option.crypt_offset(1, 2, 3).data == struct.pack("!H", 1 << 10 | 2 << 4 | 3)
    h = Header.parse(bytes.fromhex("8004000100001000" "02021c80") + b"rest of the packet")
    assert h == e3 and h.crypt_offset_option == Option(2, b"\x1c\x80")


def test_option_wire_forms():
    assert Option.pad1().wire_len == 1 and Option.pad1().name == "Pad1"
    assert Option.padn(2) == Option(1, b"") and Option.padn(2).wire_len == 2
    assert Option.padn(255).wire_len == 255 and Option.padn(255).data == bytes(253)
    assert Option.padn(7).name == "PadN"
    assert Option.crypt_offset(1, 1).name == "CryptOffset" and Option.crypt_offset(1, 1).wire_len == 4
    assert Option(200, b"abc").name == "Unknown(200)" and Option(3).name == "Unknown(3)"
    assert Option(200, b"abc").payload_offset is None and Option(2, b"abc").crypt_offset_value is None
    for opts, wire in [
        ([Option.pad1()], "00"),
        ([Option.padn(3)], "010100"),
        ([Option(224, b"\x01\x02")], "e0020102"),
        ([Option(3)], "0300"),
        ([Option.pad1(), Option.pad1(), Option.padn(2)], "00000100"),
    ]:
        h = Header(0xDEADBEEF, 0xABCD, opts)
        raw = h.build()
        assert raw == bytes([0x80, len(bytes.fromhex(wire)), 0xAB, 0xCD]) + bytes.fromhex("deadbeef" + wire)
        assert Header.parse(raw) == h


@pytest.mark.parametrize(
    "options",
    [
        (),
        (Option.pad1(),),
        (Option.padn(6),),
        (Option.crypt_offset(7, 8), Option.padn(4)),
        (Option.crypt_offset(63, 0), Option(200, b"private"), Option.pad1(), Option.pad1(), Option.pad1()),
        (Option(3, b""), Option(224, bytes(range(20))), Option(255, b"x")),
        (Option(9, bytes(253)),),
        tuple(Option.pad1() for _ in range(255)),
    ],
)
def test_header_round_trip_and_properties(options):
    h = Header(0x80000001, 0xFFFF, options)
    raw = h.build()
    assert len(raw) == h.header_len == 8 + h.opt_len == 8 + sum(o.wire_len for o in options)
    assert raw[0] == 0x80 and raw[1] == h.opt_len and raw[2:4] == b"\xff\xff" and raw[4:8] == b"\x80\x00\x00\x01"
    p = Header.parse(raw + b"payload")
    assert p == h and p.build() == raw
    assert p.options == tuple(options)
    assert p.unknown_options == tuple(o for o in options if o.type > 2)
    co = [o for o in options if o.type == 2]
    assert p.crypt_offset_option == (co[0] if co else None)
    assert (p.version, p.reserved, p.esp_compat) == (0, 0, True)


if given is not None:

    _options = st.one_of(
        st.just(Option.pad1()),
        st.integers(2, 20).map(Option.padn),
        st.builds(Option, st.integers(3, 255), st.binary(max_size=12)),
    )

    @given(spi=st.integers(0, 2**32 - 1), sid=st.integers(0, 0xFFFF), opts=st.lists(_options, max_size=12),
           co=st.none() | st.tuples(st.integers(0, 63), st.integers(0, 63), st.integers(0, 15)),
           co_at=st.integers(0, 12))
    def test_header_round_trip_property(spi, sid, opts, co, co_at):
        if co is not None:
            opts.insert(min(co_at, len(opts)), Option.crypt_offset(*co))
        h = Header(spi, sid, opts)
        raw = h.build()
        p = Header.parse(raw)
        assert p == h and p.build() == raw
        assert struct.unpack("!BBHI", raw[:8]) == (0x80, h.opt_len, sid, spi)
        if co is not None:
            o = p.crypt_offset_option
            assert (o.payload_offset, o.crypt_offset_value, int.from_bytes(o.data, "big") & 15) == co


@pytest.mark.parametrize(
    "make",
    [
        lambda: Header(-1), lambda: Header(2**32), lambda: Header(1, session_id=65536), lambda: Header(1, -1),
        lambda: Header(1, version=16), lambda: Header(1, reserved=8), lambda: Header("1"),
        lambda: Header(1, options=[Option(5, bytes(253)), Option.pad1()]),  # 256 octets of options
        lambda: Option(256), lambda: Option(-1), lambda: Option(0, b"x"), lambda: Option(3, bytes(254)),
        lambda: Option.padn(1), lambda: Option.padn(256), lambda: Option.crypt_offset(64, 0),
        lambda: Option.crypt_offset(0, 64), lambda: Option.crypt_offset(0, 0, 16), lambda: Option.crypt_offset(-1, 0),
    ],
)
def test_header_and_option_validation(make):
    with pytest.raises(ConfigurationError) as ei:
        make()
    assert isinstance(ei.value, ValueError) and ei.value.code and str(ei.value)


def test_header_build_can_make_malformed_headers_for_tests():
    # version, R bits, a clear compat bit, a bad Crypt Offset length and two Crypt Offsets can be
    # built (test encoders need them); parse refuses each with its own code.
    cases = [
        (Header(1, version=1), UnsupportedVersionError, "eesp-unsupported-version"),
        (Header(1, version=15), UnsupportedVersionError, "eesp-unsupported-version"),
        (Header(1, reserved=1), MalformedPacketError, "eesp-reserved-bits-set"),
        (Header(1, reserved=4), MalformedPacketError, "eesp-reserved-bits-set"),
        (Header(1, esp_compat=False), NotEespError, "eesp-compat-bit-clear"),
        (Header(1, options=[Option(2, b"\x1c")]), MalformedPacketError, "eesp-bad-crypt-offset-option"),
        (Header(1, options=[Option(2, b"")]), MalformedPacketError, "eesp-bad-crypt-offset-option"),
        (Header(1, options=[Option(2, b"\x1c\x80\x00")]), MalformedPacketError, "eesp-bad-crypt-offset-option"),
        (Header(1, options=[Option.crypt_offset(1, 2), Option.pad1(), Option.crypt_offset(1, 2)]),
         MalformedPacketError, "eesp-bad-crypt-offset-option"),
    ]
    for h, cls, code in cases:
        raw = h.build()
        with pytest.raises(EespError) as ei:
            Header.parse(raw)
        assert type(ei.value) is cls and ei.value.code == code, (h, ei.value.code)
    assert Header(1, version=3, reserved=5, esp_compat=False).build()[0] == 0x1D


def test_header_parse_errors():
    good = Header(SPI, 3, (Option.padn(3), Option(200, b"ab"))).build()
    for n in range(len(good)):
        with pytest.raises(TruncatedPacketError) as ei:
            Header.parse(good[:n])
        assert ei.value.code == "eesp-truncated", n
    # a TLV running past Opt Len: overrun (also a type octet with no room for its length)
    for opts in ("0105", "01", "000001", "c803ab", "00010300"):
        raw = bytes([0x80, len(bytes.fromhex(opts))]) + bytes(6) + bytes.fromhex(opts)
        with pytest.raises(MalformedPacketError) as ei:
            Header.parse(raw + bytes(40))
        assert ei.value.code == "eesp-options-overrun", opts
    # octet 0: compat bit, every version, every R value
    for v in range(1, 16):
        with pytest.raises(UnsupportedVersionError) as ei:
            Header.parse(bytes([0x80 | v << 3]) + good[1:])
        assert ei.value.code == "eesp-unsupported-version"
    for r in range(1, 8):
        with pytest.raises(MalformedPacketError) as ei:
            Header.parse(bytes([0x80 | r]) + good[1:])
        assert ei.value.code == "eesp-reserved-bits-set"
    for o0 in (0x00, 0x7F, 0x08, 0x01):
        with pytest.raises(NotEespError) as ei:
            Header.parse(bytes([o0]) + good[1:])
        assert ei.value.code == "eesp-compat-bit-clear"
    # order: compat bit, then version, then R
    with pytest.raises(NotEespError):
        Header.parse(bytes([0x7F]) + good[1:])
    with pytest.raises(UnsupportedVersionError):
        Header.parse(bytes([0xFF]) + good[1:])


