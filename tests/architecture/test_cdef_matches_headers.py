"""pecore/_build.py's CDEF is a hand copy of the C headers: it must say what core/include/pe/*.h say.

The headers are preprocessed (``gcc -E`` with stand-in <stddef.h>/<stdint.h>, so only the project's own declarations
remain), parsed with pycparser (static inline bodies dropped) and read back by cffi's own cdef parser, exactly as
the CDEF is; the two sets of declarations are then compared:

- every function of the CDEF: the same return type and parameter types as the header's prototype;
- every struct / typedef'd struct: the same field names and types (a CDEF struct ending in ``...;`` may name only
  some fields; an opaque one only needs to exist);
- every enum: the same enumerators with the same values (a ``...`` enum may name only some);
- every typedef (function pointers, ``int...`` integer types): the same type (``int...`` accepts any integer or
  enum type);
- every constant (``static const int X;``, ``#define X ...``): defined by the headers, as enumerator or macro.
"""
from __future__ import annotations

import ast as pyast
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO_ROOT

cffi = pytest.importorskip("cffi")
pycparser = pytest.importorskip("pycparser")
from cffi import FFI, model  # noqa: E402
from pycparser import c_ast, c_generator, c_parser  # noqa: E402

INCLUDE = REPO_ROOT / "core" / "include"
# Declared in the CDEF for the --version line, from OpenSSL's headers, not the project's.
EXTERNAL = {"function OpenSSL_version", "macro OPENSSL_VERSION"}
# Functions _build.py itself defines in the extension's source (set_source), with no header to compare against.
_BUILD_SOURCE = (REPO_ROOT / "pecore" / "_build.py").read_text()
EXTERNAL |= {f"function {m}" for m in re.findall(r'"static [^"(]*?\b(\w+)\(', _BUILD_SOURCE)}
_STUB_TYPES = {
    "stddef.h": "typedef unsigned long size_t;\n#define NULL 0\n",
    "stdint.h": "".join(f"typedef {c} {n};\n" for c, n in [
        ("unsigned char", "uint8_t"), ("unsigned short", "uint16_t"), ("unsigned int", "uint32_t"),
        ("unsigned long long", "uint64_t"), ("signed char", "int8_t"), ("short", "int16_t"), ("int", "int32_t"),
        ("long long", "int64_t")]),
}
_KNOWN_TO_CFFI = {"size_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "int8_t", "int16_t", "int32_t", "int64_t"}


def cdef_text(build_py: Path) -> str:
    """The CDEF string of _build.py, read without running the build script."""
    tree = pyast.parse(build_py.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, pyast.Assign) and any(getattr(t, "id", None) == "CDEF" for t in node.targets):
            return pyast.literal_eval(node.value)
    raise AssertionError(f"no CDEF in {build_py}")


def preprocess(include: Path, tmp: Path) -> tuple:
    """(declarations as cffi cdef text, macro names) of every header under include/pe."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.fail("a C compiler is needed (the build needs one too)")
    stub = tmp / "stub"
    stub.mkdir(exist_ok=True)
    for name, text in _STUB_TYPES.items():
        (stub / name).write_text(text)
    src = tmp / "all.c"
    src.write_text("".join(f'#include "pe/{h.name}"\n' for h in sorted((include / "pe").glob("*.h"))))
    base = [gcc, "-E", "-nostdinc", f"-I{stub}", f"-I{include}", str(src)]
    text = subprocess.run(base + ["-P"], check=True, capture_output=True, text=True).stdout
    macros = subprocess.run(base + ["-dM"], check=True, capture_output=True, text=True).stdout
    macro_names = {line.split()[1].split("(")[0] for line in macros.splitlines() if line.startswith("#define ")}
    tree = c_parser.CParser().parse(text, "all.i")
    gen = c_generator.CGenerator()
    out = []
    for ext in tree.ext:
        decl = ext.decl if isinstance(ext, c_ast.FuncDef) else ext  # a static inline: keep its prototype
        if isinstance(ext, c_ast.FuncDef):
            decl.storage, decl.funcspec = [], []
        if isinstance(decl, c_ast.Typedef) and decl.name in _KNOWN_TO_CFFI:
            continue
        out.append(gen.visit(decl) + ";")
    return "\n".join(out), macro_names


def declarations(text: str) -> Dict[str, tuple]:
    ffi = FFI()
    ffi.cdef(text)
    return dict(ffi._parser._declarations)


def cname(tp) -> str:
    """A type's C spelling, with cffi's marks for anonymous (typedef'd) structs and enums removed."""
    return tp._get_c_name().replace("$", "").replace("struct ", "").replace("enum ", "")


def same_type(ours, theirs) -> bool:
    if isinstance(ours, model.UnknownIntegerType):  # `typedef int... x;`: any integer type will do
        return isinstance(theirs, (model.PrimitiveType, model.EnumType, model.UnknownIntegerType))
    if isinstance(ours, model.ArrayType) and ours.length == "...":  # `T x[...];`: the length comes from C
        return isinstance(theirs, model.ArrayType) and same_type(ours.item, theirs.item)
    return cname(ours) == cname(theirs)


def compare(cdef: str, headers: str, macros: set) -> List[str]:
    ours, theirs = declarations(cdef), declarations(headers)
    by_typedef = {k.split(" ", 1)[1]: v[0] for k, v in theirs.items() if k.startswith("typedef ")}
    enumerators = {}
    for key, (tp, _q) in theirs.items():
        if isinstance(tp, model.EnumType):
            enumerators.update(zip(tp.enumerators, tp.enumvalues))
    problems = []
    for key, (tp, _q) in ours.items():
        kind, name = key.split(" ", 1)
        if key in EXTERNAL or kind == "extern_python":
            continue
        if kind == "function":
            got = theirs.get(key)
            if got is None:
                problems.append(f"{name}: declared in CDEF, in no header")
            elif cname(tp) != cname(got[0]):
                problems.append(f"{name}: CDEF {cname(tp)}, header {cname(got[0])}")
        elif kind in ("constant", "macro"):
            if name not in enumerators and name not in macros:
                problems.append(f"{name}: a CDEF constant the headers do not define")
        elif kind in ("typedef", "struct", "anonymous"):
            other = by_typedef.get(name) if kind != "struct" else (theirs.get(key) or (by_typedef.get(name), 0))[0]
            if other is None:
                problems.append(f"{kind} {name}: in CDEF, in no header")
                continue
            if isinstance(tp, model.StructType):
                problems += compare_struct(name, tp, other)
            elif isinstance(tp, model.EnumType):
                problems += compare_enum(name, tp, other)
            elif not same_type(tp, other):
                problems.append(f"typedef {name}: CDEF {cname(tp)}, header {cname(other)}")
    return sorted(set(problems))


def compare_struct(name: str, ours, theirs) -> List[str]:
    if not isinstance(theirs, model.StructType):
        return [f"struct {name}: a struct in CDEF, {cname(theirs)} in the header"]
    if ours.fldnames is None:  # opaque in the CDEF
        return []
    if theirs.fldnames is None:
        return [f"struct {name}: fields in CDEF, opaque in the header"]
    fields = dict(zip(theirs.fldnames, zip(theirs.fldtypes, theirs.fldbitsize)))
    problems = []
    for fname, ftype, fbits in zip(ours.fldnames, ours.fldtypes, ours.fldbitsize):
        if fname not in fields:
            problems.append(f"struct {name}: field {fname} is not in the header")
        elif not same_type(ftype, fields[fname][0]) or fbits != fields[fname][1]:
            problems.append(f"struct {name}.{fname}: CDEF {cname(ftype)}, header {cname(fields[fname][0])}")
    if not ours.partial and list(ours.fldnames) != list(theirs.fldnames):
        problems.append(f"struct {name}: CDEF fields {list(ours.fldnames)}, header {list(theirs.fldnames)} "
                        "(end the CDEF struct with `...;` to declare only some)")
    return problems


def compare_enum(name: str, ours, theirs) -> List[str]:
    if not isinstance(theirs, model.EnumType):
        return [f"enum {name}: an enum in CDEF, {cname(theirs)} in the header"]
    values = dict(zip(theirs.enumerators, theirs.enumvalues))
    problems = [f"enum {name}: {e} is not in the header" for e in ours.enumerators if e not in values]
    if not ours.partial:
        if list(ours.enumerators) != list(theirs.enumerators):
            problems.append(f"enum {name}: CDEF {list(ours.enumerators)}, header {list(theirs.enumerators)}")
        problems += [f"enum {name}: {e} = {v} in CDEF, {values[e]} in the header"
                     for e, v in zip(ours.enumerators, ours.enumvalues) if e in values and values[e] != v]
    return problems


@pytest.fixture(scope="module")
def headers(tmp_path_factory):
    return preprocess(INCLUDE, tmp_path_factory.mktemp("cdef"))


# Differences between CDEF and the headers that are known and accepted (none today).  Strict: a fixed one must
# leave this list, and nothing else may differ.
KNOWN: Dict[str, str] = {}


def test_cdef_matches_the_headers(headers):
    text, macros = headers
    problems = compare(cdef_text(REPO_ROOT / "pecore" / "_build.py"), text, macros)
    assert [p for p in problems if p not in KNOWN] == []
    assert sorted(KNOWN) == [p for p in problems if p in KNOWN], "a known difference was fixed: drop it from KNOWN"


def test_every_cdef_declaration_was_compared(headers):
    """The comparison covers the whole CDEF: functions, structs, enums, typedefs and constants."""
    kinds = {k.split(" ", 1)[0] for k in declarations(cdef_text(REPO_ROOT / "pecore" / "_build.py"))}
    assert kinds <= {"function", "typedef", "struct", "anonymous", "constant", "macro", "extern_python"}


@pytest.mark.parametrize("old,new,problem", [
    ("pe_status pe_psp_tx_set_next_iv(pe_psp_tx *tx, uint64_t next);",
     "pe_status pe_psp_tx_set_next_iv(pe_psp_tx *tx, uint32_t next);", "pe_psp_tx_set_next_iv: CDEF"),
    ("const char *pe_status_name(pe_status s);", "char *pe_status_name(pe_status s);", "pe_status_name: CDEF"),
    ("    size_t payload_offset;\n    size_t payload_len;\n} pe_udp_view;",
     "    size_t payload_len;\n    size_t payload_offset;\n} pe_udp_view;", "struct pe_udp_view: CDEF fields"),
    ("    uint16_t sport, dport;", "    uint32_t sport, dport;", "struct pe_udp_view.sport"),
    ("typedef enum { PE_VERDICT_TRANSFORMED, PE_VERDICT_PASSED, PE_VERDICT_FAILED } pe_verdict;",
     "typedef enum { PE_VERDICT_PASSED, PE_VERDICT_TRANSFORMED, PE_VERDICT_FAILED } pe_verdict;", "enum pe_verdict"),
])
def test_a_cdef_that_disagrees_fails(headers, old, new, problem):
    text, macros = headers
    cdef = cdef_text(REPO_ROOT / "pecore" / "_build.py")
    assert old in cdef
    got = compare(cdef.replace(old, new, 1), text, macros)
    assert any(p.startswith(problem) for p in got), got


def test_a_header_that_disagrees_fails(tmp_path):
    """The other direction: a header changed under an unchanged CDEF."""
    inc = tmp_path / "include"
    shutil.copytree(INCLUDE, inc)
    ip_h = inc / "pe" / "ip.h"
    text = ip_h.read_text()
    assert "size_t payload_len;" in text
    ip_h.write_text(text.replace("size_t payload_len;", "uint32_t payload_len;", 1))
    hdr, macros = preprocess(inc, tmp_path)
    got = [p for p in compare(cdef_text(REPO_ROOT / "pecore" / "_build.py"), hdr, macros) if p not in KNOWN]
    assert got == ["struct pe_udp_view.payload_len: CDEF size_t, header uint32_t"], got
