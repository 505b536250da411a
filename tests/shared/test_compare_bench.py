"""bench/compare --quick end to end: the C bench's JSON has every row the document needs, and the document renders
every table and plot from it (and again from the JSON alone, --render-only)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import compare  # noqa: E402  (bench/compare.py)

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake to build bench/compare_bench")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("compare")
    env = {**os.environ, "PYTHON": sys.executable}
    p = subprocess.run([str(ROOT / "bench" / "compare"), "--quick", "--out-dir", str(out)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


def test_json_schema(quick_run):
    data = json.loads((quick_run / "comparison" / "compare.json").read_text())
    assert data["schema"] == compare.SCHEMA
    for key in ("cpu", "cores", "openssl", "compiler"):
        assert data["machine"][key], key
    rows = data["bench"]["single"]
    backends = compare.backends_of(data)
    assert "openssl" in backends
    assert {r["backend"] for r in data["bench"]["replay"]} == set(backends)
    for r in rows:
        assert r["ns"] and all(x > 0 for x in r["ns"]) and r["wire_len"] >= r["size"]
        if r["keys"] != "cold" and r["protocol"] in ("ESP", "EESP", "PSP") and "GCM" in r["suite"]:
            # the bare AEAD with the row's shapes, for the bands beyond the AEAD
            assert r["aead_ns"] and all(x > 0 for x in r["aead_ns"]) and r["aead_pt"] >= r["size"] - 20
    for backend in backends:
        have = {(r["protocol"], r["variant"], r["suite"], r["keys"], r["op"], r["size"]) for r in rows
                if r["backend"] == backend or r["protocol"].startswith("raw")}
        check_rows(have)
    mt = {(r["backend"], r["protocol"], r["sharing"], r["op"], r["threads"]) for r in data["bench"]["threads"]}
    for backend in backends:
        for proto in ("ESP", "EESP", "PSP"):
            for sharing in ("shared", "per-thread"):
                for op in ("encrypt", "decrypt"):
                    assert (backend, proto, sharing, op, 1) in mt


def check_rows(have):
    for size in compare.MEASURED_SIZES:
        for op in ("encrypt", "decrypt"):
            for suite in ("AES-GCM-128", "AES-GCM-256"):
                for variant in ("transport", "tunnel"):
                    assert ("ESP", variant, suite, "n/a", op, size) in have
                for variant in ("full transport", "full tunnel", "optimized tunnel"):
                    for keys in ("warm", "cold"):
                        assert ("EESP", variant, suite, keys, op, size) in have
            for v, suite in ((0, "AES-GCM-128"), (1, "AES-GCM-256"), (2, "AES-GMAC-128"), (3, "AES-GMAC-256")):
                for mode in ("transport", "tunnel"):
                    assert ("PSP", f"v{v} {mode}", suite, "n/a", op, size) in have
            assert ("raw EVP AES-CBC+HMAC-SHA1", "transport", "AES-128-CBC + HMAC-SHA1-96", "n/a", op, size) in have
        for v, suite in ((0, "AES-GCM-128"), (1, "AES-GCM-256")):  # cold SPIs: a receiver's matter
            assert ("PSP", f"v{v} transport", suite, "cold", "decrypt", size) in have


def test_markdown_has_every_table_and_plot(quick_run):
    md = (quick_run / "comparison.md").read_text()
    for title in compare.TABLES:
        assert f"## {title}" in md, title
    assert md.count("| protocol, mode | backend | 64 | 128 |") == 4  # the four cost tables
    assert md.count("| protocol, mode | 64 | 128 |") == 1  # the overhead table
    for png in ("cost_128_encrypt", "cost_128_decrypt", "cost_256_encrypt", "cost_256_decrypt", "goodput", "threads",
                "breakdown", "breakdown_cold"):
        assert f"comparison/{png}.svg" in md
        assert (quick_run / "comparison" / f"{png}.svg").stat().st_size > 1000
    assert "Intel study" in md and "This is a model, not a measurement" in md


def test_render_only_reproduces_the_document(quick_run, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    src = quick_run / "comparison" / "compare.json"
    p = subprocess.run([str(ROOT / "bench" / "compare"), "--render-only", str(src), "--out-dir", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "comparison.md").read_text() == (quick_run / "comparison.md").read_text()
    assert (tmp_path / "comparison" / "compare.json").read_text() == src.read_text()
