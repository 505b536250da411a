"""pyeesp.scapy: the EESP layer, its options, the UDP 4500 dispatcher and EESPSecurityAssociation over the core.

- bytes: the layer built from fields gives the core's octets (the eesp.md §19 vectors E1-E5, and every
  suite/mode/format), a dissected packet rebuilt from its fields gives the same octets, and pyeesp.Header
  agrees with the layer on Base Header and options;
- round trips through scapy and the core in both directions for every suite, mode, format, SN/IV layout,
  AAD variant, IP and UDP encapsulation, Sub SAs;
- UDP 4500: scapy's ESP/IKE/keepalive dissection is unchanged by the import and by the opt-in dispatcher;
- malformed packets dissect without raising and keep their octets; errors are pyeesp's typed exceptions;
- rdpcap of our captures dissects, and show()/show2() print every field, options decoded.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.all import IP, UDP, TCP, Ether, IPv6, Raw, raw, rdpcap
from scapy.layers.inet6 import IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.ipsec import ESP, NAT_KEEPALIVE, NON_ESP
from scapy.packet import NoPayload

import pyeesp
import pyeesp.scapy as es
from conftest import DATA_DIR, REPO_ROOT
from pecore.keys import load_key_file
from pyeesp.scapy import (
    EESP,
    EESPOptCryptOffset,
    EESPOption,
    EESPOptPad1,
    EESPOptPadN,
    EESPOptUnknown,
    EESPSecurityAssociation,
    bind_udp_encap,
    register_layout,
    set_default_layout,
    set_ip_protocol,
    unbind_udp_encap,
)

KAT = json.loads((DATA_DIR / "eesp_kat.json").read_text())
ROOT = bytes(range(32))
INNER_HEX = "4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef"
ALL_SUITES = list(pyeesp.SUITES)


def examples(n: int) -> int:
    """At most n examples: these run scapy per example; a smaller profile setting wins."""
    return min(settings().max_examples, n)


@pytest.fixture(autouse=True)
def _restore_layer_state():
    """Layouts, the IP protocol and the UDP binding are process-wide: put them back after each test."""
    layouts = dict(es._LAYOUTS)
    default = es._default_layout
    yield
    es._LAYOUTS.clear()
    es._LAYOUTS.update(layouts)
    es._default_layout = default
    if es.ip_protocol() != es.DEFAULT_IP_PROTOCOL:
        set_ip_protocol(es.DEFAULT_IP_PROTOCOL)
    for port in list(es._udp_ports):
        unbind_udp_encap(port)


@pytest.fixture
def udp_encap():
    bind_udp_encap()
    yield
    unbind_udp_encap()


def inner_v4(payload: bytes = b"hello EESP", proto: str = "udp"):
    l4 = UDP(sport=1234, dport=5678) if proto == "udp" else TCP(sport=443, dport=40000, flags="A")
    return IP(src="10.0.0.1", dst="10.0.0.2", id=3) / l4 / Raw(payload)


def inner_v6(payload: bytes = b"hello EESP over IPv6"):
    return IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=53, dport=5353) / Raw(payload)


def rebuild(pkt):
    """The packet built again from its dissected field values, layer by layer."""
    out = None
    layer = pkt
    while not isinstance(layer, NoPayload):
        fresh = layer.__class__(**dict(layer.fields))
        out = fresh if out is None else out / fresh
        layer = layer.payload
    return out


def _shown(layer) -> set:
    one = layer.copy()
    one.remove_payload()
    # "name = value", and "\\name \\" for packet lists; option lines start with "|"
    return set(re.findall(r"^[\s|]*\\?(\w+)\s*[=\\]", one.show(dump=True), re.M))


def assert_shows_every_field(pkt) -> None:
    """show() of the EESP layer names every field present, and every field of every option."""
    e = pkt[EESP]
    shown = _shown(e)
    for f in e.fields_desc:
        if f.isconditional and not f.cond(e):
            continue
        assert f.name in shown, f.name
    for opt in e.options:
        for f in opt.fields_desc:
            assert f.name in shown, (type(opt).__name__, f.name)
        assert opt.name in e.show(dump=True)
    text = pkt.show2(dump=True)
    assert "###[ EESP ]###" in text


def key_for(suite: str, bits: int = 128) -> bytes:
    name, salt, _iv, _icv, _io, _kl = es.suite_info(suite, bits)
    n = 32 if name.startswith("chacha20") else bits // 8
    return bytes(range(0x40, 0x40 + n + salt))


# --------------------------------------------------------------------------- bindings


def test_ip_protocol_49_both_ip_versions():
    for pkt in (IP() / EESP(spi=5), IPv6() / EESP(spi=5), IPv6() / IPv6ExtHdrHopByHop() / EESP(spi=5),
                IPv6() / IPv6ExtHdrDestOpt() / EESP(spi=5)):
        wire = raw(pkt / Raw(b""))
        back = pkt.__class__(wire)
        assert back[EESP].spi == 5
        if isinstance(pkt, IP):
            assert back.proto == 49
    assert (IP() / EESP()).proto == 49 and (IPv6() / EESP()).nh == 49


def test_set_ip_protocol():
    assert set_ip_protocol(253) == 49
    assert (IP() / EESP()).proto == 253
    assert IP(raw(IP() / EESP(spi=9)))[EESP].spi == 9
    assert not IP(raw(IP(proto=49) / Raw(bytes(40)))).haslayer(EESP)
    sa = EESPSecurityAssociation(0x10, key=bytes(20))
    assert sa.encrypt(inner_v4()).proto == 253  # new SAs follow
    assert set_ip_protocol(49) == 253
    assert IP(raw(IP(proto=49) / Raw(bytes(40)))).haslayer(EESP)
    with pytest.raises(pyeesp.ConfigurationError):
        set_ip_protocol(256)


UDP4500_SAMPLES = {
    "keepalive": b"\xff",
    "ike": b"\x00\x00\x00\x00" + bytes.fromhex("0011223344556677" "0000000000000000" "2e202208" "00000000" "0000001c"),
    "esp": bytes.fromhex("00001234000000010102030405060708090a0b0c0d0e0f10"),
    "eesp": raw(EESP(spi=0x5000, seq=1, iv=1, data=b"ciphertext", icv=bytes(16))),
}


def _udp4500(payload: bytes, sport: int = 4500, dport: int = 4500):
    return raw(IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=sport, dport=dport) / Raw(payload))


def test_udp_4500_stays_scapys_until_opt_in():
    """Importing pyeesp.scapy changes nothing on UDP 4500: an EESP first octet still goes to ESP."""
    expected = {"keepalive": NAT_KEEPALIVE, "ike": NON_ESP, "esp": ESP, "eesp": ESP}
    for kind, payload in UDP4500_SAMPLES.items():
        assert IP(_udp4500(payload)).haslayer(expected[kind]), kind
        assert not IP(_udp4500(payload)).haslayer(EESP)


def test_udp_4500_dispatch_keeps_scapys_classes(udp_encap):
    unbind_udp_encap()
    before = {k: {d: repr(IP(_udp4500(p, *d))) for d in ((4500, 4500), (4500, 33333), (33333, 4500))}
              for k, p in UDP4500_SAMPLES.items()}
    bind_udp_encap()
    bind_udp_encap()  # idempotent
    for kind, payload in UDP4500_SAMPLES.items():
        for ports in ((4500, 4500), (4500, 33333), (33333, 4500)):
            after = IP(_udp4500(payload, *ports))
            if kind == "eesp":
                assert isinstance(after[UDP].payload, EESP) and after[EESP].spi == 0x5000
                assert raw(after) == _udp4500(payload, *ports)
            else:  # ESP-in-UDP, IKE (and its ISAKMP layer) and keepalives: exactly as scapy had them
                assert repr(after) == before[kind][ports], kind
    assert IP(_udp4500(UDP4500_SAMPLES["ike"])).haslayer(NON_ESP)
    unbind_udp_encap()
    assert repr(IP(_udp4500(UDP4500_SAMPLES["esp"]))) == before["esp"][(4500, 4500)]
    assert not IP(_udp4500(UDP4500_SAMPLES["eesp"])).haslayer(EESP)


def test_udp_dispatcher_uses_the_core_rule():
    from scapy.packet import Packet

    d = es.IPsecUDPEncap
    assert d.dispatch_hook(b"\xff") is NAT_KEEPALIVE
    assert d.dispatch_hook(b"\xff\xff") is ESP  # only a lone 0xFF is a keepalive, and 0xff no EESP octet 0
    assert d.dispatch_hook(b"\x00\x00\x00\x00") is NON_ESP
    assert d.dispatch_hook(b"\x00\x00\x00") is ESP
    assert d.dispatch_hook(b"\x80") is EESP
    assert d.dispatch_hook(b"\x80\x00\x00\x00\x00\x00\x10\x00") is EESP
    assert d.dispatch_hook(b"\xc1\xa2\xb3\xc4\x00\x00\x00\x01") is ESP  # version 8, R 1: an ESP SPI (eesp.md §14)
    assert d.dispatch_hook(b"\x88\x00\x00\x00") is ESP
    assert d.dispatch_hook(b"\x7f\xff\xff\xff") is ESP
    assert d.dispatch_hook(b"") is d and issubclass(d, Packet)


def test_top_down_udp_ports():
    pkt = IP() / UDP() / EESP()
    assert (pkt[UDP].sport, pkt[UDP].dport) == (4500, 4500)


def test_import_does_not_touch_scapys_esp():
    code = (
        "from scapy.layers.ipsec import ESP\n"
        "from scapy.layers.inet import UDP\n"
        "before = (list(UDP.payload_guess), dict(ESP._overload_fields), ESP.dispatch_hook, ESP.fields_desc[:])\n"
        "import pyeesp.scapy as s\n"
        "after = (list(UDP.payload_guess), dict(ESP._overload_fields), ESP.dispatch_hook, ESP.fields_desc[:])\n"
        "assert [b for b in after[0] if b[1] is ESP] == [b for b in before[0] if b[1] is ESP]\n"
        "assert after[1:] == before[1:]\n"
        "import sys; assert 'pypsp.scapy' not in sys.modules  # no PSP binding as a side effect\n"
        "s.bind_udp_encap(); s.unbind_udp_encap()\n"
        "assert sorted(str(b) for b in UDP.payload_guess if b[1] is ESP) == "
        "sorted(str(b) for b in before[0] if b[1] is ESP)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT)


# --------------------------------------------------------------------------- options and headers


def test_each_option_type():
    e = EESP(spi=0x77, session_id=3, options=[EESPOptPad1(), EESPOptPadN(optdata=b"\0\0\0"),
                                             EESPOptCryptOffset(payload_offset=9, crypt_offset=1, reserved=5),
                                             EESPOptUnknown(otype=224, optdata=b"\xde\xad")], seq=7, iv=7)
    wire = raw(e)
    assert wire[:8].hex() == "800e000300000077"
    assert wire[8:22].hex() == "00" "0103000000" "0202" + f"{(9 << 10) | (1 << 4) | 5:04x}" + "e002dead"
    back = EESP(wire)
    assert [type(o) for o in back.options] == [EESPOptPad1, EESPOptPadN, EESPOptCryptOffset, EESPOptUnknown]
    co = back.crypt_offset_option
    assert (co.payload_offset, co.crypt_offset, co.reserved) == (9, 1, 5)
    assert (back.optlen, back.seq, back.iv, back.pih_zero, back.nh) == (14, 7, 7, 0, 0)  # CryptOffset 1: PIH shown
    hdr = pyeesp.Header.parse(wire)
    assert [(o.type, o.data) for o in hdr.options] == [(0, b""), (1, b"\0\0\0"), (2, bytes.fromhex("2415")),
                                                       (224, b"\xde\xad")]
    assert hdr.build() == wire[:22]
    assert_shows_every_field(back)
    # a Crypt Offset TLV of another length is kept raw (D3 makes it malformed)
    odd = EESP(raw(EESP(spi=1, options=[EESPOptUnknown(otype=2, optdata=b"\x01\x02\x03")])))
    assert isinstance(odd.options[0], EESPOptUnknown) and odd.options[0].optdata == b"\x01\x02\x03"
    # the dispatching base class
    assert isinstance(EESPOption(b"\x01\x00"), EESPOptPadN) and isinstance(EESPOption(b"\x07\x00"), EESPOptUnknown)


OPTION = st.one_of(
    st.just(("pad1", None)),
    st.tuples(st.just("padn"), st.integers(0, 12)),
    st.tuples(st.just("unknown"), st.tuples(st.integers(3, 255), st.binary(max_size=12))),
)


@settings(max_examples=examples(300))
@given(
    opts=st.lists(OPTION, max_size=8),
    co=st.none() | st.tuples(st.integers(0, 63), st.integers(0, 63), st.integers(0, 15)),
    spi=st.integers(0, 2**32 - 1),
    session=st.integers(0, 0xFFFF),
    version=st.integers(0, 15),
    reserved=st.integers(0, 7),
    compat=st.integers(0, 1),
    rest=st.binary(max_size=40),
)
def test_header_and_options_match_pyeesp_header(opts, co, spi, session, version, reserved, compat, rest):
    layer_opts, core_opts = [], []
    if co is not None:
        layer_opts.append(EESPOptCryptOffset(payload_offset=co[0], crypt_offset=co[1], reserved=co[2]))
        core_opts.append(pyeesp.Option.crypt_offset(*co))
    for kind, arg in opts:
        if kind == "pad1":
            layer_opts.append(EESPOptPad1())
            core_opts.append(pyeesp.Option.pad1())
        elif kind == "padn":
            layer_opts.append(EESPOptPadN(optdata=bytes(arg)))
            core_opts.append(pyeesp.Option.padn(arg + 2))
        else:
            layer_opts.append(EESPOptUnknown(otype=arg[0], optdata=arg[1]))
            core_opts.append(pyeesp.Option(arg[0], arg[1]))
    e = EESP(esp_compat=compat, version=version, reserved=reserved, session_id=session, spi=spi, options=layer_opts)
    core_hdr = pyeesp.Header(spi=spi, session_id=session, options=core_opts, version=version, reserved=reserved,
                             esp_compat=bool(compat))
    built = raw(e)
    assert built[: core_hdr.header_len] == core_hdr.build()
    wire = core_hdr.build() + rest
    back = EESP(wire)
    assert raw(back) == wire
    assert (back.esp_compat, back.version, back.reserved, back.optlen, back.session_id, back.spi) == (
        compat, version, reserved, core_hdr.opt_len, session, spi)
    assert [raw(o) for o in back.options] == [raw(o) for o in layer_opts]
    if back.stopped_at is None:  # dissected to the end (a short tail stops before Seq/IV)
        assert raw(EESP(**back.fields)) == wire
    if compat and version == 0 and reserved == 0:
        parsed = pyeesp.Header.parse(wire)
        assert [(o.type, o.data) for o in parsed.options] == [(o.type, o.data) for o in core_opts]
    back.show(dump=True)


# --------------------------------------------------------------------------- the §19 vectors, built from fields


def _kat_inner(v):
    if v["mode"] == "tunnel":
        return IP(bytes.fromhex(KAT["common"]["innerIpv4Udp"]))
    l4 = UDP(bytes.fromhex(v["l4"]))
    return (IPv6(src="2001:db8::1", dst="2001:db8::2") if v.get("outerIpVersion") == 6
            else IP(src="10.0.0.1", dst="10.0.0.2")) / l4


@pytest.mark.parametrize("v", KAT["vectors"], ids=lambda v: v["name"])
def test_section19_vectors(v):
    suite = "aes-gcm-16-iiv" if v["encrId"] == 30 else "aes-gcm-16"
    sa = EESPSecurityAssociation(0x1000, suite, root_key=ROOT, sskdf="hkdf-sha256", sub_sa_id=1, mode=v["mode"],
                                 format=v["format"], seq_num=v["seq"], crypt_offset=v.get("cryptOffset"),
                                 max_crypt_offset=v.get("maxCryptOffset"))
    expected = bytes.fromhex(v["wire"] if "wire" in v else v["variants"]["draft"]["wire"])
    wire = sa.encrypt(_kat_inner(v))
    e = wire[EESP]
    assert raw(e) == expected
    # the same octets, built from fields alone
    fields = dict(session_id=1, spi=0x1000, seq=v["seq"],
                  data=bytes.fromhex(v["ciphertext"]),
                  icv=bytes.fromhex(v.get("icv") or v["variants"]["draft"]["icv"]))
    if v["iv"] is not None:
        fields["iv"] = v["iv"]
    opts = bytes.fromhex(v["options"])
    if opts == bytes.fromhex("02021c80"):
        fields["options"] = [EESPOptCryptOffset(payload_offset=7, crypt_offset=8)]
        fields.update(nh=4, padlen=0)
        fields["data"] = bytes.fromhex(KAT["common"]["innerIpv4Udp"])[:28] + fields["data"]
    elif opts == bytes.fromhex("01020000"):
        fields["options"] = [EESPOptPadN(optdata=b"\0\0")]
    assert raw(EESP(**fields)) == expected
    assert raw(rebuild(wire)) == raw(wire)
    assert_shows_every_field(wire)
    assert ("iv" in e.fields) == (v["iv"] is not None)
    assert raw(sa.decrypt(wire)) == raw(_kat_inner(v))
    assert sa.last_decrypted.seq == v["seq"] and sa.last_decrypted.next_header == v["nextHeader"]


def test_e1_linux_xfrm_variant():
    v = KAT["vectors"][0]
    sa = EESPSecurityAssociation(0x1000, "aes-gcm-16", root_key=ROOT, sub_sa_id=1, aad="linux-xfrm")
    wire = sa.encrypt(IP(bytes.fromhex(INNER_HEX)))
    assert raw(wire[EESP]).hex() == v["variants"]["linux-xfrm"]["wire"]


# --------------------------------------------------------------------------- round trips


def _combos():
    for mode in ("tunnel", "transport"):
        for fmt in ("auto", "full", "optimized"):
            for seq in (True, False):
                for aad in ("draft", "linux-xfrm"):
                    for udp in (False, True):
                        for inner in ("v4", "v6"):
                            yield mode, fmt, seq, aad, udp, inner


@pytest.mark.parametrize("suite", ALL_SUITES)
def test_round_trips_every_suite_mode_format(suite, udp_encap):
    """Every combination: our SA's octets are pyeesp.SA's; the dissected packet rebuilds to them; each side
    decrypts what the other encrypted."""
    name, salt, s_iv, s_icv, integrity_only, _ = es.suite_info(suite)
    done = 0
    for i, (mode, fmt, seq, aad, udp, inner) in enumerate(_combos()):
        if name.endswith("-iiv") and not seq:
            with pytest.raises(pyeesp.ConfigurationError):
                EESPSecurityAssociation(0x100, suite, key=key_for(suite), seq_present=False)
            continue
        if integrity_only and aad == "linux-xfrm":
            with pytest.raises(pyeesp.ConfigurationError):
                EESPSecurityAssociation(0x100, suite, key=key_for(suite), aad=aad)
            continue
        bits = (128, 192, 256)[i % 3]
        key = key_for(suite, bits)
        spi = 0x100 + i
        nat = UDP(sport=4500, dport=4500) if udp else None
        sa = EESPSecurityAssociation(spi, suite, key, mode=mode, format=fmt, seq_present=seq, aad=aad,
                                     nat_t_header=nat)
        core = pyeesp.SA(spi, suite, key=key, key_bits=256 if name.startswith("chacha20") else bits, mode=mode,
                         format=fmt, seq=seq, aad=aad, udp_encap=udp)
        clear = inner_v4(bytes(i % 7)) if inner == "v4" else inner_v6(bytes(i % 5))
        if mode == "transport" and fmt == "optimized":
            with pytest.raises(pyeesp.ConfigurationError):
                sa.encrypt(clear)  # the optimized format needs an inner IP packet
            clear = (IP(src="10.9.9.9", dst="10.9.9.8") if inner == "v4"
                     else IPv6(src="2001:db8::9", dst="2001:db8::8")) / clear
            sa = EESPSecurityAssociation(spi, suite, key, mode=mode, format=fmt, seq_present=seq, aad=aad,
                                         nat_t_header=nat)
        wire = sa.encrypt(clear)
        assert raw(wire) == core.encrypt(raw(clear))
        e = wire[EESP]
        assert e.spi == spi and ("seq" in e.fields) == seq and ("iv" in e.fields) == (s_iv == 8)
        assert len(e.icv) == s_icv and wire.haslayer(UDP) == udp
        assert raw(rebuild(wire)) == raw(wire)
        assert raw(EESP(**e.fields)) == raw(e)
        full = fmt == "full" or (fmt == "auto" and mode == "transport")
        if integrity_only and full:  # AES-GMAC in the full format: the PIH travels in clear
            assert e.nh == (17 if mode == "transport" else 4 if inner == "v4" else 41)
        assert_shows_every_field(wire)
        # scapy -> core and core -> scapy
        assert core.decrypt(raw(wire)).packet == raw(clear)
        wire2 = core.encrypt(raw(clear))
        assert raw(sa.decrypt(wire)) == raw(clear)
        assert raw(sa.decrypt((IP if inner == "v4" else IPv6)(wire2))) == raw(clear)
        done += 1
    assert done >= 48


def test_sub_sas_and_sskdfs():
    for sskdf, root in (("hkdf-sha256", ROOT), ("hkdf-sha384", bytes(range(48))), ("hkdf-sha512", bytes(range(64)))):
        sa = EESPSecurityAssociation(0x700, "aes-gcm-16", root_key=root, sskdf=sskdf, key_bits=256, max_sub_sa_id=7)
        for session in range(8):
            wire = sa.encrypt(inner_v4(bytes([session]) * 9), sub_sa_id=session)
            assert wire[EESP].session_id == session and wire[EESP].seq == 1
            keymat = pyeesp.derive_sub_sa_key(root, session, 36, sskdf)
            single = pyeesp.SA(0x700, "aes-gcm-16", key=keymat, key_bits=256)  # Sub SA key || salt, by hand
            if session == 0:
                assert single.encrypt(raw(inner_v4(bytes(9)))) == raw(wire)
            assert raw(sa.decrypt(wire)) == raw(inner_v4(bytes([session]) * 9))
            assert sa.last_decrypted.sub_sa_id == session
        with pytest.raises(pyeesp.SubSaError):
            sa.encrypt(inner_v4(), sub_sa_id=8)
    other = EESPSecurityAssociation(0x700, "aes-gcm-16", root_key=ROOT, max_sub_sa_id=3)
    wide = pyeesp.SA(0x700, "aes-gcm-16", root_key=ROOT)
    with pytest.raises(pyeesp.SubSaError):
        other.decrypt(IP(wide.encrypt(raw(inner_v4()), sub_sa_id=5)))


def test_sequence_numbers_and_iv():
    sa = EESPSecurityAssociation(0x800, "aes-gcm-16", key=bytes(20), seq_num=10, sub_sa_id=0)
    assert sa.next_seq() == 10
    w = sa.encrypt(inner_v4())
    assert (w[EESP].seq, w[EESP].iv) == (10, 10)
    w = sa.encrypt(inner_v4(), seq_num=100)
    assert w[EESP].seq == 100 and sa.next_seq() == 101
    with pytest.raises(pyeesp.ConfigurationError):
        sa.encrypt(inner_v4(), seq_num=50)
    noseq = EESPSecurityAssociation(0x801, "aes-gcm-16", key=bytes(20), seq_present=False)
    w = noseq.encrypt(inner_v4())
    assert "seq" not in w[EESP].fields and w[EESP].iv == 1
    w = noseq.encrypt(inner_v4())
    assert w[EESP].iv == 2
    assert raw(noseq.decrypt(w)) == raw(inner_v4())
    assert raw(noseq.decrypt(w)) == raw(inner_v4())  # no SN: no anti-replay


def test_crypt_offset_options_and_tunnel_header(udp_encap):
    sa = EESPSecurityAssociation(0x900, "aes-gcm-16", key=bytes(20), mode="tunnel", crypt_offset=8, max_crypt_offset=8,
                                 options=[EESPOptUnknown(otype=230, optdata=b"\x01\x02\x03\x04")],
                                 tunnel_header=IPv6(src="2001:db8::a", dst="2001:db8::b"),
                                 nat_t_header=UDP(sport=4500, dport=4500))
    clear = inner_v4(b"abcdefgh")
    wire = sa.encrypt(clear)
    assert isinstance(wire, IPv6) and wire[UDP].dport == 4500
    e = wire[EESP]
    kinds = [type(o) for o in e.options]
    assert kinds[:2] == [EESPOptCryptOffset, EESPOptUnknown] and set(kinds[2:]) <= {EESPOptPad1, EESPOptPadN}
    assert e.options[0].crypt_offset == 8 and 4 * e.options[0].payload_offset == 8 + e.optlen + 16
    assert (e.nh, e.padlen) == (4, 0)
    assert e.data[:28] == raw(clear)[:28]  # inner IPv4 + UDP headers in clear
    assert raw(sa.decrypt(wire)) == raw(clear)
    # a receiver that did not announce a maximum drops it, telling whether the ICV was valid
    strict_rx = EESPSecurityAssociation(0x900, "aes-gcm-16", key=bytes(20), mode="tunnel",
                                        nat_t_header=UDP(sport=4500, dport=4500), register_layout=False)
    with pytest.raises(pyeesp.PolicyError) as err:
        strict_rx.decrypt(wire)
    assert err.value.icv_valid
    # unknown options are reported ... and dropped by a strict receiver
    plain = EESPSecurityAssociation(0x901, "aes-gcm-16", key=bytes(20), options=b"\xe6\x00")
    w = plain.encrypt(clear)
    assert isinstance(w[EESP].options[0], EESPOptUnknown)
    assert raw(plain.decrypt(w)) == raw(clear)
    strict = EESPSecurityAssociation(0x901, "aes-gcm-16", key=bytes(20), strict=True, register_layout=False)
    with pytest.raises(pyeesp.PolicyError):
        strict.decrypt(w)


def test_suite_names_keys_and_explicit_lengths():
    cases = [
        (("AES-GCM",), dict(icv_len=8), "aes-gcm-8"),
        (("aes-gcm",), dict(iv_len=0), "aes-gcm-16-iiv"),
        (("aes-ccm",), dict(icv_len=8, iv_len=0), "aes-ccm-8-iiv"),
        (("AES-NULL-GMAC",), {}, "aes-gmac"),
        ((20,), {}, "aes-gcm-16"),
        (("ENCR_AES_CCM_12",), dict(icv_len=12, iv_len=8), "aes-ccm-12"),
        (("CHACHA20-POLY1305",), dict(iv_len=0), "chacha20-poly1305-iiv"),
    ]
    for args, kw, name in cases:
        sa = EESPSecurityAssociation(0xA00, *args, key=key_for(name), **kw)
        assert sa.suite == name
        assert raw(sa.decrypt(sa.encrypt(inner_v4()))) == raw(inner_v4())
    for n, bits in ((20, 128), (28, 192), (36, 256)):
        sa = EESPSecurityAssociation(0xA01, "aes-gcm-16", bytes(n))
        assert raw(sa.encrypt(inner_v4())) == pyeesp.SA(0xA01, key=bytes(n), key_bits=bits).encrypt(raw(inner_v4()))
    assert EESPSecurityAssociation(0xA02, "aes-ccm-8", "00" * 19).salt_len == 3  # hex keys, CCM salt 3
    bad = [
        dict(suite="aes-gcm-16", key=bytes(20), icv_len=12),
        dict(suite="aes-gcm-16", key=bytes(20), iv_len=0),
        dict(suite="aes-gcm", key=bytes(20), icv_len=10),
        dict(suite="chacha20-poly1305", key=bytes(36), icv_len=8),
        dict(suite="des", key=bytes(20)),
        dict(suite="aes-gcm-16", key=bytes(21)),
        dict(suite="aes-gcm-16", key="not hex"),
        dict(suite="aes-gcm-16", root_key=ROOT, sskdf="aes256-cmac"),
        dict(suite="aes-gcm-16", root_key=ROOT, key=bytes(20)),
        dict(suite="aes-gmac", key=bytes(20), aad="linux-xfrm"),
        dict(suite="aes-gcm-16", key=bytes(20), mode="beet"),
        dict(suite="aes-gcm-16", key=bytes(20), crypt_offset=2),  # no maximum announced
    ]
    for kw in bad:
        with pytest.raises(pyeesp.ConfigurationError):
            EESPSecurityAssociation(0xA03, **kw)
    with pytest.raises(pyeesp.ConfigurationError):
        EESPSecurityAssociation(0xA03, "aes-gcm-16", bytes(20), key=bytes(20))
    with pytest.raises(TypeError):
        EESPSecurityAssociation(0xA03, key=bytes(20), nat_t_header=IP())


def test_errors_are_typed():
    sa = EESPSecurityAssociation(0xB00, "aes-gcm-16", key=bytes(20))
    wire = sa.encrypt(inner_v4())
    bad = bytearray(raw(wire))
    bad[-1] ^= 1
    with pytest.raises(pyeesp.AuthenticationError) as e:
        sa.decrypt(IP(bytes(bad)))
    assert e.value.code == "authentication-failed"
    assert raw(sa.decrypt(wire)) == raw(inner_v4())
    with pytest.raises(pyeesp.ReplayError):
        sa.decrypt(wire)
    other = EESPSecurityAssociation(0xB01, "aes-gcm-16", key=bytes(20))
    with pytest.raises(pyeesp.NoSaError):
        other.decrypt(wire)
    with pytest.raises(pyeesp.NoSaError):
        other.decrypt(raw(wire))
    with pytest.raises(pyeesp.NotEespError):
        sa.decrypt(inner_v4())
    with pytest.raises(pyeesp.ConfigurationError):
        sa.decrypt(wire, verify=False)
    with pytest.raises(TypeError):
        sa.encrypt(Ether() / inner_v4())
    with pytest.raises(TypeError):
        sa.decrypt(None)
    wrong_key = EESPSecurityAssociation(0xB00, "aes-gcm-16", key=bytes(19) + b"\x01", register_layout=False)
    with pytest.raises(pyeesp.AuthenticationError):
        wrong_key.decrypt(sa.encrypt(inner_v4()))


# --------------------------------------------------------------------------- layouts


def test_layouts():
    gmac = EESPSecurityAssociation(0xC00, "aes-gmac", key=bytes(20), mode="transport")
    assert gmac.layout == es.EESPLayout(True, 8, 16, True)
    w = gmac.encrypt(inner_v4(b"gmac clear"))
    assert (w[EESP].nh, w[EESP].padlen) == (17, 2) and w[EESP].data.startswith(raw(inner_v4(b"gmac clear")[UDP]))
    gmac_tunnel = EESPSecurityAssociation(0xC01, "aes-gmac", key=bytes(20))
    assert not gmac_tunnel.layout.clear_pih
    assert gmac_tunnel.encrypt(inner_v4())[EESP].data.startswith(raw(inner_v4())[:20])  # inner packet in clear
    iiv = EESPSecurityAssociation(0xC02, "aes-ccm-8-iiv", key=bytes(19))
    assert iiv.layout == es.EESPLayout(True, 0, 8, False)
    assert len(iiv.encrypt(inner_v4())[EESP].icv) == 8
    # unknown SPI: the default layout, which can change
    blob = raw(EESP(spi=0xC0FFEE, seq=1, iv=2, data=b"x" * 20, icv=b"y" * 16))
    assert EESP(blob).iv == 2
    previous = set_default_layout(seq=False, iv_len=0, icv_len=8)
    assert previous == es.EESPLayout()
    d = EESP(blob)
    assert "seq" not in d.fields and "iv" not in d.fields and d.icv == b"y" * 8
    set_default_layout(*previous)
    register_layout(0xC0FFEE, seq=True, iv_len=0, icv_len=12)
    d = EESP(blob)
    assert d.seq == 1 and "iv" not in d.fields and len(d.icv) == 12
    assert es.layout_for(0xC0FFEE).icv_len == 12
    es.unregister_layout(0xC0FFEE)
    assert es.layout_for(0xC0FFEE) == es.EESPLayout()
    with pytest.raises(pyeesp.ConfigurationError):
        register_layout(1, iv_len=4)
    quiet = EESPSecurityAssociation(0xC03, "aes-gcm-8", key=bytes(20), register_layout=False)
    assert len(quiet.encrypt(inner_v4())[EESP].icv) == 16  # dissected with the default layout


# --------------------------------------------------------------------------- malformed input


def sample_packets():
    out = []
    sa = EESPSecurityAssociation(0xD00, "aes-gcm-16", key=bytes(20), mode="transport", crypt_offset=2,
                                 max_crypt_offset=2, options=b"\xe7\x02\xab\xcd")
    out.append((sa, sa.encrypt(inner_v6())))
    sa = EESPSecurityAssociation(0xD01, "chacha20-poly1305-iiv", key=bytes(36))
    out.append((sa, sa.encrypt(inner_v4())))
    sa = EESPSecurityAssociation(0xD02, "aes-gmac", key=bytes(20), mode="transport")
    out.append((sa, sa.encrypt(inner_v4(b"gmac"))))
    return out


def test_truncations_dissect_without_raising():
    for sa, wire in sample_packets():
        e = raw(wire[EESP])
        for n in range(1, len(e) + 1):
            p = EESP(e[:n])
            assert raw(p) == e[:n]
            p.show(dump=True)
            p.summary()
        outer = raw(wire)
        cls = IPv6 if outer[0] >> 4 == 6 else IP
        for n in range(len(outer) - len(e), len(outer)):
            pkt = cls(outer[:n])
            assert raw(pkt) == outer[:n]
            pkt.show2(dump=True)
            with pytest.raises(pyeesp.EespError):
                sa.decrypt(outer[:n])


def test_bit_flips_dissect_and_fail_cleanly():
    for sa, wire in sample_packets():
        outer = raw(wire)
        start = len(outer) - len(raw(wire[EESP]))
        cls = IPv6 if outer[0] >> 4 == 6 else IP
        for i in range(len(outer)):
            for bit in (0x01, 0x80):
                flipped = bytearray(outer)
                flipped[i] ^= bit
                pkt = cls(bytes(flipped))
                assert raw(pkt) == bytes(flipped)
                pkt.show2(dump=True)
                if i >= start:
                    with pytest.raises(pyeesp.EespError):
                        sa.decrypt(bytes(flipped))
                else:
                    try:
                        sa.decrypt(bytes(flipped))
                    except pyeesp.EespError:
                        pass


@settings(max_examples=examples(500))
@given(st.binary(max_size=120))
def test_random_octets_never_raise(blob):
    if blob:
        p = EESP(blob)
        assert raw(p) == blob
        p.show(dump=True)
        p.summary()
    pkt = IP(raw(IP(src="10.0.0.1", dst="10.0.0.2", proto=49) / Raw(blob)))
    assert raw(pkt)[20:] == blob
    pkt.show2(dump=True)


@settings(max_examples=examples(300))
@given(optlen=st.integers(0, 255), options=st.binary(max_size=40), tail=st.binary(max_size=40))
def test_random_option_areas_never_raise(optlen, options, tail):
    blob = bytes.fromhex("80") + bytes([optlen]) + bytes.fromhex("000100000abc") + options + tail
    p = EESP(blob)
    assert raw(p) == blob
    p.show(dump=True)
    try:
        pyeesp.Header.parse(blob)
    except pyeesp.EespError:
        pass


# --------------------------------------------------------------------------- captures


@pytest.fixture(scope="module")
def demo_capture(tmp_path_factory):
    d = tmp_path_factory.mktemp("scapy_eesp")
    plain = d / "plain.pcap"
    subprocess.run([sys.executable, str(REPO_ROOT / "demo" / "sample_traffic.py"), str(plain), "-n", "150",
                    "--format", "pcap"], check=True, cwd=REPO_ROOT)
    return plain


def _sa_from_entry(entry):
    s = dict(entry.settings)
    kw = dict(suite=s["suite"], key_bits=s["key_bits"], mode=s["mode"], format=s["format"], seq_present=s["seq"],
              aad=s["aad"], anti_replay=s["anti_replay"], replay_window=s["replay_window"],
              max_sub_sa_id=s["max_sub_sa_id"], max_crypt_offset=s["max_crypt_offset"],
              crypt_offset=s["crypt_offset"], align_options=s["align_options"], strict=s["strict"],
              ip_protocol=s["ip_protocol"])
    if "root_key" in s:
        kw.update(root_key=s["root_key"], sskdf=s["sskdf"])
    else:
        kw.update(key=s["key"])
    if s["udp_encap"]:
        kw["nat_t_header"] = UDP(sport=4500, dport=4500)
    return EESPSecurityAssociation(entry.spi, **kw)


def test_rdpcap_of_our_captures(demo_capture, tmp_path, udp_encap):
    keys = load_key_file(REPO_ROOT / "demo" / "keys.txt")
    plain_frames = rdpcap(str(demo_capture))
    assert len(keys.eesp_sas) == 2
    for entry in keys.eesp_sas:
        out = tmp_path / f"eesp_{entry.spi:x}.pcap"
        pyeesp.encrypt_capture(pyeesp.SA(**entry.settings), str(demo_capture), str(out), sub_sas=entry.sub_sas)
        sa = _sa_from_entry(entry)
        frames = rdpcap(str(out))
        assert len(frames) == len(plain_frames)
        sessions = set()
        for frame, orig in zip(frames, plain_frames):
            if not (orig.haslayer(IP) or orig.haslayer(IPv6)):
                assert raw(frame) == raw(orig)
                continue
            e = frame[EESP]
            assert not e.payload and frame.haslayer(UDP) == bool(entry.settings["udp_encap"])
            sessions.add(e.session_id)
            assert raw(rebuild(frame)) == raw(frame)
            frame.show2(dump=True)
            assert raw(sa.decrypt(frame.payload)) == raw(orig.payload)
        assert sessions == set(range(entry.sub_sas))
        assert_shows_every_field(frames[0])


def test_rdpcap_without_udp_binding_still_reads_esp(demo_capture, tmp_path):
    entry = load_key_file(REPO_ROOT / "demo" / "keys.txt").eesp_sas[1]
    out = tmp_path / "udp.pcap"
    pyeesp.encrypt_capture(pyeesp.SA(**entry.settings), str(demo_capture), str(out))
    frames = [f for f in rdpcap(str(out)) if f.haslayer(UDP)]
    assert frames and all(f.haslayer(ESP) and not f.haslayer(EESP) for f in frames)
