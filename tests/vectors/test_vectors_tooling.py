"""`pypsp vectors` / `pyeesp vectors` / `pyesp vectors` hold up: a missing extra and a failure mid-generation.

- Without jsonschema (the `vectors` extra), `vectors check` and `vectors generate` say which extra to install
  and exit with the CLI's usage/environment status 2, without a traceback, and generate writes nothing.
  jsonschema is hidden by a PYTHONPATH shim whose `jsonschema` package raises ImportError.
- `vectors generate` writes every file beside its target and renames them into place only once all are
  complete: an exception (or Ctrl-C) in the middle of writing leaves the previous files exactly as they were,
  with no half-written file and no temporary file behind.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

import pecore.tools.vectors as pv

ROOT = Path(__file__).resolve().parents[2]
EXTRA_HINT = "pip install 'psp-eesp[vectors]'"


@pytest.fixture(scope="module")
def no_jsonschema(tmp_path_factory) -> Dict[str, str]:
    shim = tmp_path_factory.mktemp("shim")
    (shim / "jsonschema").mkdir()
    (shim / "jsonschema" / "__init__.py").write_text('raise ImportError("No module named \'jsonschema\' (test shim)")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(ROOT), env.get("PYTHONPATH", "")])
    probe = subprocess.run([sys.executable, "-c", "import jsonschema"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0, "the shim did not hide jsonschema"
    return env


@pytest.mark.parametrize("cli,vector", [("pypsp", "psp_v0_test.json"), ("pyeesp", "eesp_aes-gcm-16_test.json"),
                                        ("pyesp", "esp_aes-gcm-16_test.json")])
def test_check_without_jsonschema_names_the_extra(no_jsonschema, cli, vector):
    p = subprocess.run([sys.executable, "-m", cli, "vectors", "check", str(ROOT / "vectors" / vector)],
                       env=no_jsonschema, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert EXTRA_HINT in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"{cli}: error: "), p.stderr


@pytest.mark.parametrize("cli", ["pypsp", "pyeesp", "pyesp"])
def test_generate_without_jsonschema_names_the_extra_and_writes_nothing(no_jsonschema, tmp_path, cli):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", cli, "vectors", "generate", "--out", str(out)],
                       env=no_jsonschema, capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert EXTRA_HINT in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not out.exists() or not any(out.rglob("*"))
    # --no-check needs no schema validation, so it still works without the extra
    p = subprocess.run([sys.executable, "-m", cli, "vectors", "generate", "--out", str(out), "--no-check", "--no-pcap"],
                       env=no_jsonschema, capture_output=True, text=True, timeout=300, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr


def test_validate_without_jsonschema_names_the_extra(no_jsonschema):
    p = subprocess.run([sys.executable, "-m", "pecore.tools.vectors", "validate", str(ROOT / "vectors" / "psp_v0_test.json")],
                       env=no_jsonschema, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert p.returncode == 2 and EXTRA_HINT in p.stderr and "Traceback" not in p.stderr, p.stderr


def snapshot(d: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


class Injected(Exception):
    pass


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """psp vectors (seed 1), written once; each test works on a copy."""
    from pypsp.tools.cli import main

    d = tmp_path_factory.mktemp("vectors")
    assert main(["vectors", "generate", "--out", str(d), "--seed", "1", "--no-check"]) == 0
    (d / "pcap" / "psp_v0_g99.pcap").write_bytes(b"a stale pcap of a group that went away")
    return d


def copy_of(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("where,after", [("pcap", 7), ("pcap", 40), ("text", 2), ("text", 5)])
@pytest.mark.parametrize("exc", [Injected, KeyboardInterrupt])
def test_failure_mid_generation_leaves_the_previous_files(generated, tmp_path, monkeypatch, where, after, exc):
    """The new seed would change every file; an exception while writing (inside a pcap, or between text files)
    must leave the old set byte for byte, the stale pcap included, and no temporary file."""
    from pecore.capture import CaptureWriter
    from pypsp.tools.cli import main

    out = copy_of(generated, tmp_path / "v")
    before = snapshot(out)
    calls = {"n": 0}

    def boom(*a, **kw):
        calls["n"] += 1
        if calls["n"] == after:
            raise exc()
        return real(*a, **kw)

    if where == "pcap":
        real = CaptureWriter.write
        monkeypatch.setattr(CaptureWriter, "write", lambda self, *a, **kw: boom(self, *a, **kw))
    else:
        real = pv.output.dumps  # the name write_vector_files calls
        monkeypatch.setattr(pv.output, "dumps", boom)
    argv = ["vectors", "generate", "--out", str(out), "--seed", "2", "--no-check"]
    if exc is KeyboardInterrupt:
        assert main(argv) == 130  # the CLI's Ctrl-C status
    else:
        with pytest.raises(exc):
            main(argv)
    assert calls["n"] >= after
    after_files = snapshot(out)
    assert sorted(after_files) == sorted(before), set(after_files) ^ set(before)
    changed = [k for k in before if before[k] != after_files[k]]
    assert not changed, changed

    # and without the failure the same run replaces them all and removes the stale pcap
    monkeypatch.undo()
    assert main(["vectors", "generate", "--out", str(out), "--seed", "2", "--no-check"]) == 0
    now = snapshot(out)
    assert "pcap/psp_v0_g99.pcap" not in now
    assert not [k for k in now if k.endswith(".tmp") or Path(k).name.startswith(".")]
    assert now["psp_v0_test.json"] != before["psp_v0_test.json"]
