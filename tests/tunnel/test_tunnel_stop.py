"""Starting and stopping the endpoint: SIGINT, SIGTERM and --max-seconds stop it with exit status 0 and the
counters written (valid JSON, by a temporary file renamed into place) and take its TUN device with it; what it
cannot use (a key file, an SPI, an address, an option) stops it before anything is made, with exit status 2
and a message naming the problem, leaving no device and no counters file behind.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from tunnelutil import (CLI, OUTER, SPI_A, STOP_TIMEOUT, endpoint_cmd, key_file_text, per_sa, wait_for)
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair, tunnel_pair  # noqa: F401

pytestmark = pytest.mark.tunnel

STATS_KEYS = {"protocol", "outer", "mode", "workers", "seconds", "sent", "received", "per_worker", "per_sa",
              "unknown_spi"}


def leftovers(tmp_path, stats_name: str):
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(stats_name))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_cleanly_and_writes_the_counters(tunnel_pair, tmp_path, sig):
    t = tunnel_pair("esp")
    assert t.ping(count=3) == 3
    st = t.a.stop(sig)  # exit status 0 and the "tunnel: stopped" line (Endpoint.check_stopped)
    name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
    assert re.search(rf"^tunnel: stopped \({name}\): sent \d+, received \d+, dropped 0$", t.a.log(), re.M), t.a.log()
    assert set(st) == STATS_KEYS, st
    assert st["protocol"] == "esp" and st["sent"]["packets"] >= 3 and st["received"]["packets"] >= 3
    assert per_sa(st, SPI_A, "out")["packets"] == st["sent"]["packets"]
    assert leftovers(tmp_path, "stats-a.json") == ["stats-a.json"]  # no temporary file left
    # the device went with the endpoint, and with it the inner address
    assert not t.pair.link_exists("a", "tun0")
    # the log's totals are the counters'
    m = re.search(r"stopped.*: sent (\d+), received (\d+)", t.a.log())
    assert (int(m.group(1)), int(m.group(2))) == (st["sent"]["packets"], st["received"]["packets"])


def test_max_seconds_stops_it_by_itself(netpair, tmp_path):
    keys = tmp_path / "k"
    keys.write_text(key_file_text("esp"))
    stats = tmp_path / "s.json"
    cmd = endpoint_cmd("esp", keys, (SPI_A,), OUTER[4][0], OUTER[4][1], stats=stats, max_seconds=1.0)
    t0 = time.monotonic()
    r = netpair.exec("a", cmd, timeout=STOP_TIMEOUT + 10)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert re.search(r"^tunnel: stopped: sent \d+, received 0, dropped 0$", r.stderr, re.M), r.stderr
    assert 1.0 <= took < 1.0 + STOP_TIMEOUT
    st = json.loads(stats.read_text())
    assert 0.9 <= st["seconds"] < 5, st
    assert not netpair.link_exists("a", "tun0")


def test_stats_interval_writes_while_running(tunnel_pair):
    t = tunnel_pair("eesp", extra=["--stats-interval", "0.2"])
    first = wait_for(lambda: t.a.stats() if t.a.stats_path.exists() else None, 5, "the first counters")
    assert set(first) == STATS_KEYS
    assert t.ping(count=3) == 3
    later = wait_for(lambda: (lambda s: s if s["received"]["packets"] >= 3 else None)(t.a.stats()), 5,
                     "counters that show the pings")
    assert later["seconds"] > first["seconds"]
    t.stop()


@pytest.mark.parametrize("workers,offloads", [(1, True), (2, True), (2, False)])
def test_the_device_it_makes_and_takes_away(tunnel_pair, workers, offloads):
    t = tunnel_pair("esp", workers=workers, extra=[] if offloads else ["--no-tun-offloads"])
    for side, ep in (("a", t.a), ("b", t.b)):
        d = t.pair.ip(side, "-d", "link", "show", "dev", "tun0").stdout
        assert re.search(rf"\bmtu {ep.mtu}\b", d), d
        assert int(re.search(r"qlen (\d+)", d).group(1)) >= 10000, d  # tunnel.h: 10,000 packets at least
        assert "tun type tun pi off" in d and "persist off" in d, d
        assert ("vnet_hdr on" if offloads else "vnet_hdr off") in d, d
        if workers > 1:
            assert f"multi_queue numqueues {workers}" in d, d
    assert t.ping(count=3) == 3
    t.stop()
    assert not t.pair.link_exists("a", "tun0") and not t.pair.link_exists("b", "tun0")


def test_a_device_that_exists_is_taken_over_and_left(netpair, tunnel_pair):
    """A persistent TUN device made beforehand (ip tuntap add): used, and left in place at the end."""
    for side in ("a", "b"):
        netpair.ip(side, "tuntap", "add", "dev", "tun0", "mode", "tun")
    t = tunnel_pair("esp")
    assert t.ping(count=3) == 3
    sent, got = t.transfer(4 << 20)
    assert got["streams"] == sent["streams"] and sent["errors"] == []
    t.stop()
    for side in ("a", "b"):
        assert netpair.link_exists(side, "tun0")
        assert "persist on" in netpair.ip(side, "-d", "link", "show", "dev", "tun0").stdout


def run_cli(netpair, protocol: str, args, timeout: float = 20.0) -> subprocess.CompletedProcess:
    from tunnelutil import PYTHON
    return netpair.exec("a", [PYTHON, "-m", CLI[protocol], "tunnel", *map(str, args)], timeout=timeout)


def base_args(key_file, spi: int = SPI_A, local: str = OUTER[4][0], peer: str = OUTER[4][1], stats=None,
              dev: str = "tun9"):
    args = ["--key-file", key_file, "--spi", f"{spi:x}", "--dev", dev, "--local", local, "--peer", peer,
            "--max-seconds", "5"]
    return args + (["--stats", stats] if stats else [])


def assert_nothing_left(netpair, tmp_path, before_links, before_files):
    assert netpair.links("a") == before_links, "a device was left behind"
    assert sorted(p.name for p in tmp_path.iterdir()) == before_files, "a file was left behind"


@pytest.mark.parametrize("protocol", ["psp", "eesp", "esp"])
def test_a_missing_key_file_is_refused_naming_it(netpair, tmp_path, protocol):
    missing = tmp_path / "no-such-dir" / "keys"
    links, files = netpair.links("a"), sorted(p.name for p in tmp_path.iterdir())
    r = run_cli(netpair, protocol, base_args(missing, stats=tmp_path / "s.json"))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert str(missing) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert_nothing_left(netpair, tmp_path, links, files)


def test_a_missing_key_file_error_line_names_the_key_file(netpair, tmp_path):
    """The CLI's own error line names the key file too (found here: it said "capture file could not be read
    [capture-io]", the status's message; fixed in b0676b3)."""
    missing = tmp_path / "no-such-dir" / "keys"
    r = run_cli(netpair, "esp", base_args(missing))
    assert r.returncode == 2
    error = [line for line in r.stderr.splitlines() if line.startswith("pyesp: error:")]
    assert len(error) == 1, r.stderr
    assert str(missing) in error[0] and "capture file" not in error[0], error[0]


@pytest.mark.parametrize("what", ["syntax", "spi", "family", "address", "mode", "not-a-tun", "long-name"])
def test_what_it_cannot_use_is_refused_before_anything_is_made(netpair, tmp_path, what):
    keys = tmp_path / "k"
    text = key_file_text("esp")
    spi, local, peer, expect, dev = SPI_A, OUTER[4][0], OUTER[4][1], None, "tun9"
    if what == "syntax":
        text += "esp-sa spi=0x300 suite=aes-gcm-16\n"  # no key
        expect = rf"key file {re.escape(str(keys))}, line 4"
    elif what == "spi":
        spi, expect = 0x999, r"spi=00000999"
    elif what == "family":
        peer, expect = OUTER[6][1], r"one family"
    elif what == "address":
        local, expect = "198.51.100.77", r"bind"  # on the veth's subnet, not on any device
    elif what == "mode":
        text = text.replace("mode=tunnel", "mode=transport")
        expect = r"mode"
    elif what == "not-a-tun":
        dev, expect = "va", r"TUN device va"  # the veth: a device of that name that is no TUN device
    elif what == "long-name":
        dev, expect = "x" * 16, r"longer than 15"
    keys.write_text(text)
    links, files = netpair.links("a"), sorted(p.name for p in tmp_path.iterdir())
    r = run_cli(netpair, "esp", base_args(keys, spi, local, peer, stats=tmp_path / "s.json", dev=dev))
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert re.search(expect, r.stderr), r.stderr
    assert "Traceback" not in r.stderr and "tunnel: stopped" not in r.stderr
    assert_nothing_left(netpair, tmp_path, links, files)


def test_psp_refuses_outer_ip_in_argparse(netpair, tmp_path):
    keys = tmp_path / "k"
    keys.write_text(key_file_text("psp"))
    links, files = netpair.links("a"), sorted(p.name for p in tmp_path.iterdir())
    r = run_cli(netpair, "psp", base_args(keys) + ["--outer", "ip"])
    assert r.returncode == 2
    assert "argument --outer: invalid choice: 'ip'" in r.stderr, r.stderr
    assert not re.search(r"^tunnel: ", r.stderr, re.M)  # refused before the core saw it
    assert_nothing_left(netpair, tmp_path, links, files)
