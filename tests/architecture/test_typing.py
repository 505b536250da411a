"""What a typed user meets: every face's ``__all__`` is a literal list, sorted and complete, so that a type checker
sees what the package exports, and ``mypy --strict`` accepts code that imports from the faces as the README does
(mypy reads ``__all__`` only when it is a literal: ``sorted([...])`` made every name a private import)."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FACES = ("pypsp", "pyeesp", "pyesp")

USER_CODE = '''\
import pypsp
import pyeesp
import pyesp
from pypsp import Decryptor, Encryptor, PspError, derive_key
from pyeesp import SA, EespError, Receiver
from pyesp import SA as EspSA, EspError, Receiver as EspReceiver

key: bytes = derive_key(bytes(32), spi=0x12345678, version=0)
enc = Encryptor(key=key, spi=0x12345678)
dec = Decryptor(keys={0x12345678: key})
eesp_sa = SA(0x1000, "aes-gcm-16", key=bytes(20))
eesp_rx = Receiver([eesp_sa])
esp_sa = EspSA(0x2001, "aes-gcm-16", key=bytes(20))
esp_rx = EspReceiver([esp_sa])
errors: tuple[type[Exception], ...] = (PspError, EespError, EspError, pypsp.AuthenticationError,
                                       pyeesp.ReplayError, pyesp.ReplayError)
suites: dict[str, int] = pyesp.SUITES
'''


def _all_of(face: str) -> ast.expr:
    tree = ast.parse((ROOT / face / "__init__.py").read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)]
    return node.value


@pytest.mark.parametrize("face", FACES)
def test_all_is_a_sorted_complete_literal_list(face):
    import importlib

    value = _all_of(face)
    assert isinstance(value, ast.List) and all(isinstance(e, ast.Constant) for e in value.elts), \
        f"{face}.__all__ must be a literal list of strings for type checkers"
    names = [e.value for e in value.elts]  # type: ignore[attr-defined]
    assert names == sorted(names) and len(set(names)) == len(names)
    mod = importlib.import_module(face)
    errors = importlib.import_module(f"{face}.errors")
    assert set(errors.__all__) <= set(names), set(errors.__all__) - set(names)  # every exception class
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and not isinstance(v, type(sys))}
    assert set(names) == public, (set(names) ^ public)
    assert all(hasattr(mod, n) for n in names)


@pytest.mark.skipif(shutil.which("mypy", path=str(Path(sys.executable).parent)) is None,
                    reason="mypy is not installed (pip install -e .[test])")
def test_mypy_strict_accepts_imports_from_the_faces(tmp_path):
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    # The faces as an installed package is to mypy: imported, their own errors not reported (follow-imports=silent).
    p = subprocess.run([str(Path(sys.executable).parent / "mypy"), "--strict", "--follow-imports=silent",
                        "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(user)],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
                       env={"PATH": "/usr/bin:/bin", "MYPYPATH": str(ROOT)})
    assert p.returncode == 0, p.stdout + p.stderr
