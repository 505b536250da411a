"""The pypsp API: Header, derive_key, Encryptor / Decryptor configuration and
behaviour, batches, threads and the exception hierarchy.

Packets are built here with struct (no dependency on the other test helpers);
expected values come from the spec (docs/spec/psp.md §5, §10.4, §11) or
from an independent computation with the `cryptography` package.
"""
from __future__ import annotations

import struct
import threading

import pytest

import pypsp
from pecore.errors import CoreError
from pecore.protocol import checksum
from pypsp import (
    AuthenticationError,
    CaptureError,
    ConfigurationError,
    Decrypted,
    Decryptor,
    Encryptor,
    Header,
    IvExhaustedError,
    KeyFileError,
    MalformedPacketError,
    NoKeyError,
    NotPspError,
    PacketTooLargeError,
    PspError,
    TruncatedPacketError,
    UnsupportedVersionError,
    derive_key,
)

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - hypothesis is a test extra
    given = None

MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
KEY16 = bytes(range(16))
KEY32 = bytes(range(32))
SPI = 0x0BADCAFE

# §5: (version, SPI, master key, derived key)
KDF_TABLE = [
    (0, 0x12345678, MK0, "96c22dc799198090b74b70ae468e4e30"),
    (0, 0x9A345678, MK1, "3946da2554eae46ad1ef77a64372edc4"),
    (1, 0x12345678, MK0, "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"),
    (1, 0x9A345678, MK1, "fa00f609df6020289a1c93d6027081a637ad45b24a5576b36e6f49dd43114d80"),
    (0, 0x1A345678, MK0, "3fe9b90602a41ce17e20971810e9a6a0"),
    (1, 0x1A345678, MK0, "184eecc110d0ecfcf85e6f7c9eedab4d21122fb2d2b8c344af3a1c38d0b6adfd"),
]


# --------------------------------------------------------------------------- packets


def _csum(data: bytes) -> int:
    """The one's-complement sum folded to 16 bits (not complemented), from the core's checksum."""
    return 0xFFFF ^ checksum(data)


V4_SRC, V4_DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
V6_SRC, V6_DST = bytes.fromhex("0a000000000000000000000000000001"), bytes.fromhex("0a000000000000000000000000000002")


def ipv4(proto: int, payload: bytes, *, ident: int = 0, flags: int = 0x4000, src=V4_SRC, dst=V4_DST) -> bytes:
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags, 64, proto, 0, src, dst))
    struct.pack_into("!H", h, 10, 0xFFFF ^ _csum(bytes(h)))
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes, *, src=V6_SRC, dst=V6_DST) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64, src, dst) + payload


def udp_segment(sport: int, dport: int, data: bytes, pseudo: bytes = b"") -> bytes:
    seg = bytearray(struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)
    if pseudo:
        c = 0xFFFF ^ _csum(pseudo + struct.pack("!HH", 17, len(seg)) + bytes(seg))
        struct.pack_into("!H", seg, 6, c or 0xFFFF)
    return bytes(seg)


def tcp_segment(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, 0x18, 512, 0, 0) + data


def udp4(n: int = 40, sport: int = 11111, dport: int = 22222, seed: int = 0) -> bytes:
    data = bytes((seed + i) & 0xFF for i in range(n))
    return ipv4(17, udp_segment(sport, dport, data, V4_SRC + V4_DST))


def udp6(n: int = 40, sport: int = 11111, dport: int = 22222, seed: int = 0) -> bytes:
    data = bytes((seed + i) & 0xFF for i in range(n))
    return ipv6(17, udp_segment(sport, dport, data, V6_SRC + V6_DST))


def tcp4(n: int = 40, seed: int = 0) -> bytes:
    return ipv4(6, tcp_segment(443, 50123, bytes((seed * 3 + i) & 0xFF for i in range(n))))


def tcp6(n: int = 40, seed: int = 0) -> bytes:
    return ipv6(6, tcp_segment(443, 50123, bytes((seed * 3 + i) & 0xFF for i in range(n))))


def psp_offset(outer: bytes) -> int:
    """Where the PSP header starts in an outer packet without IPv6 extension headers."""
    return (outer[0] & 15) * 4 + 8 if outer[0] >> 4 == 4 else 48


def key_for(version: int) -> bytes:
    return KEY16 if version in (0, 2) else KEY32


def enc_dec(version: int = 0, **kw):
    enc = Encryptor(spi=SPI, key=key_for(version), version=version, **kw)
    dec = Decryptor(keys={SPI: KEY16, (SPI, 1): KEY32, (SPI, 3): KEY32})
    return enc, dec


# --------------------------------------------------------------------------- Header


def test_header_layout_matches_the_spec_example():
    # §10.4: "11 01 01 01 9a345678 0000000000000001"
    h = Header(next_header=17, spi=0x9A345678, iv=1, crypt_offset=1)
    assert h.build() == bytes.fromhex("11010101 9a345678 0000000000000001")
    assert h.header_len == 16 and h.hdr_ext_len is None


@pytest.mark.parametrize("version", range(4))
@pytest.mark.parametrize("virt", [False, True])
@pytest.mark.parametrize("sample", [False, True])
@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("reserved", [0, 3])
def test_header_octet3_and_round_trip(version, virt, sample, drop, reserved):
    ext = bytes(range(0xA0, 0xA8)) + (b"\x55" * 8 if reserved else b"") if virt else b""
    h = Header(
        next_header=41, spi=0x80000001, iv=2**64 - 1, version=version, crypt_offset=63, sample=sample,
        drop=drop, virt=virt, reserved=reserved, extension=ext,
    )
    raw = h.build()
    assert len(raw) == 16 + len(ext)
    assert raw[3] == (sample << 7) | (drop << 6) | (version << 2) | (virt << 1) | 1
    assert raw[2] == (reserved << 6) | 63
    if not sample and not drop:
        assert raw[3] == [[0x01, 0x03], [0x05, 0x07], [0x09, 0x0B], [0x0D, 0x0F]][version][virt]
    p = Header.parse(raw + b"payload and icv")
    assert p == Header(
        next_header=41, spi=0x80000001, iv=2**64 - 1, version=version, crypt_offset=63, sample=sample,
        drop=drop, virt=virt, reserved=reserved, extension=ext, hdr_ext_len=len(raw) // 8 - 1,
    )
    assert p.build() == raw
    assert p.vc == (ext[:8] if virt else None)
    assert p.extension == ext
    assert p.key_phase == 1
    assert p.version_name == ["AES-GCM-128", "AES-GCM-256", "AES-GMAC-128", "AES-GMAC-256"][version]
    assert p.tunnel


if given is not None:

    @given(
        next_header=st.integers(0, 255),
        spi=st.integers(0, 2**32 - 1),
        iv=st.integers(0, 2**64 - 1),
        version=st.integers(0, 3),
        crypt_offset=st.integers(0, 63),
        sample=st.booleans(),
        drop=st.booleans(),
        reserved=st.integers(0, 3),
        virt=st.booleans(),
        extra=st.binary(max_size=40),
    )
    def test_header_round_trip_property(next_header, spi, iv, version, crypt_offset, sample, drop, reserved, virt, extra):
        ext = (bytes(8) + extra) if virt else extra
        h = Header(
            next_header=next_header, spi=spi, iv=iv, version=version, crypt_offset=crypt_offset,
            sample=sample, drop=drop, reserved=reserved, virt=virt, extension=ext,
        )
        raw = h.build()
        assert len(raw) == h.header_len == 16 + -(-len(ext) // 8) * 8
        p = Header.parse(raw)
        padded = ext + bytes(len(raw) - 16 - len(ext))
        assert (p.next_header, p.spi, p.iv, p.version, p.crypt_offset) == (next_header, spi, iv, version, crypt_offset)
        assert (p.sample, p.drop, p.reserved, p.virt, p.always_one) == (sample, drop, reserved, virt, True)
        assert p.extension == padded and p.hdr_ext_len == len(raw) // 8 - 1
        assert p.key_phase == spi >> 31
        assert p.build() == raw


@pytest.mark.parametrize(
    "field,value",
    [
        ("next_header", 256), ("next_header", -1), ("spi", 2**32), ("spi", -1), ("iv", 2**64),
        ("version", 16), ("crypt_offset", 64), ("crypt_offset", -1), ("reserved", 4),
        ("hdr_ext_len", 256), ("hdr_ext_len", -1), ("next_header", "17"), ("spi", 1.0),
    ],
)
def test_header_field_validation(field, value):
    kw = {"next_header": 17, "spi": 1, field: value}
    with pytest.raises(ConfigurationError) as ei:
        Header(**kw)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, PspError)
    assert ei.value.code and field in str(ei.value)


@pytest.mark.parametrize("value", ["1", 1.5])
def test_header_hdr_ext_len_type_is_validated(value):
    # BUG (pypsp/header.py): hdr_ext_len is range-checked but not type-checked, so "1" raises
    # TypeError and 1.5 is accepted (build() then fails with a cffi TypeError).
    with pytest.raises(ConfigurationError):
        Header(next_header=17, spi=1, hdr_ext_len=value)


def test_header_extension_must_fit():
    with pytest.raises(ConfigurationError):
        Header(next_header=17, spi=1, hdr_ext_len=1, extension=b"x")
    assert Header(next_header=17, spi=1, hdr_ext_len=2, extension=b"x").build()[16:] == b"x" + bytes(7)
    # an extension alone sizes the header: 9 octets -> two more 8-octet units
    assert Header(next_header=17, spi=1, extension=bytes(9)).header_len == 32


def test_header_virt_without_extension_has_room_for_the_vc():
    # BUG (pypsp/header.py _hdr_ext_len): with virt=True and no extension the automatic Hdr Ext
    # Len is 1, so build() fails with "psp-vc-without-room" (a MalformedPacketError) instead of
    # making room for a zero VC (Hdr Ext Len 2), as the encoder does.
    h = Header(next_header=6, spi=1, virt=True)
    assert h.header_len == 24
    raw = h.build()
    assert raw[1] == 2 and raw[3] == 0x03 and raw[16:] == bytes(8)
    assert Header.parse(raw).vc == bytes(8)


def test_header_build_rejects_inconsistent_explicit_lengths():
    with pytest.raises(PspError) as ei:
        Header(next_header=6, spi=1, hdr_ext_len=0).build()
    assert ei.value.code == "psp-bad-hdr-ext-len"
    with pytest.raises(PspError) as ei:
        Header(next_header=6, spi=1, hdr_ext_len=1, virt=True).build()
    assert ei.value.code == "psp-vc-without-room"


def test_header_properties():
    h = Header(next_header=6, spi=0x7FFFFFFF, version=7)
    assert h.key_phase == 0 and h.version_name == "reserved (7)" and not h.tunnel and h.vc is None
    assert Header(next_header=4, spi=0x80000000).key_phase == 1
    assert Header(next_header=4, spi=1).tunnel and Header(next_header=41, spi=1).tunnel
    h = Header(next_header=6, spi=1, virt=True, extension=bytes(range(16)))
    assert h.vc == bytes(range(8)) and h.extension == bytes(range(16)) and h.header_len == 32


def test_header_parse_errors():
    good = Header(next_header=17, spi=5, iv=9).build()
    for n in range(16):
        with pytest.raises(TruncatedPacketError) as ei:
            Header.parse(good[:n])
        assert ei.value.code == "psp-truncated"
    with pytest.raises(MalformedPacketError) as ei:
        Header.parse(good[:3] + bytes([good[3] & 0xFE]) + good[4:])
    assert ei.value.code == "psp-always-one-bit-clear"
    for v in range(4, 16):
        with pytest.raises(UnsupportedVersionError) as ei:
            Header.parse(good[:3] + bytes([v << 2 | 1]) + good[4:])
        assert ei.value.code == "psp-unsupported-version"
    with pytest.raises(MalformedPacketError) as ei:
        Header.parse(good[:1] + b"\x00" + good[2:])
    assert ei.value.code == "psp-bad-hdr-ext-len"
    with pytest.raises(MalformedPacketError) as ei:
        Header.parse(good[:3] + b"\x03" + good[4:])
    assert ei.value.code == "psp-vc-without-room"
    with pytest.raises(MalformedPacketError) as ei:
        Header.parse(good[:1] + b"\x02" + good[2:3] + b"\x03" + good[4:] + bytes(7))
    assert ei.value.code == "psp-bad-hdr-ext-len"


def test_header_parse_lenient():
    good = Header(next_header=17, spi=5, iv=9).build()
    assert Header.parse_lenient(good) == (Header.parse(good), "ok")
    h, code = Header.parse_lenient(good[:3] + bytes([0x3C]) + good[4:])
    assert code == "psp-always-one-bit-clear" and h.version == 15 and not h.always_one and h.spi == 5
    assert Header.parse_lenient(good[:10]) == (None, "psp-truncated")


# --------------------------------------------------------------------------- KDF


@pytest.mark.parametrize("version,spi,mk,key", KDF_TABLE)
def test_derive_key_spec_table(version, spi, mk, key):
    assert derive_key(mk, spi, version) == bytes.fromhex(key)
    assert derive_key(mk.hex(), spi=spi, version=version) == bytes.fromhex(key)
    assert derive_key(mk, spi, version, label=0x50763000 | version << 8) == bytes.fromhex(key)
    assert derive_key(mk, spi, version, label=0x12345678) != bytes.fromhex(key)


def _sp800_108_cmac(mk: bytes, label: int, spi: int, nbytes: int) -> bytes:
    from cryptography.hazmat.primitives.ciphers import algorithms
    from cryptography.hazmat.primitives.cmac import CMAC

    out = b""
    for i in range(1, nbytes // 16 + 1):
        c = CMAC(algorithms.AES(mk))
        c.update(struct.pack("!IIII", i, label, spi, nbytes * 8))
        out += c.finalize()
    return out


@pytest.mark.parametrize("version", range(4))
@pytest.mark.parametrize("spi", [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x1A345678])
def test_derive_key_matches_an_independent_sp800_108(version, spi):
    pytest.importorskip("cryptography")
    n = 16 if version in (0, 2) else 32
    assert derive_key(MK1, spi, version) == _sp800_108_cmac(MK1, 0x50763000 | version << 8, spi, n)
    assert derive_key(MK1, spi, version, label=0xDEADBEEF) == _sp800_108_cmac(MK1, 0xDEADBEEF, spi, n)


@pytest.mark.parametrize(
    "args,code",
    [
        ((MK0[:31], 1, 0), "bad-key-length"),
        ((MK0 + b"\0", 1, 0), "bad-key-length"),
        ((MK0, 1, 4), None),
        ((MK0, -1, 0), None),
        ((MK0, 2**32, 0), None),
        (("zz" * 32, 1, 0), None),
        ((12345, 1, 0), None),
    ],
)
def test_derive_key_errors(args, code):
    with pytest.raises(ConfigurationError) as ei:
        derive_key(*args)
    assert ei.value.code == (code or ei.value.code) and ei.value.code


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "kw,code",
    [
        (dict(key=bytes(15)), "bad-key-length"),
        (dict(key=bytes(32)), "bad-key-length"),  # version 0 wants 16
        (dict(key=bytes(16), version=1), "bad-key-length"),
        (dict(key=bytes(16), version=3), "bad-key-length"),
        (dict(key=bytes(16), master_keys=(MK0, MK1)), "invalid-argument"),
        (dict(), "invalid-argument"),
        (dict(key=bytes(16), mode="tun"), "invalid-argument"),
        (dict(key=bytes(16), mode="TRANSPORT"), "invalid-argument"),
        (dict(key=bytes(16), crypt_offset=64), "invalid-argument"),
        (dict(key=bytes(16), crypt_offset=-1), "invalid-argument"),
        (dict(key=bytes(16), mode="tunnel", crypt_offset_ipv6=64), "invalid-argument"),
        (dict(key=bytes(16), version=2, crypt_offset=1), "psp-gmac-crypt-offset"),
        (dict(key=bytes(32), version=3, mode="tunnel", crypt_offset_ipv4=6), "psp-gmac-crypt-offset"),
        (dict(key=bytes(16), version=4), "invalid-argument"),
        (dict(key=bytes(16), vc=bytes(7)), "invalid-argument"),
        (dict(key=bytes(16), vc="0011"), "invalid-argument"),
        (dict(key=bytes(16), udp_sport="random"), "invalid-argument"),
        (dict(key=bytes(16), udp_sport=65536), "invalid-argument"),
        (dict(key=bytes(16), udp_dport=70000), "invalid-argument"),
        (dict(key=bytes(16), first_iv=-1), "invalid-argument"),
        (dict(key=bytes(16), first_iv=2**64), "invalid-argument"),
        (dict(key=bytes(16), mode="tunnel", tunnel_header=bytes(20)), "invalid-argument"),
        (dict(key=bytes(16), mode="tunnel", tunnel_header=b"\x45" + bytes(23)), "invalid-argument"),
        (dict(key="not hex"), "invalid-argument"),
        (dict(key=1234), "invalid-argument"),
        (dict(master_keys=(MK0,)), "invalid-argument"),
        (dict(master_keys=(MK0[:16], MK1)), "bad-key-length"),
        (dict(master_keys=(None, MK1)), "no-key"),  # SPI 1 selects master key 0
    ],
)
def test_encryptor_configuration_errors(kw, code):
    with pytest.raises(PspError) as ei:
        Encryptor(spi=1, **kw)
    err = ei.value
    assert err.code == code
    if code == "no-key":
        assert isinstance(err, NoKeyError)
    else:
        assert isinstance(err, ConfigurationError) and isinstance(err, ValueError)
    assert str(err)


@pytest.mark.parametrize(
    "kw,code",
    [
        (dict(), "invalid-argument"),
        (dict(keys={}), "invalid-argument"),
        (dict(master_keys=(MK0,)), "invalid-argument"),
        (dict(master_keys=(MK0[:-1], None)), "bad-key-length"),
        (dict(keys={1: bytes(15)}), "bad-key-length"),
        (dict(keys={(1, 0): bytes(32)}), "bad-key-length"),
        (dict(keys={(1, 5): bytes(16)}), "psp-unsupported-version"),
        (dict(keys={1: bytes(16), (1, 0): bytes(16)}), "invalid-argument"),  # duplicate
        (dict(keys={2**32: bytes(16)}), "invalid-argument"),
        (dict(keys={1: "xyz"}), "invalid-argument"),
        (dict(master_keys=(MK0, None), versions=[4]), "invalid-argument"),
        (dict(master_keys=(MK0, None), udp_dport=-1), "invalid-argument"),
        (dict(master_keys=(MK0, None), kdf_labels={5: 1}), "invalid-argument"),
    ],
)
def test_decryptor_configuration_errors(kw, code):
    with pytest.raises(ConfigurationError) as ei:
        Decryptor(**kw)
    assert ei.value.code == code and str(ei.value)


def test_keys_as_hex_strings():
    pkt = udp4(50)
    forms = [
        KEY16,
        KEY16.hex(),
        "0x" + KEY16.hex().upper(),
        " ".join(f"{b:02x}" for b in KEY16),
        ":".join(f"{b:02x}" for b in KEY16),
        bytearray(KEY16),
        memoryview(KEY16),
    ]
    outs = {Encryptor(spi=SPI, key=k).encrypt(pkt) for k in forms}
    assert len(outs) == 1
    out = outs.pop()
    for k in forms:
        assert Decryptor(keys={SPI: k}).decrypt(out).packet == pkt
    # master keys too
    a = Encryptor(spi=SPI, master_keys=(MK0.hex(), None)).encrypt(pkt)
    b = Encryptor(spi=SPI, master_keys=(MK0, MK1)).encrypt(pkt)
    assert a == b
    assert Decryptor(master_keys=(MK0.hex(), MK1.hex())).decrypt(a).packet == pkt
    assert Decryptor(keys={SPI: derive_key(MK0, SPI, 0).hex()}).decrypt(a).packet == pkt
    # a VC given as hex
    e = Encryptor(spi=SPI, key=KEY16, vc="01:02:03:04:05:06:07:08", crypt_offset=2)
    assert Decryptor(keys={SPI: KEY16}).decrypt(e.encrypt(pkt)).header.vc == bytes(range(1, 9))


# --------------------------------------------------------------------------- IVs


def test_next_iv_and_first_iv():
    enc = Encryptor(spi=SPI, key=KEY16)
    assert enc.next_iv() == 1
    out = enc.encrypt(udp4())
    assert Header.parse(out[28:]).iv == 1 and enc.next_iv() == 2
    enc = Encryptor(spi=SPI, key=KEY16, first_iv=0)
    assert Header.parse(enc.encrypt(udp4())[28:]).iv == 0 and enc.next_iv() == 1
    enc = Encryptor(spi=SPI, key=KEY16, first_iv=123456789)
    ivs = [Header.parse(enc.encrypt(udp4())[28:]).iv for _ in range(5)]
    assert ivs == list(range(123456789, 123456794)) and enc.next_iv() == 123456794


def test_set_next_iv_moves_forward_only():
    enc = Encryptor(spi=SPI, key=KEY16)
    enc.encrypt(udp4())
    enc.set_next_iv(2)  # the next unused IV itself: no change
    enc.set_next_iv(1000)
    assert Header.parse(enc.encrypt(udp4())[28:]).iv == 1000 and enc.next_iv() == 1001
    for back in (1000, 1, 0):
        with pytest.raises(ConfigurationError) as ei:
            enc.set_next_iv(back)
        assert ei.value.code == "invalid-argument"
    assert enc.next_iv() == 1001
    enc.set_next_iv(2**64 - 1)
    assert Header.parse(enc.encrypt(udp4())[28:]).iv == 2**64 - 1
    with pytest.raises(ConfigurationError):
        enc.set_next_iv(2**64 - 1)  # exhausted: nothing is left to move to
    with pytest.raises(ConfigurationError):
        enc.set_next_iv(2**64)


def test_iv_exhaustion_never_repeats_the_last_iv():
    enc = Encryptor(spi=SPI, key=KEY16, first_iv=2**64 - 2)
    ivs = [Header.parse(enc.encrypt(udp4())[28:]).iv for _ in range(2)]
    assert ivs == [2**64 - 2, 2**64 - 1]
    for _ in range(3):
        with pytest.raises(IvExhaustedError) as ei:
            enc.encrypt(udp4())
        assert ei.value.code == "iv-exhausted"
    with pytest.raises(IvExhaustedError):
        enc.encrypt_batch([udp4()])
    assert enc.next_iv() is None  # exhausted: the same answer as pyeesp.SA.next_iv()


def test_failed_encrypt_spends_no_iv():
    enc = Encryptor(spi=SPI, key=KEY16, crypt_offset=63)
    with pytest.raises(MalformedPacketError) as ei:
        enc.encrypt(udp4(10))
    assert ei.value.code == "psp-crypt-offset-past-payload"
    with pytest.raises(MalformedPacketError) as ei:
        enc.encrypt(b"\x45" + bytes(30))
    assert enc.next_iv() == 1


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("version", range(4))
@pytest.mark.parametrize("mode", ["transport", "tunnel"])
@pytest.mark.parametrize("make", [udp4, udp6, tcp4, tcp6])
@pytest.mark.parametrize("vc", [None, bytes(range(1, 9))])
def test_round_trip(version, mode, make, vc):
    co = 0 if version >= 2 else (1 if mode == "transport" else 3)
    enc, dec = enc_dec(version, mode=mode, crypt_offset=co, vc=vc)
    pkt = make(77, seed=version)
    out = enc.encrypt(pkt)
    l3 = 20 if pkt[0] >> 4 == 4 else 40
    assert len(out) == len(pkt) + 40 + (8 if vc else 0) + (l3 if mode == "tunnel" else 0)
    r = dec.decrypt(out)
    assert isinstance(r, Decrypted) and r.packet == pkt
    h = r.header
    assert (h.spi, h.version, h.crypt_offset, h.iv, h.virt) == (SPI, version, co, 1, vc is not None)
    assert h.vc == vc
    assert h.next_header == ((4 if pkt[0] >> 4 == 4 else 41) if mode == "tunnel" else pkt[6 if pkt[0] >> 4 == 6 else 9])
    if vc is None or co * 4 >= 8:  # else the wire shows the VC encrypted
        assert h == Header.parse(out[psp_offset(out):])
    # the bare PSP part opens to the inner part: the L4 segment or the inner IP packet
    o = dec.open(out[psp_offset(out):])
    assert o.packet == (pkt if mode == "tunnel" else pkt[l3:])
    assert o.header == h
    if version >= 2:  # integrity only: the payload is on the wire in clear
        assert (pkt if mode == "tunnel" else pkt[l3:]) in out


def test_vc_is_shown_as_sent_even_when_encrypted():
    for co in range(4):
        enc, dec = enc_dec(0, crypt_offset=co, vc=b"VCVCVCVC")
        out = enc.encrypt(udp4())
        assert dec.decrypt(out).header.vc == b"VCVCVCVC"
        assert (out[psp_offset(out) + 16 :][:8] == b"VCVCVCVC") == (co >= 2)


def test_scapy_aead_example():
    # §11: key, SPI 0x11223344, IV 0102030405060708, tunnel NH 4, crypt offset 5
    key = bytes.fromhex("ffeeddccbbaa99887766554433221100")
    inner = bytes.fromhex("450000250001000040117cc57f0000017f000001 04d2162e0011a0c4 414141414141414141")
    sealed = bytes.fromhex(
        "04010501 11223344 0102030405060708 450000250001000040117cc57f0000017f000001"
        "8e3e2b1345c76bf95cdac39b861762a0cf dffbbebbc6313a2b9de064759cdd71c9"
    )
    dec = Decryptor(keys={0x11223344: key})
    r = dec.open(sealed)
    assert r.packet == inner and r.header.crypt_offset == 5 and r.header.iv == 0x0102030405060708
    enc = Encryptor(spi=0x11223344, key=key, mode="tunnel", crypt_offset=5, first_iv=0x0102030405060708)
    out = enc.encrypt(inner)
    assert out[28:] == sealed
    assert struct.unpack("!HHHH", out[20:28]) == (1234 ^ 5678, 1000, 8 + len(sealed), 0)
    assert dec.decrypt(out).packet == inner


def _ref_cleartext(ipv: int, empty: bool) -> bytes:
    """The reference tool's cleartext IP packet, frame 0 (§10.3)."""
    n = 0 if empty else (1392 if ipv == 4 else 1372)
    data = bytes(k & 0xFF for k in range(n))
    if ipv == 4:
        return ipv4(17, udp_segment(11111, 22222, data, V4_SRC + V4_DST))
    return ipv6(17, udp_segment(11111, 22222, data, V6_SRC + V6_DST))


# §10.4: case -> (spi, version, vc, frame length, ICV)
REFERENCE_MATRIX = {
    "v4_transport_crypt_off_128": (0x9A345678, 0, 0, 1474, "7ef9e38fabe889802ed5043fc125467f"),
    "v4_transport_crypt_off_128_empty": (0x9A345678, 0, 0, 82, "eb66c46f2a89a47e1548b83cda0a2c36"),
    "v4_transport_crypt_off_128_vc": (0x9A345678, 0, 1, 1482, "640b751596cb7799761c2a0816b18d28"),
    "v4_transport_crypt_off_256": (0x9A345678, 1, 0, 1474, "f6167e1473f31a8077f055c41ec13db7"),
    "v4_transport_no_crypt_off_128": (0x1A345678, 0, 0, 1474, "1f2b13605e9a085422721426f959364a"),
    "v4_transport_no_crypt_off_128_vc": (0x9A345678, 0, 1, 1482, "f8e656e3b34e2edb122e67c87949f2ec"),
    "v4_transport_no_crypt_off_256": (0x1A345678, 1, 0, 1474, "43eeba43c86548d1a420db807da92ac0"),
    "v4_tunnel_crypt_off_128": (0x1A345678, 0, 0, 1494, "2b9064031f556b4e7a06bfd7bd761a85"),
    "v4_tunnel_crypt_off_256": (0x1A345678, 1, 0, 1494, "f252277753bee92b86158da816a795b1"),
    "v4_tunnel_no_crypt_off_128": (0x9A345678, 0, 0, 1494, "09d0851e16ac698bcff159963d7c9948"),
    "v4_tunnel_no_crypt_off_256": (0x9A345678, 1, 0, 1494, "bf173ad039ef40e8c9ce350fbe105d9e"),
    "v6_transport_crypt_off_128": (0x9A345678, 0, 0, 1474, "66bf9888ece5c788a8bcb9fe482fc5f6"),
    "v6_transport_crypt_off_256": (0x9A345678, 1, 0, 1474, "33932eace8571aae0365f3f094542961"),
    "v6_transport_no_crypt_off_128": (0x1A345678, 0, 0, 1474, "5932b9d20fd1b73d0e93d6d3bff29f8d"),
    "v6_transport_no_crypt_off_256": (0x1A345678, 1, 0, 1474, "134274c06cbd31a2ef3162748e8d67ad"),
    "v6_tunnel_crypt_off_128": (0x1A345678, 0, 0, 1514, "582e518dd0dfc50693fe1662852534ca"),
    "v6_tunnel_crypt_off_256": (0x1A345678, 1, 0, 1514, "2cc438c263265dc9d5bfff97508f6550"),
    "v6_tunnel_crypt_off_256_empty": (0x1A345678, 1, 0, 142, "d170b130062800946d471cf76bb83707"),
    "v6_tunnel_crypt_off_256_vc": (0x1A345678, 1, 1, 1522, "c0ce6ddf22b077aded1b154e67d382e2"),
    "v6_tunnel_no_crypt_off_128": (0x9A345678, 0, 0, 1514, "3de9b59aad033eb5a070116c5eed88fa"),
    "v6_tunnel_no_crypt_off_256": (0x9A345678, 1, 0, 1514, "dc46b8a8560ae79e1f60f7e1111beec0"),
    "v6_tunnel_no_crypt_off_256_vc": (0x1A345678, 1, 1, 1522, "87db1b8d6466f762a909ccba5d6203fa"),
}


@pytest.mark.parametrize("case", sorted(REFERENCE_MATRIX))
def test_reference_matrix_icvs(case):
    spi, version, vc, frame_len, icv = REFERENCE_MATRIX[case]
    ipv = 4 if case.startswith("v4") else 6
    mode = "tunnel" if "_tunnel_" in case else "transport"
    base = (2, 7, 12) if case.endswith("_empty") else (0, 0, 0) if "no_crypt_off" in case else (1, 6, 11)
    co = tuple(c + (2 if vc and "no_crypt_off" not in case else 0) for c in base)
    pkt = _ref_cleartext(ipv, case.endswith("_empty"))
    enc = Encryptor(
        spi=spi, master_keys=(MK0, MK1), version=version, mode=mode, crypt_offset=co[0],
        crypt_offset_ipv4=co[1], crypt_offset_ipv6=co[2], vc=bytes(8) if vc else None,
    )
    out = enc.encrypt(pkt)
    assert 14 + len(out) == frame_len
    assert out[-16:].hex() == icv
    dec = Decryptor(master_keys=(MK0, MK1))
    assert dec.decrypt(out).packet == pkt
    if case == "v4_transport_crypt_off_128":
        assert out[:56] == bytes.fromhex(
            "450005b4 0000 4000 4011 2137 0a000001 0a000002 7da9 03e8 05a0 0000"
            "11 01 01 01 9a345678 0000000000000001 2b67 56ce 6c83a158 906f6e95"
        )
    # the "_err" variant: octet 2 of the PSP header |= 0x80 after sealing must fail
    bad = bytearray(out)
    bad[psp_offset(out) + 2] |= 0x80
    with pytest.raises(AuthenticationError):
        dec.decrypt(bytes(bad))


def test_udp_source_port_policies():
    pkt = udp4(sport=1234, dport=5678)
    assert struct.unpack("!H", Encryptor(spi=1, key=KEY16).encrypt(pkt)[20:22])[0] == 1234 ^ 5678
    assert struct.unpack("!H", Encryptor(spi=1, key=KEY16, udp_sport=4242).encrypt(pkt)[20:22])[0] == 4242
    seen = []

    def sport(inner: bytes) -> int:
        seen.append(inner)
        return 0x10000 + 777  # masked to 16 bits

    assert struct.unpack("!H", Encryptor(spi=1, key=KEY16, udp_sport=sport).encrypt(pkt)[20:22])[0] == 777
    assert seen == [pkt]
    icmp = ipv4(1, b"\x08\x00\x00\x00\x00\x01\x00\x01" + bytes(8))
    assert struct.unpack("!H", Encryptor(spi=1, key=KEY16).encrypt(icmp)[20:22])[0] == 1000


def test_custom_port_label_sample_drop_and_tunnel_header():
    pkt = tcp6(30)
    tmpl = ipv4(0, b"", src=bytes([192, 0, 2, 1]), dst=bytes([198, 51, 100, 7]))
    enc = Encryptor(
        spi=5, master_keys=(MK0, None), mode="tunnel", tunnel_header=tmpl, udp_dport=4000,
        kdf_label=0x01020304, sample=True, drop=True, crypt_offset_ipv6=11,
    )
    out = enc.encrypt(pkt)
    assert out[0] == 0x45 and out[12:20] == tmpl[12:20] and out[9] == 17
    assert struct.unpack("!H", out[22:24])[0] == 4000
    h = Header.parse(out[28:])
    assert h.sample and h.drop and h.next_header == 41 and h.crypt_offset == 11
    with pytest.raises(NotPspError) as ei:
        Decryptor(master_keys=(MK0, None), kdf_labels={0: 0x01020304}).decrypt(out)
    assert ei.value.code == "udp-wrong-port"
    with pytest.raises(AuthenticationError):
        Decryptor(master_keys=(MK0, None), udp_dport=4000).decrypt(out)
    r = Decryptor(master_keys=(MK0, None), udp_dport=4000, kdf_labels={0: 0x01020304}).decrypt(out)
    assert r.packet == pkt and r.header.sample and r.header.drop


def test_udp_checksum_option():
    enc, _ = enc_dec(0, crypt_offset=1)
    out = bytearray(enc.encrypt(udp4(33)))
    assert out[26:28] == b"\0\0"
    out[26:28] = b"\x12\x34"  # wrong, non-zero
    strict = Decryptor(keys={SPI: KEY16}, check_udp_checksum=True)
    lax = Decryptor(keys={SPI: KEY16})
    assert lax.decrypt(bytes(out)).packet == udp4(33)
    with pytest.raises(MalformedPacketError) as ei:
        strict.decrypt(bytes(out))
    assert ei.value.code == "udp-bad-checksum"
    out[26:28] = b"\0\0"
    c = 0xFFFF ^ _csum(V4_SRC + V4_DST + struct.pack("!HH", 17, len(out) - 20) + bytes(out[20:]))
    out[26:28] = struct.pack("!H", c or 0xFFFF)
    assert strict.decrypt(bytes(out)).packet == udp4(33)


def test_versions_filter():
    enc, _ = enc_dec(1)
    out = enc.encrypt(udp4())
    dec = Decryptor(keys={SPI: KEY32}, versions=[0, 2])
    with pytest.raises(UnsupportedVersionError) as ei:
        dec.decrypt(out)
    assert ei.value.code == "psp-version-disabled"
    assert Decryptor(keys={SPI: KEY32}, versions=[1]).decrypt(out).packet == udp4()


# --------------------------------------------------------------------------- batches


def _mixed_packets(n: int = 24):
    makers = [udp4, udp6, tcp4, tcp6]
    return [makers[i % 4](20 + 7 * i, seed=i) for i in range(n)]


@pytest.mark.parametrize("version", range(4))
@pytest.mark.parametrize("mode,co,vc", [("transport", 0, None), ("transport", 1, b"12345678"), ("tunnel", 0, b"abcdefgh")])
def test_encrypt_batch_equals_per_packet(version, mode, co, vc):
    co = 0 if version >= 2 else co
    a = Encryptor(spi=SPI, key=key_for(version), version=version, mode=mode, crypt_offset=co, vc=vc, first_iv=77)
    b = Encryptor(spi=SPI, key=key_for(version), version=version, mode=mode, crypt_offset=co, vc=vc, first_iv=77)
    pkts = _mixed_packets()
    batch = a.encrypt_batch(pkts)
    assert batch == [b.encrypt(p) for p in pkts]
    assert a.next_iv() == b.next_iv() == 77 + len(pkts)
    assert a.encrypt_batch([]) == [] and a.next_iv() == 77 + len(pkts)


@pytest.mark.parametrize("co", [0, 1, 2, 3])
def test_decrypt_batch_equals_per_packet(co):
    # co < 2 with a VC: the VC travels (partly) encrypted; the header must still show the sent VC.
    enc, dec = enc_dec(0, crypt_offset=co, vc=b"\x01\x02\x03\x04\x05\x06\x07\x08")
    outs = enc.encrypt_batch(_mixed_packets())
    batch = dec.decrypt_batch(outs)
    single = [dec.decrypt(o) for o in outs]
    assert [r.packet for r in batch] == [r.packet for r in single] == _mixed_packets()
    assert batch == single


def test_decrypt_batch_opens_each_packet_once(monkeypatch):
    # A VC decrypted in the receiver's work buffer is copied out by the batch itself: no packet is
    # decrypted a second time to show it (distinct VCs per packet, so a stale buffer would show).
    pkts = _mixed_packets()
    outs = []
    for i, p in enumerate(pkts):
        enc, dec = enc_dec(0, crypt_offset=1, vc=bytes([i]) * 8)
        outs.append(enc.encrypt(p))
    calls = []
    real = Decryptor.decrypt
    monkeypatch.setattr(Decryptor, "decrypt", lambda self, p: calls.append(p) or real(self, p))
    batch = dec.decrypt_batch(outs)
    assert not calls
    assert [r.header.vc for r in batch] == [bytes([i]) * 8 for i in range(len(pkts))]
    assert [r.packet for r in batch] == pkts


def test_encrypt_batch_failure_raises_with_earlier_results():
    enc = Encryptor(spi=SPI, key=KEY16)
    frag = ipv4(17, udp_segment(1, 2, b"x" * 20), flags=0x2000)
    pkts = [udp4(10), tcp6(10), frag, udp4(12)]
    with pytest.raises(MalformedPacketError) as ei:
        enc.encrypt_batch(pkts)
    assert ei.value.code == "ip-fragment" and "packet 2" in str(ei.value)
    assert len(ei.value.results) == 2
    dec = Decryptor(keys={SPI: KEY16})
    assert [dec.decrypt(r).packet for r in ei.value.results] == pkts[:2]


def test_decrypt_batch_failures_in_their_slots():
    enc, dec = enc_dec(0, crypt_offset=1)
    good = [enc.encrypt(p) for p in _mixed_packets(6)]
    tampered = bytearray(good[1])
    tampered[-1] ^= 1
    other = Encryptor(spi=SPI + 1, key=KEY16).encrypt(udp4())
    v7 = bytearray(good[4])
    v7[psp_offset(good[4]) + 3] = 7 << 2 | 1
    short = bytearray(good[0][:28 + 20])
    short[2:4] = struct.pack("!H", len(short))
    short[10:12] = b"\0\0"
    short[10:12] = struct.pack("!H", 0xFFFF ^ _csum(bytes(short[:20])))
    short[24:26] = struct.pack("!H", len(short) - 20)
    packets = [good[0], bytes(tampered), tcp4(), other, bytes(v7), bytes(short), udp6(), good[5], b"", b"\x99" * 30]
    res = dec.decrypt_batch(packets)
    assert len(res) == len(packets)
    expect = [
        None, (AuthenticationError, "authentication-failed"), (NotPspError, "not-udp"), (NoKeyError, "no-key"),
        (UnsupportedVersionError, "psp-unsupported-version"), (TruncatedPacketError, "psp-truncated"),
        (NotPspError, "udp-wrong-port"), None, (TruncatedPacketError, "ip-truncated"),
        (MalformedPacketError, "ip-bad-version"),
    ]
    for i, (r, e) in enumerate(zip(res, expect)):
        if e is None:
            assert isinstance(r, Decrypted) and r == dec.decrypt(packets[i])
        else:
            assert isinstance(r, e[0]) and isinstance(r, PspError), (i, r)
            assert r.code == e[1] and str(r)
            with pytest.raises(e[0]) as ei:
                dec.decrypt(packets[i])
            assert ei.value.code == r.code


# --------------------------------------------------------------------------- key table


def test_decryptor_key_table_before_master_keys():
    pkt = tcp4(60)
    derived = Encryptor(spi=SPI, master_keys=(MK0, MK1)).encrypt(pkt)
    own = Encryptor(spi=SPI, key=KEY16).encrypt(pkt)
    dec = Decryptor(master_keys=(MK0, MK1), keys={SPI: KEY16})
    assert dec.decrypt(own).packet == pkt
    with pytest.raises(AuthenticationError):
        dec.decrypt(derived)  # the table's key wins for (SPI, v0)
    # a (spi, version) entry only covers that version: v1 falls back to the master key
    dec = Decryptor(master_keys=(MK0, MK1), keys={(SPI, 0): KEY16})
    v1 = Encryptor(spi=SPI, master_keys=(MK0, MK1), version=1).encrypt(pkt)
    assert dec.decrypt(v1).packet == pkt
    # an int key serves the GCM and the GMAC version of its length; (spi, None) is the same
    for keys in ({SPI: KEY16}, {(SPI, None): KEY16}):
        dec = Decryptor(keys=keys)
        assert dec.decrypt(Encryptor(spi=SPI, key=KEY16, version=2).encrypt(pkt)).packet == pkt
        with pytest.raises(NoKeyError) as ei:
            dec.decrypt(Encryptor(spi=SPI, key=KEY32, version=1).encrypt(pkt))
        assert ei.value.code == "no-key"
    # (spi, 2) does not serve version 0
    dec = Decryptor(keys={(SPI, 2): KEY16})
    with pytest.raises(NoKeyError):
        dec.decrypt(own)
    # keys for several SPIs, both key phases
    dec = Decryptor(keys={1: KEY16, 0x80000001: KEY32, (7, 3): KEY32})
    for spi, key, ver in [(1, KEY16, 0), (0x80000001, KEY32, 1), (7, KEY32, 3)]:
        assert dec.decrypt(Encryptor(spi=spi, key=key, version=ver).encrypt(pkt)).header.spi == spi


def test_master_key_phase_selects_the_key():
    pkt = udp4()
    for spi in (0x12345678, 0x9A345678):
        out = Encryptor(spi=spi, master_keys=(MK0, MK1)).encrypt(pkt)
        assert Decryptor(master_keys=(MK0, MK1)).decrypt(out).header.key_phase == spi >> 31
        assert Decryptor(keys={spi: derive_key(MK1 if spi >> 31 else MK0, spi, 0)}).decrypt(out).packet == pkt
        missing = (MK0, None) if spi >> 31 else (None, MK1)
        with pytest.raises(NoKeyError):
            Decryptor(master_keys=missing).decrypt(out)


# --------------------------------------------------------------------------- threads


def test_threads_share_one_encryptor_ivs_distinct():
    enc = Encryptor(spi=SPI, key=KEY16)
    pkt = udp4(30)
    results: list = [None] * 4
    errors: list = []

    def work(t: int) -> None:
        try:
            out = []
            for i in range(2000):
                c = enc.encrypt(pkt) if i % 50 else enc.encrypt_batch([pkt, pkt])[0]
                out.append(struct.unpack("!Q", c[28 + 8 : 28 + 16])[0])
            results[t] = out
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ivs = [iv for r in results for iv in r]
    assert len(ivs) == 8000 and len(set(ivs)) == 8000
    for r in results:
        assert r == sorted(r)  # each thread sees its own IVs increase
    batches = 4 * 40  # each batch call spent two IVs
    assert enc.next_iv() == 1 + 8000 + batches


def test_threads_share_one_decryptor():
    enc, dec = enc_dec(1)
    outs = [enc.encrypt(p) for p in _mixed_packets(40)]
    bad: list = []

    def work() -> None:
        for _ in range(25):
            for o, p in zip(outs, _mixed_packets(40)):
                if dec.decrypt(o).packet != p:
                    bad.append(o)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "cls",
    [
        AuthenticationError, CaptureError, ConfigurationError, IvExhaustedError, KeyFileError,
        MalformedPacketError, NoKeyError, NotPspError, PacketTooLargeError, TruncatedPacketError,
        UnsupportedVersionError,
    ],
)
def test_every_error_is_a_psp_error(cls):
    assert issubclass(cls, PspError) and issubclass(cls, CoreError) and issubclass(cls, Exception)
    e = cls("message", "some-code")
    assert e.code == "some-code" and str(e) == "message"


def test_error_hierarchy_relations():
    assert issubclass(TruncatedPacketError, MalformedPacketError)
    assert issubclass(NotPspError, MalformedPacketError)
    assert issubclass(ConfigurationError, ValueError)
    assert not issubclass(AuthenticationError, MalformedPacketError)
    assert not issubclass(UnsupportedVersionError, MalformedPacketError)
    assert not issubclass(NoKeyError, MalformedPacketError)
    import pecore.capture
    import pecore.keys

    assert issubclass(CaptureError, pecore.capture.CaptureError)
    assert issubclass(KeyFileError, pecore.keys.KeyFileError)
    assert set(pypsp.__all__) >= {
        "PspError", "AuthenticationError", "NoKeyError", "UnsupportedVersionError", "TruncatedPacketError",
        "MalformedPacketError", "NotPspError", "ConfigurationError", "IvExhaustedError", "PacketTooLargeError",
    }


def test_errors_raised_by_decrypt():
    enc, dec = enc_dec(0, crypt_offset=1)
    out = enc.encrypt(udp4())
    with pytest.raises(AuthenticationError) as ei:
        Decryptor(keys={SPI: bytes(16)}).decrypt(out)
    assert ei.value.code == "authentication-failed"
    with pytest.raises(NoKeyError) as ei:
        Decryptor(keys={SPI + 1: KEY16}).decrypt(out)
    assert ei.value.code == "no-key"
    with pytest.raises(NoKeyError):
        Decryptor(master_keys=(None, MK1)).decrypt(out)
    v5 = bytearray(out)
    v5[31] = 5 << 2 | 1
    with pytest.raises(UnsupportedVersionError) as ei:
        dec.decrypt(bytes(v5))
    assert ei.value.code == "psp-unsupported-version"
    cut = bytearray(out[:28 + 31])
    cut[2:4] = struct.pack("!H", len(cut))
    cut[10:12] = struct.pack("!H", 0xFFFF ^ _csum(bytes(cut[:10]) + b"\0\0" + bytes(cut[12:20])))
    cut[24:26] = struct.pack("!H", len(cut) - 20)
    with pytest.raises(TruncatedPacketError) as ei:
        dec.decrypt(bytes(cut))
    assert ei.value.code == "psp-truncated" and isinstance(ei.value, MalformedPacketError)
    with pytest.raises(NotPspError) as ei:
        dec.decrypt(tcp4())
    assert ei.value.code == "not-udp" and isinstance(ei.value, MalformedPacketError)
    with pytest.raises(NotPspError) as ei:
        dec.decrypt(udp4(dport=1001))
    assert ei.value.code == "udp-wrong-port"
    with pytest.raises(NotPspError):
        dec.decrypt(udp6(dport=53))
    with pytest.raises(TruncatedPacketError) as ei:
        dec.decrypt(out[:10])
    assert ei.value.code == "ip-truncated"
    with pytest.raises(MalformedPacketError) as ei:
        dec.decrypt(out[:-1])
    assert ei.value.code == "ip-bad-length"
    with pytest.raises(TruncatedPacketError) as ei:
        dec.open(out[28:40])
    assert ei.value.code == "psp-truncated"


def test_packet_too_large():
    big = ipv4(17, udp_segment(1, 2, bytes(65535 - 28)))
    assert len(big) == 65535
    with pytest.raises(PacketTooLargeError) as ei:
        Encryptor(spi=1, key=KEY16).encrypt(big)
    assert ei.value.code == "ip-too-long"
    fits = ipv4(17, udp_segment(1, 2, bytes(65535 - 28 - 40)))
    out = Encryptor(spi=1, key=KEY16).encrypt(fits)
    assert len(out) == 65535
    assert Decryptor(keys={1: KEY16}).decrypt(out).packet == fits
