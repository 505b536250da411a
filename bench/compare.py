"""ESP, EESP and PSP side by side: runs bench/compare_bench (C) once and renders docs/comparison.md.

    bench/compare                       full run (several minutes), writes docs/comparison.md,
                                        docs/comparison/compare.json and the plots beside it
    bench/compare --quick --out-dir D   seconds: every table and plot, rough figures (CI smoke)
    bench/compare --render-only JSON    re-render the doc from a run's JSON without measuring

Every figure in the document comes from the one JSON file the run wrote; the
plots are drawn from the same numbers as the table printed under each.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = ROOT / "build" / "bench"
SCHEMA = "compare/1"

SIZES = (64, 128, 256, 512, 1024, 1500, 4096, 9000)
# "Simple IMIX": 7 : 4 : 1 packets of 40, 576 and 1500 octets (IP packet sizes), the mix traffic generators
# (Spirent, IXIA) and the literature call simple IMIX; see https://en.wikipedia.org/wiki/Internet_Mix.
IMIX = ((40, 7), (576, 4), (1500, 1))
MEASURED_SIZES = tuple(sorted(set(SIZES) | {s for s, _ in IMIX}))
# Ethernet octets around an IP packet on the wire: preamble + SFD 8, MAC header 14, FCS 4, inter-frame gap 12.
ETH_FRAMING = 38
LINE_RATES_GBPS = (10, 100, 400)
INTEL_CORES = 12  # the Intel study issue 15 cites: 100 Gbit/s ESP AES-128-CBC + HMAC-SHA1, 12 Xeon 8160 cores
MODEL_CORES = (8, 16, 64)
TABLES = ("Machine", "CPU cost per packet", "Octets added per packet", "Goodput at line rate",
          "Cores for 100 Gbit/s", "Multicore scaling", "MODEL")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ measuring


def build() -> Path:
    # Configured every time: a build folder from before a bench was added knows no target for it.
    steps = [["cmake", "-S", str(ROOT / "bench"), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release"]]
    steps.append(["cmake", "--build", str(BUILD_DIR), "-j", str(os.cpu_count() or 2), "--target", "compare_bench"])
    for cmd in steps:
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout + p.stderr)
            raise SystemExit(f"compare: build failed: {' '.join(cmd)}")
    return BUILD_DIR / "compare_bench"


def _first_line(cmd: List[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine() -> dict:
    cpu, mhz, flags = platform.processor() or platform.machine(), None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key = key.strip()
            if key == "model name" and cpu == (platform.processor() or platform.machine()):
                cpu = val.strip()
            elif key == "cpu MHz" and mhz is None:
                mhz = float(val)
            elif key == "flags" and not flags:
                flags = set(val.split())
    except OSError:
        pass
    cc = ""
    cache = BUILD_DIR / "CMakeCache.txt"
    if cache.exists():
        m = re.search(r"^CMAKE_C_COMPILER:\w+=(.*)$", cache.read_text(), re.M)
        if m:
            cc = _first_line([m.group(1), "--version"])
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "hypervisor": "hypervisor" in flags,
        "cpuinfo_mhz": mhz,
        "constant_tsc": {"constant_tsc", "nonstop_tsc"} <= flags,
        "openssl": _first_line(["openssl", "version"]),
        "compiler": cc,
        "kernel": platform.release(),
        "platform": platform.platform(),
    }


def perf_clock(exe: Path) -> dict:
    """The core clock while AES-GCM runs, from `perf stat` cycles / task-clock, when the CPU exposes cycles."""
    if not shutil.which("perf"):
        return {"available": False, "why": "perf is not installed"}
    p = subprocess.run(["perf", "stat", "-x", ",", "-e", "cycles,task-clock", str(exe), "--min-time", "0.3",
                        "--repeats", "1", "--sizes", "1500", "--threads", "1", "--mt-duration", "0.01",
                        "--mt-repeats", "1"], capture_output=True, text=True)
    vals = {}
    for line in p.stderr.splitlines():
        parts = line.split(",")
        if len(parts) > 2:
            vals[parts[2]] = parts[0]
    cyc, clk = vals.get("cycles", ""), vals.get("task-clock", "")
    try:
        ghz = float(cyc) / (float(clk) * 1e6)  # task-clock is in ms
        return {"available": True, "ghz": ghz, "how": "perf stat -e cycles,task-clock over a 1500-octet run"}
    except ValueError:
        return {"available": False, "why": f"perf stat -e cycles: {cyc or 'no output'} (no PMU exposed, e.g. a VM)"}


def run(exe: Path, quick: bool, min_time: Optional[float], repeats: Optional[int], threads: Optional[int]) -> dict:
    cmd = [str(exe), "--sizes", ",".join(map(str, MEASURED_SIZES))]
    if quick:
        cmd.append("--quick")
    if min_time:
        cmd += ["--min-time", str(min_time)]
    if repeats:
        cmd += ["--repeats", str(repeats)]
    if threads:
        cmd += ["--threads", str(threads)]
    load0 = os.getloadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    log(f"compare: {' '.join(cmd)}")
    samples: List[float] = []
    done = threading.Event()

    def sample_load() -> None:  # the 1-minute load average every 10 s while the bench runs
        while not done.wait(10):
            samples.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    p = subprocess.run(cmd, capture_output=True, text=True)
    done.set()
    sampler.join()
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit("compare: compare_bench failed")
    data = json.loads(p.stdout)
    ended = datetime.datetime.now(datetime.timezone.utc)
    return {
        "schema": SCHEMA,
        "command": " ".join(["bench/compare"] + sys.argv[1:]),
        "bench_command": " ".join([Path(cmd[0]).relative_to(ROOT).as_posix()] + cmd[1:]),
        "started": started.isoformat(timespec="seconds"),
        "seconds": round((ended - started).total_seconds(), 1),
        "load_average_before": load0,
        "load_average_after": os.getloadavg(),
        "load_average_during": samples,
        "quick": quick,
        "machine": machine(),
        "clock": perf_clock(exe) if not quick else {"available": False, "why": "not probed in --quick"},
        "bench": data,
    }


# ------------------------------------------------------------------ analysis


def best_ns(row: dict) -> float:
    return min(row["ns"])


def noise(row: dict) -> float:
    """Spread of the repeats: (median - best) / best."""
    b = min(row["ns"])
    return (statistics.median(row["ns"]) - b) / b


Key = Tuple[str, str, str, str]  # protocol, variant, suite, keys


def index(data: dict) -> Dict[Key, Dict[str, Dict[int, dict]]]:
    out: Dict[Key, Dict[str, Dict[int, dict]]] = {}
    for r in data["bench"]["single"]:
        out.setdefault((r["protocol"], r["variant"], r["suite"], r["keys"]), {}).setdefault(r["op"], {})[r["size"]] = r
    return out


def imix_avg(per_size: Dict[int, float]) -> float:
    n = sum(w for _, w in IMIX)
    return sum(per_size[s] * w for s, w in IMIX) / n


def imix_size() -> float:
    return imix_avg({s: float(s) for s, _ in IMIX})


def label(k: Key) -> str:
    proto, variant, suite, keys = k
    s = f"{proto} {variant}"
    if keys in ("warm", "cold"):
        s += f", keys {keys}"
    if proto == "PSP" and "GMAC" in suite:
        s += f" ({suite})"
    return s


def suite_family(suite: str) -> str:
    return "128" if "128" in suite else "256"


def line_pps(wire: float, gbps: float) -> float:
    return gbps * 1e9 / ((wire + ETH_FRAMING) * 8)


# ------------------------------------------------------------------ rendering


def fmt(x: float, nd: int = 0) -> str:
    return f"{x:,.{nd}f}"


def plot_cost(idx, fam: str, op: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "bench-compare"  # stable element ids: a re-render gives the same file
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for k, ops in idx.items():
        if suite_family(k[2]) != fam or op not in ops or k[3] == "cold":
            continue
        if k[0] == "EESP" and k[1] != "optimized tunnel" and k[1] != "full transport":
            continue
        xs = [s for s in SIZES if s in ops[op]]
        ax.plot(xs, [best_ns(ops[op][s]) for s in xs], marker="o", ms=3, label=label(k))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("inner IP packet, octets")
    ax.set_ylabel("ns per packet (CPU time, best of repeats)")
    ax.set_title(f"{op}, AES-GCM-{fam} family (one core)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp: a re-render gives the same file
    plt.close(fig)


def plot_goodput(rows: List[Tuple[str, Dict[int, int]]], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "bench-compare"  # stable element ids: a re-render gives the same file
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, wires in rows:
        xs = list(SIZES)
        ax.plot(xs, [100 * s / (wires[s] + ETH_FRAMING) for s in xs], marker="o", ms=3, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("inner IP packet, octets")
    ax.set_ylabel("goodput, % of Ethernet line rate")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp: a re-render gives the same file
    plt.close(fig)


def plot_threads(mt: List[dict], path: Path, model: Dict[tuple, Dict[int, float]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "bench-compare"  # stable element ids: a re-render gives the same file
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    measured = mt_table({"bench": {"threads": mt}})
    for ax, op in zip(axes, ("encrypt", "decrypt")):
        for key, pts in model.items():
            if key[2] != op:
                continue
            xs = sorted(pts)
            line, = ax.plot(xs, [pts[x] / 1e6 for x in xs], ls="--", lw=1, label=f"{key[0]} {key[1]}: MODEL")
            got = measured.get(key, {})
            ns = sorted(got)
            ax.plot(ns, [max(got[n]["pps"]) / 1e6 for n in ns], ls="-", marker="o", ms=4, color=line.get_color(),
                    label=f"{key[0]} {key[1]}: measured (wall clock)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cores (dots: measured; dashed: MODEL)")
        ax.set_title(f"{op}, 1500 octets, AES-GCM-128")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("Mpackets/s (all threads)")
    axes[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp: a re-render gives the same file
    plt.close(fig)


def mt_table(data: dict) -> Dict[tuple, Dict[int, dict]]:
    out: Dict[tuple, Dict[int, dict]] = {}
    for r in data["bench"]["threads"]:
        out.setdefault((r["protocol"], r["sharing"], r["op"]), {})[r["threads"]] = r
    return out


def model(mt: Dict[tuple, Dict[int, dict]], max_n: int) -> Tuple[Dict[tuple, dict], Dict[tuple, Dict[int, float]]]:
    """Fits the MODEL's parameters to the measured points; returns (parameters, curve incl. measured points)."""
    params, curves = {}, {}
    for key, pts in mt.items():
        xn_n = max(n for n in pts)
        cpu1 = pts[1]["cpu_pps_of_best"]
        cpun = pts[xn_n]["cpu_pps_of_best"]
        x1 = cpu1  # one core's rate undisturbed by other jobs: packets per second of the thread's CPU time
        curve: Dict[int, float] = {}
        if key[1] == "shared":
            # Everything runs under the lock: at most one packet at a time, plus the hand-off between cores,
            # h fitted from the wall-clock rates of 1 and N threads.
            w1, wn = max(pts[1]["pps"]), max(pts[xn_n]["pps"])
            h = max(0.0, w1 / wn - 1.0) if xn_n > 1 else 0.0
            params[key] = {"kind": "shared", "x1": x1, "h": h}
            for n in sorted(set(pts) | set(MODEL_CORES)):
                curve[n] = x1 if n == 1 else x1 / (1 + h)
        else:
            # Per-thread SAs: no shared state; each added core raises the per-packet CPU cost by kappa
            # (caches, memory, the hypervisor), fitted from CPU-time rates: c(n) = c1 * (1 + kappa (n - 1)).
            eff = cpun / (xn_n * cpu1) if xn_n > 1 and cpu1 else 1.0
            kappa = max(0.0, (1 / eff - 1) / (xn_n - 1)) if xn_n > 1 else 0.0
            params[key] = {"kind": "per-thread", "x1": x1, "kappa": kappa, "efficiency_measured": eff}
            for n in sorted(set(pts) | set(MODEL_CORES)):
                curve[n] = n * x1 / (1 + kappa * (n - 1))
        curves[key] = curve
    return params, curves


def render(data: dict, out_md: Path, fig_dir: Path) -> str:
    fig_dir.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(fig_dir, out_md.parent)
    idx = index(data)
    m = data["machine"]
    clock = data.get("clock", {})
    mt = mt_table(data)
    maxn = data["bench"]["max_threads"]
    L: List[str] = []
    A = L.append
    A("# ESP, EESP and PSP side by side")
    A("")
    A(f"Generated by `{data['command']}` on {data['started']} in {data['seconds']:.0f} s "
      f"({'QUICK smoke run: rough figures' if data['quick'] else 'full run'}). Every figure below comes from that "
      f"one run, whose raw output is [`{rel}/compare.json`]({rel}/compare.json); `bench/compare --render-only "
      f"{rel}/compare.json` re-renders this page from it without measuring. The measuring program is "
      "`bench/compare_bench.c` (C, pthreads, linked to the core like the other benches, `-O2`); "
      "`bench/compare.py` turns its JSON into this page.")
    A("")
    A("## Machine")
    A("")
    A("| | |")
    A("|---|---|")
    A(f"| CPU | {m['cpu']}{' (virtual machine)' if m.get('hypervisor') else ''} |")
    A(f"| cores | {m['cores']} |")
    A(f"| OpenSSL | {m['openssl']} |")
    A(f"| compiler | {m['compiler'] or 'unknown'} |")
    A(f"| kernel | {m['kernel']} |")
    A(f"| date (UTC) | {data['started']} |")
    A(f"| load average before / after the run | {' / '.join(', '.join(f'{x:.2f}' for x in la) for la in (data['load_average_before'], data['load_average_after']))} |")
    during = data.get("load_average_during") or []
    if during:
        A(f"| 1-minute load average during the run (every 10 s) | mean {statistics.mean(during):.2f}, "
          f"min {min(during):.2f}, max {max(during):.2f} ({len(during)} samples; the bench itself adds about 1) |")
    A("")
    # The bench keeps one CPU busy itself: a mean 1-minute load under 1.2 leaves little room for anyone else.
    quiet = bool(during) and statistics.mean(during) < 1.2
    A(("Nothing else ran on the machine during the run (the load averages are the bench's own)"
       if quiet else "The machine was shared with other jobs during the run (see the load averages)") +
      ": every single-core figure is CPU time of the measuring thread (`CLOCK_THREAD_CPUTIME_ID`), so time "
      "other jobs took from it is not counted, and each is the best of "
      f"{data['bench']['repeats']} repeats of at least {data['bench']['min_time']} s CPU time; the `noise` "
      "columns give (median - best) / best of those repeats.")
    A("")
    # ---- cost
    A("## CPU cost per packet")
    A("")
    A("Inner packets: IPv4/UDP of the given total size (the same octets for every protocol). ESP: RFC 4106 "
      "AES-GCM with a 16-octet ICV, 32-bit sequence numbers, anti-replay on. EESP: draft-ietf-ipsecme-eesp, "
      "SSKDF HKDF-SHA-256, 64-bit Sequence Number, explicit IV, anti-replay on; *warm* = the Sub SA's key is "
      "cached, *cold* = every packet on a new Sub SA, paying HKDF-Expand and an AEAD key set-up. PSP: versions "
      "0 and 1 AES-GCM-128/-256, 2 and 3 AES-GMAC-128/-256 (authentication only), crypt offset 0, no VC. Tunnel "
      "modes add an outer IPv4 header. Decrypt runs over a ring of distinct packets with a fresh receiver per "
      f"pass of {data['bench']['ring']} packets (replay windows stay on). *raw EVP AES-GCM* is the AEAD alone over "
      "16 octets of AAD and the inner packet, key scheduled once, with the calls OpenSSL's manual shows (the "
      "nonce through EVP_*Init_ex, the tag through EVP_CIPHER_CTX_ctrl). The core's AEAD layer makes cheaper "
      "calls for the same work (the tag through the context's parameters; opening sets only the 8 per-packet "
      "nonce octets), so a core row can come in under it, decrypt above all (docs/performance.md). *raw EVP "
      "AES-CBC+HMAC-SHA1* is ESP's old suite (RFC 3602 + RFC 2404, transport mode) in raw EVP, for the Intel "
      "comparison below; its IV comes from a counter (a real sender needs unpredictable IVs, which cost more).")
    A("")
    A(f"IMIX: the *simple IMIX*, 7 : 4 : 1 packets of 40, 576 and 1500 octets (mean {imix_size():.1f} octets; "
      "the mix traffic generators call simple IMIX, see https://en.wikipedia.org/wiki/Internet_Mix). The IMIX "
      "column is the packet-weighted mean of the costs measured at 40, 576 and 1500 octets.")
    A("")
    if clock.get("available"):
        A(f"Cycles: `perf stat` measured an effective core clock of {clock['ghz']:.3f} GHz ({clock['how']}); "
          "cycles/octet = ns/packet x that clock / inner octets.")
    else:
        tsc = m.get("cpuinfo_mhz")
        A(f"Cycles: not measured. {clock.get('why', 'perf stat was not run')}. "
          + (f"The kernel reports a {tsc:.0f} MHz constant TSC, but that is the reference clock, not the core "
             "clock under turbo, so no cycles/octet column is derived from it; multiply ns by your core clock "
             "in GHz to get cycles." if tsc else "No reliable CPU clock figure either."))
    A("")
    for fam in ("128", "256"):
        for op in ("encrypt", "decrypt"):
            png = f"cost_{fam}_{op}.svg"
            plot_cost(idx, fam, op, fig_dir / png)
            A(f"### {op}, AES-GCM-{fam} (and PSP v{'2' if fam == '128' else '3'}, AES-GMAC-{fam})")
            A("")
            A(f"![ns per packet, {op}, {fam}]({rel}/{png})")
            A("")
            A("ns per packet (best of repeats), by inner packet size in octets:")
            A("")
            A("| protocol, mode | " + " | ".join(map(str, SIZES)) + " | IMIX | noise (max) |"
              + (" cycles/octet at 1500 |" if clock.get("available") else ""))
            A("|---|" + "---:|" * (len(SIZES) + 2) + ("---:|" if clock.get("available") else ""))
            for k, ops in idx.items():
                if suite_family(k[2]) != fam or op not in ops:
                    continue
                o = ops[op]
                cells = [fmt(best_ns(o[s]), 0) if s in o else "" for s in SIZES]
                im = fmt(imix_avg({s: best_ns(o[s]) for s, _ in IMIX}), 0) if all(s in o for s, _ in IMIX) else ""
                nz = max(noise(r) for r in o.values())
                row = f"| {label(k)} | " + " | ".join(cells) + f" | {im} | {nz:.0%} |"
                if clock.get("available") and 1500 in o:
                    row += f" {best_ns(o[1500]) * clock['ghz'] / 1500:.2f} |"
                A(row)
            A("")
    # ---- why
    A("### Which costs least, and why")
    A("")
    A(why(idx))
    A("")
    # ---- overhead
    A("## Octets added per packet")
    A("")
    A("Measured: the wire IP packet the core wrote minus the inner IP packet, AES-GCM-128 (AES-GCM-256 adds "
      "the same). ESP and EESP pad to 4 octets, so their overhead moves with the size by up to 3 octets.")
    A("")
    A("| protocol, mode | " + " | ".join(map(str, SIZES)) + " | IMIX (mean) |")
    A("|---|" + "---:|" * (len(SIZES) + 1))
    over_rows: List[Tuple[str, Dict[int, int]]] = []
    for k, ops in idx.items():
        if suite_family(k[2]) != "128" or k[3] == "cold" or "raw" in k[0] or "GMAC" in k[2]:
            continue
        enc = ops["encrypt"]
        wires = {s: enc[s]["wire_len"] for s in enc}
        name = f"{k[0]} {k[1]}"
        over_rows.append((name, wires))
        cells = [str(wires[s] - s) if s in wires else "" for s in SIZES]
        im = imix_avg({s: float(wires[s] - s) for s, _ in IMIX}) if all(s in wires for s, _ in IMIX) else None
        A(f"| {name} | " + " | ".join(cells) + f" | {'' if im is None else f'{im:.1f}'} |")
    A("")
    # ---- goodput
    A("## Goodput at line rate")
    A("")
    A(f"Goodput = line rate x inner octets / (wire IP packet + {ETH_FRAMING}) per packet: each IP packet "
      "travels in an Ethernet frame with preamble and SFD (8), MAC header (14), FCS (4) and the inter-frame "
      "gap (12); no VLAN tag. IMIX sums octets over the mix. The fraction does not depend on the line rate; "
      "the Gbit/s columns are that fraction of 10, 100 and 400 Gbit/s.")
    A("")
    plot_goodput(over_rows, fig_dir / "goodput.svg")
    A(f"![goodput]({rel}/goodput.svg)")
    A("")
    A("| protocol, mode | size | wire IP octets | goodput % | " + " | ".join(f"Gbit/s at {g}" for g in LINE_RATES_GBPS) + " |")
    A("|---|---:|---:|---:|" + "---:|" * len(LINE_RATES_GBPS))
    A("| (no protection) | 1500 | 1500 | " + f"{100 * 1500 / 1538:.1f} | "
      + " | ".join(f"{g * 1500 / 1538:.2f}" for g in LINE_RATES_GBPS) + " |")
    for name, wires in over_rows:
        for s in (64, 1500, 9000, "IMIX"):
            if s == "IMIX":
                if not all(x in wires for x, _ in IMIX):
                    continue
                inner = sum(x * w for x, w in IMIX)
                wire = sum(wires[x] * w for x, w in IMIX)
                frac = inner / (wire + ETH_FRAMING * sum(w for _, w in IMIX))
                wl = f"{wire / sum(w for _, w in IMIX):.1f}"
            else:
                if s not in wires:
                    continue
                frac = s / (wires[s] + ETH_FRAMING)
                wl = str(wires[s])
            A(f"| {name} | {s} | {wl} | {100 * frac:.1f} | " + " | ".join(f"{g * frac:.2f}" for g in LINE_RATES_GBPS) + " |")
    A("")
    # ---- cores
    A("## Cores for 100 Gbit/s")
    A("")
    A("Cores = packets/s at 100 Gbit/s Ethernet line rate for the protocol's own wire packets (framing as "
      "above) x the measured ns/packet of one core / 10^9; no other work on the core (no NIC driver, no "
      "stack), cores assumed to add linearly (the multicore section shows how far that holds). IMIX: the "
      f"mix's packet rate x its mean cost. For scale: the Intel IPsec study cited in issue 15 reports 100 "
      f"Gbit/s of ESP with AES-128-CBC + HMAC-SHA1 from **{INTEL_CORES} Xeon Platinum 8160 cores** (AES-NI); "
      "the raw EVP AES-CBC+HMAC-SHA1 rows are that suite measured here, on this CPU, with OpenSSL's EVP (no new "
      "dependency). The study's packet sizes, NIC and software stack are not reproduced here: set its 12 cores "
      "beside these rows as an order of magnitude, not as a like-for-like figure.")
    A("")
    A("| protocol, mode | suite | encrypt, 1500 | decrypt, 1500 | encrypt, IMIX | decrypt, IMIX |")
    A("|---|---|---:|---:|---:|---:|")
    for k, ops in idx.items():
        if k[3] == "cold" and k[1] != "optimized tunnel":
            continue
        cells = []
        for size in (1500, "IMIX"):
            for op in ("encrypt", "decrypt"):
                o = ops.get(op, {})
                if size == 1500:
                    if 1500 not in o:
                        cells.append("")
                        continue
                    pps = line_pps(o[1500]["wire_len"], 100)
                    cells.append(f"{pps * best_ns(o[1500]) / 1e9:.1f}")
                else:
                    if not all(s in o for s, _ in IMIX):
                        cells.append("")
                        continue
                    n = sum(w for _, w in IMIX)
                    mean_frame = sum((o[s]["wire_len"] + ETH_FRAMING) * w for s, w in IMIX) / n
                    pps = 100e9 / (mean_frame * 8)
                    cells.append(f"{pps * imix_avg({s: best_ns(o[s]) for s, _ in IMIX}) / 1e9:.1f}")
        A(f"| {label(k)} | {k[2]} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    A(f"| Intel study (Xeon 8160, ESP CBC+HMAC-SHA1) | AES-128-CBC + HMAC-SHA1 | {INTEL_CORES} | | | |")
    A("")
    # ---- threads
    params, curves = model(mt, maxn)
    A("## Multicore scaling")
    A("")
    A(f"Measured on this machine's {maxn} core(s): 1500-octet packets, AES-GCM-128 (PSP v0), "
      f"best of {data['bench']['mt_repeats']} runs of {data['bench']['mt_duration']} s wall time each, packets/s "
      "summed over the threads. Decrypt threads take packets from a ring of 1024 sealed packets (per thread, or "
      "one shared), with a fresh receiver each time the ring is spent (inside the timed run, amortised over "
      "1024 packets) so anti-replay stays on. *shared*: one SA (sender or receiver) used by every thread behind one mutex, as "
      "the Python faces do. *per-thread*: ESP one SA per thread (per-CPU SAs as RFC 9611 negotiates them), "
      "EESP one Sub SA per thread (same SA, Sub SA ID = thread), PSP one SPI per thread. The CPU-time column "
      "sums each thread's packets per second of its own CPU time: where it is well above the wall-clock figure "
      "the threads waited (for the lock, or for a CPU other jobs held).")
    A("")
    A("![threads](" + rel + "/threads.svg)")
    A("")
    A("| protocol | SA sharing | op | threads | packets/s (best) | Gbit/s inner | scaling vs 1 thread | packets/s per CPU-second | runs |")
    A("|---|---|---|---:|---:|---:|---:|---:|---|")
    for key, pts in mt.items():
        x1 = max(pts[1]["pps"])
        for n in sorted(pts):
            r = pts[n]
            b = max(r["pps"])
            A(f"| {key[0]} | {key[1]} | {key[2]} | {n} | {fmt(b)} | {b * r['size'] * 8 / 1e9:.1f} | {b / x1:.2f}x | "
              f"{fmt(r['cpu_pps_of_best'])} | {', '.join(fmt(x) for x in r['pps'])} |")
    A("")
    A("## MODEL: projection to 8, 16 and 64 cores")
    A("")
    A(f"**This is a model, not a measurement.** It extrapolates the measured single-core rate X1 and the "
      f"contention seen on {maxn} core(s) of this machine; with so few measured points its error is large, "
      "and it ignores everything but the CPU work of this benchmark: NIC queues and RSS spreading, interrupts, "
      "memory bandwidth at 64 cores, NUMA, turbo falling with more busy cores, and the traffic's flow mix.")
    A("")
    A("- X1 is one core's rate from the 1-thread run's CPU time (packets per second of the thread's own CPU "
      "time), so time other jobs took from the bench does not lower it.")
    A("- *per-thread* SAs (no shared state): X(n) = n X1 / (1 + k (n - 1)), where k is the rise of the "
      "per-packet CPU cost per added core, fitted from the CPU-time rates: k = (1/e - 1) / (N - 1) with "
      "e = (CPU-time rate at N threads) / (N x CPU-time rate at 1 thread), N the most threads measured.")
    A("- *shared* SA behind one lock: the whole packet is processed under the lock, so at most one packet is in "
      "flight: X(n) = X1 / (1 + h) for n >= 2, where h is the lock hand-off cost fitted from the wall-clock "
      "rates, h = W(1) / W(N) - 1 (0 when W(N) did not drop below W(1)). More cores do not help.")
    A("")
    A("| protocol | SA sharing | op | fitted | " + " | ".join(f"{n} cores, Mpkt/s" for n in MODEL_CORES)
      + " | " + " | ".join(f"{n} cores, Gbit/s" for n in MODEL_CORES) + " |")
    A("|---|---|---|---|" + "---:|" * (2 * len(MODEL_CORES)))
    for key, p in params.items():
        fit = f"k = {p['kappa']:.3f}" if p["kind"] == "per-thread" else f"h = {p['h']:.3f}"
        c = curves[key]
        A(f"| {key[0]} | {key[1]} | {key[2]} | {fit} | " + " | ".join(f"{c[n] / 1e6:.2f}" for n in MODEL_CORES)
          + " | " + " | ".join(f"{c[n] * 1500 * 8 / 1e9:.0f}" for n in MODEL_CORES) + " |")
    A("")
    plot_threads(data["bench"]["threads"], fig_dir / "threads.svg", curves)
    text = "\n".join(L) + "\n"
    out_md.write_text(text)
    return text


def why(idx) -> str:
    """The ranking at each size from the measured AES-GCM-128 encrypt/decrypt costs, warm keys, transport/tunnel."""
    out = []
    for op in ("encrypt", "decrypt"):
        cells = []
        for s in SIZES:
            cands = [(best_ns(ops[op][s]), label(k)) for k, ops in idx.items()
                     if suite_family(k[2]) == "128" and k[3] != "cold" and "raw" not in k[0] and op in ops
                     and s in ops[op] and "GMAC" not in k[2]]
            if cands:
                ns, who = min(cands)
                near = sorted(w for n, w in cands if w != who and n <= ns * 1.05)
                cells.append(f"{s}: {who} ({ns:.0f} ns" + (f"; within 5%: {', '.join(near)}" if near else "") + ")")
        out.append(f"- Cheapest AES-GCM-128 {op} per packet (GMAC aside; rows within 5% of it are not told apart "
                   "by this machine's noise): " + "; ".join(cells) + ".")
    # Fixed vs per-octet cost of each, from 64 and 9000.
    fits = []
    for k, ops in idx.items():
        if suite_family(k[2]) != "128" or "encrypt" not in ops:
            continue
        o = ops["encrypt"]
        if 64 in o and 9000 in o:
            a, b = best_ns(o[64]), best_ns(o[9000])
            slope = (b - a) / (9000 - 64)
            fits.append(f"{label(k)}: {a - 64 * slope:.0f} ns + {slope:.3f} ns/octet")
    out.append("- Cost as fixed + per-octet (a line through the 64- and 9000-octet encrypt figures): "
               + "; ".join(fits) + ".")
    raw = next((ops for k, ops in idx.items() if k[0] == "raw EVP AES-GCM" and suite_family(k[2]) == "128"), {})
    floor = ""
    if 64 in raw.get("encrypt", {}) and 64 in raw.get("decrypt", {}):
        floor = (f": {best_ns(raw['encrypt'][64]):.0f} ns to seal and {best_ns(raw['decrypt'][64]):.0f} ns to "
                 "open a 64-octet packet in raw EVP here")
    cold = []
    for k, ops in idx.items():
        if k[0] == "EESP" and k[3] == "cold" and suite_family(k[2]) == "128" and k[1] == "optimized tunnel":
            warm = idx.get((k[0], k[1], k[2], "warm"), {})
            for op in ("encrypt", "decrypt"):
                if 64 in ops.get(op, {}) and 64 in warm.get(op, {}):
                    cold.append(f"{op} +{best_ns(ops[op][64]) - best_ns(warm[op][64]):.0f} ns")
    out.append("- Where the cycles go: from about 1 KB up all AES-GCM rows approach the raw EVP AES-GCM "
               "floor: the AES-CTR + GHASH pass over the payload is the cost and no protocol changes it. "
               f"Below that the fixed part dominates: the EVP calls per packet (set the nonce, AAD, final, tag{floor}"
               "; the core's own calls cost less, most of all on opening), plus the protocol's own work: parsing "
               "and building "
               "headers, the anti-replay window (ESP, EESP; PSP has none), the Sub SA table look-up (EESP), "
               "padding and trailer (ESP) or the PIH (EESP full format). PSP v2/v3 (GMAC) skip the CTR "
               "pass and only hash, so they are cheapest at every size, at the price of no confidentiality. "
               "EESP cold rows add a key derivation (HKDF-SHA-256 Expand, HMAC-SHA-256 blocks) and an AES key "
               "schedule per packet (optimized tunnel, 64 octets, AES-GCM-128: " + (", ".join(cold) or "not measured")
               + " over warm), which only a Sub SA per flow with few packets each would pay.")
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="seconds, rough figures (smoke test)")
    ap.add_argument("--out-dir", default=str(ROOT / "docs"),
                    help="where comparison.md goes (plots and JSON in comparison/ under it); default docs/")
    ap.add_argument("--render-only", metavar="JSON", help="render from this JSON without measuring")
    ap.add_argument("--min-time", type=float, help="CPU seconds per measurement (default 0.1)")
    ap.add_argument("--repeats", type=int, help="repeats per measurement, best taken (default 5)")
    ap.add_argument("--threads", type=int, help="most threads in the scaling runs (default: the online CPUs)")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir)
    fig_dir = out_dir / "comparison"
    fig_dir.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        data = json.loads(Path(args.render_only).read_text())
        if data.get("schema") != SCHEMA:
            raise SystemExit(f"compare: {args.render_only}: not a {SCHEMA} file")
        beside = fig_dir / "compare.json"
        if not beside.exists() or not beside.samefile(args.render_only):
            shutil.copyfile(args.render_only, beside)  # the doc links the JSON it came from
    else:
        data = run(build(), args.quick, args.min_time, args.repeats, args.threads)
        (fig_dir / "compare.json").write_text(json.dumps(data, indent=1) + "\n")
    render(data, out_dir / "comparison.md", fig_dir)
    log(f"compare: wrote {out_dir / 'comparison.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
