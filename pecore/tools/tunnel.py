"""``tunnel``: the live endpoint, the same subcommand in pypsp, pyeesp and pyesp (docs/tunnel.md).

It runs in the foreground and logs to standard error, as ``wireguard-go -f`` does; the core's data plane does
the work (pecore.tunnel).  Exit status 0 when SIGINT, SIGTERM or --max-seconds stopped it as asked, 2 when it
could not start or a device or socket failed.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Type

from pecore.errors import CoreError
from pecore.tools.cli import EXIT_OK, port_arg, spi_arg

#: The protocols' UDP ports (psp.md section 8; RFC 3948 for EESP and ESP).
DEFAULT_PORTS = {"psp": 1000, "eesp": 4500, "esp": 4500}


def _workers(text: str) -> int:
    from pecore.tunnel import MAX_WORKERS

    n = int(text, 0)
    if not 1 <= n <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"workers must be in 1..{MAX_WORKERS}, not {n}")
    return n


def _seconds(text: str) -> float:
    v = float(text)
    if not 0 <= v <= 10**7:
        raise argparse.ArgumentTypeError(f"seconds must be in 0..10000000, not {text}")
    return v


def _mtu(text: str) -> int:
    v = int(text, 0)
    if not 576 <= v <= 65000:
        raise argparse.ArgumentTypeError(f"the MTU must be in 576..65000, not {v}")
    return v


def register(sub: "argparse._SubParsersAction", protocol: str, error_class: Callable[[str], Type[CoreError]]) -> None:
    """Add ``tunnel`` to a CLI's subcommands."""
    name = protocol.upper()
    t = sub.add_parser("tunnel", help=f"run a live {name} endpoint: a TUN device on one side, the peer on the other")
    t.add_argument("--key-file", required=True, metavar="FILE",
                   help="the key file (docs/keys.md): every SA in it but the sending ones receives")
    t.add_argument("--spi", type=spi_arg, action="append", required=True, metavar="SPI",
                   help="an SA that sends (hex); give one per worker for an SA each, or fewer to share"
                   + (" (workers on one EESP SA send on Sub SAs of their own)" if protocol == "eesp" else ""))
    t.add_argument("--dev", required=True, metavar="NAME", help="the TUN device, made or taken over, and brought up")
    t.add_argument("--local", required=True, metavar="ADDR", help="this end's outer address (IPv4 or IPv6)")
    t.add_argument("--peer", required=True, metavar="ADDR", help="the peer's outer address")
    outers = ("udp",) if protocol == "psp" else ("udp", "ip")
    t.add_argument("--outer", choices=outers, default="udp",
                   help=f"UDP port {DEFAULT_PORTS[protocol]}" + ("" if protocol == "psp" else
                                                                   ", or straight in IP (raw sockets)"))
    t.add_argument("--port", type=port_arg, default=0, help=f"the UDP port at both ends (default {DEFAULT_PORTS[protocol]})")
    t.add_argument("--mode", choices=("tunnel", "transport"), default="tunnel",
                   help="tunnel: inner packets of any addresses; transport: the device's packets go from --local to "
                   "--peer, their own IP header the outer one (route the peer's address into the device)")
    t.add_argument("--workers", type=_workers, default=1, metavar="N",
                   help="workers: one TUN queue, socket and sending state each")
    t.add_argument("--mtu", type=_mtu, default=0, help="the device's MTU (default: 1500 less what sealing adds)")
    t.add_argument("--stats", metavar="FILE", help="write the counters here as JSON (temporary file, renamed)")
    t.add_argument("--stats-interval", type=_seconds, default=0.0, metavar="S",
                   help="also every S seconds (default: when the endpoint stops)")
    t.add_argument("--no-udp-offloads", action="store_true",
                   help="a datagram per system call: no UDP segmentation (UDP_SEGMENT) or coalescing (UDP_GRO)")
    t.add_argument("--no-tun-offloads", action="store_true",
                   help="a read per packet from the device: no TCP super-packets (TSO) to cut")
    t.add_argument("--max-seconds", type=_seconds, default=0.0, metavar="S", help="stop after S seconds")
    t.set_defaults(func=lambda args: _run(args, protocol, error_class))


def _run(args: argparse.Namespace, protocol: str, error_class: Callable[[str], Type[CoreError]]) -> int:
    from pecore.tunnel import run

    sys.stderr.flush()  # the core writes to the same descriptor
    run(protocol, args.key_file, args.spi, args.dev, args.local, args.peer, outer=args.outer, mode=args.mode,
                 port=args.port, workers=args.workers, mtu=args.mtu, stats=args.stats,
                 stats_interval=args.stats_interval, max_seconds=args.max_seconds,
                 udp_offloads=not args.no_udp_offloads, tun_offloads=not args.no_tun_offloads,
                 error_class=error_class)
    return EXIT_OK
