"""Traffic through the live endpoint (docs/tunnel.md), one command: bench/tunnel.

Two network namespaces joined by a veth pair (documentation addresses only: 198.51.100.0/24 outside,
192.0.2.0/24 inside), then iperf3 through each contender, all in one run so that ratios are side by side:

- the veth with no tunnel, and wireguard-go (a userspace TUN tunnel) when it is installed;
- ESP, EESP and PSP over UDP through `pyesp|pyeesp|pypsp tunnel`, with 1 and 2 workers: ESP with an SA per
  worker and with one SA shared by both (RFC 9611's comparison), EESP with Sub SAs per worker, PSP with an SPI
  per worker.

Measured: TCP with 1 and 4 streams; UDP with 64-, 512- and 1400-octet datagrams at the highest rate that
loses under 1% (a ladder of rates, then a bisection); CPU seconds per gigabit, of the whole machine (from
/proc/stat) and of the two endpoints (their utime + stime).  Writes docs/tunnel/bench.json, two plots beside
it, and the figures section of docs/tunnel.md (between its bench/tunnel markers), naming the machine.
Every traffic loop is bounded in count and time.  Needs root, iproute2 and iperf3.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
PY = os.environ.get("PYTHON") or (str(ROOT / ".venv/bin/python") if (ROOT / ".venv/bin/python").exists()
                                  else sys.executable)
NS_A, NS_B = f"pe-bench-a{os.getpid()}", f"pe-bench-b{os.getpid()}"
OUT_A, OUT_B, IN_A, IN_B = "198.51.100.1", "198.51.100.2", "192.0.2.1", "192.0.2.2"
BEGIN, END = "<!-- bench/tunnel: begin (generated; do not edit by hand) -->", "<!-- bench/tunnel: end -->"
UDP_SIZES = (64, 512, 1400)


def log(msg: str) -> None:
    print(f"bench/tunnel: {msg}", file=sys.stderr, flush=True)


def sh(*args: str, ns: Optional[str] = None, timeout: float = 60, check: bool = True) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip() or p.stdout.strip()}")
    return p.stdout


def netns_up() -> None:
    for ns in (NS_A, NS_B):
        sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", "va", "netns", NS_A, "type", "veth", "peer", "name", "vb", "netns", NS_B)
    for ns, dev, addr in ((NS_A, "va", OUT_A), (NS_B, "vb", OUT_B)):
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "up")


def netns_down() -> None:
    for ns in (NS_A, NS_B):
        for pid in sh("ip", "netns", "pids", ns, check=False).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        sh("ip", "netns", "del", ns, check=False)


def key_file(path: Path) -> None:
    h = lambda n: os.urandom(n).hex()  # noqa: E731
    lines = [f"psp-master key0={h(32)} key1={h(32)}"]
    for spi in (0x100, 0x101, 0x200, 0x201):
        lines.append(f"esp-sa spi={spi:#x} suite=aes-gcm-16 key={h(20)} mode=tunnel")
        lines.append(f"psp-sa spi={spi:#x} version=0 mode=tunnel")
    for spi in (0x100, 0x200):
        lines.append(f"eesp-sa spi={spi:#x} suite=aes-gcm-16 root-key={h(32)} sskdf=hkdf-sha256 mode=tunnel")
    path.write_text("\n".join(lines) + "\n")


def cpu_busy() -> float:
    """Seconds of CPU time the machine has spent busy (all CPUs), from /proc/stat."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = f[3] + f[4]
    return (sum(f[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class Contender:
    """Something to push traffic through: started, measured through `target`, stopped."""

    name = ""
    target = IN_B
    pids: List[int] = []

    def start(self) -> None: ...

    def stop(self) -> dict:
        return {}


class Veth(Contender):
    name, target = "veth, no tunnel", OUT_B


class WireGuardGo(Contender):
    name = "wireguard-go"

    def start(self) -> None:
        keys = {ns: sh("wg", "genkey").strip() for ns in (NS_A, NS_B)}
        pubs = {ns: subprocess.run(["wg", "pubkey"], input=k, capture_output=True, text=True).stdout.strip()
                for ns, k in keys.items()}
        self.procs = []
        # one interface name per namespace: wireguard-go's control socket (/var/run/wireguard/NAME.sock) is not
        # in a network namespace
        for ns, peer, dev, port, pport, addr, paddr in ((NS_A, NS_B, "wga", 51820, 51821, IN_A, OUT_B),
                                                        (NS_B, NS_A, "wgb", 51821, 51820, IN_B, OUT_A)):
            self.procs.append(subprocess.Popen(["ip", "netns", "exec", ns, "wireguard-go", "-f", dev],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_dev(ns, dev)
            with tempfile.NamedTemporaryFile("w", delete=False) as f:
                f.write(keys[ns])
            sh("wg", "set", dev, "private-key", f.name, "listen-port", str(port), "peer", pubs[peer],
               "allowed-ips", "192.0.2.0/24", "endpoint", f"{paddr}:{pport}", ns=ns)
            os.unlink(f.name)
            sh("ip", "addr", "add", f"{addr}/24", "dev", dev, ns=ns)
            sh("ip", "link", "set", dev, "up", ns=ns)
        self.pids = [p.pid for p in self.procs]

    def stop(self) -> dict:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        return {}


def wait_dev(ns: str, dev: str, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if subprocess.run(["ip", "-n", ns, "link", "show", dev], capture_output=True).returncode == 0:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{dev} did not appear in {ns}")


class Endpoint(Contender):
    def __init__(self, proto: str, workers: int, spis_a: List[int], spis_b: List[int], note: str, keys: Path,
                 tmp: Path) -> None:
        self.proto, self.workers, self.spis = proto, workers, (spis_a, spis_b)
        self.name = f"{proto.upper()}, {workers} worker{'s' if workers > 1 else ''}{', ' + note if note else ''}"
        self.keys, self.tmp = keys, tmp

    def start(self) -> None:
        self.procs = []
        for ns, spis, local, peer, inner in ((NS_A, self.spis[0], OUT_A, OUT_B, IN_A),
                                             (NS_B, self.spis[1], OUT_B, OUT_A, IN_B)):
            cmd = ["ip", "netns", "exec", ns, PY, "-m", f"py{self.proto}", "tunnel", "--key-file", str(self.keys),
                   "--dev", "tun0", "--local", local, "--peer", peer, "--workers", str(self.workers),
                   "--max-seconds", "600", "--stats", str(self.tmp / f"{ns}.json")]
            for s in spis:
                cmd += ["--spi", f"{s:x}"]
            self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
            wait_dev(ns, "tun0")
            sh("ip", "addr", "add", f"{inner}/24", "dev", "tun0", ns=ns)
        self.pids = [p.pid for p in self.procs]

    def stop(self) -> dict:
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        errs = []
        for p in self.procs:
            try:
                _, err = p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"{self.name}: the endpoint exited with {p.returncode}: {err.strip()}")
            errs.append(err)
        stats = {}
        for ns in (NS_A, NS_B):
            f = self.tmp / f"{ns}.json"
            stats[ns] = json.loads(f.read_text())
            f.unlink()
        return {"drops": {ns: {**s["sent"]["drops"], **s["received"]["drops"]} for ns, s in stats.items()}}


def iperf(args: List[str], secs: float) -> dict:
    """One iperf3 client run in A against a one-off server in B; its JSON."""
    server = subprocess.Popen(["ip", "netns", "exec", NS_B, "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        out = sh("iperf3", *args, "-t", str(secs), "-J", ns=NS_A, timeout=secs + 30, check=False)
        return json.loads(out) if out.strip() else {"error": "no output"}
    finally:
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def tcp(c: Contender, streams: int, secs: float) -> dict:
    cpu0, own0 = cpu_busy(), sum(proc_cpu(p) for p in c.pids)
    r = iperf(["-c", c.target, "-P", str(streams)], secs)
    cpu1, own1 = cpu_busy(), sum(proc_cpu(p) for p in c.pids)
    if "error" in r:
        return {"error": r["error"]}
    end = r["end"]
    gbps = end["sum_received"]["bits_per_second"] / 1e9
    gbit = gbps * end["sum_received"]["seconds"]
    return {"gbps": gbps, "retransmits": end["sum_sent"].get("retransmits", 0),
            "cpu_s_per_gbit": (cpu1 - cpu0) / gbit if gbit else None,
            "endpoint_cpu_s_per_gbit": (own1 - own0) / gbit if gbit and c.pids else None,
            "cpu_share_endpoints": (own1 - own0) / (cpu1 - cpu0) if cpu1 > cpu0 and c.pids else None}


def udp_once(c: Contender, size: int, mbps: float, secs: float) -> Optional[dict]:
    r = iperf(["-c", c.target, "-u", "-l", str(size), "-b", f"{mbps:.3f}M"], secs)
    if "error" in r:
        return None
    s = r["end"]["sum"]
    got = s["packets"] - s["lost_packets"]
    return {"offered_mbps": mbps, "loss": s["lost_percent"], "pps": got / s["seconds"] if s["seconds"] else 0.0}


def udp(c: Contender, size: int, secs: float, max_runs: int) -> dict:
    """The highest offered rate with under 1% loss: doubling from 20 Mbit/s, then bisecting; max_runs at most."""
    good, bad, runs, rate = None, None, 0, 20.0
    while runs < max_runs and rate <= 20000:
        r = udp_once(c, size, rate, secs)
        runs += 1
        if r and r["loss"] < 1.0:
            good = r
            if bad:
                break
            rate *= 2
        else:
            bad = rate
            break
    lo = good["offered_mbps"] if good else 0.0
    while bad and runs < max_runs and bad - lo > max(lo * 0.1, 1.0):
        mid = (lo + bad) / 2
        r = udp_once(c, size, mid, secs)
        runs += 1
        if r and r["loss"] < 1.0:
            good, lo = r, mid
        else:
            bad = mid
    return {"size": size, "runs": runs, **(good or {"offered_mbps": 0.0, "loss": None, "pps": 0.0})}


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    iperf_v = sh("iperf3", "--version", check=False).splitlines()[0] if shutil.which("iperf3") else ""
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(), "iperf3": iperf_v,
            "load_average_at_start": os.getloadavg()}


def render(res: dict, out_dir: Path) -> str:
    m = res["machine"]
    rows = res["rows"]
    veth = next(r for r in rows if r["name"].startswith("veth"))
    wg = next((r for r in rows if r["name"] == "wireguard-go"), None)

    def g(r, k):
        return r.get(k, {}).get("gbps")

    lines = [BEGIN, "", f"From one run of `bench/tunnel{res['args']}` on {res['date']}: {m['cpu']}, {m['cpus']} CPUs, "
             f"Linux {m['kernel']}, {m['iperf3']}; load average {m['load_average_at_start'][0]:.2f} at the start.  "
             "Both namespaces, both endpoints and iperf3's two ends share the machine's CPUs.", "",
             "| contender | TCP 1 stream, Gbit/s | retransmits | TCP 4 streams, Gbit/s | CPU s/Gbit (machine) | "
             "CPU s/Gbit (endpoints) | endpoints' share of the CPU | of the veth (1 stream) | "
             "× wireguard-go (1 stream) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        t1, t4 = r.get("tcp1", {}), r.get("tcp4", {})
        f = lambda x, nd=2: "" if x is None else f"{x:,.{nd}f}"  # noqa: E731
        ratio = f"{100 * g(r, 'tcp1') / g(veth, 'tcp1'):.0f}%" if g(r, "tcp1") and g(veth, "tcp1") else ""
        xwg = f"{g(r, 'tcp1') / g(wg, 'tcp1'):.1f}×" if wg and g(r, "tcp1") and g(wg, "tcp1") else ""
        share = t1.get("cpu_share_endpoints")
        lines.append(f"| {r['name']} | {f(t1.get('gbps'))} | {t1.get('retransmits', '')} | {f(t4.get('gbps'))} | "
                     f"{f(t1.get('cpu_s_per_gbit'))} | {f(t1.get('endpoint_cpu_s_per_gbit'))} | "
                     f"{'' if share is None else f'{100 * share:.0f}%'} | {ratio} | {xwg} |")
    lines += ["", "UDP at the highest offered rate that lost under 1% (iperf3 `-u -l SIZE -b RATE`; delivered "
              "datagrams per second):", "", "| contender | " + " | ".join(f"{s} octets, packets/s" for s in UDP_SIZES)
              + " |", "|---|" + "---:|" * len(UDP_SIZES)]
    for r in rows:
        if r.get("udp"):
            lines.append(f"| {r['name']} | " + " | ".join(f"{u['pps']:,.0f} ({u['offered_mbps']:,.0f} Mbit/s)"
                                                       for u in r["udp"]) + " |")
    lines += ["", "Targets (ratios from this run):", "", "| target | measured | result |", "|---|---:|---|"]
    for t in res["targets"]:
        lines.append(f"| {t['target']} | {t['measured']} | {'pass' if t['ok'] else 'FAIL'} |")
    lines += ["", "![TCP](tunnel/tcp.svg)", "", "![UDP](tunnel/udp.svg)", "", END]
    return "\n".join(lines)


def plots(res: dict, out_dir: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "bench-tunnel"
    import matplotlib.pyplot as plt
    rows = res["rows"]
    names = [r["name"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r.get("tcp1", {}).get("gbps") or 0 for r in rows], 0.4, label="1 stream")
    ax.bar([x + 0.2 for x in xs], [r.get("tcp4", {}).get("gbps") or 0 for r in rows], 0.4, label="4 streams")
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("TCP Gbit/s (iperf3)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "tcp.svg", metadata={"Date": None})
    plt.close(fig)
    urows = [r for r in rows if r.get("udp")]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    w = 0.8 / len(UDP_SIZES)
    for i, s in enumerate(UDP_SIZES):
        ax.bar([x + (i - 1) * w for x in range(len(urows))], [r["udp"][i]["pps"] / 1e3 for r in urows], w,
               label=f"{s} octets")
    ax.set_xticks(list(range(len(urows))), [r["name"] for r in urows], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("thousand datagrams/s delivered, < 1% lost")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "udp.svg", metadata={"Date": None})
    plt.close(fig)


def targets(rows: List[dict]) -> List[dict]:
    by = {r["name"]: r for r in rows}
    veth, wg = by["veth, no tunnel"], by.get("wireguard-go")
    out = []
    for proto in ("ESP", "EESP", "PSP"):
        r = by.get(f"{proto}, 1 worker")
        if not r or not r.get("tcp1", {}).get("gbps"):
            continue
        v = r["tcp1"]["gbps"]
        out.append({"target": f"{proto}: one TCP stream >= 25% of the veth's", "measured":
                    f"{100 * v / veth['tcp1']['gbps']:.0f}%", "ok": v >= 0.25 * veth["tcp1"]["gbps"]})
        if wg and wg.get("tcp1", {}).get("gbps"):
            out.append({"target": f"{proto}: one TCP stream >= 8x wireguard-go's", "measured":
                        f"{v / wg['tcp1']['gbps']:.1f}x", "ok": v >= 8 * wg["tcp1"]["gbps"]})
        u64 = next((u for u in r.get("udp", []) if u["size"] == 64), None)
        if u64:
            out.append({"target": f"{proto}: 64-octet UDP >= 300,000 packets/s with < 1% lost",
                        "measured": f"{u64['pps']:,.0f}", "ok": u64["pps"] >= 300000})
        two = by.get(f"{proto}, 2 workers, {'Sub SAs per worker' if proto == 'EESP' else 'an SA per worker'}")
        if two and two.get("tcp4", {}).get("gbps") and r.get("tcp4", {}).get("gbps"):
            x = two["tcp4"]["gbps"] / r["tcp4"]["gbps"]
            out.append({"target": f"{proto}: 2 workers >= 1.5x one on 4 streams", "measured": f"{x:.2f}x",
                        "ok": x >= 1.5})
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/tunnel", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="per TCP run (default 5)")
    ap.add_argument("--udp-seconds", type=float, default=2.0, help="per UDP run (default 2)")
    ap.add_argument("--udp-runs", type=int, default=10, help="UDP runs per size at most (default 10)")
    ap.add_argument("--quick", action="store_true", help="1-second runs, 4 UDP runs per size (a smoke test)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="where tunnel.md and tunnel/ are (default docs/)")
    a = ap.parse_args(argv)
    if a.quick:
        a.seconds, a.udp_seconds, a.udp_runs = 1.0, 1.0, 4
    if os.geteuid() != 0 or not shutil.which("iperf3") or not shutil.which("ip"):
        print("bench/tunnel: needs root, iproute2 and iperf3", file=sys.stderr)
        return 2
    args = "" if not argv else " " + " ".join(argv)
    tmp = Path(tempfile.mkdtemp(prefix="pe-bench-tunnel-"))
    keys = tmp / "keys"
    key_file(keys)
    contenders: List[Contender] = [Veth()]
    if shutil.which("wireguard-go") and shutil.which("wg"):
        contenders.append(WireGuardGo())
    else:
        log("wireguard-go or wg is not installed: no wireguard-go row")
    for proto in ("esp", "eesp", "psp"):
        contenders.append(Endpoint(proto, 1, [0x100], [0x200], "", keys, tmp))
    contenders += [Endpoint("esp", 2, [0x100, 0x101], [0x200, 0x201], "an SA per worker", keys, tmp),
                   Endpoint("esp", 2, [0x100], [0x200], "one SA shared", keys, tmp),
                   Endpoint("eesp", 2, [0x100], [0x200], "Sub SAs per worker", keys, tmp),
                   Endpoint("psp", 2, [0x100, 0x101], [0x200, 0x201], "an SA per worker", keys, tmp)]
    res = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": args, "rows": []}
    netns_down()
    netns_up()
    try:
        for c in contenders:
            log(f"{c.name} ...")
            c.start()
            try:
                row = {"name": c.name, "tcp1": tcp(c, 1, a.seconds), "tcp4": tcp(c, 4, a.seconds)}
                if not isinstance(c, Endpoint) or c.workers == 1:
                    row["udp"] = [udp(c, s, a.udp_seconds, a.udp_runs) for s in UDP_SIZES]
            finally:
                row_stop = c.stop()
            row.update(row_stop)
            res["rows"].append(row)
    finally:
        netns_down()
        shutil.rmtree(tmp, ignore_errors=True)
    res["targets"] = targets(res["rows"])
    out_dir = a.out / "tunnel"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp_json = out_dir / "bench.json.tmp"
    tmp_json.write_text(json.dumps(res, indent=1) + "\n")
    os.replace(tmp_json, out_dir / "bench.json")
    plots(res, out_dir)
    md = a.out / "tunnel.md"
    text = md.read_text() if md.exists() else ""
    section = render(res, out_dir)
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Figures (bench/tunnel)\n\n" + section + "\n"
    tmp_md = md.with_suffix(".md.tmp")
    tmp_md.write_text(text)
    os.replace(tmp_md, md)
    print(section)
    return 1 if a.strict and not all(t["ok"] for t in res["targets"]) else 0


if __name__ == "__main__":
    sys.exit(main())
