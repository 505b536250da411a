"""Error plumbing between the core's single status enum and Python exceptions."""
from __future__ import annotations

from typing import Dict, Mapping, NoReturn, Optional, Type

from pecore.binding import ffi, lib


class CoreError(Exception):
    """Base of every exception raised by this project's Python packages.

    ``code`` is the core's stable kebab-case status name (e.g.
    ``"authentication-failed"``); ``str(err)`` carries the core's message.
    ``category`` is the core's category of that status (``"malformed"``,
    ``"authentication"``, ``"policy"``, … see :data:`CATEGORIES`), the same
    meaning the Wireshark dissectors show; each concrete class declares the
    one category it stands for.
    """

    category: Optional[str] = None

    def __init__(self, message: str, code: str = "invalid-argument") -> None:
        super().__init__(message)
        self.code = code


class ExhaustedError(CoreError):
    """A sender used its last IV (PSP) or sequence number (EESP) and refuses to wrap: rekey the SA.

    Both protocol packages raise a subclass of this one class (:class:`pypsp.IvExhaustedError`,
    :class:`pyeesp.SequenceExhaustedError`), and both senders' ``next_iv()`` then return None.
    """

    category = "limit"


def _category_table() -> Dict[str, str]:
    table = {}
    for st in range(lib.PE_STATUS_COUNT):
        name = ffi.string(lib.pe_status_name(st)).decode()
        table[name] = ffi.string(lib.pe_category_name(lib.pe_status_category(st))).decode()
    return table


#: Every core status name and its category (core/include/pe/status.h).
CATEGORY_BY_CODE: Dict[str, str] = _category_table()
#: Every category name with its one-line meaning.
CATEGORIES: Dict[str, str] = {
    ffi.string(lib.pe_category_name(c)).decode(): ffi.string(lib.pe_category_description(c)).decode()
    for c in range(lib.PE_CATEGORY_COUNT)
}


def code_table(by_category: Mapping[str, Type[CoreError]],
               refined: Mapping[str, Type[CoreError]]) -> Dict[str, Type[CoreError]]:
    """A package's status → exception class table: the class of the status's category, or a refinement of it.

    Every class must stand for the category of every status it is raised for: the faces never disagree on
    what a status means (tests/architecture/test_categories.py walks every status).
    """
    table: Dict[str, Type[CoreError]] = {}
    for code, category in CATEGORY_BY_CODE.items():
        if category == "ok":
            continue  # nothing to raise
        cls = refined.get(code) or by_category[category]
        if cls.category != category:
            raise AssertionError(f"{cls.__name__} stands for {cls.category!r}, but {code} is {category!r}")
        table[code] = cls
    return table


def status_name(status: int) -> str:
    """The stable name of a core status code."""
    return ffi.string(lib.pe_status_name(status)).decode()


def status_names() -> "list[str]":
    """Every status name of the core, in the order of its status list (status.h)."""
    return [status_name(st) for st in range(lib.PE_STATUS_COUNT)]


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
