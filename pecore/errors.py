"""Error plumbing between the core's single status enum and Python exceptions."""
from __future__ import annotations

from typing import Mapping, NoReturn, Optional, Type

from pecore._native import ffi, lib


class CoreError(Exception):
    """Base of every exception raised by this project's Python packages.

    ``code`` is the core's stable kebab-case status name (e.g.
    ``"authentication-failed"``); ``str(err)`` carries the core's message.
    """

    def __init__(self, message: str, code: str = "invalid-argument") -> None:
        super().__init__(message)
        self.code = code


#: Status names of broken IP/UDP framing, malformed packets for every protocol.
IP_MALFORMED_CODES = (
    "ip-bad-version",
    "ip-bad-header-length",
    "ip-bad-length",
    "ip-fragment",
    "ip-bad-extension-header",
    "udp-bad-length",
    "udp-bad-checksum",
)


def status_name(status: int) -> str:
    """The stable name of a core status code."""
    return ffi.string(lib.pe_status_name(status)).decode()


def status_message(status: int) -> str:
    """The core's one-line message for a status code."""
    return ffi.string(lib.pe_status_message(status)).decode()


def raise_status(
    status: int,
    table: Mapping[str, Type[CoreError]],
    default: Type[CoreError],
    context: Optional[str] = None,
) -> NoReturn:
    """Raise the exception class that ``table`` maps the status name to."""
    name = status_name(status)
    message = status_message(status)
    if context:
        message = f"{context}: {message}"
    raise table.get(name, default)(message, name)
