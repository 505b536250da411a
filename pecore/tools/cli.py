"""Command-line plumbing shared by the ``pypsp``, ``pyeesp`` and ``pyesp`` CLIs: one place for what their
subcommands have in common (capture options, the encrypt/decrypt/show commands' frames, SA selection from
a key file, JSON Lines, summaries and exit statuses); each CLI keeps its protocol's options and fields."""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import re
import signal
import stat
import sys
import threading
from typing import Any, Callable, List, Optional, Sequence, TextIO, Tuple

from pecore.errors import CoreError
from pecore.util import crypto_version

#: Exit statuses of both CLIs (README.md, "Exit status", has the table).
EXIT_OK = 0
EXIT_PACKETS_FAILED = 1  # some packets failed (the summary says why), or show found bad ones
EXIT_ERROR = 2           # bad usage, or an input, output, key file or config that cannot be used
EXIT_TRUNCATED = 3       # the input capture ends inside a record: what came before it was processed
EXIT_INTERRUPTED = 130   # Ctrl-C (128 + SIGINT)
EXIT_BROKEN_PIPE = 141   # the reader of standard output went away (128 + SIGPIPE)
EXIT_TERMINATED = 143    # SIGTERM (128 + SIGTERM)

STDIO = "-"


class UsageError(Exception):
    """A problem with the command line itself."""


def int_arg(text: str) -> int:
    """Decimal, or hex with 0x."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _bounded(what: str, low: int, high: int):
    """An argparse type: an integer (decimal, or hex with 0x) within low..high."""
    def parse(text: str) -> int:
        value = int_arg(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} must be in {low}..{high}, not {value}")
        return value
    parse.__name__ = what  # argparse names the type in its messages
    return parse


#: The same checks in every subcommand of both CLIs.
port_arg = _bounded("port", 0, 0xFFFF)
count_arg = _bounded("count", 0, 2**63 - 1)
protocol_arg = _bounded("IP protocol", 0, 255)
iv_arg = _bounded("IV", 1, 2**64 - 1)  # 0 is never sent (the key file refuses first-iv=0 too)
words_arg = _bounded("crypt offset", 0, 63)
jobs_arg = _bounded("jobs", 1, 1024)


def add_jobs(parser: argparse.ArgumentParser) -> None:
    """--jobs N: threads a capture run uses (the output is the same for any N)."""
    parser.add_argument("--jobs", "-j", type=jobs_arg, metavar="N",
                        help="threads to use (default: the CPUs this process may run on); the output does not depend on it")


def shown(text: str) -> str:
    """An argument as quoted in an error message, unless it could hold key material (8 hex digits in a row)."""
    if len(text) > 24 or re.search(r"[0-9a-fA-F]{8}", text):
        return f"(a value of {len(text)} characters, not repeated here)"
    return repr(text)


def spi_arg(text: str) -> int:
    """SPIs are hex, with or without 0x (as in the reference configs and key files)."""
    try:
        value = int(text.lower().removeprefix("0x"), 16)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a hex SPI: {shown(text)}") from None
    if not 0 <= value <= 0xFFFFFFFF:
        raise argparse.ArgumentTypeError(f"SPI out of range (at most 8 hex digits): {shown(text)}")
    return value


def addresses(ip: bytes) -> Tuple[str, str]:
    """Source and destination of an IP packet, for display."""
    if ip[0] >> 4 == 4:
        return str(ipaddress.IPv4Address(ip[12:16])), str(ipaddress.IPv4Address(ip[16:20]))
    return str(ipaddress.IPv6Address(ip[8:24])), str(ipaddress.IPv6Address(ip[24:40]))


def report(summary, verb: str, quiet: bool, stream: Optional[TextIO] = None) -> int:
    """Print a bulk run's summary; exit status 1 when packets failed."""
    if not quiet:
        print(summary.format(verb), file=stream or sys.stdout)
    return EXIT_PACKETS_FAILED if summary.failed else EXIT_OK


# ------------------------------------------------------------------ capture commands


def add_capture_args(p: argparse.ArgumentParser, output: bool = True) -> None:
    """The capture arguments of encrypt, decrypt (input, output, -F) and show (input)."""
    p.add_argument("input", help="a pcap or pcapng capture; - reads standard input (a pipe or a redirect)")
    if output:
        p.add_argument("output", help="the capture to write; - writes standard output (the summary then goes to "
                                      "standard error)")
        p.add_argument("-F", "--output-format", choices=("pcap", "pcapng"), default=None,
                       help="format written (default: the input's; pcap keeps the input's microsecond or "
                            "nanosecond resolution)")
        add_jobs(p)


def check_stdio(args: argparse.Namespace) -> None:
    """``-`` is a pipe or a redirect, never a terminal: a capture is binary and cannot be typed or shown."""
    if getattr(args, "input", None) == STDIO and sys.stdin.isatty():
        raise UsageError("input - reads a capture from standard input, which is a terminal: pipe or redirect one in")
    if getattr(args, "output", None) == STDIO and sys.stdout.isatty():
        raise UsageError("output - writes a binary capture to standard output, which is a terminal: redirect it "
                         "to a file or a pipe")


def summary_stream(args: argparse.Namespace) -> TextIO:
    """Where a command's own report goes: standard error when standard output carries the capture."""
    return sys.stderr if getattr(args, "output", None) == STDIO else sys.stdout


def truncated(args: argparse.Namespace, e: CoreError) -> int:
    """The line naming a cut input (after the summary of what was processed), and its exit status."""
    print(f"{getattr(args, 'prog', 'error')}: input truncated: {e}", file=sys.stderr)
    return EXIT_TRUNCATED


def run_capture(args: argparse.Namespace, label: str, verb: str, transform: Callable[..., object]) -> int:
    """An encrypt/decrypt run: progress on a terminal, the summary, and the exit status.

    ``transform(progress)`` runs the capture function and returns its summary.  An input that ends
    inside a record gives the summary of every whole record (their output is written), one more line
    naming the cut and its offset, and exit status 3.
    """
    from pecore.capture import ProgressBar

    check_stdio(args)
    stream = summary_stream(args)
    bar = ProgressBar(label=label)
    try:
        summary = transform(bar)
    except CoreError as e:
        if e.code != "capture-truncated" or not getattr(e, "output_kept", False):
            raise
        bar.close()
        report(e.summary, verb, args.quiet, stream)  # type: ignore[attr-defined]
        return truncated(args, e)
    finally:
        bar.close()
    return report(summary, verb, args.quiet, stream)


def add_capture_command(sub: "argparse._SubParsersAction", name: str, help: str, func: Callable[..., int],
                        options: Callable[[argparse.ArgumentParser], None], *,
                        drop_help: Optional[str] = None) -> argparse.ArgumentParser:
    """An encrypt or decrypt subcommand: the capture arguments, the protocol's ``options``, --drop-failed, -q."""
    p = sub.add_parser(name, help=help)
    add_capture_args(p)
    options(p)
    p.add_argument("--drop-failed", action="store_true", **({"help": drop_help} if drop_help else {}))
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=func)
    return p


def add_show_command(sub: "argparse._SubParsersAction", protocol: str, func: Callable[..., int],
                     options: Callable[[argparse.ArgumentParser], None], *,
                     limit_help: Optional[str] = None) -> argparse.ArgumentParser:
    """The show subcommand: the input capture, the protocol's ``options``, --json and --limit."""
    s = sub.add_parser("show", help=f"print the {protocol} headers of a capture (and decrypt status with keys)")
    add_capture_args(s, output=False)
    options(s)
    s.add_argument("--json", action="store_true",
                   help=f"JSON Lines: one object per {protocol} packet, written as it is read")
    s.add_argument("--limit", type=count_arg, default=0, **({"help": limit_help} if limit_help else {}))
    s.set_defaults(func=func)
    return s


def record_info(index: int, rec: Any, ip: bytes) -> dict:
    """The fields every show line starts with: frame number, time stamp, addresses (JSON keys in this order)."""
    src, dst = addresses(ip)
    return {"frame": index, "time": f"{rec.ts_sec}.{rec.ts_nsec:09d}", "src": src, "dst": dst}


def record_head(info: dict) -> str:
    """The start of a show line, from :func:`record_info`'s fields (and `` udp/4500`` for a packet that came
    UDP-encapsulated: an ``udp_encap`` field, ESP's and EESP's)."""
    return f"#{info['frame']} {info['time']} {info['src']} -> {info['dst']}{' udp/4500' if info.get('udp_encap') else ''}"


def decrypt_info(info: dict, rx: Any, ip: bytes, describe: Callable[[Any], dict], error: type) -> None:
    """show with keys: a well-formed packet gets ``decrypt`` "ok" and what ``describe(decrypted)`` says of it,
    or the status name of the face's ``error`` that refused it; without keys (``rx`` None) nothing."""
    if rx is None or info["status"] != "ok":
        return
    try:
        d = rx.decrypt(ip)
        info["decrypt"] = "ok"
        info.update(describe(d))
    except error as e:
        info["decrypt"] = e.code


def show_capture(args: argparse.Namespace, describe: Callable[[int, Any], Optional[dict]],
                 format: Callable[[dict], str]) -> int:
    """show: ``describe(frame number, record)`` per record (None: not this protocol's), printed by ``format``
    or as JSON Lines (--json), up to --limit packets.  Exit status 1 when a packet is malformed or fails to
    decrypt; a cut input ends the listing with the line naming the cut and exit status 3."""
    from pecore.capture import CaptureError, read_capture

    check_stdio(args)
    lines = JsonLines() if args.json else None
    shown = bad = 0
    try:
        for index, rec in enumerate(read_capture(args.input), start=1):
            info = describe(index, rec)
            if info is None:
                continue
            bad += info["status"] != "ok" or info.get("decrypt", "ok") != "ok"
            shown += 1
            if lines is not None:
                lines.write(info)
            else:
                print(format(info))
            if args.limit and shown >= args.limit:
                break
    except CaptureError as e:
        # A cut file header (no offset: the open failed, or nothing was read past it) is no capture at all, as
        # for encrypt/decrypt: status 2.  Only a cut after whole records is status 3.
        if e.code != "capture-truncated" or not getattr(e, "offset", 0):
            raise
        sys.stdout.flush()
        return truncated(args, e)
    return EXIT_PACKETS_FAILED if bad else EXIT_OK


# ------------------------------------------------------------------ SAs from a key file (ESP, EESP)


def key_file_sas(args: argparse.Namespace, inline: Optional[Any], kind: str, inline_options: str) -> List[Any]:
    """The SAs a command works with: the one given by options (``inline``), or the key file's ``kind`` lines
    ("esp-sa", "eesp-sa"); ``inline_options`` names the options that give one ("--key")."""
    from pecore.keys import load_key_file

    if inline is not None:
        return [inline]
    if not args.key_file:
        raise UsageError(f"no SA: give --key-file, or --spi with {inline_options}")
    entries = getattr(load_key_file(args.key_file), kind.replace("-", "_") + "s")
    if not entries:
        raise UsageError(f"{args.key_file}: no {kind} lines")
    return entries


def one_sa(entries: Sequence[Any], args: argparse.Namespace, kind: str) -> Any:
    """The one SA of ``entries`` that --spi and --dst pick (any, when they are not given), or a UsageError."""
    chosen = [e for e in entries if (args.spi is None or e.spi == args.spi) and (args.dst is None or e.dst == args.dst)]
    if len(chosen) != 1:
        if not chosen:
            raise UsageError(f"no {kind} line for SPI {args.spi:#010x}" + (f" and dst {args.dst}" if args.dst else "")
                             if args.spi is not None else f"no {kind} line matches --dst")
        raise UsageError(f"several {kind} lines match: pick one with --spi" + (" and --dst" if args.spi is not None else ""))
    return chosen[0]


def transform_capture(args: argparse.Namespace, verb: str, capture: Callable[..., object], sa: object,
                      **extra: object) -> int:
    """The encrypt or decrypt command (``verb``): a face's ``encrypt_capture``/``decrypt_capture`` over ``sa``
    (its sender, or receiver) with the capture options, through :func:`run_capture`."""
    return run_capture(args, f"{verb} ", f"{verb}ed", lambda bar: capture(
        sa, args.input, args.output, **extra, drop_failed=args.drop_failed, progress=bar, fmt=args.output_format,
        jobs=args.jobs))


class JsonLines:
    """show --json: one JSON object per line, written as soon as it is made (flushed per line unless
    standard output is a regular file), so a reader sees the first packet at once."""

    def __init__(self, stream: Optional[TextIO] = None) -> None:
        self.stream = stream or sys.stdout
        try:
            self.flush = not stat.S_ISREG(os.fstat(self.stream.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):  # a stream without a descriptor (tests' capture)
            self.flush = True

    def write(self, obj: dict) -> None:
        self.stream.write(json.dumps(obj) + "\n")
        if self.flush:
            self.stream.flush()


class _VersionAction(argparse.Action):
    """argparse's "version" action, but the line printed as it is: argparse would wrap it at the terminal's width,
    splitting the backend's text that scripts and bug reports grep."""

    def __init__(self, option_strings: Sequence[str], version: str, dest: str = argparse.SUPPRESS,
                 help: str = "show the version and the crypto backend, and exit") -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)
        self.version = version

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        print(self.version)
        parser.exit()


def add_version(parser: argparse.ArgumentParser, version: str) -> None:
    """--version: the package's version and the core's crypto backend with the libraries behind it (pe_version)."""
    parser.add_argument("--version", action=_VersionAction,
                        version=f"{parser.prog} {version} (psp-eesp core, {crypto_version()})")


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that a bulk run stops and cleans up as on Ctrl-C."""


def _on_sigterm(signum, frame):  # type: ignore[no-untyped-def]
    raise Terminated()


def _how_far(e: BaseException) -> str:
    summary = getattr(e, "summary", None)
    if summary is None:
        return ""
    if getattr(e, "to_stdout", False):
        return f" after {summary.packets:,} packets; standard output has the records written before"
    return f" after {summary.packets:,} packets; no output was written"


def tooling_wanted(sub: "argparse._SubParsersAction", argv: Optional[Sequence[str]]) -> bool:
    """Whether a CLI must register its tooling subcommands (keys, diagnose, vectors) too: yes unless the command
    line names one of the subcommands registered so far.  Their modules take longer to import than the rest of
    the CLI together (docs/performance.md), which every ``encrypt``/``decrypt``/``show`` would otherwise pay;
    help, a typo and the tooling commands themselves get every subcommand."""
    args = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in args if not a.startswith("-")), None)
    return command not in sub.choices


def run_main(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> int:
    """Parse, run the subcommand, and turn errors into a message and an exit status.

    2: an error (named, with the core's status); 3: a truncated input (run_capture, show); 130 / 143:
    stopped by Ctrl-C / SIGTERM (outputs are written to a temporary file and renamed only when complete,
    so none is left half-written); 141: a reader that closes our standard output early (``| head``) ends
    the run quietly, as coreutils do.
    """
    args = parser.parse_args(argv)
    args.prog = parser.prog
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        return args.func(args)
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except CoreError as e:
        print(f"{parser.prog}: error: {e} [{e.code}]", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt as e:
        print(f"{parser.prog}: interrupted{_how_far(e)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated as e:
        print(f"{parser.prog}: terminated{_how_far(e)}", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:
        # Python would print a traceback, and again when it flushes stdout at exit: point stdout at
        # /dev/null and leave quietly with the status a shell shows for SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
