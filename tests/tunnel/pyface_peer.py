"""A tunnel peer made only from the Python faces (pyesp, pyeesp, pypsp): the slow, separate path that the live
endpoint (``py<protocol> tunnel``, core/src/net/) must interoperate with.  Run it inside a network namespace:

    ip netns exec NS .venv/bin/python tests/tunnel/pyface_peer.py --protocol esp --key-file K --spi 200 \\
        --local 198.51.100.2 --peer 198.51.100.1 [--outer udp|ip] [--port P] --inner 192.0.2.2 \\
        [--ping 192.0.2.1 --count K] [--answer N] [--max-seconds S]

What it is, in the endpoint's terms (docs/tunnel.md): ``--spi`` names the SA it sends on (a key-file line of
the protocol, docs/keys.md, read with ``pecore.keys.load_key_file``, the loader the faces' ``from_key_file``
take); every other line of the protocol receives.  Sending: an inner IP packet is encrypted with the face's
sender (``pyesp.SA``, ``pyeesp.SA``, ``pypsp.Encryptor``) in tunnel mode with an outer header template of
the outer addresses (the endpoint's: TTL 64, IPv4 DF), and the outer packet it returns is put on the wire:
over UDP what follows its IP and UDP headers goes out of a UDP socket bound to ``--port`` (PSP 1000, EESP and
ESP 4500); straight in IP the whole packet goes out of a raw socket (header included).  Receiving: a UDP
socket hands the payload, so the outer IPv4/IPv6 and UDP headers are put back in front of it from the
addresses and ports (checksums computed); a raw socket of the IP protocol (ESP 50, EESP the sending line's
``ip-protocol``) hands an IPv4 packet whole and an IPv6 packet's payload, whose header is rebuilt.  That
outer packet goes to the face's receiver (``Receiver.decrypt``, ``Decryptor.decrypt``), as a capture's would.

What it does with the inner packets:
  (a) an ICMP echo request (IPv4 or ICMPv6) to one of its ``--inner`` addresses is answered with an echo
      reply built here (same id, sequence number and data), encrypted and sent back;
  (b) with ``--ping ADDR --count K`` it sends K echo requests of its own (from its ``--inner`` address of that
      family, ``--interval`` apart, a random identifier and random data) and counts the replies that come
      back decrypted with the same identifier, sequence number and data.

It prints a ``ready`` line once its sockets are bound, a line per packet it answers, sends or matches, and at
the end one ``summary {...}`` line (JSON).  It stops when ``--answer N`` echo requests were answered and its
own requests were all answered (or ``--reply-timeout`` passed after the last one), then waits ``--linger``
seconds for anything unexpected; or after ``--max-seconds``, ``--max-packets`` received outer packets, or
SIGINT/SIGTERM.  Exit status: 0; 1 when a packet from the peer failed to decrypt (or decrypted on an SA it must
not: our own), or its inner packet was malformed or had a bad checksum; 3 when it stopped without every
reply it waited for (own replies, ``--answer``); 2 for a setting it cannot use.

Nothing of pecore's internals and nothing of the tunnel subcommand is used: only the faces' public SA,
encrypt and decrypt objects and the key-file loader.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Dict, List, Optional, Tuple

PORTS = {"psp": 1000, "eesp": 4500, "esp": 4500}
IPV6_HDRINCL = 36
MAX_DATAGRAM = 65535


# ---------------------------------------------------------------- checksums and headers


def inet_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def pseudo_header(src: bytes, dst: bytes, proto: int, length: int) -> bytes:
    if len(src) == 4:
        return src + dst + struct.pack("!BBH", 0, proto, length)
    return src + dst + struct.pack("!IxxxB", length, proto)


def ip_header(src: bytes, dst: bytes, proto: int, payload_len: int, ident: int = 0, ttl: int = 64,
              df: bool = True) -> bytes:
    """An IPv4 (20 octets, checksum set) or IPv6 (40 octets) header."""
    if len(src) == 4:
        h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, ident & 0xFFFF,
                                  0x4000 if df else 0, ttl, proto, 0, src, dst))
        h[10:12] = struct.pack("!H", inet_checksum(bytes(h)))
        return bytes(h)
    return struct.pack("!IHBB16s16s", 6 << 28, payload_len, proto, ttl, src, dst)


def outer_template(local: bytes, peer: bytes) -> bytes:
    """The outer header template a face sender takes (the endpoint's own: TTL 64, DF on IPv4, no protocol or
    length: the sender fills them in)."""
    if len(local) == 4:
        return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, 0, 0x4000, 64, 0, 0, local, peer)
    return struct.pack("!IHBB16s16s", 6 << 28, 0, 0, 64, local, peer)


def udp_datagram(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> bytes:
    """A whole IP/UDP packet around payload, both checksums computed (a 0 sum goes out as 0xFFFF)."""
    length = 8 + len(payload)
    udp = struct.pack("!HHHH", sport, dport, length, 0) + payload
    c = inet_checksum(pseudo_header(src, dst, 17, length) + udp) or 0xFFFF
    return ip_header(src, dst, 17, length) + udp[:6] + struct.pack("!H", c) + udp[8:]


def ip_header_len(pkt: bytes) -> int:
    return (pkt[0] & 15) * 4 if pkt[0] >> 4 == 4 else 40


# ---------------------------------------------------------------- ICMP


class Inner:
    """An inner IP packet taken apart as far as echo requests and replies need."""

    def __init__(self, pkt: bytes) -> None:
        self.raw = pkt
        self.version = pkt[0] >> 4 if pkt else 0
        self.problem: Optional[str] = None
        self.icmp: Optional[bytes] = None
        self.src = self.dst = b""
        self.proto = -1
        if self.version == 4 and len(pkt) >= 20:
            hl = (pkt[0] & 15) * 4
            total = int.from_bytes(pkt[2:4], "big")
            if hl < 20 or total != len(pkt) or total < hl:
                self.problem = f"IPv4 lengths: header {hl}, total {total}, packet {len(pkt)}"
                return
            if inet_checksum(pkt[:hl]) != 0:
                self.problem = "IPv4 header checksum"
                return
            self.src, self.dst, self.proto = pkt[12:16], pkt[16:20], pkt[9]
            frag = int.from_bytes(pkt[6:8], "big")
            if self.proto == 1 and frag & 0x3FFF == 0:
                self.icmp = pkt[hl:]
                if inet_checksum(self.icmp) != 0:
                    self.problem = "ICMP checksum"
        elif self.version == 6 and len(pkt) >= 40:
            plen = int.from_bytes(pkt[4:6], "big")
            if 40 + plen != len(pkt):
                self.problem = f"IPv6 payload length {plen} in a packet of {len(pkt)}"
                return
            self.src, self.dst, self.proto = pkt[8:24], pkt[24:40], pkt[6]
            if self.proto == 58:
                self.icmp = pkt[40:]
                if inet_checksum(pseudo_header(self.src, self.dst, 58, len(self.icmp)) + self.icmp) != 0:
                    self.problem = "ICMPv6 checksum"
        else:
            self.problem = f"not an IP packet ({len(pkt)} octets)"

    def echo(self) -> Optional[Tuple[int, int, int, bytes]]:
        """(type, identifier, sequence number, data) of an ICMP/ICMPv6 echo request or reply, else None."""
        if self.icmp is None or self.problem or len(self.icmp) < 8:
            return None
        t = self.icmp[0]
        if (self.version == 4 and t in (0, 8)) or (self.version == 6 and t in (128, 129)):
            ident, seq = struct.unpack("!HH", self.icmp[4:8])
            return t, ident, seq, self.icmp[8:]
        return None


def echo_packet(src: bytes, dst: bytes, request: bool, ident: int, seq: int, data: bytes, ip_id: int) -> bytes:
    """An ICMP (IPv4) or ICMPv6 echo request or reply, IP header included, every checksum set."""
    if len(src) == 4:
        icmp = bytearray(struct.pack("!BBHHH", 8 if request else 0, 0, 0, ident, seq) + data)
        icmp[2:4] = struct.pack("!H", inet_checksum(bytes(icmp)))
        return ip_header(src, dst, 1, len(icmp), ident=ip_id, df=False) + bytes(icmp)
    icmp = bytearray(struct.pack("!BBHHH", 128 if request else 129, 0, 0, ident, seq) + data)
    icmp[2:4] = struct.pack("!H", inet_checksum(pseudo_header(src, dst, 58, len(icmp)) + bytes(icmp)))
    return ip_header(src, dst, 58, len(icmp)) + bytes(icmp)


# ---------------------------------------------------------------- the faces


class Config(Exception):
    """A setting the peer cannot use (exit status 2)."""


class Face:
    """The face's sender for --spi and its receiver for the protocol's other lines of the key file."""

    def __init__(self, protocol: str, key_file: str, spi: int, outer: str, port: int, local: bytes,
                 peer: bytes) -> None:
        from pecore.keys import load_key_file  # the key-file loader the faces' from_key_file take

        self.protocol, self.spi, self.udp = protocol, spi, outer == "udp"
        kf = load_key_file(key_file)
        tmpl = outer_template(local, peer)
        if protocol == "esp":
            import pyesp

            self.errors: Tuple[type, ...] = (pyesp.EspError,)
            mine = [e for e in kf.esp_sas if e.spi == spi]
            theirs = [e for e in kf.esp_sas if e.spi != spi]
            if not mine:
                raise Config(f"no esp-sa line with spi={spi:08x} in {key_file}")
            self._need_tunnel(mine[0].settings["mode"])
            self.ip_protocol = 50
            self.tx = pyesp.SA(**{**mine[0].settings, "udp_encap": self.udp, "udp_sport": port, "udp_dport": port,
                                  "outer_header": tmpl})
            self.rx = pyesp.Receiver([pyesp.SA(**e.settings) for e in theirs], udp_port=port)
            self.rx_spis = [e.spi for e in theirs]
            self._encrypt = self.tx.encrypt
        elif protocol == "eesp":
            import pyeesp

            self.errors = (pyeesp.EespError,)
            mine = [e for e in kf.eesp_sas if e.spi == spi]
            theirs = [e for e in kf.eesp_sas if e.spi != spi]
            if not mine:
                raise Config(f"no eesp-sa line with spi={spi:08x} in {key_file}")
            self._need_tunnel(mine[0].settings["mode"])
            self.ip_protocol = int(mine[0].settings["ip_protocol"])
            if not self.udp and any(e.settings["ip_protocol"] != self.ip_protocol for e in theirs):
                raise Config("the receiving eesp-sa lines have another ip-protocol than the sending one")
            self.tx = pyeesp.SA(**{**mine[0].settings, "udp_encap": self.udp, "udp_sport": port, "udp_dport": port,
                                   "tunnel_header": tmpl})
            # as pyeesp.Receiver.from_key_file does: a Crypt Offset only shapes what an SA sends
            self.rx = pyeesp.Receiver([pyeesp.SA(**{**e.settings, "crypt_offset": None}) for e in theirs],
                                      ip_protocol=self.ip_protocol, udp_port=port,
                                      esp_spis=[e.spi for e in kf.esp_sas])
            self.rx_spis = [e.spi for e in theirs]
            self._encrypt = self.tx.encrypt  # Sub SA 0, as one endpoint worker on its own SPI
        elif protocol == "psp":
            import pypsp

            self.errors = (pypsp.PspError,)
            if not self.udp:
                raise Config("PSP is carried in UDP only: no --outer ip")
            mine = [e for e in kf.psp_sas if e.spi == spi]
            if not mine:
                raise Config(f"no psp-sa line with spi={spi:08x} in {key_file}")
            e = mine[0]
            self._need_tunnel(e.mode)
            key = kf.psp_keys.get((spi, e.version), kf.psp_keys.get((spi, None)))
            keys = dict(key=key) if key is not None else dict(master_keys=kf.psp_master_keys)
            self.ip_protocol = 17
            self.tx = pypsp.Encryptor(spi=spi, version=e.version, mode=e.mode, crypt_offset=e.crypt_offset,
                                      crypt_offset_ipv4=e.crypt_offset_ipv4, crypt_offset_ipv6=e.crypt_offset_ipv6,
                                      vc=e.vc, sample=e.sample, drop=e.drop, first_iv=e.first_iv or 1,
                                      udp_sport=port, udp_dport=port, tunnel_header=tmpl, **keys)
            self.rx = pypsp.Decryptor.from_key_file(kf, udp_dport=port)
            # PSP's receiver derives any SPI's key from the master keys: the SAs that receive are the peer's
            self.rx_spis = sorted({s.spi for s in kf.psp_sas if s.spi != spi} |
                                  {k for k, _v in kf.psp_keys if k != spi})
            self._encrypt = self.tx.encrypt
        else:
            raise Config(f"unknown protocol {protocol!r}")

    @staticmethod
    def _need_tunnel(mode: str) -> None:
        if mode != "tunnel":
            raise Config(f"the sending line is in {mode} mode; the peer speaks tunnel mode only")

    def encrypt(self, inner: bytes) -> bytes:
        return self._encrypt(inner)

    def decrypt(self, outer: bytes) -> Tuple[int, bytes]:
        """(SPI, inner packet) of an outer packet; raises the face's error."""
        d = self.rx.decrypt(outer)
        spi = d.spi if self.protocol == "esp" else d.header.spi
        return spi, d.packet


# ---------------------------------------------------------------- the wire


class Wire:
    """The outer socket(s): UDP on the port, or a raw socket of the IP protocol (and one to send on)."""

    def __init__(self, outer: str, family: int, local: str, peer: str, port: int, ip_protocol: int) -> None:
        self.udp, self.family, self.port = outer == "udp", family, port
        af = socket.AF_INET if family == 4 else socket.AF_INET6
        self.local, self.peer = local, peer
        self.local_b, self.peer_b = socket.inet_pton(af, local), socket.inet_pton(af, peer)
        self.ip_protocol = ip_protocol
        if self.udp:
            self.rx = socket.socket(af, socket.SOCK_DGRAM)
            self.rx.bind((local, port))
            self.tx = self.rx
        else:
            self.rx = socket.socket(af, socket.SOCK_RAW, ip_protocol)
            self.rx.bind((local, 0))
            self.tx = socket.socket(af, socket.SOCK_RAW, socket.IPPROTO_RAW)
            if family == 6:
                self.tx.setsockopt(socket.IPPROTO_IPV6, IPV6_HDRINCL, 1)
        self.rx.setblocking(False)

    def fileno(self) -> int:
        return self.rx.fileno()

    def send(self, outer: bytes) -> None:
        """Put a face's whole outer packet on the wire."""
        if self.udp:
            hl = ip_header_len(outer)
            sport, dport = struct.unpack("!HH", outer[hl:hl + 4])
            if outer[9 if self.family == 4 else 6] != 17 or (sport, dport) != (self.port, self.port):
                raise AssertionError(f"the face's outer packet is not UDP {self.port} -> {self.port}: "
                                     f"{outer[:hl + 8].hex()}")
            self.tx.sendto(outer[hl + 8:], (self.peer, self.port))
        else:
            self.tx.sendto(outer, (self.peer, 0))

    def receive(self) -> Optional[Tuple[bool, bytes]]:
        """(from the peer?, the outer packet as it was on the wire) of one datagram, None when none waits."""
        try:
            data, addr = self.rx.recvfrom(MAX_DATAGRAM)
        except BlockingIOError:
            return None
        from_peer = ipaddress.ip_address(addr[0].split("%")[0]) == ipaddress.ip_address(self.peer)
        if self.udp:
            return from_peer, udp_datagram(self.peer_b, self.local_b, addr[1], self.port, data)
        if self.family == 4:  # an IPv4 raw socket hands the whole packet
            return from_peer and data[12:16] == self.peer_b and data[16:20] == self.local_b, data
        return from_peer, ip_header(self.peer_b, self.local_b, self.ip_protocol, len(data)) + data


# ---------------------------------------------------------------- the peer


class Peer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.family = ipaddress.ip_address(args.local).version
        if ipaddress.ip_address(args.peer).version != self.family:
            raise Config("--local and --peer must be of one family")
        af = socket.AF_INET if self.family == 4 else socket.AF_INET6
        port = args.port or PORTS.get(args.protocol, 0)
        self.face = Face(args.protocol, args.key_file, args.spi, args.outer, port,
                         socket.inet_pton(af, args.local), socket.inet_pton(af, args.peer))
        self.wire = Wire(args.outer, self.family, args.local, args.peer, port, self.face.ip_protocol)
        self.inner = {ipaddress.ip_address(a).packed: ipaddress.ip_address(a) for a in args.inner}
        self.ping_dst = self.ping_src = None
        if args.ping:
            dst = ipaddress.ip_address(args.ping)
            srcs = [a for a in self.inner.values() if a.version == dst.version]
            if not srcs:
                raise Config(f"--ping {dst} needs an --inner address of IPv{dst.version}")
            self.ping_dst, self.ping_src = dst.packed, srcs[0].packed
        self.ident = int.from_bytes(os.urandom(2), "big")
        self.requests: Dict[int, bytes] = {}   # seq -> data of our own echo requests
        self.matched: Dict[int, int] = {}      # seq -> replies that matched
        self.ip_id = 0
        self.s = dict(protocol=args.protocol, outer=args.outer, family=self.family, send_spi=f"{args.spi:08x}",
                      receive_spis=[f"{x:08x}" for x in self.face.rx_spis], outer_received=0, not_from_peer=0,
                      decrypted=0, decrypt_failures={}, wrong_spi=0, inner_received_octets=0,
                      inner_sent_packets=0, inner_sent_octets=0, echo_requests_answered=0, own_requests_sent=0,
                      own_replies_matched=0, own_replies_bad=0, duplicate_replies=0, bad_inner=0, other_inner=0)
        self.stop_signal = 0

    def log(self, msg: str) -> None:
        print(msg, flush=True)

    def send_inner(self, pkt: bytes) -> None:
        self.wire.send(self.face.encrypt(pkt))
        self.s["inner_sent_packets"] += 1
        self.s["inner_sent_octets"] += len(pkt)

    def next_ip_id(self) -> int:
        self.ip_id = (self.ip_id + 1) & 0xFFFF
        return self.ip_id

    def send_request(self, seq: int) -> None:
        data = os.urandom(self.args.size)
        self.requests[seq] = data
        self.send_inner(echo_packet(self.ping_src, self.ping_dst, True, self.ident, seq, data, self.next_ip_id()))
        self.s["own_requests_sent"] += 1
        self.log(f"sent echo request id={self.ident} seq={seq} to {ipaddress.ip_address(self.ping_dst)}")

    def handle_inner(self, pkt: bytes) -> None:
        p = Inner(pkt)
        if p.problem:
            self.s["bad_inner"] += 1
            self.log(f"BAD inner packet ({p.problem}): {pkt[:64].hex()}")
            return
        e = p.echo()
        if e is None or p.dst not in self.inner:
            self.s["other_inner"] += 1
            self.log(f"other inner packet: IPv{p.version} protocol {p.proto}, {len(pkt)} octets")
            return
        t, ident, seq, data = e
        if t in (8, 128):
            self.send_inner(echo_packet(p.dst, p.src, False, ident, seq, data, self.next_ip_id()))
            self.s["echo_requests_answered"] += 1
            self.log(f"answered echo request id={ident} seq={seq} from {ipaddress.ip_address(p.src)}")
            return
        if (ident == self.ident and p.src == self.ping_dst and p.dst == self.ping_src
                and self.requests.get(seq) == data):
            n = self.matched.get(seq, 0) + 1
            self.matched[seq] = n
            if n == 1:
                self.s["own_replies_matched"] += 1
                self.log(f"echo reply id={ident} seq={seq} matches")
            else:
                self.s["duplicate_replies"] += 1
                self.log(f"DUPLICATE echo reply id={ident} seq={seq}")
        else:
            self.s["own_replies_bad"] += 1
            self.log(f"echo reply that matches no request: id={ident} seq={seq} from {ipaddress.ip_address(p.src)}")

    def handle_outer(self, from_peer: bool, outer: bytes) -> None:
        if not from_peer:
            self.s["not_from_peer"] += 1
            return
        self.s["outer_received"] += 1
        try:
            spi, inner = self.face.decrypt(outer)
        except self.face.errors as e:
            code = getattr(e, "code", type(e).__name__)
            self.s["decrypt_failures"][code] = self.s["decrypt_failures"].get(code, 0) + 1
            self.log(f"DECRYPT FAILURE {type(e).__name__} ({code}): {e}; outer packet {outer[:80].hex()}")
            return
        if spi not in self.face.rx_spis:  # our own SA never receives (as the endpoint's rule)
            self.s["wrong_spi"] += 1
            self.log(f"WRONG SPI: a packet decrypted on {spi:08x}, which is not a receiving SA")
            return
        self.s["decrypted"] += 1
        self.s["inner_received_octets"] += len(inner)
        self.handle_inner(inner)

    def done(self, now: float, last_request: float) -> bool:
        a = self.args
        if a.answer is None and not a.ping:
            return False  # serve until --max-seconds or a signal
        if a.answer is not None and self.s["echo_requests_answered"] < a.answer:
            return False
        if a.ping and self.s["own_requests_sent"] < a.count:
            return False
        if a.ping and self.s["own_replies_matched"] < a.count and now < last_request + a.reply_timeout:
            return False
        return True

    def run(self) -> int:
        a = self.args
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        self.log(f"ready {a.protocol} outer {a.outer} IPv{self.family} local {a.local} peer {a.peer} "
                 f"{'port ' + str(self.wire.port) if self.wire.udp else 'ip-protocol ' + str(self.wire.ip_protocol)} "
                 f"send-spi {a.spi:08x} receive-spis {','.join(self.s['receive_spis']) or '-'}")
        t0 = time.monotonic()
        deadline = t0 + a.max_seconds
        next_request = t0 + a.delay
        last_request = t0
        linger_until: Optional[float] = None
        while not self.stop_signal:
            now = time.monotonic()
            if now >= deadline or self.s["outer_received"] + self.s["not_from_peer"] >= a.max_packets:
                break
            if a.ping and self.s["own_requests_sent"] < a.count and now >= next_request:
                self.send_request(self.s["own_requests_sent"] + 1)
                last_request, next_request = now, now + a.interval
            if linger_until is None and self.done(now, last_request):
                linger_until = now + a.linger
            if linger_until is not None and now >= linger_until:
                break
            wake = [deadline]
            if a.ping and self.s["own_requests_sent"] < a.count:
                wake.append(next_request)
            elif a.ping:
                wake.append(last_request + a.reply_timeout)
            if linger_until is not None:
                wake.append(linger_until)
            try:
                ready, _, _ = select.select([self.wire], [], [], max(0.0, min(wake) - time.monotonic()))
            except InterruptedError:
                continue
            if not ready:
                continue
            for _ in range(64):  # what waits, a bounded number at a time
                got = self.wire.receive()
                if got is None:
                    break
                self.handle_outer(*got)
        self.s["seconds"] = round(time.monotonic() - t0, 3)
        self.s["stop"] = (signal.Signals(self.stop_signal).name if self.stop_signal
                          else "done" if linger_until is not None else "limit")
        failed = bool(self.s["decrypt_failures"] or self.s["wrong_spi"] or self.s["bad_inner"])
        missing = ((a.ping and self.s["own_replies_matched"] < a.count)
                   or (a.answer is not None and self.s["echo_requests_answered"] < a.answer))
        self.s["complete"] = not missing
        self.log("summary " + json.dumps(self.s, sort_keys=True))
        return 1 if failed else 3 if missing else 0

    def _on_signal(self, sig, _frame) -> None:  # type: ignore[no-untyped-def]
        self.stop_signal = sig


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="pyface_peer.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--protocol", required=True, choices=sorted(PORTS))
    p.add_argument("--key-file", required=True)
    p.add_argument("--spi", required=True, type=lambda s: int(s, 16), help="the sending SA (hex)")
    p.add_argument("--local", required=True, help="outer address of this peer")
    p.add_argument("--peer", required=True, help="outer address of the endpoint")
    p.add_argument("--outer", choices=("udp", "ip"), default="udp")
    p.add_argument("--port", type=int, default=0, help="UDP port at both ends (default PSP 1000, EESP/ESP 4500)")
    p.add_argument("--inner", action="append", default=[], help="an inner address of this peer (repeatable)")
    p.add_argument("--ping", help="send echo requests to this inner address (the endpoint's side)")
    p.add_argument("--count", type=int, default=3, help="echo requests to send with --ping (1..1000)")
    p.add_argument("--size", type=int, default=56, help="echo data octets (0..1400)")
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--delay", type=float, default=0.0, help="seconds before the first echo request")
    p.add_argument("--reply-timeout", type=float, default=3.0, help="wait for replies after the last request")
    p.add_argument("--answer", type=int, help="stop once this many echo requests were answered")
    p.add_argument("--linger", type=float, default=0.3, help="seconds to wait for stray packets once done")
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--max-packets", type=int, default=10000, help="stop after this many outer packets")
    args = p.parse_args(argv)
    if not 1 <= args.count <= 1000 or not 0 <= args.size <= 1400 or not 0 < args.max_seconds <= 600:
        p.error("--count 1..1000, --size 0..1400, --max-seconds up to 600")
    if not args.inner:
        p.error("give at least one --inner address")
    try:
        return Peer(args).run()
    except Config as e:
        print(f"pyface_peer: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
