"""Shared machinery of the interop checkers ``pypsp diagnose`` and ``pyeesp diagnose``.

An implementer whose packets do not verify gives us the packets (a capture
file, or the hex of one packet) and the keys they believe in.  For every
packet that fails with the correct algorithm, the protocol module describes
the computation as a handful of *dimensions* (which key, which nonce, which
AAD / layout, ...).  Each dimension lists the correct choice first and then
the known mistakes.  :func:`search` recomputes the packet's ICV for every
combination with 0, 1, 2, ... mistakes and stops at the first number of
mistakes that reproduces the packet exactly, i.e. whose ICV verifies.  Every
recomputation goes through the core (``pecore.primitives``).

This module holds what both protocols share: the report types, the search,
reading the input (capture file or hex) and the text / JSON output.
"""
from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, Hashable, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar

from pecore.capture import CaptureError, looks_like_capture, read_capture, read_capture_bytes
from pecore.errors import CoreError
from pecore.tools.cli import addresses

T = TypeVar("T")

VERIFIES = "verifies"
DIAGNOSED = "diagnosed"
UNDIAGNOSED = "undiagnosed"
MALFORMED = "malformed"
NO_KEY = "no-key"
VERDICTS = (VERIFIES, DIAGNOSED, UNDIAGNOSED, MALFORMED, NO_KEY)

NO_MATCH = "no known mistake reproduces this packet"

#: Default largest number of mistakes combined in one explanation.
DEFAULT_MAX_MISTAKES = 2
MAX_MISTAKES_LIMIT = 3


class DiagnoseInputError(CoreError, ValueError):
    """The input is neither a readable capture nor the hex of one packet of the protocol."""

    def __init__(self, message: str, code: str = "diagnose-bad-input") -> None:
        super().__init__(message, code)


# ------------------------------------------------------------------ report types


@dataclass(frozen=True)
class Mistake:
    """One known mistake: its stable ``id``, the ``field`` it concerns, what
    the packet's sender used (``sent``) and what the right value is
    (``expected``).  ``severity`` is "error" for a mistake that makes the packet
    fail (or decode wrongly) and "warning" for a deviation that a receiver
    still accepts."""

    id: str
    field: str
    description: str
    sent: Optional[str] = None
    expected: Optional[str] = None
    ref: Optional[str] = None
    severity: str = "error"

    def to_dict(self) -> dict:
        return {"id": self.id, "field": self.field, "description": self.description, "sent": self.sent,
                "expected": self.expected, "ref": self.ref, "severity": self.severity}

    def format(self, prefix: str = "", indent: str = "") -> str:
        """The field and what went wrong, then what the packet used and the right value, on their own lines."""
        lines = [f"{prefix}{self.field}: {self.description} [{self.id}]"]
        if self.sent is not None:
            lines.append(f"{indent}    packet used: {self.sent}")
        if self.expected is not None:
            lines.append(f"{indent}    right value: {self.expected}" + (f"  ({self.ref})" if self.ref else ""))
        elif self.ref:
            lines.append(f"{indent}    see {self.ref}")
        return "\n".join(lines)


@dataclass
class PacketReport:
    """The diagnosis of one packet.

    ``verdict`` is one of :data:`VERDICTS`.  ``mistakes`` is the explanation
    (all of them together reproduce the packet), ``alternatives`` other
    explanations that reproduce it equally exactly, ``warnings`` deviations
    that receivers accept, ``reason`` the core's status name when the packet
    fails with the correct algorithm.
    """

    protocol: str
    verdict: str
    frame: Optional[int] = None
    fields: Dict[str, object] = field(default_factory=dict)
    reason: Optional[str] = None
    message: Optional[str] = None
    mistakes: List[Mistake] = field(default_factory=list)
    alternatives: List[List[Mistake]] = field(default_factory=list)
    warnings: List[Mistake] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    src: Optional[str] = None
    dst: Optional[str] = None

    @property
    def failed(self) -> bool:
        return self.verdict != VERIFIES

    @property
    def mistake_ids(self) -> List[str]:
        return [m.id for m in self.mistakes]

    def to_dict(self) -> dict:
        return {
            "frame": self.frame,
            "protocol": self.protocol,
            "src": self.src,
            "dst": self.dst,
            "fields": self.fields,
            "verdict": self.verdict,
            "reason": self.reason,
            "message": self.message,
            "mistakes": [m.to_dict() for m in self.mistakes],
            "alternatives": [[m.to_dict() for m in alt] for alt in self.alternatives],
            "warnings": [m.to_dict() for m in self.warnings],
            "notes": list(self.notes),
        }

    def headline(self) -> str:
        where = f"frame {self.frame}" if self.frame is not None else "packet"
        if self.src:
            where += f" {self.src} -> {self.dst}"
        desc = " ".join(f"{k}={v}" for k, v in self.fields.items() if v is not None)
        return f"{where}: {self.protocol} {desc}".rstrip()

    def format(self) -> str:
        lines = [self.headline()]
        detail = " ".join(x for x in (self.message, f"[{self.reason}]" if self.reason else None) if x)
        if self.verdict == VERIFIES:
            lines.append("  verifies")
        elif self.verdict == MALFORMED:
            lines.append(f"  malformed: {detail}")
        else:
            lines.append(f"  does not verify: {detail}")
        if self.mistakes:
            lines.append("  reproduced exactly by " + ("this mistake:" if len(self.mistakes) == 1
                                                      else f"these {len(self.mistakes)} mistakes together:"))
            lines += [m.format("    - ", "      ") for m in self.mistakes]
            for alt in self.alternatives:
                lines.append("  equally reproduced by:")
                lines += [m.format("    - ", "      ") for m in alt]
        elif self.verdict in (UNDIAGNOSED, NO_KEY):
            lines.append(f"  {NO_MATCH}")
        lines += [m.format("  warning: ", "  ") for m in self.warnings]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class Report:
    """The diagnosis of a whole input (one hex packet or every packet of a capture)."""

    protocol: str
    source: str
    packets: List[PacketReport] = field(default_factory=list)
    skipped: int = 0

    def counts(self) -> Dict[str, int]:
        out = {v: 0 for v in VERDICTS}
        for p in self.packets:
            out[p.verdict] += 1
        return out

    @property
    def exit_status(self) -> int:
        """0 when every packet verifies, 1 when some fail (diagnosed or not)."""
        return 1 if any(p.failed for p in self.packets) else 0

    def to_dict(self) -> dict:
        return {"protocol": self.protocol, "source": self.source, "packets": [p.to_dict() for p in self.packets],
                "counts": self.counts(), "skipped_frames": self.skipped, "exit_status": self.exit_status}

    def summary(self) -> str:
        c = self.counts()
        parts = [f"{c[v]} {v}" for v in VERDICTS if c[v]]
        warned = sum(1 for p in self.packets if p.verdict == VERIFIES and p.warnings)
        if warned:
            parts[0] += f" ({warned} with warnings)"
        text = f"{len(self.packets)} {self.protocol} packet{'s' if len(self.packets) != 1 else ''}: " + ", ".join(parts)
        if self.skipped:
            text += f" ({self.skipped} other frame{'s' if self.skipped != 1 else ''} skipped)"
        return text

    def format(self) -> str:
        return "\n\n".join([p.format() for p in self.packets] + [self.summary()])


# ------------------------------------------------------------------------ search


@dataclass(frozen=True)
class Choice:
    """One choice of a dimension: ``key`` identifies it within the dimension,
    ``value`` is what the protocol's compute function needs, ``mistakes`` the
    mistakes this choice stands for (none for the correct choice)."""

    key: Hashable
    value: object
    mistakes: Tuple[Mistake, ...] = ()


@dataclass
class Match:
    """What :func:`search` found: the combination(s) that reproduce the packet."""

    level: int
    combos: List[Tuple[Choice, ...]]
    result: object

    @property
    def explanations(self) -> List[List[Mistake]]:
        return [[m for c in combo for m in c.mistakes] for combo in self.combos]

    def signature(self, index: int = 0) -> Tuple[Hashable, ...]:
        return tuple(c.key for c in self.combos[index])


def combos_at_level(dims: Sequence[Sequence[Choice]], level: int) -> Iterator[Tuple[Choice, ...]]:
    """Every combination (one choice per dimension) whose mistakes add up to ``level``."""
    by_count = [sorted({len(c.mistakes) for c in d}) for d in dims]

    def rec(i: int, left: int) -> Iterator[Tuple[int, ...]]:
        if i == len(dims):
            if left == 0:
                yield ()
            return
        for n in by_count[i]:
            if n <= left:
                for rest in rec(i + 1, left - n):
                    yield (n,) + rest

    for counts in rec(0, level):
        pools = [[c for c in d if len(c.mistakes) == n] for d, n in zip(dims, counts)]
        yield from itertools.product(*pools)


def search(
    dims: Sequence[Sequence[Choice]],
    compute: Callable[..., Optional[Hashable]],
    check: Callable[[Hashable], object],
    *,
    max_mistakes: int = DEFAULT_MAX_MISTAKES,
    start_level: int = 0,
    hints: Optional[Dict[Tuple[Hashable, ...], int]] = None,
) -> Optional[Match]:
    """Find the fewest mistakes that reproduce a packet.

    ``compute(*values)`` turns one choice per dimension into a hashable
    description of the computation (key, nonce, AAD, ...), or None when that
    combination cannot apply to the packet.  ``check(description)`` runs it
    and returns None when the ICV does not verify, anything else (e.g. the
    plaintext) when it does.  A description is run once: combinations that
    describe the same computation as one already tried (in particular a
    "mistake" identical to the correct computation for this packet) are not
    tried again, and those equal to the matching one are reported as
    alternatives.  ``hints`` (signature -> count) orders the combinations of a
    level so that mistakes found in earlier packets are tried first.
    """
    tried = set()
    for level in range(0, max_mistakes + 1):
        combos = list(enumerate(combos_at_level(dims, level)))
        if hints:
            combos.sort(key=lambda ic: -hints.get(tuple(x.key for x in ic[1]), 0))
        found = None
        for order, combo in combos:
            desc = compute(*(c.value for c in combo))
            if desc is None:
                continue
            if found is not None:
                if desc == found[0]:
                    found[1].append((order, combo))
                continue
            if desc in tried:
                continue
            tried.add(desc)
            if level < start_level:
                continue
            result = check(desc)
            if result is not None:
                found = (desc, [(order, combo)], result)
        if found is not None:  # equal explanations in the dimensions' order, whatever the hints tried first
            match = Match(level, [c for _o, c in sorted(found[1], key=lambda oc: oc[0])], found[2])
            if hints is not None:
                sig = match.signature()
                hints[sig] = hints.get(sig, 0) + 1
            return match
    return None


def dedupe(choices: Iterable[Choice]) -> List[Choice]:
    """Drop choices whose value equals that of a choice with fewer mistakes (it explains nothing more).

    Choices with the same value and the same number of mistakes are kept: when
    one of them reproduces a packet, :func:`search` reports the others as
    equally exact alternatives."""
    out: List[Choice] = []
    fewest: Dict[object, int] = {}
    for c in choices:
        marker = c.value if isinstance(c.value, Hashable) else repr(c.value)
        n = len(c.mistakes)
        if marker in fewest and fewest[marker] < n:
            continue
        fewest.setdefault(marker, n)
        out.append(c)
    return [c for c in out if fewest[c.value if isinstance(c.value, Hashable) else repr(c.value)] == len(c.mistakes)]


# ------------------------------------------------------------------------- input

_HEX_JUNK = re.compile(r"[\s:.\-_]")


def parse_hex(text: str) -> bytes:
    """The octets of a hex string: whitespace, ':', '-', '.' and '_' separators and a leading 0x allowed."""
    s = text.strip()
    if s[:2].lower() == "0x":
        s = s[2:]
    s = _HEX_JUNK.sub("", s)
    if not s:
        raise DiagnoseInputError("empty hex input")
    bad = re.search(r"[^0-9a-fA-F]", s)
    if bad:
        raise DiagnoseInputError(f"not hex: unexpected character {bad.group()!r} at position {bad.start()}")
    if len(s) % 2:
        raise DiagnoseInputError(f"odd number of hex digits ({len(s)})")
    return bytes.fromhex(s)


@dataclass
class InputPacket:
    """One packet to diagnose: the protocol part, and the IP packet around it when known."""

    part: bytes
    ip: Optional[bytes] = None
    frame: Optional[int] = None


ETHERTYPES = (0x0800, 0x86DD)


def _looks_like_file(source: str) -> bool:
    return os.path.sep in source or source.startswith(".") or bool(re.search(r"\.(pcap|pcapng|cap)$", source, re.I))


def load_input(
    source: "str | bytes",
    locate: Callable[[bytes], Optional[bytes]],
    is_part: Callable[[bytes], bool],
    protocol: str,
    limit: int = 0,
) -> Tuple[str, Iterator[InputPacket], List[int]]:
    """Open the input: (description, packets, [skipped-frame counter]).

    ``source`` is a capture path, a hex string, "-" (standard input: a
    capture, or the hex of one packet) or bytes.  ``locate(ip)`` returns the protocol part of an IP packet (None
    when it carries none); ``is_part(data)`` says whether data that is not an
    IP packet or Ethernet frame can be the protocol part itself.
    """
    skipped = [0]
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "bytes", iter([_classify(bytes(source), locate, is_part, protocol)]), skipped
    name = None
    if source == "-":  # a capture, or the hex of one packet
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        if not looks_like_capture(raw):
            return "stdin", iter([_classify(parse_hex(raw.decode("ascii", "replace")), locate, is_part, protocol)]), \
                skipped
        name, open_records = "standard input", lambda: read_capture_bytes(raw, "standard input")
    elif os.path.isfile(source):
        name, open_records = source, lambda: read_capture(source)
    if name is not None:
        try:
            records = open_records()
            first = next(records, None)
        except CaptureError as e:
            raise DiagnoseInputError(f"{name}: not a readable pcap/pcapng capture ({e})", e.code) from None

        def frames() -> Iterator[InputPacket]:
            n = 0
            try:
                for index, rec in enumerate(itertools.chain([first] if first else [], records), start=1):
                    ip = rec.ip_packet()
                    part = locate(ip) if ip else None
                    if part is None:
                        skipped[0] += 1
                        continue
                    yield InputPacket(part, ip, index)
                    n += 1
                    if limit and n >= limit:
                        return
            except CaptureError as e:
                raise DiagnoseInputError(f"{name}: capture ends in a broken record ({e})", e.code) from None

        return name, frames(), skipped
    if os.path.exists(source):
        raise DiagnoseInputError(f"{source}: not a regular file")
    try:
        data = parse_hex(source)
    except DiagnoseInputError as e:
        if _looks_like_file(source):
            raise DiagnoseInputError(f"{source}: no such capture file") from None
        raise DiagnoseInputError(f"input is neither a capture file nor the hex of one packet: {e}") from None
    return "hex", iter([_classify(data, locate, is_part, protocol)]), skipped


def _classify(data: bytes, locate, is_part, protocol: str) -> InputPacket:
    """A hex packet: a whole IP packet, an Ethernet frame, or the protocol part itself."""
    if data and data[0] >> 4 in (4, 6):
        part = locate(data)
        if part is not None:
            return InputPacket(part, data)
    if len(data) > 14 and int.from_bytes(data[12:14], "big") in ETHERTYPES:
        part = locate(data[14:])
        if part is not None:
            return InputPacket(part, data[14:])
    if is_part(data):
        return InputPacket(data)
    raise DiagnoseInputError(
        f"the {len(data)} hex octets are neither an IP packet (or Ethernet frame) carrying {protocol} nor a {protocol} packet"
    )


def new_report(protocol: str, frame: Optional[int], ip: Optional[bytes]) -> PacketReport:
    """An undiagnosed report on one packet, with the addresses of the IP packet around it when there is one."""
    rep = PacketReport(protocol, UNDIAGNOSED, frame=frame)
    if ip is not None:
        try:
            rep.src, rep.dst = addresses(ip)
        except (ValueError, IndexError):
            pass
    return rep


def sa_settings_of(spec: object, sa_type: type, entry_type: type, what: str,
                   error: type) -> Tuple[Mapping[str, object], Optional[str]]:
    """An SA's settings (the face's SA keyword arguments) and destination, from a face's SA object (``sa_type``),
    a key-file entry (``entry_type``) or a settings mapping; ``what`` names them in ``error``'s message."""
    if isinstance(spec, sa_type):
        settings = spec._settings  # type: ignore[attr-defined]  # the settings the SA was made from
        return settings, settings.get("dst")
    if isinstance(spec, entry_type):
        return spec.settings, spec.dst  # type: ignore[attr-defined]
    if isinstance(spec, Mapping):
        return spec, spec.get("dst")  # type: ignore[return-value]
    raise error(f"an SA is a {what}, a key-file entry or a settings mapping, not {type(spec).__name__}")


def diagnosis_sas(specs: Iterable[object], sa_type: type, entry_type: type, what: str, error: type,
                  make: Callable[[Mapping[str, object], Optional[str]], T]) -> List[T]:
    """A diagnoser's record (``make(settings, dst)``) of each SA it is given (see :func:`sa_settings_of`); at least
    one, else ``error``."""
    out = [make(*sa_settings_of(spec, sa_type, entry_type, what, error)) for spec in specs]
    if not out:
        raise error("no SA to diagnose against")
    return out


def same_addr(a: str, b: str) -> bool:
    """Whether two address strings name one address (2001:db8::1 and 2001:DB8:0::1 do)."""
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


def diagnose_all(diagnoser, source: "str | bytes", protocol: str, limit: int = 0) -> Report:
    """Every packet of a source (capture path, hex, '-' or bytes) through ``diagnoser``'s ``locate``, ``is_part``
    and ``diagnose_part``."""
    desc, packets, skipped = load_input(source, diagnoser.locate, diagnoser.is_part, protocol, limit)
    report = Report(protocol, desc)
    for p in packets:
        report.packets.append(diagnoser.diagnose_part(p.part, frame=p.frame, ip=p.ip))
    report.skipped = skipped[0]
    return report


# ---------------------------------------------------------------------- CLI glue


def max_mistakes_arg(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= n <= MAX_MISTAKES_LIMIT:
        raise argparse.ArgumentTypeError(f"--max-mistakes takes 0..{MAX_MISTAKES_LIMIT}")
    return n


def add_common_arguments(p: argparse.ArgumentParser, protocol: str) -> None:
    p.add_argument("input", help=f"a pcap/pcapng capture, or the hex of one packet (an IP packet, an Ethernet frame, "
                                 f"or just the {protocol} part); '-' reads either from stdin")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--max-mistakes", type=max_mistakes_arg, default=DEFAULT_MAX_MISTAKES, metavar="N",
                   help=f"combine up to N mistakes in one explanation (0..{MAX_MISTAKES_LIMIT}, default {DEFAULT_MAX_MISTAKES})")
    p.add_argument("--limit", type=int, default=0, metavar="N", help=f"stop after N {protocol} packets (0: all)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only failing packets and the summary")


def run_ipsec_diagnose(args: argparse.Namespace, inline: bool, line_kind: str, diagnoser: Callable[..., object]) -> int:
    """``pyeesp|pyesp diagnose``: the SA given on the command line (``inline``), else the key file's ``line_kind``
    lines that --spi / --dst pick, through ``diagnoser(entries, max_mistakes=...)``; prints the report."""
    from pecore.tools.cli import UsageError

    entries = args.sa_entries(args)
    if not inline:
        entries = [e for e in entries if (args.spi is None or e.spi == args.spi)
                   and (args.dst is None or same_addr(e.dst or "", args.dst))]
        if not entries:
            raise UsageError(f"no {line_kind} line matches --spi/--dst")
    d = diagnoser(entries, max_mistakes=args.max_mistakes)
    return emit(d.diagnose_source(args.input, limit=args.limit), args)  # type: ignore[attr-defined]


def emit(report: Report, args: argparse.Namespace) -> int:
    """Print a report (text or JSON) and return the exit status."""
    if not report.packets:
        raise DiagnoseInputError(f"{report.source}: no {report.protocol} packets found"
                                 + (f" ({report.skipped} other frames)" if report.skipped else ""), "diagnose-no-packets")
    try:  # the text uses ‖ and §: never fail on a terminal that cannot show them
        sys.stdout.reconfigure(errors="replace")  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        pass
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=1)
        print()
    else:
        shown = [p for p in report.packets if p.failed or p.warnings or not args.quiet]
        for p in shown:
            print(p.format())
            print()
        print(report.summary())
    return report.exit_status


# ------------------------------------------------------------------- small helpers


def bswap(value: int, octets: int) -> int:
    return int.from_bytes(value.to_bytes(octets, "big"), "little")


def ip_lengths(data: bytes) -> Optional[Tuple[int, int]]:
    """(IP version, total length from the header) of an IP packet at the start of ``data``, or None."""
    if len(data) >= 20 and data[0] >> 4 == 4 and (data[0] & 0xF) >= 5:
        return 4, int.from_bytes(data[2:4], "big")
    if len(data) >= 40 and data[0] >> 4 == 6:
        return 6, 40 + int.from_bytes(data[4:6], "big")
    return None
