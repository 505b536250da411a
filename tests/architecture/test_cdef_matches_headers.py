"""The extension's cffi declarations are generated from the C headers (pecore/_cdef.py), never written by hand.

What is left to check is what the generation could get wrong:

- it declares every public function and integer macro of core/include/pe/*.h, found here by a plain text scan of
  the headers that shares nothing with the generator, and leaves out exactly what its docstring says;
- everything the Python layer uses (``lib.X``, the types it gives ``ffi.new``/``ffi.cast``) is declared;
- the loaded extension was built from it (it has every name it declares);
- a header change shows up in the generated declarations, which still compile, with nothing edited elsewhere.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Dict, Set, Tuple

import pytest

from conftest import REPO_ROOT

cffi = pytest.importorskip("cffi")
pytest.importorskip("pycparser")
from cffi import FFI, model  # noqa: E402

INCLUDE = REPO_ROOT / "core" / "include"
PYTHON_LAYER = ("pecore", "pypsp", "pyeesp", "pyesp")


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_cdef = _load("pe_cdef_under_test", REPO_ROOT / "pecore" / "_cdef.py")


def declared(cdef: str) -> Tuple[Dict[str, object], Set[str], Dict[str, object]]:
    """({function name: type}, every name lib has: functions, macros, enumerators, {type name: cffi type})."""
    ffi = FFI()
    ffi.cdef(cdef)
    functions, names, types = {}, set(), {}
    for key, (tp, _q) in ffi._parser._declarations.items():
        kind, name = key.split(" ", 1)
        if kind == "function":
            functions[name] = tp
        if kind in ("function", "macro", "constant", "variable", "extern_python"):
            names.add(name)
        if kind in ("typedef", "struct", "anonymous"):
            types[name] = tp
        if isinstance(tp, model.EnumType):
            names.update(tp.enumerators)
    return functions, names, types


@pytest.fixture(scope="module")
def generated() -> str:
    return _cdef.generate(str(INCLUDE))


@pytest.fixture(scope="module")
def full_cdef(generated) -> str:
    """What pecore/_build.py hands cffi: the generated declarations and its own few."""
    return generated + _load("pe_build_under_test", REPO_ROOT / "pecore" / "_build.py").EXTRA_CDEF


def _top_level(path: Path):
    """A header's top-level statements, comments and preprocessor lines removed: a text scan, no C parser."""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", path.read_text(), flags=re.S)
    text = re.sub(r"^#ifdef __cplusplus\n.*?^#endif", " ", text, flags=re.S | re.M)  # extern "C" { ... }
    text = re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch in "{(":
            depth += 1
        elif ch in "})":
            depth -= 1
            if depth == 0 and ch == "}" and text[start:i].lstrip().startswith("static inline"):
                yield " ".join(text[start:i + 1].split())
                start = i + 1
        elif ch == ";" and depth == 0:
            yield " ".join(text[start:i].split())
            start = i + 1


def header_functions() -> Tuple[Set[str], Set[str]]:
    """(the functions the headers declare, the static inline ones), by name."""
    public, inline = set(), set()
    for h in sorted((INCLUDE / "pe").glob("*.h")):
        for stmt in _top_level(h):
            if stmt.startswith(("typedef", "struct", "enum", "extern")) or "(" not in stmt:
                continue
            name = re.search(r"(\w+)\s*\(", stmt).group(1)
            (inline if stmt.startswith("static inline") else public).add(name)
    return public, inline


def header_macros() -> Dict[str, str]:
    """{name: definition} of every #define in the headers, by a text scan."""
    out = {}
    for h in sorted((INCLUDE / "pe").glob("*.h")):
        for m in re.finditer(r"^\s*#\s*define\s+(\w+)(\(?)([^\n]*)", h.read_text(), flags=re.M):
            out[m.group(1)] = m.group(2) + m.group(3)
    return out


def test_every_public_function_is_declared(generated):
    functions, _names, _types = declared(generated)
    public, inline = header_functions()
    assert len(public) > 100, "the header scan found too few functions"
    assert sorted(public - set(functions)) == []
    assert sorted(set(functions) - public) == [], "declared, yet in no header"
    # the static inline helpers have no symbol; cffi would wrap them, nothing in Python needs them
    assert inline == {"pe_get16", "pe_get32", "pe_get64", "pe_put16", "pe_put32", "pe_put64", "pe_psp_hdr_len"}
    assert inline.isdisjoint(functions)


def test_the_integer_macros_are_declared_and_only_they_are_left_out(generated):
    _functions, names, _types = declared(generated)
    macros = header_macros()
    left_out = {m for m in macros if m not in names}
    guards = {m for m in macros if m.endswith("_H") and macros[m].strip() == ""}
    function_like = {m for m in macros if macros[m].startswith("(")}
    # SIZE_MAX comes from the real <stdint.h>, which the generator does not read
    assert macros["PE_FRAME_NO_ETHERTYPE"].strip() == "SIZE_MAX"
    assert left_out == guards | function_like | {"PE_FRAME_NO_ETHERTYPE"}
    # the X-macro lists of status.h and their per-entry helpers
    assert function_like == {"PE_STATUS_LIST", "PE_CATEGORY_LIST", "PE_STATUS_ENUM", "PE_CATEGORY_ENUM"}
    assert len(macros) - len(left_out) > 50


def test_the_const_objects_are_reached_through_set_source(generated, full_cdef):
    """parallel.h's transforms are `extern const`: cffi cannot take their address, _build.py's helper does."""
    text = (INCLUDE / "pe" / "parallel.h").read_text()
    objects = set(re.findall(r"^extern const pe_parallel_ops (\w+);", text, flags=re.M))
    assert len(objects) == 6
    _functions, names, _types = declared(generated)
    assert objects.isdisjoint(names)
    build = (REPO_ROOT / "pecore" / "_build.py").read_text()
    assert all(f"&{o}" in build for o in objects)
    assert "pe_py_parallel_ops" in declared(full_cdef)[0]


def _python_sources():
    for package in PYTHON_LAYER:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if path.name not in ("_build.py", "_cdef.py"):
                yield path, path.read_text()


def test_what_the_python_layer_uses_is_declared(full_cdef):
    _functions, names, _types = declared(full_cdef)
    used = {m for _p, text in _python_sources() for m in re.findall(r"\blib\.([A-Za-z_]\w*)", text)}
    assert len(used) > 100
    assert sorted(used - names) == []
    ffi = FFI()
    ffi.cdef(full_cdef)
    spelled = {t for _p, text in _python_sources()
               for t in re.findall(r'\bffi\.(?:new|cast|sizeof|typeof|offsetof)\(\s*"([^"]+)"', text)}
    assert len(spelled) > 20
    for t in sorted(spelled):
        ffi.typeof(t)  # raises on a type the declarations lack


def test_the_loaded_extension_is_built_from_them(full_cdef):
    from pecore._native import ffi, lib

    _functions, names, types = declared(full_cdef)
    assert sorted(n for n in names if not hasattr(lib, n)) == []
    for t in sorted(types):
        ffi.typeof(t)


def test_a_header_change_shows_up_without_editing_the_build(tmp_path):
    """A new function, macro and enumerator, and a struct field's new type, in a copy of core/include."""
    inc = tmp_path / "include"
    shutil.copytree(INCLUDE, inc)
    ip_h = inc / "pe" / "ip.h"
    text = ip_h.read_text()
    assert "size_t payload_len;" in text and "#endif" in text
    text = text.replace("size_t payload_len;", "uint32_t payload_len;", 1)
    probe = ("#define PE_CDEF_PROBE_LEN (3u << 2)\n"
             "typedef enum { PE_CDEF_PROBE_A = 5, PE_CDEF_PROBE_B } pe_cdef_probe_kind;\n"
             "pe_status pe_cdef_probe(const uint8_t *p, size_t n, pe_cdef_probe_kind k);\n")
    at = text.rindex("#endif")
    ip_h.write_text(text[:at] + probe + text[at:])
    cdef = _cdef.generate(str(inc))
    ffi = FFI()
    ffi.cdef(cdef)
    assert ffi.typeof("pe_cdef_probe_kind").relements == {"PE_CDEF_PROBE_A": 5, "PE_CDEF_PROBE_B": 6}
    assert "#define PE_CDEF_PROBE_LEN ..." in cdef.splitlines()
    functions, _names, _types = declared(cdef)
    assert functions["pe_cdef_probe"]._get_c_name() == \
        "pe_status(*)(uint8_t const *, size_t, pe_cdef_probe_kind)"
    assert dict(ffi.typeof("pe_udp_view").fields)["payload_len"].type is ffi.typeof("uint32_t")
    # and the declarations compile against the changed headers as the build compiles them
    ffi.set_source("pe_cdef_probe_mod", "\n".join(f'#include "{h}"' for h in _cdef.header_names(str(inc))))
    c_file = tmp_path / "probe.c"
    ffi.emit_c_code(str(c_file))
    cc = shutil.which("gcc") or shutil.which("cc")
    p = subprocess.run([cc, "-fsyntax-only", "-std=c11", f"-I{inc}", f"-I{sysconfig.get_paths()['include']}",
                        str(c_file)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-3000:]

