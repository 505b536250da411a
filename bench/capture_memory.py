"""Peak memory of a capture decrypt streamed through pipes: `pypsp decrypt - -` (or pyeesp) over a capture of a
given size, fed by a pipe and read from a pipe, with the decrypting process's own peak RSS (wait4's rusage, so no
other child counts).  The reader streams, so the figure must not depend on the capture's size.

Used by bench/run (section capture-memory: 1 GiB, full runs only) and by tests/capture/test_capture_stream.py (a few
hundred MB, under 64 MiB).  Alone: `python bench/capture_memory.py --mb 1024`.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
MK0 = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
SPI = 0x12345678
FRAME = 1514  # a full-size Ethernet frame: the inner packet of 1500 octets


def _frame(i: int) -> bytes:
    payload = bytes((i + k) & 0xFF for k in range(FRAME - 14 - 28))
    udp = struct.pack("!HHHH", 40000 + i % 100, 5000, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xFFFF, 0, 64, 17, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
    return bytes.fromhex("020000000002020000000001") + b"\x08\x00" + ip + udp


def make_capture(directory: Path, megabytes: int) -> "tuple[Path, Path]":
    """A clear pcap of about `megabytes` MB (full-size frames) and its PSP encryption (pypsp, in the core)."""
    import pypsp

    clear, enc = directory / "mem_clear.pcap", directory / "mem_enc.pcap"
    frames = [_frame(i) for i in range(64)]
    records = b"".join(struct.pack("<IIII", 1_700_000_000 + i, i, len(f), len(f)) + f for i, f in enumerate(frames))
    n = max(1, megabytes * 1_000_000 // len(records))
    with open(clear, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 9014, 1))
        for _ in range(n):
            f.write(records)
    enc_ = pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), None), spi=SPI, version=0)
    pypsp.encrypt_capture(enc_, clear, enc)
    return clear, enc


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# Linux carries a process's peak RSS across exec, so a child forked from a big parent (a pytest run) would
# report the parent's size: a small Python starts the decrypting process and reports its peak (wait4).
_STARTER = (
    "import os, subprocess, sys\n"
    "p = subprocess.Popen(sys.argv[2:])\n"
    "_, status, usage = os.wait4(p.pid, 0)\n"
    "open(sys.argv[1], 'w').write(str(usage.ru_maxrss * 1024))  # Linux reports KiB\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def decrypt_through_pipes(enc: Path, env: Optional[dict] = None) -> dict:
    """`cat enc | python -m pypsp decrypt - - | (hash)`: the decrypting process's peak RSS, time and output."""
    rss_file = enc.with_suffix(".rss")
    cmd = [sys.executable, "-c", _STARTER, str(rss_file),
           sys.executable, "-m", "pypsp", "decrypt", "-", "-", "--master-key0", MK0, "-q"]
    feeder = subprocess.Popen(["cat", str(enc)], stdout=subprocess.PIPE)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=feeder.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(ROOT),
                            env=env)
    feeder.stdout.close()  # type: ignore[union-attr]  # the decryptor holds the read end
    h, size = hashlib.sha256(), 0
    err: list = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()))  # type: ignore[union-attr]
    t.start()
    for block in iter(lambda: proc.stdout.read(1 << 20), b""):  # type: ignore[union-attr]
        h.update(block)
        size += len(block)
    proc.wait()
    seconds = time.perf_counter() - t0
    t.join()
    feeder.wait()
    peak = int(rss_file.read_text()) if rss_file.exists() else -1
    rss_file.unlink(missing_ok=True)
    return {"returncode": proc.returncode, "stderr": err[0].decode(errors="replace") if err else "",
            "peak_rss_bytes": peak,
            "seconds": seconds, "output_bytes": size, "output_sha256": h.hexdigest(),
            "input_bytes": enc.stat().st_size}


def measure(megabytes: int, directory: Path) -> dict:
    clear, enc = make_capture(directory, megabytes)
    try:
        r = decrypt_through_pipes(enc)
        r["matches_clear"] = r["output_sha256"] == _sha256(clear)
        r["command"] = f"cat enc.pcap | python -m pypsp decrypt - - --master-key0 ... -q | sha256sum"
        return r
    finally:
        clear.unlink()
        enc.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1024, help="size of the clear capture in MB (default 1024)")
    ap.add_argument("--tmpdir", default=None)
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(dir=args.tmpdir) as d:
        r = measure(args.mb, Path(d))
    print(json.dumps(r, indent=1))
    return 0 if r["returncode"] == 0 and r["matches_clear"] else 1


if __name__ == "__main__":
    sys.exit(main())
