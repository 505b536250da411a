"""The pyeesp API: round trips of every suite, Decrypted fields, the §19
vectors through the API, Sub SAs, sequence numbers and packet limits.

Packets are built with struct (tests/eesp/eespapi.py).  Expected values come
from the spec (docs/spec/eesp.md §3, §4, §7, §10, §12, §19, D1-D16) or from an
independent computation with the `cryptography` package, never from the core.
"""
from __future__ import annotations

import struct

import psp_model
import pytest

from pyeesp import (
    SA,
    AuthenticationError,
    ConfigurationError,
    Decrypted,
    Header,
    MalformedPacketError,
    NotEespError,
    PacketTooLargeError,
    Receiver,
    SequenceExhaustedError,
    SubSaError,
    TruncatedPacketError,
    derive_sub_sa_key,
)

from eespapi import (
    E1_WIRE,
    E_INNER,
    ROOT,
    SPI,
    SUITE_KEYS,
    _csum,
    eesp_part,
    icv_len,
    ip_header_len,
    ipv4,
    ipv6,
    iv_len,
    keymat,
    keymat_len,
    seq_of,
    tcp4,
    tcp6,
    udp4,
    udp6,
    udp_segment,
)


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


