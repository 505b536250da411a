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


def contracts() -> list:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    conf = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    return conf["contracts"]


def test_import_linter_is_installed():
    import importlinter  # noqa: F401  (no skip: the test extra installs import-linter)


def test_contracts_are_kept():
    p = lint_imports(REPO_ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 broken" in p.stdout


def test_every_module_is_placed():
    """A module in no layer would escape the layers: the per-package contracts name layers relative to their
    containers and are exhaustive, so import-linter itself refuses a module that is in none (the test below adds
    one), and together the containers and the stack cover every package."""
    layered = [c for c in contracts() if c["type"] == "layers" and c.get("containers")]
    assert layered and all(c.get("exhaustive") for c in layered)
    (stack,) = [c for c in contracts() if c["id"] == "stack"]
    in_stack = {m.strip() for layer in stack["layers"] for m in layer.replace("|", ":").split(":")}
    assert in_stack == set(PACKAGES)
    assert {m for c in layered for m in c["containers"]} == set(PACKAGES)


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


STACK = "the faces over the shared floor, each face independent of the others"
FACE = "in each face: tooling -> scapy -> captures -> SAs -> headers -> errors"
FLOOR = "in pecore: tooling -> protocol ops -> face machinery -> runtime -> binding"


def _copy_tree(tmp_path):
    for pkg in PACKAGES:
        shutil.copytree(REPO_ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("*.so", "*.o", "*.c",
                                                                                      "__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lint_imports(tmp_path).returncode == 0


@pytest.mark.parametrize("module,line,broken", [
    ("pecore/util.py", "import pypsp", STACK),
    ("pecore/keys.py", "import pyesp.sa", STACK),
    ("pypsp/crypto.py", "import pyeesp.sa", STACK),
    ("pyesp/sa.py", "import pyeesp.sa", STACK),
    ("pyeesp/sa.py", "import pyesp.errors", STACK),
    ("pyesp/capture.py", "import pyesp.tools.cli", "the runtime (every module outside the tools subpackages) "
                                                   "imports no tooling"),
    ("pyesp/tools/cli.py", "from pecore.binding import ffi", "the tooling uses the runtime API, not the cffi binding"),
    ("pyesp/errors.py", "import pyesp.sa", "no import cycles between sibling modules"),
    ("pyesp/header.py", "import pyesp.scapy", FACE),
    ("pypsp/header.py", "import pypsp.tools.cli", "the runtime (every module outside the tools subpackages) imports "
                                                  "no tooling"),
    ("pyeesp/tools/cli.py", "from pecore.binding import lib", "the tooling uses the runtime API, not the cffi binding"),
    ("pypsp/errors.py", "import pypsp.crypto", "no import cycles between sibling modules"),
    ("pecore/binding.py", "import pecore.util", FLOOR),
    ("pecore/protocol.py", "import pecore.face", FLOOR),
    ("pecore/face.py", "import pecore.ops", FLOOR),
    ("pyeesp/header.py", "import pyeesp.scapy", FACE),
    ("pypsp/crypto.py", "import pypsp.capture", FACE),
])
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, line, broken):
    """The contracts can fail: in a copy of the tree, one added import breaks the contract it should."""
    _copy_tree(tmp_path)
    target = tmp_path / module
    text = target.read_text(encoding="utf-8")
    target.write_text(text.replace("from __future__ import annotations\n",
                                   f"from __future__ import annotations\n{line}\n", 1)
                      if "from __future__" in text else f"{line}\n{text}", encoding="utf-8")
    p = lint_imports(tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{broken} BROKEN" in p.stdout, p.stdout


@pytest.mark.parametrize("new_module,broken", [("pyesp/replay.py", FACE), ("pecore/cache.py", FLOOR)])
def test_a_new_module_in_no_layer_breaks_a_contract(tmp_path, new_module, broken):
    """Nobody has to remember to name a new module: until it is given a layer, its package's contract is broken."""
    _copy_tree(tmp_path)
    (tmp_path / new_module).write_text("from __future__ import annotations\n", encoding="utf-8")
    p = lint_imports(tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{broken} BROKEN" in p.stdout, p.stdout
