"""What pip users meet: a clear message when the build needs are missing, extras named on import.

(The wheel's abi3 tag and the LICENSE in the sdist and wheel are checked by scripts/test.sh's packaging step,
which builds both.)
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _build_module():
    import importlib.util

    os.environ["PE_SKIP_BUILD_CHECK"] = "1"  # importing the build script must not run the check here
    try:
        spec = importlib.util.spec_from_file_location("pe_build_check", ROOT / "pecore" / "_build.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
    finally:
        del os.environ["PE_SKIP_BUILD_CHECK"]
    return mod


def test_build_check_passes_here():
    _build_module().check_build_needs()


def test_build_check_names_what_to_install_without_openssl_headers():
    with pytest.raises(SystemExit) as ei:
        _build_module().check_build_needs(cc="gcc -nostdinc")  # a compiler that sees no system headers
    msg = str(ei.value)
    assert "OpenSSL 3 headers not found" in msg and "apt-get install build-essential libssl-dev" in msg


def test_build_check_names_what_to_install_without_a_compiler():
    with pytest.raises(SystemExit) as ei:
        _build_module().check_build_needs(cc="/nonexistent/cc")
    assert "no working C compiler" in str(ei.value) and "libssl-dev" in str(ei.value)


@pytest.mark.parametrize("module,extra", [("pypsp.scapy", "scapy"), ("pyeesp.scapy", "scapy"), ("pyesp.scapy", "scapy")])
def test_scapy_layers_name_the_extra_when_scapy_is_missing(module, extra):
    code = f"import sys; sys.modules['scapy'] = None\ntry:\n    import {module}\nexcept ModuleNotFoundError as e:\n" \
           "    print(e)\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT / "tests"))
    assert p.returncode == 0, p.stderr
    assert f"pip install 'psp-eesp[{extra}]'" in p.stdout and module in p.stdout


def test_pyproject_declares_the_extras_and_the_license():
    text = (ROOT / "pyproject.toml").read_text()
    for line in ('scapy = ["scapy', 'vectors = ["jsonschema', 'license = "Apache-2.0"', 'license-files = ["LICENSE"]'):
        assert line in text
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
