#!/usr/bin/env python3
"""Inline dissectors/lua/src/pecrypto.lua into psp.lua and eesp.lua.

Each script must stay one file that a user copies into a plugin folder, yet the decryption code is shared:
it lives once in src/pecrypto.lua and is copied here between the marker lines as a Lua long string, which the
scripts compile only on Lua 5.3+ (Wireshark 4.6 has GcryptCipher; 4.0's Lua 5.2 could not parse the source).

    python3 dissectors/lua/build_scripts.py          # rewrite psp.lua and eesp.lua
    python3 dissectors/lua/build_scripts.py --check  # exit 1 if a script is not what this would write
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

LUA_DIR = Path(__file__).resolve().parent
SOURCE = LUA_DIR / "src" / "pecrypto.lua"
SCRIPTS = [LUA_DIR / "psp.lua", LUA_DIR / "eesp.lua"]
BEGIN = "-- BEGIN GENERATED pecrypto"
END = "-- END GENERATED pecrypto"


def long_string(text: str) -> str:
    """`text` as a Lua long string that reads back exactly."""
    # A level whose closing bracket the text never holds, and that a text ending in "]=" cannot complete early.
    level = 1
    while f"]{'=' * level}]" in text or text.endswith("]" + "=" * level):
        level += 1
    eq = "=" * level
    # Lua drops a newline right after the opening bracket, so the text starts on the next line unchanged.
    return f"[{eq}[\n{text}]{eq}]"


def block(source: str) -> str:
    return (
        f"{BEGIN} (from src/pecrypto.lua by build_scripts.py: edit that file, then run the script)\n"
        f"local PECRYPTO_SOURCE = {long_string(source)}\n"
        f"{END}\n"
    )


def render(script: str, source: str, name: str) -> str:
    lines = script.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith(BEGIN)]
    ends = [i for i, line in enumerate(lines) if line.startswith(END)]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise SystemExit(f"{name}: needs exactly one '{BEGIN}' line and one '{END}' line after it")
    return "".join(lines[: starts[0]]) + block(source) + "".join(lines[ends[0] + 1 :])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check that the scripts are up to date")
    args = ap.parse_args(argv)
    source = SOURCE.read_text(encoding="utf-8")
    stale = []
    for path in SCRIPTS:
        old = path.read_text(encoding="utf-8")
        new = render(old, source, path.name)
        if new == old:
            continue
        stale.append(path.name)
        if not args.check:
            path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"out of date with src/pecrypto.lua: {', '.join(stale)}; run {Path(__file__).name}", file=sys.stderr)
        return 1
    if not args.check:
        print(f"updated: {', '.join(stale)}" if stale else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
