#!/usr/bin/env python3
"""Inline the pure-Lua decryption (dissectors/lua/src/) into psp.lua and eesp.lua, with the core's tables.

Each script must stay one file that a user copies into a plugin folder, yet the decryption code is shared:
it lives once in the modules src/pecrypto.lua lists (local MODULES), which are one chunk joined in that order, and
that chunk is copied here between the marker lines as a Lua long string, which the scripts compile only on Lua
5.3+ (Wireshark 4.6 has GcryptCipher; 4.0's Lua 5.2 could not parse the source).

The core's categories and statuses (core/include/pe/status.h: name, category, message) are written into
the module that has the "-- BEGIN STATUS TABLE" / "-- END STATUS TABLE" lines, and that block (Lua 5.2) is
copied into the scripts before the string as plain code: every path of the scripts, the Lua 5.2 one without
pelua too, takes a status's expert item from its category there.  In the inlined string the block is replaced by
a line that takes those tables as the chunk's arguments, so each script holds the table once.

The core's AEAD suites (core/src/proto/ipsec.c's suite_rows, with core/include/pe/ipsec.h's ENCR IDs: name,
IKEv2 name, AEAD, salt, IV, ICV, implicit IV, integrity only, key lengths) are written into a module
between "-- BEGIN SUITE TABLE" / "-- END SUITE TABLE", and PSP's crypto versions (core/src/proto/psp_hdr.c's
versions, with core/include/pe/psp.h's numbers) between "-- BEGIN PSP VERSION TABLE" / "-- END PSP VERSION
TABLE", and the field names of an eesp-sa line (core/src/io/keyfile_eesp.c's eesp_sa_field_names, which
pe_keyfile_eesp_sa_field_name returns) between "-- BEGIN EESP-SA FIELDS" / "-- END EESP-SA FIELDS": only the
decryption code and its key-file reader read them.  A status, a suite, a PSP version or an eesp-sa field added to
the core reaches the Lua side by running this script; tests/wireshark/test_lua_pure.py compares every table with
the core's own functions.

    python3 dissectors/lua/build_scripts.py          # rewrite the modules' tables, psp.lua and eesp.lua
    python3 dissectors/lua/build_scripts.py --check  # exit 1 if a file is not what this would write
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

LUA_DIR = Path(__file__).resolve().parent
SOURCE_DIR = LUA_DIR / "src"
#: The module that lists the others (local MODULES), in the order they are joined.
SOURCE = SOURCE_DIR / "pecrypto.lua"
CORE = LUA_DIR.parent.parent / "core"
STATUS_H = CORE / "include" / "pe" / "status.h"
IPSEC_H = CORE / "include" / "pe" / "ipsec.h"
IPSEC_C = CORE / "src" / "proto" / "ipsec.c"
PSP_H = CORE / "include" / "pe" / "psp.h"
PSP_HDR_C = CORE / "src" / "proto" / "psp_hdr.c"
KEYFILE_EESP_C = CORE / "src" / "io" / "keyfile_eesp.c"
SCRIPTS = [LUA_DIR / "psp.lua", LUA_DIR / "eesp.lua"]
BEGIN = "-- BEGIN GENERATED pecrypto"
END = "-- END GENERATED pecrypto"
TABLE_BEGIN = "-- BEGIN STATUS TABLE"
TABLE_END = "-- END STATUS TABLE"
SUITE_BEGIN = "-- BEGIN SUITE TABLE"
SUITE_END = "-- END SUITE TABLE"
VERSION_BEGIN = "-- BEGIN PSP VERSION TABLE"
VERSION_END = "-- END PSP VERSION TABLE"
FIELDS_BEGIN = "-- BEGIN EESP-SA FIELDS"
FIELDS_END = "-- END EESP-SA FIELDS"
#: What the inlined copy has between the status-table markers: the tables the script defines once, as arguments.
TABLE_ARGS = "local CATEGORY_LIST, STATUS_LIST = ...\n"
LINE_MAX = 118

# X(PE_CAT_..., "name", "description") and X(PE_..., "name", PE_CAT_..., "message"); C string contents whose
# escapes (\" \\ \n) mean the same in a Lua string.
C_STRING = r'"((?:[^"\\]|\\.)*)"'
CATEGORY_ROW = re.compile(rf"X\((PE_CAT_\w+), {C_STRING}, {C_STRING}\)")
STATUS_ROW = re.compile(rf"X\((PE_(?!CAT_)\w+), {C_STRING}, (PE_CAT_\w+), {C_STRING}\)")


def long_string(text: str) -> str:
    """`text` as a Lua long string that reads back exactly."""
    # A level whose closing bracket the text never holds, and that a text ending in "]=" cannot complete early.
    level = 1
    while f"]{'=' * level}]" in text or text.endswith("]" + "=" * level):
        level += 1
    eq = "=" * level
    # Lua drops a newline right after the opening bracket, so the text starts on the next line unchanged.
    return f"[{eq}[\n{text}]{eq}]"


def core_tables(header: str) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str, str]]]:
    """(name, description) of every category and (name, category, message) of every status, in the header's order."""
    categories, ids = [], {}
    for cid, name, description in CATEGORY_ROW.findall(header):
        ids[cid] = name
        categories.append((name, description))
    statuses = [(name, ids[cid], message) for _, name, cid, message in STATUS_ROW.findall(header)]
    if not categories or not statuses or statuses[0][0] != "ok":
        raise SystemExit(f"{STATUS_H}: found no PE_CATEGORY_LIST / PE_STATUS_LIST rows")
    return categories, statuses


# ipsec.h's "PE_ENCR_AES_GCM_16 = 20,"; ipsec.c's "#define AES_KEYS 3, {16, 24, 32}" and the rows of suite_rows:
# {PE_ENCR_..., "name", "IKEv2 name", PE_AEAD_..., salt, iv, icv, implicit_iv, integrity_only, KEY_LENGTHS}.
ENCR_VALUE = re.compile(r"\b(PE_ENCR_\w+) = (\d+),")
KEY_LENS_MACRO = re.compile(r"#define (\w+) (\d+), \{([\d, ]+)\}")
SUITE_ROW = re.compile(r",\s*".join([r"\{(PE_ENCR_\w+)", C_STRING, C_STRING, r"PE_AEAD_(\w+)", *[r"(\d+)"] * 5,
                                     r"(\w+)\}"]))


# ipsec.c's ESP-only rows with an integrity transform, cbc_rows: the same first ten cells (alg 0), then
# PE_AUTH_..., "IKEv2 INTEG name", integrity key octets.
CBC_ROW = re.compile(r",\s*".join([r"\{(PE_ENCR_\w+)", C_STRING, C_STRING, r"\d+", *[r"(\d+)"] * 3, r"\d+", r"\d+",
                                   r"(\w+)", r"PE_AUTH_\w+", C_STRING, r"(\d+)\}"]))


def c_rows(path: Path, source: str, array: str, row: "re.Pattern[str]", opener: str) -> List[Tuple[str, ...]]:
    """The rows of the C array `array` in `source`, every one of them: a row the pattern misses would silently
    lack a suite or version, so it stops the script."""
    table = re.search(rf"\b{array}\[\] = \{{(.*?)\n\}};", source, re.S)
    rows = row.findall(table.group(1)) if table else []
    if not rows or table is None or table.group(1).count(opener) != len(rows):
        raise SystemExit(f"{path}: cannot read every row of {array}")
    return rows


def core_suites(header: str, source: str) -> List[Tuple[int, str, str, str, int, int, int, bool, bool, List[int]]]:
    """(ENCR ID, name, IKEv2 name, AEAD, salt, IV, ICV, implicit IV, integrity only, key octets) of every suite, in
    the table's order."""
    ids = {name: int(v) for name, v in ENCR_VALUE.findall(header)}
    key_lens = {}
    for macro, n, lens in KEY_LENS_MACRO.findall(source):
        key_lens[macro] = [int(x) for x in lens.split(",")]
        if len(key_lens[macro]) != int(n):
            raise SystemExit(f"{IPSEC_C}: {macro} counts {n} key lengths, lists {len(key_lens[macro])}")
    rows = c_rows(IPSEC_C, source, "suite_rows", SUITE_ROW, "{PE_ENCR_")
    return [(ids[encr], name, ikev2, alg.lower().replace("_", "-"), int(salt), int(iv), int(icv), iiv == "1",
             only == "1", key_lens[lens]) for encr, name, ikev2, alg, salt, iv, icv, iiv, only, lens in rows]


def core_cbc_suites(header: str, source: str) -> List[Tuple[int, str, str, int, int, List[int], int]]:
    """(ENCR ID, name, IKEv2 name, IV, ICV, key octets, integrity key octets) of ESP's AES-CBC + HMAC suites."""
    ids = {name: int(v) for name, v in ENCR_VALUE.findall(header)}
    key_lens = {macro: [int(x) for x in lens.split(",")] for macro, n, lens in KEY_LENS_MACRO.findall(source)}
    rows = c_rows(IPSEC_C, source, "cbc_rows", CBC_ROW, "{PE_ENCR_")
    for _, _, _, salt, _, _, _, _, _ in rows:
        if salt != "0":
            raise SystemExit(f"{IPSEC_C}: an AES-CBC row with a salt")
    return [(ids[encr], name, ikev2, int(iv), int(icv), key_lens[lens], int(integ_key))
            for encr, name, ikev2, salt, iv, icv, lens, _, integ_key in rows]


# psp.h's "PE_PSP_AES_GCM_128 = 0," and "#define PE_PSP_ICV_LEN 16u"; psp_hdr.c's versions[] rows:
# {PE_PSP_..., "name", key_len, icv_len, gmac}.
PSP_VERSION_VALUE = re.compile(r"\b(PE_PSP_AES_\w+) = (\d+),")
PSP_DEFINE = re.compile(r"#define (PE_PSP_\w+) (\d+)u?\b")
PSP_ROW = re.compile(r",\s*".join([r"\{(PE_PSP_\w+)", C_STRING, r"(\w+)", r"(\w+)", r"([01])\}"]))


def core_psp_versions(header: str, source: str) -> List[Tuple[int, str, int, int, bool]]:
    """(version, name, derived key octets, ICV octets, AES-GMAC) of every PSP crypto version, in the table's order."""
    values = {name: int(v) for name, v in PSP_VERSION_VALUE.findall(header)}
    values.update({name: int(v) for name, v in PSP_DEFINE.findall(header)})
    rows = c_rows(PSP_HDR_C, source, "versions", PSP_ROW, "{PE_PSP_")

    def number(token: str) -> int:
        return int(token) if token.isdigit() else values[token]

    return [(values[v], name, number(key), number(icv), gmac == "1") for v, name, key, icv, gmac in rows]


def core_eesp_sa_fields(source: str) -> List[str]:
    """The names an eesp-sa line takes, in the parser's order."""
    table = re.search(r"\beesp_sa_field_names\[\] = \{(.*?)\};", source, re.S)
    body = table.group(1) if table else ""
    names = re.findall(C_STRING, body)
    # the list is the strings and its NULL end, nothing else: anything this reads past would be a lost field
    if not names or re.sub(C_STRING, "", body).replace(",", "").split() != ["NULL"]:
        raise SystemExit(f"{KEYFILE_EESP_C}: cannot read eesp_sa_field_names")
    return names


def eesp_sa_fields_block(source: str) -> str:
    out, line = ["local EESP_SA_FIELDS = {"], "   "
    for name in core_eesp_sa_fields(source):
        cell = f' "{name}",'
        if len(line) + len(cell) > LINE_MAX:
            out.append(line)
            line = "   "
        line += cell
    return "\n".join(out + [line, "}"]) + "\n"


def lua_cell(c) -> str:
    if isinstance(c, bool):
        return "true" if c else "false"
    if isinstance(c, list):
        return "{ " + ", ".join(map(str, c)) + " }"
    return f'"{c}"' if isinstance(c, str) else str(c)


def lua_table(variable: str, comment: str, rows, split_at: int) -> str:
    out = [f"local {variable} = {{", f"    -- {comment}"]
    for row in rows:
        cells = [lua_cell(c) for c in row]
        line = f"    {{ {', '.join(cells)} }},"
        if len(line) > LINE_MAX:
            line = f"    {{ {', '.join(cells[:split_at])},\n        {', '.join(cells[split_at:])} }},"
        out.append(line)
    return "\n".join(out) + "\n}\n"


def suite_block(header: str, source: str) -> str:
    return (lua_table("SUITE_LIST", "encr, project name, IKEv2 name, alg, salt, explicit IV, ICV, implicit IV, "
                      "integrity only, key octets", core_suites(header, source), 5)
            + lua_table("ESP_CBC_SUITE_LIST", "ESP only: encr, project name, IKEv2 names, IV, ICV, key octets, "
                        "integrity key octets", core_cbc_suites(header, source), 3))


def psp_version_block(header: str, source: str) -> str:
    return lua_table("PSP_VERSION_LIST", "version, name, derived key octets, ICV octets, AES-GMAC",
                     core_psp_versions(header, source), 2)


def lua_rows(variable: str, rows) -> str:
    out = [f"local {variable} = {{"]
    for row in rows:
        cells = [f'"{c}"' for c in row]
        line = f"    {{ {', '.join(cells)} }},"
        if len(line) > LINE_MAX:  # the last cell (the longest) on a line of its own
            line = f"    {{ {', '.join(cells[:-1])},\n        {cells[-1]} }},"
        out.append(line)
    return "\n".join(out) + "\n}\n"


def table_block(header: str) -> str:
    categories, statuses = core_tables(header)
    return lua_rows("CATEGORY_LIST", categories) + lua_rows("STATUS_LIST", statuses)


def between(text: str, begin: str, end: str, name: str) -> Tuple[int, int]:
    """Line indexes of the single begin marker and the end marker after it."""
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(begin)]
    ends = [i for i, line in enumerate(lines) if line.startswith(end)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(f"{name}: needs exactly one '{begin}' line and one '{end}' line after it")
    return starts[0], ends[0]


def with_block(source: str, begin: str, end: str, table: str, name: str) -> str:
    """The source with the block between the `begin` and `end` marker lines replaced by `table`."""
    lines = source.splitlines(keepends=True)
    start, stop = between(source, begin, end, name)
    return "".join(lines[: start + 1]) + table + "".join(lines[stop:])


def module_names(joiner: str) -> List[str]:
    """The modules src/pecrypto.lua joins, in its order."""
    listed = re.search(r"^local MODULES = \{(.*?)^\}", joiner, re.S | re.M)
    names = re.findall(r'^\s*"([\w.]+\.lua)",', listed.group(1), re.M) if listed else []
    if not names:
        raise SystemExit(f"{SOURCE}: found no module names in its local MODULES")
    return names


def read_modules(joiner: str) -> Dict[str, str]:
    return {name: (SOURCE_DIR / name).read_text(encoding="utf-8") for name in module_names(joiner)}


def inlined(joiner: str, modules: Optional[Dict[str, str]] = None) -> str:
    """The modules `joiner` (src/pecrypto.lua's text) lists, joined as the scripts hold them (from the files, or
    `modules`): the status tables come in as the chunk's arguments (the script has them as plain code already)."""
    texts = read_modules(joiner) if modules is None else modules
    source = "".join(texts[name] for name in module_names(joiner))
    return with_block(source, TABLE_BEGIN, TABLE_END, TABLE_ARGS, "the joined modules")


def with_table(modules: Dict[str, str], begin: str, end: str, table: str) -> None:
    """Writes `table` between the marker lines of the one module that has them."""
    holders = [name for name, text in modules.items() if any(ln.startswith(begin) for ln in text.splitlines())]
    if len(holders) != 1:
        raise SystemExit(f"{SOURCE_DIR}: needs exactly one module with a '{begin}' line, not {len(holders)}")
    modules[holders[0]] = with_block(modules[holders[0]], begin, end, table, f"src/{holders[0]}")


def block(source: str, table: str) -> str:
    return (
        f"{BEGIN} (from the modules src/pecrypto.lua lists, by build_scripts.py: edit them, then run it)\n"
        f"{table}"
        f"local PECRYPTO_SOURCE = {long_string(source)}\n"
        f"{END}\n"
    )


def render(script: str, source: str, table: str, name: str) -> str:
    lines = script.splitlines(keepends=True)
    start, end = between(script, BEGIN, END, name)
    return "".join(lines[:start]) + block(source, table) + "".join(lines[end + 1 :])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the files are up to date")
    args = ap.parse_args(argv)
    table = table_block(STATUS_H.read_text(encoding="utf-8"))
    suites = suite_block(IPSEC_H.read_text(encoding="utf-8"), IPSEC_C.read_text(encoding="utf-8"))
    versions = psp_version_block(PSP_H.read_text(encoding="utf-8"), PSP_HDR_C.read_text(encoding="utf-8"))
    fields = eesp_sa_fields_block(KEYFILE_EESP_C.read_text(encoding="utf-8"))
    joiner = SOURCE.read_text(encoding="utf-8")
    old_modules = read_modules(joiner)
    modules = dict(old_modules)
    for begin, end, rows in ((TABLE_BEGIN, TABLE_END, table), (SUITE_BEGIN, SUITE_END, suites),
                             (VERSION_BEGIN, VERSION_END, versions), (FIELDS_BEGIN, FIELDS_END, fields)):
        with_table(modules, begin, end, rows)
    source = inlined(joiner, modules)
    outputs = [(SOURCE_DIR / name, old_modules[name], modules[name]) for name in modules]
    for path in SCRIPTS:
        old = path.read_text(encoding="utf-8")
        outputs.append((path, old, render(old, source, table, path.name)))
    stale = [path for path, old, new in outputs if new != old]
    if args.check:
        if stale:
            names = ", ".join(str(p.relative_to(LUA_DIR)) for p in stale)
            print(f"out of date with core/include/pe/status.h, ipsec.h, psp.h, src/proto/ipsec.c, psp_hdr.c, "
                  f"src/io/keyfile_eesp.c or the modules src/pecrypto.lua lists: {names}; run {Path(__file__).name}",
                  file=sys.stderr)
            return 1
        return 0
    for path, old, new in outputs:
        if new != old:
            path.write_text(new, encoding="utf-8")
    print(f"updated: {', '.join(str(p.relative_to(LUA_DIR)) for p in stale)}" if stale else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
