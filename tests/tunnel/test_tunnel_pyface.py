"""The live endpoint against a peer made only from the Python faces (pyface_peer.py): one endpoint per protocol
(``py<protocol> tunnel`` in namespace a, the C data plane), and in namespace b a slow but separate path, the
faces' ``encrypt``/``decrypt`` on a UDP or raw IP socket, reading the same key file.

In each case both directions carry a ping: ``ping`` in a to b's inner address gets every reply (built and
encrypted by the Python peer), and the peer's own echo requests to a's inner address get every reply (from
a's kernel, through the endpoint), matched on identifier, sequence number and data.  Then the counters the
endpoint writes at SIGTERM account for exactly those packets and octets (the inner packets the peer says it
sent and received), with no drop and no unknown SPI.

Cases: PSP, EESP and ESP over UDP, IPv4 outside and inside; EESP and ESP straight in IP (EESP on an
``ip-protocol`` other than its default, so that both ends must read the line's number); IPv6 outside and
inside for each protocol (and EESP and ESP in IP over IPv6 too).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tunnelutil import (HERE, INNER, INNER_PREFIX, OUTER, PYTHON, SPI_A, SPI_B, START_TIMEOUT, Endpoint, drops,
                        endpoint_cmd, key_file_text, per_sa, read_until)
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair  # noqa: F401

pytestmark = pytest.mark.tunnel

PEER = HERE / "pyface_peer.py"
PINGS = 3        # echo requests from a's ping
OWN = 4          # echo requests of the Python peer's own
OWN_SIZE = 1000  # their data octets (ping's are 56): a second packet size through both paths
PEER_SECONDS = 20
#: EESP straight in IP on an experimental protocol number (RFC 3692), not the default 49
EESP_IP_PROTOCOL = 253

CASES = [
    ("esp", "udp", 4, 4), ("eesp", "udp", 4, 4), ("psp", "udp", 4, 4),
    ("esp", "ip", 4, 4), ("eesp", "ip", 4, 4),
    ("esp", "udp", 6, 6), ("eesp", "udp", 6, 6), ("psp", "udp", 6, 6),
    ("esp", "ip", 6, 6), ("eesp", "ip", 6, 6),
]


def ping_checked(netpair, dst: str, count: int = PINGS) -> dict:
    """``ping`` in namespace a, with random data (``-p``), not quiet: {icmp_seq: replies} of the replies whose
    data came back as sent (ping says "wrong data byte" of any other, and "DUP!" of a second reply)."""
    pattern = os.urandom(16).hex()
    cmd = ["ping", "-n", "-c", count, "-i", "0.2", "-W", "2", "-p", pattern, dst]
    r = netpair.exec("a", cmd, timeout=10 + count * 2.5)
    assert "wrong data" not in r.stdout and "DUP!" not in r.stdout, r.stdout
    m = re.search(r"(\d+) packets transmitted, (\d+) received", r.stdout)
    assert m and int(m.group(1)) == count, f"ping printed no summary: {r.stdout}\n{r.stderr}"
    seqs: dict = {}
    for n in re.findall(r"^\d+ bytes from \S+ icmp_seq=(\d+) ", r.stdout, re.M):
        seqs[int(n)] = seqs.get(int(n), 0) + 1
    assert sum(seqs.values()) == int(m.group(2)), r.stdout
    return seqs


def start_endpoint(netpair, tmp_path: Path, protocol: str, outer: str, family: int, inner: int,
                   key_file: Path) -> Endpoint:
    """One real endpoint in namespace a, sending on SPI_A, its inner address on its device."""
    stats, log = tmp_path / "stats-a.json", tmp_path / "endpoint-a.log"
    cmd = endpoint_cmd(protocol, key_file, (SPI_A,), OUTER[family][0], OUTER[family][1], outer, 1, stats)
    with open(log, "wb") as err:
        proc = netpair.popen("a", cmd, stdout=subprocess.DEVNULL, stderr=err)
    ep = Endpoint(netpair, "a", protocol, SPI_A, proc, log, stats)
    ep.wait_ready()
    netpair.ip("a", "addr", "add", f"{INNER[inner][0]}/{INNER_PREFIX[inner]}", "dev", ep.dev,
               *(["nodad"] if inner == 6 else []))
    return ep


def start_peer(netpair, protocol: str, outer: str, family: int, inner: int, key_file: Path) -> subprocess.Popen:
    """The Python peer in namespace b, sending on SPI_B; it has printed its ready line when this returns."""
    cmd = [PYTHON, PEER, "--protocol", protocol, "--key-file", key_file, "--spi", f"{SPI_B:x}",
           "--local", OUTER[family][1], "--peer", OUTER[family][0], "--outer", outer,
           "--inner", INNER[inner][1], "--ping", INNER[inner][0], "--count", OWN, "--size", OWN_SIZE,
           "--answer", PINGS, "--interval", "0.05", "--max-seconds", PEER_SECONDS]
    peer = netpair.popen("b", cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peer.early = read_until(peer, "ready", START_TIMEOUT)  # type: ignore[attr-defined]
    return peer


def finish_peer(peer: subprocess.Popen) -> tuple:
    try:
        out, err = peer.communicate(timeout=PEER_SECONDS + 10)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait(10)
    out = peer.early + out  # type: ignore[attr-defined]
    m = re.search(r"^summary (\{.*\})$", out, re.M)
    assert m, f"the peer printed no summary (status {peer.returncode}):\n{out[-2000:]}\n{err[-2000:]}"
    return peer.returncode, json.loads(m.group(1)), out + err


@pytest.mark.parametrize("proto,outer,family,inner", CASES,
                         ids=[f"{p}-{o}-outer{f}-inner{i}" for p, o, f, i in CASES])
def test_endpoint_and_python_face_peer_ping_both_ways(netpair, tmp_path, proto, outer, family, inner):
    extra = f" ip-protocol={EESP_IP_PROTOCOL}" if proto == "eesp" and outer == "ip" else ""
    key_file = tmp_path / f"{proto}.keys"
    key_file.write_text(key_file_text(proto, extra=extra))
    key_file.chmod(0o600)

    ep = start_endpoint(netpair, tmp_path, proto, outer, family, inner, key_file)
    try:
        peer = start_peer(netpair, proto, outer, family, inner, key_file)
        # a -> b: the kernel's ping through the endpoint, answered by the Python peer (while the peer's own
        # echo requests go b -> a at the same time)
        got = ping_checked(netpair, INNER[inner][1])
        rc, s, log = finish_peer(peer)
    finally:
        ep.signal(signal.SIGTERM)
        st = ep.check_stopped()
    diag = f"\npeer:\n{log[-3000:]}\nendpoint:\n{ep.log()[-2000:]}\nstats: {json.dumps(st)}"

    assert got == {n: 1 for n in range(1, PINGS + 1)}, f"ping from a: replies by icmp_seq {got}" + diag
    # the peer: nothing failed to decrypt, every echo request answered, each of its own answered once
    assert s["decrypt_failures"] == {} and s["wrong_spi"] == 0 and s["bad_inner"] == 0, diag
    assert s["echo_requests_answered"] == PINGS, diag
    assert s["own_requests_sent"] == OWN and s["own_replies_matched"] == OWN, diag
    assert s["own_replies_bad"] == 0 and s["duplicate_replies"] == 0 and s["other_inner"] == 0, diag
    assert s["not_from_peer"] == 0, diag
    assert s["decrypted"] == s["outer_received"] == PINGS + OWN, diag
    assert s["inner_sent_packets"] == PINGS + OWN, diag
    assert rc == 0 and s["complete"], diag

    # the endpoint's counters: exactly what went through, both ways, and nothing else
    assert st["protocol"] == proto and st["outer"] == outer and st["mode"] == "tunnel", diag
    assert st["sent"]["packets"] == PINGS + OWN, diag       # ping's requests, a's replies to the peer's
    assert st["received"]["packets"] == PINGS + OWN, diag   # the peer's replies and requests
    assert st["sent"]["octets"] == s["inner_received_octets"], diag
    assert st["received"]["octets"] == s["inner_sent_octets"], diag
    assert drops(st["sent"]) == {} and drops(st["received"]) == {}, diag
    assert st["unknown_spi"]["packets"] == 0 and drops(st["unknown_spi"]) == {}, diag
    assert per_sa(st, SPI_A, "out") == st["sent"], diag
    assert per_sa(st, SPI_B, "in") == st["received"], diag
