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

ROOT = Path(__file__).resolve().parents[2]


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


def test_every_data_file_in_the_packages_ships_in_the_wheel_and_the_sdist():
    """A non-Python file inside a package (py.typed, the published ESP answers pyesp.tools.vectors reads) is in
    the wheel and the sdist only when package-data names it (MANIFEST.in names the ESP answers for the sdist
    too)."""
    import fnmatch

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        tomllib = pytest.importorskip("tomli")
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    missing = []
    for pkg in cfg["packages"]:
        for f in sorted((ROOT / pkg.replace(".", "/")).iterdir()):
            # skip Python, and what the in-place build writes beside it (pecore/_native.*)
            if not f.is_file() or f.suffix in (".py", ".pyc") or f.name.startswith((".", "_native.")):
                continue
            if not any(fnmatch.fnmatch(f.name, pat) for pat in cfg.get("package-data", {}).get(pkg, ())):
                missing.append(f.relative_to(ROOT).as_posix())
    assert not missing, f"files in the packages that package-data does not ship: {missing}"
    assert "include pyesp/tools/esp_kat.json" in (ROOT / "MANIFEST.in").read_text().splitlines()


def test_the_scapy_extra_is_enough_for_docs_scapy_md():
    """docs/scapy.md's examples run with what ``psp-eesp[scapy]`` installs and nothing else: every module that
    comes from an installed distribution outside the extra's requirements (and theirs) is hidden, as in a fresh
    virtualenv with only the extra (scapy's ESP needs ``cryptography``, which scapy itself does not require)."""
    import importlib.metadata as md
    import re

    if not hasattr(md, "packages_distributions") or not hasattr(sys, "stdlib_module_names"):
        pytest.skip("needs Python 3.10 (importlib.metadata.packages_distributions, sys.stdlib_module_names)")

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = {project["name"].lower().replace("_", "-")}
    todo = list(project.get("dependencies", [])) + list(project["optional-dependencies"]["scapy"])
    while todo:
        req = todo.pop()
        if ";" in req and "extra ==" in req:
            continue  # a dependency's own extras are not installed
        name = re.match(r"[A-Za-z0-9._-]+", req).group(0).lower().replace("_", "-")  # type: ignore[union-attr]
        if name not in allowed:
            allowed.add(name)
            todo.extend(md.requires(name) or [])
    hidden = sorted(top for top, dists in md.packages_distributions().items()
                    if top not in sys.stdlib_module_names and top.isidentifier()
                    and not {d.lower().replace("_", "-") for d in dists} & allowed)
    code = f"""
import re, sys
HIDDEN = set({hidden!r})
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not installed by psp-eesp[scapy])", name=name)
sys.meta_path.insert(0, Hide())
for mod in list(sys.modules):
    if mod.split(".")[0] in HIDDEN:
        del sys.modules[mod]
text = open({str(ROOT / "docs" / "scapy.md")!r}).read()
namespace = {{"__name__": "docs_scapy_md"}}
for i, block in enumerate(re.findall(r"^```python\\n(.*?)^```", text, re.S | re.M)):
    exec(compile(block, f"docs/scapy.md (python block {{i + 1}})", "exec"), namespace)
print("all blocks ran")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=str(ROOT / "tests"), env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and "all blocks ran" in p.stdout, p.stderr[-3000:]
