"""Per-thread CPU of the capture path, old tree against new: pypsp.decrypt_capture of 100,000 Ethernet frames of
1500 octets (the capture_ab.py files) to a new file, jobs=1 and jobs=2, each run in its own process, interleaved.

    git archive 3cd6d91 | tar -x -C /tmp/old && (cd /tmp/old && python pecore/_build.py)
    python bench/capture_threads.py /tmp/old . 5 [TMPDIR]

For each tree and jobs: best and median wall, CPU of every thread (process time) and of the calling thread alone
(thread time: the run's C loop holds it, the GIL released).  Other jobs on the machine stretch wall time; the
calling thread's CPU is what bounds a parallel run once every thread has a CPU of its own.  CPU pressure
(/proc/pressure/cpu avg10) and whether a second CPU is free (two hashing threads against one) are printed before
and after.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

PY = sys.executable
TREES = {"old": os.path.abspath(sys.argv[1]), "new": os.path.abspath(sys.argv[2])}
D = tempfile.mkdtemp(prefix="pe-capture-threads-", dir=sys.argv[4] if len(sys.argv) > 4 else None)
HERE = os.path.dirname(os.path.abspath(__file__))
RUN = r'''
import os, sys, time, pypsp
src, dst, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])
assert pypsp.__file__.startswith(sys.argv[4]), f"{pypsp.__file__} is not from {sys.argv[4]}"
if os.path.exists(dst):
    os.unlink(dst)
os.sync()
t, c, th = time.perf_counter(), time.process_time(), time.thread_time()
pypsp.decrypt_capture(pypsp.Decryptor(keys={(0x1000, 0): bytes(range(16))}), src, dst, jobs=jobs)
print(time.perf_counter() - t, time.process_time() - c, time.thread_time() - th)
'''


def free_cpus() -> str:
    """Two threads hashing against one (hashlib lets go of the GIL): about 1.0x when a second CPU is free, 2.0x
    when another job holds it (a single busy loop elsewhere barely shows in /proc/pressure/cpu)."""
    import hashlib
    import threading
    import time
    data = bytes(1 << 20)

    def work() -> None:
        for _ in range(100):
            hashlib.sha256(data).digest()

    walls = []
    for n in (1, 2):
        t = time.perf_counter()
        ts = [threading.Thread(target=work) for _ in range(n)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        walls.append(time.perf_counter() - t)
    return f"{walls[1] / walls[0]:.2f}x"


def pressure() -> str:
    try:
        with open("/proc/pressure/cpu") as f:
            return f.readline().split()[1]
    except OSError:
        return "?"


def main() -> None:
    # The capture_ab.py generator writes the same two files.
    gen = open(os.path.join(HERE, "capture_ab.py")).read().split("GEN = r'''", 1)[1].split("'''", 1)[0]
    clear, enc = f"{D}/clear.pcap", f"{D}/enc.pcap"
    subprocess.run([PY, "-c", gen, clear, enc], cwd=D, env={**os.environ, "PYTHONPATH": TREES["new"]}, check=True)
    print("CPU pressure before:", pressure(), "; 2 hashing threads vs 1, wall:", free_cpus())
    res = {(t, j): [] for t in TREES for j in (1, 2)}
    outs = {}
    for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
        order = [(t, j) for j in (1, 2) for t in (("old", "new") if rep % 2 == 0 else ("new", "old"))]
        for t, j in order:
            out = f"{D}/out-{t}-{j}.pcap"
            # cwd: `python -c` puts it ahead of PYTHONPATH (from the repository every tree was the repository's)
            p = subprocess.run([PY, "-c", RUN, enc, out, str(j), TREES[t]], cwd=D,
                               env={**os.environ, "PYTHONPATH": TREES[t]}, capture_output=True, text=True, check=True)
            res[(t, j)].append(tuple(float(x) for x in p.stdout.split()))
            outs[(t, j)] = out
    print("CPU pressure after:", pressure(), "; 2 hashing threads vs 1, wall:", free_cpus())
    ref = open(outs[("old", 1)], "rb").read()
    for k, path in outs.items():
        assert open(path, "rb").read() == ref, f"{k}: output differs"
    print("| tree | jobs | best wall | median wall | CPU, all threads (best) | calling thread CPU (best, median) |")
    print("|---|---:|---:|---:|---:|---:|")
    for (t, j), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0] != "old")):
        walls, cpus, callers = zip(*v)
        print(f"| {t} | {j} | {min(walls) * 1e3:.0f} ms | {statistics.median(walls) * 1e3:.0f} ms | "
              f"{min(cpus) * 1e3:.0f} ms | {min(callers) * 1e3:.0f} ms, {statistics.median(callers) * 1e3:.0f} ms |")


try:
    main()
finally:
    shutil.rmtree(D, ignore_errors=True)  # 880 MB of captures
