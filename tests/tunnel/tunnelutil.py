"""What the live-endpoint tests share (conftest.py has the fixtures): namespaces, endpoints, counters, packets."""
from __future__ import annotations

import itertools
import json
import os
import re
import selectors
import signal as _signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PYTHON = sys.executable
XFER = HERE / "xfer.py"
WIRE = HERE / "wire.py"

#: The backstop every endpoint gets: a test that forgets to stop one still ends.
MAX_SECONDS = 60
#: How long an endpoint may take to start (Python, the extension, the device) on a busy 2-CPU machine.
START_TIMEOUT = 10.0
#: How long a stopped endpoint may take to exit.
STOP_TIMEOUT = 15.0

OUTER = {4: ("198.51.100.1", "198.51.100.2"), 6: ("2001:db8:1::1", "2001:db8:1::2")}
OUTER_PREFIX = {4: 24, 6: 64}
INNER = {4: ("192.0.2.1", "192.0.2.2"), 6: ("fd00::1", "fd00::2")}
INNER_PREFIX = {4: 24, 6: 64}
SPI_A, SPI_B = 0x100, 0x200
CLI = {"psp": "pypsp", "eesp": "pyeesp", "esp": "pyesp"}
PORTS = {"psp": 1000, "eesp": 4500, "esp": 4500}
#: Where the SPI is in the protocol's header, and how long the header before the encrypted part is
#: (ESP: SPI, sequence number; EESP optimized format: Base Header, 64-bit sequence number; PSP: header, IV).
SPI_OFFSET = {"psp": 4, "eesp": 4, "esp": 0}
HEADER_LEN = {"psp": 16, "eesp": 16, "esp": 8}
IP_PROTOCOLS = {"eesp": 49, "esp": 50}
DEV = "tun0"

counter = itertools.count()


# ---------------------------------------------------------------- small helpers


def default_sigint() -> None:
    """preexec_fn: SIGINT back to its default in the child, so that Python installs its handler there even when
    this run inherited SIGINT ignored (a background job of a shell without job control)."""
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)


def run(cmd: Sequence[str], timeout: float = 15.0, check: bool = True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def read_until(proc: subprocess.Popen, needle: str, timeout: float) -> str:
    """What proc writes to its stdout (a pipe) up to and including the first line that holds needle, read
    straight from the descriptor (so nothing is left in a buffer that select cannot see), within timeout
    seconds.  What came after that line is returned too, after it."""
    fd = proc.stdout.fileno()
    got = b""
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    try:
        while needle.encode() not in got or not got.split(needle.encode(), 1)[1].count(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise AssertionError(f"{proc.args}: no {needle!r} within {timeout} s; got {got[-500:]!r}")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"{proc.args} ended (status {proc.poll()}) before {needle!r}: {got[-500:]!r}")
            got += chunk
    finally:
        sel.close()
    return got.decode(errors="replace")


def wait_for(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def key_file_text(protocol: str, spis: Sequence[int] = (SPI_A, SPI_B), extra: str = "", mode: str = "tunnel") -> str:
    """Fresh random keys (os.urandom) for one SA per SPI in `mode`, in the docs/keys.md grammar."""
    lines = [f"# {protocol} tunnel test keys, random for this run"]
    if protocol == "psp":
        lines.append(f"psp-master key0={os.urandom(32).hex()} key1={os.urandom(32).hex()}")
        lines += [f"psp-sa spi={spi:#x} version=0 mode={mode}" for spi in spis]
    elif protocol == "eesp":
        lines += [f"eesp-sa spi={spi:#x} suite=aes-gcm-16 root-key={os.urandom(32).hex()} sskdf=hkdf-sha256 "
                  f"mode={mode}{extra}" for spi in spis]
    elif protocol == "esp":
        lines += [f"esp-sa spi={spi:#x} suite=aes-gcm-16 key={os.urandom(20).hex()} mode={mode}{extra}"
                  for spi in spis]
    else:
        raise ValueError(protocol)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- namespaces


@dataclass
class NetPair:
    """Two namespaces joined by a veth pair; processes started in them are tracked and stopped at the end."""

    a: str
    b: str
    procs: List[subprocess.Popen] = field(default_factory=list)

    def ns(self, side: str) -> str:
        return self.a if side == "a" else self.b

    def ip(self, side: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(["ip", "-n", self.ns(side), *args], check=check)

    def exec(self, side: str, cmd: Sequence[str], timeout: float = 30.0, check: bool = False,
             **kw) -> subprocess.CompletedProcess:
        return run(["ip", "netns", "exec", self.ns(side), *map(str, cmd)], timeout=timeout, check=check, **kw)

    def popen(self, side: str, cmd: Sequence[str], **kw) -> subprocess.Popen:
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("preexec_fn", default_sigint)
        p = subprocess.Popen(["ip", "netns", "exec", self.ns(side), *map(str, cmd)], cwd=REPO, **kw)
        self.procs.append(p)
        return p

    def link_exists(self, side: str, dev: str) -> bool:
        return self.ip(side, "-o", "link", "show", "dev", dev, check=False).returncode == 0

    def link_up(self, side: str, dev: str) -> bool:
        r = self.ip(side, "-o", "link", "show", "dev", dev, check=False)
        m = re.search(r"<([^>]*)>", r.stdout)
        return r.returncode == 0 and bool(m) and "UP" in m.group(1).split(",")

    def links(self, side: str) -> List[str]:
        r = self.ip(side, "-o", "link", "show")
        return [line.split(":")[1].strip().split("@")[0] for line in r.stdout.splitlines() if ":" in line]

    def ping(self, side: str, dst: str, count: int = 3, size: Optional[int] = None, dont_fragment: bool = False,
             interval: float = 0.2, deadline: float = 10.0) -> int:
        """Echo replies received for `count` echo requests, each waited for at most 2 s.  A reply that never
        comes, or one that comes twice, makes the result differ from count."""
        cmd = ["ping", "-n", "-q", "-c", str(count), "-i", str(interval), "-W", "2"]
        if size is not None:
            cmd += ["-s", str(size)]
        if dont_fragment:
            cmd += ["-M", "do"]
        r = self.exec(side, cmd + [dst], timeout=deadline + count * (interval + 2))
        m = re.search(r"(\d+) packets transmitted, (\d+) received(?:, \+(\d+) duplicates)?", r.stdout)
        assert m, f"ping printed no summary: {r.stdout}\n{r.stderr}"
        assert int(m.group(1)) == count, r.stdout
        return int(m.group(2)) + int(m.group(3) or 0)

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


# ---------------------------------------------------------------- endpoints


@dataclass
class Endpoint:
    pair: NetPair
    side: str
    protocol: str
    spi: int
    proc: subprocess.Popen
    stderr_path: Path
    stats_path: Path
    dev: str = DEV
    rc: Optional[int] = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    @property
    def mtu(self) -> int:
        m = re.search(r"\(MTU (\d+)\)", self.log())
        assert m, f"no start line in {self.log()!r}"
        return int(m.group(1))

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                self.rc = self.proc.returncode  # nothing left to stop at teardown
                raise AssertionError(f"endpoint in {self.side} exited with {self.proc.returncode} while starting:\n"
                                     f"{self.log()}")
            return "tunnel: " in self.log() and self.pair.link_up(self.side, self.dev)
        wait_for(ready, timeout, f"the {self.dev} device in namespace {self.side}")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        try:
            self.rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"endpoint in {self.side} did not exit within {timeout} s of being stopped:\n"
                                 f"{self.log()}")
        return self.rc

    def stop(self, sig: int = _signal.SIGTERM) -> dict:
        """Stop it, check it stopped cleanly, and return its counters (written at exit)."""
        self.signal(sig)
        return self.check_stopped()

    def check_stopped(self) -> dict:
        rc = self.wait()
        log = self.log()
        assert rc == 0, f"endpoint in {self.side} exited with {rc}:\n{log}"
        assert re.search(r"^tunnel: stopped.*: sent \d+, received \d+, dropped \d+$", log, re.M), log
        return self.stats()

    def stats(self) -> dict:
        return json.loads(self.stats_path.read_text())


def endpoint_cmd(protocol: str, key_file: Path, spis: Sequence[int], local: str, peer: str, outer: str = "udp",
                 workers: int = 1, stats: Optional[Path] = None, dev: str = DEV, max_seconds: float = MAX_SECONDS,
                 extra: Sequence[str] = ()) -> List[str]:
    cmd = [PYTHON, "-m", CLI[protocol], "tunnel", "--key-file", str(key_file)]
    for spi in spis:
        cmd += ["--spi", f"{spi:x}"]
    cmd += ["--dev", dev, "--local", local, "--peer", peer, "--outer", outer, "--workers", str(workers),
            "--max-seconds", str(max_seconds)]
    if stats is not None:
        cmd += ["--stats", str(stats)]
    return cmd + list(extra)


@dataclass
class Tunnel:
    pair: NetPair
    protocol: str
    outer: str
    family: int
    inner: int
    a: Endpoint
    b: Endpoint
    key_file: Path
    mode: str = "tunnel"

    def addr(self, side: str) -> str:
        """Where traffic to `side` goes: its inner address, or in transport mode its outer one."""
        return (OUTER[self.family] if self.mode == "transport" else INNER[self.inner])[0 if side == "a" else 1]

    def ping(self, src: str = "a", count: int = 3, **kw) -> int:
        return self.pair.ping(src, self.addr("b" if src == "a" else "a"), count, **kw)

    def transfer(self, nbytes: int, src: str = "a", connections: int = 1, timeout: float = 60.0,
                 port: int = 5001) -> Tuple[dict, dict]:
        """nbytes of random octets from src to the other side over TCP through the tunnel, on each of
        `connections` connections; (what was sent, what arrived), each {"streams": [...], "errors": [...]}."""
        dst = "b" if src == "a" else "a"
        server = self.pair.popen(dst, [PYTHON, XFER, "serve", "--bind", self.addr(dst), "--port", port,
                                       "--connections", connections, "--timeout", timeout],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            read_until(server, "listening", START_TIMEOUT)
            client = self.pair.exec(src, [PYTHON, XFER, "send", "--to", self.addr(dst), "--port", port,
                                          "--bytes", nbytes, "--connections", connections, "--timeout", timeout],
                                    timeout=timeout * 2 + 10)
            out, err = server.communicate(timeout=timeout * 2 + 10)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(10)
        assert client.stdout.strip(), f"the sender printed nothing: {client.stderr}"
        assert out.strip(), f"the receiver printed nothing: {err}"
        return json.loads(client.stdout), json.loads(out)

    def stop(self, sig: int = _signal.SIGTERM) -> Tuple[dict, dict]:
        """Stop both ends at once; their counters."""
        self.a.signal(sig)
        self.b.signal(sig)
        return self.a.check_stopped(), self.b.check_stopped()


# ---------------------------------------------------------------- counters


def drops(counts: dict) -> Dict[str, int]:
    return dict(counts.get("drops", {}))


def per_sa(stats: dict, spi: int, direction: str) -> dict:
    hits = [e for e in stats["per_sa"] if e["spi"] == f"{spi:08x}" and e["direction"] == direction]
    assert len(hits) == 1, f"per_sa has {len(hits)} entries for {spi:08x} {direction}: {stats['per_sa']}"
    return hits[0]["counts"]


def bad_categories(counts: dict, categories: Sequence[str] = ("authentication", "replay")) -> Dict[str, int]:
    """The drops of counts whose status is of one of categories (pecore.errors.CATEGORY_BY_CODE)."""
    from pecore.errors import CATEGORY_BY_CODE

    return {k: v for k, v in drops(counts).items() if CATEGORY_BY_CODE.get(k) in categories}


# ---------------------------------------------------------------- outer packets


def inet_checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip_header_len(pkt: bytes) -> int:
    return (pkt[0] & 15) * 4 if pkt[0] >> 4 == 4 else 40


def outer_payload(pkt: bytes, udp: bool) -> bytes:
    """The PSP/EESP/ESP octets of an outer packet: after its IP header, and its UDP header when udp."""
    return pkt[ip_header_len(pkt) + (8 if udp else 0):]


def with_payload(pkt: bytes, payload: bytes, udp: bool) -> bytes:
    """pkt (an outer IPv4/IPv6 packet, UDP or straight in IP) carrying payload instead: lengths and checksums
    made right again, so that the peer's kernel hands it to the endpoint."""
    hl = ip_header_len(pkt)
    h = bytearray(pkt[:hl])
    body = bytearray(pkt[hl:hl + 8]) + payload if udp else bytearray(payload)
    v4 = h[0] >> 4 == 4
    if udp:
        body[4:6] = len(body).to_bytes(2, "big")
        body[6:8] = b"\0\0"
        if v4:
            pseudo = bytes(h[12:20]) + b"\0\x11" + len(body).to_bytes(2, "big")
        else:
            pseudo = bytes(h[8:40]) + len(body).to_bytes(4, "big") + b"\0\0\0\x11"
        c = inet_checksum(pseudo + bytes(body))
        body[6:8] = (c or 0xFFFF).to_bytes(2, "big")
    if v4:
        h[2:4] = (hl + len(body)).to_bytes(2, "big")
        h[10:12] = b"\0\0"
        h[10:12] = inet_checksum(bytes(h)).to_bytes(2, "big")
    else:
        h[4:6] = len(body).to_bytes(2, "big")
    return bytes(h) + bytes(body)


def capture_outer(pair: NetPair, side: str, dst: str, protocol: str, outer: str, action, count: int = 1 << 30,
                  timeout: float = 10.0, idle: float = 0.0, payload_head: int = 0) -> List[bytes]:
    """The outer packets (the first `count`) that side sends to dst while action() runs, sniffed on its veth:
    whole IP packets, or the first payload_head octets of their PSP/EESP/ESP payload.  The capture ends
    after `count` packets, `timeout` seconds, or `idle` seconds without one (once one came)."""
    sel = ["--udp-port", PORTS[protocol]] if outer == "udp" else ["--ip-proto", IP_PROTOCOLS[protocol]]
    return capture(pair, side, "va" if side == "a" else "vb", dst, sel, action, count, timeout, idle,
                   payload_head)


def capture(pair: NetPair, side: str, dev: str, dst: str, select: Sequence[str], action, count: int = 1 << 30,
            timeout: float = 10.0, idle: float = 0.0, payload_head: int = 0, extra: Sequence[str] = ()) -> List[bytes]:
    """wire.py capture on dev in side's namespace while action() runs (select: --udp-port P or --ip-proto N)."""
    p = pair.popen(side, [PYTHON, WIRE, "capture", "--dev", dev, "--dst", dst, *select, "--count", count,
                          "--timeout", timeout, "--idle", idle, "--payload-head", payload_head, *extra],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        early = read_until(p, "ready", START_TIMEOUT).split("ready\n", 1)[1]
        action()
        out, err = p.communicate(timeout=timeout + 10)
        out = early + out
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    lines = out.split()
    assert lines and lines[-1] == "done", (out[-500:], err)
    return [bytes.fromhex(x) for x in lines[:-1]]


def send_raw(pair: NetPair, side: str, packets: Sequence[bytes], path: Path, pace: int = 0,
             timeout: float = 60.0) -> None:
    """Send whole IP packets from side's namespace through a raw socket."""
    path.write_text("".join(p.hex() + "\n" for p in packets))
    r = pair.exec(side, [PYTHON, WIRE, "send", "--file", path, "--pace", pace, "--timeout", timeout],
                  timeout=timeout + 15)
    assert r.returncode == 0 and r.stdout.strip() == f"sent {len(packets)}", (r.stdout, r.stderr)


# ---------------------------------------------------------------- protocol fields and traffic


#: The sequence number field: (offset, length) in the payload; PSP has none (and no anti-replay).
SEQ_FIELD = {"esp": (4, 4), "eesp": (8, 8)}


def seq_of(protocol: str, payload: bytes) -> int:
    off, n = SEQ_FIELD.get(protocol, (8, 8))  # PSP: the IV
    return int.from_bytes(payload[off:off + n], "big")


def with_seq(protocol: str, payload: bytes, seq: int) -> bytes:
    off, n = SEQ_FIELD.get(protocol, (8, 8))
    return payload[:off] + seq.to_bytes(n, "big") + payload[off + n:]


def with_spi(protocol: str, payload: bytes, spi: int) -> bytes:
    off = SPI_OFFSET[protocol]
    return payload[:off] + spi.to_bytes(4, "big") + payload[off + 4:]


def capture_real(t, side: str = "a", count: int = 3):
    """Real outer packets that side sends while it pings the other (three pings: three packets)."""
    dst = OUTER[t.family][1 if side == "a" else 0]
    pkts = capture_outer(t.pair, side, dst, t.protocol, t.outer, lambda: t.ping(side, count=count), count=count)
    assert len(pkts) == count, pkts
    return pkts


def blast(t, packets: int, flows: int = 16, size: int = 1000) -> int:
    """`packets` UDP datagrams from a to b's inner address (port 9, nobody listening) over `flows` sockets,
    with no traffic back: a multi-queue TUN device spreads the flows over its queues by their hash."""
    r = t.pair.exec("a", [PYTHON, XFER, "blast", "--to", t.addr("b"), "--port", 9, "--flows", flows,
                          "--packets", packets, "--size", size, "--timeout", 30], timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["sent"]


def wire_ids(proto: str, head: bytes):
    """(SPI, Sub SA, the number that must never repeat) of an outer payload's first 16 octets."""
    if proto == "esp":
        return int.from_bytes(head[0:4], "big"), 0, int.from_bytes(head[4:8], "big")
    if proto == "eesp":
        return int.from_bytes(head[4:8], "big"), int.from_bytes(head[2:4], "big"), int.from_bytes(head[8:16], "big")
    return int.from_bytes(head[4:8], "big"), 0, int.from_bytes(head[8:16], "big")  # PSP: the IV


def udp_exchange(t, payloads: Sequence[bytes], src: str = "a", sport: int = 40000, dport: int = 5002,
                 tmp: Optional[Path] = None) -> List[str]:
    """UDP datagrams from src to the other side's inner address, through the tunnel, sent by an ordinary
    socket (so the kernel leaves their checksum to the TUN device's offload, that is, to the endpoint); the
    SHA-256 of each that arrived, in order."""
    dst = "b" if src == "a" else "a"
    path = (tmp or Path(t.key_file).parent) / "udp-payloads.hex"
    path.write_text("".join(p.hex() + "\n" for p in payloads))
    sink = t.pair.popen(dst, [PYTHON, XFER, "udp-sink", "--bind", t.addr(dst), "--port", dport,
                              "--count", len(payloads), "--timeout", 20],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        read_until(sink, "listening", START_TIMEOUT)
        r = t.pair.exec(src, [PYTHON, XFER, "udp-send", "--to", t.addr(dst), "--port", dport, "--sport", sport,
                              "--file", path], timeout=60)
        assert r.returncode == 0, r.stderr
        out, err = sink.communicate(timeout=40)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait(10)
    return json.loads(out.strip().splitlines()[-1])["sha256"]


def udp_payload_with_zero_checksum(src: str, dst: str, sport: int, dport: int, n: int = 100,
                                   rng=None) -> bytes:
    """n random octets (n even, at least 2) whose last two make the datagram's UDP checksum compute to 0
    (sent as 0xFFFF, RFC 768; over IPv6 a 0 in the field means a datagram the receiver drops)."""
    import ipaddress
    import random

    rng = rng or random.Random(7)
    a, b = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    body = bytes(rng.getrandbits(8) for _ in range(n - 2))
    length = 8 + n
    if a.version == 6:
        pseudo = a.packed + b.packed + length.to_bytes(4, "big") + b"\0\0\0\x11"
    else:
        pseudo = a.packed + b.packed + b"\0\x11" + length.to_bytes(2, "big")
    udp = sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + length.to_bytes(2, "big") + b"\0\0"
    s = ~inet_checksum(pseudo + udp + body) & 0xFFFF  # the folded sum so far
    payload = body + (0xFFFF - s).to_bytes(2, "big")
    assert inet_checksum(pseudo + udp + payload) == 0
    return payload
