"""Malformed PSP input through pypsp: every rejection is a specific PspError
subclass with a specific code (psp.md §7), in the decoder's order, and no
error message ever carries key material.

The main test seals a valid packet for every version, mode, IP version and
VC choice, then cuts the IP packet at every length.  The IP and UDP length
fields are fixed up after each cut so that the packet stays consistent at the
IP/UDP layer and the PSP checks are what rejects it.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import pytest

import pypsp

from pecore.protocol import checksum
from pypsp import (
    AuthenticationError,
    ConfigurationError,
    Decrypted,
    Decryptor,
    Encryptor,
    MalformedPacketError,
    NoKeyError,
    NotPspError,
    PacketTooLargeError,
    PspError,
    TruncatedPacketError,
    UnsupportedVersionError,
    derive_key,
)

MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
KEY16 = bytes.fromhex("c0ffee00112233445566778899aabbcc")
KEY32 = bytes.fromhex("d00dfeed" * 8)
SPI = 0x1A345678
SECRETS = [KEY16, KEY32, MK0, MK1] + [derive_key(mk, SPI, v) for mk in (MK0, MK1) for v in range(4)]

V4_SRC, V4_DST = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
V6_SRC, V6_DST = bytes(15) + b"\x01", bytes(15) + b"\x02"


def _csum(data: bytes) -> int:
    """The one's-complement sum folded to 16 bits (not complemented), from the core's checksum."""
    return 0xFFFF ^ checksum(data)


def _ipv4_checksum(hdr: bytearray) -> None:
    hdr[10:12] = b"\0\0"
    hdr[10:12] = struct.pack("!H", 0xFFFF ^ _csum(bytes(hdr[: (hdr[0] & 15) * 4])))


def ipv4(proto: int, payload: bytes, flags: int = 0x4000) -> bytes:
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 7, flags, 64, proto, 0, V4_SRC, V4_DST))
    _ipv4_checksum(h)
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64, V6_SRC, V6_DST) + payload


def udp_seg(n: int, sport: int = 4321, dport: int = 8765, seed: int = 0) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + n, 0) + bytes((seed + i) & 0xFF for i in range(n))


def tcp_seg(n: int, seed: int = 0) -> bytes:
    return struct.pack("!HHIIBBHHH", 443, 50123, 1, 0, 0x50, 0x18, 512, 0, 0) + bytes((seed + i) & 0xFF for i in range(n))


def key_for(version: int) -> bytes:
    return KEY16 if version in (0, 2) else KEY32


def decryptor(**kw) -> Decryptor:
    return Decryptor(keys={SPI: KEY16, (SPI, 1): KEY32, (SPI, 3): KEY32}, **kw)


ERRORS: list = []  # every error seen, for the no-secrets check at the end


def expect_error(fn, *args):
    with pytest.raises(PspError) as ei:
        fn(*args)
    ERRORS.append(ei.value)
    return ei.value


def assert_error(err: PspError, cls: type, code: str, where: str = "") -> None:
    assert type(err) is cls, f"{where}: {type(err).__name__} ({err.code}), want {cls.__name__} ({code})"
    assert err.code == code, f"{where}: code {err.code!r}, want {code!r}"
    assert str(err).strip(), f"{where}: empty message"


# --------------------------------------------------------------------------- sealed packets

CASES = [
    (version, mode, ipv, vc)
    for version in range(4)
    for mode in ("transport", "tunnel")
    for ipv in (4, 6)
    for vc in (False, True)
]


def crypt_offset(version: int, mode: str, ipv: int, vc: bool) -> int:
    if version >= 2:
        return 0
    base = 1 if mode == "transport" else (6 if ipv == 4 else 11)
    return base + (2 if vc else 0)


def sealed(version: int, mode: str, ipv: int, vc: bool):
    """A valid outer packet, its inner packet, and the SA parameters."""
    co = crypt_offset(version, mode, ipv, vc)
    seg = tcp_seg(60, version) if version % 2 else udp_seg(60, seed=version)
    proto = 6 if version % 2 else 17
    inner = ipv4(proto, seg) if ipv == 4 else ipv6(proto, seg)
    enc = Encryptor(spi=SPI, key=key_for(version), version=version, mode=mode, crypt_offset=co,
                    vc=bytes(range(0xA0, 0xA8)) if vc else None)
    return enc.encrypt(inner), inner, co


def cut_consistent(pkt: bytes, n: int) -> bytes:
    """pkt[:n] with the IP and UDP lengths (and the IPv4 header checksum) made to agree with n."""
    t = bytearray(pkt[:n])
    ih = 20 if pkt[0] >> 4 == 4 else 40
    if n >= ih:
        if ih == 20:
            t[2:4] = struct.pack("!H", n)
            _ipv4_checksum(t)
        else:
            t[4:6] = struct.pack("!H", n - 40)
    if n >= ih + 8:
        t[ih + 4 : ih + 6] = struct.pack("!H", n - ih)
    return bytes(t)


def expected_psp(psp_len: int, vc: bool, co: int):
    """§7 checks 2, 5, 6, 8 for a PSP part of psp_len octets cut from a valid one."""
    if psp_len < 32:
        return TruncatedPacketError, "psp-truncated"
    if (24 if vc else 16) + 16 > psp_len:
        return MalformedPacketError, "psp-bad-hdr-ext-len"
    if co * 4 > psp_len - 32:
        return MalformedPacketError, "psp-crypt-offset-past-payload"
    return AuthenticationError, "authentication-failed"


def expected_cut(n: int, ih: int, vc: bool, co: int):
    if n < ih:
        return TruncatedPacketError, "ip-truncated"
    if n < ih + 8:
        return TruncatedPacketError, "udp-truncated"
    return expected_psp(n - ih - 8, vc, co)


@pytest.mark.parametrize("version,mode,ipv,vc", CASES)
def test_truncated_at_every_length(version, mode, ipv, vc):
    out, inner, co = sealed(version, mode, ipv, vc)
    dec = decryptor()
    assert dec.decrypt(out).packet == inner
    ih = 20 if ipv == 4 else 40  # the outer header has the inner's version (no tunnel template)
    seen = set()
    cuts = [cut_consistent(out, n) for n in range(len(out))]
    for n, pkt in enumerate(cuts):
        cls, code = expected_cut(n, ih, vc, co)
        err = expect_error(dec.decrypt, pkt)
        assert_error(err, cls, code, f"cut at {n}/{len(out)}")
        seen.add(code)
        # as cut, without the fix-up: the IP length field overstates the packet
        err = expect_error(dec.decrypt, out[:n])
        if n < ih:
            assert_error(err, TruncatedPacketError, "ip-truncated", f"raw cut at {n}")
        else:
            assert_error(err, MalformedPacketError, "ip-bad-length", f"raw cut at {n}")
    # every stage of the decoder was reached
    want = {"ip-truncated", "udp-truncated", "psp-truncated", "authentication-failed"}
    if vc:
        want.add("psp-bad-hdr-ext-len")
    if co:
        want.add("psp-crypt-offset-past-payload")
    assert want <= seen
    # the batch path agrees packet by packet
    for n, r in enumerate(dec.decrypt_batch(cuts)):
        assert isinstance(r, PspError) and (type(r), r.code) == expected_cut(n, ih, vc, co), n
        ERRORS.append(r)


@pytest.mark.parametrize("version,mode,ipv,vc", CASES[::3])
def test_bare_psp_truncated_at_every_length(version, mode, ipv, vc):
    out, inner, co = sealed(version, mode, ipv, vc)
    ih = 20 if ipv == 4 else 40
    psp = out[ih + 8 :]
    dec = decryptor()
    r = dec.open(psp)
    assert r.packet == (inner if mode == "tunnel" else inner[20 if ipv == 4 else 40 :])
    for n in range(len(psp)):
        cls, code = expected_psp(n, vc, co)
        assert_error(expect_error(dec.open, psp[:n]), cls, code, f"psp cut at {n}")


# --------------------------------------------------------------------------- header fields


def _patched(out: bytes, ih: int, **octets) -> bytes:
    t = bytearray(out)
    for k, v in octets.items():
        t[ih + 8 + int(k[1:])] = v(t[ih + 8 + int(k[1:])]) if callable(v) else v
    return bytes(t)


@pytest.mark.parametrize("version,mode,ipv,vc", CASES)
def test_header_field_rejections(version, mode, ipv, vc):
    out, inner, co = sealed(version, mode, ipv, vc)
    ih = 20 if ipv == 4 else 40
    psp_len = len(out) - ih - 8
    dec = decryptor()

    def check(pkt, cls, code, what):
        assert_error(expect_error(dec.decrypt, pkt), cls, code, what)
        assert_error(expect_error(dec.open, pkt[ih + 8 :]), cls, code, what + " (open)")

    check(_patched(out, ih, o3=lambda b: b & 0xFE), MalformedPacketError, "psp-always-one-bit-clear", "always-1")
    for v in range(4, 16):
        check(_patched(out, ih, o3=lambda b: (b & 0xC3) | v << 2), UnsupportedVersionError, "psp-unsupported-version", f"v{v}")
    check(_patched(out, ih, o1=0), MalformedPacketError, "psp-bad-hdr-ext-len", "hdr ext len 0")
    check(_patched(out, ih, o1=255), MalformedPacketError, "psp-bad-hdr-ext-len", "hdr ext len 255")
    check(_patched(out, ih, o1=psp_len // 8 - 1), MalformedPacketError, "psp-bad-hdr-ext-len", "no room for the ICV")
    check(_patched(out, ih, o1=1, o3=lambda b: b | 2), MalformedPacketError, "psp-vc-without-room", "V with 1")
    check(_patched(out, ih, o2=lambda b: b | 63), MalformedPacketError, "psp-crypt-offset-past-payload", "co 63")
    # the offset exactly at the end of the payload is legal: the ICV decides
    check(_patched(out, ih, o2=(psp_len - 32) // 4), AuthenticationError, "authentication-failed", "co at end")
    # order: always-1 before version, version before the header length
    check(_patched(out, ih, o1=0, o3=0x3C), MalformedPacketError, "psp-always-one-bit-clear", "order 1")
    check(_patched(out, ih, o1=0, o3=0x3D), UnsupportedVersionError, "psp-unsupported-version", "order 2")
    # R, S, D, Next Header, SPI LSB, IV, payload, ICV: all authenticated
    for what, patch in [
        ("R", dict(o2=lambda b: b ^ 0x80)), ("S", dict(o3=lambda b: b ^ 0x80)), ("D", dict(o3=lambda b: b ^ 0x40)),
        ("NH", dict(o0=lambda b: b ^ 0x10)), ("IV", dict(o15=lambda b: b ^ 1)), ("payload", {f"o{psp_len - 17}": lambda b: b ^ 1}),
        ("ICV", {f"o{psp_len - 1}": lambda b: b ^ 0x80}), ("first payload octet", dict(o16=lambda b: b ^ 4)),
    ]:
        check(_patched(out, ih, **patch), AuthenticationError, "authentication-failed", what)
    check(_patched(out, ih, o7=lambda b: b ^ 1), NoKeyError, "no-key", "SPI")
    # disabled version
    other = [v for v in range(4) if v != version]
    err = expect_error(decryptor(versions=other).decrypt, out)
    assert_error(err, pypsp.VersionDisabledError, "psp-version-disabled", "disabled")
    assert isinstance(err, UnsupportedVersionError) and isinstance(err, pypsp.PolicyError) and err.category == "policy"


@pytest.mark.parametrize("version,mode,ipv,vc", CASES[::5])
def test_every_bit_flip_is_rejected(version, mode, ipv, vc):
    out, inner, co = sealed(version, mode, ipv, vc)
    ih = 20 if ipv == 4 else 40
    dec = decryptor()
    allowed = {
        "authentication-failed", "psp-always-one-bit-clear", "psp-unsupported-version", "psp-bad-hdr-ext-len",
        "psp-vc-without-room", "psp-crypt-offset-past-payload", "no-key", "psp-version-disabled",
    }
    for i in range(ih + 8, len(out)):
        for bit in range(8):
            t = bytearray(out)
            t[i] ^= 1 << bit
            err = expect_error(dec.decrypt, bytes(t))
            assert err.code in allowed, (i, bit, err.code)
            if err.code == "authentication-failed":
                assert type(err) is AuthenticationError


def test_wrong_key_is_an_authentication_error():
    for version, mode, ipv, vc in CASES[::2]:
        out, _, _ = sealed(version, mode, ipv, vc)
        wrong = bytes(len(key_for(version)))
        err = expect_error(Decryptor(keys={(SPI, version): wrong}).decrypt, out)
        assert_error(err, AuthenticationError, "authentication-failed", f"{version} {mode} {ipv} {vc}")
        err = expect_error(Decryptor(master_keys=(MK0, MK1)).decrypt, out)
        assert_error(err, AuthenticationError, "authentication-failed", "master keys")
        err = expect_error(Decryptor(master_keys=(None, MK1)).decrypt, out)
        assert_error(err, NoKeyError, "no-key", "no master key 0")


# --------------------------------------------------------------------------- IP / UDP layer


def test_ip_and_udp_layer_rejections():
    out, inner, co = sealed(0, "transport", 4, False)
    dec = decryptor()

    def bad(mutate, cls, code):
        t = bytearray(out)
        mutate(t)
        assert_error(expect_error(dec.decrypt, bytes(t)), cls, code, code)

    bad(lambda t: t.__setitem__(0, 0x55), pypsp.NotPspError, "ip-bad-version")
    bad(lambda t: t.__setitem__(0, 0x44), MalformedPacketError, "ip-bad-header-length")
    bad(lambda t: (t.__setitem__(slice(6, 8), b"\x20\x00"), _ipv4_checksum(t)), MalformedPacketError, "ip-fragment")
    bad(lambda t: (t.__setitem__(slice(6, 8), b"\x00\x10"), _ipv4_checksum(t)), NotPspError, "not-udp")
    bad(lambda t: t.__setitem__(9, 6), NotPspError, "not-udp")
    bad(lambda t: t.__setitem__(slice(22, 24), b"\x03\xe9"), NotPspError, "udp-wrong-port")
    bad(lambda t: t.__setitem__(slice(24, 26), struct.pack("!H", len(out) - 21)), MalformedPacketError, "udp-bad-length")
    bad(lambda t: t.__setitem__(slice(24, 26), struct.pack("!H", len(out) - 19)), MalformedPacketError, "udp-bad-length")
    assert_error(expect_error(dec.decrypt, b""), TruncatedPacketError, "ip-truncated", "empty")
    assert_error(expect_error(dec.decrypt, b"\x60" + bytes(38)), TruncatedPacketError, "ip-truncated", "ipv6 short")
    assert_error(expect_error(dec.decrypt, ipv4(17, b"\x00\x01\x03")), TruncatedPacketError, "udp-truncated", "udp 3")
    # checksum checking, when enabled
    t = bytearray(out)
    t[26:28] = b"\x12\x34"
    assert decryptor().decrypt(bytes(t)).packet == inner
    assert_error(expect_error(decryptor(check_udp_checksum=True).decrypt, bytes(t)), MalformedPacketError,
                 "udp-bad-checksum", "checksum")


def test_ipv6_extension_header_errors():
    out, inner, co = sealed(0, "transport", 6, False)
    dec = decryptor()
    # A Hop-by-Hop header inserted before UDP, then made too long for the packet.
    hbh = bytes([17, 0, 1, 4, 0, 0, 0, 0])
    t = bytearray(out[:6] + b"\x00" + out[7:40] + hbh + out[40:])
    t[4:6] = struct.pack("!H", len(t) - 40)
    # the outer IP and UDP headers are not authenticated: the extension header stays, before the inner L4
    want = bytearray(inner[:6] + b"\x00" + inner[7:40] + hbh + inner[40:])
    want[4:6] = struct.pack("!H", len(want) - 40)
    assert dec.decrypt(bytes(t)).packet == bytes(want)
    t[41] = 50
    assert_error(expect_error(dec.decrypt, bytes(t)), MalformedPacketError, "ip-bad-extension-header", "hbh")
    # a real IPv6 fragment to the PSP port
    frag = bytes([17, 0, 0x00, 0x01, 0, 0, 0, 1])  # offset 0, M = 1
    t = bytearray(out[:6] + b"\x2c" + out[7:40] + frag + out[40:])
    t[4:6] = struct.pack("!H", len(t) - 40)
    assert_error(expect_error(dec.decrypt, bytes(t)), MalformedPacketError, "ip-fragment", "frag")
    # an atomic fragment (offset 0, M = 0; RFC 6946) is a whole packet: it decrypts
    t[40 + 2 : 40 + 4] = b"\x00\x00"
    want = bytearray(inner[:6] + b"\x2c" + inner[7:40] + frag[:2] + b"\x00\x00" + frag[4:] + inner[40:])
    want[4:6] = struct.pack("!H", len(want) - 40)
    assert dec.decrypt(bytes(t)).packet == bytes(want)


def test_tunnel_next_header_must_match_the_inner_packet():
    # Transport mode over IPv4 protocol 4 whose payload is an IPv6 packet: NH 4, inner version 6.
    six = ipv6(17, udp_seg(20))
    out = Encryptor(spi=SPI, key=KEY16).encrypt(ipv4(4, six))
    assert out[28] == 4
    assert_error(expect_error(decryptor().decrypt, out), MalformedPacketError, "psp-bad-mode", "nh 4 / v6")
    out = Encryptor(spi=SPI, key=KEY16).encrypt(ipv4(41, b""))
    assert_error(expect_error(decryptor().decrypt, out), MalformedPacketError, "psp-bad-mode", "nh 41 / empty")


def test_gmac_offset_past_payload_is_malformed_too():
    # §7 check 6 holds for every version; a GMAC sender uses offset 0.
    out, inner, co = sealed(2, "transport", 4, False)
    t = bytearray(out)
    t[30] = 63
    assert_error(expect_error(decryptor().decrypt, bytes(t)), MalformedPacketError, "psp-crypt-offset-past-payload", "gmac")
    t[30] = 1
    assert_error(expect_error(decryptor().decrypt, bytes(t)), AuthenticationError, "authentication-failed", "gmac co 1")


def test_configuration_errors_do_not_leak_keys():
    for kw in (
        dict(key=KEY16 + b"\x01"), dict(key=KEY16.hex() + "zz"), dict(key=KEY32, version=0),
        dict(master_keys=(MK0[:31], MK1)), dict(key=KEY16, version=2, crypt_offset=3),
    ):
        assert isinstance(expect_error(lambda: Encryptor(spi=SPI, **kw)), ConfigurationError)
    for kw in (dict(keys={SPI: KEY16[:15]}), dict(keys={SPI: KEY16, (SPI, 0): KEY16}), dict(master_keys=(MK0, MK1[:-1]))):
        assert isinstance(expect_error(lambda: Decryptor(**kw)), ConfigurationError)


def test_no_error_message_contains_key_material():
    # Runs after the tests above in this module (pytest keeps file order) and checks everything they saw;
    # it also produces a fresh sample so that it is meaningful on its own.
    out, _, _ = sealed(1, "tunnel", 6, True)
    for dec in (Decryptor(keys={SPI: KEY16}), Decryptor(master_keys=(MK0, MK1)), Decryptor(keys={(SPI, 1): bytes(32)})):
        try:
            dec.decrypt(out)
        except PspError as e:
            ERRORS.append(e)
    assert len(ERRORS) >= 3
    needles = []
    for k in SECRETS:
        needles += [k.hex(), k.hex().upper(), repr(k)[2:-1], " ".join(f"{b:02x}" for b in k)]
        needles += [k.hex()[i : i + 16] for i in range(0, len(k.hex()) - 15, 8)]  # any 8-octet run
    for e in ERRORS:
        text = " | ".join([str(e), repr(e), " ".join(map(str, e.args)), str(getattr(e, "code", ""))])
        assert str(e).strip() and e.code
        for n in needles:
            assert n not in text, f"{type(e).__name__} leaks key material: {text!r}"


# --------------------------------------------------------------------------- hostile sizes


OVERSIZE_SCRIPT = textwrap.dedent(
    """
    import gc, sys
    import pypsp
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    key = bytes(range(16)); spi = 0x1234
    n = 67000
    # Hdr Ext Len 255 (a 2048-octet header), V = 1, crypt offset 0: the VC and the whole
    # extension area are encrypted, so the receiver decrypts into its own scratch buffer.
    hdr = bytes([17, 255, 0, 0x03]) + spi.to_bytes(4, "big") + (1).to_bytes(8, "big")
    body = bytes(2032) + bytes((i * 7) & 0xFF for i in range(n - 32 - 2032))
    psp = hdr + AESGCM(key).encrypt(hdr[4:16], body, hdr)
    assert len(psp) == n
    dec = pypsp.Decryptor(keys={spi: key})
    try:
        r = dec.open(psp)
        assert r.packet == body[2032:], "wrong plaintext"
    except pypsp.PspError as e:
        assert e.code != "authentication-failed", "a valid packet failed to verify"
    del dec
    gc.collect()
    junk = [bytearray(70000) for _ in range(50)]
    dec2 = pypsp.Decryptor(keys={spi: key})
    del dec2
    gc.collect()
    print("survived")
    """
)


def test_open_of_an_oversized_psp_packet_is_memory_safe(tmp_path):
    # BUG (core/src/proto/psp.c pe_psp_open): when the crypt offset leaves part of the extension area
    # encrypted, the plaintext is rebuilt in rx->scratch (PE_IP_MAX_LEN + 64 octets) without a
    # length check, so a PSP buffer longer than that overflows the heap (glibc then aborts with
    # "double free or corruption").  Run in a child process: the overflow can take the
    # interpreter down.
    pytest.importorskip("cryptography")
    # the child imports the very build this process uses (e.g. the sanitizer build)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", OVERSIZE_SCRIPT], capture_output=True, text=True, timeout=300,
                       env=env, cwd=tmp_path)
    assert r.returncode == 0 and "survived" in r.stdout, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])


def test_oversized_inputs_are_refused_cleanly():
    dec = decryptor()
    # an IP packet cannot be longer than its length field allows; a longer buffer is padding
    out, inner, _ = sealed(0, "transport", 4, False)
    r = dec.decrypt(out + bytes(70000))
    assert isinstance(r, Decrypted) and r.packet == inner
    # a bare PSP packet too big for the output buffer
    big = bytes([17, 1, 0, 0x01]) + SPI.to_bytes(4, "big") + bytes(8) + bytes(70000)
    err = expect_error(dec.open, big)
    assert type(err) is MalformedPacketError and err.code == "psp-too-long"  # a receive-side length: malformed
