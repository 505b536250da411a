"""Forged, replayed and malformed outer packets against a running endpoint, sent from the peer's namespace
through a raw socket (wire.py) so that the receiving kernel hands them to the endpoint like the real ones.

A real packet is captured on the veth while pinging (an AF_PACKET socket, wire.py capture); from it:

- a replay of it, as it was;
- its ICV with one octet flipped, and its sequence number moved 2000 ahead (a number never received, and past
  the 1024-packet window: a receiver that let a packet that fails its ICV move the window would now drop every
  real packet as too old, and the ping afterwards would fail);
- its SPI changed to one the key file does not have;
- cut short (after the header), and cut to 3 octets (too short to hold an SPI);
- a packet the endpoint itself sent (its own SPI), reflected back to it.

The receiving end must count each under the core's status name (core/include/pe/status.h), on the SA's "in"
entry or in unknown_spi, and still carry a ping both ways afterwards (ESP and EESP over UDP and straight in IP,
PSP over UDP).  Then a flood of 20,000 forged packets with random SPIs (ESP, EESP, PSP) must leave the
endpoint's resident memory (VmRSS of its Python process) within 2 MiB of what it was, and the endpoint working.
"""
from __future__ import annotations

import os
import random

import pytest

from tunnelutil import (HEADER_LEN, SPI_A, SPI_B, SPI_OFFSET, capture_real, drops, outer_payload, per_sa, rss_kib,
                        send_raw, seq_of, with_payload, with_seq, with_spi)
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair, tunnel_pair  # noqa: F401

pytestmark = pytest.mark.tunnel

#: What the receiving end counts for each forged packet: (where, status name); where is "sa" (the "in" entry of
#: the sender's SPI) or "unknown" (unknown_spi); None: not dropped (PSP has no anti-replay: a replay is opened).
EXPECTED = {
    "esp": {"replay": ("sa", "replay-duplicate"), "bad-icv": ("sa", "authentication-failed"),
            "unknown-spi": ("unknown", "esp-no-sa"), "truncated": ("sa", "esp-truncated"),
            "no-spi": ("unknown", "esp-truncated"), "reflected": ("unknown", "no-key")},
    "eesp": {"replay": ("sa", "replay-duplicate"), "bad-icv": ("sa", "authentication-failed"),
             "unknown-spi": ("unknown", "eesp-no-sa"), "truncated": ("sa", "eesp-truncated"),
             "no-spi": ("unknown", "eesp-truncated"), "reflected": ("unknown", "no-key")},
    # PSP: the receiver derives the key of any SPI from the master keys, so an unknown SPI fails its ICV
    "psp": {"replay": None, "bad-icv": ("sa", "authentication-failed"),
            "unknown-spi": ("unknown", "authentication-failed"), "truncated": ("sa", "psp-truncated"),
            "no-spi": ("unknown", "psp-truncated"), "reflected": ("unknown", "no-key")},
}

CASES = [("esp", "udp"), ("esp", "ip"), ("eesp", "udp"), ("eesp", "ip"), ("psp", "udp")]


@pytest.mark.parametrize("proto,outer", CASES, ids=[f"{p}-{o}" for p, o in CASES])
def test_forged_replayed_and_truncated_packets_are_counted(tunnel_pair, tmp_path, proto, outer):
    t = tunnel_pair(proto, outer=outer)
    udp = outer == "udp"
    real = capture_real(t, "a")
    assert all(int.from_bytes(outer_payload(p, udp)[SPI_OFFSET[proto]:][:4], "big") == SPI_A for p in real)
    last = max(real, key=lambda p: seq_of(proto, outer_payload(p, udp)))
    esp = outer_payload(last, udp)
    # one of b's own packets (to a), to reflect back to b
    theirs = outer_payload(capture_real(t, "b", 1)[0], udp)

    flipped = bytearray(with_seq(proto, esp, seq_of(proto, esp) + 2000))
    flipped[-1] ^= 0x01
    forged = {
        "replay": esp,
        "bad-icv": bytes(flipped),
        "unknown-spi": with_spi(proto, esp, 0x0BADF00D),
        "truncated": esp[:HEADER_LEN[proto] + 4],
        "no-spi": esp[:3],
        "reflected": theirs,
    }
    send_raw(t.pair, "a", [with_payload(last, forged[k], udp) for k in forged], tmp_path / "forged.hex")

    # still carries traffic both ways, and the forged packet with a far sequence number moved no window
    assert t.ping("a", count=3) == 3, t.b.log()
    assert t.ping("b", count=3) == 3, t.a.log()
    sa, sb = t.stop()

    want_sa, want_unknown = {}, {}
    for k, where in EXPECTED[proto].items():
        if where:
            d = want_sa if where[0] == "sa" else want_unknown
            d[where[1]] = d.get(where[1], 0) + 1
    assert drops(per_sa(sb, SPI_A, "in")) == want_sa, sb
    assert drops(sb["unknown_spi"]) == want_unknown, sb
    assert sb["unknown_spi"]["packets"] == 0
    total = dict(want_sa)
    for k, v in want_unknown.items():
        total[k] = total.get(k, 0) + v
    assert drops(sb["received"]) == total
    # the end that sent nothing forged saw nothing wrong
    assert drops(sa["received"]) == {} and drops(sa["sent"]) == {} and drops(sb["sent"]) == {}
    # PSP opens the replay: one packet more than a sent reached b's device
    extra = 1 if EXPECTED[proto]["replay"] is None else 0
    assert sb["received"]["packets"] == per_sa(sa, SPI_A, "out")["packets"] + extra


def random_spi(rng: random.Random) -> int:
    while True:
        spi = rng.getrandbits(32)
        if spi not in (0, SPI_A, SPI_B):
            return spi


FLOOD = 20_000


@pytest.mark.parametrize("proto", ["esp", "eesp", "psp"])
def test_flood_of_random_spis_costs_no_memory(tunnel_pair, tmp_path, proto):
    t = tunnel_pair(proto)
    real = capture_real(t, "a", 1)[0]
    template = outer_payload(real, True)
    rng = random.Random(0x5EED)
    forged = []
    for _ in range(FLOOD):
        body = rng.randbytes(rng.randrange(16, 200))
        p = with_spi(proto, template, random_spi(rng))[:HEADER_LEN[proto]]
        p = with_seq(proto, p, rng.getrandbits(31) + 1)
        forged.append(with_payload(real, p + body, True))
    # `ip netns exec` execs the endpoint: the pid Popen has is the endpoint's Python process itself
    exe = os.readlink(f"/proc/{t.b.pid}/exe")
    assert os.path.basename(exe).startswith("python"), exe
    # warm: a few rounds of real traffic, then the endpoint's memory before the flood
    assert t.ping(count=3, interval=0.05) == 3
    before = rss_kib(t.b.pid)
    send_raw(t.pair, "a", forged, tmp_path / "flood.hex", pace=100)
    assert t.ping(count=3) == 3, t.b.log()
    after = rss_kib(t.b.pid)
    assert after - before < 2048, f"RSS grew from {before} KiB to {after} KiB after {FLOOD} forged packets"
    sa, sb = t.stop()
    unknown = sb["unknown_spi"]
    assert unknown["packets"] == 0
    # most of the flood reached the endpoint (a kernel queue may have dropped some), and was dropped there
    assert sum(drops(unknown).values()) >= FLOOD * 0.9, unknown
    assert drops(per_sa(sb, SPI_A, "in")) == {}
