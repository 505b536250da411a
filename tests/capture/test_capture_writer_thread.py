"""A run on several threads writes its output from whichever thread's turn it is (core/src/io/capture_*.c,
own_put): a write that fails there is reported as one thread reports it, and the output written before it is the
same."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import pypsp
from pecore.capture import CaptureError

ROOT = Path(__file__).resolve().parents[2]
MK = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
KEY = bytes(range(16))


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> tuple[Path, Path]:
    """A clear capture of several output buffers (1 MiB each) and its PSP encryption."""
    d = tmp_path_factory.mktemp("wt")
    clear, enc = d / "clear.pcap", d / "enc.pcap"
    p = subprocess.run([sys.executable, str(ROOT / "demo" / "sample_traffic.py"), str(clear), "-n", "20000",
                        "--format", "pcap"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    pypsp.encrypt_capture(pypsp.Encryptor(key=KEY, spi=0x1000, version=0), clear, enc, jobs=1)
    assert enc.stat().st_size > 3 << 20
    return clear, enc


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_a_full_device_fails_the_run_alike(captures, jobs):
    _, enc = captures
    with pytest.raises(CaptureError, match="cannot write the output: No space left on device"):
        pypsp.decrypt_capture(pypsp.Decryptor(keys={(0x1000, 0): KEY}), enc, "/dev/full", jobs=jobs)


@pytest.mark.parametrize("jobs", [1, 2])
def test_output_and_summary_through_the_writer_thread(captures, tmp_path, jobs):
    """Several buffers handed over in turn come out in order: the decryption is the one-thread one."""
    _, enc = captures
    ref, out = tmp_path / "ref.pcap", tmp_path / "out.pcap"
    s1 = pypsp.decrypt_capture(pypsp.Decryptor(keys={(0x1000, 0): KEY}), enc, ref, jobs=1)
    s2 = pypsp.decrypt_capture(pypsp.Decryptor(keys={(0x1000, 0): KEY}), enc, out, jobs=jobs)
    assert dataclasses.replace(s1, seconds=0) == dataclasses.replace(s2, seconds=0)
    assert out.read_bytes() == ref.read_bytes()


def test_a_reader_that_closes_the_pipe_ends_the_run_alike(captures):
    """The writer thread meets the closed pipe (EPIPE); the run stops as one thread's does."""
    _, enc = captures
    seen = []
    for jobs in (1, 2):
        sh = (f"{sys.executable} -m pypsp decrypt {enc} - --key 1000:{KEY.hex()} -q --jobs {jobs}"
              " | head -c 100000 >/dev/null")
        r = subprocess.run(["bash", "-o", "pipefail", "-c", sh], capture_output=True, text=True, timeout=120,
                           cwd=str(ROOT))
        assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
        seen.append((r.returncode, r.stderr.replace("--jobs 2", "--jobs 1")))
    assert seen[0] == seen[1]


@pytest.mark.parametrize("cut", [24 + 7, 3 << 20, (3 << 20) + 5])
def test_a_cut_input_read_ahead_ends_alike(captures, tmp_path, cut):
    """A run on several threads reads a regular file ahead on a thread of its own (read_ahead): an input cut
    in a record header, in a record, or between read blocks ends the run as one thread's does."""
    _, enc = captures
    part = tmp_path / "cut.pcap"
    part.write_bytes(enc.read_bytes()[:cut])
    seen = []
    for jobs in (1, 2, 3):
        out = tmp_path / f"out{jobs}.pcap"
        try:
            s = pypsp.decrypt_capture(pypsp.Decryptor(keys={(0x1000, 0): KEY}), part, out, jobs=jobs)
            what = ("ok", dataclasses.replace(s, seconds=0))
        except CaptureError as e:
            what = ("error", e.code, str(e))
        seen.append((what, out.read_bytes() if out.exists() else None))
    assert seen[0][0][0] == "error" and seen[0][0][1] == "capture-truncated", seen[0][0]
    assert seen[0] == seen[1] == seen[2]


def test_an_output_over_a_longer_file_leaves_nothing_of_it(tmp_path):
    """The output is opened without O_TRUNC (out_open: ext4 flushes a file truncated to empty at close) and
    truncated only when it holds octets: a shorter capture written over a longer file is all that remains."""
    from pecore.capture import LINKTYPE_RAW, CaptureWriter, read_capture
    path = tmp_path / "o.pcap"
    path.write_bytes(b"\xff" * 100000)
    with CaptureWriter(str(path), linktype=LINKTYPE_RAW, fmt="pcap") as w:
        w.write(bytes.fromhex("4500001c000100004011f9c80a0000010a000002000100020008f7f5"), (1, 0))
    assert path.stat().st_size == 24 + 16 + 28
    assert len(list(read_capture(str(path)))) == 1
