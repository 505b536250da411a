#!/usr/bin/env python3
"""Inline dissectors/lua/src/pecrypto.lua into psp.lua and eesp.lua, with the core's status table.

Each script must stay one file that a user copies into a plugin folder, yet the decryption code is shared:
it lives once in src/pecrypto.lua and is copied here between the marker lines as a Lua long string, which the
scripts compile only on Lua 5.3+ (Wireshark 4.6 has GcryptCipher; 4.0's Lua 5.2 could not parse the source).

The core's categories and statuses (core/include/pe/status.h: name, category, message) are written into
src/pecrypto.lua between its "-- BEGIN STATUS TABLE" / "-- END STATUS TABLE" lines, and that block (Lua 5.2) is
copied into the scripts before the string as plain code: every path of the scripts, the Lua 5.2 one without
pelua too, takes a status's expert item from its category there.  A status added to the core reaches the Lua
side by running this script.

    python3 dissectors/lua/build_scripts.py          # rewrite src/pecrypto.lua's table, psp.lua and eesp.lua
    python3 dissectors/lua/build_scripts.py --check  # exit 1 if a file is not what this would write
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import List, Tuple

LUA_DIR = Path(__file__).resolve().parent
SOURCE = LUA_DIR / "src" / "pecrypto.lua"
STATUS_H = LUA_DIR.parent.parent / "core" / "include" / "pe" / "status.h"
SCRIPTS = [LUA_DIR / "psp.lua", LUA_DIR / "eesp.lua"]
BEGIN = "-- BEGIN GENERATED pecrypto"
END = "-- END GENERATED pecrypto"
TABLE_BEGIN = "-- BEGIN STATUS TABLE"
TABLE_END = "-- END STATUS TABLE"
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


def with_table(source: str, table: str) -> str:
    """The source with its status-table block replaced by `table`."""
    lines = source.splitlines(keepends=True)
    start, end = between(source, TABLE_BEGIN, TABLE_END, "src/pecrypto.lua")
    return "".join(lines[: start + 1]) + table + "".join(lines[end:])


def block(source: str, table: str) -> str:
    return (
        f"{BEGIN} (from src/pecrypto.lua by build_scripts.py: edit that file, then run the script)\n"
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
    old_source = SOURCE.read_text(encoding="utf-8")
    source = with_table(old_source, table)
    outputs = [(SOURCE, old_source, source)]
    for path in SCRIPTS:
        old = path.read_text(encoding="utf-8")
        outputs.append((path, old, render(old, source, table, path.name)))
    stale = [path for path, old, new in outputs if new != old]
    if args.check:
        if stale:
            names = ", ".join(str(p.relative_to(LUA_DIR)) for p in stale)
            print(f"out of date with core/include/pe/status.h or src/pecrypto.lua: {names}; run {Path(__file__).name}",
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
