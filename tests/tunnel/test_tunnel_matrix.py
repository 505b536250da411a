"""The live endpoint end to end, over the whole matrix: protocol (PSP, EESP, ESP) x mode x outer encapsulation
(UDP; for EESP and ESP also straight in IP) x outer family (IPv4, IPv6) x inner family (IPv4, IPv6; in transport
mode the packets' own addresses are the outer ones, so the inner family is the outer).

For every cell, between two namespaces (conftest.py): 3 pings all come back, 2 pings of the device's full MTU
with DF set come back (what the endpoint chose as MTU really fits the 1500-octet veth), a 20 MiB TCP transfer
of random octets arrives with the SHA-256 of what was sent, and the counters both ends write when they stop
account for it.  The whole matrix is kept (30 cells): one cell takes about a second here.  In transport mode each
side routes the other's outer address into its device (tunnel_fixtures.py); that the packets really went in
transport mode shows in the receiver: its SAs are transport-mode ones, which refuse a tunnelled packet's Next
Header (4 or 41).

The matrix runs with the endpoint's defaults, the kernel's offloads on (UDP GSO/GRO, TUN TSO).  Then each
offload path meets the plain one: one end, or both, with --no-udp-offloads --no-tun-offloads, an 8 MiB
transfer each way.
"""
from __future__ import annotations

import pytest

from tunnelutil import SPI_A, SPI_B, bad_categories, drops, per_sa
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair, tunnel_pair  # noqa: F401

pytestmark = pytest.mark.tunnel

MiB = 1 << 20
TRANSFER = 20 * MiB

CELLS = [(proto, mode, outer, family, inner)
         for proto, outers in (("psp", ("udp",)), ("eesp", ("udp", "ip")), ("esp", ("udp", "ip")))
         for mode in ("tunnel", "transport") for outer in outers for family in (4, 6)
         for inner in ((4, 6) if mode == "tunnel" else (family,))]


def check_counters(t, sa: dict, sb: dict, transfer: int) -> None:
    """What the two ends counted agrees with what went through: a sent on SPI_A, b on SPI_B."""
    for st, name in ((sa, "a"), (sb, "b")):
        assert st["protocol"] == t.protocol and st["outer"] == t.outer and st["mode"] == t.mode, st
        assert st["workers"] == 1 and len(st["per_worker"]) == 1, st
        assert st["received"]["packets"] > 0, (name, st)
        assert st["sent"]["packets"] > 0, (name, st)
        assert bad_categories(st["received"]) == {}, (name, st["received"])
        for e in st["per_sa"]:
            assert bad_categories(e["counts"]) == {}, (name, e)
        # a clean veth between two good ends: nothing at all is dropped, and no SPI is unknown
        assert drops(st["received"]) == {} and drops(st["sent"]) == {}, (name, st)
        assert st["unknown_spi"]["packets"] == 0 and drops(st["unknown_spi"]) == {}, (name, st)
    for st, mine, theirs in ((sa, SPI_A, SPI_B), (sb, SPI_B, SPI_A)):
        inn, out = per_sa(st, theirs, "in"), per_sa(st, mine, "out")
        # every packet received came on the peer's SA, every packet sent went on our own
        assert inn["packets"] == st["received"]["packets"] and inn["octets"] == st["received"]["octets"], st
        assert out["packets"] == st["sent"]["packets"] and out["octets"] == st["sent"]["octets"], st
        assert st["per_worker"][0]["received"] == st["received"] and st["per_worker"][0]["sent"] == st["sent"]
    # nothing arrives that was not sent (the last few may still be in flight when both stop at once)
    assert sb["received"]["packets"] <= sa["sent"]["packets"]
    assert sa["received"]["packets"] <= sb["sent"]["packets"]
    # the transfer went a -> b: its octets (inner packets: payload and TCP/IP headers) are in b's "in" SA
    assert per_sa(sb, SPI_A, "in")["octets"] >= transfer
    assert per_sa(sb, SPI_A, "in")["packets"] >= transfer // t.b.mtu


@pytest.mark.parametrize("proto,mode,outer,family,inner", CELLS,
                         ids=[f"{p}-{m}-{o}-outer{f}-inner{i}" for p, m, o, f, i in CELLS])
def test_ping_transfer_and_counters(tunnel_pair, proto, mode, outer, family, inner):
    t = tunnel_pair(proto, outer=outer, family=family, inner=inner, mode=mode)
    assert t.ping(count=3) == 3, t.a.log() + t.b.log()

    # a packet of the device's whole MTU, DF set, both ways (the reply is as large)
    mtu = t.a.mtu
    assert mtu == t.b.mtu and 1280 <= mtu < 1500
    assert t.ping(count=2, size=mtu - (28 if inner == 4 else 48), dont_fragment=True) == 2, (mtu, t.a.log())

    sent, got = t.transfer(TRANSFER)
    assert sent["errors"] == [] and got["errors"] == [], (sent, got)
    assert [s["bytes"] for s in got["streams"]] == [TRANSFER]
    assert got["streams"][0]["sha256"] == sent["streams"][0]["sha256"]

    sa, sb = t.stop()
    check_counters(t, sa, sb, TRANSFER)


NO_OFFLOADS = ["--no-udp-offloads", "--no-tun-offloads"]
MIXED = [("esp", 4, 4), ("eesp", 6, 6), ("psp", 4, 6)]


@pytest.mark.parametrize("plain", ["a", "b", "both"])
@pytest.mark.parametrize("proto,family,inner", MIXED, ids=[f"{p}-outer{f}-inner{i}" for p, f, i in MIXED])
def test_offloads_meet_the_plain_path(tunnel_pair, proto, family, inner, plain):
    t = tunnel_pair(proto, family=family, inner=inner, extra_a=NO_OFFLOADS if plain in ("a", "both") else (),
                    extra_b=NO_OFFLOADS if plain in ("b", "both") else ())
    assert t.ping(count=3) == 3
    for src in ("a", "b"):
        sent, got = t.transfer(8 * MiB, src=src)
        assert sent["errors"] == [] and got["errors"] == [], (src, sent, got)
        assert got["streams"] == sent["streams"], src
    sa, sb = t.stop()
    for st in (sa, sb):
        assert drops(st["received"]) == {} and drops(st["sent"]) == {}, st
        assert st["received"]["octets"] >= 8 * MiB


@pytest.mark.parametrize("proto,family", [("esp", 4), ("psp", 6)])
def test_transport_mode_refuses_what_its_header_cannot_carry(tunnel_pair, proto, family):
    """In transport mode a packet's own IP header goes out as the outer one: a packet the device hands the
    endpoint for another address than the peer's is dropped, counted, and the tunnel goes on."""
    t = tunnel_pair(proto, family=family, mode="transport")
    other = "198.51.100.77" if family == 4 else "2001:db8:1::77"  # on the veth's prefix, routed into the device
    t.pair.ip("a", f"-{family}", "route", "add", other, "dev", t.a.dev)
    assert t.pair.ping("a", other, count=2, deadline=3) == 0
    assert t.ping(count=3) == 3
    sa, sb = t.stop()
    assert drops(sa["sent"]) == {"tunnel-transport-header": 2}, sa["sent"]
    assert drops(per_sa(sa, SPI_A, "out")) == {"tunnel-transport-header": 2}, sa
    assert sa["sent"]["packets"] == 3 and sb["received"]["packets"] == 3, (sa, sb)
    assert drops(sb["received"]) == {}, sb
