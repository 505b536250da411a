"""Write a sample capture of ordinary traffic for the demo: real protocols that
Wireshark dissects as such once the PSP/EESP layer is decrypted.

- DNS queries and answers over UDP 53 (A and AAAA records);
- HTTP/1.1 over TCP 80: the handshake, a GET, a response with a body in one
  or more segments, ACKs and the FIN exchange;
- TLS 1.3 over TCP 443: the handshake, a ClientHello with SNI, a ServerHello,
  then application-data records of assorted sizes, and the close;
- IPv4 and IPv6 alike, and a few ARP frames that encryption must pass
  through untouched.

The flows are deterministic for a seed, with correct checksums, sequence and
acknowledgement numbers.  ``ipv4`` and ``ipv6`` are also used by the tests to
make single packets.
"""
from __future__ import annotations

import argparse
import random
import struct
from typing import Callable, Iterator, List, Tuple

from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter
from pecore.protocol import checksum

MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
TCP_FIN, TCP_SYN, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x08, 0x10


def _csum(data: bytes) -> int:
    return checksum(data)


def _l4(proto: int, sport: int, dport: int, payload: bytes, pseudo: bytes, seq: int, ack: int = 0,
        flags: int = TCP_PSH | TCP_ACK) -> bytes:
    if proto == 17:
        hdr = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
        csum_at = 6
    else:
        hdr = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
        csum_at = 16
    seg = hdr + payload
    c = _csum(pseudo + bytes([0, proto]) + struct.pack("!H", len(seg)) + seg)
    if proto == 17 and c == 0:
        c = 0xFFFF
    return seg[:csum_at] + struct.pack("!H", c) + seg[csum_at + 2 :]


def ipv4(src: str, dst: str, proto: int, sport: int, dport: int, payload: bytes, ident: int, ack: int = 0,
         flags: int = TCP_PSH | TCP_ACK, seq: int = -1) -> bytes:
    """An IPv4 UDP or TCP packet (TCP: sequence number ``seq``, or ``ident`` when not given)."""
    s, d = bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))
    seg = _l4(proto, sport, dport, payload, s + d, ident if seq < 0 else seq, ack, flags)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), ident & 0xFFFF, 0x4000, 64, proto, 0, s, d)
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:] + seg


def ipv6(src: bytes, dst: bytes, proto: int, sport: int, dport: int, payload: bytes, seq: int, ack: int = 0,
         flags: int = TCP_PSH | TCP_ACK) -> bytes:
    seg = _l4(proto, sport, dport, payload, src + dst, seq, ack, flags)
    return struct.pack("!IHBB", 6 << 28, len(seg), proto, 64) + src + dst + seg


def arp(i: int) -> bytes:
    return MAC_B + MAC_A + b"\x08\x06" + bytes.fromhex("0001080006040001") + MAC_A + bytes([10, 0, 0, 1]) + bytes(6) + bytes([10, 0, 0, i % 250 + 2])


# ------------------------------------------------------------------------------------------- endpoints

class Hosts:
    """A client and a server of one IP version: make(proto, sport, dport, payload, to_server, seq, ack, flags)."""

    V4 = ("10.1.0.1", "10.1.0.2")
    V6 = (bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db8000000000000000000000002"))

    def __init__(self, version: int, counter: Callable[[], int]) -> None:
        self.version = version
        self._ident = counter

    def packet(self, proto: int, cport: int, sport: int, payload: bytes, to_server: bool, seq: int = 0, ack: int = 0,
               flags: int = TCP_PSH | TCP_ACK) -> Tuple[bytes, bytes]:
        """(ethertype, IP packet) from the client to the server or back."""
        a, b = (self.V4 if self.version == 4 else self.V6)
        src, dst, sp, dp = (a, b, cport, sport) if to_server else (b, a, sport, cport)
        if self.version == 4:
            return b"\x08\x00", ipv4(src, dst, proto, sp, dp, payload, self._ident(), ack, flags, seq=seq)
        return b"\x86\xdd", ipv6(src, dst, proto, sp, dp, payload, seq, ack, flags)


class TcpFlow:
    """One TCP connection with correct sequence and acknowledgement numbers."""

    MSS = 1400

    def __init__(self, hosts: Hosts, cport: int, sport: int, rng: random.Random) -> None:
        self.h, self.cport, self.sport = hosts, cport, sport
        self.seq = {True: rng.getrandbits(32), False: rng.getrandbits(32)}  # next sequence number per direction

    def _send(self, to_server: bool, payload: bytes, flags: int) -> Tuple[bytes, bytes]:
        seq, ack = self.seq[to_server], self.seq[not to_server]
        out = self.h.packet(6, self.cport, self.sport, payload, to_server, seq, ack if flags & TCP_ACK else 0, flags)
        self.seq[to_server] = (seq + len(payload) + (1 if flags & (TCP_SYN | TCP_FIN) else 0)) & 0xFFFFFFFF
        return out

    def open(self) -> List[Tuple[bytes, bytes]]:
        return [self._send(True, b"", TCP_SYN), self._send(False, b"", TCP_SYN | TCP_ACK), self._send(True, b"", TCP_ACK)]

    def data(self, to_server: bool, payload: bytes) -> List[Tuple[bytes, bytes]]:
        """The payload in MSS-sized segments, then the peer's ACK."""
        out = [self._send(to_server, payload[i : i + self.MSS], TCP_PSH | TCP_ACK)
               for i in range(0, len(payload), self.MSS)]
        return out + [self._send(not to_server, b"", TCP_ACK)]

    def close(self) -> List[Tuple[bytes, bytes]]:
        return [self._send(True, b"", TCP_FIN | TCP_ACK), self._send(False, b"", TCP_FIN | TCP_ACK),
                self._send(True, b"", TCP_ACK)]


# ------------------------------------------------------------------------------------------- protocols

NAMES = ("example.com", "www.example.org", "mail.example.net", "ietf.org", "docs.example.com", "cdn.example.org")


def _dns_name(name: str) -> bytes:
    return b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"


def dns_exchange(hosts: Hosts, rng: random.Random, cport: int) -> List[Tuple[bytes, bytes]]:
    """A query and its answer (A for IPv4 clients, AAAA for IPv6 ones)."""
    qid, name = rng.getrandbits(16), rng.choice(NAMES)
    qtype = 1 if hosts.version == 4 else 28
    question = _dns_name(name) + struct.pack("!HH", qtype, 1)
    query = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + question
    n = rng.randint(1, 3)
    answers = b""
    for _ in range(n):
        rdata = bytes([192, 0, 2, rng.randint(1, 254)]) if qtype == 1 else bytes.fromhex("20010db8") + rng.randbytes(12)
        answers += struct.pack("!HHHIH", 0xC00C, qtype, 1, rng.randint(60, 86400), len(rdata)) + rdata
    response = struct.pack("!HHHHHH", qid, 0x8180, 1, n, 0, 0) + question + answers
    return [hosts.packet(17, cport, 53, query, True), hosts.packet(17, cport, 53, response, False)]


_WORDS = ("packet", "security", "protocol", "tunnel", "offload", "datacenter", "encryption", "header", "key",
          "sequence", "window", "session")


def _html(rng: random.Random, size: int) -> bytes:
    body = "<!doctype html>\n<html><head><title>Sample</title></head><body>\n"
    while len(body) < size - 16:
        body += "<p>" + " ".join(rng.choice(_WORDS) for _ in range(12)) + "</p>\n"
    return (body + "</body></html>\n").encode()


def http_exchange(hosts: Hosts, rng: random.Random, cport: int) -> List[Tuple[bytes, bytes]]:
    flow = TcpFlow(hosts, cport, 80, rng)
    path = rng.choice(("/", "/index.html", "/docs/psp.html", "/api/status"))
    host = rng.choice(NAMES)
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: psp-eesp-demo/1.0\r\nAccept: */*\r\n"
               "Connection: close\r\n\r\n").encode()
    body = _html(rng, rng.choice((300, 1200, 2600, 5000)))
    response = (f"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode() + body
    return flow.open() + flow.data(True, request) + flow.data(False, response) + flow.close()


def _tls_record(content_type: int, body: bytes) -> bytes:
    return struct.pack("!BHH", content_type, 0x0303, len(body)) + body


def _handshake(msg_type: int, body: bytes) -> bytes:
    return bytes([msg_type]) + len(body).to_bytes(3, "big") + body


def _ext(ext_type: int, data: bytes) -> bytes:
    return struct.pack("!HH", ext_type, len(data)) + data


def client_hello(rng: random.Random, server_name: str) -> bytes:
    sni = server_name.encode()
    sni_list = b"\x00" + struct.pack("!H", len(sni)) + sni
    exts = (_ext(0, struct.pack("!H", len(sni_list)) + sni_list)
            + _ext(10, bytes.fromhex("0004001d0017"))              # supported_groups: x25519, secp256r1
            + _ext(13, bytes.fromhex("000404030804"))              # signature_algorithms
            + _ext(43, bytes.fromhex("020304"))                    # supported_versions: TLS 1.3
            + _ext(51, struct.pack("!HHH", 36, 0x001D, 32) + rng.randbytes(32)))  # key_share x25519
    suites = bytes.fromhex("130113021303")
    body = (b"\x03\x03" + rng.randbytes(32) + b"\x20" + rng.randbytes(32) + struct.pack("!H", len(suites)) + suites
            + b"\x01\x00" + struct.pack("!H", len(exts)) + exts)
    return _tls_record(22, _handshake(1, body))


def server_hello(rng: random.Random) -> bytes:
    exts = _ext(43, b"\x03\x04") + _ext(51, struct.pack("!HH", 0x001D, 32) + rng.randbytes(32))
    body = (b"\x03\x03" + rng.randbytes(32) + b"\x20" + rng.randbytes(32) + b"\x13\x01\x00"
            + struct.pack("!H", len(exts)) + exts)
    return _tls_record(22, _handshake(2, body)) + _tls_record(20, b"\x01")


def tls_exchange(hosts: Hosts, rng: random.Random, cport: int) -> List[Tuple[bytes, bytes]]:
    """TLS 1.3: what a capture shows without the keys (application data stays opaque)."""
    flow = TcpFlow(hosts, cport, 443, rng)
    out = flow.open() + flow.data(True, client_hello(rng, rng.choice(NAMES))) + flow.data(False, server_hello(rng))
    out += flow.data(False, _tls_record(23, rng.randbytes(rng.choice((1100, 2400)))))  # encrypted extensions .. finished
    out += flow.data(True, _tls_record(20, b"\x01") + _tls_record(23, rng.randbytes(74)))
    for _ in range(rng.randint(1, 3)):
        out += flow.data(True, _tls_record(23, rng.randbytes(rng.choice((90, 300, 700)))))
        out += flow.data(False, _tls_record(23, rng.randbytes(rng.choice((200, 1300, 4000)))))
    return out + flow.close()


def traffic(seed: int) -> Iterator[bytes]:
    """Ethernet frames, conversation after conversation, without end."""
    rng = random.Random(seed)
    ident = iter(range(1, 1 << 62))
    counter = lambda: next(ident)  # noqa: E731 -- IPv4 identification, one per packet
    conv = 0
    while True:
        conv += 1
        hosts = Hosts(4 if rng.random() < 0.5 else 6, counter)
        cport = 40000 + (conv * 7) % 20000
        kind = rng.choice((dns_exchange, dns_exchange, http_exchange, tls_exchange))
        for etype, pkt in kind(hosts, rng, cport):
            yield MAC_B + MAC_A + etype + pkt
        if conv % 5 == 0:
            yield arp(conv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("output")
    ap.add_argument("-n", "--packets", type=int, default=2000)
    ap.add_argument("--format", default="pcapng", choices=("pcap", "pcapng"))
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    ts = 1_700_000_000
    with CaptureWriter(args.output, LINKTYPE_ETHERNET, args.format) as w:
        for i, frame in zip(range(args.packets), traffic(args.seed)):
            w.write(frame, (ts + i // 1000, (i % 1000) * 1_000_000 + 123))


if __name__ == "__main__":
    main()
