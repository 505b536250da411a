"""The CLIs hold up: Ctrl-C and SIGTERM stop a bulk run and leave no half-written output, a reader that closes
the pipe early ends the run quietly, and every subcommand checks the same options the same way."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cliutil import default_sigint

ROOT = Path(__file__).resolve().parents[2]
MK = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, cwd=str(ROOT), **kw)


@pytest.fixture(scope="module")
def big_capture(tmp_path_factory) -> Path:
    """Enough traffic that encrypting it takes a good while (the signal lands in the middle)."""
    d = tmp_path_factory.mktemp("big")
    path = d / "clear.pcap"
    p = subprocess.run([sys.executable, str(ROOT / "demo" / "sample_traffic.py"), str(path), "-n", "400000",
                        "--format", "pcap"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return path


@pytest.mark.parametrize("sig,status,word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_stops_the_run_and_leaves_no_output(big_capture, tmp_path, sig, status, word):
    out = tmp_path / "enc.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "pypsp", "encrypt", str(big_capture), str(out),
                             "--master-key0", MK, "--spi", "12345678", "--version", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                            preexec_fn=default_sigint)
    # wait until the run is under way: its temporary output exists and grows
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".part") for p in tmp_path.iterdir()):
        time.sleep(0.01)
    time.sleep(0.05)
    proc.send_signal(sig)
    t0 = time.time()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, "the run went on to the end despite the signal"
    assert time.time() - t0 < 5, "the run did not stop promptly"
    assert proc.returncode == status, err
    assert f"pypsp: {word} after" in err and "packets; no output was written" in err
    assert "Traceback" not in err and "Exception ignored" not in err
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary file


def test_a_closed_pipe_ends_show_quietly(tmp_path):
    enc = tmp_path / "enc.pcap"
    clear = tmp_path / "clear.pcap"
    assert subprocess.run([sys.executable, str(ROOT / "demo" / "sample_traffic.py"), str(clear), "-n", "3000"],
                          timeout=120).returncode == 0
    p = cli("pypsp", "encrypt", str(clear), str(enc), "--master-key0", MK, "--spi", "12345678", "--version", "0")
    assert p.returncode == 0, p.stderr
    for mod in ("pypsp", "pyeesp", "pyesp"):
        sh = f"{sys.executable} -m {mod} show {enc} | head -n 2"
        r = subprocess.run(["bash", "-o", "pipefail", "-c", sh], capture_output=True, text=True, timeout=120,
                           cwd=str(ROOT))
        assert "Traceback" not in r.stderr and "BrokenPipeError" not in r.stderr, r.stderr
        assert r.returncode in (0, 141), (r.returncode, r.stderr)
        if mod == "pypsp":
            assert len(r.stdout.splitlines()) == 2


@pytest.mark.parametrize("argv,needle", [
    (["pypsp", "show", "x.pcap", "--port", "70000"], "port must be in 0..65535"),
    (["pypsp", "decrypt", "x.pcap", "y.pcap", "--port", "70000"], "port must be in 0..65535"),
    (["pypsp", "show", "x.pcap", "--limit", "-1"], "count must be in 0.."),
    (["pyeesp", "show", "x.pcap", "--limit", "-1"], "count must be in 0.."),
    (["pypsp", "encrypt", "x.pcap", "y.pcap", "--first-iv", "0"], "IV must be in 1.."),
    (["pypsp", "encrypt", "x.pcap", "y.pcap", "--crypt-offset", "64"], "crypt offset must be in 0..63"),
    (["pyeesp", "decrypt", "x.pcap", "y.pcap", "--ip-protocol", "256"], "IP protocol must be in 0..255"),
    (["pyesp", "show", "x.pcap", "--limit", "-1"], "count must be in 0.."),
    (["pyesp", "encrypt", "x.pcap", "y.pcap", "--first-seq", "0"], "IV must be in 1.."),
    (["pyesp", "decrypt", "x.pcap", "y.pcap", "--jobs", "0"], "jobs must be in 1..1024"),
])
def test_options_are_checked_alike(argv, needle):
    p = cli(*argv)
    assert p.returncode == 2 and needle in p.stderr, (p.returncode, p.stderr)


@pytest.mark.parametrize("prog", ["pypsp", "pyeesp", "pyesp"])
def test_version(prog):
    p = cli(prog, "--version")
    assert p.returncode == 0 and p.stdout.startswith(f"{prog} 0.") and "OpenSSL 3" in p.stdout, p.stdout + p.stderr
