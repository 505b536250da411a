"""The Python layers hold: tooling (pecore/pypsp/pyeesp/pyesp ``tools``) above the runtime library above pecore's
floor, pecore importing no protocol package, pypsp, pyeesp and pyesp independent, no import cycles, and the cffi binding
owned by one module.

The contracts live in pyproject.toml (``[tool.importlinter]``) and are checked by import-linter's ``lint-imports``,
which the test extra installs; a missing tool is a failure, not a skip.  The contracts are only as good as their
module lists, so the test also checks that every module of the four packages is placed, and that a forbidden
import in a copy of the tree breaks them.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

PACKAGES = ("pecore", "pypsp", "pyeesp", "pyesp")

# Modules that are no layer's business: the cffi build script (run by setuptools, never imported), the entry
# points.
UNLAYERED = {
    "pecore", "pypsp", "pyeesp", "pyesp", "pecore._build", "pypsp.__main__", "pyeesp.__main__", "pyesp.__main__",
}


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("lint-imports")
    cmd = [str(script)] if script.exists() else [sys.executable, "-c",
                                                  "import sys; from importlinter.cli import lint_imports_command as c; "
                                                  "sys.exit(c())"]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "NO_COLOR": "1"}
    return subprocess.run(cmd + ["--no-cache"], cwd=str(root), env=env, capture_output=True, text=True, timeout=300)


def modules(root: Path) -> dict:
    """Every Python module of the four packages: dotted name -> path."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def layers_contract() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    conf = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c for c in conf["contracts"] if c.get("id") == "layers"]
    return layers


def test_import_linter_is_installed():
    import importlinter  # noqa: F401  (no skip: the test extra installs import-linter)


def test_contracts_are_kept():
    p = lint_imports(REPO_ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout


def test_every_module_is_placed():
    """A module outside every layer escapes the layers contract: each runtime and tooling module is named (a tools
    subpackage names all of its modules)."""
    named = set()
    for layer in layers_contract()["layers"]:
        named |= {m.strip() for m in layer.replace("|", ":").split(":")}
    unplaced = []
    for name in modules(REPO_ROOT):
        if name in UNLAYERED:
            continue
        if not any(name == n or name.startswith(n + ".") for n in named):
            unplaced.append(name)
    assert not unplaced, f"modules in no layer of pyproject.toml's layers contract: {unplaced}"


def test_only_the_binding_imports_the_compiled_module():
    """import-linter does not see the compiled extension (no .py file): check by syntax that pecore.binding alone
    imports pecore._native, so every call into the core goes through one module."""
    importers = []
    for name, path in modules(REPO_ROOT).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "pecore._native" or \
                    isinstance(node, ast.ImportFrom) and node.module == "pecore" and \
                    any(a.name == "_native" for a in node.names) or \
                    isinstance(node, ast.Import) and any(a.name == "pecore._native" for a in node.names):
                importers.append(name)
    assert importers == ["pecore.binding"], importers


@pytest.mark.parametrize("module,line,broken", [
    ("pecore/util.py", "import pypsp", "the shared floor (pecore) imports no protocol package"),
    ("pecore/keys.py", "import pyesp.sa", "the shared floor (pecore) imports no protocol package"),
    ("pypsp/crypto.py", "import pyeesp.sa", "pypsp, pyeesp and pyesp are independent of each other"),
    ("pyesp/sa.py", "import pyeesp.sa", "pypsp, pyeesp and pyesp are independent of each other"),
    ("pyeesp/sa.py", "import pyesp.errors", "pypsp, pyeesp and pyesp are independent of each other"),
    ("pyesp/capture.py", "import pyesp.tools.cli", "the runtime (every module outside the tools subpackages) "
                                                   "imports no tooling"),
    ("pyesp/tools/cli.py", "from pecore.binding import ffi", "the tooling uses the runtime API, not the cffi binding"),
    ("pyesp/errors.py", "import pyesp.sa", "no import cycles between sibling modules"),
    ("pyesp/header.py", "import pyesp.scapy", "tooling -> runtime -> pecore runtime -> binding"),
    ("pypsp/header.py", "import pypsp.tools.cli", "the runtime (every module outside the tools subpackages) imports "
                                                  "no tooling"),
    ("pyeesp/tools/cli.py", "from pecore.binding import lib", "the tooling uses the runtime API, not the cffi binding"),
    ("pypsp/errors.py", "import pypsp.crypto", "no import cycles between sibling modules"),
    ("pecore/binding.py", "import pecore.util", "tooling -> runtime -> pecore runtime -> binding"),
    ("pyeesp/header.py", "import pyeesp.scapy", "tooling -> runtime -> pecore runtime -> binding"),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line, broken):
    """The contracts can fail: in a copy of the tree, one added import breaks the contract it should."""
    for pkg in PACKAGES:
        shutil.copytree(REPO_ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("*.so", "*.o", "*.c",
                                                                                      "__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lint_imports(tmp_path).returncode == 0
    target = tmp_path / module
    text = target.read_text(encoding="utf-8")
    target.write_text(text.replace("from __future__ import annotations\n",
                                   f"from __future__ import annotations\n{line}\n", 1)
                      if "from __future__" in text else f"{line}\n{text}", encoding="utf-8")
    p = lint_imports(tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{broken} BROKEN" in p.stdout, p.stdout
