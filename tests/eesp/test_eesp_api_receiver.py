"""The pyeesp API: batches, threads, Receiver and the exception hierarchy.

Packets are built with struct (tests/eesp/eespapi.py).  Expected values come
from the spec (docs/spec/eesp.md §3, §4, §7, §10, §12, §19, D1-D16), never
from the core.
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
    AuthenticationError,
    CaptureError,
    ConfigurationError,
    Decrypted,
    DummyPacketError,
    EespError,
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
)
from pyeesp.errors import error_class

from eespapi import (
    ROOT,
    SPI,
    V4_DST,
    V4_SRC,
    _csum,
    eesp_part,
    ip_header_len,
    ipv4,
    keymat,
    seq_of,
    tcp4,
    tcp6,
    udp4,
    udp6,
    udp_segment,
)


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
