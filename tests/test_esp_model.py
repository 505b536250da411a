"""Known-answer and property tests of the independent ESP model (tests/esp_model.py). No core, no pecore.

The published vectors anchor the model without the core: the fourteen AES-GCM ESP packets of
draft-mcgrew-gcm-test-01 §4 (32-bit and extended sequence numbers, 128/192/256-bit keys), its AES-GMAC packet
and its two last GCM packets (ciphertext only), and RFC 7634 Appendix A (ChaCha20-Poly1305, tunnel mode).  The
bytes are the ones core/tests/test_esp.c holds, copied here so that this file reads no project code.  Each
packet opens to the published plaintext, and sealing that plaintext with the published IV gives the published
octets back (the sender side too, although the documents' IVs are random).
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

import esp_model as m

MCGREW = [  # key, nonce (salt || IV), plaintext (payload || padding || trailer), AAD, ciphertext, ICV
    ('4c80cdefbb5d10da906ac73c3613a634',
     '2e443b684956ed7e3b244cfe',
     '45000048699a000080114db7c0a80102c0a801010a9bf15638d301000001000000000000045f736970045f756470037369700963796265726369747902646b000021000101020201',
     '000043218765432100000000',
     'fecf537e729d5b07dc30df528dd22b768d1b98736696a6fd348509fa13ceac34cfa2436f14a3f3cf65925bf1f4a13c5d15b21e1884f5ff6247aeabb786b93bce61bc17d768fd9732',
     '459018148f6cbe722fd04796562dfdb4'),
    ('feffe9928665731c6d6a8f9467308308',
     'cafebabefacedbaddecaf888',
     '4500003e698f000080114dccc0a80102c0a801010a980035002a2343b2d001000001000000000000037369700963796265726369747902646b00000100010001',
     '0000a5f80000000a',
     'deb22cd9b07c72c16e3a65beeb8df304a5a5897d33ae530f1ba76d5d114d2a5c3de81827c10e9a4f51330d0eec416642cfbb85a5b47e48a4ec3b9ba95d918bd1',
     '83b70d3aa8bc6ee4c309e9d85a41ad4a'),
    ('abbccddef00112233445566778899aababbccddef00112233445566778899aab',
     '112233440102030405060708',
     '4500003069a6400080062690c0a801029389155e0a9e008b2dc57ee0000000007002400020bf0000020405b40101040201020201',
     '4a2cbfe300000002',
     'ff425c9b724599df7a3bcd510194e00d6a78107f1b0b1cbf06efae9d65a5d763748a637985771d347f0545659f14e99def842d8e',
     'b335f4eecfdbf831824b4c4915956c96'),
    ('00000000000000000000000000000000',
     '000000000000000000000000',
     '4500003c99c500008001cb7a40679318010101010800075c020044006162636465666768696a6b6c6d6e6f707172737475767761626364656667686901020201',
     '0000000000000001',
     '4688daf2f973a392732909c331d56d60f694abaa414b5e7ff5fdcdfff5e9a284456476492719ffb64de7d9dca1e1d894bc3bd57873ed4d181d19d4d5c8c18af3',
     'f821d496eeb096e98ad2b69e4799c71d'),
    ('3de09874b388e6491988d0c3607eae1f',
     '57690e434e280000a2fca1a3',
     '4500003c99c300008001cb7c40679318010101010800085c020043006162636465666768696a6b6c6d6e6f707172737475767761626364656667686901020201',
     '42f67e3f1010101010101010',
     'fba2caa4853cf9f0f22cb10d86dd83b0fec75691cf1a04b00d1138ec9c35791765acbd8701ad79845bf9fe3fba487bc91755e6662b4c8d0d1f5e22739530320a',
     'e0d731cc978ecafaeae88f00e80d6e48'),
    ('3de09874b388e6491988d0c3607eae1f',
     '57690e434e280000a2fca1a3',
     '4500001c42a200008001441f406793b6e00000020a00f5ff01020201',
     '42f67e3f1010101010101010',
     'fba2ca845e5df9f0f22c3e6e86dd831e1fc65792cd1af9130e1379ed',
     '369f071f35e034be95f112e4e7d05d35'),
    ('feffe9928665731c6d6a8f9467308308feffe9928665731c',
     'cafebabefacedbaddecaf888',
     '45000028a4ad4000400678800a01038f0a010612802306b8cb712602dd6bb03e501016d075680001',
     '0000a5f80000000a',
     'a5b1f8066029aea40e598b8122de02420938b3ab33f828e687b8858b5bfbdbd0315b27452144cc77',
     '95457b9652037f5318027b5b4cd7a636'),
    ('abbccddef00112233445566778899aab',
     'decaf888cafedebaceface74',
     '4500004933ba00007f119106c3fb1d10c2b1d326c02831ce0035dd7b800302d500004e20001e8c18d75b81dc91baa0476b91b924b280389d92c963bac046ec959b6266c04722b14923010101',
     '000001000000000000000001',
     '18a6fd42f72cbf4ab2a2ea901f73d814e3e7f243d95412e1c349c1d2fbec168f9190feebaf2cb01984e65863965d7472b79da345e0e780191f0d2f0e0f496c226f2127b27db35724e7845d68',
     '651f57e65f354f75ff17015769623436'),
    ('abbccddef00112233445566778899aababbccddef00112233445566778899aab',
     '73616c74616e640169766563',
     '45080028732c00004006e9f90a0106120a01038f06b88023dd6bafbecb71260250101f646d540001',
     '17405e67156f3126dd0db99b',
     'f2d69ecdbd5a0d5b8d5ef38bad4da58d1f278fde98ef67549d524a3018d9a57ff4d3a31ce673119e',
     '451626c2415771e3b7eebca614c89b35'),
    ('3de09874b388e6491988d0c3607eae1f',
     '57690e434e280000a2fca1a3',
     '45000049333e00007f119182c3fb1d10c2b1d326c02831ce0035cb458003025b000001e0001e8c18d65759d52284a0352c71475c8880391c764d6e5ee0496b325ae270c03899493915010101',
     '42f67e3f1010101010101010',
     'fba2cad12fc1f9f00d3cebf305410db83d7784b607323d220f24b0a97d54182800cadb0f68d99ef0e0c0c89ae9bea8884e52d65bc1afd0740f742444747b5b39ab533163aad4550ee5160975',
     'cdb608c5769189609763b8e18caa81e2'),
    ('abbccddef00112233445566778899aababbccddef00112233445566778899aab',
     '73616c74616e640169766563',
     '636973636f0172756c657301746865016e6574776501646566696e6501746865746563686e6f6c6f67696573017468617477696c6c01646566696e65746f6d6f72726f7701020201',
     '17405e67156f3126dd0db99b',
     'd4b7ed86a1777f2ea13d6973d324c69e7b43f826fb56831226508bebd2dceb18d0a6df10e5487df074113e14c641024e3e6773d91a62ee429b043a10e3efe6b012a49363412364f8',
     'c0cac587f249e56b11e24f30e44ccc76'),
    ('7d773d00c144c525ac619d18c84a3f47',
     'd966426743457e9182443bc6',
     '01020201',
     '335467aeffffffff',
     '437f866b',
     'cb3f699fe9b0822bac961c4504bef270'),
    ('abbccddef00112233445566778899aab',
     'decaf888cafedebaceface74',
     '746f016265016f72016e6f7401746f0162650001',
     '000001000000000000000001',
     '29c9fc69a197d038ccdd14e2ddfcaa0543332164',
     '412503524303ed3c6c5f283843af8c3e'),
    ('6c6567616c697a656d6172696a75616e61616e64646f69746265666f72656961',
     '7475726e333021696765746d',
     '45000030da3a00008001df3bc0a80005c0a800010800c6cd020007006162636465666768696a6b6c6d6e6f707172737401020201',
     '796b6963ffffffffffffffff',
     'f97ab2aa356d8edce17644ac8c78e25dd24dedbb29ebf1b64a274b39b49c3a864cd3d78ca4ae68a32b42458fb57dbe821dcc63b9',
     'd0937ba2945f669368661a329fb4c053'),
]

# draft-mcgrew-gcm-test-01 §4, AES-GMAC (RFC 4543): SPI 0x4321, Seq 7, IV 0, payload || padding || trailer, ICV
MCGREW_GMAC = ("4c80cdefbb5d10da906ac73c3613a634" "22433c64",
               "45000030da3a00008001df3bc0a80005c0a800010800c6cd020007006162636465666768696a6b6c6d6e6f707172737401020201",
               "f2a9a836e155106aa8dcd618e4099aaa")
# its two last AES-GCM packets, ciphertext only: keymat, AAD (SPI || Seq high || Seq low), IV, ciphertext || ICV
MCGREW_LAST = [
    ("3de09874b388e6491988d0c3607eae1f57690e43", "3f7ef6421010101010101010", "4e280000a2fca1a3",
     "fba2caa8c6c5f9f0f22ca54a061210ad3f6e5791cf1aca210d117cec9c35791765acbd8701ad79845bf9fe3fba487bc96321930684eecadb"
     "56912546e7a95c9740d7cb05"),
    ("4c80cdefbb5d10da906ac73c3613a63422433c64", "000043218765432100000007", "4855ec7d3a234bfd",
     "74752e8aeb5d873cd7c0f4acc36c4bff84b7d7b98f0ca8b6acda6894bc619069ef9cbc28fe1b56a7c4e0d58c86cd2bc0"),
]
# RFC 7634 Appendix A: keymat (key || salt), the ESP packet, the inner packet
RFC7634_KEYMAT = "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f" "a0a1a2a3"
RFC7634_ESP = ("01020304" "00000005" "1011121314151617"
               "24039428b97f417e3c13753a4f05087b67c352e6a7fab1b982d466ef407ae5c614ee8099d52844eb61aa95df"
               "ab4c02f72aa71e7c4c4f64c9befe2facc638e8f3cbec163fac469b502773f6fb94e664da9165b82829f641e0"
               "76aaa8266b7fb0f7b11b369907e1ad43")
RFC7634_INNER = ("45000054a6f200004001e778c6336405c00002050800" "5b7a3a080000553bec1000073627"
                 "08090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f3031323334353637")


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
    h[10:12] = struct.pack(">H", m._csum(bytes(h[:20])))
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
    assert m.open(r, m.seal(tx, inner, 4, 137)).seq == 137  # in the window, never received
