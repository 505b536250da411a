"""--jobs N: captures on several threads give one thread's output, byte for byte (issue 14 item 6).

Every comparison runs the same CLI command with --jobs 1 (the one-thread loop), 2 and 3 (the core's worker
pool; 3 on this 2-core machine oversubscribes it) and compares the output files and the printed summaries.
Inputs: every capture of vectors/pcap/ (decrypted with its key file), and generated captures in both
protocols and both directions with replays, forged and truncated packets, unknown SPIs, non-IP frames,
fragments, pcap and pcapng, and more packets than a few chunks hold.
"""
from __future__ import annotations

import random
import re
import struct
from pathlib import Path

import pytest

import pyeesp
import pypsp
from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter, read_capture
from pyeesp.tools.cli import main as eesp_main
from pyesp.tools.cli import main as esp_main
from pypsp.tools.cli import main as psp_main

ROOT = Path(__file__).resolve().parents[2]
VECTORS = sorted((ROOT / "vectors" / "pcap").glob("*.pcap"))
JOBS = (1, 2, 3)

MK0 = "11" * 32
MK1 = "22" * 32
ROOT_KEY = "33" * 32


def _summary(text: str) -> str:
    """The printed summary without its timing line."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("time:"))


def _run_jobs(main, capsys, argv, out: Path) -> dict:
    """Run argv (with {out} and --jobs j) for each j; returns {j: (rc, summary, output octets)}."""
    results = {}
    for j in JOBS:
        o = out.with_name(f"{out.stem}.j{j}{out.suffix}")
        rc = main([*[a.replace("{out}", str(o)) for a in argv], "--jobs", str(j)])
        text = capsys.readouterr()
        results[j] = (rc, _summary(text.out), o.read_bytes() if o.exists() else None)
    return results


def _assert_same(results: dict) -> None:
    one = results[1]
    assert one[2] is not None, "the one-thread run wrote nothing"
    for j, r in results.items():
        assert r[0] == one[0], f"--jobs {j}: exit status {r[0]} vs {one[0]}"
        assert r[1] == one[1], f"--jobs {j}: summary differs\n{r[1]}\n---\n{one[1]}"
        assert r[2] == one[2], f"--jobs {j}: output differs from --jobs 1"


# ------------------------------------------------------------------ the vectors' captures


@pytest.mark.parametrize("pcap", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector_captures_decrypt_alike(pcap: Path, tmp_path, capsys):
    keys = pcap.with_suffix(".keys")
    main = {"psp": psp_main, "eesp": eesp_main, "esp": esp_main}[pcap.name.split("_")[0]]
    results = _run_jobs(main, capsys, ["decrypt", str(pcap), "{out}", "-k", str(keys)], tmp_path / "out.pcap")
    _assert_same(results)


def test_vectors_present():
    assert len(VECTORS) >= 100 and any(p.name.startswith("psp_") for p in VECTORS)


# ------------------------------------------------------------------ generated captures

ETH = bytes.fromhex("020000000002" "020000000001")


def _ip(rng: random.Random, v6: bool, proto: int, flow: int, payload: int, frag: bool = False) -> bytes:
    l4 = struct.pack("!HHHH", 1024 + flow % 37, 80 + flow % 5, 8 + payload, 0) if proto == 17 else \
        struct.pack("!HHIIHHHH", 1024 + flow % 37, 80 + flow % 5, flow, 0, 0x5010, 1024, 0, 0)
    body = l4 + rng.randbytes(payload)
    if v6:
        return struct.pack("!IHBB", 0x60000000, len(body), proto, 64) + bytes(15) + bytes([flow]) + bytes(15) + b"\x02" + body
    hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), flow, 0x2000 if frag else 0, 64, proto, 0,
                                bytes([10, 0, 0, flow]), bytes([10, 0, 0, 2])))
    s = sum(struct.unpack("!10H", hdr))
    s = (s & 0xFFFF) + (s >> 16)
    struct.pack_into("!H", hdr, 10, ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF)
    return bytes(hdr) + body


def _plain_frames(n: int, seed: int) -> list:
    rng = random.Random(seed)
    frames = []
    for i in range(n):
        r = rng.random()
        if r < 0.02:
            frames.append(ETH[:12] + b"\x08\x06" + rng.randbytes(28))  # ARP: not IP
            continue
        v6 = rng.random() < 0.4
        ip = _ip(rng, v6, 17 if rng.random() < 0.6 else 6, rng.randrange(64), rng.choice((0, 1, 64, 500, 1400)),
                 frag=not v6 and rng.random() < 0.02)
        frames.append(ETH + (b"\x86\xdd" if v6 else b"\x08\x00") + ip)
    return frames


def _write(path: Path, frames: list, fmt: str = "pcap") -> Path:
    with CaptureWriter(path, LINKTYPE_ETHERNET, fmt=fmt) as w:
        for i, f in enumerate(frames):
            w.write(f, (1_700_000_000 + i // 1000, (i % 1000) * 1000))
    return path


def _wire(frames: list, seed: int) -> list:
    """What a receiver sees: the frames, replays of some (near and far), forged copies, cut ones, reordering."""
    rng = random.Random(seed)
    out = list(frames)
    for i in range(0, len(frames), 7):
        j = rng.randrange(len(frames))
        out.append(frames[j])  # a replay
        if i % 21 == 0:
            f = bytearray(frames[j])
            f[-1] ^= 1
            out.append(bytes(f))  # a forged replay
    for i in range(0, len(out), 11):
        f = bytearray(out[i])
        if len(f) > 60:
            f[rng.randrange(50, len(f))] ^= 0x40  # forged
        out.append(bytes(f))
    for i in range(1, len(out) - 1, 13):
        out[i], out[i + 1] = out[i + 1], out[i]  # out of order, still new
    out.append(frames[3][:40])  # cut short
    return out


CHUNKY = 1500  # more packets than several of the pool's chunks


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_psp_generated_both_directions(version, fmt, tmp_path, capsys):
    plain = _write(tmp_path / f"plain.{fmt}", _plain_frames(CHUNKY, version), fmt)
    sa = ["--master-key0", MK0, "--master-key1", MK1]
    enc = _run_jobs(psp_main, capsys, ["encrypt", str(plain), "{out}", *sa, "--spi", "0x80001234",
                                       "--version", str(version), "--first-iv", "0xfffff000"], tmp_path / f"enc.{fmt}")
    _assert_same(enc)
    assert "encrypted:" in enc[1][1] and "ip-fragment" in enc[1][1]
    # A second SA (another SPI, the other key phase) in the same capture, and one whose keys nobody has.
    enc2 = tmp_path / f"enc2.{fmt}"
    assert psp_main(["encrypt", str(plain), str(enc2), *sa, "--spi", "0x00000042", "--version", str(version), "-q"]) in (0, 1)
    other = tmp_path / f"other.{fmt}"
    assert psp_main(["encrypt", str(plain), str(other), "--master-key0", "44" * 32, "--master-key1", "44" * 32,
                     "--spi", "0x77", "--version", str(version), "-q"]) in (0, 1)
    frames = [r.data for r in read_capture(tmp_path / f"enc.j1.{fmt}")]
    frames += [r.data for r in read_capture(enc2)][:300] + [r.data for r in read_capture(other)][:100]
    wire = _write(tmp_path / f"wire.{fmt}", _wire(frames, version), fmt)
    dec = _run_jobs(psp_main, capsys, ["decrypt", str(wire), "{out}", *sa], tmp_path / f"dec.{fmt}")
    _assert_same(dec)
    assert "authentication-failed" in dec[1][1] and "decrypted:" in dec[1][1]
    dropped = _run_jobs(psp_main, capsys, ["decrypt", str(wire), "{out}", *sa, "--drop-failed"], tmp_path / "drop.pcap")
    _assert_same(dropped)
    # Only derived keys: the other SPIs have none.
    key = pypsp.derive_key(bytes.fromhex(MK1), 0x80001234, version).hex()
    nokey = _run_jobs(psp_main, capsys, ["decrypt", str(wire), "{out}", "--key", f"80001234:{key}"], tmp_path / "nk.pcap")
    _assert_same(nokey)
    assert "no-key" in nokey[1][1] or "psp-no-key" in nokey[1][1]


EESP_SUITES = [
    ("aes-gcm-16", 128, "tunnel", []),
    ("aes-gcm-16", 256, "transport", ["--udp-encap"]),
    ("aes-ccm-8", 128, "transport", []),
    ("chacha20-poly1305", 256, "tunnel", ["--udp-encap"]),  # 256 only (128 is refused, as by pyesp)
    ("aes-gcm-16-iiv", 128, "tunnel", []),
    ("aes-gmac", 128, "transport", []),
]


@pytest.mark.parametrize("suite,bits,mode,extra", EESP_SUITES, ids=[f"{s[0]}-{s[1]}-{s[2]}" for s in EESP_SUITES])
def test_eesp_generated_both_directions(suite, bits, mode, extra, tmp_path, capsys):
    plain = _write(tmp_path / "plain.pcap", _plain_frames(CHUNKY, bits))
    sa = ["--spi", "0x4000", "--suite", suite, "--key-bits", str(bits), "--root-key", ROOT_KEY, "--mode", mode, *extra]
    enc = _run_jobs(eesp_main, capsys, ["encrypt", str(plain), "{out}", *sa, "--sub-sas", "5"], tmp_path / "enc.pcap")
    _assert_same(enc)
    other = tmp_path / "other.pcap"  # an SPI the receiver has no SA for
    assert eesp_main(["encrypt", str(plain), str(other), *[a if a != "0x4000" else "0x4001" for a in sa], "-q"]) in (0, 1)
    frames = [r.data for r in read_capture(tmp_path / "enc.j1.pcap")] + [r.data for r in read_capture(other)][:100]
    wire = _write(tmp_path / "wire.pcap", _wire(frames, bits))
    # A receiver that allows Sub SAs 0..2 only: the others are refused, before any key is kept for them.
    for limit in ([], ["--max-sub-sa-id", "2"]):
        dec = _run_jobs(eesp_main, capsys, ["decrypt", str(wire), "{out}", *sa, *limit], tmp_path / "dec.pcap")
        _assert_same(dec)
        text = dec[1][1]
        assert "replay-duplicate" in text and "authentication-failed" in text and "eesp-no-sa" in text, text
        if limit:
            assert "eesp-bad-sub-sa" in text or "sub-sa" in text, text
    dropped = _run_jobs(eesp_main, capsys, ["decrypt", str(wire), "{out}", *sa, "--drop-failed"], tmp_path / "drop.pcap")
    _assert_same(dropped)


ESP_SUITES = [
    ("aes-gcm-16", 128, "tunnel", []),
    ("aes-gcm-16", 256, "transport", ["--udp-encap", "--esn"]),
    ("aes-ccm-8", 128, "tunnel", ["--esn"]),
    ("chacha20-poly1305", 256, "transport", []),
    ("aes-gcm-16-iiv", 128, "tunnel", ["--esn", "--udp-encap"]),
    ("aes-gmac", 128, "transport", []),
]


@pytest.mark.parametrize("suite,bits,mode,extra", ESP_SUITES, ids=[f"{s[0]}-{s[1]}-{s[2]}{''.join(s[3])}" for s in ESP_SUITES])
def test_esp_generated_both_directions(suite, bits, mode, extra, tmp_path, capsys):
    """ESP on 1, 2 and 3 threads; with ESN the sequence numbers cross a high half (2^32) part way."""
    plain = _write(tmp_path / "plain.pcap", _plain_frames(CHUNKY, bits))
    key_len = {"aes-ccm-8": 3, "chacha20-poly1305": 4}.get(suite, 4) + (32 if suite.startswith("chacha") else bits // 8)
    sa = ["--spi", "0x5000", "--suite", suite, "--key-bits", str(bits), "--key", bytes(range(key_len)).hex(),
          "--mode", mode, *extra]
    first = ["--first-seq", str(2**32 - 700)] if "--esn" in extra else []
    enc = _run_jobs(esp_main, capsys, ["encrypt", str(plain), "{out}", *sa, *first], tmp_path / "enc.pcap")
    _assert_same(enc)
    frames = [r.data for r in read_capture(tmp_path / "enc.j1.pcap")]
    wire = _write(tmp_path / "wire.pcap", _wire(frames, bits))
    dec = _run_jobs(esp_main, capsys, ["decrypt", str(wire), "{out}", *sa, *first], tmp_path / "dec.pcap")
    _assert_same(dec)
    text = dec[1][1]
    assert "replay-duplicate" in text and "decrypted:       0" not in text, text  # forged copies meet the window first
    dropped = _run_jobs(esp_main, capsys, ["decrypt", str(wire), "{out}", *sa, *first, "--drop-failed"],
                        tmp_path / "drop.pcap")
    _assert_same(dropped)


def test_eesp_replay_windows_persist_alike(tmp_path):
    """The receiver's windows after a run are one thread's: the same capture again is all replays, for any jobs."""
    plain = _write(tmp_path / "plain.pcap", _plain_frames(800, 7))
    sa = pyeesp.SA(spi=0x4000, suite="aes-gcm-16", key_bits=128, root_key=bytes.fromhex(ROOT_KEY), mode="tunnel")
    enc = tmp_path / "enc.pcap"
    pyeesp.encrypt_capture(sa, plain, enc, sub_sas=4, jobs=2)
    wire = _write(tmp_path / "wire.pcap", _wire([r.data for r in read_capture(enc)], 3))
    outs = {}
    for j in JOBS:
        rx = pyeesp.SA(spi=0x4000, suite="aes-gcm-16", key_bits=128, root_key=bytes.fromhex(ROOT_KEY), mode="tunnel")
        first = pyeesp.decrypt_capture(rx, wire, tmp_path / f"a{j}.pcap", jobs=j)
        second = pyeesp.decrypt_capture(rx, wire, tmp_path / f"b{j}.pcap", jobs=j)
        outs[j] = (first.failed_by_reason, second.failed_by_reason, second.transformed,
                   (tmp_path / f"a{j}.pcap").read_bytes())
        assert first.transformed > 0 and second.transformed == 0
    assert outs[2] == outs[1] and outs[3] == outs[1]


def test_progress_called_from_the_calling_thread(tmp_path):
    import threading

    plain = _write(tmp_path / "plain.pcap", _plain_frames(9000, 1))
    seen = []
    enc = pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)), spi=0x10, version=0)
    s = pypsp.encrypt_capture(enc, plain, tmp_path / "e.pcap", jobs=2,
                              progress=lambda done, total, packets: seen.append((threading.get_ident(), packets)))
    assert s.packets == 9000
    assert [p for _, p in seen] == [4096, 8192, 9000]
    assert {t for t, _ in seen} == {threading.get_ident()}


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_every_face_runs_jobs_threads(tmp_path):
    """--jobs N is N threads (the caller's and N - 1 workers) for PSP, EESP and ESP alike, as README.md says: while
    the run calls progress, this process has N - 1 threads it did not have before. Thread ids, not a count: a worker
    of the run before, already joined, can still be listed in /proc/self/task until the kernel reaps it."""
    import os

    import pyesp

    def threads() -> set[str]:
        return set(os.listdir("/proc/self/task"))

    plain = _write(tmp_path / "plain.pcap", _plain_frames(9000, 2))
    faces = [(pypsp, pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)), spi=0x10, version=0)),
             (pyeesp, pyeesp.SA(0x4000, "aes-gcm-16", key=bytes(20))),
             (pyesp, pyesp.SA(0x5000, "aes-gcm-16", key=bytes(20)))]
    for face, sa in faces:
        for jobs in (2, 3):
            before, during = threads(), []
            face.encrypt_capture(sa, plain, tmp_path / "e.pcap", jobs=jobs,  # type: ignore[attr-defined]
                                 progress=lambda done, total, packets: during.append(threads()))
            assert during and max(len(now - before) for now in during) == jobs - 1, (face.__name__, jobs, before, during)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "--jobs N` spreads the cryptography over N threads" in readme
    assert "runs on one" not in readme and "one thread" not in readme.split("--jobs N` spreads")[1][:200]


def test_progress_can_stop_a_parallel_run(tmp_path):
    plain = _write(tmp_path / "plain.pcap", _plain_frames(9000, 2))
    enc = pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)), spi=0x10, version=0)
    with pytest.raises(pypsp.CaptureError) as e:
        pypsp.encrypt_capture(enc, plain, tmp_path / "e.pcap", jobs=2, progress=lambda *a: False)
    assert e.value.summary.packets == 4096
    assert not (tmp_path / "e.pcap").exists()


def test_sport_callback_runs_on_one_thread(tmp_path, capsys):
    plain = _write(tmp_path / "plain.pcap", _plain_frames(300, 3))
    outs = []
    for j in (1, 2):
        calls = []

        def sport(inner: bytes) -> int:
            calls.append(len(inner))
            return 4242 + len(calls)

        enc = pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)), spi=0x10, version=0, udp_sport=sport)
        pypsp.encrypt_capture(enc, plain, tmp_path / f"e{j}.pcap", jobs=j)
        outs.append((calls, (tmp_path / f"e{j}.pcap").read_bytes()))
    assert outs[0] == outs[1]


# ------------------------------------------------------------------ option validation


@pytest.mark.parametrize("bad", ["0", "-1", "x", "1.5", "2000", ""])
@pytest.mark.parametrize("main,cmd", [(psp_main, "decrypt"), (psp_main, "encrypt"), (eesp_main, "decrypt"),
                                      (eesp_main, "encrypt")])
def test_jobs_option_refused(main, cmd, bad, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "in.pcap", str(tmp_path / "o.pcap"), "--jobs", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--jobs" in err and ("jobs must be in 1..1024" in err or "not a number" in err), err


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_jobs_parameter_refused(bad, tmp_path):
    plain = _write(tmp_path / "plain.pcap", _plain_frames(5, 1))
    dec = pypsp.Decryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)))
    with pytest.raises(pypsp.ConfigurationError, match="jobs must be a positive integer"):
        pypsp.decrypt_capture(dec, plain, tmp_path / "o.pcap", jobs=bad)
    sa = pyeesp.SA(spi=0x4000, suite="aes-gcm-16", key_bits=128, root_key=bytes.fromhex(ROOT_KEY), mode="tunnel")
    with pytest.raises(pyeesp.ConfigurationError, match="jobs must be a positive integer"):
        pyeesp.encrypt_capture(sa, plain, tmp_path / "o.pcap", jobs=bad)


def test_default_jobs_is_the_affinity(monkeypatch):
    import os

    from pecore import capture

    assert capture.default_jobs() == len(os.sched_getaffinity(0))
    assert re.search(r"--jobs", " ".join(["--jobs"]))


def test_standard_input_and_output_alike(tmp_path):
    """decrypt - - (pipes: the core's descriptor loop) gives the same octets on 1 and 2 jobs."""
    import os
    import subprocess
    import sys

    plain = _write(tmp_path / "plain.pcap", _plain_frames(1200, 5))
    enc = tmp_path / "enc.pcap"
    e = pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)), spi=0x10, version=1)
    pypsp.encrypt_capture(e, plain, enc, jobs=1)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    outs = []
    for j in JOBS:
        p = subprocess.run([sys.executable, "-m", "pypsp", "decrypt", "-", "-", "--master-key0", MK0, "--master-key1",
                            MK1, "--jobs", str(j), "-q"], input=enc.read_bytes(), capture_output=True, env=env)
        assert p.returncode in (0, 1), p.stderr
        outs.append(p.stdout)
    assert outs[0] == outs[1] == outs[2] and len(outs[0]) > 1000
