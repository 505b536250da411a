"""PSP, EESP and ESP performance bench: C core vs the raw AEAD on each crypto backend, pypsp vs scapy, capture path,
EESP threads, pyeesp.

Run through ``bench/run`` (it picks the project venv).  Everything is measured
in one process run and printed as Markdown; see docs/performance.md for what
each row means.  Every figure is packets per second on ONE thread, except the
EESP threads table (total over all threads); Gbit/s is packets/s x the inner
IP packet size x 8, so rows of one size compare directly whatever the
encapsulation overhead.

Timing method, for every row: a contender runs until at least --min-time
seconds have passed, and that is repeated --repeats times, the contenders of a
group taking turns so that a slow spell on a shared 2-core machine hits them
alike.  The Python and capture rows report the best repeat (highest packets/s):
interference only ever slows a run down.  The C rows report medians: ns per
packet of the median run and core/raw as the median of the runs' ratios, and
their targets are judged on that median of at least JUDGE_MIN_RUNS runs, so
that one noisy run neither passes nor fails a row (issue 23: rows of the same
work spread by 30 points from one run to the next here).  The C benches run
once per crypto backend (--backends, PE_CRYPTO_BACKEND), back to back, and the
report shows the backends side by side with each run's pe_version().  The
JSON keeps every repeat.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional


from benchlib import (
    BATCH, BUILD_DIR, CAPTURE_SIZE, C_SIZES, C_VERSIONS, EESP_COLD_SIZES, EESP_MT_SCALING_MIN, EESP_MT_SIZE,
    EESP_MT_SUITE, EESP_MT_THREADS, EESP_PY_RING, EESP_PY_SIZE, EESP_QUIET, EESP_ROOT_KEY, EESP_SIZES, EESP_SPI,
    EESP_SUITES, ESP_SIZES, ESP_SUITES, FLOOD_KEPT_MAX, FLOOD_RSS_MAX_KIB, FLOOD_VALID_RSS_MAX_KIB,
    PYPSP_VS_SCAPY_MIN, PY_ROWS, PY_SIZES, PY_VERSIONS, REF_PACKETS, ROOT, SPI, best, core_target, gbps,
    interleaved, key_for, log, make_ipv4_udp, verdict, BACKENDS, EESP_COLD_EXTRA_MAX_NS, PSP_COLD_EXTRA_MAX_NS,
    PSP_COLD_SIZES, JUDGE_MIN_RUNS, cold_target, paired_ratio,
)
from bench_capture import (
    run_capture, run_capture_memory, run_reference,
)


# ---------------------------------------------------------------- C section


def build_c(jobs: int) -> Path:
    """Configure (once) and build build/bench (every C bench); returns the PSP bench binary."""
    exe = BUILD_DIR / "psp_bench"
    steps = []
    if not (BUILD_DIR / "CMakeCache.txt").exists():
        steps.append(["cmake", "-S", str(ROOT / "bench"), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release"])
    steps.append(["cmake", "--build", str(BUILD_DIR), "-j", str(jobs)])
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout + p.stderr)
            raise SystemExit(f"bench: build failed: {' '.join(cmd)}")
    return exe


BACKEND_INFO: Dict[str, dict] = {}  # backend -> the C benches' backend line (pe_version() and the raw baseline)


def bench_lines(cmd: List[str], backend: Optional[str] = None) -> List[dict]:
    """Run one of the C benches (on `backend`: PE_CRYPTO_BACKEND) and return its JSON lines, the backend line first;
    its stderr and a clear exit when it fails."""
    env = dict(os.environ)
    if backend:
        env["PE_CRYPTO_BACKEND"] = backend
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"bench: {Path(cmd[0]).name} failed")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def run_per_backend(cmd: List[str], backends: List[str]) -> Dict[str, List[dict]]:
    """cmd once per backend, back to back; {backend: its rows}.  A backend this build or CPU cannot run is left out."""
    runs = {}
    for b in backends:
        lines = bench_lines(cmd, b)
        info, rows = lines[0], lines[1:]
        if info.get("kind") != "backend":
            raise SystemExit(f"bench: {Path(cmd[0]).name} did not say which backend ran")
        if info["backend"] != b:
            log(f"bench: {Path(cmd[0]).name}: backend {b} is not available here ({info['version']}); its rows are left out")
            continue
        BACKEND_INFO.setdefault(b, info)
        runs[b] = rows
    if not runs:
        raise SystemExit("bench: none of the backends asked for ran")
    return runs


def judged_backend(backends) -> str:
    """The targets hold the fastest backend that ran: ipsec-mb when it did, else OpenSSL (against an EVP baseline)."""
    return "ipsec-mb" if "ipsec-mb" in backends else next(iter(backends))


def judged_rows(sec: dict) -> List[dict]:
    """A C section's warm rows on its judged backend (what the Python sections compare with)."""
    return [r for r in sec.get("rows", []) if r["backend"] == sec.get("judged")]


def ns(runs: Optional[List[float]]) -> Optional[float]:
    """Median ns per packet of a list of packets/s runs."""
    return 1e9 / statistics.median(runs) if runs else None


def proto_row(backend: str, judged: bool, base: dict, rr: dict, er: Optional[dict], cr: dict,
              sr: Optional[dict] = None) -> dict:
    """One warm row: the raw baseline (rr), EVP beside it (er; None when the baseline is EVP), the core (cr)
    and, information, the raw baseline one packet at a time (sr, "raw-serial"; ipsec-mb builds only)."""
    row = {"backend": backend, **base,
           "raw_runs": rr["pps"], "evp_runs": er["pps"] if er else None, "core_runs": cr["pps"],
           "serial_runs": sr["pps"] if sr else None, "serial_ns": ns(sr["pps"]) if sr else None,
           "raw_pps": best(rr["pps"]), "core_pps": best(cr["pps"]),
           "raw_median": statistics.median(rr["pps"]), "core_median": statistics.median(cr["pps"]),
           "raw_ns": ns(rr["pps"]), "evp_ns": ns(er["pps"]) if er else None, "core_ns": ns(cr["pps"]),
           "ratio": paired_ratio(cr["pps"], rr["pps"]), "ratio_best": best(cr["pps"]) / best(rr["pps"])}
    if judged:
        core_target(row)
    return row


def cold_row(backend: str, judged: bool, base: dict, warm: dict, cold: dict, evp_cold: Optional[dict],
             max_extra_ns: float, new_rx_cold: Optional[dict] = None) -> dict:
    """One cold-key row: the core's packet on a new key against the same packet on a cached key (medians);
    new_rx_cold, information: the same on a receiver made for the pass."""
    row = {"backend": backend, **base, "warm_runs": warm["pps"], "cold_runs": cold["pps"],
           "warm_ns": ns(warm["pps"]), "cold_ns": ns(cold["pps"]),
           "evp_cold_ns": ns(evp_cold["pps"]) if evp_cold else None,
           "new_rx_cold_ns": ns(new_rx_cold["pps"]) if new_rx_cold else None}
    row["extra_ns"] = row["cold_ns"] - row["warm_ns"]
    if judged:
        cold_target(row, max_extra_ns)
    return row


def run_c(exe: Path, min_time: float, repeats: int, backends: List[str]) -> dict:
    """Run psp_bench on each backend: one row per (backend, version, op, size), and the cold-SPI rows."""
    cmd = [str(exe), "--min-time", str(min_time), "--repeats", str(repeats),
           "--sizes", ",".join(map(str, C_SIZES)), "--versions", ",".join(map(str, C_VERSIONS)),
           "--cold-sizes", ",".join(map(str, PSP_COLD_SIZES))]
    runs = run_per_backend(cmd, backends)
    judged = judged_backend(runs)
    rows, cold = [], []
    for b, lines in runs.items():
        k = {(r["version"], r["op"], r["size"], r["impl"], r["keys"]): r for r in lines}
        for v in C_VERSIONS:
            for op in ("encrypt", "decrypt"):
                for size in C_SIZES:
                    cr = k[(v, op, size, "core", "warm")]
                    rows.append(proto_row(b, b == judged, {"version": v, "op": op, "size": size,
                                                           "aead_len": cr["aead_len"]},
                                          k[(v, op, size, "raw", "warm")], k.get((v, op, size, "evp", "warm")), cr,
                                          k.get((v, op, size, "raw-serial", "warm"))))
        for size in PSP_COLD_SIZES:
            for v in C_VERSIONS:
                cold.append(cold_row(b, b == judged, {"version": v, "op": "decrypt", "size": size},
                                     k[(v, "decrypt", size, "core", "warm-spi")], k[(v, "decrypt", size, "core", "cold")],
                                     None, PSP_COLD_EXTRA_MAX_NS, k.get((v, "decrypt", size, "core", "cold-new-rx"))))
    return {"judged": judged, "rows": rows, "cold": cold}


def run_flood(exe: Path, n_forged: int, repeats: int) -> dict:
    """flood_bench: forged packets for fresh SPIs / Session IDs against a cached packet, and memory growth."""
    runs: Dict[tuple, List[dict]] = {}
    for _ in range(repeats):
        for row in bench_lines([str(exe), str(n_forged)]):
            runs.setdefault((row["protocol"], row["forged"]), []).append(row)
    rows = []
    for (proto, forged), rs in runs.items():
        pick = min(rs, key=lambda r: r["forged_ns"])
        row = {**pick, "forged_ns_runs": [r["forged_ns"] for r in rs],
               "cached_ns": min(r["cached_ns"] for r in rs),
               "cached_ns_after": min(r["cached_ns_after"] for r in rs),
               "first_cached_after_ns": min(r["first_cached_after_ns"] for r in rs),
               "rss_growth_kib": max(r["rss_growth_kib"] for r in rs)}
        row["kept_ratio"] = row["first_cached_after_ns"] / row["cached_ns"]
        if forged == "valid-session-id":  # every packet verifies: Sub SAs are evicted (and re-derived) by design
            row["target"] = f"<= {FLOOD_VALID_RSS_MAX_KIB} KiB growth (Sub SA cap)"
            row["pass"] = row["rss_growth_kib"] <= FLOOD_VALID_RSS_MAX_KIB
        else:
            row["target"] = f"<= {FLOOD_RSS_MAX_KIB} KiB growth, first cached packet after <= {FLOOD_KEPT_MAX:.0f}x warm"
            row["pass"] = row["rss_growth_kib"] <= FLOOD_RSS_MAX_KIB and row["kept_ratio"] <= FLOOD_KEPT_MAX
        rows.append(row)
    return {"forged_packets": n_forged, "rows": rows}


def run_eesp(exe: Path, min_time: float, repeats: int, mt_duration: float, mt_repeats: int, mt_wait: float,
             backends: List[str]) -> dict:
    """Run eesp_bench: per backend, raw vs EVP vs core rows per (suite, op, size) and the cold Sub SA rows; then the
    threads rows on the judged backend."""
    cmd = [str(exe), "--min-time", str(min_time), "--repeats", str(repeats),
           "--sizes", ",".join(map(str, EESP_SIZES)), "--cold-sizes", ",".join(map(str, EESP_COLD_SIZES)),
           "--suites", ",".join(EESP_SUITES), "--no-mt"]
    runs = run_per_backend(cmd, backends)
    judged = judged_backend(runs)
    rows, cold = [], []
    for b, lines in runs.items():
        k = {(r["suite"], r["keys"], r["op"], r["size"], r["impl"]): r for r in lines if r["kind"] == "aead"}
        for suite in dict.fromkeys(r["suite"] for r in lines if r["kind"] == "aead"):
            for op in ("encrypt", "decrypt"):
                for size in EESP_SIZES:
                    cr = k[(suite, "warm", op, size, "core")]
                    rows.append(proto_row(b, b == judged, {"suite": suite, "keys": "warm", "op": op, "size": size,
                                                           "aead_len": cr["aead_len"], "wire_len": cr["wire_len"],
                                                           "ring": cr["ring"]},
                                          k[(suite, "warm", op, size, "raw")], k.get((suite, "warm", op, size, "evp")),
                                          cr, k.get((suite, "warm", op, size, "raw-serial"))))
                for size in EESP_COLD_SIZES:
                    cold.append(cold_row(b, b == judged, {"suite": suite, "op": op, "size": size},
                                         k[(suite, "warm", op, size, "core")], k[(suite, "cold", op, size, "core")],
                                         k.get((suite, "cold", op, size, "evp")), EESP_COLD_EXTRA_MAX_NS))
    mt_cmd = [str(exe), "--no-aead", "--mt-duration", str(mt_duration), "--mt-repeats", str(mt_repeats),
              "--mt-wait", str(mt_wait), "--mt-threads", ",".join(map(str, EESP_MT_THREADS)),
              "--mt-size", str(EESP_MT_SIZE), "--mt-suite", EESP_MT_SUITE]
    mt_raw = {(r["impl"], r["op"], r["threads"]): r for r in run_per_backend(mt_cmd, [judged])[judged]
              if r["kind"] == "mt"}
    mt = []
    for impl in ("core", "raw"):
        for op in ("encrypt", "decrypt"):
            base = mt_raw.get((impl, op, 1))
            for n in EESP_MT_THREADS:
                r = mt_raw.get((impl, op, n))
                if r is None:
                    continue
                quiet = sum(1 for o in r["others"] if 0 <= o < EESP_QUIET)
                row = {"backend": judged, "impl": impl, "suite": r["suite"], "op": op, "threads": n, "size": r["size"],
                       "duration": r["duration"], "pps": best(r["pps"]), "median": statistics.median(r["pps"]),
                       "runs": r["pps"], "cpu_runs": r["cpu_pps"], "cpu_median": statistics.median(r["cpu_pps"]),
                       "others": r["others"], "others_median": statistics.median(r["others"]), "quiet_runs": quiet}
                if base and n > 1:
                    row["scaling"] = row["pps"] / best(base["pps"])
                    row["scaling_median"] = row["median"] / statistics.median(base["pps"])
                    row["scaling_cpu"] = row["cpu_median"] / statistics.median(base["cpu_pps"])
                    if n == 2 and impl == "core":
                        row["target"] = f">= {EESP_MT_SCALING_MIN}x 1 thread"
                        row["pass"] = row["scaling"] >= EESP_MT_SCALING_MIN
                        base_quiet = sum(1 for o in base["others"] if 0 <= o < EESP_QUIET)
                        if not row["pass"] and (quiet == 0 or base_quiet == 0):
                            # Every run of one side shared the CPUs with other jobs: no verdict.
                            row["pass"] = None
                            row["why"] = "other jobs were running"
                mt.append(row)
    return {"judged": judged, "rows": rows, "cold": cold, "mt": mt}


def run_esp(exe: Path, min_time: float, repeats: int, backends: List[str]) -> dict:
    """Run esp_bench on each backend: raw vs EVP vs core rows per (suite, op, size), tunnel mode, anti-replay on."""
    cmd = [str(exe), "--min-time", str(min_time), "--repeats", str(repeats),
           "--sizes", ",".join(map(str, ESP_SIZES)), "--suites", ",".join(ESP_SUITES)]
    runs = run_per_backend(cmd, backends)
    judged = judged_backend(runs)
    rows = []
    for b, lines in runs.items():
        k = {(r["suite"], r["op"], r["size"], r["impl"]): r for r in lines}
        for suite in dict.fromkeys(r["suite"] for r in lines):
            for op in ("encrypt", "decrypt"):
                for size in ESP_SIZES:
                    cr = k[(suite, op, size, "core")]
                    rows.append(proto_row(b, b == judged, {"suite": suite, "op": op, "size": size,
                                                           "aead_len": cr["aead_len"], "wire_len": cr["wire_len"]},
                                          k[(suite, op, size, "raw")], k.get((suite, op, size, "evp")), cr,
                                          k.get((suite, op, size, "raw-serial"))))
    return {"judged": judged, "rows": rows}


def run_aead(exe: Path, min_time: float, repeats: int, backends: List[str]) -> dict:
    """Run aead_bench on each backend: the core's AEAD layer alone against the raw calls the protocol rows divide by."""
    cmd = [str(exe), "--min-time", str(min_time), "--repeats", str(repeats), "--lens", "44,1480"]
    rows = []
    for b, lines in run_per_backend(cmd, backends).items():
        for r in lines:
            rows.append({"backend": b, "suite": r["suite"], "op": r["op"], "aead_len": r["aead_len"],
                         "raw_ns": ns(r["raw_pps"]), "evp_ns": ns(r.get("evp_pps")), "pe_aead_ns": ns(r["core_pps"]),
                         "ratio": paired_ratio(r["core_pps"], r["raw_pps"]),
                         "raw_runs": r["raw_pps"], "evp_runs": r.get("evp_pps"), "pe_aead_runs": r["core_pps"]})
    return {"rows": rows}


# ----------------------------------------------------------- Python section


def scapy_available() -> Optional[str]:
    try:
        import scapy
        from scapy.contrib.psp import PSP  # noqa: F401
    except ImportError:
        return None
    return scapy.__version__


def scapy_codec(version: int, key: bytes):
    """scapy doing the job of Encryptor.encrypt / Decryptor.decrypt: IP packet bytes in, IP packet bytes out.

    Transport mode as the core does it: the outer IP header is the inner one
    with protocol UDP, then UDP (source port = inner ports XORed, dport 1000,
    checksum 0), the PSP header, and the encrypted L4 segment with its ICV.
    Also returns the PSP layer alone (no IP/UDP), scapy's least possible work.
    """
    from scapy.compat import raw
    from scapy.contrib.psp import PSP
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    iv_counter = [1]

    def encrypt(ip_packet: bytes) -> bytes:
        ip = IP(ip_packet)
        l4 = raw(ip.payload)
        sport, dport = struct.unpack("!HH", l4[:4])
        nh = ip.proto
        ip.remove_payload()
        del ip.len, ip.chksum, ip.proto  # recomputed for the outer packet
        psp = PSP(nexthdr=nh, version=version, spi=SPI, iv=struct.pack("!Q", iv_counter[0]), data=l4)
        iv_counter[0] += 1
        pkt = ip / UDP(sport=sport ^ dport, dport=1000, chksum=0) / psp
        pkt[PSP].encrypt(key)
        return raw(pkt)

    def decrypt(wire: bytes) -> bytes:
        ip = IP(wire)
        psp = ip[PSP]
        psp.decrypt(key)
        l4 = psp.data
        ip.remove_payload()
        ip.proto = psp.nexthdr
        del ip.len, ip.chksum
        return raw(ip / Raw(l4))

    def layer_encrypt(l4: bytes) -> bytes:
        psp = PSP(nexthdr=17, version=version, spi=SPI, iv=struct.pack("!Q", iv_counter[0]), data=l4)
        iv_counter[0] += 1
        psp.encrypt(key)
        return raw(psp)

    def layer_decrypt(psp_bytes: bytes) -> bytes:
        psp = PSP(psp_bytes)
        psp.decrypt(key)
        return psp.data

    return encrypt, decrypt, layer_encrypt, layer_decrypt


def run_python(min_time: float, repeats: int) -> dict:
    import pypsp

    scapy_version = scapy_available()
    rows = []
    checks = []
    for v in PY_VERSIONS:
        key = key_for(v)
        for size in PY_SIZES:
            pkt = make_ipv4_udp(size)
            enc = pypsp.Encryptor(key=key, spi=SPI, version=v)
            dec = pypsp.Decryptor(keys={(SPI, v): key})
            wire = enc.encrypt(pkt)
            batch_in = [pkt] * BATCH
            batch_wire = [wire] * BATCH
            loop = range(64)  # per-packet calls per timed chunk, so the timer is not read per packet

            def py_encrypt(encrypt=enc.encrypt):
                for _ in loop:
                    encrypt(pkt)

            def py_decrypt(decrypt=dec.decrypt):
                for _ in loop:
                    decrypt(wire)

            contenders = {
                "Encryptor.encrypt": (py_encrypt, len(loop)),
                "Encryptor.encrypt_batch": (lambda: enc.encrypt_batch(batch_in), BATCH),
                "Decryptor.decrypt": (py_decrypt, len(loop)),
                "Decryptor.decrypt_batch": (lambda: dec.decrypt_batch(batch_wire), BATCH),
            }
            if scapy_version:
                s_enc, s_dec, s_lenc, s_ldec = scapy_codec(v, key)
                # Same work, checked: scapy's packet with IV 1 must be the core's byte for byte,
                # and scapy's decrypt must give back the original packet.
                same = s_enc(pkt) == wire and s_dec(wire) == pkt
                checks.append({"version": v, "size": size, "scapy_equals_pypsp": same})
                if not same:
                    log(f"bench: WARNING: scapy and pypsp outputs differ (version {v}, {size} octets)")
                l4, psp_part = pkt[20:], wire[28:]
                contenders["scapy encrypt"] = (lambda: s_enc(pkt), 1)
                contenders["scapy decrypt"] = (lambda: s_dec(wire), 1)
                contenders["scapy PSP layer encrypt"] = (lambda: s_lenc(l4), 1)
                contenders["scapy PSP layer decrypt"] = (lambda: s_ldec(psp_part), 1)
            runs = interleaved(contenders, min_time, repeats)
            pps = {name: best(r) for name, r in runs.items()}
            for name, op, label in PY_ROWS:
                scapy_pps = pps.get(f"scapy {op}")
                row = {"version": v, "size": size, "api": name, "label": label, "op": op,
                       "pps": pps.get(name), "runs": runs.get(name, []),
                       "median": statistics.median(runs[name]) if name in runs else None}
                if row["pps"] is not None and scapy_pps:
                    row["vs_scapy"] = row["pps"] / scapy_pps
                if name in ("Encryptor.encrypt", "Decryptor.decrypt"):
                    row["target"] = f">= {PYPSP_VS_SCAPY_MIN:.0f}x scapy"
                    row["pass"] = row.get("vs_scapy", 0) >= PYPSP_VS_SCAPY_MIN if scapy_version else None
                    layer = pps.get(f"scapy PSP layer {op}")
                    row["vs_scapy_layer_only"] = row["pps"] / layer if layer else None
                rows.append(row)
    return {"scapy": scapy_version, "rows": rows, "equivalence": checks}


def run_eesp_python(min_time: float, repeats: int, eesp_c: Optional[dict]) -> dict:
    """pyeesp per-packet calls at 1500 octets, AES-GCM-128, the C bench's SA (informational)."""
    import pyeesp

    settings = dict(spi=EESP_SPI, suite="aes-gcm-16", root_key=EESP_ROOT_KEY, sskdf="hkdf-sha256", key_bits=128,
                    mode="tunnel", format="optimized")  # anti-replay on (the default), window 1024
    size = EESP_PY_SIZE
    pkt = make_ipv4_udp(size)
    sender = pyeesp.SA(**settings)
    sender.encrypt(pkt)  # Sub SA 0's key derived before timing
    # Decrypt: a ring of packets with sequence numbers 1..N, each pass on a fresh SA whose
    # first decrypt (packet 1: key derivation, window set-up) is outside the timer.
    ring_tx = pyeesp.SA(**settings)
    ring = [ring_tx.encrypt(pkt) for _ in range(EESP_PY_RING)]
    probe = pyeesp.SA(**settings)
    if probe.decrypt(ring[0]).packet != pkt:
        raise SystemExit("bench: pyeesp decrypt does not round-trip")
    try:
        probe.decrypt(ring[0])
        raise SystemExit("bench: pyeesp accepted a replayed packet: anti-replay is not on")
    except pyeesp.ReplayError:
        pass
    loop = range(64)
    state: dict = {}

    def py_encrypt(encrypt=sender.encrypt):
        for _ in loop:
            encrypt(pkt)
        return len(loop)

    def prep_decrypt():
        sa = pyeesp.SA(**settings)
        sa.decrypt(ring[0])
        state["decrypt"] = sa.decrypt

    def py_decrypt(rest=ring[1:]):
        decrypt = state["decrypt"]
        for w in rest:
            decrypt(w)
        return len(rest)

    contenders = {"SA.encrypt": (None, py_encrypt), "SA.decrypt": (prep_decrypt, py_decrypt)}

    def timed(prep, run, limit):
        n, t = 0, 0.0
        while t < limit:
            if prep:
                prep()
            t0 = time.perf_counter()
            n += run()
            t += time.perf_counter() - t0
        return n / t

    for prep, run in contenders.values():
        timed(prep, run, min_time / 10)
    runs: Dict[str, List[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (prep, run) in contenders.items():
            runs[name].append(timed(prep, run, min_time))
    core = {(r["op"], r["size"]): r["core_pps"] for r in judged_rows(eesp_c or {})
            if r["suite"] == "AES-GCM-128" and r["keys"] == "warm"}
    rows = []
    for name, op in (("SA.encrypt", "encrypt"), ("SA.decrypt", "decrypt")):
        pps = best(runs[name])
        core_pps = core.get((op, size))
        rows.append({"api": name, "op": op, "suite": "AES-GCM-128", "size": size, "pps": pps,
                     "median": statistics.median(runs[name]), "runs": runs[name], "core_pps": core_pps,
                     "vs_core": pps / core_pps if core_pps else None})
    return {"rows": rows, "ring": EESP_PY_RING}


# ------------------------------------------------------------------ output


def fmt_pps(pps: Optional[float]) -> str:
    if pps is None:
        return "n/a"
    return f"{pps / 1e6:.3f} M" if pps >= 1e5 else f"{pps:,.0f}"


def fmt_ratio(r: Optional[float], pct: bool) -> str:
    if r is None:
        return "n/a"
    return f"{r:.1%}" if pct else f"{r:,.0f}x" if r >= 10 else f"{r:.2f}x"


def fmt_target(row: dict) -> str:
    if "target" not in row:
        return ""
    if row.get("pass") is None:
        return f"{row['target']}: not measured" + (f" ({row['why']})" if row.get("why") else "")
    return f"{row['target']}: **{verdict(row['pass'])}**"


def machine_info(openssl: str) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "openssl": openssl,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def fmt_ns(x: Optional[float]) -> str:
    return "" if x is None else f"{x:,.0f}"


def backend_lines(result: dict) -> List[str]:
    """Which backend each set of C rows ran on (pe_version()), and what the raw baseline is."""
    info = result.get("backends") or {}
    out = [f"Python rows (pecore._native): {result['python_backend']}", ""] if result.get("python_backend") else []
    if not info:
        return out
    out += ["Crypto backends (pe_version(), one run of each C bench per backend, PE_CRYPTO_BACKEND set):", ""]
    out += [f"- `{b}`: {i['version']}" for b, i in info.items()]
    base = {i["baseline_name"] for i in info.values()}
    out += ["", f"Raw baseline (\"raw\"): {'; '.join(sorted(base))}. \"EVP\": raw OpenSSL EVP calls as its manual "
            "shows, information.", ""]
    return out


def side_by_side(rows: List[dict], fields: tuple) -> List[tuple]:
    """Rows grouped by their key fields: [(key, {backend: row})], in first-seen order."""
    groups: Dict[tuple, Dict[str, dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[f] for _, f in fields), {})[r["backend"]] = r
    return list(groups.items())


def proto_table(title: str, sec: dict, fields: tuple, aad: int) -> List[str]:
    """A protocol's warm rows, the backends side by side (ns per packet, medians), the judged backend's target."""
    bs = list(dict.fromkeys(r["backend"] for r in sec["rows"]))
    judged = sec["judged"]
    out = [f"## {title}", "",
           f"raw and EVP: from the `{judged}` run. core/raw: median of the runs' ratios, each backend against the raw "
           "baseline of its own run; the target holds the `" + judged + "` rows. raw alone (information): the raw "
           "baseline with each packet's instructions finished before the next one starts (`raw-serial`), what one "
           "packet's AEAD costs without a second packet's beside it.", "",
           "| " + " | ".join(h for h, _ in fields) + " | AEAD octets | raw ns | raw alone ns | EVP ns | "
           + " | ".join(f"core ns, {b}" for b in bs) + " | " + " | ".join(f"core/raw, {b}" for b in bs)
           + f" | core Gbit/s, {judged} | target |",
           "|" + "---|" * len(fields) + "---:|---:|---:|---:|" + "---:|" * (2 * len(bs)) + "---:|---|"]
    for key, g in side_by_side(sec["rows"], fields):
        j = g.get(judged) or next(iter(g.values()))
        out.append("| " + " | ".join(map(str, key)) + f" | {j['aead_len']} + {aad} | {fmt_ns(j['raw_ns'])} | "
                   f"{fmt_ns(j.get('serial_ns'))} | {fmt_ns(j['evp_ns'])} | " + " | ".join(fmt_ns(g[b]["core_ns"]) if b in g else "" for b in bs)
                   + " | " + " | ".join(fmt_ratio(g[b]["ratio"], True) if b in g else "" for b in bs)
                   + f" | {gbps(j['core_median'], j['size']):.2f} | {fmt_target(j)} |")
    out.append("")
    return out


def cold_table(title: str, note: str, sec: dict, fields: tuple) -> List[str]:
    """Cold-key rows: per backend the warm and cold packet (median ns) and the difference, the target on the judged one."""
    if not sec.get("cold"):
        return []
    evp = any(r.get("evp_cold_ns") for r in sec["cold"])
    new_rx = any(r.get("new_rx_cold_ns") for r in sec["cold"])
    out = [f"## {title}", "", note, "",
           "| " + " | ".join(h for h, _ in fields) + " | inner size | backend | warm ns | cold ns | cold - warm ns | "
           + ("EVP cold ns | " if evp else "") + ("new receiver cold ns | " if new_rx else "") + "target |",
           "|" + "---|" * len(fields) + "---:|---|---:|---:|---:|" + ("---:|" if evp else "")
           + ("---:|" if new_rx else "") + "---|"]
    for r in sec["cold"]:
        out.append("| " + " | ".join(str(r[f]) for _, f in fields) + f" | {r['size']} | {r['backend']} | "
                   f"{fmt_ns(r['warm_ns'])} | {fmt_ns(r['cold_ns'])} | {fmt_ns(r['extra_ns'])} | "
                   + (f"{fmt_ns(r['evp_cold_ns'])} | " if evp else "")
                   + (f"{fmt_ns(r['new_rx_cold_ns'])} | " if new_rx else "") + f"{fmt_target(r)} |")
    out.append("")
    return out


def markdown(result: dict) -> str:
    m, cfg = result["machine"], result["config"]
    out = [
        "# PSP and EESP performance",
        "",
        f"`{cfg['command']}` on {m['cpu']}, {m['cores']} cores "
        f"(load average at start {', '.join(f'{x:.2f}' for x in m['load_average_at_start'] or [])}), "
        f"{m['openssl']}, Python {m['python']}"
        + (f", scapy {result['python']['scapy']}" if result.get("python", {}).get("scapy") else "")
        + f". One thread (except the EESP threads table); {cfg['repeats']} runs of >= {cfg['min_time']} s each "
        f"(C rows {cfg.get('c_min_time', cfg['min_time'])} s). "
        "C rows: ns per packet are medians, core/raw the median of the runs' ratios (the contenders of a row take "
        "turns); the other rows: best run. Gbit/s = packets/s x inner IP packet size x 8.",
        "",
    ]
    out += backend_lines(result)
    if "c" in result:
        out += proto_table("PSP: C core vs the raw AEAD (IPv4/UDP, transport mode)", result["c"],
                           (("version", "version"), ("op", "op"), ("inner size", "size")), 16)
        out += cold_table("PSP: a packet on a cold SPI (key derived from the master key) vs a cached one",
                          "A receiver holding only the master key opens 512 packets, each on its own SPI "
                          "(AES-CMAC key derivation + key set-up each), against the same packets once their keys "
                          "are cached (pe_psp_open, the UDP payload). Cold: a receiver that has been running, with "
                          "room for 256 keys, so every packet evicts the least recently used key. New receiver "
                          "(information): a receiver made for each pass, whose first keys also pay for its memory.",
                          result["c"], (("version", "version"),))
    if "python" in result:
        py = result["python"]
        out += [
            "## Python: pypsp vs scapy's PSP layer (IP packet bytes in, IP packet bytes out)",
            "",
            "| version | inner size | API | pkt/s | Gbit/s | vs scapy | vs scapy PSP layer only | target |",
            "|---|---:|---|---:|---:|---:|---:|---|",
        ]
        for r in py["rows"]:
            pps = r["pps"]
            rate_cells = f"{fmt_pps(pps)} | {gbps(pps, r['size']):.3f}" if pps else "n/a (scapy not installed) | n/a"
            out.append(
                f"| {r['version']} | {r['size']} | {r['label']} | {rate_cells} | {fmt_ratio(r.get('vs_scapy'), False)} | "
                f"{fmt_ratio(r['vs_scapy_layer_only'], False) if 'vs_scapy_layer_only' in r else ''} | {fmt_target(r)} |"
            )
        bad = [c for c in py["equivalence"] if not c["scapy_equals_pypsp"]]
        if bad:
            out.append("")
            out.append("**Warning:** scapy's output differs from pypsp's for " + ", ".join(f"v{c['version']}/{c['size']}" for c in bad))
        out.append("")
    if "capture" in result:
        cap = result["capture"]
        out += [
            "## Capture path (pcap, Ethernet, version 0, file to file)",
            "",
            f"{cap['rows'][0]['packets']:,} packets of {CAPTURE_SIZE} octets "
            f"({cap['encrypted_file_mb']:.0f} MB encrypted); compared with the core's in-memory rate above.",
            "",
            "| API | pkt/s | Gbit/s | median pkt/s | core in-memory pkt/s | ratio (median's) | target |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in cap["rows"]:
            med_ratio = r["median"] / r["core_pps"] if r["core_pps"] else None
            out.append(
                f"| `{r['api']}` | {fmt_pps(r['pps'])} | {gbps(r['pps'], r['size']):.2f} | {fmt_pps(r['median'])} | "
                f"{fmt_pps(r['core_pps'])} | {fmt_ratio(r['ratio'], True)} ({fmt_ratio(med_ratio, True)}) | {fmt_target(r)} |"
            )
        fl = cap.get("io_floor")
        if fl:
            out += [
                "",
                f"I/O floor: copying the same file to a new one with read() and write() of 1 MiB, nothing else, "
                f"takes {fl['copy_s'] * 1e3:.0f} ms ({fmt_pps(fl['copy_pps'])} pkt/s; best of {len(fl['copy_runs_s'])}, "
                "interleaved with the decrypt runs). One thread that also decrypts at the core's in-memory rate can "
                f"therefore reach at most **{fmt_ratio(fl['ceiling'], True)}** of that rate here.",
            ]
        out.append("")
        jobs = cap.get("jobs")
        if jobs:
            pr = jobs["cpu_pressure"]
            out += [
                f"### Capture path on 1 and 2 jobs ({jobs['cpus']} CPUs here; runs interleaved, best of "
                f"{len(jobs['rows'][0]['one'])})",
                "",
                "CPU pressure meanwhile (share of time some task here waited for a CPU, /proc/pressure/cpu avg10): "
                + (f"{pr[0]:.0%} to {pr[1]:.0%}." if pr else "not available."),
                "",
                "| API | 1 job pkt/s (spread) | 2 jobs pkt/s (spread) | 2 jobs vs 1 (medians') | CPU time, 2 jobs vs 1 | target |",
                "|---|---:|---:|---:|---:|---|",
            ]
            for r in jobs["rows"]:
                out.append(f"| `{r['api']}` | {fmt_pps(best(r['one']))} ({r['spread_one']:.0%}) | "
                           f"{fmt_pps(best(r['two']))} ({r['spread_two']:.0%}) | {r['speedup']:.2f}x "
                           f"({r['speedup_median']:.2f}x) | {r['cpu_cost']:.2f}x | {fmt_target(r)} |")
            out.append("")
    if "reference" in result:
        ref = result["reference"]
        out += [
            f"## CLI vs google/psp's psp_decrypt ({ref['packets']:,} x {ref['frame']} B frames, wall time, side by side)",
            "",
            f"`{ref['command']}` against `{ref['psp_decrypt']} -c CFG -i IN -o OUT`, alternately, {len(ref['ours_s'])} runs each.",
            "",
            "| tool | best s | median s | worst s |",
            "|---|---:|---:|---:|",
            f"| pypsp decrypt | {min(ref['ours_s']):.3f} | {statistics.median(ref['ours_s']):.3f} | {max(ref['ours_s']):.3f} |",
            f"| psp_decrypt | {min(ref['ref_s']):.3f} | {statistics.median(ref['ref_s']):.3f} | {max(ref['ref_s']):.3f} |",
            "",
            f"pypsp decrypt is {ref['speedup']:.2f}x faster (medians: {ref['speedup_median']:.2f}x); "
            f"target {ref['target']}: **{verdict(ref['pass'])}**.  For information, CPU time (user + system, every "
            f"thread; less sensitive to other jobs than wall time): best {min(ref['ours_cpu_s']):.3f} s against "
            f"{min(ref['ref_cpu_s']):.3f} s, {ref['cpu_ratio']:.2f}x.",
            "",
        ]
    if "capture_memory" in result:
        m = result["capture_memory"]
        out += [
            "## Capture memory (pypsp decrypt - - between pipes)",
            "",
            f"`{m['command']}` over {m['input_bytes'] / 1e6:,.0f} MB of encrypted capture "
            f"({m['megabytes']:,} MB clear, full-size frames): output identical to the clear capture.",
            "",
            "| input MB | peak RSS of the decrypting process | seconds | MB/s | target |",
            "|---:|---:|---:|---:|---|",
            f"| {m['input_bytes'] / 1e6:,.0f} | {m['peak_rss_bytes'] / (1 << 20):.1f} MiB | {m['seconds']:.1f} | "
            f"{m['input_bytes'] / 1e6 / m['seconds']:,.0f} | {m['target']}: {verdict(m['pass'])} |",
            "",
        ]
    if "eesp" in result:
        e = result["eesp"]
        out += proto_table("EESP: C core vs the raw AEAD (tunnel mode, optimized format, inner IPv4/UDP, warm Sub SA "
                           "keys; anti-replay on, window 1024; AAD: the 24-octet EESP header)", e,
                           (("suite", "suite"), ("op", "op"), ("inner size", "size")), 24)
        out += cold_table("EESP: a packet on a cold Sub SA vs a warm one",
                          "Every packet on a new Sub SA: HKDF-SHA-256 Expand + key set-up each, 512 per pass on a fresh "
                          "tx/rx. EVP cold: a careful EVP caller's HKDF + new context + packet (information).",
                          e, (("suite", "suite"), ("op", "op")))
        if e["mt"]:
            m0 = e["mt"][0]
            out += [
                f"## EESP: threads ({m0['suite']}, {m0['size']} octets, thread i on Sub SA i, total over threads)",
                "",
                f"Each run {m0['duration']} s; best and median of {cfg['mt_repeats']} runs. Scaling: n threads / 1 thread. "
                "CPU-time scaling: the same from packets per second of each thread's own CPU time (medians). "
                f"Quiet runs: other jobs used under {EESP_QUIET:.0%} of the CPUs meanwhile. "
                "raw EVP: the same AEAD work, for comparison.",
                "",
                "| impl | op | threads | best pkt/s | best Gbit/s | median pkt/s | scaling (best) | scaling (median) | CPU-time scaling | quiet runs | target |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            ]
            for r in e["mt"]:
                sc = {k: f"{r[k]:.2f}x" if k in r else "" for k in ("scaling", "scaling_median", "scaling_cpu")}
                out.append(
                    f"| {'core' if r['impl'] == 'core' else 'raw EVP'} | {r['op']} | {r['threads']} | {fmt_pps(r['pps'])} | "
                    f"{gbps(r['pps'], r['size']):.2f} | {fmt_pps(r['median'])} | {sc['scaling']} | {sc['scaling_median']} | "
                    f"{sc['scaling_cpu']} | {r['quiet_runs']}/{len(r['runs'])} | {fmt_target(r)} |"
                )
            out.append("")
    if "eesp_python" in result:
        ep = result["eesp_python"]
        out += [
            "## EESP: Python (pyeesp, AES-GCM-128, 1500 octets, per-packet calls; information)",
            "",
            "| API | pkt/s | Gbit/s | µs/packet | median pkt/s | vs core C (warm) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in ep["rows"]:
            out.append(
                f"| `{r['api']}` | {fmt_pps(r['pps'])} | {gbps(r['pps'], r['size']):.2f} | {1e6 / r['pps']:.2f} | "
                f"{fmt_pps(r['median'])} | {fmt_ratio(r['vs_core'], True)} |"
            )
        out.append("")
    if "flood" in result:
        fl = result["flood"]
        out += [
            f"## Forged floods ({fl['forged_packets']:,} packets, each for a key the receiver has not seen, ICV wrong; "
            "`valid-session-id`: every packet genuine)",
            "",
            "| protocol | forged key by | cached packet ns | forged packet ns | cached packet ns after | "
            "first cached packet after, ns | receiver RSS growth | target |",
            "|---|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in fl["rows"]:
            out.append(
                f"| {r['protocol']} | {r['forged']} | {r['cached_ns']:.0f} | {r['forged_ns']:.0f} | "
                f"{r['cached_ns_after']:.0f} | {r['first_cached_after_ns']:.0f} | {r['rss_growth_kib']:,} KiB | "
                f"{fmt_target(r)} |"
            )
        out.append("")
    if result.get("aead"):
        rows = result["aead"]["rows"]
        bs = list(dict.fromkeys(r["backend"] for r in rows))
        out += ["## The AEAD layer alone: pe_aead_seal/open vs the raw calls (information)", "",
                "16 octets of AAD, no protocol; ns per packet, medians. pe_aead on each backend; the raw baseline and "
                "EVP from the same run as the last backend's column.", "",
                "| suite | op | payload octets | raw ns | EVP ns | "
                + " | ".join(f"pe_aead ns, {b}" for b in bs) + " | " + " | ".join(f"pe_aead/raw (speed), {b}" for b in bs)
                + " |", "|---|---|---:|---:|---:|" + "---:|" * (2 * len(bs))]
        groups: Dict[tuple, Dict[str, dict]] = {}
        for r in rows:
            groups.setdefault((r["suite"], r["op"], r["aead_len"]), {})[r["backend"]] = r
        for (suite, op, alen), g in groups.items():
            last = g[bs[-1]] if bs[-1] in g else next(iter(g.values()))
            out.append(f"| {suite} | {op} | {alen} | {fmt_ns(last['raw_ns'])} | {fmt_ns(last['evp_ns'])} | "
                       + " | ".join(fmt_ns(g[b]["pe_aead_ns"]) if b in g else "" for b in bs) + " | "
                       + " | ".join(fmt_ratio(g[b]["ratio"], True) if b in g else "" for b in bs) + " |")
        out.append("")
    if result.get("esp"):
        out += proto_table("ESP (RFC 4303, tunnel mode, anti-replay on): C core vs the raw AEAD", result["esp"],
                           (("suite", "suite"), ("op", "op"), ("inner size", "size")), 8)
    targets = result["targets"]
    out += ["## Targets", "", "| target | measured | result |", "|---|---:|---|"]
    for t in targets:
        out.append(f"| {t['name']} | {t['measured']} | {t['result']} |")
    out.append("")
    return "\n".join(out)


def target_result(r: dict) -> str:
    return verdict(r["pass"]) if r["pass"] is not None else f"not measured ({r['why']})"


def collect_targets(result: dict) -> List[dict]:
    targets = []

    def add(name: str, measured: str, r: dict) -> None:
        targets.append({"name": name, "measured": measured, "result": target_result(r), "pass": r["pass"]})

    def proto(label: str, sec: dict, what) -> None:
        base = "raw ipsec-mb" if BACKEND_INFO.get(sec["judged"], {}).get("baseline") == "imb" else "raw EVP"
        for r in sec["rows"]:
            if "target" in r:
                add(f"{label} core ({r['backend']}) {r['op']} {what(r)} {r['size']} B {r['target']} of {base} (median)",
                    fmt_ratio(r["ratio"], True), r)
        for r in sec.get("cold", []):
            if "target" in r:
                add(f"{label} cold key ({r['backend']}) {r['op']} {what(r)} {r['size']} B {r['target']} (median)",
                    f"{r['extra_ns']:,.0f} ns", r)

    if "c" in result:
        proto("PSP", result["c"], lambda r: f"v{r['version']}")
    for r in result.get("python", {}).get("rows", []):
        if "target" in r:
            ok = r["pass"]
            targets.append({"name": f"`{r['api']}` v{r['version']} {r['size']} B {r['target']}",
                            "measured": fmt_ratio(r.get("vs_scapy"), False),
                            "result": "not measured (scapy missing)" if ok is None else verdict(ok), "pass": ok})
    for r in result.get("capture", {}).get("rows", []):
        if "target" in r:
            targets.append({"name": f"`{r['api']}` {r['size']} B {r['target']} in-memory decap",
                            "measured": fmt_ratio(r["ratio"], True), "result": verdict(r["pass"]), "pass": r["pass"]})
    for r in result.get("capture", {}).get("jobs", {}).get("rows", []):
        if "target" in r:
            targets.append({"name": f"`{r['api']}` 2 jobs vs 1 job {r['target']}",
                            "measured": f"{r['speedup']:.2f}x (median {r['speedup_median']:.2f}x)",
                            "result": verdict(r["pass"]), "pass": r["pass"]})
    if "reference" in result:
        r = result["reference"]
        targets.append({"name": f"`pypsp decrypt` vs psp_decrypt (google/psp), wall {r['target']}",
                        "measured": f"{r['speedup']:.2f}x (median {r['speedup_median']:.2f}x)",
                        "result": verdict(r["pass"]), "pass": r["pass"]})
    m = result.get("capture_memory")
    if m:
        targets.append({"name": f"`decrypt - -` on {m['megabytes']:,} MB: {m['target']}",
                        "measured": f"{m['peak_rss_bytes'] / (1 << 20):.1f} MiB", "result": verdict(m["pass"]),
                        "pass": m["pass"]})
    if "eesp" in result:
        proto("EESP", result["eesp"], lambda r: r["suite"])
    for r in result.get("eesp", {}).get("mt", []):
        if "target" in r:
            targets.append({"name": f"EESP {r['op']} {r['suite']} {r['size']} B, {r['threads']} threads {r['target']}",
                            "measured": f"{r['scaling']:.2f}x (median {r['scaling_median']:.2f}x, CPU time {r['scaling_cpu']:.2f}x)",
                            "result": verdict(r["pass"]) if r["pass"] is not None else f"not measured ({r['why']})",
                            "pass": r["pass"]})
    for r in result.get("flood", {}).get("rows", []):
        targets.append({"name": f"{r['protocol']} forged flood: {r['target']}",
                        "measured": f"{r['rss_growth_kib']:,} KiB, {r['kept_ratio']:.2f}x",
                        "result": verdict(r["pass"]), "pass": r["pass"]})
    if "esp" in result:
        proto("ESP", result["esp"], lambda r: r["suite"])
    return targets


def warn_if_extension_stale() -> None:
    """pypsp runs the compiled pecore._native: say so when core sources are newer than it."""
    try:
        import pecore._native as native
    except ImportError as e:
        raise SystemExit(f"bench: cannot import pecore._native ({e}); run `pip install -e .` in the venv")
    so = Path(native.__file__).stat().st_mtime
    sources = [*(ROOT / "core" / "src").glob("*.[ch]"), *(ROOT / "core" / "include" / "pe").glob("*.h")]
    newer = [p.name for p in sources if p.stat().st_mtime > so]
    if newer:
        log(f"bench: WARNING: pecore._native is older than {', '.join(sorted(set(newer)))}; "
            "the Python rows measure the old build (rebuild with `pip install -e .`)")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short runs (CI smoke test): every row, rough figures")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", metavar="PATH", help="also write every figure and run as JSON")
    ap.add_argument("--min-time", type=float,
                    help="seconds per measurement (default 0.5, the C rows 0.2: they run once per backend and are "
                         "judged on medians; --quick 0.01)")
    ap.add_argument("--repeats", type=int, help="runs per measurement, best taken (default 5; --quick 1)")
    ap.add_argument("--capture-packets", type=int, help="packets in the generated capture (default 100000; --quick 10000)")
    ap.add_argument("--mt-duration", type=float, help="seconds per EESP threads run (default 0.5; --quick 0.01)")
    ap.add_argument("--mt-repeats", type=int, help="EESP threads runs per figure, best and median (default 9; --quick 1)")
    ap.add_argument("--mt-wait", type=float,
                    help="before each EESP threads repeat, wait up to S seconds for other jobs to go quiet (default 5; --quick 0)")
    ap.add_argument("--only", action="append",
                    choices=("c", "python", "capture", "capture-memory", "eesp", "eesp-python", "flood", "esp",
                             "reference"),
                    help="run only these sections (repeatable; capture needs c for its comparison; capture-memory "
                         "runs in full runs and when named, not with --quick; reference needs "
                         "PSP_DECRYPT=/path/to/psp_decrypt, google/psp's tool, and runs by default when that is set)")
    ap.add_argument("--tmpdir", help="where the capture files go (default: the system temp dir)")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="the core's crypto backends the C rows run on, one run each, side by side "
                         f"(PE_CRYPTO_BACKEND; default {','.join(BACKENDS)}; one the build or CPU lacks is left out)")
    args = ap.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    if not backends or any(b not in BACKENDS for b in backends):
        ap.error(f"--backends: a comma-separated list of {', '.join(BACKENDS)}")

    # --quick is CI's smoke test: every section and row runs once, briefly (its wall time is measurement count x
    # min_time x repeats, whatever else the machine does: docs/performance.md has the figure).
    min_time = args.min_time or (0.01 if args.quick else 0.5)
    c_min_time = args.min_time or (0.01 if args.quick else 0.2)
    repeats = args.repeats or (1 if args.quick else 5)
    n_capture = args.capture_packets or (10_000 if args.quick else 100_000)
    mt_duration = args.mt_duration or (0.01 if args.quick else 0.5)
    mt_repeats = args.mt_repeats or (1 if args.quick else 9)
    flood = (16384, 1) if args.quick else (65536, 3)  # forged packets (past the 1024 Sub SA cap), runs
    mt_wait = args.mt_wait if args.mt_wait is not None else (0.0 if args.quick else 5.0)
    psp_decrypt = os.environ.get("PSP_DECRYPT")
    sections = set(args.only or ("c", "python", "capture", "eesp", "eesp-python", "flood", "esp")
                   + (() if args.quick else ("capture-memory",)) + (("reference",) if psp_decrypt else ()))
    if "reference" in sections and not psp_decrypt:
        ap.error("--only reference needs PSP_DECRYPT=/path/to/psp_decrypt (google/psp, built outside this repository)")
    if "capture" in sections:
        sections.add("c")
    started = time.perf_counter()

    if sections & {"c", "eesp", "flood", "esp"}:
        log("bench: building the C bench (build/bench) ...")
        exe = build_c(os.cpu_count() or 2)
    try:  # the CLI names the library it links, the system one the bench links too
        openssl = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        openssl = ""
    result: dict = {
        "machine": machine_info(openssl or "OpenSSL (version unknown)"),
        "config": {"command": "bench/run " + " ".join(sys.argv[1:] if argv is None else argv),
                   "min_time": min_time, "c_min_time": c_min_time, "repeats": repeats, "mt_duration": mt_duration, "mt_repeats": mt_repeats,
                   "mt_wait": mt_wait},
    }
    if sections & {"python", "capture", "capture-memory", "eesp-python"}:
        warn_if_extension_stale()
        import pecore._native as native  # the Python rows run the extension's core, on its default backend

        result["python_backend"] = native.ffi.string(native.lib.pe_version()).decode()
    timings = result["section_seconds"] = {}

    def section(name: str, what: str, fn: Callable[[], object]) -> None:
        log(f"bench: {what} ...")
        t = time.perf_counter()
        result[name] = fn()
        timings[name] = round(time.perf_counter() - t, 1)

    if "c" in sections:
        section("c", "PSP: C core vs the raw AEAD", lambda: run_c(exe, c_min_time, repeats, backends))
        section("aead", "the AEAD layer alone vs the raw AEAD",
                lambda: run_aead(exe.parent / "aead_bench", c_min_time, repeats, backends))
    if "python" in sections:
        section("python", "pypsp vs scapy", lambda: run_python(min_time, repeats))
    if "capture" in sections:
        section("capture", f"capture path ({n_capture:,} packets)",
                lambda: run_capture(n_capture, repeats, judged_rows(result["c"]), args.tmpdir))
    if "reference" in sections:
        section("reference", f"pypsp decrypt vs {psp_decrypt} ({REF_PACKETS:,} packets)",
                lambda: run_reference(psp_decrypt, repeats, args.tmpdir))
    if "capture-memory" in sections:
        section("capture_memory", f"capture memory ({args.memory_mb:,} MB through pipes)",
                lambda: run_capture_memory(args.memory_mb, args.tmpdir))
    if "eesp" in sections:
        section("eesp", "EESP core vs the raw AEAD, and threads",
                lambda: run_eesp(exe.parent / "eesp_bench", c_min_time, repeats, mt_duration, mt_repeats, mt_wait,
                                 backends))
    if "esp" in sections:
        section("esp", "ESP core vs the raw AEAD", lambda: run_esp(exe.parent / "esp_bench", c_min_time, repeats, backends))
    if "flood" in sections:
        section("flood", "forged floods", lambda: run_flood(exe.parent / "flood_bench", *flood))
    if "eesp-python" in sections:
        section("eesp_python", "pyeesp", lambda: run_eesp_python(min_time, repeats, result.get("eesp")))
    result["backends"] = dict(BACKEND_INFO)
    result["targets"] = collect_targets(result)
    result["seconds"] = time.perf_counter() - started
    if args.strict and repeats < JUDGE_MIN_RUNS:
        log(f"bench: --strict with {repeats} repeats: the C rows' targets need {JUDGE_MIN_RUNS} runs and are not judged")

    sys.stdout.write(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    log(f"bench: done in {result['seconds']:.0f} s ("
        + ", ".join(f"{k} {v:.0f} s" for k, v in result["section_seconds"].items()) + ")")
    missed = [t for t in result["targets"] if t["pass"] is False]
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
