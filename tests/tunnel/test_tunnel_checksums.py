"""Inner checksums the endpoint completes itself.  With TUN offloads (the default: IFF_VNET_HDR and
TUNSETOFFLOAD) the kernel hands the endpoint packets whose checksum is left to the "device" (NEEDS_CSUM) and
TCP super-packets to cut; the endpoint writes those checksums.  An ordinary UDP socket's datagrams through the
tunnel are such packets.

- UDP datagrams of every size from 0 octets to the device's MTU arrive intact (their hashes), with the
  offloads and without (--no-tun-offloads), IPv4 and IPv6 inside;
- a datagram whose UDP checksum computes to 0 must leave as 0xFFFF (RFC 768, RFC 8200 section 8.1: over IPv6
  a 0 in the field is "no checksum", which a receiver drops): checked on the receiving end's TUN device,
  where the endpoint writes the opened packet, and by its arrival.  (Found here: pe_net_csum_complete
  wrote 0x0000; the IPv6 datagram was dropped by the peer's kernel, Udp6InCsumErrors.  Fixed in b0676b3.)
"""
from __future__ import annotations

import hashlib
import random

import pytest

from tunnelutil import capture, udp_exchange, udp_payload_with_zero_checksum
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair, tunnel_pair  # noqa: F401

pytestmark = pytest.mark.tunnel

OFFLOADS = {"tun-offloads": [], "no-tun-offloads": ["--no-tun-offloads"]}


@pytest.mark.parametrize("offloads", list(OFFLOADS))
@pytest.mark.parametrize("inner", [4, 6])
def test_udp_datagrams_of_every_size_arrive_intact(tunnel_pair, tmp_path, inner, offloads):
    t = tunnel_pair("esp", inner=inner, extra=OFFLOADS[offloads])
    room = t.a.mtu - (28 if inner == 4 else 48)
    rng = random.Random(inner)
    sizes = [0, 1, 2, 3, room - 1, room] + [rng.randrange(0, room + 1) for _ in range(58)]
    payloads = [rng.randbytes(n) for n in sizes]
    got = udp_exchange(t, payloads, tmp=tmp_path)
    assert got == [hashlib.sha256(p).hexdigest() for p in payloads]


@pytest.mark.parametrize("offloads", list(OFFLOADS))
@pytest.mark.parametrize("inner", [4, 6])
def test_a_udp_checksum_that_computes_to_zero_goes_as_ffff(tunnel_pair, tmp_path, inner, offloads):
    t = tunnel_pair("esp", inner=inner, extra=OFFLOADS[offloads])
    sport, dport = 40000, 5002
    payload = udp_payload_with_zero_checksum(t.addr("a"), t.addr("b"), sport, dport)
    other = random.Random(1).randbytes(64)
    got = []

    def send():
        got.extend(udp_exchange(t, [other, payload], sport=sport, dport=dport, tmp=tmp_path))

    # what b's endpoint writes to its device: the opened inner packets
    seen = capture(t.pair, "b", "tun0", t.addr("b"), ["--udp-port", dport], send, count=2, timeout=15,
                   extra=["--incoming", "--no-link-header"])
    assert len(seen) == 2, seen
    hl = 20 if inner == 4 else 40
    fields = [pkt[hl + 6:hl + 8].hex() for pkt in seen]
    assert fields[1] == "ffff", f"the UDP checksum field as written to b's device: {fields}"
    assert got == [hashlib.sha256(other).hexdigest(), hashlib.sha256(payload).hexdigest()]
