"""TCP transfers through a tunnel, run inside a network namespace (``ip netns exec NS python xfer.py ...``).

    xfer.py serve --bind ADDR --port P [--connections K] [--timeout S]
        listens, prints "listening" (one line), takes K connections at once and reads each to its end;
        prints one JSON line: {"streams": [{"bytes": n, "sha256": hex}, ...]} (in the order they ended).
    xfer.py send --to ADDR --port P --bytes N [--connections K] [--timeout S]
        K connections at once, each sending N random octets (os.urandom); prints the same JSON line
        for what it sent.
    xfer.py blast --to ADDR --port P --flows K --packets N [--size S] [--timeout S]
        N UDP datagrams of S random octets, spread round-robin over K sockets (K flows, so that a
        multi-queue TUN device spreads them over its queues), in bursts; prints {"sent": n}.
    xfer.py udp-sink --bind ADDR --port P --count N [--timeout S]
        prints "listening", then receives until N datagrams came or S seconds passed (or none for 2 s once
        one came); prints {"sha256": [hex of each datagram's payload, in order]}.
    xfer.py udp-send --to ADDR --port P --sport Q --file F
        sends each payload of F (hex, one a line; an empty line: an empty datagram) from port Q, 1 ms apart;
        prints {"sent": n}.  The kernel leaves the UDP checksum to a device that offers to complete it.

Standard library only; every socket operation and the whole run are bounded by --timeout.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time

CHUNK = 1 << 16


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def serve(args: argparse.Namespace) -> int:
    ls = socket.socket(_family(args.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    ls.listen(args.connections)
    ls.settimeout(args.timeout)
    print("listening", flush=True)
    results: list = []
    errors: list = []

    def one(conn: socket.socket) -> None:
        h, n = hashlib.sha256(), 0
        try:
            conn.settimeout(args.timeout)
            while True:
                b = conn.recv(CHUNK)
                if not b:
                    break
                h.update(b)
                n += len(b)
        except OSError as e:  # a timeout or a reset: what arrived so far is reported
            errors.append(repr(e))
        finally:
            conn.close()
        results.append({"bytes": n, "sha256": h.hexdigest()})

    threads = []
    deadline = time.monotonic() + args.timeout
    try:
        for _ in range(args.connections):
            conn, _peer = ls.accept()
            t = threading.Thread(target=one, args=(conn,), daemon=True)
            t.start()
            threads.append(t)
    except OSError as e:
        errors.append(f"accept: {e!r}")
    for t in threads:
        t.join(max(0.1, deadline + args.timeout - time.monotonic()))
    print(json.dumps({"streams": results, "errors": errors}), flush=True)
    return 0 if not errors and len(results) == args.connections else 1


def send(args: argparse.Namespace) -> int:
    results: list = []
    errors: list = []

    def one() -> None:
        data = os.urandom(args.bytes)
        deadline = time.monotonic() + args.timeout
        while True:  # the server may not listen yet, or the tunnel may still be coming up
            try:
                s = socket.create_connection((args.to, args.port), timeout=min(2.0, args.timeout))
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    errors.append(f"connect: {e!r}")
                    return
                time.sleep(0.1)
        try:
            s.settimeout(args.timeout)
            view = memoryview(data)
            for i in range(0, len(data), CHUNK):
                s.sendall(view[i:i + CHUNK])
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # the server closes when it has read everything
        except OSError as e:
            errors.append(repr(e))
            return
        finally:
            s.close()
        results.append({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})

    threads = [threading.Thread(target=one, daemon=True) for _ in range(args.connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(args.timeout * 2)
    print(json.dumps({"streams": results, "errors": errors}), flush=True)
    return 0 if not errors and len(results) == args.connections else 1


def blast(args: argparse.Namespace) -> int:
    socks = [socket.socket(_family(args.to), socket.SOCK_DGRAM) for _ in range(args.flows)]
    payload = os.urandom(args.size)
    deadline = time.monotonic() + args.timeout
    sent = 0
    for i in range(args.packets):
        try:
            socks[i % args.flows].sendto(payload, (args.to, args.port))
            sent += 1
        except OSError:  # a full queue, an ICMP error reported back: this datagram is lost
            time.sleep(0.001)
        if i % 256 == 255:
            time.sleep(0.001)
            if time.monotonic() > deadline:
                break
    print(json.dumps({"sent": sent}), flush=True)
    return 0


def udp_sink(args: argparse.Namespace) -> int:
    s = socket.socket(_family(args.bind), socket.SOCK_DGRAM)
    s.bind((args.bind, args.port))
    print("listening", flush=True)
    got: list = []
    deadline = time.monotonic() + args.timeout
    while len(got) < args.count:
        left = deadline - time.monotonic()
        if got:
            left = min(left, 2.0)
        if left <= 0:
            break
        s.settimeout(left)
        try:
            data = s.recv(65535)
        except socket.timeout:
            break
        got.append(hashlib.sha256(data).hexdigest())
    print(json.dumps({"sha256": got}), flush=True)
    return 0


def udp_send(args: argparse.Namespace) -> int:
    s = socket.socket(_family(args.to), socket.SOCK_DGRAM)
    s.bind(("::" if _family(args.to) == socket.AF_INET6 else "0.0.0.0", args.sport))
    n = 0
    with open(args.file) as f:
        for line in f:
            s.sendto(bytes.fromhex(line.strip()), (args.to, args.port))
            n += 1
            time.sleep(0.001)
    print(json.dumps({"sent": n}), flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="xfer.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--connections", type=int, default=1)
    s.add_argument("--timeout", type=float, default=30.0)
    s.set_defaults(func=serve)
    c = sub.add_parser("send")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--bytes", type=int, required=True)
    c.add_argument("--connections", type=int, default=1)
    c.add_argument("--timeout", type=float, default=30.0)
    c.set_defaults(func=send)
    b = sub.add_parser("blast")
    b.add_argument("--to", required=True)
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--flows", type=int, default=8)
    b.add_argument("--packets", type=int, required=True)
    b.add_argument("--size", type=int, default=1000)
    b.add_argument("--timeout", type=float, default=30.0)
    b.set_defaults(func=blast)
    k = sub.add_parser("udp-sink")
    k.add_argument("--bind", required=True)
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--count", type=int, required=True)
    k.add_argument("--timeout", type=float, default=20.0)
    k.set_defaults(func=udp_sink)
    u = sub.add_parser("udp-send")
    u.add_argument("--to", required=True)
    u.add_argument("--port", type=int, required=True)
    u.add_argument("--sport", type=int, required=True)
    u.add_argument("--file", required=True)
    u.set_defaults(func=udp_send)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
