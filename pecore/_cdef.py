"""The cffi declarations of the C core, read from its public headers (core/include/pe/*.h) at build time.

The headers are the one definition of every status, suite, option, struct and function; this module turns them
into cffi API-mode ``cdef`` text so that nothing is declared by hand a second time.  It runs from the build
(pecore/_build.py, under setuptools or directly) and from tests/architecture/test_cdef_matches_headers.py, so it
needs only what the build needs: a C compiler (its preprocessor), cffi and pycparser (which cffi depends on).

How: the headers are preprocessed with ``-nostdinc`` and stand-in <stddef.h>/<stdint.h>, so that only the
project's own declarations remain, parsed with pycparser and written back out.  Left out, because cffi cannot
take them or the Python layer reaches them another way:

- static inline functions (bytes.h's loads and stores, pe_psp_hdr_len): helpers for C callers, no symbol;
- object declarations (parallel.h's ``extern const pe_parallel_ops``): cffi reads a ``const`` object by value
  and cannot give its address, which is what pe_parallel_new takes; _build.py's set_source hands it out;
- macros that are not integer constant expressions made of literals (include guards, function-like macros,
  PE_FRAME_NO_ETHERTYPE = SIZE_MAX from the real <stdint.h>); the integer ones become ``#define NAME ...``, so
  the C compiler, not this module, gives their values.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sysconfig
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from pycparser import c_ast, c_generator, c_parser

# The standard types the public headers use, as cffi knows them already (so they are not declared again).
_STUB_HEADERS = {
    "stddef.h": "typedef unsigned long size_t;\n#define NULL 0\n",
    "stdint.h": "".join(f"typedef {c} {n};\n" for c, n in [
        ("unsigned char", "uint8_t"), ("unsigned short", "uint16_t"), ("unsigned int", "uint32_t"),
        ("unsigned long long", "uint64_t"), ("signed char", "int8_t"), ("short", "int16_t"), ("int", "int32_t"),
        ("long long", "int64_t")]),
}
KNOWN_TO_CFFI = frozenset({"size_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "int8_t", "int16_t", "int32_t",
                           "int64_t"})
_MACRO_MARK = "__pe_cdef_macro_"
_INTEGER_CASTS = frozenset({"char", "signed", "unsigned", "short", "int", "long", "size_t", "uint8_t", "uint16_t",
                            "uint32_t", "uint64_t", "int8_t", "int16_t", "int32_t", "int64_t"})


def header_names(include: str) -> List[str]:
    """The public headers, as ``pe/name.h``, in a stable order."""
    return sorted(f"pe/{n}" for n in os.listdir(os.path.join(include, "pe")) if n.endswith(".h"))


def _compiler(cc: Optional[str]) -> List[str]:
    return shlex.split(cc or os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _preprocess(cc: List[str], flags: List[str], source: str, tmp: str, extra: Sequence[str] = ()) -> str:
    src = os.path.join(tmp, "cdef.c")
    with open(src, "w", encoding="utf-8") as f:
        f.write(source)
    return subprocess.run([*cc, "-E", *extra, *flags, src], check=True, capture_output=True, text=True).stdout


def _is_integer_constant(node: c_ast.Node) -> bool:
    """Whether an expression is made of integer literals, operators and integer casts only."""
    if isinstance(node, c_ast.Constant):
        return node.type in ("int", "unsigned int", "long int", "unsigned long int", "long long int",
                             "unsigned long long int")
    if isinstance(node, c_ast.UnaryOp):
        return node.op in ("-", "+", "~", "!") and _is_integer_constant(node.expr)
    if isinstance(node, c_ast.BinaryOp):
        return _is_integer_constant(node.left) and _is_integer_constant(node.right)
    if isinstance(node, c_ast.TernaryOp):
        return all(_is_integer_constant(n) for n in (node.cond, node.iftrue, node.iffalse))
    if isinstance(node, c_ast.Cast):
        names = getattr(node.to_type.type.type, "names", None)
        return bool(names) and set(names) <= _INTEGER_CASTS and _is_integer_constant(node.expr)
    return False


def read_headers(include: str, cc: Optional[str] = None) -> Tuple[List[str], Dict[str, bool]]:
    """(every declaration of the headers, as C text; {macro name: whether it is an integer constant})."""
    cc_argv = _compiler(cc)
    with tempfile.TemporaryDirectory(prefix="pe-cdef-") as tmp:
        stub = os.path.join(tmp, "stub")
        os.mkdir(stub)
        for name, text in _STUB_HEADERS.items():
            with open(os.path.join(stub, name), "w", encoding="utf-8") as f:
                f.write(text)
        flags = ["-nostdinc", f"-I{stub}", f"-I{include}"]
        includes = "".join(f'#include "{h}"\n' for h in header_names(include))
        code = _preprocess(cc_argv, flags, includes, tmp, ["-P"])
        predefined = _preprocess(cc_argv, flags, "", tmp, ["-dM"])
        defined = _preprocess(cc_argv, flags, includes, tmp, ["-dM"])
        own = sorted({line.split()[1] for line in defined.splitlines() if line.startswith("#define ")}
                     - {line.split()[1] for line in predefined.splitlines() if line.startswith("#define ")}
                     - {"NULL"})
        # function-like macros (NAME(...)) are split off by line.split()[1] as "NAME(x)": never constants
        objects = [m for m in own if "(" not in m]
        expanded = _preprocess(cc_argv, flags, includes + "".join(f"{_MACRO_MARK}{m} = ({m});\n" for m in objects),
                               tmp, ["-P"])
    macros = {m.split("(")[0]: False for m in own}
    parser = c_parser.CParser()
    for line in expanded.splitlines():
        if not line.startswith(_MACRO_MARK):
            continue
        name = line[len(_MACRO_MARK):].split(" ", 1)[0]
        try:
            init = parser.parse(f"int {line}").ext[0].init
        except c_parser.ParseError:  # an empty macro (an include guard) and the like
            continue
        macros[name] = _is_integer_constant(init)
    tree = parser.parse(code, "pe-headers.i")
    gen = c_generator.CGenerator()
    decls = []
    for ext in tree.ext:
        if isinstance(ext, c_ast.FuncDef):
            continue  # a static inline: no symbol to bind
        if isinstance(ext, c_ast.Typedef) and ext.name in KNOWN_TO_CFFI:
            continue
        if isinstance(ext, c_ast.Decl) and ext.name is not None and not isinstance(ext.type, c_ast.FuncDecl):
            continue  # an object: see the module's docstring
        if isinstance(ext, c_ast.Decl) and "static" in ext.storage:
            continue
        decls.append(gen.visit(ext) + ";")
    return decls, macros


def generate(include: str, cc: Optional[str] = None) -> str:
    """The cffi cdef of every header under ``include/pe``."""
    decls, macros = read_headers(include, cc)
    return "\n".join(decls + [f"#define {m} ..." for m, integer in sorted(macros.items()) if integer]) + "\n"
