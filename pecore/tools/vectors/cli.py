"""The ``vectors generate | check`` subcommand of the ``pypsp``, ``pyeesp`` and ``pyesp`` CLIs, and ``python -m
pecore.tools.vectors`` (counts, validate)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, List, Optional, Sequence

from pecore.tools.vectors.check import check_doc, check_files, format_reports, reports_json
from pecore.tools.vectors.counts import count_rows, counts_markdown, update_readme
from pecore.tools.vectors.documents import load_doc
from pecore.tools.vectors.families import Family, register_family
from pecore.tools.vectors.output import write_vector_files
from pecore.tools.vectors.rng import DEFAULT_SEED
from pecore.tools.vectors.schema import MissingExtra, require_jsonschema, validate


def _needs_jsonschema() -> None:
    """The CLI's usage/environment error (exit status 2) when the 'vectors' extra is missing."""
    from pecore.tools.cli import UsageError

    try:
        require_jsonschema()
    except MissingExtra as e:
        raise UsageError(str(e)) from None


def cmd_generate(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if not args.no_check:
        _needs_jsonschema()  # before anything is written
    fam: Family = args.family
    files = fam.generate(args.seed)
    out = Path(args.out)
    stale: List[Path] = []
    if args.pcap:
        # stale pcaps of this family's files (a group that went away) must not linger: removed once the new
        # set is in place
        for vf in files:
            stem = vf.name.removesuffix("_test.json")
            stale += list((out / "pcap").glob(f"{stem}_g*.pcap")) + list((out / "pcap").glob(f"{stem}_g*.keys"))
    write_vector_files(files, out, fam.schemas, pcap=args.pcap, stale=stale)
    reports = [check_doc(vf.doc, vf.name) for vf in files] if not args.no_check else []
    n = sum(vf.doc["numberOfTests"] for vf in files)
    print(f"{fam.name}: wrote {len(files)} vector files, {n} tests, to {out} (seed {args.seed}) "
          f"in {time.perf_counter() - t0:.1f} s")
    for vf in files:
        print(f"  {vf.name}: {vf.doc['numberOfTests']} tests in {len(vf.doc['testGroups'])} groups"
              + (f", {len(vf.pcaps)} pcaps" if args.pcap else ""))
    if update_readme(out):
        print(f"  updated the counts table of {out / 'README.md'}")
    if reports:
        bad = [r for r in reports if not r.ok]
        if bad:
            print(format_reports(bad, quiet=True))
            print("core check FAILED on the generated files", file=sys.stderr)
            return 1
        print(f"  core check: all {n} tests pass")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    _needs_jsonschema()
    reports = check_files(args.files, loose=args.loose)
    if args.json:
        print(json.dumps(reports_json(reports), indent=2))
    else:
        print(format_reports(reports, verbose=args.verbose, quiet=args.quiet))
    return 0 if all(r.ok for r in reports) else 1


def register(sub: Any, family: Family) -> None:
    """Add the ``vectors`` subcommand (generate | check) for ``family`` to a CLI's subparsers."""
    register_family(family)
    what = family.name.upper()
    v = sub.add_parser("vectors", help=f"generate or check {what} interop test vectors (vectors/README.md)")
    vs = v.add_subparsers(dest="vectors_command", required=True)
    g = vs.add_parser("generate", help=f"write the {what} vector files, schemas, pcaps and key files")
    g.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"RNG seed (default {DEFAULT_SEED}); "
                   "the same seed always gives byte-identical files")
    g.add_argument("--out", default="vectors", help="output directory (default: vectors)")
    g.add_argument("--no-pcap", dest="pcap", action="store_false", help="skip the per-group pcaps and key files")
    g.add_argument("--no-check", action="store_true", help="skip running the new files against the core")
    g.set_defaults(func=cmd_generate, family=family)
    c = vs.add_parser("check", help="run vector files (ours or anyone's in the schema) against the core, per tcId")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.add_argument("--json", action="store_true", help="a JSON report instead of text")
    c.add_argument("--loose", action="store_true",
                   help="for invalid tests, only require a rejection, not the same status name")
    c.add_argument("-v", "--verbose", action="store_true", help="list passing tests too")
    c.add_argument("-q", "--quiet", action="store_true", help="only failures and the total")
    c.set_defaults(func=cmd_check)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pecore.tools.vectors", description="Vector-file utilities.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("counts", help="counts per vector file and family")
    c.add_argument("--dir", default="vectors")
    c.add_argument("--markdown", action="store_true", help="print the README table")
    c.add_argument("--update", action="store_true", help="rewrite the table between the markers of <dir>/README.md")
    v = sub.add_parser("validate", help="validate vector files against their JSON Schema")
    v.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    if args.command == "counts":
        rows = count_rows(args.dir)
        if args.update:
            if not update_readme(args.dir):
                print(f"{args.dir}/README.md has no counts markers", file=sys.stderr)
                return 1
            print(f"updated {args.dir}/README.md")
        elif args.markdown:
            print(counts_markdown(rows))
        else:
            print(json.dumps(rows, indent=2))
        return 0
    try:
        require_jsonschema()
    except MissingExtra as e:
        print(f"{p.prog}: error: {e}", file=sys.stderr)
        return 2
    bad = 0
    for f in args.files:
        errs = validate(load_doc(f), path=f)
        print(f"{f}: " + ("ok" if not errs else f"{len(errs)} error(s)"))
        for e in errs[:20]:
            print(f"  {e}")
        bad += bool(errs)
    return 1 if bad else 0
