"""PSP exceptions: one hierarchy under :class:`PspError`, each carrying the core's status name and message.

Every class stands for one of the core's status categories (``category``, the
meaning the Wireshark dissectors show too); some refine their category's class
(:class:`TruncatedPacketError` is a :class:`MalformedPacketError`).  The tree is built by
:mod:`pecore.faceerrors`, which all three packages share, from the names and docstrings below.
"""
from __future__ import annotations

from typing import NoReturn, Optional, Type

from pecore.errors import CoreError
from pecore.faceerrors import FaceErrors

_ERRORS = FaceErrors(
    __name__, "PspError",
    "Base class of every PSP error.  ``code`` is the core's status name, ``category`` its category.",
    not_this="NotPspError", no_key="NoKeyError", exhausted="IvExhaustedError",
    extra=[("UnsupportedVersionError", ("",), "malformed", {}),
           ("VersionDisabledError", ("UnsupportedVersionError", "PolicyError"), "policy", {})],
    refined={"psp-truncated": "TruncatedPacketError", "psp-unsupported-version": "UnsupportedVersionError",
             "psp-version-disabled": "VersionDisabledError", "iv-exhausted": "IvExhaustedError"},
    docs={  # (and pecore.faceerrors' for the classes that read the same in every protocol)
        "ConfigurationError": "Invalid parameters: key length, version, crypt offset range, …",
        "AuthenticationError": "The ICV did not verify: wrong key, or the packet was altered.",
        "ReplayError": "A replayed sequence number.  PSP has no replay protection, so its receivers never raise "
                       "this; it\n    exists so that every category of the core has its class in both packages.",
        "MalformedPacketError": "The packet breaks the PSP (or IP/UDP) format.",
        "TruncatedPacketError": "The packet ends before its header, payload or ICV does.",
        "NotPspError": "The packet is not PSP at all (not IP, not UDP, or not the PSP port).",
        "UnsupportedVersionError": "Crypto version 4-15 (reserved).  Malformed by category, but kept\n    apart from "
                                   ":class:`MalformedPacketError`: a peer speaking a newer version is not sending "
                                   "garbage.",
        "PolicyError": "Well-formed, and refused by the receiver's settings.",
        "VersionDisabledError": "A version 0-3 that this receiver does not accept (``versions=``).",
        "NoKeyError": "No derived key or master key is configured for the packet's SPI.",
        "IvExhaustedError": "The SA has used its last IV; it refuses to wrap and reuse one.  Caught with the other "
                            "protocol's as :class:`pecore.errors.ExhaustedError`.",
        "KeyFileError": "A key file or reference config could not be parsed.",
    },
)
# Named one by one, not added to the namespace at run time, so that type checkers and IDEs see every class.
(
    PspError, ConfigurationError, AuthenticationError, ReplayError, MalformedPacketError, TruncatedPacketError,
    CutByCaptureError, NotPspError, NoKeyError, PolicyError, LimitError, IvExhaustedError, PacketTooLargeError,
    InternalError, CaptureError, KeyFileError, UnsupportedVersionError, VersionDisabledError,
) = _ERRORS.named(
    "PspError", "ConfigurationError", "AuthenticationError", "ReplayError", "MalformedPacketError",
    "TruncatedPacketError", "CutByCaptureError", "NotPspError", "NoKeyError", "PolicyError", "LimitError",
    "IvExhaustedError", "PacketTooLargeError", "InternalError", "CaptureError", "KeyFileError",
    "UnsupportedVersionError", "VersionDisabledError",
)
__all__ = [  # what the package re-exports
    "PspError", "ConfigurationError", "AuthenticationError", "ReplayError", "MalformedPacketError",
    "TruncatedPacketError", "CutByCaptureError", "NotPspError", "NoKeyError", "PolicyError", "LimitError",
    "IvExhaustedError", "PacketTooLargeError", "InternalError", "CaptureError", "KeyFileError",
    "UnsupportedVersionError", "VersionDisabledError",
]


def error_class(code: str) -> Type[CoreError]:
    """The exception class for a core status name."""
    return _ERRORS.error_class(code)


def raise_psp(status: int, context: Optional[str] = None) -> NoReturn:
    _ERRORS.raise_status(status, context)
