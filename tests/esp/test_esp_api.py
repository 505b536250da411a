"""The pyesp API (RFC 4303 over the core): suites and SA settings, the Header codec, round trips of every suite
in both modes over IPv4/IPv6 with and without ESN and UDP encapsulation, Decrypted's fields, seal/open and
dummy packets, batches, Receiver, and every exception class reached from bad input.

Expected octets come from the RFCs through an independent computation with the `cryptography` package
(RFC 4106 §3-§5, RFC 4303 §2.4, RFC 3948 §2.1), never from the core.
"""
from __future__ import annotations

import array
import struct

import pytest

import pyesp
from pecore.errors import CATEGORY_BY_CODE, CoreError, ExhaustedError
from pecore.protocol import eesp_suite, esp_suite
from pyesp import (
    SA,
    SUITES,
    AuthenticationError,
    ConfigurationError,
    Decrypted,
    DummyPacketError,
    EspError,
    Header,
    MalformedPacketError,
    NoSaError,
    NotEspError,
    PacketTooLargeError,
    PolicyError,
    Receiver,
    ReplayError,
    SequenceExhaustedError,
    TruncatedPacketError,
)
from pyesp.errors import error_class

SPI = 0x00001234
INNER4 = bytes.fromhex("4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef")  # UDP 1234 -> 5678


def inner6(n: int = 12) -> bytes:
    payload = bytes(range(n))
    udp = struct.pack("!HHHH", 1234, 5678, 8 + n, 0) + payload
    return struct.pack("!IHBB", 0x60000000, len(udp), 17, 64) + bytes.fromhex("20010db8" + "0" * 22 + "01") + \
        bytes.fromhex("20010db8" + "0" * 22 + "02") + udp


def keymat(suite: str, bits: int) -> bytes:
    row = esp_suite(suite)
    return bytes((0x11 * i + 3) & 0xFF for i in range(row.keymat_len(bits)))


CASES = [(s, b) for s in SUITES for b in esp_suite(s).key_bits]


def case_id(c):
    return f"{c[0]}-{c[1]}"


# ------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suite,bits", CASES, ids=[case_id(c) for c in CASES])
@pytest.mark.parametrize("mode", ["tunnel", "transport"])
@pytest.mark.parametrize("v6", [False, True], ids=["v4", "v6"])
@pytest.mark.parametrize("esn", [False, True], ids=["seq32", "esn"])
@pytest.mark.parametrize("udp", [False, True], ids=["ip", "udp"])
def test_round_trip(suite, bits, mode, v6, esn, udp):
    first = 0x1_0000_0007 if esn else 7
    sa = SA(SPI, suite, keymat(suite, bits), mode=mode, esn=esn, udp_encap=udp, first_seq=first)
    assert sa.next_seq() == sa.next_iv() == first
    for i, n in enumerate((0, 1, 3, 40)):
        inner = inner6(n) if v6 else INNER4
        wire = sa.encrypt(inner)
        outer_len = (40 if v6 else 20) if mode == "tunnel" else (40 if v6 else 20)
        if udp:
            assert wire[9 if not v6 else 6] == 17 and struct.unpack_from("!HH", wire, outer_len) == (4500, 4500)
            esp = wire[outer_len + 8:]
        else:
            assert wire[9 if not v6 else 6] == 50
            esp = wire[outer_len:]
        h = Header.parse(esp)
        assert h == Header(SPI, (first + i) & 0xFFFFFFFF)
        d = sa.decrypt(wire)
        assert d.packet == inner
        assert (d.spi, d.seq, d.seq_low, d.esn, d.mode, d.udp_encap) == \
            (SPI, first + i, (first + i) & 0xFFFFFFFF, esn, mode, udp)
        assert d.header == h and d.icv_valid
        row = esp_suite(suite)
        if row.integ:  # AES-CBC: a random 16-octet IV (RFC 3602 §2.3)
            assert d.iv is not None and len(d.iv) == 16 and d.iv == esp[8:24]
        else:
            assert d.iv == (None if row.implicit_iv else struct.pack("!Q", first + i))
        want_nh = (41 if v6 else 4) if mode == "tunnel" else 17
        assert d.next_header == want_nh
        # RFC 4303 §2.4: payload | padding | Pad Length | Next Header ends on 4 octets, AES-CBC's on 16 (RFC 3602)
        body = len(inner) if mode == "tunnel" else len(inner) - (40 if v6 else 20)
        block = 16 if row.integ else 4
        assert (body + d.pad_len + 2) % block == 0 and d.pad_len < block


def test_independent_aes_gcm_octets():
    """RFC 4106: nonce salt || IV (the IV is the 64-bit sequence number here), AAD SPI || Seq (|| with ESN the
    high half first, §5), ICV 16; RFC 4303 §2.4 padding 1, 2, 3, …; tunnel: Next Header 4."""
    aead = pytest.importorskip("cryptography.hazmat.primitives.ciphers.aead")
    key = keymat("aes-gcm-16", 128)
    for esn, seq in ((False, 9), (True, 0x3_0000_0009)):
        sa = SA(SPI, "aes-gcm-16", key, mode="tunnel", esn=esn, first_seq=seq)
        esp = sa.seal(INNER4, 4)
        pad = (-(len(INNER4) + 2)) % 4
        plain = INNER4 + bytes(range(1, pad + 1)) + bytes([pad, 4])
        iv = struct.pack("!Q", seq)
        aad = struct.pack("!II", SPI, seq >> 32) + struct.pack("!I", seq & 0xFFFFFFFF) if esn else \
            struct.pack("!II", SPI, seq)
        ct = aead.AESGCM(key[:16]).encrypt(key[16:] + iv, plain, aad)
        assert esp == struct.pack("!II", SPI, seq & 0xFFFFFFFF) + iv + ct
        # and the whole packet is an outer IPv4 header (a copy of the inner one) around the same octets
        sa2 = SA(SPI, "aes-gcm-16", key, mode="tunnel", esn=esn, first_seq=seq)
        assert sa2.encrypt(INNER4)[20:] == esp


def test_independent_chacha_and_udp_octets():
    """RFC 7634 §2 (nonce salt || IV, AAD SPI || Seq) inside RFC 3948 §2.1 UDP (ports 4500, checksum 0)."""
    aead = pytest.importorskip("cryptography.hazmat.primitives.ciphers.aead")
    key = keymat("chacha20-poly1305", 256)
    sa = SA(0x42, "chacha20-poly1305", key, mode="transport", udp_encap=True)
    wire = sa.encrypt(INNER4)
    assert wire[9] == 17 and wire[20:24] == struct.pack("!HH", 4500, 4500) and wire[26:28] == b"\0\0"
    udp_payload = INNER4[20:]
    pad = (-(len(udp_payload) + 2)) % 4
    plain = udp_payload + bytes(range(1, pad + 1)) + bytes([pad, 17])
    ct = aead.ChaCha20Poly1305(key[:32]).encrypt(key[32:] + struct.pack("!Q", 1), plain, struct.pack("!II", 0x42, 1))
    assert wire[28:] == struct.pack("!II", 0x42, 1) + struct.pack("!Q", 1) + ct


def test_outer_header_template_and_dst():
    outer = bytes.fromhex("450000000000000040000000c0000201c0000202")
    sa = SA(SPI, "aes-gcm-16", keymat("aes-gcm-16", 128), outer_header=outer, dst="192.0.2.2")
    wire = sa.encrypt(INNER4)
    assert wire[12:20] == outer[12:20] and wire[9] == 50
    assert sa.decrypt(wire).packet == INNER4
    other = SA(SPI, "aes-gcm-16", keymat("aes-gcm-16", 128), dst="192.0.2.9")
    with pytest.raises(NoSaError):
        other.decrypt(SA(SPI, "aes-gcm-16", keymat("aes-gcm-16", 128), outer_header=outer).encrypt(INNER4))


# ------------------------------------------------------------------------------------------- suites, settings


def test_suites_by_name_and_id():
    assert SUITES["aes-gcm-16"] == 20 and SUITES["chacha20-poly1305"] == 28 and SUITES["aes-gmac"] == 21
    assert pyesp.suite_id("ENCR_AES_GCM_16") == 20 == pyesp.suite_id(20) == pyesp.suite_id("20")
    assert pyesp.suite_id("ENCR_NULL_AUTH_AES_GMAC") == 21
    sa = SA(SPI, 16, keymat("aes-ccm-16", 192))  # key size from the KEYMAT's length
    assert sa.decrypt(sa.encrypt(INNER4)).packet == INNER4
    for bad in ("aes-cbc", 12, True, None):
        with pytest.raises(ConfigurationError) as ei:
            pyesp.suite_id(bad)
        assert ei.value.code == "esp-bad-suite"


@pytest.mark.parametrize("kwargs,code", [
    (dict(key=bytes(19)), "bad-key-length"),
    (dict(key=bytes(20), key_bits=256), "bad-key-length"),
    (dict(suite="chacha20-poly1305", key=bytes(36), key_bits=128), "esp-bad-suite"),
    (dict(key=None), "invalid-argument"),
    (dict(key="zz"), "invalid-argument"),
    (dict(key=bytes(20), mode="beet"), "invalid-argument"),
    (dict(key=bytes(20), replay_window=10), "invalid-argument"),
    (dict(key=bytes(20), first_seq=0), "invalid-argument"),
    (dict(key=bytes(20), first_seq=2**32), "invalid-argument"),  # above 32 bits without ESN
    (dict(key=bytes(20), replay_top=2**32), "esp-bad-config"),
    (dict(key=bytes(20), outer_header=bytes(7)), "invalid-argument"),
    (dict(key=bytes(20), dst="not-an-address"), "invalid-argument"),
    (dict(key=bytes(20), udp_sport=70000), "invalid-argument"),
])
def test_bad_settings_are_configuration_errors(kwargs, code):
    kwargs = {"suite": "aes-gcm-16", **kwargs}
    with pytest.raises(ConfigurationError) as ei:
        SA(SPI, **kwargs)
    assert ei.value.code == code and isinstance(ei.value, ValueError) and ei.value.category == "configuration"


def test_key_as_hex_and_bytes_like():
    k = keymat("aes-gcm-16", 128)
    a, b, c = SA(1, "aes-gcm-16", k.hex()), SA(1, "aes-gcm-16", bytearray(k)), SA(1, "aes-gcm-16", memoryview(k))
    assert a.encrypt(INNER4) == b.encrypt(INNER4) == c.encrypt(INNER4)
    assert "key" not in repr(a) and k.hex() not in repr(a)


# ------------------------------------------------------------------------------------------- header


def test_header_parse_build():
    h = Header.parse(bytes.fromhex("0000123400000007") + b"rest")
    assert (h.spi, h.seq) == (0x1234, 7) and h.build() == bytes.fromhex("0000123400000007")
    assert Header.parse(bytearray(h.build())) == Header.parse(memoryview(h.build())) == h
    with pytest.raises(TruncatedPacketError) as ei:
        Header.parse(b"\0" * 7)
    assert ei.value.code == "esp-truncated"
    assert Header.parse_lenient(b"\0" * 3) == (None, "esp-truncated")
    with pytest.raises(ConfigurationError):
        Header(2**32, 0)
    with pytest.raises(TypeError, match="data"):
        Header.parse("0000")


# ------------------------------------------------------------------------------------------- sequence numbers


def test_sequence_exhaustion_32_and_64():
    sa = SA(SPI, "aes-gcm-16", bytes(20), first_seq=0xFFFFFFFF)
    sa.encrypt(INNER4)
    assert sa.next_seq() is None and sa.next_iv() is None
    with pytest.raises(SequenceExhaustedError) as ei:
        sa.encrypt(INNER4)
    assert isinstance(ei.value, ExhaustedError) and ei.value.code == "sequence-exhausted"
    with pytest.raises(ExhaustedError):
        sa.encrypt_batch([INNER4])
    esn = SA(SPI, "aes-gcm-16", bytes(20), esn=True)
    esn.set_next_iv(2**64 - 1)
    esn.encrypt(INNER4)
    assert esn.next_seq() is None


def test_set_next_seq_only_forward():
    sa = SA(SPI, "aes-gcm-16", bytes(20))
    sa.set_next_seq(10)
    assert sa.next_seq() == 10
    with pytest.raises(ConfigurationError):
        sa.set_next_seq(5)
    with pytest.raises(ConfigurationError):
        sa.set_next_seq(2**32)  # no ESN
    with pytest.raises(ConfigurationError):
        sa.set_next_seq(0)


# ------------------------------------------------------------------------------------------- receiving errors


def sender_and_receiver(**kw):
    k = keymat("aes-gcm-16", 128)
    return SA(SPI, "aes-gcm-16", k, **kw), SA(SPI, "aes-gcm-16", k, **kw)


def test_replay_and_window():
    tx, rx = sender_and_receiver()
    wires = [tx.encrypt(INNER4) for _ in range(3)]
    rx.decrypt(wires[2])
    rx.decrypt(wires[0])
    with pytest.raises(ReplayError) as ei:
        rx.decrypt(wires[0])
    assert ei.value.code == "replay-duplicate"
    tx.set_next_seq(5000)
    rx.decrypt(tx.encrypt(INNER4))
    with pytest.raises(ReplayError) as ei:
        rx.decrypt(wires[1])
    assert ei.value.code == "replay-too-old"
    off = SA(SPI, "aes-gcm-16", keymat("aes-gcm-16", 128), anti_replay=False)
    assert off.decrypt(wires[0]).packet == off.decrypt(wires[0]).packet == INNER4



@pytest.mark.parametrize("resume", [dict(replay_top=5), dict(first_seq=6)])
def test_a_resumed_receiver_has_seen_everything_up_to_its_top(resume):
    """replay_top is the highest number already accepted (esp.h, keys.md), and which numbers below it came is
    not known: all of them count as received, in the window (duplicate) and left of it (too old)."""
    k = keymat("aes-gcm-16", 128)
    tx, rx = SA(SPI, "aes-gcm-16", k), SA(SPI, "aes-gcm-16", k, replay_window=64, **resume)
    wires = {}
    for seq in (1, 4, 5, 6, 70):
        tx.set_next_seq(seq)
        wires[seq] = tx.encrypt(INNER4)
    for seq in (5, 4, 1):
        with pytest.raises(ReplayError) as ei:
            rx.decrypt(wires[seq])
        assert ei.value.code == "replay-duplicate"
    assert rx.decrypt(wires[6]).seq == 6
    assert rx.decrypt(wires[70]).seq == 70
    with pytest.raises(ReplayError) as ei:
        rx.decrypt(wires[5])
    assert ei.value.code == "replay-too-old"

def test_wrong_key_unknown_spi_and_altered_packets():
    tx, _ = sender_and_receiver()
    wire = tx.encrypt(INNER4)
    wrong = SA(SPI, "aes-gcm-16", bytes(20))
    with pytest.raises(AuthenticationError) as ei:
        wrong.decrypt(wire)
    assert ei.value.code == "authentication-failed"
    with pytest.raises(NoSaError) as ei:
        SA(SPI + 1, "aes-gcm-16", bytes(20)).decrypt(wire)
    assert ei.value.code == "esp-no-sa"
    bad = bytearray(wire)
    bad[-1] ^= 1
    with pytest.raises(AuthenticationError):
        sender_and_receiver()[1].decrypt(bytes(bad))


def with_ip_length(ip: bytes) -> bytes:
    """An IPv4 packet cut short, with its Total Length and header checksum saying so."""
    from pecore.protocol import checksum

    h = bytearray(ip[:20])
    h[2:4], h[10:12] = struct.pack("!H", len(ip)), b"\0\0"
    h[10:12] = struct.pack("!H", checksum(bytes(h)))
    return bytes(h) + ip[20:]


def test_truncated_and_not_esp():
    tx, rx = sender_and_receiver()
    wire = tx.encrypt(INNER4)
    with pytest.raises(TruncatedPacketError) as ei:
        rx.decrypt(with_ip_length(wire[: 20 + 8 + 8 + 4]))  # header and IV, no room for trailer and ICV
    assert ei.value.code == "esp-truncated"
    with pytest.raises(TruncatedPacketError) as ei:
        rx.open(wire[20:27])
    assert ei.value.code == "esp-truncated"
    with pytest.raises(MalformedPacketError) as ei:
        rx.decrypt(wire[:-1])  # the IP header says one octet more
    assert ei.value.code.startswith("ip-")
    with pytest.raises(TruncatedPacketError) as ei:
        rx.decrypt(wire[:10])
    assert ei.value.code == "ip-truncated"
    with pytest.raises(NotEspError) as ei:
        rx.decrypt(INNER4)  # UDP to 5678
    assert ei.value.code == "not-esp" and ei.value.category == "not-this-protocol"
    with pytest.raises(MalformedPacketError) as ei:
        rx.open(struct.pack("!II", SPI, 0) + bytes(40))
    assert ei.value.code == "esp-sequence-zero"


def test_bad_padding_and_pad_length():
    """Packets that authenticate but break RFC 4303 §2.4 (built with the key through `cryptography`)."""
    aead = pytest.importorskip("cryptography.hazmat.primitives.ciphers.aead")
    k = keymat("aes-gcm-16", 128)

    def esp(plain: bytes, seq: int) -> bytes:
        iv = struct.pack("!Q", seq)
        return struct.pack("!II", SPI, seq) + iv + aead.AESGCM(k[:16]).encrypt(k[16:] + iv, plain,
                                                                               struct.pack("!II", SPI, seq))

    rx = Receiver([SA(SPI, "aes-gcm-16", k, mode="tunnel")])
    with pytest.raises(MalformedPacketError) as ei:
        rx.open(esp(INNER4 + b"\0\0" + bytes([2, 4]), 1))  # zeros, not 1, 2
    assert ei.value.code == "esp-bad-padding" and type(ei.value) is MalformedPacketError
    with pytest.raises(MalformedPacketError) as ei:
        rx.open(esp(b"\1\2" + bytes([200, 4]), 2))
    assert ei.value.code == "esp-bad-pad-length"
    with pytest.raises(MalformedPacketError) as ei:
        rx.open(esp(INNER4 + b"\1\2" + bytes([2, 6]), 3))  # tunnel mode, Next Header TCP
    assert ei.value.code == "esp-bad-next-header"
    with pytest.raises(MalformedPacketError) as ei:
        rx.open(esp(INNER4[:-4] + b"\1\2\3\4\5" + bytes([5, 4]), 4))  # the inner IPv4 packet is cut
    assert ei.value.code == "esp-bad-inner-packet"


def test_dummy_packets():
    tx, rx = sender_and_receiver()
    dummy = tx.seal(b"anything at all", 59)
    with pytest.raises(DummyPacketError) as ei:
        rx.open(dummy)
    assert isinstance(ei.value, PolicyError) and ei.value.icv_valid and ei.value.code == "esp-dummy-packet"
    (got,) = sender_and_receiver()[1].decrypt_batch([tx.encrypt(INNER4)])
    assert isinstance(got, Decrypted)


def test_seal_and_open():
    tx, rx = sender_and_receiver(mode="transport")
    esp = tx.seal(INNER4[20:], 17)
    d = rx.open(esp)
    assert d.packet == INNER4[20:] and d.next_header == 17 and d.seq == 1 and d.mode == "transport"
    with pytest.raises(ReplayError):
        rx.open(esp)
    assert rx.open(esp, replay=False).packet == INNER4[20:]
    assert rx.open(bytearray(esp), ip_version=6, replay=False).packet == INNER4[20:]
    with pytest.raises(ConfigurationError):
        rx.open(esp, ip_version=5)
    with pytest.raises(ConfigurationError):
        rx.open(esp, ip_version=4, dst="2001:db8::1")
    with pytest.raises(PacketTooLargeError):
        tx.seal(bytes(70000), 17)


def test_receiver_of_many_sas_and_eesp_on_port():
    k = keymat("aes-gcm-16", 128)
    a, b = SA(0x1, "aes-gcm-16", k), SA(0x2, "aes-gcm-16", k, udp_encap=True)
    high = SA(0x80000001, "aes-gcm-16", k, udp_encap=True)
    rx = Receiver([SA(0x1, "aes-gcm-16", k), SA(0x2, "aes-gcm-16", k), SA(0x80000001, "aes-gcm-16", k)])
    assert rx.decrypt(a.encrypt(INNER4)).spi == 1 and rx.decrypt(b.encrypt(INNER4)).spi == 2
    w = high.encrypt(INNER4)
    assert rx.decrypt(w).packet == INNER4  # an SPI the receiver holds is ESP (eesp.md §14 step 3)
    with pytest.raises(NotEspError) as ei:  # held by no SA, octet 0 0x80: EESP's (step 4)
        Receiver([a]).decrypt(w)
    assert ei.value.code == "eesp-in-udp"
    no_eesp = Receiver([a], eesp_on_port=False)
    with pytest.raises(NoSaError):
        no_eesp.decrypt(w)
    assert high.decrypt(w).packet == INNER4  # an SA's own receiver takes its own SPI
    with pytest.raises(ConfigurationError):
        Receiver([SA(0x1, "aes-gcm-16", k), SA(0x1, "aes-gcm-16", k)])
    with pytest.raises(TypeError):
        Receiver([object()])


# ------------------------------------------------------------------------------------------- batches


def test_batches_are_the_single_calls():
    a, b = sender_and_receiver()
    pkts = [INNER4, inner6(5), bytearray(INNER4), memoryview(inner6(30))]
    batch = a.encrypt_batch(pkts)
    assert batch == [b.encrypt(p) for p in pkts] and a.next_seq() == 5
    bad = bytearray(batch[1])
    bad[-1] ^= 1
    many = [batch[0], bytes(bad), batch[1], batch[1], batch[3], b"\x45\x00"]
    one, two = sender_and_receiver()
    singles = []
    for p in many:
        try:
            singles.append(one.decrypt(p))
        except EspError as e:
            singles.append(e)
    got = two.decrypt_batch(many)
    assert [type(g).__name__ for g in got] == ["Decrypted", "AuthenticationError", "Decrypted", "ReplayError",
                                               "Decrypted", "TruncatedPacketError"]
    for g, s in zip(got, singles):
        assert type(g) is type(s) and (g == s if isinstance(s, Decrypted) else g.code == s.code)
    assert a.encrypt_batch([]) == [] and two.decrypt_batch([]) == []


def test_encrypt_batch_stops_at_the_first_failure():
    sa = SA(SPI, "aes-gcm-16", bytes(20))
    with pytest.raises(EspError) as ei:
        sa.encrypt_batch([INNER4, INNER4, b"\x45" + bytes(10), INNER4])
    assert str(ei.value).startswith("packet 2:") and len(ei.value.results) == 2 and sa.next_seq() == 3
    assert [sa.decrypt(w).packet for w in ei.value.results] == [INNER4, INNER4]


# ------------------------------------------------------------------------------------------- bytes-like, types


def test_bytes_like_inputs_and_type_errors():
    tx, rx = sender_and_receiver()
    for form in (bytearray(INNER4), memoryview(INNER4), array.array("B", INNER4)):
        assert rx.decrypt(memoryview(tx.encrypt(form))).packet == INNER4
    for call, name in ((lambda: tx.encrypt("text"), "ip_packet"), (lambda: tx.encrypt(None), "ip_packet"),
                       (lambda: rx.decrypt(42), "packet"), (lambda: tx.seal("x", 4), "payload"),
                       (lambda: rx.open(None), "esp"), (lambda: tx.encrypt_batch([INNER4, "x"]), r"packets\[1\]"),
                       (lambda: tx.encrypt(memoryview(INNER4 * 2)[::2]), "ip_packet")):
        with pytest.raises(TypeError, match=name):
            call()


# ------------------------------------------------------------------------------------------- the hierarchy


def test_every_status_maps_to_a_class_of_its_category():
    """Every core status (the esp-* ones above all) raises a class that stands for its category."""
    esp_codes = [c for c in CATEGORY_BY_CODE if c.startswith("esp-") or c in ("not-esp", "eesp-in-udp")]
    assert len(esp_codes) >= 12
    for code, category in CATEGORY_BY_CODE.items():
        if category == "ok":
            continue
        cls = error_class(code)
        assert cls is not EspError and issubclass(cls, EspError) and issubclass(cls, CoreError), code
        assert cls.category == category, (code, cls, category)
    assert error_class("esp-truncated") is TruncatedPacketError
    assert error_class("esp-dummy-packet") is DummyPacketError
    assert error_class("esp-no-sa") is NoSaError and error_class("not-esp") is NotEspError
    assert error_class("esp-bad-padding") is MalformedPacketError
    assert error_class("sequence-exhausted") is SequenceExhaustedError


def test_package_exports():
    for name in pyesp.__all__:
        assert hasattr(pyesp, name), name
    assert pyesp.ExhaustedError is ExhaustedError


# ------------------------------------------------------------------------------------------- where ESP is


def test_locate_esp():
    """pecore.protocol.locate_esp: protocol 50 after IPv6 extension headers, UDP 4500 as RFC 3948 and
    eesp.md §14 demultiplex it; every status it gives is one of the core's."""
    from pecore.errors import CATEGORY_BY_CODE
    from pecore.protocol import locate_esp

    k = keymat("aes-gcm-16", 128)
    esp = SA(SPI, "aes-gcm-16", k, mode="transport").seal(b"x" * 10, 17)
    v4 = with_ip_length(bytes.fromhex("4500000000000000403200000a0000010a000002") + esp)
    loc, st = locate_esp(v4)
    assert st == "ok" and (loc.ip_version, loc.udp_encap, loc.offset, loc.length) == (4, False, 20, len(esp))
    hbh = bytes([50, 0]) + bytes(6)  # Hop-by-Hop, then ESP
    v6 = struct.pack("!IHBB", 0x60000000, len(hbh) + len(esp), 0, 64) + bytes(32) + hbh + esp
    loc, st = locate_esp(v6)
    assert st == "ok" and (loc.ip_version, loc.offset, loc.length) == (6, 48, len(esp))

    def udp4500(payload: bytes, sport: int = 1111, dport: int = 4500) -> bytes:
        return with_ip_length(bytes.fromhex("4500000000000000401100000a0000010a000002")
                              + struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)

    loc, st = locate_esp(udp4500(esp))
    assert st == "ok" and loc.udp_encap and loc.offset == 28
    assert locate_esp(udp4500(esp, 4500, 1111))[1] == "not-esp"
    assert locate_esp(udp4500(esp, 4500, 1111), either_port=True)[1] == "ok"
    high = b"\x80" + esp[1:]
    got = [locate_esp(udp4500(p))[1] for p in (b"\xff", bytes(4) + b"ike", high)]
    assert got == ["nat-keepalive", "ike-non-esp-marker", "eesp-in-udp"]
    assert locate_esp(udp4500(high), eesp_on_port=False)[1] == "ok"
    # §14 steps 3 and 4: the SPI of a receiver's SA, and an octet 0 no EESP version-0 Base Header has.
    held = Receiver([SA(struct.unpack("!I", high[:4])[0], "aes-gcm-16", keymat("aes-gcm-16", 128))])
    assert locate_esp(udp4500(high), receiver=held._rx)[1] == "ok"
    assert locate_esp(udp4500(b"\x81" + esp[1:]))[1] == "ok"
    assert locate_esp(udp4500(b"\xc1" + esp[1:]))[1] == "ok"
    frag = bytearray(v4)
    frag[6] = 0x20  # More Fragments
    statuses = [locate_esp(bytes(frag))[1], locate_esp(INNER4)[1], locate_esp(b"\x45")[1], locate_esp(b"")[1]]
    assert statuses[:2] == ["ip-fragment", "not-esp"]
    assert all(s in CATEGORY_BY_CODE for s in statuses + got)
    with pytest.raises(TypeError, match="ip_packet"):
        locate_esp("not bytes")


def test_threads_share_an_sa():
    """Calls are serialised: threads sharing one SA never send a sequence number (the IV) twice."""
    import threading

    sa, rx = sender_and_receiver(replay_window=4096)
    wires: list = []

    def work() -> None:
        for _ in range(200):
            wires.append(sa.encrypt(INNER4))
        wires.extend(sa.encrypt_batch([INNER4] * 50))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = sorted(Header.parse(w[20:]).seq for w in wires)
    assert seqs == list(range(1, 1001)) and sa.next_seq() == 1001
    assert all(d.packet == INNER4 for d in rx.decrypt_batch(wires))


def test_random_spis_on_udp_4500_are_esp():
    """Issue 21: ESP in UDP 4500 with SPIs chosen at random, half of them with the top bit set, is opened by an SA's
    own receiver and by a Receiver holding the SA (eesp.md §14 step 3); without the SA only the SPIs whose first
    octet is 0x80, the only octet 0 of a version-0 EESP Base Header, are taken for EESP (step 4)."""
    import random

    rnd = random.Random(21)
    k = keymat("aes-gcm-16", 128)
    other = Receiver([SA(0x1, "aes-gcm-16", k)])
    spis = [0xC1A2B3C4, 0x80000000, 0x80FFFFFF, 0xFFFFFFFF] + [rnd.randrange(1, 2**32) for _ in range(996)]
    high = 0
    for spi in spis:
        sa = SA(spi, "aes-gcm-16", k, udp_encap=True)
        w = sa.encrypt(INNER4)
        assert Receiver([sa]).decrypt(w).packet == INNER4, hex(spi)
        assert sa.decrypt(w).packet == INNER4, hex(spi)
        with pytest.raises(NotEspError if spi >> 24 == 0x80 else NoSaError) as ei:
            other.decrypt(w)
        assert ei.value.code == ("eesp-in-udp" if spi >> 24 == 0x80 else "esp-no-sa"), hex(spi)
        high += spi >> 31
    assert high > 400  # the top bit set on about half of them, as in the issue


@pytest.mark.parametrize("tfc", [1, 4, 7, 1024])
def test_tunnel_mode_tfc_padding(tfc):
    """RFC 4303 §2.7: a sender may put TFC padding after the tunnelled packet; the receiver takes the inner
    packet by its own length (Linux trims to it too) and drops the rest.  Transport mode has no such length
    for every next header, so the setting is refused there (docs/guide-esp.md)."""
    from pecore.keys import parse_key_file
    key = bytes(range(20))
    inner = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + 5, 1, 0, 64, 17, 0, bytes(4), bytes(4)) + bytes(13)
    plain = pyesp.SA(0x77, "aes-gcm-16", key).encrypt(inner)
    sa = pyesp.SA(0x77, "aes-gcm-16", key, tfc_pad=tfc)
    wire = sa.encrypt(inner)
    assert len(wire) >= len(plain) + tfc - 3
    got = pyesp.Receiver([pyesp.SA(0x77, "aes-gcm-16", key)]).decrypt(wire)
    assert got.packet == inner and got.tfc_pad_len == tfc
    (e,) = parse_key_file(f"esp-sa spi=0x77 suite=aes-gcm-16 key={key.hex()} tfc-pad={tfc}\n").esp_sas
    assert e.settings["tfc_pad"] == tfc and pyesp.SA(**e.settings).encrypt(inner) != plain
    with pytest.raises(ConfigurationError):
        pyesp.SA(0x77, "aes-gcm-16", key, mode="transport", tfc_pad=4)
    with pytest.raises(ConfigurationError):
        pyesp.SA(0x77, "aes-gcm-16", key, tfc_pad=1025)
