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
SCHEMA = "compare/2"
BACKENDS = ("ipsec-mb", "openssl")  # the fast one first: the tables put OpenSSL beside it

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
TABLES = ("Machine", "CPU cost per packet", "What each protocol spends beyond the AEAD", "Octets added per packet",
          "Goodput at line rate", "Cores for 100 Gbit/s", "Multicore scaling", "MODEL")


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


def lscpu() -> Dict[str, str]:
    try:
        p = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition(":")
        if k.strip() in ("Model name", "CPU family", "Model", "Stepping", "CPU(s)", "Thread(s) per core",
                         "Hypervisor vendor", "L1d cache", "L2 cache", "L3 cache", "BogoMIPS"):
            out[k.strip()] = v.strip()
    return out


def run(exe: Path, quick: bool, min_time: Optional[float], repeats: Optional[int], threads: Optional[int],
        backends: str) -> dict:
    cmd = [str(exe), "--sizes", ",".join(map(str, MEASURED_SIZES)), "--backends", backends]
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
        "lscpu": lscpu(),
        "clock": perf_clock(exe) if not quick else {"available": False, "why": "not probed in --quick"},
        "bench": data,
    }


# ------------------------------------------------------------------ analysis


def best_ns(row: dict) -> float:
    """The figure every table uses: the median of the repeats (one noisy repeat on the shared machine moves it
    little either way)."""
    return statistics.median(row["ns"])


def aead_ns(row: dict) -> float:
    return statistics.median(row["aead_ns"])


def noise(row: dict) -> float:
    """Spread of the repeats: (max - min) / median."""
    return (max(row["ns"]) - min(row["ns"])) / statistics.median(row["ns"])


Key = Tuple[str, str, str, str]  # protocol, variant, suite, keys


def backends_of(data: dict) -> List[str]:
    have = {r["backend"] for r in data["bench"]["single"]}
    return [b for b in BACKENDS if b in have]


def index(data: dict, backend: str) -> Dict[Key, Dict[str, Dict[int, dict]]]:
    """The rows of one backend; the raw EVP rows (OpenSSL alone, measured once) go into every backend's index."""
    out: Dict[Key, Dict[str, Dict[int, dict]]] = {}
    for r in data["bench"]["single"]:
        if r["backend"] != backend and not r["protocol"].startswith("raw"):
            continue
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
    if proto == "PSP" and "GMAC" in suite or proto == "ESP" and "CBC" in suite:
        s += f" ({suite})"
    return s


def suite_family(suite: str) -> str:
    return "128" if "128" in suite else "256"


def line_pps(wire: float, gbps: float) -> float:
    return gbps * 1e9 / ((wire + ETH_FRAMING) * 8)


# ------------------------------------------------------------------ rendering


def fmt(x: float, nd: int = 0) -> str:
    return f"{x:,.{nd}f}"


def plot_cost(idxs: Dict[str, dict], fam: str, op: str, path: Path) -> None:
    """ns per packet against size: the main warm rows, ipsec-mb solid, OpenSSL dashed (same colour)."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "bench-compare"  # stable element ids: a re-render gives the same file
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colours: Dict[str, str] = {}
    for backend, idx in idxs.items():
        for k, ops in idx.items():
            if suite_family(k[2]) != fam or op not in ops or k[3] == "cold" or "CBC" in k[2]:
                continue
            if k[0] == "EESP" and k[1] != "optimized tunnel":
                continue
            if k[0] == "PSP" and "tunnel" in k[1] or k[0].startswith("raw") and backend != "openssl":
                continue
            if k[0] == "ESP" and k[1] != "transport":
                continue
            xs = [s for s in SIZES if s in ops[op]]
            name = label(k)
            line, = ax.plot(xs, [best_ns(ops[op][s]) for s in xs], marker="o", ms=3,
                            ls="-" if backend == "ipsec-mb" else "--", color=colours.get(name),
                            label=f"{name} ({backend})")
            colours[name] = line.get_color()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("inner IP packet, octets")
    ax.set_ylabel("ns per packet (CPU time, median of repeats)")
    ax.set_title(f"{op}, AES-GCM-{fam} family (one core); solid: ipsec-mb, dashed: OpenSSL")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp: a re-render gives the same file
    plt.close(fig)


# The stacked bars: (protocol, variant, suite, keys) of each warm bar, and the transport row whose rest is the
# header work inside the tunnel row (the tunnel row's rest beyond it is the outer header's framing).
BREAKDOWN = (
    (("ESP", "transport", "AES-GCM-128", "n/a"), None),
    (("ESP", "tunnel", "AES-GCM-128", "n/a"), ("ESP", "transport", "AES-GCM-128", "n/a")),
    (("EESP", "full transport", "AES-GCM-128", "warm"), None),
    (("EESP", "full tunnel", "AES-GCM-128", "warm"), ("EESP", "full transport", "AES-GCM-128", "warm")),
    (("EESP", "optimized tunnel", "AES-GCM-128", "warm"), None),
    (("PSP", "v0 transport", "AES-GCM-128", "n/a"), None),
    (("PSP", "v0 tunnel", "AES-GCM-128", "n/a"), ("PSP", "v0 transport", "AES-GCM-128", "n/a")),
)
# Cold-key bars: (cold row, its warm row).
BREAKDOWN_COLD = (
    (("EESP", "optimized tunnel", "AES-GCM-128", "cold"), ("EESP", "optimized tunnel", "AES-GCM-128", "warm")),
    (("EESP", "full transport", "AES-GCM-128", "cold"), ("EESP", "full transport", "AES-GCM-128", "warm")),
    (("PSP", "v0 transport", "AES-GCM-128", "cold"), ("PSP", "v0 transport", "AES-GCM-128", "n/a")),
)
BANDS = ("AEAD", "replay", "header, options, trailer", "framing (outer IPv4)", "key handling (cold key)")
BREAKDOWN_SIZES = (64, 1500)


def replay_ns(data: dict, backend: str) -> float:
    return next(statistics.median(r["ns"]) for r in data["bench"]["replay"] if r["backend"] == backend)


def breakdown(data: dict, idx, backend: str, op: str, size: int) -> List[Tuple[str, Dict[str, float], float]]:
    """(bar name, band -> ns, total ns) for each bar; every band a measurement or a difference of two."""
    rp = replay_ns(data, backend)

    def rest(k: Key) -> Optional[Tuple[float, float, float]]:
        r = idx.get(k, {}).get(op, {}).get(size)
        if not r or "aead_ns" not in r:
            return None
        replay = rp if op == "decrypt" and k[0] in ("ESP", "EESP") else 0.0
        return best_ns(r), aead_ns(r), replay

    bars = []
    for k, base in BREAKDOWN:
        got = rest(k)
        if not got:
            continue
        total, aead, replay = got
        bands = {"AEAD": aead, "replay": replay}
        own = total - aead - replay
        b = rest(base) if base else None
        if b:
            inner = b[0] - b[1] - b[2]
            bands["header, options, trailer"] = inner
            bands["framing (outer IPv4)"] = own - inner
        else:
            bands["header, options, trailer"] = own
        bars.append((f"{k[0]} {k[1]}", bands, total))
    for cold, warm in BREAKDOWN_COLD:
        c = idx.get(cold, {}).get(op, {}).get(size)
        w = rest(warm)
        if not c or not w:
            continue
        total, aead, replay = w
        bands = {"AEAD": aead, "replay": replay, "header, options, trailer": total - aead - replay,
                 "key handling (cold key)": best_ns(c) - total}
        bars.append((f"{cold[0]} {cold[1]}, cold {'Sub SA' if cold[0] == 'EESP' else 'SPI'}", bands, best_ns(c)))
    return bars


def plot_breakdown(data: dict, idxs: Dict[str, dict], path: Path, cold: bool) -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "bench-compare"  # stable element ids: a re-render gives the same file
    import matplotlib.pyplot as plt
    cols = [(op, size) for size in BREAKDOWN_SIZES for op in ("encrypt", "decrypt")]
    fig, axes = plt.subplots(len(idxs), len(cols), figsize=(4 * len(cols), 3.6 * len(idxs)), squeeze=False)
    colours = dict(zip(BANDS, ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#c44e52")))
    for row, (backend, idx) in enumerate(idxs.items()):
        for col, (op, size) in enumerate(cols):
            ax = axes[row][col]
            bars = [b for b in breakdown(data, idx, backend, op, size) if ("cold" in b[0]) == cold]
            top = 0.0
            for i, (name, bands, total) in enumerate(bars):
                bottom = 0.0
                for band in BANDS:
                    v = max(0.0, bands.get(band, 0.0))  # a difference below 0 is noise: drawn as 0, printed as is
                    ax.bar(i, v, bottom=bottom, color=colours[band], label=band if i == 0 else None, width=0.7)
                    bottom += v
                # The measured total: where a band was drawn as 0, the stack stands above it.
                ax.plot([i - 0.35, i + 0.35], [total, total], color="black", lw=1.2,
                        label="measured total" if i == 0 else None)
                top = max(top, bottom, total)
            ax.set_ylim(0, top * 1.08 if top else 1)
            ax.set_xticks(range(len(bars)))
            ax.set_xticklabels([b[0] for b in bars], rotation=40, ha="right", fontsize=7)
            ax.set_title(f"{backend}: {op}, {size} octets", fontsize=9)
            ax.set_ylabel("ns per packet", fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
    handles, names = [], []
    for ax in axes.flat:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="upper center", ncol=len(names), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
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
    measured = mt_table({"bench": {"threads": mt}})
    backends = [b for b in BACKENDS if any(k[0] == b for k in measured)]
    fig, axes = plt.subplots(len(backends), 2, figsize=(10, 4.2 * len(backends)), sharey=True, squeeze=False)
    for row, backend in enumerate(backends):
        for ax, op in zip(axes[row], ("encrypt", "decrypt")):
            for key, pts in model.items():
                if key[3] != op or key[0] != backend:
                    continue
                xs = sorted(pts)
                line, = ax.plot(xs, [pts[x] / 1e6 for x in xs], ls="--", lw=1, label=f"{key[1]} {key[2]}: MODEL")
                got = measured.get(key, {})
                ns = sorted(got)
                ax.plot(ns, [max(got[n]["pps"]) / 1e6 for n in ns], ls="-", marker="o", ms=4,
                        color=line.get_color(), label=f"{key[1]} {key[2]}: measured (wall clock)")
            ax.set_title(f"{backend}: {op}, 1500 octets, AES-GCM-128")
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("cores (dots: measured; dashed: MODEL)")
        ax.grid(True, which="both", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("Mpackets/s (all threads)")
        row[1].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})  # no timestamp: a re-render gives the same file
    plt.close(fig)


def mt_table(data: dict) -> Dict[tuple, Dict[int, dict]]:
    """(backend, protocol, sharing, op) -> threads -> row."""
    out: Dict[tuple, Dict[int, dict]] = {}
    for r in data["bench"]["threads"]:
        out.setdefault((r.get("backend", "openssl"), r["protocol"], r["sharing"], r["op"]), {})[r["threads"]] = r
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
        if key[2] == "shared":
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


def cycles_clock(data: dict) -> Tuple[float, str]:
    """GHz to turn ns into cycles, and how it was had: perf's core cycles when the CPU exposes them, else the
    TSC rate the bench measured (rdtsc against CLOCK_MONOTONIC)."""
    clock = data.get("clock", {})
    if clock.get("available"):
        return clock["ghz"], f"core cycles: `perf stat` measured {clock['ghz']:.3f} GHz ({clock['how']})"
    tsc = data["bench"].get("tsc_ghz") or 0.0
    m = data["machine"]
    return tsc, (f"`perf stat -e cycles` does not count here ({clock.get('why', 'not probed')}), so cycles = ns x "
                 f"the TSC rate compare_bench measured at start-up: rdtsc ticks over 0.2 s of CLOCK_MONOTONIC, "
                 f"{tsc:.4f} GHz (the kernel's /proc/cpuinfo says {m.get('cpuinfo_mhz') or 0:.0f} MHz, constant "
                 "TSC). These are TSC reference cycles: where the core runs above or below the TSC rate (boost, "
                 "the hypervisor's clock) its own cycle count differs by that ratio")


def ns_cyc(ns: float, ghz: float) -> str:
    return f"{fmt(ns)} ({fmt(ns * ghz)})" if ghz else fmt(ns)


def imix_ns(o: Dict[int, dict]) -> Optional[float]:
    return imix_avg({s: best_ns(o[s]) for s, _ in IMIX}) if all(s in o for s, _ in IMIX) else None


def cores_100g(o: Dict[int, dict], size) -> Optional[float]:
    """Cores for 100 Gbit/s of Ethernet: the line's packet rate for these wire packets x ns per packet."""
    if size == 1500:
        if 1500 not in o:
            return None
        return line_pps(o[1500]["wire_len"], 100) * best_ns(o[1500]) / 1e9
    if not all(s in o for s, _ in IMIX):
        return None
    n = sum(w for _, w in IMIX)
    mean_frame = sum((o[s]["wire_len"] + ETH_FRAMING) * w for s, w in IMIX) / n
    return 100e9 / (mean_frame * 8) * imix_ns(o) / 1e9


def render(data: dict, out_md: Path, fig_dir: Path) -> str:
    fig_dir.mkdir(parents=True, exist_ok=True)
    rel = os.path.relpath(fig_dir, out_md.parent)
    backends = backends_of(data)
    idxs = {b: index(data, b) for b in backends}
    fast = backends[0]
    idx = idxs[fast]
    m = data["machine"]
    ghz, how_cycles = cycles_clock(data)
    mt = mt_table(data)
    maxn = data["bench"]["max_threads"]
    desc = {b["name"]: b["describe"] for b in data["bench"].get("backends", [])}
    L: List[str] = []
    A = L.append
    A("# ESP, EESP and PSP side by side")
    A("")
    A(f"Generated by `{data['command']}` on {data['started']} in {data['seconds']:.0f} s "
      f"({'QUICK smoke run: rough figures' if data['quick'] else 'full run'}), which ran `{data['bench_command']}`. "
      f"Every figure below comes from that one run, whose raw output is [`{rel}/compare.json`]({rel}/compare.json); "
      f"`bench/compare --render-only {rel}/compare.json` re-renders this page from it without measuring. The "
      "measuring program is `bench/compare_bench.c` (C, pthreads, linked to the core like the other benches, "
      "`-O2`); `bench/compare.py` turns its JSON into this page.")
    A("")
    A("Both crypto backends ran in that one process: compare_bench calls `pe_backend_set` before each section, "
      "and every SA, Sub SA and AEAD context of a section is keyed after it, so each takes that backend "
      "(pe/backend.h). " + "; ".join(f"**{b}**: {desc.get(b, b)}" for b in backends) + ".")
    A("")
    A("## Machine")
    A("")
    A("| | |")
    A("|---|---|")
    A(f"| CPU | {m['cpu']}{' (virtual machine)' if m.get('hypervisor') else ''} |")
    lc = data.get("lscpu") or {}
    if lc:
        A("| lscpu | " + "; ".join(f"{k}: {v}" for k, v in lc.items()) + " |")
    A(f"| cores | {m['cores']} |")
    A(f"| OpenSSL | {m['openssl']} |")
    for b in backends:
        A(f"| backend {b} | {desc.get(b, '')} |")
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
      "other jobs took from it is not counted, and each is the **median** of "
      f"{data['bench']['repeats']} repeats of at least {data['bench']['min_time']} s CPU time; the `noise` "
      "columns give (max - min) / median of those repeats.")
    A("")
    # ---- headline
    if len(backends) > 1:
        A("## Headline")
        A("")
        A("AES-GCM-128, warm keys, one core, ns per packet (median), ipsec-mb against OpenSSL:")
        A("")
        A("| protocol, mode | op | 64: ipsec-mb | 64: OpenSSL | 1500: ipsec-mb | 1500: OpenSSL | cores for 100 Gbit/s at 1500, ipsec-mb / OpenSSL |")
        A("|---|---|---:|---:|---:|---:|---:|")
        for k in (("ESP", "transport", "AES-GCM-128", "n/a"), ("EESP", "optimized tunnel", "AES-GCM-128", "warm"),
                  ("PSP", "v0 transport", "AES-GCM-128", "n/a")):
            for op in ("encrypt", "decrypt"):
                f_o, o_o = idxs[fast].get(k, {}).get(op, {}), idxs["openssl"].get(k, {}).get(op, {})
                if not all(s in f_o and s in o_o for s in (64, 1500)):
                    continue
                A(f"| {label(k)} | {op} | {best_ns(f_o[64]):.0f} | {best_ns(o_o[64]):.0f} "
                  f"({best_ns(o_o[64]) / best_ns(f_o[64]):.1f}x) | {best_ns(f_o[1500]):.0f} | {best_ns(o_o[1500]):.0f} "
                  f"({best_ns(o_o[1500]) / best_ns(f_o[1500]):.1f}x) | {cores_100g(f_o, 1500):.1f} / "
                  f"{cores_100g(o_o, 1500):.1f} |")
        A("")
    # ---- cost
    A("## CPU cost per packet")
    A("")
    A("Inner packets: IPv4/UDP of the given total size (the same octets for every protocol). ESP: RFC 4106 "
      "AES-GCM with a 16-octet ICV, 32-bit sequence numbers, anti-replay on. EESP: draft-ietf-ipsecme-eesp, "
      "SSKDF HKDF-SHA-256, 64-bit Sequence Number, explicit IV, anti-replay on; *warm* = the Sub SA's key is "
      "cached, *cold* = every packet on a new Sub SA, paying HKDF-Expand and an AEAD key set-up. PSP: versions "
      "0 and 1 AES-GCM-128/-256, 2 and 3 AES-GMAC-128/-256 (authentication only), crypt offset 0, no VC; *cold* "
      "(decrypt only) = every packet on a new SPI, the receiver holding only the master key, so each packet pays "
      "the AES-CMAC key derivation and an AEAD key set-up (a PSP sender is keyed once per SPI when it is set up). "
      "Tunnel modes add an outer IPv4 header. Decrypt runs over a ring of distinct packets with a fresh receiver "
      f"per pass of {data['bench']['ring']} packets (replay windows stay on). *raw EVP AES-GCM* is the AEAD alone over "
      "16 octets of AAD and the inner packet in OpenSSL's EVP, key scheduled once, with the calls OpenSSL's "
      "manual shows; it does not depend on the core's backend and ran once. *raw EVP AES-CBC+HMAC-SHA1* is "
      "ESP's old suite (RFC 3602 + RFC 2404, transport mode) in raw EVP, for the Intel comparison below; its IV "
      "comes from a counter (a real sender needs unpredictable IVs, which cost more).")
    A("")
    A(f"IMIX: the *simple IMIX*, 7 : 4 : 1 packets of 40, 576 and 1500 octets (mean {imix_size():.1f} octets; "
      "the mix traffic generators call simple IMIX, see https://en.wikipedia.org/wiki/Internet_Mix). The IMIX "
      "column is the packet-weighted mean of the costs measured at 40, 576 and 1500 octets.")
    A("")
    A(f"Cells are **ns (cycles)** per packet. Cycles: {how_cycles}.")
    A("")
    for fam in ("128", "256"):
        for op in ("encrypt", "decrypt"):
            png = f"cost_{fam}_{op}.svg"
            plot_cost(idxs, fam, op, fig_dir / png)
            A(f"### {op}, AES-GCM-{fam} (and PSP v{'2' if fam == '128' else '3'}, AES-GMAC-{fam})")
            A("")
            A(f"![ns per packet, {op}, {fam}]({rel}/{png})")
            A("")
            A("ns (cycles) per packet, median of repeats, by inner packet size in octets; each protocol row on "
              f"{' and then '.join(backends)}; the last column is OpenSSL's time over ipsec-mb's at 64 and 1500 "
              "octets:")
            A("")
            A("| protocol, mode | backend | " + " | ".join(map(str, SIZES)) + " | IMIX | noise (max) | OpenSSL / ipsec-mb, 64 / 1500 |")
            A("|---|---|" + "---:|" * (len(SIZES) + 3))
            keys = [k for k in idxs[backends[-1]] if suite_family(k[2]) == fam and "CBC" not in k[2]]
            for k in keys:
                for b in backends:
                    o = idxs[b].get(k, {}).get(op)
                    if not o or (k[0].startswith("raw") and b != "openssl"):
                        continue
                    cells = [ns_cyc(best_ns(o[s]), ghz) if s in o else "" for s in SIZES]
                    im = imix_ns(o)
                    nz = max(noise(r) for r in o.values())
                    ratio = ""
                    if b == "openssl" and len(backends) > 1 and not k[0].startswith("raw"):
                        f_o = idxs[fast].get(k, {}).get(op, {})
                        ratio = " / ".join(f"{best_ns(o[s]) / best_ns(f_o[s]):.1f}x" for s in (64, 1500)
                                           if s in o and s in f_o)
                    A(f"| {label(k)} | {b} | " + " | ".join(cells) + f" | {'' if im is None else ns_cyc(im, ghz)} | "
                      f"{nz:.0%} | {ratio} |")
            A("")
    # ---- beyond the AEAD
    A("## What each protocol spends beyond the AEAD")
    A("")
    rp = {b: replay_ns(data, b) for b in backends}
    A("AES-GCM-128, warm keys, one core. Each band is a measurement or the stated difference of two:")
    A("")
    A("- **AEAD**: the bare `pe_aead_seal` / `pe_aead_open` call of the core, on the same backend, with the "
      "row's own shapes (AAD: ESP 8 octets of SPI and sequence number, EESP 16 of base header and sequence "
      "number, PSP its 16-octet header; sealed octets: what lies between the IV and the tag on the wire, so "
      "ESP's padding and trailer and EESP's PIH are in it; 16-octet tag, 12-octet nonce), timed alone in "
      "compare_bench right before the protocol row (`aead_ns` in the JSON).")
    A("- **replay** (decrypt, ESP and EESP; PSP has none, senders keep no window): `pe_replay_check` + "
      "`pe_replay_update` of the next sequence number on a 1024-packet window, timed alone: "
      + ", ".join(f"{b} run {rp[b]:.1f} ns" for b in backends) + " (the same code on both; the spread is noise).")
    A("- **header, options, trailer** = the protocol row - AEAD - replay: building or parsing the header, the "
      "SA or Sub SA look-up, the sequence number and nonce, the checksums, ESP's padding and trailer, EESP's PIH "
      "and options, the copies. The core has no null-cipher path for these suites to split this band further.")
    A("- **framing (outer IPv4)**, tunnel rows only: (tunnel row - its AEAD - replay) - (the transport row of "
      "the same protocol - its AEAD - replay), that is what building or stripping the outer header costs beyond "
      "the transport row's own work. EESP's optimized tunnel format has no transport twin, so its rest is one band.")
    A("- **key handling (cold key)**, on the cold bars: the cold row - the warm row (EESP: a new Sub SA per "
      "packet against a cached one; PSP: a new SPI per packet whose key the receiver derives from the master key, "
      "against a receiver given the derived key).")
    A("")
    A("A difference below 0 is the machine's noise: the plot draws it as 0 (the black line on each bar is the "
      "measured total, so a stack above its line shows such a band), the table prints it as measured.")
    A("")
    plot_breakdown(data, idxs, fig_dir / "breakdown.svg", cold=False)
    plot_breakdown(data, idxs, fig_dir / "breakdown_cold.svg", cold=True)
    A(f"![what each protocol spends beyond the AEAD, warm keys]({rel}/breakdown.svg)")
    A("")
    A(f"![cold keys: the key handling band]({rel}/breakdown_cold.svg)")
    A("")
    A("| backend | op | size | protocol, mode | total | " + " | ".join(BANDS) + " | AEAD share |")
    A("|---|---|---:|---|---:|" + "---:|" * (len(BANDS) + 1))
    for b in backends:
        for size in BREAKDOWN_SIZES:
            for op in ("encrypt", "decrypt"):
                for name, bands, total in breakdown(data, idxs[b], b, op, size):
                    cells = [f"{bands[x]:.0f}" if x in bands else "" for x in BANDS]
                    A(f"| {b} | {op} | {size} | {name} | {total:.0f} | " + " | ".join(cells)
                      + f" | {100 * bands['AEAD'] / total:.0f}% |")
    A("")
    # ---- why
    A("### Which costs least, and why")
    A("")
    A(why(idxs, data))
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
        if suite_family(k[2]) != "128" or k[3] == "cold" or "raw" in k[0] or "GMAC" in k[2] or "CBC" in k[2]:
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
      "simple IMIX above (7 : 4 : 1 of 40, 576, 1500 octets), the mix's packet rate x its mean cost. For scale: "
      f"the Intel IPsec study cited in issue 15 reports 100 Gbit/s of ESP with AES-128-CBC + HMAC-SHA1 from "
      f"**{INTEL_CORES} Xeon Platinum 8160 cores**, in VPP, whose multi-buffer crypto is intel-ipsec-mb. The "
      "study's packet sizes, NIC and software stack are not reproduced here: set its 12 cores beside these rows "
      "as an order of magnitude, not as a like-for-like figure.")
    A("")
    A("| protocol, mode | suite | " + " | ".join(f"{op}, {size}, {b}" for size in (1500, "IMIX")
                                        for op in ("encrypt", "decrypt") for b in backends) + " |")
    A("|---|---|" + "---:|" * (4 * len(backends)))
    keys = [k for k in idxs[backends[-1]] if not (k[3] == "cold" and k[1] != "optimized tunnel"
                                                  and not (k[0] == "PSP"))]
    keys += [k for b in backends for k in idxs[b] if k not in keys and k[3] != "cold"]
    for k in keys:
        cells = []
        for size in (1500, "IMIX"):
            for op in ("encrypt", "decrypt"):
                for b in backends:
                    o = idxs[b].get(k, {}).get(op, {})
                    c = cores_100g(o, size) if o and not (k[0].startswith("raw") and b != "openssl") else None
                    cells.append("" if c is None else f"{c:.1f}")
        A(f"| {label(k)} | {k[2]} | " + " | ".join(cells) + " |")
    A(f"| Intel study (Xeon 8160, ESP CBC+HMAC-SHA1, VPP on intel-ipsec-mb) | AES-128-CBC + HMAC-SHA1 | "
      f"{INTEL_CORES} (their traffic mix) |" + " |" * (4 * len(backends) - 1))
    A("")
    if not data["bench"].get("esp_cbc"):
        A("**ESP with AES-128-CBC + HMAC-SHA1-96 through the core: pending.** The core this run was built from "
          "has no ESP AES-CBC suite yet (it is being added on another branch), so the Intel study's suite appears "
          "here only as the raw EVP row, two OpenSSL passes without ESP around them. compare_bench measures ESP "
          "transport and tunnel rows of that suite on both backends by itself as soon as the core's "
          "`pe/encauth.h` exists (IKEv2 ENCR_AES_CBC 12 with AUTH_HMAC_SHA1_96 2, KEYMAT encryption key || "
          "integrity key); a re-run of `bench/compare` then fills these rows.")
    else:
        A("The *ESP ... AES-128-CBC + HMAC-SHA1-96* rows are the Intel study's suite through the core's ESP "
          "(RFC 3602 + RFC 2404, encrypt-then-MAC) on both backends; each IV is the sender's own AES-128 key "
          "over a stepping counter (RFC 3602 §2.3 unpredictability, NIST SP 800-38A Appendix C), which these rows "
          "include, and each packet is one job: ipsec-mb's multi-buffer lanes would pay only with packets in batches.")
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
    A("| backend | protocol | SA sharing | op | threads | packets/s (best) | Gbit/s inner | scaling vs 1 thread | packets/s per CPU-second | runs |")
    A("|---|---|---|---|---:|---:|---:|---:|---:|---|")
    for key, pts in mt.items():
        x1 = max(pts[1]["pps"])
        for n in sorted(pts):
            r = pts[n]
            b = max(r["pps"])
            A(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {n} | {fmt(b)} | {b * r['size'] * 8 / 1e9:.1f} | {b / x1 if x1 else 0:.2f}x | "
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
    A("| backend | protocol | SA sharing | op | fitted | " + " | ".join(f"{n} cores, Mpkt/s" for n in MODEL_CORES)
      + " | " + " | ".join(f"{n} cores, Gbit/s" for n in MODEL_CORES) + " |")
    A("|---|---|---|---|---|" + "---:|" * (2 * len(MODEL_CORES)))
    for key, p in params.items():
        fit = f"k = {p['kappa']:.3f}" if p["kind"] == "per-thread" else f"h = {p['h']:.3f}"
        c = curves[key]
        A(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {fit} | " + " | ".join(f"{c[n] / 1e6:.2f}" for n in MODEL_CORES)
          + " | " + " | ".join(f"{c[n] * 1500 * 8 / 1e9:.0f}" for n in MODEL_CORES) + " |")
    A("")
    plot_threads(data["bench"]["threads"], fig_dir / "threads.svg", curves)
    text = "\n".join(L) + "\n"
    out_md.write_text(text)
    return text


def why(idxs: Dict[str, dict], data: dict) -> str:
    """The ranking at each size, the fixed + per-octet fits and the cold-key costs, all from the measured rows."""
    out = []
    backends = list(idxs)
    for b, idx in idxs.items():
        for op in ("encrypt", "decrypt"):
            cells = []
            for s in SIZES:
                cands = [(best_ns(ops[op][s]), label(k)) for k, ops in idx.items()
                         if suite_family(k[2]) == "128" and k[3] != "cold" and "raw" not in k[0] and op in ops
                         and s in ops[op] and "GMAC" not in k[2] and "CBC" not in k[2]]
                if cands:
                    ns, who = min(cands)
                    near = sorted(w for n, w in cands if w != who and n <= ns * 1.05)
                    cells.append(f"{s}: {who} ({ns:.0f} ns" + (f"; within 5%: {', '.join(near)}" if near else "") + ")")
            out.append(f"- {b}: cheapest AES-GCM-128 {op} per packet (GMAC aside; rows within 5% of it are not told "
                       "apart by this machine's noise): " + "; ".join(cells) + ".")
    for b, idx in idxs.items():
        fits = []
        for k, ops in idx.items():
            if suite_family(k[2]) != "128" or "encrypt" not in ops or k[3] == "cold" or "tunnel" in k[1] and k[0] != "EESP":
                continue
            if k[0].startswith("raw") and b != "openssl":
                continue
            o = ops["encrypt"]
            if 64 in o and 9000 in o:
                lo, hi = best_ns(o[64]), best_ns(o[9000])
                slope = (hi - lo) / (9000 - 64)
                fits.append(f"{label(k)}: {lo - 64 * slope:.0f} ns + {slope:.3f} ns/octet")
        out.append(f"- {b}: encrypt cost as fixed + per-octet (a line through the 64- and 9000-octet figures): "
                   + "; ".join(fits) + ".")
    cold = []
    for b, idx in idxs.items():
        for ck, wk in BREAKDOWN_COLD:
            for op in ("encrypt", "decrypt"):
                c = idx.get(ck, {}).get(op, {}).get(64)
                w = idx.get(wk, {}).get(op, {}).get(64)
                if c and w:
                    cold.append(f"{b} {ck[0]} {ck[1]} {op} +{best_ns(c) - best_ns(w):.0f} ns")
    out.append("- Cold keys at 64 octets, AES-GCM-128, over the warm row: " + "; ".join(cold) + ". EESP's cold Sub "
               "SA pays an HKDF-SHA-256 Expand and an AEAD key set-up; PSP's cold SPI an AES-CMAC derivation and an "
               "AEAD key set-up. The backend moves the AEAD key set-up; the KDFs are the core's and OpenSSL's.")
    shares = []
    for b, idx in idxs.items():
        for size in BREAKDOWN_SIZES:
            for op in ("encrypt", "decrypt"):
                bars = [x for x in breakdown(data, idx, b, op, size) if "cold" not in x[0]]
                if bars:
                    sh = [x[1]["AEAD"] / x[2] for x in bars]
                    aead = [x[1]["AEAD"] for x in bars]
                    shares.append(f"{b} {op} {size} octets: AEAD {min(aead):.0f}-{max(aead):.0f} ns, "
                                  f"{min(sh):.0%}-{max(sh):.0%} of the packet")
    out.append("- Where the time goes (the warm bars of *What each protocol spends beyond the AEAD*, range over "
               "the protocols and modes): " + "; ".join(shares) + ". What is not AEAD is the protocol's own work "
               "(header, look-up, replay, framing), where ESP, EESP and PSP differ; the backend changes the AEAD "
               "band and leaves that work as it is. PSP v2/v3 (GMAC) skip the CTR pass and only hash, at the "
               "price of no confidentiality.")
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
    ap.add_argument("--backends", default="openssl,ipsec-mb",
                    help="crypto backends to run, in one process (pe_backend_set between sections)")
    args = ap.parse_args(argv)
    out_dir = Path(args.out_dir)
    fig_dir = out_dir / "comparison"
    fig_dir.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        data = json.loads(Path(args.render_only).read_text())
        if data.get("schema") != SCHEMA or data["bench"].get("schema") != "compare_bench/2":
            raise SystemExit(f"compare: {args.render_only}: not a {SCHEMA} file")
        beside = fig_dir / "compare.json"
        if not beside.exists() or not beside.samefile(args.render_only):
            shutil.copyfile(args.render_only, beside)  # the doc links the JSON it came from
    else:
        data = run(build(), args.quick, args.min_time, args.repeats, args.threads, args.backends)
        (fig_dir / "compare.json").write_text(json.dumps(data, indent=1) + "\n")
    render(data, out_dir / "comparison.md", fig_dir)
    log(f"compare: wrote {out_dir / 'comparison.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
