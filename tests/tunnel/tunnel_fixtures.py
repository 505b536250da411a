"""Fixtures for the live-endpoint tests (the ``tunnel`` subcommand of the three CLIs, core/include/pe/tunnel.h).

Every test here gets two network namespaces of its own, ``pe-tun-<pid>-<n>-a`` and ``...-b``, joined by one
veth pair (``va`` in a, ``vb`` in b) that carries only documentation and ULA addresses:

    outer  198.51.100.1/24, 2001:db8:1::1/64 (a)  --  198.51.100.2/24, 2001:db8:1::2/64 (b)   on the veth
    inner  192.0.2.1/24,    fd00::1/64       (a)  --  192.0.2.2/24,    fd00::2/64       (b)   on the TUN device

``netpair``: the two namespaces; deleted at teardown whatever happened, after every process a test started
in them has been stopped (each by its own pid).  ``tunnel_pair(protocol, ...)``: one endpoint in each
(``python -m py<protocol> tunnel`` under ``ip netns exec``), a sending on SPI 0x100 and b on 0x200, with a
key file of fresh random keys (os.urandom) in tmp_path; it waits (bounded) until each TUN device is up, gives
it its inner address, and at teardown stops whatever still runs with SIGTERM and checks exit status 0 and the
"tunnel: stopped" line.  Every wait is bounded, and every endpoint gets --max-seconds as a backstop.

So that counters add up exactly and first packets do not wait, the namespaces have no duplicate address
detection and no IPv6 link-local addresses on devices made in them (no router solicitations or MLD reports
of the TUN devices' own at random times), and static neighbour entries on the veth.

The helpers are in tunnelutil.py; xfer.py (TCP and UDP traffic with SHA-256 on both ends) and wire.py (a
capture of outer packets on the veth, raw sending of forged ones) run inside the namespaces.

The folder is skipped, with the reason, unless it runs as root on Linux with ``ip``, /dev/net/tun, ``ping``
and ``iperf3``, and can make a network namespace.  Its tests carry the ``tunnel`` marker (-m "not tunnel").
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

import pytest

from tunnelutil import (HERE, INNER, INNER_PREFIX, OUTER, OUTER_PREFIX, SPI_A, SPI_B, Endpoint, NetPair, Tunnel,
                        counter, endpoint_cmd, key_file_text, run)


# ---------------------------------------------------------------- skipping


def _requirements() -> Optional[str]:
    """None when the folder can run, else why not."""
    if not sys.platform.startswith("linux"):
        return "live-endpoint tests need Linux (TUN devices, network namespaces)"
    if os.geteuid() != 0:
        return "live-endpoint tests need root (network namespaces, veth pairs, TUN devices)"
    for tool in ("ip", "ping", "iperf3"):
        if shutil.which(tool) is None:
            return f"live-endpoint tests need {tool!r} on PATH (apt-get install iproute2 iputils-ping iperf3)"
    if not os.path.exists("/dev/net/tun"):
        return "live-endpoint tests need /dev/net/tun (modprobe tun)"
    _delete_stale_namespaces()
    probe = f"pe-tun-{os.getpid()}-probe"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        return f"live-endpoint tests cannot make a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def _delete_stale_namespaces() -> None:
    """Namespaces of this folder's naming (pe-tun-<pid>-...) whose test run is gone (killed before its
    teardown): deleted.  Those of a run that is still going are left alone."""
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    for line in r.stdout.splitlines():
        m = re.match(r"(pe-tun-(\d+)-\S+)", line)
        if m and int(m.group(2)) != os.getpid() and not os.path.exists(f"/proc/{m.group(2)}"):
            subprocess.run(["ip", "netns", "del", m.group(1)], capture_output=True, timeout=10)


@pytest.fixture(scope="session")
def _tunnel_requirements() -> None:
    why = _requirements()
    if why:
        pytest.skip(why)


@pytest.fixture(autouse=True)
def _needs_tunnel_environment(_tunnel_requirements) -> None:
    """Every test of the folder: skipped (with the reason) when the environment cannot run it."""


# ---------------------------------------------------------------- namespaces


@pytest.fixture
def netpair():
    """Two fresh namespaces joined by a veth pair, outer IPv4 and IPv6 addresses on it; always deleted."""
    n = next(counter)
    pair = NetPair(f"pe-tun-{os.getpid()}-{n}-a", f"pe-tun-{os.getpid()}-{n}-b")
    made: List[str] = []
    try:
        for ns in (pair.a, pair.b):
            run(["ip", "netns", "add", ns])
            made.append(ns)
            # before any device is made: no duplicate address detection (nothing waits on a tentative address)
            # and no IPv6 link-local addresses, so that the TUN devices send no router solicitations or MLD
            # reports of their own at random times through the tunnels, and the counters add up exactly
            run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0",
                 "net.ipv6.conf.default.addr_gen_mode=1"])
        run(["ip", "link", "add", "va", "netns", pair.a, "type", "veth", "peer", "name", "vb", "netns", pair.b])
        for side, dev, k in (("a", "va", 0), ("b", "vb", 1)):
            pair.ip(side, "link", "set", "lo", "up")
            pair.ip(side, "addr", "add", f"{OUTER[4][k]}/{OUTER_PREFIX[4]}", "dev", dev)
            pair.ip(side, "addr", "add", f"{OUTER[6][k]}/{OUTER_PREFIX[6]}", "dev", dev, "nodad")
            pair.ip(side, "link", "set", dev, "up")
        # static neighbours on the veth: the first packets need not wait for ARP or neighbour discovery (the
        # first IPv6 neighbour solicitation on a veth that has just come up goes unanswered for a second)
        macs = {side: re.search(r"link/ether ([0-9a-f:]+)", pair.ip(side, "link", "show", "dev", dev).stdout).group(1)
                for side, dev in (("a", "va"), ("b", "vb"))}
        for side, dev, k in (("a", "va", 1), ("b", "vb", 0)):
            other = "b" if side == "a" else "a"
            for fam in (4, 6):
                pair.ip(side, "neigh", "replace", OUTER[fam][k], "lladdr", macs[other], "dev", dev, "nud", "permanent")
        yield pair
    finally:
        pair.kill_all()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=15)


# ---------------------------------------------------------------- endpoints


@pytest.fixture
def tunnel_pair(netpair: NetPair, tmp_path: Path):
    """``tunnel_pair(protocol, outer="udp", family=4, inner=4, workers=1, key_text=None, extra=(), spis_a=(0x100,),
    spis_b=(0x200,), extra_a=(), extra_b=(), mode="tunnel")``: a running pair of endpoints (extra: options for
    both, extra_a and extra_b for one) with the inner addresses on their devices; in transport mode (inner is
    then the outer family) a route instead, that takes the peer's outer address into the device.  Teardown stops whatever still runs and checks
    that it stopped cleanly (exit status 0, the "tunnel: stopped" line)."""
    started: List[Endpoint] = []

    def make(protocol: str, outer: str = "udp", family: int = 4, inner: int = 4, workers: int = 1,
             key_text: Optional[str] = None, extra: Sequence[str] = (), spis_a: Sequence[int] = (SPI_A,),
             spis_b: Sequence[int] = (SPI_B,), extra_a: Sequence[str] = (), extra_b: Sequence[str] = (),
             mode: str = "tunnel") -> Tunnel:
        if mode == "transport":
            inner, extra = family, [*extra, "--mode", "transport"]
        key_file = tmp_path / f"{protocol}.keys"
        key_file.write_text(key_text if key_text is not None else key_file_text(protocol, mode=mode))
        key_file.chmod(0o600)
        eps = []
        for side, k, spis, more in (("a", 0, spis_a, extra_a), ("b", 1, spis_b, extra_b)):
            stats = tmp_path / f"stats-{side}.json"
            log = tmp_path / f"endpoint-{side}.log"
            cmd = endpoint_cmd(protocol, key_file, spis, OUTER[family][k], OUTER[family][1 - k], outer, workers,
                               stats, extra=[*extra, *more])
            with open(log, "wb") as err:
                proc = netpair.popen(side, cmd, stdout=subprocess.DEVNULL, stderr=err)
            ep = Endpoint(netpair, side, protocol, spis[0], proc, log, stats)
            started.append(ep)
            eps.append(ep)
        for ep, k in zip(eps, (0, 1)):
            ep.wait_ready()
            if mode == "transport":  # the peer's outer address, more specific than the veth's prefix
                netpair.ip(ep.side, f"-{family}", "route", "add", OUTER[family][1 - k], "dev", ep.dev, "src",
                           OUTER[family][k])
                continue
            flags = ["nodad"] if inner == 6 else []
            netpair.ip(ep.side, "addr", "add", f"{INNER[inner][k]}/{INNER_PREFIX[inner]}", "dev", ep.dev, *flags)
        return Tunnel(netpair, protocol, outer, family, inner, eps[0], eps[1], key_file, mode)

    yield make

    problems = []
    for ep in started:
        if ep.rc is None:
            ep.signal(signal.SIGTERM)
    for ep in started:
        if ep.rc is not None:
            continue
        try:
            ep.check_stopped()
        except (AssertionError, ValueError, OSError) as e:  # ValueError: a stats file that is not JSON
            problems.append(str(e))
    if problems:
        pytest.fail("endpoint teardown: " + "\n".join(problems), pytrace=False)
