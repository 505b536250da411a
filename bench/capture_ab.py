"""A/B of the capture path between two trees: pypsp.decrypt_capture and encrypt_capture, 100,000 Ethernet frames of
1500 octets, to a file and to /dev/null, each tree in its own processes, alternating; best and median.

    git archive c526bbb | tar -x -C /tmp/old && (cd /tmp/old && python pecore/_build.py)
    python bench/capture_ab.py /tmp/old . 7 [TMPDIR]
    PE_AB_JOBS=1,2 python bench/capture_ab.py /tmp/old . 5     # also by jobs= (trees that have it)

Each tree needs its extension built in place (pecore/_build.py).  Without PE_AB_JOBS the runs use each
tree's default (every CPU since --jobs exists).
"""
import os
import statistics
import subprocess
import sys
import tempfile

PY = sys.executable
TREES = {"old": os.path.abspath(sys.argv[1]), "new": os.path.abspath(sys.argv[2])}
D = tempfile.mkdtemp(prefix="pe-capture-ab-", dir=sys.argv[4] if len(sys.argv) > 4 else None)
GEN = r'''
import sys, struct, pypsp
from pecore.capture import CaptureWriter
key = bytes(range(16))
payload = bytes(1500 - 28)
ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 1500, 1, 0, 64, 17, 0, bytes([10,0,0,1]), bytes([10,0,0,2])))
frame = bytes.fromhex("020000000002020000000001") + b"\x08\x00" + bytes(ip) + struct.pack("!HHHH", 1, 2, 1480, 0) + payload
with CaptureWriter(sys.argv[1], 1, "pcap") as w:
    for i in range(100000):
        w.write(frame, (i, 0))
pypsp.encrypt_capture(pypsp.Encryptor(key=key, spi=0x1000, version=0), sys.argv[1], sys.argv[2])
'''
# As bench/run's capture section: the previous output deleted and sync() called outside the timer, so no
# writeback left over from an earlier run lands in this one.
RUN = r'''
import os, sys, time, pypsp
key = bytes(range(16))
op, src, dst = sys.argv[1:4]
assert pypsp.__file__.startswith(sys.argv[5]), f"{pypsp.__file__} is not from {sys.argv[5]}"
if dst != os.devnull and os.path.exists(dst):
    os.unlink(dst)
os.sync()
t = time.perf_counter()
kw = {} if sys.argv[4] == "-" else {"jobs": int(sys.argv[4])}
if op == "decrypt":
    pypsp.decrypt_capture(pypsp.Decryptor(keys={(0x1000, 0): key}), src, dst, **kw)
else:
    pypsp.encrypt_capture(pypsp.Encryptor(key=key, spi=0x1000, version=0), src, dst, **kw)
print(time.perf_counter() - t)
'''
clear, enc = f"{D}/clear.pcap", f"{D}/enc.pcap"
if not os.path.exists(enc):
    subprocess.run([PY, "-c", GEN, clear, enc], cwd=D, env={**os.environ, "PYTHONPATH": TREES["new"]}, check=True)
JOBS = os.environ.get("PE_AB_JOBS", "-").split(",")
res = {(t, op, dst, j): [] for t in TREES for op in ("decrypt", "encrypt") for dst in ("file", "null") for j in JOBS}
for rep in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
    for op in ("decrypt", "encrypt"):
        for dst in ("file", "null"):
            for j in JOBS:
                for t in (("old", "new") if rep % 2 == 0 else ("new", "old")):
                    src = enc if op == "decrypt" else clear
                    out = os.devnull if dst == "null" else f"{D}/out.pcap"
                    # cwd: `python -c` puts it first on sys.path, ahead of PYTHONPATH: run from the repository,
                    # every tree would import the repository's own pecore.
                    p = subprocess.run([PY, "-c", RUN, op, src, out, j, TREES[t]], cwd=D,
                                       env={**os.environ, "PYTHONPATH": TREES[t]},
                                       capture_output=True, text=True, check=True)
                    res[(t, op, dst, j)].append(float(p.stdout))
for (t, op, dst, j), v in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][3], kv[0][0])):
    jobs = "" if j == "-" else f" jobs={j}"
    print(f"{op:8} {dst:5}{jobs} {t}: best {100000 / min(v) / 1e6:.3f} M pkt/s, "
          f"median {100000 / statistics.median(v) / 1e6:.3f} M pkt/s  ({len(v)} runs)")
for name in ("clear.pcap", "enc.pcap", "out.pcap"):
    if os.path.exists(f"{D}/{name}"):
        os.unlink(f"{D}/{name}")
os.rmdir(D)
