"""ESP with AES-CBC + HMAC through the Python face, one packet at a time against bursts (docs/performance.md,
"Bursts in the front ends"): ``SA.encrypt_batch`` through pe_batch_transform_until_failure against
pe_batch_burst, and ``encrypt_capture`` and ``decrypt_capture`` with one job on the calling thread against the
worker pool of one job, whose work step takes bursts.  The contenders of a row take turns in every repeat; medians.

    python bench/esp_bursts.py [--repeats 5] [--packets 4096] [--sizes 64,1500] [--tmpdir DIR]

Each row is printed as one JSON object.  AES-GCM rows are information: a sender without an integrity transform
on ipsec-mb gains nothing from bursts, so the face does not use them there (pe_esp_tx_bursts).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib import ETH_HDR, make_ipv4_udp  # noqa: E402

import pyesp  # noqa: E402
from pecore.binding import lib  # noqa: E402
from pecore.capture import POOL_ESP, CaptureWriter, run_transform  # noqa: E402
from pecore.util import crypto_version, run_batch  # noqa: E402
from pyesp.errors import CaptureError  # noqa: E402

SUITES = (("aes-cbc-hmac-sha1-96", 16 + 20), ("aes-cbc-hmac-sha256-128", 16 + 32), ("aes-gcm-16", 16 + 4))


def new_sender(suite: str, key_len: int):  # type: ignore[no-untyped-def]
    return pyesp.SA(0x4004, suite, bytes(range(key_len)))._core


def batch_ns(suite: str, key_len: int, pkts: list, burst: bool) -> float:
    tx = new_sender(suite, key_len)
    fn, ctx = tx.ops.batch_encap(tx.c, ())
    t = time.perf_counter()
    results = run_batch(fn, ctx, pkts, tx.ops.max_overhead, stop_at_failure=True,
                        burst=lib.pe_esp_capture_encap_burst if burst else None)
    ns = (time.perf_counter() - t) / len(pkts) * 1e9
    assert all(st == lib.PE_OK for st, _ in results)
    return ns


def new_receiver(suite: str, key_len: int):  # type: ignore[no-untyped-def]
    return pyesp.Receiver([pyesp.SA(0x4004, suite, bytes(range(key_len)))])._core


def capture_ns(suite: str, key_len: int, path: str, out: str, packets: int, pool: bool, decrypt: bool = False) -> float:
    end = new_receiver(suite, key_len) if decrypt else new_sender(suite, key_len)
    fn = end.ops.capture_decap if decrypt else end.ops.capture_encap
    if os.path.exists(out):
        os.unlink(out)
    t = time.perf_counter()
    s = run_transform(path, out, fn, end.c, error=CaptureError, grows=not decrypt,
                      parallel=(POOL_ESP, decrypt, 1) if pool else None)
    ns = (time.perf_counter() - t) / packets * 1e9
    assert s.transformed == packets, s
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--packets", type=int, default=4096)
    ap.add_argument("--sizes", default="64,1500")
    ap.add_argument("--tmpdir", default=None)
    a = ap.parse_args()
    print(json.dumps({"kind": "backend", "version": crypto_version()}))
    tmp = tempfile.mkdtemp(prefix="pe-esp-bursts-", dir=a.tmpdir)
    for size in (int(s) for s in a.sizes.split(",")):
        pkt = make_ipv4_udp(size)
        pkts = [pkt] * a.packets
        path, out = os.path.join(tmp, f"plain{size}.pcap"), os.path.join(tmp, "out.pcap")
        with CaptureWriter(path, 1, "pcap") as w:
            for i in range(a.packets):
                w.write(ETH_HDR + pkt, (i, 0))
        for suite, key_len in SUITES:
            runs: dict = {"batch": [], "batch_burst": [], "capture": [], "capture_pool": [], "decrypt_capture": [],
                          "decrypt_capture_pool": []}
            batch_ns(suite, key_len, pkts[:64], True)  # warm-up
            wire = os.path.join(tmp, "wire.pcap")
            capture_ns(suite, key_len, path, wire, a.packets, False)
            for _ in range(a.repeats):
                runs["batch"].append(batch_ns(suite, key_len, pkts, False))
                runs["batch_burst"].append(batch_ns(suite, key_len, pkts, True))
                runs["capture"].append(capture_ns(suite, key_len, path, out, a.packets, False))
                runs["capture_pool"].append(capture_ns(suite, key_len, path, out, a.packets, True))
                runs["decrypt_capture"].append(capture_ns(suite, key_len, wire, out, a.packets, False, True))
                runs["decrypt_capture_pool"].append(capture_ns(suite, key_len, wire, out, a.packets, True, True))
            med = {k: statistics.median(v) for k, v in runs.items()}
            print(json.dumps({
                "suite": suite, "size": size, "packets": a.packets, "repeats": a.repeats,
                "bursts_used": bool(lib.pe_esp_tx_bursts(new_sender(suite, key_len).c)),
                "median_ns": {k: round(v) for k, v in med.items()},
                "batch_speedup": round(med["batch"] / med["batch_burst"], 2),
                "capture_speedup": round(med["capture"] / med["capture_pool"], 2),
                "decrypt_capture_speedup": round(med["decrypt_capture"] / med["decrypt_capture_pool"], 2),
            }), flush=True)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
