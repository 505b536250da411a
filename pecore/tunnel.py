"""The live endpoint (core/include/pe/tunnel.h) from Python: one call that runs the core's data plane until a
signal, a time limit or a failure, with the GIL released (cffi releases it around every call into the core).

Nothing of the data plane runs in Python: the core reads the key file, makes the TUN device and the sockets,
moves the packets and writes the counters.  SIGINT and SIGTERM stop it (the core reads them through a
signalfd while it runs, so Python's own handlers see nothing of them); the result names the signal.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Type

from pecore.binding import ffi, lib
from pecore.errors import CoreError, status_message, status_name

PROTOCOLS = {"psp": lib.PE_TUNNEL_PSP, "eesp": lib.PE_TUNNEL_EESP, "esp": lib.PE_TUNNEL_ESP}
OUTERS = {"udp": lib.PE_TUNNEL_OUTER_UDP, "ip": lib.PE_TUNNEL_OUTER_IP}
MAX_WORKERS = lib.PE_TUNNEL_MAX_WORKERS


@dataclass(frozen=True)
class Result:
    """How the endpoint stopped and what it moved."""

    stop_signal: int          # signal.SIGINT / SIGTERM when one stopped it, else 0
    packets_sent: int
    packets_received: int
    packets_dropped: int


def run(protocol: str, key_file: str, spis: Sequence[int], dev: str, local: str, peer: str, *,
        outer: str = "udp", mode: str = "tunnel", port: int = 0, workers: int = 1, mtu: int = 0, stats: Optional[str] = None,
        stats_interval: float = 0.0, max_seconds: float = 0.0, handle_signals: bool = True,
        log_fd: int = 2, udp_offloads: bool = True, tun_offloads: bool = True, error_class: Callable[[str], Type[CoreError]] = lambda code: CoreError) -> Result:
    """Run the endpoint until SIGINT/SIGTERM (``handle_signals``), ``max_seconds``, or a failure.

    ``spis``: the SAs that send, worker i on ``spis[i % len(spis)]``; every other SA of the key file
    receives.  ``local``/``peer``: the outer addresses, both IPv4 or both IPv6.  ``mode``: "tunnel", or
    "transport" (the device's packets must go from ``local`` to ``peer``; their IP header is the outer one).  Messages go to ``log_fd``.
    A failure raises ``error_class(code)`` (a face's class for the core's status name; the faces pass theirs).
    """
    def fail(message: str, code: str = "tunnel-bad-config") -> CoreError:
        return error_class(code)(message, code)

    if protocol not in PROTOCOLS:
        raise fail(f"unknown protocol {protocol!r}")
    if outer not in OUTERS:
        raise fail(f"outer must be udp or ip, not {outer!r}")
    if mode not in ("tunnel", "transport"):
        raise fail(f"mode must be tunnel or transport, not {mode!r}")
    if not 1 <= len(spis) <= lib.PE_TUNNEL_MAX_SPIS:
        raise fail(f"give 1..{lib.PE_TUNNEL_MAX_SPIS} sending SPIs")
    try:
        a, b = ipaddress.ip_address(local), ipaddress.ip_address(peer)
    except ValueError as e:
        raise fail(str(e)) from None
    if a.version != b.version:
        raise fail("the local and peer addresses must be of one family")
    cfg = ffi.new("pe_tunnel_config *")
    lib.pe_tunnel_config_init(cfg)
    keep = [ffi.new("char[]", os.fsencode(key_file)), ffi.new("char[]", os.fsencode(dev))]
    cfg.protocol = PROTOCOLS[protocol]
    cfg.key_file, cfg.dev = keep
    for i, spi in enumerate(spis):
        cfg.spis[i] = spi
    cfg.n_spis = len(spis)
    cfg.family = a.version
    ffi.memmove(cfg.local, a.packed, len(a.packed))
    ffi.memmove(cfg.peer, b.packed, len(b.packed))
    cfg.outer = OUTERS[outer]
    cfg.transport_mode = int(mode == "transport")
    cfg.port = port
    cfg.workers = workers
    cfg.mtu = mtu
    if stats:
        keep.append(ffi.new("char[]", os.fsencode(stats)))
        cfg.stats_path = keep[-1]
    cfg.stats_interval_ms = int(stats_interval * 1000)
    cfg.max_ms = int(max_seconds * 1000)
    cfg.handle_signals = int(handle_signals)
    cfg.log_fd = log_fd
    cfg.no_udp_offloads = int(not udp_offloads)
    cfg.no_tun_offloads = int(not tun_offloads)
    res = ffi.new("pe_tunnel_result *")
    st = lib.pe_tunnel_run(cfg, res)
    if st != lib.PE_OK:
        raise fail(ffi.string(res.message).decode(errors="replace") or status_message(st), status_name(st))
    return Result(res.stop_signal, res.packets_sent, res.packets_received, res.packets_dropped)
