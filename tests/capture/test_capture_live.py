"""Live pipes (issue 21, item 5): with a pipe for input, every record is written, and the output flushed, as soon
as it is done, as `tcpdump -U` does, while the input stays open; with --jobs too. (`pypsp decrypt - - -k keys`
fed 200 records and then kept open printed nothing until its input closed.)"""
from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import time

import pytest

from test_capture_stream import ROOT, eth, pcap_bytes, udp4

KEYS = {
    "pypsp": ("psp-master key0=34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
              " key1=563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739\n", "9a345678"),
    "pyeesp": ("eesp-sa spi=0x00001000 suite=aes-gcm-16 key-bits=128"
               " root-key=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f sskdf=hkdf-sha256"
               " mode=tunnel\n", "1000"),
    "pyesp": ("esp-sa spi=0x1000 suite=aes-gcm-16 key=" + "ab" * 20 + " mode=tunnel\n", "1000"),
}
FIRST_RECORD_WITHIN = 1.0  # seconds, the bound
START_UP = 60.0  # a CLI's imports on a loaded machine: not what is measured


def records(pcap: bytes):
    """The 24-octet header and each record of a little-endian pcap, as octet strings."""
    out, off = [], 24
    while off < len(pcap):
        n = struct.unpack_from("<I", pcap, off + 8)[0]
        out.append(pcap[off:off + 16 + n])
        off += 16 + n
    return pcap[:24], out


class PcapCounter:
    """Counts the whole records read so far from a pcap stream."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.count = fd, b"", 0
        self.off = 24

    def wait_for(self, n: int, timeout: float) -> float:
        t0 = time.monotonic()
        while self.count < n:
            left = timeout - (time.monotonic() - t0)
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"{self.count} of {n} records after {timeout} s")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError(f"output ended after {self.count} records")
            self.buf += chunk
            while len(self.buf) >= self.off + 16:
                n_rec = struct.unpack_from("<I", self.buf, self.off + 8)[0]
                if len(self.buf) < self.off + 16 + n_rec:
                    break
                self.off += 16 + n_rec
                self.count += 1
        return time.monotonic() - t0


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("cmd", ["encrypt", "decrypt"])
@pytest.mark.parametrize("prog", sorted(KEYS))
def test_records_come_out_while_the_input_pipe_stays_open(prog, cmd, jobs, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(KEYS[prog][0])
    spi = ["--spi", KEYS[prog][1]]
    clear = pcap_bytes([eth(udp4(bytes([i & 0xFF]) * (20 + i % 300))) for i in range(400)], snaplen=262144)
    base = [sys.executable, "-m", prog]
    if cmd == "decrypt":
        enc = subprocess.run([*base, "encrypt", "-", "-", "-k", keys, *spi, "-q"], input=clear,
                             capture_output=True, cwd=str(ROOT), timeout=120)
        assert enc.returncode == 0, enc.stderr
        data, spi = enc.stdout, []
    else:
        data = clear
    header, recs = records(data)
    proc = subprocess.Popen([*base, cmd, "-", "-", "-k", keys, *spi, "-q", "--jobs", jobs], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT))
    try:
        out = PcapCounter(proc.stdout.fileno())
        proc.stdin.write(header + b"".join(recs[:200]))
        proc.stdin.flush()
        out.wait_for(200, START_UP)  # the input stays open: without live output nothing came until it closed
        proc.stdin.write(b"".join(recs[200:]))
        proc.stdin.flush()
        took = out.wait_for(400, FIRST_RECORD_WITHIN * 10)
        assert took < FIRST_RECORD_WITHIN, f"200 more records took {took:.3f} s to come out"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
