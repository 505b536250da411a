"""Outer packets on the veth, run inside a network namespace (``ip netns exec NS python wire.py ...``).

    wire.py capture --dev DEV --dst ADDR (--udp-port P | --ip-proto N) [--count K] [--timeout S]
                    [--idle S] [--payload-head N] [--incoming] [--no-link-header]
        an AF_PACKET socket on DEV; prints "ready", then the outgoing IPv4/IPv6 packets to ADDR of that UDP
        destination port or IP protocol, one hex line each (the IP packet, no link header; with
        --payload-head only the first N octets after the IP and UDP headers), until K were seen, S seconds
        passed, or (--idle) none came for that long once one had; then "done".  A UDP_SEGMENT train (the
        endpoint's UDP GSO, which a veth passes on whole) is printed as the datagrams it stands for, as the
        peer receives them: the socket reads the virtio-net header that tells the segment size.
        --incoming: the packets DEV receives instead (on a TUN device: what the endpoint writes to it);
        --no-link-header: DEV's frames are bare IP packets (a TUN device).
    wire.py send --file F [--pace N] [--timeout S]
        sends the IP packets of F (one hex line each, IPv4 or IPv6, headers complete) through a raw socket
        (IPPROTO_RAW, header included), a 1 ms pause after every N; prints "sent K".

Standard library only.
"""
from __future__ import annotations

import argparse
import errno
import socket
import sys
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_VNET_HDR = 15
VNET_HDR_LEN = 10  # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
GSO_UDP_L4 = 5     # VIRTIO_NET_HDR_GSO_UDP_L4: a UDP_SEGMENT train, cut at gso_size
IPV6_HDRINCL = 36


def _matches(ip: bytes, dst: bytes, udp_port: int, ip_proto: int) -> bool:
    if len(ip) >= 20 and ip[0] >> 4 == 4:
        hl, proto, d = (ip[0] & 15) * 4, ip[9], ip[16:20]
    elif len(ip) >= 40 and ip[0] >> 4 == 6:
        hl, proto, d = 40, ip[6], ip[24:40]
    else:
        return False
    if d != dst:
        return False
    if udp_port:
        return proto == 17 and len(ip) >= hl + 8 and int.from_bytes(ip[hl + 2:hl + 4], "big") == udp_port
    return proto == ip_proto


def _ip_header_len(ip: bytes) -> int:
    return (ip[0] & 15) * 4 if ip[0] >> 4 == 4 else 40


def _segments(ip: bytes, size: int) -> list:
    """The datagrams of a UDP GSO train: its UDP payload cut every `size` octets, each with the train's IP and
    UDP headers, their lengths set (checksums left as they were)."""
    hl = _ip_header_len(ip)
    head, payload = bytearray(ip[:hl + 8]), ip[hl + 8:]
    out = []
    for i in range(0, len(payload), size):
        seg = payload[i:i + size]
        h = bytearray(head)
        h[hl + 4:hl + 6] = (8 + len(seg)).to_bytes(2, "big")
        if h[0] >> 4 == 4:
            h[2:4] = (hl + 8 + len(seg)).to_bytes(2, "big")
        else:
            h[4:6] = (8 + len(seg)).to_bytes(2, "big")
        out.append(bytes(h) + seg)
    return out


def capture(args: argparse.Namespace) -> int:
    dst = socket.inet_pton(socket.AF_INET6 if ":" in args.dst else socket.AF_INET, args.dst)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE (root): room for a burst
    s.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)
    s.bind((args.dev, 0))
    print("ready", flush=True)
    deadline = time.monotonic() + args.timeout
    seen, last = 0, 0.0
    out: list = []
    while seen < args.count:
        left = deadline - time.monotonic()
        if seen and args.idle:
            left = min(left, last + args.idle - time.monotonic())
        if left <= 0:
            break
        s.settimeout(left)
        try:
            frame, addr = s.recvfrom(VNET_HDR_LEN + 14 + 65535)
        except socket.timeout:
            break
        link = 0 if args.no_link_header else 14
        if (addr[2] == PACKET_OUTGOING) == args.incoming or len(frame) < VNET_HDR_LEN + link + 1:
            continue
        gso_type, gso_size = frame[1], int.from_bytes(frame[4:6], "little")
        frame = frame[VNET_HDR_LEN:]
        if link and int.from_bytes(frame[12:14], "big") not in (0x0800, 0x86DD):
            continue
        ip = frame[link:]
        if ip[0] >> 4 not in (4, 6):
            continue
        # the IP length says where the packet ends (a frame may be padded)
        end = int.from_bytes(ip[2:4], "big") if ip[0] >> 4 == 4 else 40 + int.from_bytes(ip[4:6], "big")
        ip = ip[:end]
        if not _matches(ip, dst, args.udp_port, args.ip_proto):
            continue
        for pkt in _segments(ip, gso_size) if gso_type == GSO_UDP_L4 and gso_size else [ip]:
            if args.payload_head:
                off = _ip_header_len(pkt) + (8 if args.udp_port else 0)
                out.append(pkt[off:off + args.payload_head].hex())
            else:
                out.append(pkt.hex())
            seen += 1
        last = time.monotonic()
    sys.stdout.write("".join(x + "\n" for x in out) + "done\n")
    sys.stdout.flush()
    return 0


def send(args: argparse.Namespace) -> int:
    socks = {}
    n = 0
    deadline = time.monotonic() + args.timeout
    with open(args.file) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            pkt = bytes.fromhex(line)
            v = pkt[0] >> 4
            if v not in socks:
                if v == 4:
                    socks[v] = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
                else:
                    socks[v] = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)
                    socks[v].setsockopt(socket.IPPROTO_IPV6, IPV6_HDRINCL, 1)
            if v == 4:
                dst = (socket.inet_ntop(socket.AF_INET, pkt[16:20]), 0)
            else:
                dst = (socket.inet_ntop(socket.AF_INET6, pkt[24:40]), 0)
            while True:
                try:
                    socks[v].sendto(pkt, dst)
                    break
                except OSError as e:  # ENOBUFS, EAGAIN: the veth's queue is full for now
                    if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                        raise
                if time.monotonic() > deadline:
                    raise SystemExit(f"send: gave up after {args.timeout} s at packet {n}")
                time.sleep(0.001)
            n += 1
            if args.pace and n % args.pace == 0:
                time.sleep(0.001)
            if time.monotonic() > deadline:
                raise SystemExit(f"send: gave up after {args.timeout} s at packet {n}")
    print(f"sent {n}", flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="wire.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--dev", required=True)
    c.add_argument("--dst", required=True)
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("--udp-port", type=int, default=0)
    g.add_argument("--ip-proto", type=int, default=0)
    c.add_argument("--count", type=int, default=1 << 30)
    c.add_argument("--timeout", type=float, default=10.0)
    c.add_argument("--idle", type=float, default=0.0)
    c.add_argument("--payload-head", type=int, default=0)
    c.add_argument("--incoming", action="store_true")
    c.add_argument("--no-link-header", action="store_true")
    c.set_defaults(func=capture)
    s = sub.add_parser("send")
    s.add_argument("--file", required=True)
    s.add_argument("--pace", type=int, default=0)
    s.add_argument("--timeout", type=float, default=30.0)
    s.set_defaults(func=send)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
