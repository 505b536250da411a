"""Command-line plumbing shared by the ``pypsp`` and ``pyeesp`` CLIs."""
from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from typing import Optional, Sequence, Tuple

from pecore.errors import CoreError


class UsageError(Exception):
    """A problem with the command line itself."""


def int_arg(text: str) -> int:
    """Decimal, or hex with 0x."""
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


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


def run_main(parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]) -> int:
    """Parse, run the subcommand, and turn errors into a message and exit status 2."""
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    except CoreError as e:
        print(f"{parser.prog}: error: {e} [{e.code}]", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
