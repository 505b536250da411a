"""Every citation of the specification in the repository resolves to docs/spec/.

Code, tests and documents cite the project's specification as ``psp.md §9.3``, ``eesp.md §16 step 4``,
``§7 check 6``, ``PSP §4``, ``eesp.md §19 E1`` or a decision ``D13``.  Those citations mean docs/spec/psp.md and
docs/spec/eesp.md, where every section, cited step and decision carries an anchor (``<a id="psp-9.3"></a>``,
``eesp-16-step-4``, ``eesp-D13``).  This test scans the tracked files (``git ls-files``, docs/spec itself aside)
and fails, naming file:line, for a citation without its anchor.

How a citation is read:

- ``psp.md``/``eesp.md`` (any path before it), ``PSP``/``EESP`` right before ``§`` name the document; a ``§``
  that follows another one (``§3, §4``, ``§14/§16``, ``§6-§8``) belongs to the same document; ``RFC nnnn §``,
  ``draft`` and ``Fig.`` are other documents and are not checked.
- A bare ``§`` is read in the file's own document: the one its path names (eesp, psp), unless the file also speaks
  of the other protocol, in which case it must resolve in either.
- ``conventions.md §`` names a document the repository does not have, so it never resolves.
- ``Dn`` and ``Dn-Dm`` are the decisions of eesp.md §18.

The test also fails when a tracked file takes meaning from outside the repository: the shared spec notes
(``shared`` + ``/spec``) anywhere, and outside tests/ any ``../shared`` path other than the reference captures
(``shared/reference``, located by data scripts).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = "docs/spec/"
SPECS = ("psp", "eesp")

ANCHOR_RE = re.compile(r'<a id="([^"]+)"></a>')

# One § token: a section (9, 9.3, 3.3a), then optionally its steps or checks, or vectors E1..E5.
SECTION_RE = re.compile(
    r"§\s?(?P<sec>\d+(?:\.\d+)*[a-z]?)"
    r"(?:\s+(?P<kind>steps?|checks?)\s+(?P<nums>\d+(?:\s*(?:[-–]|,\s*and|,|and)\s*\d+)*))?"
    r"(?:\s+(?:vectors?\s+)?E(?P<e1>\d)(?:\s*[-–]\s*E?(?P<e2>\d))?\b)?"
)
# What names the document right before a § token (the text up to the token ends with it).
OWNER_RE = re.compile(
    r"(?:(?P<file>\b(?:psp|eesp|conventions))\.md"
    r"|(?P<proto>\b(?:PSP|EESP))"
    r"|(?P<external>\bRFC\s?\d+|\bdraft(?:'s)?|\bFig\.?))"
    r"[\s(]*$"
)
# Between two § tokens of one chain: separators, connectives and decision numbers only.
CHAIN_GAP_RE = re.compile(r"[\s,/;]*(?:(?:and|or)\s+)?(?:D\d{1,2}[\s,;]*(?:and\s+)?)*")
RANGE_GAP_RE = re.compile(r"\s*[-–]\s*")
DECISION_RE = re.compile(r"\bD(\d{1,2})\b(?:\s*[-–]\s*D(\d{1,2})\b)?")
APPENDIX_RE = re.compile(r"\beesp\.md\s+Appendix\s+([A-Z])\b")

# Meaning taken from outside the repository (split so this file does not match itself).
SHARED_SPEC = "shared" + "/spec"
SHARED_SPEC_PHRASE = re.compile(r"shared spec(?:ification)? (?:directory|notes)")
SHARED_PATH = re.compile(r"(?:\.\./|/work/)shared\b")
SHARED_DATA = "shared/reference"
# Scripts that locate ../shared for the reference captures (test data), whole directory at once.
DATA_LOCATORS = {"scripts/wireshark-chroot.sh"}
# This file: its own examples of bad citations must not count.
SELF = "tests/architecture/test_spec_citations.py"


def spec_anchors() -> Dict[str, Set[str]]:
    out = {}
    for spec in SPECS:
        text = (ROOT / SPEC_DIR / f"{spec}.md").read_text(encoding="utf-8")
        out[spec] = set(ANCHOR_RE.findall(text))
    return out


def tracked_text_files() -> Iterator[Tuple[str, str]]:
    """(path, text) of every tracked text file, docs/spec and fuzz corpora aside."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    for raw in names.split(b"\0"):
        if not raw:
            continue
        path = raw.decode("utf-8", "replace")
        if path.startswith(SPEC_DIR) or "/corpus/" in path or path == SELF:
            continue
        full = ROOT / path
        if not full.is_file():  # deleted in the working tree
            continue
        data = full.read_bytes()
        if b"\0" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        yield path, text


def normalise(line: str) -> str:
    """JSON escapes of § and the dashes, so JSON strings read like prose."""
    return line.replace("\\u00a7", "§").replace("\\u2013", "–").replace("\\u2014", "—")


def default_specs(path: str, text: str) -> Tuple[str, ...]:
    """The document a bare § in this file means: the path's protocol, or either when unclear."""
    name = path.lower()
    has_eesp = "eesp" in name
    has_psp = "psp" in name
    if has_eesp != has_psp:
        own = "eesp" if has_eesp else "psp"
        other = "psp" if has_eesp else "eesp"
        if not re.search(rf"\b{other}\b", text, re.IGNORECASE):
            return (own,)
    return SPECS


def numbers(nums: str) -> List[int]:
    """'2, 4, 7-9 and 11' -> [2, 4, 7, 8, 9, 11]."""
    out: List[int] = []
    for part in re.split(r"\s*(?:,\s*and|,|and)\s*", nums.strip()):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)\s*[-–]\s*(\d+)", part)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            out.extend(range(a, b + 1) if a <= b else [a, b])
        else:
            out.append(int(part))
    return out


class Citation:
    def __init__(self, path: str, line: int, text: str, specs: Tuple[str, ...], anchors: List[str]):
        self.path, self.line, self.text, self.specs, self.anchors = path, line, text, specs, anchors

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.text!r}"


def section_anchors(m: "re.Match[str]") -> List[str]:
    """The anchors (without the document prefix) one § token needs: its section, steps, vectors."""
    sec = m.group("sec")
    anchors = [sec]
    if m.group("kind"):
        kind = "check" if m.group("kind").startswith("check") else "step"
        anchors += [f"{sec}-{kind}-{n}" for n in numbers(m.group("nums"))]
    if m.group("e1"):
        first, last = int(m.group("e1")), int(m.group("e2") or m.group("e1"))
        anchors += [f"{sec}-E{n}" for n in range(first, last + 1)]
    return anchors


def line_citations(path: str, lineno: int, line: str, default: Tuple[str, ...]) -> Iterator[Citation]:
    """Every citation on one line, with the anchors it needs."""
    prev_end: Optional[int] = None
    prev_owner: Tuple[str, ...] = ()
    prev_sec: Optional[str] = None
    for m in SECTION_RE.finditer(line):
        owner: Tuple[str, ...]
        gap = line[prev_end:m.start()] if prev_end is not None else None
        ranged = gap is not None and bool(prev_owner) and RANGE_GAP_RE.fullmatch(gap) is not None
        if ranged or (gap is not None and prev_owner and CHAIN_GAP_RE.fullmatch(gap)):
            owner = prev_owner  # the same document as the § before it
        else:
            o = OWNER_RE.search(line[:m.start()])
            if o is None:
                owner = default
            elif o.group("external"):
                owner = ()  # another document (an RFC, the draft itself): not ours to check
            elif o.group("file"):
                owner = (o.group("file"),)
            else:
                owner = (o.group("proto").lower(),)
        prev_end, prev_owner = m.end(), owner
        sec = m.group("sec")
        if owner:
            if ranged and prev_sec and prev_sec.isdigit() and sec.isdigit():
                # §6-§8: every section in between as well
                for n in range(int(prev_sec) + 1, int(sec)):
                    yield Citation(path, lineno, f"§{prev_sec}-§{sec}", owner, [str(n)])
            yield Citation(path, lineno, m.group(0).strip(), owner, section_anchors(m))
        prev_sec = sec if owner else None
    for m in DECISION_RE.finditer(line):
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        wanted = range(first, last + 1) if first <= last else (first, last)
        yield Citation(path, lineno, m.group(0), ("eesp",), [f"D{n}" for n in wanted])
    for m in APPENDIX_RE.finditer(line):
        yield Citation(path, lineno, m.group(0), ("eesp",), [m.group(1)])


def unresolved(c: Citation, anchors: Dict[str, Set[str]]) -> bool:
    """A citation resolves when, in one of its candidate documents, every anchor it needs exists."""
    return not any(all(f"{spec}-{a}" in anchors.get(spec, set()) for a in c.anchors) for spec in c.specs)


def all_citations() -> List[Citation]:
    out: List[Citation] = []
    for path, text in tracked_text_files():
        default = default_specs(path, text)
        for i, line in enumerate(text.splitlines(), 1):
            line = normalise(line)
            if "§" not in line and "D" not in line and "Appendix" not in line:
                continue
            out.extend(line_citations(path, i, line, default))
    return out


@pytest.fixture(scope="module")
def anchors() -> Dict[str, Set[str]]:
    return spec_anchors()


@pytest.fixture(scope="module")
def citations() -> List[Citation]:
    return all_citations()


def test_every_citation_resolves(citations, anchors):
    bad = [c.where() + f" -> needs {', '.join(c.anchors)} in "
           f"{' or '.join(f'docs/spec/{s}.md' for s in c.specs)}"
           for c in citations if unresolved(c, anchors)]
    assert not bad, f"{len(bad)} citation(s) do not resolve to docs/spec/:\n" + "\n".join(bad)


def test_the_scan_sees_the_citations(citations):
    """A broken scanner must not pass by finding nothing: the tree has hundreds of citations of each kind."""
    explicit = [c for c in citations if c.text.startswith("§") and c.specs in (("psp",), ("eesp",))]
    decisions = [c for c in citations if c.text.startswith("D")]
    steps = [c for c in citations if " step" in c.text or " check" in c.text]
    assert len(citations) >= 1000, len(citations)
    assert len(explicit) >= 300 and len(decisions) >= 400 and len(steps) >= 30, (
        len(explicit), len(decisions), len(steps))


def test_nothing_takes_its_meaning_from_outside_the_repository():
    bad = []
    for path, text in tracked_text_files():
        in_tests = path.startswith("tests/")
        for i, line in enumerate(text.splitlines(), 1):
            if SHARED_SPEC in line or SHARED_SPEC_PHRASE.search(line):
                bad.append(f"{path}:{i}: cites the shared spec notes: {line.strip()!r}")
            elif SHARED_PATH.search(line) and SHARED_DATA not in line:
                if in_tests:
                    if re.search(r"\bspec\b", line):
                        bad.append(f"{path}:{i}: ../shared for the specification: {line.strip()!r}")
                elif path not in DATA_LOCATORS or re.search(r"\bspec\b", line):
                    bad.append(f"{path}:{i}: ../shared outside the reference captures: {line.strip()!r}")
    assert not bad, "meaning taken from outside the repository (use docs/spec/):\n" + "\n".join(bad)


def test_the_specification_anchors_its_own_structure(anchors):
    """Each numbered heading has its anchor on the line before it; the cited families are complete."""
    for spec in SPECS:
        lines = (ROOT / SPEC_DIR / f"{spec}.md").read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"#{2,3} (?:(\d+(?:\.\d+)?)\.|Appendix ([A-Z])\.) ", line)
            if m:
                want = f'<a id="{spec}-{m.group(1) or m.group(2)}"></a>'
                assert i > 0 and lines[i - 1] == want, f"docs/spec/{spec}.md:{i + 1}: {line!r} needs {want} above it"
    psp, eesp = anchors["psp"], anchors["eesp"]
    assert {f"psp-{n}" for n in range(1, 15)} <= psp
    assert {f"psp-9.{n}" for n in range(1, 7)} <= psp
    assert {f"psp-6-step-{n}" for n in range(1, 8)} <= psp
    assert {f"psp-7-{k}-{n}" for k in ("step", "check") for n in range(1, 10)} <= psp
    assert {f"eesp-{n}" for n in range(1, 21)} | {"eesp-A"} <= eesp
    assert {f"eesp-D{n}" for n in range(1, 17)} <= eesp
    assert {f"eesp-16-step-{n}" for n in range(1, 14)} <= eesp
    assert {f"eesp-15-step-{n}" for n in range(1, 8)} <= eesp
    assert {f"eesp-19-E{n}" for n in range(1, 6)} <= eesp
    assert {f"eesp-18-nc-{n}" for n in range(1, 4)} <= eesp


@pytest.mark.parametrize("spec", SPECS)
def test_the_specification_cites_itself_consistently(spec, anchors):
    """Cross-references inside docs/spec resolve as well (a bare § there means the file itself)."""
    text = (ROOT / SPEC_DIR / f"{spec}.md").read_text(encoding="utf-8")
    bad = []
    for i, line in enumerate(text.splitlines(), 1):
        for c in line_citations(f"{SPEC_DIR}{spec}.md", i, line, (spec,)):
            if unresolved(c, anchors):
                bad.append(c.where())
    assert not bad, "\n".join(bad)


def test_a_bad_citation_is_caught(anchors):
    """The reader itself: made-up citations must fail, real ones must pass."""
    def check(line: str, default: Tuple[str, ...] = SPECS) -> List[bool]:
        return [unresolved(c, anchors) for c in line_citations("x.c", 1, line, default)]

    assert check("psp.md §9.3, §7 check 6 and eesp.md §16 step 4 (D13)") == [False, False, False, False]
    assert check("psp.md §15") == [True]
    assert check("eesp.md §16 step 14") == [True]
    assert check("psp.md §7 steps 2-10") == [True]
    assert check("PSP §9.7") == [True]
    assert check("see D99") == [True]
    assert check("conventions.md §3.2") == [True]
    assert check("eesp.md §19 E6") == [True]
    assert check("eesp.md §6-§8") == [False, False, False]
    assert check("§16 step 4", ("psp",)) == [True]
    assert check("RFC 4303 §3.4.3 and RFC 8200 §4") == []
