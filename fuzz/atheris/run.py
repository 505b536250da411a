#!/usr/bin/env python3
"""Run the atheris harnesses (fuzz/atheris/fuzz_*.py).

    .venv/bin/python fuzz/atheris/run.py --seconds 60            # every harness, 60 s each
    .venv/bin/python fuzz/atheris/run.py --seconds 600 decrypt keyfile -j 2
    .venv/bin/python fuzz/atheris/run.py --replay                # each corpus once: a fast regression run

Fuzzing starts from the committed seeds (fuzz/atheris/corpus/<harness>/,
read only) and keeps what it finds in build/atheris/<harness>/corpus; crash
inputs land in build/atheris/<harness>/ as crash-*, timeout-*, oom-*.  The
table at the end gives, per harness: executions, executions per second,
coverage (atheris's count of Python edges in pecore/pypsp/pyeesp/pyesp: the
prebuilt atheris wheel does not see inside the C extension, which the C
libFuzzer harnesses in fuzz/ cover), features, corpus size and crashes.
Exit status 1 when any harness crashed or failed to run.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")
WORK = os.path.join(ROOT, "build", "atheris")
HARNESSES = sorted(os.path.basename(p)[len("fuzz_") : -len(".py")] for p in glob.glob(os.path.join(HERE, "fuzz_*.py")))

_STATUS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)")


@dataclass
class Result:
    harness: str
    mode: str
    rc: int = 0
    seconds: float = 0.0
    execs: int = 0
    cov: Optional[int] = None
    ft: Optional[int] = None
    corpus: Optional[int] = None
    inputs: int = 0
    crashes: List[str] = field(default_factory=list)
    log: str = ""
    command: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.crashes


def _python() -> str:
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def run_one(name: str, seconds: int, replay: bool, extra: List[str], rss_limit_mb: int) -> Result:
    work = os.path.join(WORK, name)
    seeds = os.path.join(CORPUS, name)
    os.makedirs(work, exist_ok=True)
    for old in glob.glob(os.path.join(work, "*-*")):  # artifacts of an earlier run
        if os.path.isfile(old) and os.path.basename(old).split("-")[0] in ("crash", "timeout", "oom", "leak", "slow"):
            os.remove(old)
    found = os.path.join(work, "corpus")
    os.makedirs(found, exist_ok=True)
    harness = os.path.join(HERE, f"fuzz_{name}.py")
    args = [_python(), harness, f"-artifact_prefix={work}/", f"-rss_limit_mb={rss_limit_mb}", "-print_final_stats=1"]
    if replay:
        args += ["-runs=0", seeds]
    else:
        args += [f"-max_total_time={seconds}", "-timeout=25", found, seeds]
    args += extra
    res = Result(name, "replay" if replay else "fuzz", command=" ".join(os.path.relpath(a, ROOT) if a.startswith(ROOT) else a
                                                                       for a in args))
    res.inputs = len(os.listdir(seeds)) if os.path.isdir(seeds) else 0
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    res.seconds = time.monotonic() - t0
    res.rc = proc.returncode
    res.log = proc.stdout
    with open(os.path.join(work, f"{res.mode}.log"), "w") as f:
        f.write(proc.stdout)
    for line in proc.stdout.splitlines():
        m = _STATUS.match(line)
        if m:
            res.execs, res.cov, res.ft, res.corpus = (int(x) for x in m.groups())
        m = _STAT.match(line)
        if m and m.group(1) == "number_of_executed_units":
            res.execs = int(m.group(2))
    res.crashes = sorted(p for p in glob.glob(os.path.join(work, "*"))
                         if os.path.isfile(p) and os.path.basename(p).split("-")[0] in ("crash", "timeout", "oom", "leak"))
    return res


def _fmt(x) -> str:
    return "-" if x is None else f"{x:,}" if isinstance(x, int) else str(x)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("harness", nargs="*", help=f"harness names (default: all of {', '.join(HARNESSES)})")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--seconds", type=int, help="fuzz each harness for this many seconds")
    g.add_argument("--replay", action="store_true", help="run each harness once over its committed corpus")
    p.add_argument("-j", "--jobs", type=int, default=1, help="harnesses run at once (default 1)")
    p.add_argument("--rss-limit-mb", type=int, default=2048)
    p.add_argument("--fresh", action="store_true", help="forget what earlier runs added to build/atheris/*/corpus")
    p.add_argument("-v", "--verbose", action="store_true", help="print each harness's whole log")
    p.add_argument("--libfuzzer", action="append", default=[], metavar="FLAG",
                   help="extra libFuzzer flag, e.g. --libfuzzer=-max_len=8192 (repeatable)")
    args = p.parse_args(argv)

    names = [n.removeprefix("fuzz_").removesuffix(".py") for n in args.harness] or HARNESSES
    unknown = [n for n in names if n not in HARNESSES]
    if unknown:
        p.error(f"unknown harness {', '.join(unknown)}; one of {', '.join(HARNESSES)}")
    if subprocess.run([_python(), "-c", "import atheris"], capture_output=True).returncode != 0:
        print("atheris is not installed: .venv/bin/pip install -e '.[fuzz]' --no-build-isolation", file=sys.stderr)
        return 2
    if args.fresh:
        for n in names:
            shutil.rmtree(os.path.join(WORK, n, "corpus"), ignore_errors=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, n, args.seconds or 0, args.replay, args.libfuzzer, args.rss_limit_mb)
                   for n in names]
        results = []
        for fut in futures:
            r = fut.result()
            results.append(r)
            if args.verbose or not r.ok:
                tail = r.log if args.verbose else "\n".join(r.log.splitlines()[-40:])
                print(f"----- {r.harness} ({r.mode}) -----\n{tail}")
            status = "ok" if r.ok else f"FAILED (exit {r.rc}, {len(r.crashes)} crash files)"
            print(f"{r.harness}: {status}, {r.execs:,} executions in {r.seconds:.0f} s", flush=True)

    head = ("harness", "mode", "seconds", "executions", "exec/s", "cov", "ft", "corpus", "crashes")
    rows = [(r.harness, r.mode, f"{r.seconds:.0f}", _fmt(r.execs), _fmt(int(r.execs / r.seconds) if r.seconds else 0),
             _fmt(r.cov), _fmt(r.ft), _fmt(r.inputs if r.mode == "replay" else r.corpus), str(len(r.crashes)))
            for r in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    for r in results:
        for c in r.crashes:
            print(f"crash input: {os.path.relpath(c, ROOT)}  (reproduce: {_python()} {os.path.relpath(os.path.join(HERE, f'fuzz_{r.harness}.py'), ROOT)} {os.path.relpath(c, ROOT)})")
    bad = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
