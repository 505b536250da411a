"""pecore.protocol.locate_esp is the core's pe_esp_locate, the steps pe_esp_decap takes: one table of packets, each
with the status and offset the core gives, checked against scapy's own parse of the same octets where scapy can
say (the offset of its ESP layer, its NAT-keepalive and non-ESP-marker layers, its fragment fields).

Two rows are where a Python re-implementation of the locating steps once disagreed with the receiver: a TCP
non-first fragment is not ESP (it was `ip-fragment`), and a UDP length that is not the IP payload's is
`udp-bad-length` (it was `not-esp`).
"""
from __future__ import annotations

import struct

import pytest

pytest.importorskip("scapy")

from scapy.all import IP, TCP, UDP, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, Raw, raw  # noqa: E402
from scapy.all import IPv6ExtHdrRouting  # noqa: E402
from scapy.layers.ipsec import ESP, NAT_KEEPALIVE, NON_ESP  # noqa: E402

from pecore.errors import CATEGORY_BY_CODE  # noqa: E402
from pecore.protocol import eesp_suite, locate_esp  # noqa: E402
from pyesp import SA, Receiver  # noqa: E402

V4 = dict(src="10.0.0.1", dst="10.0.0.2")
V6 = dict(src="2001:db8::1", dst="2001:db8::2")
SPI = 0x01020304
EESP_SPI = 0x80000102  # octet 0 is an EESPv0 Base Header's (eesp.md §14 step 3)


def esp(spi: int = SPI) -> ESP:
    return ESP(spi=spi, seq=7, data=bytes(range(40)))


def udp_bad_length(pkt) -> bytes:  # type: ignore[no-untyped-def]
    w = bytearray(raw(pkt))
    struct.pack_into("!H", w, 24, struct.unpack_from("!H", w, 24)[0] + 4)  # UDP Length 4 past the IP payload
    return bytes(w)


def held_receiver() -> Receiver:
    row = eesp_suite("aes-gcm-16")
    assert row is not None
    return Receiver([SA(EESP_SPI, "aes-gcm-16", bytes(16 + row.salt_len))])


# name, packet (scapy or octets), locate_esp keywords, expected status, expected (udp_encap, offset) when "ok"
CASES = [
    ("esp-v4", IP(**V4) / esp(), {}, "ok", (False, 20)),
    ("esp-v6", IPv6(**V6) / esp(), {}, "ok", (False, 40)),
    ("esp-v6-ext", IPv6(**V6) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / IPv6ExtHdrRouting() / esp(), {},
     "ok", (False, 64)),
    ("udp4500-v4", IP(**V4) / UDP(sport=1111, dport=4500) / esp(), {}, "ok", (True, 28)),
    ("udp4500-v6", IPv6(**V6) / UDP(sport=1111, dport=4500) / esp(), {}, "ok", (True, 48)),
    ("udp-sport-4500", IP(**V4) / UDP(sport=4500, dport=1111) / esp(), {}, "not-esp", None),
    ("udp-sport-4500-either", IP(**V4) / UDP(sport=4500, dport=1111) / esp(), {"either_port": True}, "ok",
     (True, 28)),
    ("wrong-port", IP(**V4) / UDP(sport=1111, dport=4501) / esp(), {}, "not-esp", None),
    ("keepalive", IP(**V4) / UDP(sport=4500, dport=4500) / Raw(b"\xff"), {}, "nat-keepalive", None),
    ("ike-marker", IP(**V4) / UDP(sport=4500, dport=4500) / Raw(bytes(4) + b"ike"), {}, "ike-non-esp-marker", None),
    ("eesp-looking", IP(**V4) / UDP(sport=1111, dport=4500) / esp(EESP_SPI), {}, "eesp-in-udp", None),
    ("eesp-looking-no-eesp", IP(**V4) / UDP(sport=1111, dport=4500) / esp(EESP_SPI), {"eesp_on_port": False}, "ok",
     (True, 28)),
    ("eesp-looking-spi-held", IP(**V4) / UDP(sport=1111, dport=4500) / esp(EESP_SPI), {"receiver": "held"}, "ok",
     (True, 28)),
    ("udp-bad-length", udp_bad_length(IP(**V4) / UDP(sport=1111, dport=4500) / esp()), {}, "udp-bad-length", None),
    ("udp-truncated", raw(IP(**V4, proto=17) / Raw(b"\x04\x57\x11\x94")), {}, "not-esp", None),
    ("esp-first-fragment", IP(**V4, flags="MF") / esp(), {}, "ip-fragment", None),
    ("esp-non-first-fragment", IP(**V4, proto=50, frag=100) / Raw(bytes(40)), {}, "ip-fragment", None),
    ("esp-v6-fragment", IPv6(**V6) / IPv6ExtHdrFragment(offset=10, m=1, nh=50) / Raw(bytes(40)), {}, "ip-fragment",
     None),
    ("udp4500-first-fragment", IP(**V4, flags="MF") / UDP(sport=1111, dport=4500) / esp(), {}, "ip-fragment", None),
    ("udp-non-first-fragment", IP(**V4, proto=17, frag=100) / Raw(bytes(40)), {}, "not-esp", None),
    ("tcp-first-fragment", IP(**V4, flags="MF") / TCP(sport=1, dport=2) / Raw(bytes(20)), {}, "not-esp", None),
    ("tcp-non-first-fragment", IP(**V4, proto=6, frag=100) / Raw(bytes(40)), {}, "not-esp", None),
    ("tcp", IP(**V4) / TCP(sport=1, dport=4500) / Raw(bytes(20)), {}, "not-esp", None),
]


def scapy_parse(wire: bytes):  # type: ignore[no-untyped-def]
    return (IP if wire[0] >> 4 == 4 else IPv6)(wire)


def is_fragment(p) -> bool:  # type: ignore[no-untyped-def]
    if IP in p and not isinstance(p.payload, IP):
        return bool(p[IP].flags.MF) or p[IP].frag != 0
    return IPv6ExtHdrFragment in p


@pytest.mark.parametrize("name,pkt,kwargs,status,where", CASES, ids=[c[0] for c in CASES])
def test_locate_esp(name, pkt, kwargs, status, where):  # type: ignore[no-untyped-def]
    wire = pkt if isinstance(pkt, bytes) else raw(pkt)
    if kwargs.get("receiver") == "held":
        rx = held_receiver()
        kwargs = dict(kwargs, receiver=rx._rx)
    loc, got = locate_esp(wire, **kwargs)
    assert got == status
    assert got == "ok" or got in CATEGORY_BY_CODE
    q = scapy_parse(wire)
    if status == "ok":
        assert (loc.udp_encap, loc.offset) == where
        assert loc.ip_version == wire[0] >> 4 and loc.offset + loc.length == len(wire)
        # scapy decodes this ESP layer (protocol 50, or UDP to or from 4500, its bottom-up bindings) where we do.
        assert ESP in q and len(wire) - len(raw(q[ESP])) == loc.offset
        assert q[ESP].spi == struct.unpack_from("!I", wire, loc.offset)[0]
        return
    assert loc is None
    if status == "nat-keepalive":
        assert NAT_KEEPALIVE in q
    elif status == "ike-non-esp-marker":
        assert NON_ESP in q
    elif status == "ip-fragment":
        assert is_fragment(q)
    elif status == "not-esp" and is_fragment(q):
        # scapy decodes no transport header in a non-first fragment: neither ESP nor UDP (nor TCP) is there.
        if (q[IP].frag if IP in q else 1):
            assert ESP not in q and UDP not in q and TCP not in q
    elif name == "wrong-port":
        assert ESP not in q


def test_disagreements_of_the_python_locate_are_the_cores_answers():
    """The two places the receiver and a Python copy of its steps once parted: the receiver's answers stand."""
    frag = raw(IP(**V4, proto=6, frag=100) / Raw(bytes(40)))
    assert locate_esp(frag) == (None, "not-esp")
    bad = udp_bad_length(IP(**V4) / UDP(sport=1111, dport=4500) / esp())
    assert locate_esp(bad) == (None, "udp-bad-length")
