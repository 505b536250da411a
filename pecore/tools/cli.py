"""Command-line plumbing shared by the ``pypsp`` and ``pyeesp`` CLIs."""
from __future__ import annotations

import argparse
import ipaddress
import os
import re
import signal
import sys
import threading
from typing import Optional, Sequence, Tuple

from pecore.errors import CoreError
from pecore.util import openssl_version


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


def report(summary, verb: str, quiet: bool) -> int:
    """Print a bulk run's summary; exit status 1 when packets failed."""
    if not quiet:
        print(summary.format(verb))
    return 1 if summary.failed else 0


def add_version(parser: argparse.ArgumentParser, version: str) -> None:
    """--version: the package's version and the OpenSSL the core runs on."""
    openssl = openssl_version()
    parser.add_argument("--version", action="version", version=f"{parser.prog} {version} (psp-eesp core on {openssl})")


class Terminated(BaseException):
    """SIGTERM, turned into an exception so that a bulk run stops and cleans up as on Ctrl-C."""


def _on_sigterm(signum, frame):  # type: ignore[no-untyped-def]
    raise Terminated()


def _how_far(e: BaseException) -> str:
    summary = getattr(e, "summary", None)
    return f" after {summary.packets:,} packets; no output was written" if summary is not None else ""


def run_main(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> int:
    """Parse, run the subcommand, and turn errors into a message and an exit status.

    2: an error (named, with the core's status); 130 / 143: stopped by Ctrl-C / SIGTERM (outputs are
    written to a temporary file and renamed only when complete, so none is left half-written); a reader
    that closes our standard output early (``| head``) ends the run quietly, as coreutils do.
    """
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        return args.func(args)
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except CoreError as e:
        print(f"{parser.prog}: error: {e} [{e.code}]", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"{parser.prog}: interrupted{_how_far(e)}", file=sys.stderr)
        return 130
    except Terminated as e:
        print(f"{parser.prog}: terminated{_how_far(e)}", file=sys.stderr)
        return 143
    except BrokenPipeError:
        # Python would print a traceback, and again when it flushes stdout at exit: point stdout at
        # /dev/null and leave quietly with the status a shell shows for SIGPIPE.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
