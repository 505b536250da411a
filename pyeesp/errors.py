"""EESP exceptions: one hierarchy under :class:`EespError`, each carrying the core's status name and message.

Every class stands for one of the core's status categories (``category``, the
meaning the Wireshark dissectors show too); some refine their category's class
(:class:`SubSaError` is a :class:`PolicyError`).  The tree is built by :mod:`pecore.faceerrors`, which all
three packages share, from the names and docstrings below.
"""
from __future__ import annotations

from typing import NoReturn, Optional, Type

from pecore.errors import CoreError
from pecore.faceerrors import FaceErrors

_ERRORS = FaceErrors(
    __name__, "EespError",
    "Base class of every EESP error.  ``code`` is the core's status name, ``category`` its category.",
    not_this="NotEespError", no_key="NoSaError", exhausted="SequenceExhaustedError",
    extra=[("UnsupportedVersionError", ("",), "malformed", {}),
           ("SubSaError", ("PolicyError",), None, {}),
           ("DummyPacketError", ("PolicyError",), None, {})],
    attrs={"PolicyError": {"icv_valid": False}},
    refined={"eesp-truncated": "TruncatedPacketError", "eesp-unsupported-version": "UnsupportedVersionError",
             "eesp-sub-sa-out-of-range": "SubSaError", "eesp-dummy-packet": "DummyPacketError",
             "sequence-exhausted": "SequenceExhaustedError"},
    docs={  # (and pecore.faceerrors' for the classes that read the same in every protocol)
        "ConfigurationError": "Invalid or contradictory SA settings (suite, key length, SSKDF, …).",
        "AuthenticationError": "The ICV did not verify: wrong key, or the packet was altered.",
        "ReplayError": "A duplicate, or a sequence number left of the replay window; never reached decryption state.",
        "MalformedPacketError": "The packet breaks the EESP (or IP/UDP) format.",
        "TruncatedPacketError": "The packet ends before its headers or ICV do.",
        "NotEespError": "The packet is not EESP (another protocol, or ESP, IKE or a keepalive on UDP 4500).",
        "UnsupportedVersionError": "An EESP version other than the negotiated 0.  Malformed by category, but kept\n"
                                   "    apart from :class:`MalformedPacketError`: a peer speaking a newer version is "
                                   "not sending garbage.",
        "NoSaError": "No SA for the packet's SPI.",
        "PolicyError": "Well-formed, and dropped by policy (a Crypt Offset option not allowed, unknown options on a "
                       "strict\n    SA, a Session ID above the announced maximum, a dummy packet).\n\n"
                       "    ``icv_valid`` says whether the packet had authenticated, so that policy can delete the SA.",
        "SubSaError": "The Session ID names a Sub SA outside the announced range.",
        "DummyPacketError": "A valid dummy packet (Next Header 59): authenticated, then discarded by design.",
        "SequenceExhaustedError": "The Sub SA has sent its last sequence number; it refuses to wrap.  Caught with the "
                                  "other protocol's as :class:`pecore.errors.ExhaustedError`.",
    },
)
# Named one by one, not added to the namespace at run time, so that type checkers and IDEs see every class.
(
    EespError, ConfigurationError, AuthenticationError, ReplayError, MalformedPacketError, TruncatedPacketError,
    CutByCaptureError, NotEespError, NoSaError, PolicyError, LimitError, SequenceExhaustedError,
    PacketTooLargeError, InternalError, CaptureError, KeyFileError, UnsupportedVersionError, SubSaError,
    DummyPacketError,
) = _ERRORS.named(
    "EespError", "ConfigurationError", "AuthenticationError", "ReplayError", "MalformedPacketError",
    "TruncatedPacketError", "CutByCaptureError", "NotEespError", "NoSaError", "PolicyError", "LimitError",
    "SequenceExhaustedError", "PacketTooLargeError", "InternalError", "CaptureError", "KeyFileError",
    "UnsupportedVersionError", "SubSaError", "DummyPacketError",
)
__all__ = [  # what the package re-exports
    "EespError", "ConfigurationError", "AuthenticationError", "ReplayError", "MalformedPacketError",
    "TruncatedPacketError", "CutByCaptureError", "NotEespError", "NoSaError", "PolicyError", "LimitError",
    "SequenceExhaustedError", "PacketTooLargeError", "InternalError", "CaptureError", "KeyFileError",
    "UnsupportedVersionError", "SubSaError", "DummyPacketError",
]


def error_class(code: str) -> Type[CoreError]:
    """The exception class for a core status name."""
    return _ERRORS.error_class(code)


def raise_eesp(status: int, context: Optional[str] = None) -> NoReturn:
    _ERRORS.raise_status(status, context)
