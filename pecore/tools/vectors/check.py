"""Checking vector files against the core, per tcId: the verdicts, the shared comparisons, the packet checker of
the ESP-framed families (:class:`PacketDocChecker`), and the report of ``vectors check`` (text or ``--json``)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from pecore.tools.vectors.documents import load_doc
from pecore.tools.vectors.families import all_schemas, families
from pecore.tools.vectors.schema import validate


@dataclass
class Outcome:
    """The verdict on one test: ``status`` is "pass" or "fail"; ``got`` what the implementation did
    ("ok" or a status name); ``reason`` says why a test failed (or notes on a pass)."""

    file: str
    tcId: int
    result: str
    status: str
    got: str
    reason: str = ""
    flags: Tuple[str, ...] = ()

    def as_dict(self) -> Dict[str, Any]:
        return {"tcId": self.tcId, "result": self.result, "status": self.status, "got": self.got,
                "reason": self.reason, "flags": list(self.flags)}


@dataclass
class FileReport:
    file: str
    schema: str
    outcomes: List[Outcome] = field(default_factory=list)
    error: str = ""  # the file could not be checked at all (unreadable, schema errors)

    @property
    def failed(self) -> List[Outcome]:
        return [o for o in self.outcomes if o.status != "pass"]

    @property
    def ok(self) -> bool:
        return not self.error and not self.failed


class Checker:
    """Helpers for a family checker: build Outcomes for one file, compare reasons strictly or loosely."""

    def __init__(self, file: str, loose: bool = False) -> None:
        self.file = file
        self.loose = loose
        self.outcomes: List[Outcome] = []
        from pecore.errors import status_names

        self.status_names = set(status_names())

    def record(self, test: dict, status: str, got: str, reason: str = "") -> None:
        self.outcomes.append(Outcome(self.file, int(test.get("tcId", 0)), str(test.get("result")), status, got,
                                     reason, tuple(test.get("flags", ()))))

    @contextmanager
    def guard(self, test: dict) -> Iterator[None]:
        """Run one test's check: an exception (a broken foreign vector) fails that test, not the run."""
        try:
            yield
        except Exception as e:
            self.record(test, "fail", "exception", f"{type(e).__name__}: {e}")

    def judge_kat(self, test: dict, got: bytes, want_hex: str, mistake: str) -> None:
        """A key-derivation answer: valid tests must match; invalid ones hold a known ``mistake``'s output, which
        the core must not reproduce."""
        same = got.hex() == want_hex
        match = "match" if same else "mismatch"
        if test["result"] == "valid":
            self.record(test, "pass" if same else "fail", match, "" if same else f"derived {got.hex()}")
        elif test["result"] == "invalid":
            self.record(test, "fail" if same else "pass", match, f"the core reproduces {mistake}" if same else "")
        else:
            self.record(test, "pass", match)

    def verdict(self, test: dict, got_error: Optional[str], *, problems: Sequence[str] = (),
                detail: str = "") -> None:
        """Judge one test from what the receiver did (``got_error`` None = delivered) plus any mismatches
        already found (``problems``, e.g. a different decrypted packet or sender output)."""
        result = test.get("result")
        expected = (test.get("outputs") or {}).get("error")
        got = "ok" if got_error is None else got_error
        problems = list(problems)
        note = detail
        if result == "valid":
            if got_error is not None:
                problems.insert(0, f"expected a valid packet, rejected with {got_error}")
        elif result == "invalid":
            if got_error is None:
                problems.insert(0, f"expected rejection ({expected or 'any reason'}), accepted")
            elif expected and got_error != expected:
                if self.loose:
                    note = f"rejected with {got_error} (file says {expected}; compared loosely)"
                elif expected not in self.status_names:
                    note = f"rejected with {got_error} (file says {expected}, not a core status name: compared loosely)"
                else:
                    problems.insert(0, f"rejected with {got_error}, expected {expected}")
        elif result == "acceptable":
            if got_error is not None and expected and got_error != expected and not self.loose \
                    and expected in self.status_names:
                problems.insert(0, f"rejected with {got_error}, acceptable only as {expected}")
            note = note or ("accepted" if got_error is None else f"rejected with {got_error}")
        else:
            problems.insert(0, f"unknown result {result!r}")
        if problems:
            self.record(test, "fail", got, "; ".join(problems))
        else:
            self.record(test, "pass", got, note)


def check_kat_doc(doc: dict, file: str, loose: bool, derive: Callable[[dict, dict], bytes], output: str,
                  mistake: str) -> List[Outcome]:
    """Check a key-derivation file (PSP's KDF, EESP's SSKDF): ``derive(group, inputs)`` is the core's answer,
    ``outputs[output]`` the file's; invalid tests hold a known ``mistake``'s output."""
    ck = Checker(file, loose)
    for g in doc["testGroups"]:
        for t in g["tests"]:
            with ck.guard(t):
                ck.judge_kat(t, derive(g, t["inputs"]), t["outputs"][output], mistake)
    return ck.outcomes


class GroupReceivers:
    """The receivers of one test group: a stateful group's tests share one (built for the first test's SA, in
    tcId order), the others get a fresh one each."""

    def __init__(self, stateful: bool, make: Callable[[Dict[str, Any]], Any]) -> None:
        self.stateful, self.make = stateful, make
        self.shared: Optional[Tuple[Dict[str, Any], Any]] = None

    def get(self, ck: Checker, test: dict, sa: Dict[str, Any]) -> Any:
        """The receiver for a test's SA settings; None (the test failed) when a stateful group changes its SA."""
        if not self.stateful:
            return self.make(sa)
        if self.shared is None:
            self.shared = (sa, self.make(sa))
        elif sa != self.shared[0]:
            ck.record(test, "fail", "exception", "a stateful group's tests must share one SA")
            return None
        return self.shared[1]


def first_diff(a: bytes, b: bytes) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"first difference at octet {i} (lengths {len(a)} and {len(b)})"


def outer_template(wire: bytes) -> Optional[bytes]:
    """A tunnel sender's outer header, read off a wire packet (None: an IPv4 header with options)."""
    if wire[0] >> 4 == 4:
        return wire[:20] if wire[0] == 0x45 else None
    return wire[:40]


def delivery_problems(out: dict, packet: bytes, next_header: int, pad_len: int) -> List[str]:
    """How what an ESP/EESP receiver delivered differs from a test's outputs."""
    problems = []
    want = out.get("plaintextPacket")
    if want is not None and packet.hex() != want:
        problems.append("decrypted packet differs from plaintextPacket: " + first_diff(packet, bytes.fromhex(want)))
    if "nextHeader" in out and next_header != out["nextHeader"]:
        problems.append(f"Next Header {next_header}, expected {out['nextHeader']}")
    if "padLength" in out and pad_len != out["padLength"]:
        problems.append(f"Pad Length {pad_len}, expected {out['padLength']}")
    return problems


class PacketDocChecker:
    """Checks a packet file of an ESP-framed family (ESP, EESP) against the core, test by test: what the
    receiver delivers, or why it drops the packet and whether the ICV verified first; the file's ICV octets; and,
    for a valid test without DecryptOnly, that the core's sender writes the same octets.  A family's subclass
    says how to set up its SA, receiver and sender; an instance is the family's checker for the schema."""

    #: what ``icv_octets`` reads, for the report
    icv_where = "ciphertextPacket"

    def sa_settings(self, group: dict, inp: dict) -> Dict[str, Any]:
        """The receiving SA's keyword arguments."""
        raise NotImplementedError

    def receiver(self, sa: Dict[str, Any]) -> Any:
        raise NotImplementedError

    def core_error(self) -> type:
        """The family's exception type (its ``code`` is the core's status name)."""
        raise NotImplementedError

    def icv_valid(self, error: Any) -> Optional[bool]:
        """Whether the ICV verified before the drop, where the error says so."""
        return getattr(error, "icv_valid", None)

    def open(self, rx: Any, wire: bytes) -> Tuple[Any, Optional[str], Optional[bool]]:
        """(what the receiver delivered or None, the status name of its drop or None, whether the ICV verified
        before the drop or None)."""
        try:
            return rx.decrypt(wire), None, None
        except self.core_error() as e:
            return None, e.code, self.icv_valid(e)

    def delivery(self, d: Any, inp: dict, out: dict) -> List[str]:
        return delivery_problems(out, d.packet, d.next_header, d.pad_len)

    def icv_octets(self, wire: bytes, n: int) -> bytes:
        return wire[-n:]

    def send(self, group: dict, inp: dict, out: dict, wire: bytes, sa: Dict[str, Any]) -> "bytes | List[str]":
        """What the core's sender writes, given the plaintext and the same sequence number (or why it cannot be
        asked to); it may raise the family's error."""
        raise NotImplementedError

    def sender(self, group: dict, inp: dict, out: dict, wire: bytes, sa: Dict[str, Any]) -> List[str]:
        """How the core's sender misses the wire octets."""
        try:
            sent = self.send(group, inp, out, wire, sa)
        except self.core_error() as e:
            return [f"sender refused the packet: {e.code}"]
        if isinstance(sent, list):
            return sent
        if sent != wire:
            return ["sender output differs from ciphertextPacket: " + first_diff(sent, wire)]
        return []

    def __call__(self, doc: dict, file: str, loose: bool = False) -> List[Outcome]:
        ck = Checker(file, loose)
        for g in doc["testGroups"]:
            receivers = GroupReceivers(g["stateful"], self.receiver)
            for t in g["tests"]:
                with ck.guard(t):
                    inp, out = t["inputs"], t["outputs"]
                    sa = self.sa_settings(g, inp)
                    rx = receivers.get(ck, t, sa)
                    if rx is None:
                        continue
                    wire = bytes.fromhex(inp["ciphertextPacket"])
                    d, got, icv_valid = self.open(rx, wire)
                    problems: List[str] = []
                    if got is None:
                        problems += self.delivery(d, inp, out)
                    elif "icvValid" in out and icv_valid is not None and icv_valid != out["icvValid"]:
                        problems.append(f"icvValid is {icv_valid}, expected {out['icvValid']}")
                    if "icv" in out and out["icv"] != self.icv_octets(wire, g["tagSize"] // 8).hex():
                        problems.append(f"outputs.icv is not the last octets of {self.icv_where}")
                    if t["result"] == "valid" and "DecryptOnly" not in t["flags"] and "plaintextPacket" in out:
                        problems += self.sender(g, inp, out, wire, sa)
                    ck.verdict(t, got, problems=problems)
        return ck.outcomes


def checker_for(schema_name: str) -> Optional[Callable[..., List[Outcome]]]:
    for fam in families().values():
        if schema_name in fam.checkers:
            return fam.checkers[schema_name]
    return None


def check_doc(doc: Any, file: str, loose: bool = False, validate_schema: bool = True) -> FileReport:
    """Run one parsed vector document against the core."""
    schema = doc.get("schema", "") if isinstance(doc, dict) else ""
    rep = FileReport(file, str(schema))
    fn = checker_for(str(schema))
    if fn is None:
        rep.error = f"unknown schema {schema!r}; known: {', '.join(sorted(all_schemas()))}"
        return rep
    if validate_schema:
        errs = validate(doc)
        if errs:
            rep.error = f"{len(errs)} schema error(s): " + "; ".join(errs[:5]) + (" ..." if len(errs) > 5 else "")
            return rep
    rep.outcomes = fn(doc, file, loose=loose)
    return rep


def check_files(paths: Sequence[str], loose: bool = False) -> List[FileReport]:
    reports = []
    for p in paths:
        try:
            doc = load_doc(p)
        except (OSError, ValueError) as e:
            reports.append(FileReport(str(p), "", error=f"cannot read: {e}"))
            continue
        reports.append(check_doc(doc, str(p), loose=loose))
    return reports


def format_reports(reports: Sequence[FileReport], verbose: bool = False, quiet: bool = False) -> str:
    lines = []
    total = passed = 0
    for r in reports:
        if r.error:
            lines.append(f"{r.file}: ERROR: {r.error}")
            continue
        n, bad = len(r.outcomes), r.failed
        total += n
        passed += n - len(bad)
        if not quiet or bad:
            lines.append(f"{r.file}: {n - len(bad)}/{n} passed ({r.schema})")
        for o in r.outcomes:
            if o.status != "pass":
                lines.append(f"  tcId {o.tcId} [{o.result}] FAIL: {o.reason}")
            elif verbose:
                lines.append(f"  tcId {o.tcId} [{o.result}] pass" + (f": {o.reason}" if o.reason else ""))
    errors = sum(1 for r in reports if r.error)
    lines.append(f"total: {passed}/{total} passed" + (f", {errors} file(s) not checked" if errors else ""))
    return "\n".join(lines)


def reports_json(reports: Sequence[FileReport]) -> Dict[str, Any]:
    return {
        "files": [{"file": r.file, "schema": r.schema, "error": r.error or None,
                   "passed": len(r.outcomes) - len(r.failed), "failed": len(r.failed),
                   "tests": [o.as_dict() for o in r.outcomes]} for r in reports],
        "passed": sum(len(r.outcomes) - len(r.failed) for r in reports),
        "failed": sum(len(r.failed) for r in reports),
        "errors": sum(1 for r in reports if r.error),
        "ok": all(r.ok for r in reports),
    }
