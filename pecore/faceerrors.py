"""The one exception hierarchy every protocol package has (pypsp, pyeesp, pyesp), built here once.

Each face gets its own classes (``pyesp.AuthenticationError`` is not ``pyeesp.AuthenticationError``: a caller
catches one protocol's errors by its base class), but the tree they form, the category each stands for
and the status → class table are the same concept for all three, so they are written only here.  A face
names its base class, its three names of its own (the not-this-protocol, no-key and exhausted-counter
classes), the classes only it has (``extra``), its status refinements, and the docstrings.
"""
from __future__ import annotations

from typing import Dict, Mapping, NoReturn, Optional, Sequence, Tuple, Type, Union

from pecore.capture import CaptureError as _CaptureError
from pecore.errors import CoreError, ExhaustedError, code_table, raise_status
from pecore.keys import KeyFileError as _KeyFileError

#: A parent: the name of a class of the same face ("" is the face's base class), or a class itself.
Parent = Union[str, type]
#: A class: its name, its parents, the category it stands for (None: its first parent's), its class attributes.
Spec = Tuple[str, Sequence[Parent], Optional[str], Mapping[str, object]]

#: Statuses every face refines within their category (a face adds its own, e.g. "esp-truncated").
_REFINED = {
    "ip-truncated": "TruncatedPacketError",
    "udp-truncated": "TruncatedPacketError",
    "ip-too-long": "PacketTooLargeError",
    "buffer-too-small": "PacketTooLargeError",
    "keyfile-syntax": "KeyFileError",
    "keyfile-bad-value": "KeyFileError",
    "keyfile-duplicate": "KeyFileError",
}


#: Docstrings that say the same for every protocol; a face's ``docs`` may replace them.
_DOCS = {
    "CutByCaptureError": "The capture's snap length cut the packet: what is missing was never recorded.",
    "LimitError": "A size or counter limit was reached.",
    "PacketTooLargeError": "The encapsulated packet would exceed the IP length limit, or the output room.",
    "InternalError": "Out of memory, or OpenSSL failed.",
    "CaptureError": "A capture file could not be read or written.",
    "KeyFileError": "A key file could not be parsed.",
}


class FaceErrors:
    """One face's exception classes (``classes``, by name, in definition order) and its status table."""

    def __init__(self, module: str, base: str, base_doc: str, *, not_this: str, no_key: str, exhausted: str,
                 docs: Mapping[str, str], refined: Mapping[str, str], extra: Sequence[Spec] = (),
                 attrs: Optional[Mapping[str, Mapping[str, object]]] = None) -> None:
        specs: Sequence[Spec] = (
            ("ConfigurationError", ("", ValueError), "configuration", {}),
            ("AuthenticationError", ("",), "authentication", {}),
            ("ReplayError", ("",), "replay", {}),
            ("MalformedPacketError", ("",), "malformed", {}),
            ("TruncatedPacketError", ("MalformedPacketError",), None, {}),
            ("CutByCaptureError", ("TruncatedPacketError",), "cut-by-capture", {}),
            (not_this, ("MalformedPacketError",), "not-this-protocol", {}),
            (no_key, ("",), "no-key", {}),
            ("PolicyError", ("",), "policy", {}),
            ("LimitError", ("",), "limit", {}),
            (exhausted, ("LimitError", ExhaustedError), None, {}),
            ("PacketTooLargeError", ("LimitError", ValueError), None, {}),
            ("InternalError", ("",), "internal", {}),
            ("CaptureError", ("", _CaptureError), None, {}),
            ("KeyFileError", ("", _KeyFileError), None, {}),
            *extra,
        )
        self.base: Type[CoreError] = type(base, (CoreError,), {"__module__": module, "__doc__": base_doc})
        self.classes: Dict[str, Type[CoreError]] = {base: self.base}
        for name, parents, category, extra_attrs in specs:
            ns: Dict[str, object] = {"__module__": module, "__qualname__": name, "__doc__": docs.get(name) or _DOCS[name]}
            if category is not None:
                ns["category"] = category
            ns.update(extra_attrs)
            ns.update((attrs or {}).get(name, {}))
            bases = tuple(self.classes[p or base] if isinstance(p, str) else p for p in parents)
            self.classes[name] = type(name, bases, ns)
        # The class of each status's category: the classes that declare a category of their own directly
        # under the base (or, for the refinements of malformed, under MalformedPacketError).
        by_category = {
            "malformed": "MalformedPacketError", "authentication": "AuthenticationError", "replay": "ReplayError",
            "policy": "PolicyError", "no-key": no_key, "not-this-protocol": not_this,
            "cut-by-capture": "CutByCaptureError", "configuration": "ConfigurationError", "io": "CaptureError",
            "limit": "LimitError", "internal": "InternalError",
        }
        self.table: Dict[str, Type[CoreError]] = code_table(
            {cat: self.classes[n] for cat, n in by_category.items()},
            {code: self.classes[n] for code, n in {**_REFINED, **refined}.items()},
        )

    def named(self, *names: str) -> Tuple[Type[CoreError], ...]:
        """The classes by name, in that order: every class of the face, none twice (a face's module binds each
        to its own name, so that type checkers and readers see them)."""
        if sorted(names) != sorted(self.classes):
            raise ImportError(f"{self.base.__module__}: name exactly these classes: {sorted(self.classes)}")
        return tuple(self.classes[n] for n in names)

    def error_class(self, code: str) -> Type[CoreError]:
        """The exception class for a core status name (the base class for one the table lacks)."""
        return self.table.get(code, self.base)

    def raise_status(self, status: int, context: Optional[str] = None) -> NoReturn:
        raise_status(status, self.table, self.base, context)
