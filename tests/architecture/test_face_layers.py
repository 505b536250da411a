"""The faces (pypsp, pyeesp, pyesp) are faces only: every call into the core goes through pecore's one machinery
(pecore/face.py, driven by the records of pecore/ops.py), and no package reaches into another's objects.

import-linter (tests/architecture/test_layers.py) sees imports of modules, not the names taken from them nor attribute
access, so these are checked by syntax.  Each check is run once on a tree with a planted violation, so that it
can fail.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO_ROOT
from test_layers import modules as all_modules

FACES = ("pypsp", "pyeesp", "pyesp")
PACKAGES = ("pecore",) + FACES


def modules(root: Path, packages=FACES) -> Dict[str, Path]:
    """Every module of ``packages``, tools included: dotted name -> path."""
    return {n: p for n, p in all_modules(root).items() if n.split(".")[0] in packages}


def binding_uses(source: str) -> List[str]:
    """Where a module imports the cffi binding (or ``ffi``/``lib`` under any name) or calls ``lib.``/``ffi.``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod in ("pecore.binding", "pecore._native") or (mod == "pecore" and any(
                    a.name in ("binding", "_native") for a in node.names)) or any(
                    a.name in ("ffi", "lib") for a in node.names):
                found.append(f"line {node.lineno}: from {mod} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in ("pecore.binding", "pecore._native"):
                    found.append(f"line {node.lineno}: import {a.name}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("lib", "ffi"):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("face", FACES)
def test_faces_make_no_call_into_the_core(face):
    bad = {name: uses for name, path in modules(REPO_ROOT, (face,)).items()
           if (uses := binding_uses(path.read_text(encoding="utf-8")))}
    assert not bad, bad


def test_the_binding_check_can_fail():
    assert binding_uses("from pecore.binding import ffi, lib\n")
    assert binding_uses("from pecore import binding\n")
    assert binding_uses("from pecore.face import lib as core\n")
    assert binding_uses("import pecore.binding\n")
    assert binding_uses("def f(tx):\n    return lib.pe_psp_tx_next_iv(tx, ffi.NULL)\n")
    assert not binding_uses("from pecore import face, ops\nx = ops.PSP.encap\nlibrary.x()\n")


def private_names(paths) -> set:  # type: ignore[no-untyped-def]
    """The private names a package defines: functions, classes, assigned names and its objects' attributes
    (``self._x = ...``; not what it sets on a library's class)."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
                        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and \
                                sub.value.id in ("self", "cls"):
                            names.add(sub.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def foreign_private_access(source: str, own: set, others: set) -> List[str]:
    """``x._name`` where x is not self/cls and ``_name`` is one that another package of the project defines
    (``others``) and this one does not (``own``).  (A library's, such as scapy's ``Packet._overload_fields``,
    is that library's business.)"""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in others and node.attr not in own:
                found.append(f"line {node.lineno}: .{node.attr}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_reaches_into_another_packages_objects(package):
    """The faces use pecore's machinery through its public names (``Sender.c``, ``.lock``, ``.encap``...), and
    pecore knows the faces' objects not at all (it imports none of them: the import-linter contracts)."""
    runtime = {n: p for n, p in modules(REPO_ROOT, (package,)).items() if ".tools" not in n}
    own = private_names(modules(REPO_ROOT, (package,)).values())
    others = private_names(modules(REPO_ROOT, tuple(p for p in PACKAGES if p != package)).values())
    bad = {name: uses for name, path in runtime.items()
           if (uses := foreign_private_access(path.read_text(encoding="utf-8"), own, others))}
    assert not bad, bad


def test_the_private_access_check_can_fail():
    own = private_names(modules(REPO_ROOT, ("pypsp",)).values())
    others = private_names(modules(REPO_ROOT, ("pecore", "pyeesp", "pyesp")).values())
    assert "_core" in own and "_out_len" in others and "_receiver" in others and "_receiver" not in own
    assert foreign_private_access("def f(sender):\n    return sender._out_len\n", own, others)  # pecore.face's
    assert foreign_private_access("def f(sa):\n    return sa._receiver\n", own, others)  # pyeesp's and pyesp's
    assert not foreign_private_access("def f(encryptor):\n    return encryptor._core\n", own, others)
    assert not foreign_private_access("class A:\n    def f(self):\n        return self._out_len\n", own, others)
