"""What the counters say when the outer socket refuses packets: a peer with no route to it.  Every inner packet
the endpoint takes from its device and cannot send is a drop (tunnel-socket), and it was not sent.  (Found
here: such a packet was counted as sent and as dropped, "sent 3, ... dropped 3"; fixed in b0676b3.)"""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from tunnelutil import SPI_A, STOP_TIMEOUT, drops, endpoint_cmd, key_file_text, per_sa, wait_for
from tunnel_fixtures import _needs_tunnel_environment, _tunnel_requirements, netpair, tunnel_pair  # noqa: F401

pytestmark = pytest.mark.tunnel


def test_packets_the_socket_refuses_are_dropped_not_sent(netpair, tmp_path):
    keys = tmp_path / "k"
    keys.write_text(key_file_text("esp"))
    stats = tmp_path / "s.json"
    # the peer is in a network with no route to it: sendmmsg fails with ENETUNREACH
    cmd = endpoint_cmd("esp", keys, (SPI_A,), "2001:db8:1::1", "2001:db8:2::9", stats=stats, max_seconds=30)
    log = tmp_path / "a.log"
    with open(log, "wb") as err:
        p = netpair.popen("a", cmd, stdout=subprocess.DEVNULL, stderr=err)
    wait_for(lambda: netpair.link_up("a", "tun0") and "tunnel: " in log.read_text(), 10, "the device")
    netpair.ip("a", "addr", "add", "192.0.2.1/24", "dev", "tun0")
    assert netpair.ping("a", "192.0.2.2", count=3, deadline=3) == 0
    p.terminate()
    assert p.wait(STOP_TIMEOUT) == 0
    st = json.loads(stats.read_text())
    assert drops(st["sent"]) == {"tunnel-socket": 3}, st["sent"]
    assert drops(per_sa(st, SPI_A, "out")) == {"tunnel-socket": 3}
    m = re.search(r"tunnel: stopped \(SIGTERM\): sent (\d+), received 0, dropped 3", log.read_text())
    assert m, log.read_text()
    assert st["sent"]["packets"] == 0 and per_sa(st, SPI_A, "out")["packets"] == 0 and m.group(1) == "0", st
