"""SIGHUP reads the key file again without taking the device down (docs/tunnel.md): the sending SAs go on from the
numbers they had reached (no nonce twice), a receiving SA whose line is unchanged keeps its replay window, new
keys take over, and a file that cannot be used changes nothing.
"""
from __future__ import annotations

import collections
import signal

import pytest

from tunnelutil import (OUTER, SPI_A, bad_categories, blast, capture_outer, capture_real, drops, key_file_text,
                        outer_payload, per_sa, send_raw, wait_for, wire_ids, with_payload)
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair, tunnel_pair  # noqa: F401

pytestmark = pytest.mark.tunnel


def sighup(*endpoints) -> None:
    """SIGHUP each, and wait (bounded) until each has logged what it made of it."""
    counts = [ep.log().count("tunnel: SIGHUP") for ep in endpoints]
    for ep in endpoints:
        ep.signal(signal.SIGHUP)
    for ep, n in zip(endpoints, counts):
        wait_for(lambda: ep.log().count("tunnel: SIGHUP") > n, 10, f"the SIGHUP line of {ep.side}")


@pytest.mark.parametrize("proto,workers", [("esp", 1), ("esp", 2), ("eesp", 1), ("eesp", 2), ("psp", 1)])
def test_reload_of_the_same_file_keeps_counters_and_windows(tunnel_pair, tmp_path, proto, workers):
    t = tunnel_pair(proto, workers=workers)
    udp = True
    dst = OUTER[4][1]

    def ids_during(action):
        heads = capture_outer(t.pair, "a", dst, proto, "udp", action, timeout=30, idle=0.5, payload_head=16)
        return [wire_ids(proto, h) for h in heads]

    before = ids_during(lambda: blast(t, 3000) if workers > 1 else t.ping(count=3))
    old = capture_real(t, "a", 3)  # the last packets a sent before the reload
    sighup(t.a, t.b)
    assert "keys reloaded" in t.a.log() and "keys reloaded" in t.b.log(), t.a.log() + t.b.log()

    # those packets again, first thing after the reload: a kept window knows them (a new one would take them;
    # PSP has none and opens them again)
    send_raw(t.pair, "a", [with_payload(p, outer_payload(p, udp), udp) for p in old], tmp_path / "old.hex")

    after = ids_during(lambda: blast(t, 3000) if workers > 1 else t.ping(count=3))
    assert t.ping(count=3) == 3

    # per Sub SA, every number after the reload is past every number before it: none is used twice
    top = collections.defaultdict(int)
    for _, sub, n in before + [wire_ids(proto, outer_payload(p, udp)[:16]) for p in old]:
        top[sub] = max(top[sub], n)
    first_after = collections.defaultdict(lambda: 1 << 64)
    for _, sub, n in after:
        first_after[sub] = min(first_after[sub], n)
    assert set(first_after) == set(top), (set(first_after), set(top))
    for sub in first_after:
        assert first_after[sub] > top[sub], (sub, top[sub], first_after[sub])
    seen = collections.Counter((sub, n) for _, sub, n in before + after)
    assert [k for k, c in seen.items() if c > 1] == []

    sa, sb = t.stop()
    if proto == "psp":
        assert drops(sb["received"]) == {}
    else:
        assert drops(per_sa(sb, SPI_A, "in")) == {"replay-duplicate": len(old)}, sb
    assert bad_categories(sa["received"]) == {}
    assert drops(sa["sent"]) == {} and drops(sb["sent"]) == {}


def test_reload_with_new_keys_and_with_a_broken_file(tunnel_pair, tmp_path):
    t = tunnel_pair("esp")
    assert t.ping(count=3) == 3
    old = capture_real(t, "a", 1)[0]

    # a file that cannot be used: nothing changes
    good = t.key_file.read_text()
    t.key_file.write_text(good + "esp-sa spi=0x300 suite=aes-gcm-16\n")
    sighup(t.a)
    assert "the keys stay as they were" in t.a.log(), t.a.log()
    assert t.ping(count=3) == 3

    # new keys for both SAs, both ends reloaded: traffic goes on with them
    t.key_file.write_text(key_file_text("esp"))
    sighup(t.a, t.b)
    assert t.a.log().count("keys reloaded") == 1 and t.b.log().count("keys reloaded") == 1
    assert t.ping(count=3) == 3
    # a packet sealed with the old key: a new line has a new window, and the old key is gone
    send_raw(t.pair, "a", [with_payload(old, outer_payload(old, True), True)], tmp_path / "old.hex")
    assert t.ping(count=3) == 3
    sa, sb = t.stop()
    assert drops(per_sa(sb, SPI_A, "in")) == {"authentication-failed": 1}, sb
    assert drops(sa["received"]) == {}
