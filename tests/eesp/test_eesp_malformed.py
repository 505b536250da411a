"""Malformed EESP input through pyeesp: every rejection is a specific EespError
subclass with a specific code, in the order of docs/spec/eesp.md §16, and
no error message ever carries key material.

Packets are sealed by the core and then edited.  When a later check must be
reached, the edited packet is re-sealed with the independent model
(tests/eesp_model.py, ``seal(..., check=False)``) so that its ICV stays valid
and the one planted fault is what the receiver sees.  Truncations fix up the
IP and UDP length fields (and the IPv4 header checksum) after each cut, so the
IP/UDP layer stays consistent and the EESP checks are what reject the packet.
"""
from __future__ import annotations

import struct

import psp_model
import pytest

import eesp_model as m
import pyeesp
from pecore.protocol import checksum
from pyeesp import (
    SA,
    AuthenticationError,
    ConfigurationError,
    DummyPacketError,
    EespError,
    MalformedPacketError,
    NoSaError,
    NotEespError,
    PolicyError,
    Receiver,
    ReplayError,
    SubSaError,
    TruncatedPacketError,
    UnsupportedVersionError,
    derive_sub_sa_key,
)

KEY = bytes.fromhex("c0ffee00112233445566778899aabbcc" "5a17ed00")  # AES-128 key || salt
KEY256 = bytes.fromhex("d00dfeed" * 8) + bytes.fromhex("0badc0de")  # 32 || 4
KEY_CCM = bytes.fromhex("feedface" * 4) + bytes.fromhex("c0c0a1")  # 16 || 3
ROOT = bytes.fromhex("7e57" * 16)
SPI = 0x0A0B0C0D
SECRETS = [KEY, KEY256, KEY_CCM, ROOT, KEY[:16], KEY256[:32], KEY_CCM[:16]] + [
    derive_sub_sa_key(ROOT, sid, n) for sid in (0, 1, 2, 3, 4, 9) for n in (20, 36)
]

V4_SRC, V4_DST = bytes([192, 0, 2, 1]), bytes([192, 0, 2, 2])
V6_SRC, V6_DST = bytes.fromhex("20010db8" + "00" * 11 + "01"), bytes.fromhex("20010db8" + "00" * 11 + "02")


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


def udp(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def inner_packet(ipv: int, n: int = 45, seed: int = 0) -> bytes:
    seg = udp(4321, 8765, bytes((seed + i) & 0xFF for i in range(n)))
    return ipv4(17, seg) if ipv == 4 else ipv6(17, seg)


def wrap(eesp: bytes, ipv: int = 4, udp_encap: bool = False, proto: int = 49) -> bytes:
    """An outer IP packet carrying an EESP packet (in IP protocol `proto`, or in UDP 4500)."""
    body = udp(4500, 4500, eesp) if udp_encap else eesp
    p = 17 if udp_encap else proto
    return ipv4(p, body) if ipv == 4 else ipv6(p, body)


def ih_of(pkt: bytes) -> int:
    return 20 if pkt[0] >> 4 == 4 else 40


def eesp_of(outer: bytes, udp_encap: bool) -> bytes:
    return outer[ih_of(outer) + (8 if udp_encap else 0) :]


def cut_consistent(pkt: bytes, n: int, udp_encap: bool) -> bytes:
    """pkt[:n] with the IP and UDP lengths (and the IPv4 header checksum, the IPv6 UDP checksum) made to agree
    with n."""
    t = bytearray(pkt[:n])
    ih = ih_of(pkt)
    if n >= ih:
        if ih == 20:
            t[2:4] = struct.pack("!H", n)
            _ipv4_checksum(t)
        else:
            t[4:6] = struct.pack("!H", n - 40)
    if udp_encap and n >= ih + 8:
        t[ih + 4 : ih + 6] = struct.pack("!H", n - ih)
        if ih == 40:  # over IPv6 the UDP checksum covers the cut datagram too (eesp.md D17)
            t[46:48] = struct.pack("!H", psp_model.udp_checksum(bytes(t[8:24]), bytes(t[24:40]), bytes(t[40:])))
    return bytes(t)


ERRORS: list = []  # every error seen, for the no-secrets check at the end


def expect_error(fn, *args, **kw) -> EespError:
    with pytest.raises(EespError) as ei:
        fn(*args, **kw)
    ERRORS.append(ei.value)
    return ei.value


def assert_error(err: EespError, cls: type, code: str, where: str = "") -> None:
    assert type(err) is cls, f"{where}: {type(err).__name__} ({err.code}: {err}), want {cls.__name__} ({code})"
    assert err.code == code, f"{where}: code {err.code!r}, want {code!r}"
    assert str(err).strip(), f"{where}: empty message"


# --------------------------------------------------------------------------- configurations

SUITE_INFO = {  # name: (ENCR ID, explicit IV, ICV)
    "aes-gcm-16": (20, 8, 16), "aes-gcm-8": (18, 8, 8), "aes-ccm-8": (14, 8, 8), "aes-ccm-16": (16, 8, 16),
    "aes-gmac": (21, 8, 16), "chacha20-poly1305": (28, 8, 16), "chacha20-poly1305-iiv": (31, 0, 16),
    "aes-gcm-16-iiv": (30, 0, 16), "aes-ccm-8-iiv": (29, 0, 8),
}

# (id, SA keyword arguments, inner IP version, Sub SA)
CONFIGS = [
    ("gcm16-tunnel-v4", dict(suite="aes-gcm-16", root_key=ROOT, max_sub_sa_id=7), 4, 3),
    ("gcm16-tunnel-v6-udp", dict(suite="aes-gcm-16", key=KEY, udp_encap=True), 6, 0),
    ("ccm8-transport-v6-udp", dict(suite="aes-ccm-8", key=KEY_CCM, mode="transport", udp_encap=True), 6, 0),
    ("ccm16-transport-v4", dict(suite="aes-ccm-16", key=KEY_CCM, mode="transport"), 4, 0),
    ("gmac-transport-v4", dict(suite="aes-gmac", key=KEY256, key_bits=256, mode="transport"), 4, 0),
    ("chacha-iiv-tunnel-v6", dict(suite="chacha20-poly1305-iiv", key=KEY256), 6, 0),
    ("gcm8-full-noseq-v4-udp", dict(suite="aes-gcm-8", key=KEY, format="full", seq=False, udp_encap=True), 4, 0),
    ("gcm16-iiv-transport-v6", dict(suite="aes-gcm-16-iiv", root_key=ROOT, mode="transport"), 6, 1),
    ("chacha-linux-xfrm-v4", dict(suite="chacha20-poly1305", key=KEY256, aad="linux-xfrm", format="full"), 4, 0),
]


def make_sa(kw: dict) -> SA:
    kw = dict(kw)
    return SA(SPI, kw.pop("suite"), **kw)


def layout(kw: dict, ipv: int) -> dict:
    """Header lengths of an SA's packets per §2, §7 and D2 (carrier = inner IP version here)."""
    suite = kw["suite"]
    _, iv, icv = SUITE_INFO[suite]
    seq = 8 if kw.get("seq", True) else 0
    mode, fmt = kw.get("mode", "tunnel"), kw.get("format", "auto")
    full = fmt == "full" or (fmt == "auto" and mode == "transport")
    pih = 4 if full else 0
    opt = -(8 + seq + iv + pih) % (8 if ipv == 6 else 4)
    return dict(opt=opt, seq=seq, iv=iv, pih=pih, icv=icv, hdr=8 + opt + seq + iv)


def sealed(kw: dict, ipv: int, sid: int, n: int = 45):
    sa = make_sa(kw)
    inner = inner_packet(ipv, n)
    out = sa.encrypt(inner, sid)
    return sa, out, inner


def expected_eesp(elen: int, lay: dict):
    """§16 steps 2, 4, 7, 9 for an EESP packet of elen octets cut from a valid one."""
    if elen < 8:
        return TruncatedPacketError, "eesp-truncated"
    if elen < 8 + lay["opt"]:
        return TruncatedPacketError, "eesp-truncated"  # the Opt Len octets must be present
    if elen < lay["hdr"] + lay["pih"] + lay["icv"]:
        return TruncatedPacketError, "eesp-truncated"
    return AuthenticationError, "authentication-failed"


def expected_cut(n: int, ih: int, udp_encap: bool, lay: dict):
    if n < ih:
        return [(TruncatedPacketError, "ip-truncated")]
    if udp_encap:
        if n < ih + 8:  # the UDP header is cut: its port cannot be seen, or it is cut short
            return [(NotEespError, "not-eesp"), (TruncatedPacketError, "udp-truncated")]
        if n == ih + 8:  # an empty UDP 4500 payload: not a keepalive, not IKE, MSB 0 -> ESP (§14)
            return [(NotEespError, "esp-in-udp")]
        return [expected_eesp(n - ih - 8, lay)]
    return [expected_eesp(n - ih, lay)]


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("name,kw,ipv,sid", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_truncated_at_every_length(name, kw, ipv, sid):
    sa, out, inner = sealed(kw, ipv, sid)
    lay = layout(kw, ipv)
    udp_encap = kw.get("udp_encap", False)
    assert Receiver([make_sa(kw)]).decrypt(out).packet == inner
    rx = Receiver([make_sa(kw)])  # its windows stay empty: a cut never verifies
    ih = ih_of(out)
    payload = len(inner) if kw.get("mode", "tunnel") == "tunnel" else len(inner) - ih
    pad = -(lay["pih"] + payload) % 4
    assert len(eesp_of(out, udp_encap)) == lay["hdr"] + lay["pih"] + payload + pad + lay["icv"]
    seen = set()
    cuts = [cut_consistent(out, n, udp_encap) for n in range(len(out))]
    for n, pkt in enumerate(cuts):
        want = expected_cut(n, ih, udp_encap, lay)
        err = expect_error(rx.decrypt, pkt)
        assert (type(err), err.code) in want, f"cut at {n}/{len(out)}: {type(err).__name__} {err.code}, want {want}"
        assert str(err).strip()
        seen.add(err.code)
        # as cut, without the fix-up: the IP length field overstates the packet
        err = expect_error(rx.decrypt, out[:n])
        if n < ih:
            assert_error(err, TruncatedPacketError, "ip-truncated", f"raw cut at {n}")
        else:
            assert_error(err, MalformedPacketError, "ip-bad-length", f"raw cut at {n}")
    assert {"ip-truncated", "eesp-truncated", "authentication-failed"} <= seen
    # the batch path agrees packet by packet
    rx2 = Receiver([make_sa(kw)])
    for n, r in enumerate(rx2.decrypt_batch(cuts)):
        assert isinstance(r, EespError) and (type(r), r.code) in expected_cut(n, ih, udp_encap, lay), n
        ERRORS.append(r)
    assert rx2.decrypt(out).packet == inner  # no cut moved the replay window


@pytest.mark.parametrize("name,kw,ipv,sid", CONFIGS[:4], ids=[c[0] for c in CONFIGS[:4]])
def test_longer_than_sealed_fails_authentication(name, kw, ipv, sid):
    sa, out, inner = sealed(kw, ipv, sid)
    udp_encap = kw.get("udp_encap", False)
    for extra in (b"\0", b"\0" * 4, b"\xff" * 16):
        grown = out + extra
        t = cut_consistent(grown, len(grown), udp_encap)
        assert_error(expect_error(make_sa(kw).decrypt, t), AuthenticationError, "authentication-failed", "grown")
    # octets after the IP length are link-layer padding: ignored
    assert make_sa(kw).decrypt(out + bytes(30)).packet == inner


def test_truncated_crypt_offset_packet_follows_the_spec_order():
    # §16 step 5 (4·(PayloadOffset + CryptOffset) must not pass the end of the data before the
    # ICV) comes before step 6 (Session ID) and step 7 (length); docs/guide-eesp.md lists the codes in
    # that order too, and the model agrees.  (The core checked the Sub SA and the length first
    # until commit 2857c63.)
    kw = dict(suite="aes-gcm-16", key=KEY, crypt_offset=8, max_crypt_offset=8)
    sa = make_sa(kw)
    inner = inner_packet(4, 4)  # 32 octets: PIH + 32 = 36 = 9 units >= 8
    out = sa.encrypt(inner)
    e = eesp_of(out, False)
    # 8 + 4 (option) + 8 + 8 = 28 = 4 * PayloadOffset 7; first encrypted octet at 28 + 32 = 60
    assert e[8:12] == bytes.fromhex("02021c80") and len(e) == 28 + 36 + 16
    got = {}
    for n in range(20, len(out)):
        elen = n - 20
        if elen < 12:
            want = "eesp-truncated"
        elif 60 > elen - 16:
            want = "eesp-crypt-offset-past-payload"
        else:
            want = "authentication-failed"
        err = expect_error(make_sa(kw).decrypt, cut_consistent(out, n, False))
        if err.code != want:
            got[elen] = (err.code, want)
    # Session ID out of range and Crypt Offset past the data: step 5 first
    rooted = SA(SPI, root_key=ROOT, crypt_offset=8, max_crypt_offset=8, max_sub_sa_id=1)
    o2 = SA(SPI, root_key=ROOT, crypt_offset=8, max_crypt_offset=8).encrypt(inner, 5)
    err = expect_error(rooted.decrypt, cut_consistent(o2, len(o2) - 20, False))
    if err.code != "eesp-crypt-offset-past-payload":
        got["sub-sa"] = (err.code, "eesp-crypt-offset-past-payload")
    assert not got, got


# --------------------------------------------------------------------------- Base Header fields


@pytest.mark.parametrize("name,kw,ipv,sid", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_base_header_rejections(name, kw, ipv, sid):
    sa, out, inner = sealed(kw, ipv, sid)
    udp_encap = kw.get("udp_encap", False)
    at = ih_of(out) + (8 if udp_encap else 0)  # the first EESP octet

    def patched(**octets) -> bytes:
        t = bytearray(out)
        for k, v in octets.items():
            i = at + int(k[1:])
            t[i] = v(t[i]) if callable(v) else v
        return bytes(t)

    def check(pkt, cls, code, what):
        assert_error(expect_error(make_sa(kw).decrypt, pkt), cls, code, f"{name}: {what}")

    # the ESP-compat bit: over UDP 4500 a clear MSB is ESP (§14), over the IP protocol a bad header
    if udp_encap:
        # a first 32-bit word of zero is IKE's non-ESP marker, checked before the MSB
        e = eesp_of(out, True)
        first_word_zero = e[1:4] == b"\0\0\0"
        check(patched(o0=lambda b: b & 0x7F), NotEespError,
              "ike-non-esp-marker" if first_word_zero else "esp-in-udp", "compat bit over UDP")
        check(patched(o0=0x01), NotEespError, "esp-in-udp", "octet 0 = 1 over UDP")
        check(patched(o0=0x00, o3=0x01), NotEespError, "esp-in-udp", "a non-zero first word over UDP")
        check(patched(o0=0x00, o1=0x00, o2=0x00, o3=0x00), NotEespError, "ike-non-esp-marker", "zero word")
    else:
        check(patched(o0=lambda b: b & 0x7F), NotEespError, "eesp-compat-bit-clear", "compat bit")
    # over UDP 4500 an octet 0 that no version-0 Base Header has is an ESP SPI's (§14 step 4); over the IP
    # protocol it is a bad header
    bad_version = (NotEespError, "esp-in-udp") if udp_encap else (UnsupportedVersionError, "eesp-unsupported-version")
    bad_r = (NotEespError, "esp-in-udp") if udp_encap else (MalformedPacketError, "eesp-reserved-bits-set")
    for v in range(1, 16):
        check(patched(o0=0x80 | v << 3), *bad_version, f"version {v}")
    for r in range(1, 8):
        check(patched(o0=0x80 | r), *bad_r, f"R = {r}")
    # order within the Base Header: compat bit, version, R
    if not udp_encap:
        check(patched(o0=0x7F), NotEespError, "eesp-compat-bit-clear", "order 1")
    check(patched(o0=0xFF), *bad_version, "order 2")
    # the Base Header is checked before the SA is looked up (§16 steps 2, 3)
    check(patched(o0=0x88, o7=lambda b: b ^ 0x55), *bad_version, "v1, no SA")
    check(patched(o0=0x81, o7=lambda b: b ^ 0x55), *bad_r, "R, no SA")
    check(patched(o7=lambda b: b ^ 1), NoSaError, "eesp-no-sa", "SPI")
    check(patched(o4=lambda b: b ^ 0x80), NoSaError, "eesp-no-sa", "SPI MSB")
    # Opt Len past the end of the packet
    elen = len(out) - at
    if elen - 8 <= 255:
        check(patched(o1=elen - 8 + 1), TruncatedPacketError, "eesp-truncated", "Opt Len past the packet")
    check(patched(o1=255), TruncatedPacketError, "eesp-truncated", "Opt Len 255")
    # Session ID: above the maximum, or non-zero without Sub SAs
    if "root_key" in kw:
        if kw.get("max_sub_sa_id") is not None:
            check(patched(o2=0xFF), SubSaError, "eesp-sub-sa-out-of-range", "Session ID above max")
        check(patched(o3=lambda b: b ^ 0x04), AuthenticationError, "authentication-failed", "other Sub SA")
    else:
        check(patched(o3=lambda b: b ^ 1), SubSaError, "eesp-sub-sa-out-of-range", "Session ID without Sub SAs")
    # every octet after the options is authenticated (flipping the sequence number's last bit would
    # make it 0, a check of its own)
    lay = layout(kw, ipv)
    seq_last = 8 + lay["opt"] + 7 if lay["seq"] else -1
    for i in range(8 + lay["opt"], elen):
        if i != seq_last:
            check(patched(**{f"o{i}": lambda b: b ^ 0x01}), AuthenticationError, "authentication-failed", f"octet {i}")
    if lay["seq"]:
        check(patched(**{f"o{seq_last}": lambda b: b ^ 0x01}), MalformedPacketError, "eesp-sequence-zero", "seq 0")


@pytest.mark.parametrize("name,kw,ipv,sid", CONFIGS[::2], ids=[c[0] for c in CONFIGS[::2]])
def test_every_bit_flip_is_rejected(name, kw, ipv, sid):
    sa, out, inner = sealed(kw, ipv, sid, n=20)
    udp_encap = kw.get("udp_encap", False)
    at = ih_of(out) + (8 if udp_encap else 0)
    allowed = {
        "authentication-failed", "eesp-compat-bit-clear", "esp-in-udp", "ike-non-esp-marker", "eesp-unsupported-version",
        "eesp-reserved-bits-set", "eesp-no-sa", "eesp-truncated", "eesp-options-overrun",
        "eesp-bad-crypt-offset-option", "eesp-sub-sa-out-of-range", "eesp-sequence-zero",
        "eesp-bad-payload-offset", "eesp-crypt-offset-past-payload", "replay-duplicate", "replay-too-old",
        "eesp-crypt-offset-not-allowed",
    }
    # EESP's own checks, with the UDP checksum left alone; an endpoint's receiver (the default) refuses every
    # flip over IPv6/UDP at the checksum already (RFC 8200 §8.1: a single bit always changes the sum; D17)
    rx = Receiver([make_sa(kw)], check_udp_checksum=False)
    endpoint = Receiver([make_sa(kw)]) if udp_encap and out[0] >> 4 == 6 else None
    for i in range(at, len(out)):
        for bit in range(8):
            t = bytearray(out)
            t[i] ^= 1 << bit
            err = expect_error(rx.decrypt, bytes(t))
            assert err.code in allowed, (i - at, bit, err.code)
            assert isinstance(err, ERROR_TYPES[err.code]), (i - at, bit, err.code)
            if endpoint is not None:
                assert expect_error(endpoint.decrypt, bytes(t)).code == "udp-bad-checksum", (i - at, bit)
    assert rx.decrypt(out).packet == inner  # none of them moved the window


ERROR_TYPES = {
    "authentication-failed": AuthenticationError, "eesp-compat-bit-clear": NotEespError, "esp-in-udp": NotEespError,
    "ike-non-esp-marker": NotEespError,
    "eesp-unsupported-version": UnsupportedVersionError, "eesp-reserved-bits-set": MalformedPacketError,
    "eesp-no-sa": NoSaError, "eesp-truncated": TruncatedPacketError, "eesp-options-overrun": MalformedPacketError,
    "eesp-bad-crypt-offset-option": MalformedPacketError, "eesp-sub-sa-out-of-range": SubSaError,
    "eesp-sequence-zero": MalformedPacketError, "eesp-bad-payload-offset": MalformedPacketError,
    "eesp-crypt-offset-past-payload": MalformedPacketError, "replay-duplicate": ReplayError,
    "replay-too-old": ReplayError, "eesp-crypt-offset-not-allowed": PolicyError,
}


# --------------------------------------------------------------------------- re-sealed packets

INNER = inner_packet(4, 24)  # 52 octets


def model_sa(**kw) -> m.SA:
    base = dict(spi=SPI, encr_id=20, keymat=KEY, align_options=False)
    base.update(kw)
    return m.SA(**base)


def reseal(msa: m.SA, payload: bytes = INNER, *, next_header: int = 4, seq: int = 1, **kw) -> bytes:
    """An outer IPv4 packet (protocol 49) around an EESP packet sealed by the model, ICV valid."""
    return wrap(m.seal(msa, payload, next_header=next_header, seq=seq if msa.seq else None,
                       iv=None if msa.seq else seq, check=False, **kw))


def test_model_reseal_matches_the_core():
    # the helper seals what the core seals, so a planted fault is the only difference
    core = SA(SPI, key=KEY, align_options=False)
    out = core.encrypt(INNER)
    assert eesp_of(out, False) == eesp_of(reseal(model_sa()), False)
    assert SA(SPI, key=KEY).decrypt(reseal(model_sa())).packet == INNER


@pytest.mark.parametrize(
    "options,code",
    [
        (b"\x01\x05\x00\x00", "eesp-options-overrun"),  # PadN claims 5 data octets, Opt Len gives 2
        (b"\x00\x00\x00\x01", "eesp-options-overrun"),  # a type octet with no room for its length
        (b"\xc8\x03\xab", "eesp-options-overrun"),
        (b"\x02\x00", "eesp-bad-crypt-offset-option"),  # Crypt Offset Opt Data Len 0 (D3)
        (b"\x02\x01\x1c\x00", "eesp-bad-crypt-offset-option"),  # Opt Data Len 1
        (b"\x02\x03\x1c\x80\x00\x00", "eesp-bad-crypt-offset-option"),  # Opt Data Len 3
        (b"\x02\x04\x1c\x80\x00\x00", "eesp-bad-crypt-offset-option"),  # Opt Data Len 4 (the stale Fig. 19)
    ],
)
def test_bad_options(options, code):
    pkt = reseal(model_sa(), options=options)
    rx = SA(SPI, key=KEY, max_crypt_offset=63)
    assert_error(expect_error(rx.decrypt, pkt), MalformedPacketError, code, options.hex())
    # the options are checked before the Sub SA and the ICV: a wrong key changes nothing
    assert_error(expect_error(SA(SPI, key=KEY256[:20]).decrypt, pkt), MalformedPacketError, code, "wrong key")


def test_two_crypt_offset_options():
    # D13: a second Crypt Offset option in one packet is malformed, even when both agree
    for opts in (b"\x02\x02\x20\x00\x02\x02\x20\x00", b"\x02\x02\x20\x00\x00\x00\x02\x02\x20\x00"):
        pkt = reseal(model_sa(max_crypt_offset=63), options=opts)
        err = expect_error(SA(SPI, key=KEY, max_crypt_offset=63).decrypt, pkt)
        assert_error(err, MalformedPacketError, "eesp-bad-crypt-offset-option", opts.hex())


def test_payload_offset_mismatch():
    # The sender's option says PayloadOffset = header length / 4; any other value is malformed.
    msa = model_sa(max_crypt_offset=63, align_options=True)
    good = reseal(msa, crypt_offset=1)
    rx = SA(SPI, key=KEY, max_crypt_offset=63)
    r = rx.decrypt(good)
    assert r.packet == INNER and r.header.crypt_offset_option.payload_offset == 7
    assert eesp_of(good, False)[8:12] == bytes.fromhex("02021c10")  # 28 octets = 7 units, CryptOffset 1
    for po in (0, 1, 6, 8, 63):
        bad = m.seal(msa, INNER, next_header=4, seq=2, check=False, crypt_offset=1)
        bad = bad[:10] + struct.pack("!H", po << 10 | 1 << 4) + bad[12:]  # ICV now wrong: the check comes first
        err = expect_error(SA(SPI, key=KEY, max_crypt_offset=63).decrypt, wrap(bad))
        assert_error(err, MalformedPacketError, "eesp-bad-payload-offset", f"PayloadOffset {po}")
    # with a valid ICV: a Crypt Offset option of CryptOffset 0 given as a raw option to a full-format
    # model SA (the model then seals exactly what the option describes, except its PayloadOffset)
    full = model_sa(format="full", max_crypt_offset=63)
    for po, ok in ((7, True), (6, False), (8, False), (0, False)):
        pkt = reseal(full, options=b"\x02\x02" + struct.pack("!H", po << 10))
        if ok:
            assert SA(SPI, key=KEY, max_crypt_offset=63).decrypt(pkt).packet == INNER
        else:
            err = expect_error(SA(SPI, key=KEY, max_crypt_offset=63).decrypt, pkt)
            assert_error(err, MalformedPacketError, "eesp-bad-payload-offset", f"valid ICV, PayloadOffset {po}")


def test_crypt_offset_past_the_data():
    msa = model_sa(max_crypt_offset=63)
    good = m.seal(msa, INNER, next_header=4, seq=1, crypt_offset=2)
    hdr_len, icv = 28, 16
    data = len(good) - icv - hdr_len  # PIH + inner + padding
    rx = SA(SPI, key=KEY, max_crypt_offset=63)
    assert rx.decrypt(wrap(good)).packet == INNER
    for co in (data // 4 + 1, 40, 63):
        bad = good[:10] + struct.pack("!H", 7 << 10 | co << 4) + good[12:]
        err = expect_error(SA(SPI, key=KEY, max_crypt_offset=63).decrypt, wrap(bad))
        assert_error(err, MalformedPacketError, "eesp-crypt-offset-past-payload", f"CryptOffset {co}")
    # exactly at the end of the data: legal framing, the ICV decides
    at_end = good[:10] + struct.pack("!H", 7 << 10 | (data // 4) << 4) + good[12:]
    err = expect_error(SA(SPI, key=KEY, max_crypt_offset=63).decrypt, wrap(at_end))
    assert_error(err, AuthenticationError, "authentication-failed", "at end")


def test_crypt_offset_into_the_padding_is_malformed_after_decryption():
    # D16 on receive: 4·CryptOffset may not exceed PIH + payload.  Sealed validly by the model with
    # 3 octets of padding and a Crypt Offset covering them.
    msa = model_sa(max_crypt_offset=63)
    payload = inner_packet(4, 1)  # 29 octets: PIH + 29 = 33, padded to 36
    pkt = wrap(m.seal(msa, payload, next_header=4, seq=1, crypt_offset=9, check=False))
    err = expect_error(SA(SPI, key=KEY, max_crypt_offset=63).decrypt, pkt)
    assert_error(err, MalformedPacketError, "eesp-crypt-offset-past-payload", "D16")
    ok = wrap(m.seal(msa, payload, next_header=4, seq=2, crypt_offset=8, check=False))
    assert SA(SPI, key=KEY, max_crypt_offset=63).decrypt(ok).packet == payload


def test_crypt_offset_not_allowed_reports_icv_validity():
    msa = model_sa(max_crypt_offset=63)
    genuine = reseal(msa, crypt_offset=3)
    for rx, what in [(SA(SPI, key=KEY), "none announced"), (SA(SPI, key=KEY, max_crypt_offset=2), "above max")]:
        err = expect_error(rx.decrypt, genuine)
        assert_error(err, PolicyError, "eesp-crypt-offset-not-allowed", what)
        assert err.icv_valid is True
        t = bytearray(genuine)
        t[-5] ^= 0x20
        err = expect_error(rx.decrypt, bytes(t))
        assert_error(err, PolicyError, "eesp-crypt-offset-not-allowed", what + ", tampered")
        assert err.icv_valid is False
    # a disallowed option never moved the window: an allowing receiver still takes the packet
    rx = Receiver([SA(SPI, key=KEY, max_crypt_offset=3)])
    assert rx.decrypt(genuine).packet == INNER


def test_strict_sa_and_unknown_options():
    for opts in (b"\x03\x00", b"\xe0\x02\xaa\xbb", b"\xff\x00\x00\x01\x00"):
        pkt = reseal(model_sa(), options=opts)
        assert SA(SPI, key=KEY).decrypt(pkt).header.unknown_options  # skipped and reported (D5)
        err = expect_error(SA(SPI, key=KEY, strict=True).decrypt, pkt)
        assert_error(err, PolicyError, "eesp-unknown-option", opts.hex())
        t = bytearray(pkt)
        t[-1] ^= 1  # strictness is checked before the ICV
        err = expect_error(SA(SPI, key=KEY, strict=True).decrypt, bytes(t))
        assert_error(err, PolicyError, "eesp-unknown-option", opts.hex() + " tampered")
    # Pad1 / PadN only: fine on a strict SA
    pkt = reseal(model_sa(), options=b"\x00\x01\x00\x00\x01\x01\x00")
    assert SA(SPI, key=KEY, strict=True).decrypt(pkt).packet == INNER


def test_session_id_above_the_maximum():
    msa = m.SA(spi=SPI, encr_id=20, sskdf=1, root_key=ROOT, align_options=False)
    for sid, rx_max in [(8, 7), (65535, 7), (1, 0), (65535, 65534)]:
        pkt = wrap(m.seal(msa, INNER, next_header=4, seq=1, session_id=sid))
        assert SA(SPI, root_key=ROOT).decrypt(pkt).sub_sa_id == sid  # genuine
        err = expect_error(SA(SPI, root_key=ROOT, max_sub_sa_id=rx_max).decrypt, pkt)
        assert_error(err, SubSaError, "eesp-sub-sa-out-of-range", f"Session ID {sid} > {rx_max}")
    # without an SSKDF only Session ID 0 exists (D9): a genuine Sub SA 0 packet with Session ID 1
    e = bytearray(m.seal(model_sa(), INNER, next_header=4, seq=1))
    e[2:4] = b"\x00\x01"
    assert_error(expect_error(SA(SPI, key=KEY).decrypt, wrap(bytes(e))), SubSaError, "eesp-sub-sa-out-of-range", "D9")


def test_sequence_number_zero():
    pkt = reseal(model_sa(), seq=0)
    for rx in (SA(SPI, key=KEY), SA(SPI, key=KEY, anti_replay=False)):
        assert_error(expect_error(rx.decrypt, pkt), MalformedPacketError, "eesp-sequence-zero", "seq 0")
    # with an implicit IV too
    iiv = m.SA(spi=SPI, encr_id=30, keymat=KEY, align_options=False)
    pkt = reseal(iiv, seq=0)
    assert_error(expect_error(SA(SPI, "aes-gcm-16-iiv", key=KEY).decrypt, pkt), MalformedPacketError,
                 "eesp-sequence-zero", "seq 0 iiv")
    # the largest sequence number is fine
    assert SA(SPI, key=KEY).decrypt(reseal(model_sa(), seq=2**64 - 1)).seq == 2**64 - 1


def test_wrong_key():
    for kw in (dict(key=KEY), dict(root_key=ROOT), dict(suite="aes-ccm-8", key=KEY_CCM),
               dict(suite="chacha20-poly1305-iiv", key=KEY256), dict(suite="aes-gmac", key=KEY)):
        kw = dict(kw)
        suite = kw.pop("suite", "aes-gcm-16")
        out = SA(SPI, suite, **kw).encrypt(INNER, 0)
        wrong = {k: bytes(b ^ 0x01 for b in v) for k, v in kw.items()}
        err = expect_error(SA(SPI, suite, **wrong).decrypt, out)
        assert_error(err, AuthenticationError, "authentication-failed", suite)
    # a wrong salt alone is a wrong key too
    out = SA(SPI, key=KEY).encrypt(INNER)
    err = expect_error(SA(SPI, key=KEY[:16] + b"\0\0\0\0").decrypt, out)
    assert_error(err, AuthenticationError, "authentication-failed", "salt")


def test_payload_info_errors():
    # full format on receive, optimized on send: the inner IPv4 header's first octets read as a PIH
    # with Pad Length 0x34 (the Total Length's low octet) > the data: bad pad length
    opt = m.SA(spi=SPI, encr_id=20, keymat=KEY, format="optimized", align_options=False)
    pkt = reseal(opt)
    assert SA(SPI, key=KEY).decrypt(pkt).packet == INNER
    err = expect_error(SA(SPI, key=KEY, format="full").decrypt, pkt)
    assert_error(err, MalformedPacketError, "eesp-bad-pad-length", "PIH pad")
    # optimized format: an inner packet that is not IPv4/IPv6
    for junk in (bytes(24), b"\x50" + bytes(23), b"\x45"):
        err = expect_error(SA(SPI, key=KEY).decrypt, reseal(opt, junk))
        assert_error(err, MalformedPacketError, "eesp-bad-inner-packet", junk[:1].hex())
    # optimized format: an inner length that does not fit (longer than the data, or > 255 short)
    long_inner = bytearray(INNER)
    long_inner[2:4] = struct.pack("!H", len(INNER) + 4)
    err = expect_error(SA(SPI, key=KEY).decrypt, reseal(opt, bytes(long_inner)))
    assert_error(err, MalformedPacketError, "eesp-bad-pad-length", "inner longer")
    short_inner = bytearray(INNER + bytes(300))
    err = expect_error(SA(SPI, key=KEY).decrypt, reseal(opt, bytes(short_inner)))
    assert_error(err, MalformedPacketError, "eesp-bad-pad-length", "pad > 255")
    # tunnel mode, full format: Next Header must be 4 or 41 and match the inner version
    full = model_sa(format="full")
    for nh in (6, 17, 41, 0):
        err = expect_error(SA(SPI, key=KEY, format="full").decrypt, reseal(full, next_header=nh))
        assert_error(err, MalformedPacketError, "eesp-bad-inner-packet", f"NH {nh}")
    # full format: a Pad Length larger than the data
    body_len = 4 + len(INNER)
    for pad in (body_len - 3, 255):
        err = expect_error(SA(SPI, key=KEY, format="full").decrypt, _with_pih(full, pad_len=pad))
        assert_error(err, MalformedPacketError, "eesp-bad-pad-length", f"Pad Length {pad} past the data")
    # exactly all of it: legal framing, but a tunnel then has no inner packet left
    err = expect_error(SA(SPI, key=KEY, format="full").decrypt, _with_pih(full, pad_len=body_len - 4))
    assert_error(err, MalformedPacketError, "eesp-bad-inner-packet", "all padding")
    # PIH reserved bits are ignored (D5), and so is a long padding
    r = SA(SPI, key=KEY, format="full").decrypt(reseal(full, pih_reserved=0xFFFF))
    assert r.packet == INNER
    r = SA(SPI, key=KEY, format="full").decrypt(reseal(full, pad_len=200))
    assert r.packet == INNER and r.pad_len == 200


def _with_pih(msa: m.SA, *, pad_len: int) -> bytes:
    """A full-format packet whose PIH claims `pad_len` octets of padding that are not there, ICV valid."""
    hdr = m.build_base_header(0, 0, SPI) + struct.pack("!QQ", 1, 1)
    body = m.build_pih(4, pad_len) + INNER
    key, salt = KEY[:16], KEY[16:]
    ct, icv = m._aead_seal(msa.suite, key, salt + hdr[16:24], hdr, body)
    return wrap(hdr + ct + icv)


def test_dummy_packets():
    full = model_sa(format="full")
    for rx in (SA(SPI, key=KEY, format="full"), SA(SPI, key=KEY, mode="transport")):
        err = expect_error(rx.decrypt, reseal(full, b"", next_header=59))
        assert_error(err, DummyPacketError, "eesp-dummy-packet", "NH 59")
    err = expect_error(SA(SPI, key=KEY, format="full").decrypt, reseal(full, b"dummy data", next_header=59))
    assert_error(err, DummyPacketError, "eesp-dummy-packet", "NH 59 with data")


# --------------------------------------------------------------------------- demultiplexing


def test_udp_4500_demultiplexing():
    # §14 order on UDP 4500: keepalive, non-ESP marker, an ESP SA's SPI (none here), octet 0 0x80 = EESP, else ESP
    rx = SA(SPI, key=KEY, udp_encap=True)
    genuine = rx.encrypt(INNER)
    assert rx.decrypt(genuine).packet == INNER
    e = eesp_of(genuine, True)
    cases = [
        (b"\xff", NotEespError, "nat-keepalive"),
        (b"\x00\x00\x00\x00" + b"IKE header and more", NotEespError, "ike-non-esp-marker"),
        (b"\x00\x00\x00\x00", NotEespError, "ike-non-esp-marker"),
        (b"\x00\x00\x10\x01" + bytes(40), NotEespError, "esp-in-udp"),  # an ESP SPI (MSB 0)
        (b"\x7f" + e[1:], NotEespError, "esp-in-udp"),
        (b"\xff\xff", NotEespError, "esp-in-udp"),  # MSB set, but no version-0 octet 0: an ESP SPI's
        (b"\x80", TruncatedPacketError, "eesp-truncated"),  # a version-0 octet 0: EESP, cut
        (b"\x80\x00\x00", TruncatedPacketError, "eesp-truncated"),
        (b"\xfe", NotEespError, "esp-in-udp"),
        (b"\xc1\xa2\xb3\xc4" + e[4:], NotEespError, "esp-in-udp"),  # issue 21's SPI: version 8, R 1
        (b"\x88" + e[1:], NotEespError, "esp-in-udp"),
        (b"\x81" + e[1:], NotEespError, "esp-in-udp"),
        (b"", NotEespError, "esp-in-udp"),
    ]
    for payload, cls, code in cases:
        for ipv in (4, 6):
            err = expect_error(rx.decrypt, wrap(payload, ipv, udp_encap=True))
            assert_error(err, cls, code, f"{payload[:4].hex()} over IPv{ipv}")
    # other ports and protocols are not EESP
    for pkt in (ipv4(17, udp(4500, 4501, e)), ipv4(17, udp(4500, 500, b"\0\0\0\0ike")), ipv4(6, bytes(40)),
                ipv6(17, udp(1, 2, e)), ipv4(50, e), ipv4(48, e)):
        assert_error(expect_error(rx.decrypt, pkt), NotEespError, "not-eesp", pkt[:24].hex())
    # EESP in IP protocol 49 reaches a receiver configured for it too
    assert SA(SPI, key=KEY).decrypt(wrap(e)).packet == INNER


def test_ip_and_udp_layer_rejections():
    rx = SA(SPI, key=KEY, udp_encap=True)
    out = rx.encrypt(INNER)

    def bad(mutate, cls, code):
        t = bytearray(out)
        mutate(t)
        assert_error(expect_error(SA(SPI, key=KEY, udp_encap=True).decrypt, bytes(t)), cls, code, code)

    bad(lambda t: t.__setitem__(0, 0x55), pyeesp.NotEespError, "ip-bad-version")
    bad(lambda t: t.__setitem__(0, 0x44), MalformedPacketError, "ip-bad-header-length")
    bad(lambda t: t.__setitem__(slice(24, 26), struct.pack("!H", len(out) - 21)), MalformedPacketError, "udp-bad-length")
    bad(lambda t: t.__setitem__(slice(24, 26), struct.pack("!H", len(out) - 19)), MalformedPacketError, "udp-bad-length")
    # a fragment of EESP in the IP protocol: reassemble first (§14)
    p49 = SA(SPI, key=KEY).encrypt(INNER)
    for flags in (b"\x20\x00", b"\x00\x10", b"\x20\x10"):
        t = bytearray(p49)
        t[6:8] = flags
        _ipv4_checksum(t)
        err = expect_error(SA(SPI, key=KEY).decrypt, bytes(t))
        assert_error(err, MalformedPacketError, "ip-fragment", flags.hex())
    assert_error(expect_error(rx.decrypt, b""), TruncatedPacketError, "ip-truncated", "empty")
    assert_error(expect_error(rx.decrypt, b"\x60" + bytes(38)), TruncatedPacketError, "ip-truncated", "short v6")


def test_udp_encapsulated_fragment_is_dropped_as_a_fragment():
    # §14 / §16 step 1: reassembly happens before EESP; a packet that still looks like a fragment is
    # dropped and audited, in UDP 4500 as in the IP protocol (not passed on as "not-eesp").
    out = SA(SPI, key=KEY, udp_encap=True).encrypt(INNER)
    t = bytearray(out)
    t[6:8] = b"\x20\x00"  # MF, offset 0
    _ipv4_checksum(t)
    err = expect_error(SA(SPI, key=KEY, udp_encap=True).decrypt, bytes(t))
    assert_error(err, MalformedPacketError, "ip-fragment", "UDP 4500 first fragment")


def test_tunnel_mode_refuses_a_non_ip_inner_packet_on_send():
    with pytest.raises(EespError) as ei:
        SA(SPI, key=KEY).encrypt(b"\x00" * 40)
    ERRORS.append(ei.value)
    assert ei.value.code == "ip-bad-version"


# --------------------------------------------------------------------------- key material


def test_configuration_errors_do_not_leak_keys():
    for kw in (
        dict(key=KEY + b"\x01"), dict(key=KEY.hex() + "zz"), dict(key=KEY[:16]), dict(root_key=ROOT[:31]),
        dict(root_key=ROOT, sskdf="aes256-cmac"), dict(key=KEY, root_key=ROOT),
        dict(key=KEY256, suite="aes-gmac", aad="linux-xfrm"), dict(key=KEY, suite="aes-gcm-16-iiv", seq=False),
        dict(key=KEY_CCM, suite="aes-gcm-16"), dict(key=KEY256, suite="chacha20-poly1305", key_bits=192),
    ):
        kw = dict(kw)
        suite = kw.pop("suite", "aes-gcm-16")
        err = expect_error(SA, SPI, suite, **kw)
        assert isinstance(err, ConfigurationError)
    for args in ((ROOT[:31], 1, 20), (ROOT, 1, 20, "aes256-cmac"), (ROOT, 70000, 20), (ROOT.hex() + "q", 1, 20)):
        assert isinstance(expect_error(derive_sub_sa_key, *args), ConfigurationError)


def test_no_error_message_contains_key_material():
    # Runs after the tests above in this module (pytest keeps file order) and checks everything they
    # saw; it also produces a fresh sample so that it is meaningful on its own.
    out = SA(SPI, root_key=ROOT).encrypt(INNER, 2)
    for rx in (SA(SPI, root_key=bytes(32)), SA(SPI, key=KEY), SA(SPI, root_key=ROOT, max_sub_sa_id=1)):
        try:
            rx.decrypt(out)
        except EespError as e:
            ERRORS.append(e)
    assert len(ERRORS) >= 3
    needles = []
    for k in SECRETS:
        h = k.hex()
        needles += [h, h.upper(), repr(k)[2:-1], " ".join(f"{b:02x}" for b in k)]
        needles += [h[i : i + 16] for i in range(0, len(h) - 15, 8)]  # any 8-octet run
    for e in ERRORS:
        text = " | ".join([str(e), repr(e), " ".join(map(str, e.args)), str(getattr(e, "code", ""))])
        assert str(e).strip() and e.code
        for n in needles:
            assert n not in text, f"{type(e).__name__} leaks key material: {text!r}"
