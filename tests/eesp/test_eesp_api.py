"""The pyeesp API: suites and SA configuration, Sub SA key derivation, the
Header / Option codec, round trips of every suite, Decrypted fields, Sub SAs,
batches, threads, Receiver and the exception hierarchy.

Packets are built here with struct.  Expected values come from the spec
(docs/spec/eesp.md §3, §4, §7, §10, §12, §19, D1-D16) or from an
independent computation with the `cryptography` package, never from the core.
"""
from __future__ import annotations

import struct
import threading

import psp_model
import pytest

import pyeesp
from pecore.errors import CoreError
from pyeesp import (
    SA,
    SUITES,
    AuthenticationError,
    CaptureError,
    ConfigurationError,
    Decrypted,
    DummyPacketError,
    EespError,
    Header,
    KeyFileError,
    MalformedPacketError,
    NoSaError,
    NotEespError,
    Option,
    PacketTooLargeError,
    PolicyError,
    Receiver,
    ReplayError,
    SequenceExhaustedError,
    SubSaError,
    TruncatedPacketError,
    UnsupportedVersionError,
    derive_sub_sa_key,
    suite_id,
)
from pyeesp.errors import error_class
from pecore.protocol import checksum

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test extra
    given = None

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


# --------------------------------------------------------------------------- round trips


def expected_format(mode: str, fmt: str, crypt_offset=None) -> bool:
    """D2: True for the full format."""
    if fmt != "auto":
        return fmt == "full"
    return crypt_offset is not None or mode == "transport"


def expected_eesp_len(suite: str, payload_len: int, full: bool, carrier_v6: bool, seq: bool = True,
                      align: bool = True) -> tuple:
    """(EESP length, Opt Len, Pad Length) per §7 and D11."""
    pih = 4 if full else 0
    before = 8 + (8 if seq else 0) + iv_len(suite) + pih
    opt_len = -before % (8 if carrier_v6 else 4) if align else 0
    pad = -(pih + payload_len) % 4
    return before + opt_len + payload_len + pad + icv_len(suite), opt_len, pad


ROUND_TRIP_PACKETS = [udp4(41, seed=1), tcp6(77, seed=2), udp6(0, seed=3), tcp4(1, seed=4)]


@pytest.mark.parametrize("suite,bits", SUITE_KEYS)
@pytest.mark.parametrize("mode,fmt", [("tunnel", "auto"), ("tunnel", "full"), ("tunnel", "optimized"),
                                      ("transport", "auto"), ("transport", "full")])
def test_round_trip_every_suite(suite, bits, mode, fmt):
    sa = SA(0xA0B0C0D0, suite, key=keymat(suite, bits, bits), key_bits=bits, mode=mode, format=fmt)
    full = expected_format(mode, fmt)
    for i, pkt in enumerate(ROUND_TRIP_PACKETS, start=1):
        assert sa.next_seq() == i
        out = sa.encrypt(pkt)
        v6 = pkt[0] >> 4 == 6
        ih = ip_header_len(pkt)
        payload_len = len(pkt) if mode == "tunnel" else len(pkt) - ih
        elen, opt_len, pad = expected_eesp_len(suite, payload_len, full, v6)
        assert len(out) == ih + elen
        assert (out[6] if v6 else out[9]) == 49
        e = eesp_part(out)
        assert e[:8] == bytes([0x80, opt_len, 0, 0]) + b"\xa0\xb0\xc0\xd0"
        assert struct.unpack("!Q", e[8 + opt_len : 16 + opt_len])[0] == i
        if iv_len(suite):
            assert struct.unpack("!Q", e[16 + opt_len : 24 + opt_len])[0] == i  # IV = sequence number
        r = sa.decrypt(out)
        assert isinstance(r, Decrypted) and r.packet == pkt
        assert r.seq == i and r.sub_sa_id == 0 and not r.udp_encap
        assert r.iv == (struct.pack("!Q", i) if iv_len(suite) else None)
        assert r.full_format == full and r.pad_len == pad
        if mode == "tunnel":
            assert r.next_header == (41 if v6 else 4)
        else:
            assert r.next_header == pkt[6 if v6 else 9]
        assert r.header == Header.parse(e)
        assert r.header.opt_len == opt_len and all(o.type in (0, 1) for o in r.header.options)
        if suite == "aes-gmac":  # integrity only: the payload travels in clear
            assert (pkt if mode == "tunnel" else pkt[ih:]) in out
        else:
            assert pkt[ih:][-16:] not in out or len(pkt) - ih < 16


def test_transport_mode_optimized_format_needs_an_ip_payload():
    # §8: without a PIH the receiver learns Next Header from an IP version nibble, so a transport SA
    # forced to the optimized format can only carry IP-in-IP payloads
    sa = SA(SPI, key=bytes(20), mode="transport", format="optimized")
    with pytest.raises(ConfigurationError) as ei:
        sa.encrypt(udp4())
    assert ei.value.code == "eesp-optimized-needs-ip"
    assert sa.next_seq() == 1
    for pkt in (ipv4(4, udp4(10)), ipv4(41, udp6(11))):
        out = sa.encrypt(pkt)
        r = sa.decrypt(out)
        assert r.packet == pkt and not r.full_format and r.next_header == pkt[9]
        assert r.pad_len == -(len(pkt) - 20) % 4


@pytest.mark.parametrize("suite", ["aes-gcm-16", "aes-ccm-8", "chacha20-poly1305", "aes-gmac", "aes-gcm-8"])
@pytest.mark.parametrize("mode", ["tunnel", "transport"])
def test_round_trip_without_sequence_numbers(suite, mode):
    bits = 256 if suite.startswith("chacha") else 192
    sa = SA(7, suite, key=keymat(suite, bits), key_bits=bits, mode=mode, seq=False)
    for i, pkt in enumerate(ROUND_TRIP_PACKETS, start=1):
        assert sa.next_seq() == i  # the IV counter
        out = sa.encrypt(pkt)
        v6 = pkt[0] >> 4 == 6
        full = mode == "transport"
        payload_len = len(pkt) if mode == "tunnel" else len(pkt) - ip_header_len(pkt)
        elen, opt_len, pad = expected_eesp_len(suite, payload_len, full, v6, seq=False)
        assert len(eesp_part(out)) == elen
        e = eesp_part(out)
        assert struct.unpack("!Q", e[8 + opt_len : 16 + opt_len])[0] == i  # the IV follows the options
        r = sa.decrypt(out)
        assert r.packet == pkt and r.seq is None and r.iv == struct.pack("!Q", i) and r.pad_len == pad
        # no anti-replay without a Sequence Number: a duplicate decrypts again
        assert sa.decrypt(out).packet == pkt


@pytest.mark.parametrize("suite", ["aes-gcm-16", "aes-gcm-8", "aes-ccm-16", "chacha20-poly1305", "aes-gcm-16-iiv"])
def test_linux_xfrm_aad(suite):
    km = keymat(suite, 256 if "chacha" in suite else 128)
    kb = 256 if "chacha" in suite else 128
    draft = SA(SPI, suite, key=km, key_bits=kb)
    xfrm = SA(SPI, suite, key=km, key_bits=kb, aad="linux-xfrm")
    a, b = draft.encrypt(E_INNER), xfrm.encrypt(E_INNER)
    n = icv_len(suite)
    assert a[:-n] == b[:-n]  # same ciphertext (D1, §19 E1)
    if iv_len(suite):
        assert a[-n:] != b[-n:]  # the explicit IV is in one AAD only
        with pytest.raises(AuthenticationError):
            draft.decrypt(b)
        with pytest.raises(AuthenticationError):
            xfrm.decrypt(a)
    else:
        assert a == b  # no explicit IV: the AADs agree
    assert xfrm.decrypt(b).packet == E_INNER


def test_udp_encapsulation():
    for mode in ("tunnel", "transport"):
        for pkt in (udp4(30), tcp6(50)):
            sa = SA(0x2000, key=keymat("aes-gcm-16", 128), mode=mode, udp_encap=True)
            out = sa.encrypt(pkt)
            ih = ip_header_len(pkt)
            assert (out[6] if pkt[0] >> 4 == 6 else out[9]) == 17
            sport, dport, ulen, csum = struct.unpack("!HHHH", out[ih : ih + 8])
            # RFC 3948 §2.1's 0 over IPv4; over IPv6 computed (RFC 8200 §8.1, D17), here by the PSP model
            v6 = pkt[0] >> 4 == 6
            want = psp_model.udp_checksum(out[8:24], out[24:40], out[ih:]) if v6 else 0
            assert (sport, dport, ulen, csum) == (4500, 4500, len(out) - ih, want) and (csum != 0) == v6
            assert out[ih + 8] == 0x80  # MSB set: EESP, not ESP (§14)
            r = sa.decrypt(out)
            assert r.packet == pkt and r.udp_encap and r.header.spi == 0x2000
    sa = SA(0x2000, key=bytes(20), udp_encap=True, udp_sport=12345, udp_dport=4500)
    out = sa.encrypt(udp4())
    assert struct.unpack("!HH", out[20:24]) == (12345, 4500)
    assert sa.decrypt(out).packet == udp4()
    # a receiver on another port does not see EESP there; the SA's own receiver listens on its udp_dport
    other = SA(0x2000, key=bytes(20), udp_encap=True, udp_dport=4501)
    with pytest.raises(NotEespError) as ei:
        Receiver([other], udp_port=4500).decrypt(other.encrypt(udp4()))
    assert ei.value.code == "not-eesp"
    assert Receiver([other], udp_port=4501).decrypt(other.encrypt(udp4())).packet == udp4()
    assert other.decrypt(other.encrypt(udp4())).packet == udp4()


def test_ip_protocol_is_a_setting():
    sa = SA(3, key=bytes(20), ip_protocol=253)
    out = sa.encrypt(udp4())
    assert out[9] == 253
    assert sa.decrypt(out).packet == udp4()
    with pytest.raises(NotEespError) as ei:
        Receiver([SA(3, key=bytes(20))]).decrypt(out)  # the default 49
    assert ei.value.code == "not-eesp"
    assert Receiver([SA(3, key=bytes(20))], ip_protocol=253).decrypt(out).packet == udp4()


def test_tunnel_header_templates_mix_versions():
    tmpl6 = ipv6(0, b"", src=bytes.fromhex("20010db8" + "00" * 11 + "aa"), dst=bytes.fromhex("20010db8" + "00" * 11 + "bb"))
    tmpl4 = ipv4(0, b"", src=bytes([192, 0, 2, 1]), dst=bytes([198, 51, 100, 7]))
    for tmpl, inner in [(tmpl6, udp4(33)), (tmpl4, tcp6(20)), (tmpl6, udp6(9)), (tmpl4, udp4(5))]:
        sa = SA(9, key=bytes(20), tunnel_header=tmpl, format="full")
        out = sa.encrypt(inner)
        v6 = tmpl[0] >> 4 == 6
        assert out[0] >> 4 == tmpl[0] >> 4
        assert (out[8:40] == tmpl[8:40]) if v6 else (out[12:20] == tmpl[12:20])
        # alignment follows the carrying IP version (§7): full + seq + IV = 28, +4 over IPv6
        assert eesp_part(out)[1] == (4 if v6 else 0)
        r = sa.decrypt(out)
        assert r.packet == inner and r.next_header == (4 if inner[0] >> 4 == 4 else 41)


def test_ipv6_transport_extension_header_placement():
    # D14: EESP goes after Hop-by-Hop; a Destination Options header after it travels inside (NH 60)
    hbh = bytes([60, 0, 1, 4, 0, 0, 0, 0])
    dst = bytes([17, 0, 1, 4, 0, 0, 0, 0])
    seg = udp_segment(1, 2, b"data" * 5)
    pkt = ipv6(0, hbh + dst + seg)
    sa = SA(5, key=bytes(20), mode="transport")
    out = sa.encrypt(pkt)
    assert out[6] == 0 and out[40:48] == bytes([49]) + hbh[1:]  # HBH kept, now naming EESP
    assert out[48] == 0x80
    r = sa.decrypt(out)
    assert r.packet == pkt and r.next_header == 60 and r.full_format


def test_options_alignment_and_extra_options():
    # caller TLVs go after the Crypt Offset option and before the alignment padding (D13)
    sa = SA(6, key=bytes(20), options=bytes([200, 1, 0xAA]), crypt_offset=0, max_crypt_offset=0)
    out = sa.encrypt(udp4(20))
    h = Header.parse(eesp_part(out))
    assert [o.type for o in h.options[:2]] == [2, 200] and h.options[1].data == b"\xaa"
    assert (8 + h.opt_len + 16 + 4) % 4 == 0
    assert h.crypt_offset_option.payload_offset * 4 == 8 + h.opt_len + 16
    assert sa.decrypt(out).header == h
    # align_options off: no padding options at all (towards the Linux prototype)
    sa = SA(6, key=bytes(20), mode="transport", align_options=False)
    out = sa.encrypt(udp6(20))
    assert eesp_part(out)[1] == 0 and sa.decrypt(out).packet == udp6(20)
    sa = SA(6, key=bytes(20), mode="transport")
    assert eesp_part(sa.encrypt(udp6(20)))[1] == 4


def test_crypt_offset_exposes_the_inner_headers():
    # §19 E3 shape: tunnel, Crypt Offset 8 -> PIH + 28 octets of IPv4/UDP header in clear
    sa = SA(SPI, root_key=ROOT, crypt_offset=8, max_crypt_offset=8)
    for _ in range(2):
        sa.encrypt(E_INNER, 1)
    out = sa.encrypt(E_INNER, 1)
    e = eesp_part(out)
    assert e.hex() == (
        "800400010000100002021c80" "0000000000000003" "0000000000000003" "00000400" + E_INNER[:28].hex()
        + "f43e4fc1" "c67a98e845f48deb0bc0a09d66923369"
    )
    r = sa.decrypt(out)
    assert r.full_format and r.next_header == 4 and r.header.crypt_offset_option.crypt_offset_value == 8
    assert r.packet == E_INNER


# --------------------------------------------------------------------------- §19 vectors through the API


def test_e1_tunnel_optimized():
    sa = SA(SPI, "aes-gcm-16", root_key=ROOT, sskdf="hkdf-sha256")
    out = sa.encrypt(E_INNER, sub_sa_id=1)
    assert eesp_part(out) == E1_WIRE
    # the outer header is a copy of the inner one, with protocol 49 and new length and checksum
    outer = bytearray(E_INNER[:20])
    outer[2:4], outer[9], outer[10:12] = struct.pack("!H", 20 + len(E1_WIRE)), 49, b"\0\0"
    outer[10:12] = struct.pack("!H", 0xFFFF ^ _csum(bytes(outer)))
    assert out[:20] == bytes(outer)
    r = sa.decrypt(out)
    assert r.packet == E_INNER and r.seq == 1 and r.iv == struct.pack("!Q", 1) and not r.full_format
    xfrm = SA(SPI, root_key=ROOT, aad="linux-xfrm")
    assert eesp_part(xfrm.encrypt(E_INNER, 1)) == E1_WIRE[:-16] + bytes.fromhex("cbf66674abde8ee5187a9d85db5e1188")


def test_e2_and_e5_transport_full():
    l4 = bytes.fromhex("04d2162e000d0000") + b"hello"
    sa = SA(SPI, root_key=ROOT, mode="transport")
    sa.encrypt(ipv4(17, l4), 1)  # Seq 1
    out = sa.encrypt(ipv4(17, l4), 1)  # Seq = IV = 2
    e = eesp_part(out)
    assert len(e) == 60
    assert e.hex() == ("8000000100001000" "0000000000000002" "0000000000000002"
                       "8a7ae66f9248c93661f35ef5eeb3aa4328a82a33" "63fe796eeb8c57ff267c47f3d4346538")
    r = sa.decrypt(out)
    assert r.packet == ipv4(17, l4) and (r.next_header, r.pad_len, r.full_format) == (17, 3, True)
    # E5: over IPv6 the next-layer header must be 8-aligned: PadN(4), Seq = IV = 4
    sa6 = SA(SPI, root_key=ROOT, mode="transport")
    for _ in range(3):
        sa6.encrypt(ipv6(17, l4), 1)
    out = sa6.encrypt(ipv6(17, l4), 1)
    e = eesp_part(out)
    assert len(e) == 64
    assert e.hex() == ("8004000100001000" "01020000" "0000000000000004" "0000000000000004"
                       "478a66581e28bb33e9e0a0b149667df2c4fb3796" "1c95b617e3f47088a4b02ca67102b19f")
    assert sa6.decrypt(out).packet == ipv6(17, l4)


def test_e4_implicit_iv():
    sa = SA(SPI, "aes-gcm-16-iiv", root_key=ROOT)
    for _ in range(4):
        sa.encrypt(E_INNER, 1)
    out = sa.encrypt(E_INNER, 1)
    assert eesp_part(out).hex() == (
        "8000000100001000" "0000000000000005"
        "8f85e175cf4a0a6dfe28f60cda19923eb430761d3c6f299434815143ce7a019a" "00c492995139addba133e5804f7ee901"
    )
    r = sa.decrypt(out)
    assert r.seq == 5 and r.iv is None and r.packet == E_INNER


# --------------------------------------------------------------------------- Sub SAs


def test_sub_sas_have_their_own_keys_and_counters():
    sa = SA(SPI, root_key=ROOT)
    outs = {sid: sa.encrypt(E_INNER, sid) for sid in (0, 1, 2, 65535)}
    # Seq 1 on each: only the keys differ, so the ciphertexts differ
    cts = {eesp_part(o)[24:56] for o in outs.values()}
    assert len(cts) == 4
    for sid, o in outs.items():
        assert seq_of(o) == 1
        r = sa.decrypt(o)
        assert r.sub_sa_id == sid and r.header.session_id == sid and r.seq == 1 and r.packet == E_INNER
    # counters per Sub SA, from 1
    assert [sa.next_seq(s) for s in (0, 1, 2, 3, 65535)] == [2, 2, 2, 1, 2]
    for k in range(5):
        assert seq_of(sa.encrypt(E_INNER, 3)) == k + 1
    assert sa.next_seq(3) == 6 and sa.next_seq(0) == 2
    # the same key material for another SPI gives the same Sub SA keys (the SPI is only in the AAD)
    other = SA(SPI + 1, root_key=ROOT)
    assert eesp_part(other.encrypt(E_INNER, 1))[24:56] == eesp_part(outs[1])[24:56]


@pytest.mark.parametrize("sskdf,nk", [("hkdf-sha256", 32), ("hkdf-sha384", 48), ("hkdf-sha512", 64)])
@pytest.mark.parametrize("suite", ["aes-gcm-16", "aes-ccm-8", "chacha20-poly1305-iiv", "aes-gcm-12"])
def test_sub_sa_key_is_hkdf_of_the_session_id(sskdf, nk, suite):
    root = bytes((i * 5 + 1) & 0xFF for i in range(nk))
    bits = 256 if "chacha" in suite else 192
    km = derive_sub_sa_key(root, 0x0203, keymat_len(suite, bits), sskdf)
    a = SA(77, suite, root_key=root, sskdf=sskdf, key_bits=bits, mode="transport", format="full")
    b = SA(77, suite, key=km, key_bits=bits, mode="transport", format="full")
    out = a.encrypt(udp4(25), 0x0203)
    # The Session ID is in the AAD, so the ICVs differ; Seq, IV and ciphertext depend only on
    # the key, the nonce and the plaintext, so they must agree with an SA given the KEYMAT.
    ref = b.encrypt(udp4(25))
    n = icv_len(suite)
    assert eesp_part(out)[8:-n] == eesp_part(ref)[8:-n]
    assert eesp_part(out)[-n:] != eesp_part(ref)[-n:]
    assert a.decrypt(out).packet == udp4(25)


def test_max_sub_sa_id_is_enforced_on_send_and_receive():
    sa = SA(SPI, root_key=ROOT, max_sub_sa_id=3)
    for sid in range(4):
        assert sa.decrypt(sa.encrypt(udp4(), sid)).sub_sa_id == sid
    for sid in (4, 5, 65535):
        with pytest.raises(SubSaError) as ei:
            sa.encrypt(udp4(), sid)
        assert ei.value.code == "eesp-sub-sa-out-of-range" and str(ei.value)
    assert sa.next_seq(4) == 1  # nothing was spent
    unlimited = SA(SPI, root_key=ROOT)
    for sid in (4, 65535):
        with pytest.raises(SubSaError) as ei:
            sa.decrypt(unlimited.encrypt(udp4(), sid))
        assert ei.value.code == "eesp-sub-sa-out-of-range"
    # max_sub_sa_id=0: only Sub SA 0
    zero = SA(SPI, root_key=ROOT, max_sub_sa_id=0)
    assert zero.decrypt(zero.encrypt(udp4(), 0)).packet == udp4()
    with pytest.raises(SubSaError):
        zero.encrypt(udp4(), 1)


def test_without_sskdf_only_sub_sa_zero():
    sa = SA(SPI, key=derive_sub_sa_key(ROOT, 0, 20))
    assert sa.decrypt(sa.encrypt(udp4(), 0)).packet == udp4()
    for sid in (1, 2, 65535):
        with pytest.raises(SubSaError) as ei:
            sa.encrypt(udp4(), sid)
        assert ei.value.code == "eesp-sub-sa-out-of-range"
    # a max_sub_sa_id is ignored without an SSKDF: still Sub SA 0 only (D9)
    with pytest.raises(SubSaError):
        SA(SPI, key=bytes(20), max_sub_sa_id=10).encrypt(udp4(), 1)
    # on receive, a packet for Session ID 1 is out of range before its ICV is looked at
    rooted = SA(SPI, root_key=ROOT)
    for sid in (1, 9):
        with pytest.raises(SubSaError) as ei:
            sa.decrypt(rooted.encrypt(udp4(), sid))
        assert ei.value.code == "eesp-sub-sa-out-of-range"
    # Sub SA 0 of the root key is the KEYMAT block of Session ID 0 (§19): it opens
    assert SA(SPI, key=derive_sub_sa_key(ROOT, 0, 20)).decrypt(rooted.encrypt(udp4(), 0)).packet == udp4()


@pytest.mark.parametrize("sid", [-1, 65536, "1", 1.0, None])
def test_sub_sa_id_argument_is_validated(sid):
    sa = SA(SPI, root_key=ROOT)
    with pytest.raises(ConfigurationError):
        sa.encrypt(udp4(), sid)
    with pytest.raises(ConfigurationError):
        sa.next_seq(sid)


def test_failed_encrypt_spends_no_sequence_number():
    sa = SA(SPI, key=bytes(20), mode="transport")
    frag = ipv4(17, udp_segment(1, 2, b"x" * 20), flags=0x2000)
    for bad, cls in [(frag, MalformedPacketError), (b"", TruncatedPacketError), (b"\x45" + bytes(10), TruncatedPacketError),
                     (udp4()[:-1], MalformedPacketError), (b"\x55" * 40, MalformedPacketError)]:
        with pytest.raises(cls):
            sa.encrypt(bad)
    assert sa.next_seq() == 1
    assert seq_of(sa.encrypt(udp4())) == 1


def test_sequence_exhaustion_never_wraps():
    # D10: senders refuse to wrap; set_next_seq moves a Sub SA forward only
    sa = SA(SPI, root_key=ROOT)
    sa.set_next_seq(2**64 - 1, 3)
    assert sa.next_seq(3) == 2**64 - 1 and sa.next_seq(2) == 1
    out = sa.encrypt(udp4(), 3)
    r = sa.decrypt(out)
    assert r.seq == 2**64 - 1 and r.iv == b"\xff" * 8
    for _ in range(3):
        with pytest.raises(SequenceExhaustedError) as ei:
            sa.encrypt(udp4(), 3)
        assert ei.value.code == "sequence-exhausted" and str(ei.value)
    with pytest.raises(SequenceExhaustedError):
        sa.encrypt_batch([udp4()], 3)
    assert seq_of(sa.encrypt(udp4(), 2)) == 1  # other Sub SAs go on
    # backwards, or to a value already sent, is refused
    with pytest.raises(ConfigurationError):
        sa.set_next_seq(5, 3)
    sa.encrypt(udp4(), 4)
    sa.encrypt(udp4(), 4)
    with pytest.raises(ConfigurationError):
        sa.set_next_seq(2, 4)
    sa.set_next_seq(3, 4)  # the next unused one: allowed
    assert sa.next_seq(4) == 3
    for bad in (0, 2**64, -1):
        with pytest.raises(ConfigurationError):
            sa.set_next_seq(bad, 4)
    with pytest.raises(SubSaError):
        SA(SPI, key=bytes(20)).set_next_seq(10, 1)
    # SN = None: the IV counter is exhausted the same way
    nosn = SA(SPI, key=bytes(20), seq=False)
    nosn.set_next_seq(2**64 - 1)
    assert nosn.decrypt(nosn.encrypt(udp4())).iv == b"\xff" * 8
    with pytest.raises(SequenceExhaustedError):
        nosn.encrypt(udp4())


def test_crypt_offset_past_the_payload_is_refused_on_send():
    # D16: 4 * CryptOffset <= PIH + payload
    inner = udp4(4)  # 32 octets: PIH + 32 = 36 = 9 units
    ok = SA(1, key=bytes(20), crypt_offset=9, max_crypt_offset=63)
    assert ok.decrypt(ok.encrypt(inner)).packet == inner
    bad = SA(1, key=bytes(20), crypt_offset=10, max_crypt_offset=63)
    with pytest.raises(MalformedPacketError) as ei:
        bad.encrypt(inner)
    assert ei.value.code == "eesp-crypt-offset-past-payload"
    assert bad.next_seq() == 1


def test_packet_too_large():
    big = ipv4(17, udp_segment(1, 2, bytes(65535 - 28)))
    assert len(big) == 65535
    for mode in ("tunnel", "transport"):
        with pytest.raises(PacketTooLargeError) as ei:
            SA(1, key=bytes(20), mode=mode).encrypt(big)
        assert ei.value.code == "ip-too-long" and isinstance(ei.value, ValueError)
    # transport, IPv4: Base 8 + Seq 8 + IV 8 + PIH 4 + L4 + pad + ICV 16
    sa = SA(1, key=bytes(20), mode="transport")
    fits = ipv4(17, udp_segment(1, 2, bytes(65468 - 8)))
    out = sa.encrypt(fits)
    assert len(out) == 20 + 28 + 65468 + 16 and sa.decrypt(out).packet == fits
    with pytest.raises(PacketTooLargeError):
        sa.encrypt(ipv4(17, udp_segment(1, 2, bytes(65469 - 8))))  # 3 octets of padding: 65536


# --------------------------------------------------------------------------- batches


def _mixed(n: int = 16):
    makers = [udp4, udp6, tcp4, tcp6]
    return [makers[i % 4](10 + 9 * i, seed=i) for i in range(n)]


@pytest.mark.parametrize("kw", [dict(key=bytes(20)), dict(root_key=ROOT, mode="transport"),
                                dict(key=bytes(19), suite="aes-ccm-8-iiv", udp_encap=True)])
def test_encrypt_batch_equals_per_packet(kw):
    kw = dict(kw)
    suite = kw.pop("suite", "aes-gcm-16")
    a, b = SA(SPI, suite, **kw), SA(SPI, suite, **kw)
    sid = 5 if "root_key" in kw else 0
    pkts = _mixed()
    batch = a.encrypt_batch(pkts, sid)
    assert batch == [b.encrypt(p, sid) for p in pkts]
    assert a.next_seq(sid) == b.next_seq(sid) == 1 + len(pkts)
    assert a.encrypt_batch([]) == []
    assert [r.packet for r in b.decrypt_batch(batch)] == pkts


def test_encrypt_batch_failure_keeps_earlier_results():
    sa = SA(SPI, key=bytes(20), mode="transport")
    frag = ipv4(17, udp_segment(1, 2, b"x" * 20), flags=0x2000)
    pkts = [udp4(10), tcp6(10), frag, udp4(12)]
    with pytest.raises(MalformedPacketError) as ei:
        sa.encrypt_batch(pkts)
    assert ei.value.code == "ip-fragment"
    assert len(ei.value.results) == 2
    assert [sa.decrypt(r).packet for r in ei.value.results] == pkts[:2]
    assert sa.next_seq() == 3


def test_decrypt_batch_failures_in_their_slots():
    sa = SA(SPI, root_key=ROOT, max_sub_sa_id=7)
    good = [sa.encrypt(p, i % 3) for i, p in enumerate(_mixed(6))]
    tampered = bytearray(good[1])
    tampered[-1] ^= 1
    other = SA(SPI + 1, key=bytes(20)).encrypt(udp4())
    v1 = bytearray(good[2])
    v1[ip_header_len(good[2])] = 0x88  # version 1
    oob = SA(SPI, root_key=ROOT).encrypt(udp4(), 9)
    packets = [good[0], bytes(tampered), tcp4(), other, bytes(v1), good[3], oob, good[0], b"", good[5]]
    res = sa.decrypt_batch(packets)
    assert len(res) == len(packets)
    expect = [None, (AuthenticationError, "authentication-failed"), (NotEespError, "not-eesp"),
              (NoSaError, "eesp-no-sa"), (UnsupportedVersionError, "eesp-unsupported-version"), None,
              (SubSaError, "eesp-sub-sa-out-of-range"), (ReplayError, "replay-duplicate"),
              (TruncatedPacketError, "ip-truncated"), None]
    plain = {0: _mixed(6)[0], 5: _mixed(6)[3], 9: _mixed(6)[5]}
    for i, (r, e) in enumerate(zip(res, expect)):
        if e is None:
            assert isinstance(r, Decrypted) and r.packet == plain[i], i
        else:
            assert type(r) is e[0] and r.code == e[1] and str(r), (i, r)
    # the failures left the windows alone: the tampered packet's genuine twin still decrypts
    assert sa.decrypt(good[1]).packet == _mixed(6)[1]


# --------------------------------------------------------------------------- threads


def test_threads_share_one_sa_sequence_numbers_unique():
    sa = SA(SPI, root_key=ROOT)
    pkt = udp4(30)
    results: list = [None] * 4
    errors: list = []

    def work(t: int) -> None:
        try:
            out = []
            for i in range(1500):
                sid = t + 1 if i % 2 else 0  # its own Sub SA, and Sub SA 0 shared by all
                if i % 100 == 99:
                    for c in sa.encrypt_batch([pkt, pkt], sid):
                        out.append(c)
                else:
                    out.append(sa.encrypt(pkt, sid))
            results[t] = [(struct.unpack("!H", eesp_part(c)[2:4])[0], seq_of(c)) for c in out]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    pairs = [p for r in results for p in r]
    assert len(pairs) == len(set(pairs)) == 4 * (1500 + 15)
    for t, r in enumerate(results):
        own = [s for sid, s in r if sid == t + 1]
        assert own == list(range(1, len(own) + 1))  # a Sub SA of one thread counts 1, 2, 3, ...
        shared = [s for sid, s in r if sid == 0]
        assert shared == sorted(shared)  # each thread sees the shared counter increase
    shared_all = sorted(s for r in results for sid, s in r if sid == 0)
    assert shared_all == list(range(1, len(shared_all) + 1))
    assert sa.next_seq(0) == len(shared_all) + 1
    # and every packet opens (each once: the replay windows see distinct pairs)
    rx = SA(SPI, root_key=ROOT)
    sample = [sa.encrypt(pkt, s) for s in range(5)]
    assert all(rx.decrypt(c).packet == pkt for c in sample)


def test_threads_share_one_receiver():
    sa = SA(SPI, root_key=ROOT, anti_replay=False)
    outs = [sa.encrypt(p, i % 4) for i, p in enumerate(_mixed(40))]
    rx = Receiver([SA(SPI, root_key=ROOT, anti_replay=False)])
    bad: list = []

    def work() -> None:
        for _ in range(20):
            for o, p in zip(outs, _mixed(40)):
                if rx.decrypt(o).packet != p:
                    bad.append(o)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


# --------------------------------------------------------------------------- Receiver


def test_receiver_with_several_sas():
    sas = [
        SA(0x1000, root_key=ROOT),
        SA(0x2000, "aes-ccm-12", key=keymat("aes-ccm-12", 256), key_bits=256, mode="transport"),
        SA(0x3000, "chacha20-poly1305-iiv", key=keymat("chacha20-poly1305-iiv", 256), udp_encap=True),
        SA(0x80000000, "aes-gmac", key=keymat("aes-gmac", 128), seq=False),
    ]
    rx = Receiver(sas)
    pkts = _mixed(8)
    for i, p in enumerate(pkts):
        sa = sas[i % 4]
        r = rx.decrypt(sa.encrypt(p, 2 if i % 4 == 0 else 0))
        assert r.packet == p and r.header.spi == sa.spi
        assert r.udp_encap == (sa.spi == 0x3000)
    with pytest.raises(NoSaError) as ei:
        rx.decrypt(SA(0x4000, key=bytes(20)).encrypt(udp4()))
    assert ei.value.code == "eesp-no-sa" and str(ei.value)
    # the Receiver keeps its own state: the sending SA's decrypt is a separate window
    out = sas[0].encrypt(udp4(), 7)
    assert rx.decrypt(out).packet == udp4()
    assert sas[0].decrypt(out).packet == udp4()
    with pytest.raises(ReplayError):
        rx.decrypt(out)
    with pytest.raises(ReplayError):
        sas[0].decrypt(out)


def test_receiver_configuration():
    with pytest.raises(ConfigurationError) as ei:
        Receiver([SA(1, key=bytes(20)), SA(1, root_key=ROOT)])
    assert "00000001" in str(ei.value)
    with pytest.raises(ConfigurationError):
        Receiver([SA(1, key=bytes(20))], ip_protocol=256)
    with pytest.raises(ConfigurationError):
        Receiver([SA(1, key=bytes(20))], udp_port=70000)
    empty = Receiver([])
    with pytest.raises(NoSaError):
        empty.decrypt(SA(1, key=bytes(20)).encrypt(udp4()))
    with pytest.raises(NotEespError):
        empty.decrypt(udp4())


def test_receiver_udp_checksum_option():
    sa = SA(0x2000, key=bytes(20), udp_encap=True)
    out = bytearray(sa.encrypt(udp4(33)))
    out[26:28] = b"\x12\x34"  # a wrong, non-zero checksum
    assert Receiver([SA(0x2000, key=bytes(20))], check_udp_checksum=False).decrypt(bytes(out)).packet == udp4(33)
    noted = Receiver([SA(0x2000, key=bytes(20))], check_udp_checksum="note").decrypt(bytes(out))
    assert noted.packet == udp4(33) and noted.udp_checksum == "udp-bad-checksum"
    with pytest.raises(ConfigurationError):
        Receiver([], check_udp_checksum="yes")
    strict = Receiver([SA(0x2000, key=bytes(20))])  # an endpoint verifies by default (RFC 1122 §4.1.3.4, D17)
    with pytest.raises(MalformedPacketError) as ei:
        strict.decrypt(bytes(out))
    assert ei.value.code == "udp-bad-checksum"
    out[26:28] = b"\0\0"
    c = 0xFFFF ^ _csum(V4_SRC + V4_DST + struct.pack("!HH", 17, len(out) - 20) + bytes(out[20:]))
    out[26:28] = struct.pack("!H", c or 0xFFFF)
    assert strict.decrypt(bytes(out)).packet == udp4(33)


@pytest.mark.parametrize("mode", ["tunnel", "transport"])
def test_ipv6_udp_checksum(mode):
    """D17: over IPv6 the sender computes the UDP checksum (RFC 8200 §8.1); an endpoint refuses 0 unless in
    RFC 6936 zero-checksum mode, and a wrong one always; "note" decrypts both and names them."""
    sa = SA(0x2000, key=bytes(20), udp_encap=True, mode=mode)
    out = bytearray(sa.encrypt(udp6(33)))
    assert out[6] == 17 and struct.unpack("!H", out[46:48])[0] == psp_model.udp_checksum(out[8:24], out[24:40],
                                                                                          bytes(out[40:]))
    assert Receiver([SA(0x2000, key=bytes(20), mode=mode)]).decrypt(bytes(out)).packet == udp6(33)
    for csum, code in ((b"\0\0", "udp-zero-checksum"), (bytes([out[46] ^ 1, out[47]]), "udp-bad-checksum")):
        bad = bytes(out[:46] + csum + out[48:])
        with pytest.raises(MalformedPacketError) as ei:
            Receiver([SA(0x2000, key=bytes(20), mode=mode)]).decrypt(bad)
        assert ei.value.code == code
        rfc6936 = Receiver([SA(0x2000, key=bytes(20), mode=mode)], udp_zero_checksum_v6=True)
        if code == "udp-zero-checksum":
            assert rfc6936.decrypt(bad).packet == udp6(33)
        else:
            with pytest.raises(MalformedPacketError):
                rfc6936.decrypt(bad)
        noted = Receiver([SA(0x2000, key=bytes(20), mode=mode)], check_udp_checksum="note").decrypt(bad)
        assert noted.packet == udp6(33) and noted.udp_checksum == code


# --------------------------------------------------------------------------- errors

ALL_ERRORS = [
    AuthenticationError, CaptureError, ConfigurationError, DummyPacketError, KeyFileError, MalformedPacketError,
    NoSaError, NotEespError, PacketTooLargeError, PolicyError, ReplayError, SequenceExhaustedError, SubSaError,
    TruncatedPacketError, UnsupportedVersionError,
]


@pytest.mark.parametrize("cls", ALL_ERRORS)
def test_every_error_is_an_eesp_error(cls):
    assert issubclass(cls, EespError) and issubclass(cls, CoreError) and issubclass(cls, Exception)
    e = cls("message", "some-code")
    assert e.code == "some-code" and str(e) == "message"
    assert cls.__name__ in pyeesp.__all__


def test_error_hierarchy_relations():
    assert issubclass(TruncatedPacketError, MalformedPacketError)
    assert issubclass(NotEespError, MalformedPacketError)
    assert issubclass(ConfigurationError, ValueError) and issubclass(PacketTooLargeError, ValueError)
    for cls in (AuthenticationError, ReplayError, UnsupportedVersionError, NoSaError, SubSaError, PolicyError,
                DummyPacketError, SequenceExhaustedError):
        assert not issubclass(cls, MalformedPacketError), cls
    import pecore.capture
    import pecore.keys

    assert issubclass(CaptureError, pecore.capture.CaptureError) and issubclass(CaptureError, OSError)
    assert issubclass(KeyFileError, pecore.keys.KeyFileError)
    assert PolicyError("x").icv_valid is False


@pytest.mark.parametrize(
    "code,cls",
    [
        ("authentication-failed", AuthenticationError), ("replay-duplicate", ReplayError),
        ("replay-too-old", ReplayError), ("eesp-truncated", TruncatedPacketError),
        ("ip-truncated", TruncatedPacketError), ("eesp-unsupported-version", UnsupportedVersionError),
        ("eesp-no-sa", NoSaError), ("eesp-sub-sa-out-of-range", SubSaError),
        ("eesp-crypt-offset-not-allowed", PolicyError), ("eesp-unknown-option", PolicyError),
        ("eesp-dummy-packet", DummyPacketError), ("sequence-exhausted", SequenceExhaustedError),
        ("esp-in-udp", NotEespError), ("nat-keepalive", NotEespError), ("ike-non-esp-marker", NotEespError),
        ("not-eesp", NotEespError), ("eesp-compat-bit-clear", NotEespError), ("ip-too-long", PacketTooLargeError),
        ("sskdf-undefined", ConfigurationError), ("eesp-bad-suite", ConfigurationError),
        ("eesp-bad-config", ConfigurationError), ("bad-key-length", ConfigurationError),
        ("eesp-options-overrun", MalformedPacketError), ("eesp-bad-pad-length", MalformedPacketError),
        ("eesp-sequence-zero", MalformedPacketError), ("eesp-bad-payload-offset", MalformedPacketError),
        ("no-such-code", EespError),
    ],
)
def test_error_class_by_code(code, cls):
    assert error_class(code) is cls


def test_replay_errors():
    sa = SA(SPI, root_key=ROOT, replay_window=64)
    outs = [sa.encrypt(udp4(seed=i), 1) for i in range(200)]
    assert sa.decrypt(outs[0]).seq == 1
    with pytest.raises(ReplayError) as ei:
        sa.decrypt(outs[0])
    assert ei.value.code == "replay-duplicate" and str(ei.value)
    assert sa.decrypt(outs[199]).seq == 200
    with pytest.raises(ReplayError) as ei:
        sa.decrypt(outs[100])  # seq 101 <= 200 - 64
    assert ei.value.code == "replay-too-old"
    assert sa.decrypt(outs[150]).seq == 151  # inside the window and new
    # anti_replay off: duplicates are accepted
    lax = SA(SPI, root_key=ROOT, anti_replay=False)
    assert lax.decrypt(outs[5]).packet == lax.decrypt(outs[5]).packet == udp4(seed=5)
    # a tampered duplicate of a new sequence number fails on the ICV and does not move the window
    fresh = sa.encrypt(udp4(), 1)
    t = bytearray(fresh)
    t[-3] ^= 0x10
    with pytest.raises(AuthenticationError):
        sa.decrypt(bytes(t))
    assert sa.decrypt(fresh).seq == 201


def test_policy_error_for_a_disallowed_crypt_offset():
    sender = SA(SPI, key=bytes(20), crypt_offset=8, max_crypt_offset=8)
    out = sender.encrypt(udp4(40))
    receiver = SA(SPI, key=bytes(20))  # no maximum announced: the option is not allowed
    with pytest.raises(PolicyError) as ei:
        receiver.decrypt(out)
    err = ei.value
    assert err.code == "eesp-crypt-offset-not-allowed" and err.icv_valid is True and str(err)
    t = bytearray(out)
    t[-1] ^= 1
    with pytest.raises(PolicyError) as ei:
        receiver.decrypt(bytes(t))
    assert ei.value.code == "eesp-crypt-offset-not-allowed" and ei.value.icv_valid is False
    # above the announced maximum
    with pytest.raises(PolicyError) as ei:
        SA(SPI, key=bytes(20), max_crypt_offset=7).decrypt(out)
    assert ei.value.icv_valid is True
    # at the maximum it is accepted
    ok = SA(SPI, key=bytes(20), max_crypt_offset=8)
    assert ok.decrypt(out).packet == udp4(40)
    # a batch reports the same
    [r] = receiver.decrypt_batch([out])
    assert isinstance(r, PolicyError) and r.icv_valid is True
    # the drop did not move the receiver's window (nothing else to see: it drops every such packet)
    assert sender.decrypt(out).packet == udp4(40)


def test_policy_error_for_unknown_options_on_a_strict_sa():
    sender = SA(SPI, key=bytes(20), options=bytes([200, 2, 1, 2]))
    out = sender.encrypt(udp4())
    assert sender.decrypt(out).header.unknown_options == (Option(200, b"\x01\x02"),)
    strict = SA(SPI, key=bytes(20), strict=True)
    with pytest.raises(PolicyError) as ei:
        strict.decrypt(out)
    assert ei.value.code == "eesp-unknown-option"
    # Pad1 / PadN / Crypt Offset are known: a strict SA takes them
    padded = SA(SPI, key=bytes(20), options=bytes([0, 1, 1, 0]), crypt_offset=1, max_crypt_offset=1, strict=True)
    assert padded.decrypt(padded.encrypt(udp4())).packet == udp4()


def test_dummy_packet_error():
    # Transport mode carries the inner protocol in the PIH: an IPv4 packet of protocol 59
    # ("No Next Header") becomes a dummy packet, authenticated and then discarded (§6).
    sa = SA(SPI, key=bytes(20), mode="transport")
    out = sa.encrypt(ipv4(59, b"padding!"))
    with pytest.raises(DummyPacketError) as ei:
        sa.decrypt(out)
    assert ei.value.code == "eesp-dummy-packet" and str(ei.value)
    with pytest.raises(ReplayError):  # it was authenticated: the window moved
        sa.decrypt(out)
    t = bytearray(out)
    t[-1] ^= 1
    with pytest.raises(AuthenticationError):  # a forged one is an ICV failure
        SA(SPI, key=bytes(20), mode="transport").decrypt(bytes(t))


def test_errors_raised_by_decrypt():
    sa = SA(SPI, key=bytes(20))
    out = sa.encrypt(udp4())
    with pytest.raises(AuthenticationError) as ei:
        SA(SPI, key=b"\x01" * 20).decrypt(out)
    assert ei.value.code == "authentication-failed"
    with pytest.raises(NotEespError) as ei:
        sa.decrypt(udp4())
    assert ei.value.code == "not-eesp" and isinstance(ei.value, MalformedPacketError)
    with pytest.raises(TruncatedPacketError) as ei:
        sa.decrypt(out[:10])
    assert ei.value.code == "ip-truncated"
    with pytest.raises(MalformedPacketError) as ei:
        sa.decrypt(out[:-1])
    assert ei.value.code == "ip-bad-length"
    with pytest.raises(MalformedPacketError) as ei:
        sa.decrypt(b"\x55" + out[1:])
    assert ei.value.code == "ip-bad-version"


def test_sa_decrypts_its_own_packets_on_another_udp_port():
    # The SA's own receiver listens where its packets go: udp_dport, not always 4500.
    sa = pyeesp.SA(0x10, "aes-gcm-16", key=bytes(20), mode="transport", udp_encap=True, udp_dport=5000)
    p = udp4()
    assert sa.decrypt(sa.encrypt(p)).packet[20:] == p[20:]


def test_receiver_passes_over_the_esp_sas_it_is_told_of():
    """eesp.md §14 step 3: a UDP payload starting with the SPI of an ESP SA on the port is ESP, whatever its octet 0;
    EESP whose first word happens to be another number is still EESP.  Checked against an ESP packet of pyesp."""
    import pyesp

    inner = bytes.fromhex("4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef")
    esp = pyesp.SA(0x80001234, "aes-gcm-16", bytes(20), udp_encap=True).encrypt(inner)
    eesp_sa = SA(SPI, key=bytes(20), udp_encap=True)
    eesp = eesp_sa.encrypt(inner)
    with pytest.raises(NoSaError):  # octet 0 0x80: EESP's, and no EESP SA 0x00000001 (its Sequence Number)
        Receiver([eesp_sa]).decrypt(esp)
    both = Receiver([eesp_sa], esp_spis=[0x80001234, 0x7])
    with pytest.raises(NotEespError) as ei:
        both.decrypt(esp)
    assert ei.value.code == "esp-in-udp"
    assert both.decrypt(eesp).packet == inner  # its first word 0x80000000 is no ESP SA's
    assert Receiver([eesp_sa], esp_spis=[0x80000000]).decrypt_batch([eesp])[0].code == "esp-in-udp"
    for bad in (-1, 2**32, "0x1"):
        with pytest.raises(ConfigurationError):
            Receiver([eesp_sa], esp_spis=[bad])
