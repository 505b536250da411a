"""ESP exceptions: one hierarchy under :class:`EspError`, each carrying the core's status name and message.

Every class stands for one of the core's status categories (``category``, the
meaning the Wireshark dissectors show too); some refine their category's class
(:class:`DummyPacketError` is a :class:`PolicyError`).  The same classes as
:mod:`pyeesp.errors`, less the two EESP has alone (no version field, no Sub SAs); the tree is built by
:mod:`pecore.faceerrors`, which all three packages share, from the names and docstrings below.
"""
from __future__ import annotations

from typing import NoReturn, Optional, Type

from pecore.errors import CoreError
from pecore.faceerrors import FaceErrors

_ERRORS = FaceErrors(
    __name__, "EspError",
    "Base class of every ESP error.  ``code`` is the core's status name, ``category`` its category.",
    not_this="NotEspError", no_key="NoSaError", exhausted="SequenceExhaustedError",
    extra=[("DummyPacketError", ("PolicyError",), None, {})],
    attrs={"PolicyError": {"icv_valid": False}},
    refined={"esp-truncated": "TruncatedPacketError", "esp-dummy-packet": "DummyPacketError",
             "sequence-exhausted": "SequenceExhaustedError"},
    docs={  # (and pecore.faceerrors' for the classes that read the same in every protocol)
        "ConfigurationError": "Invalid or contradictory SA settings (suite, key length, ESN, …).",
        "AuthenticationError": "The ICV did not verify: wrong key, a wrong ESN guess, or the packet was altered.",
        "ReplayError": "A duplicate, or a sequence number left of the replay window; never reached decryption.",
        "MalformedPacketError": "The packet breaks the ESP (or IP/UDP) format: bad padding, Pad Length, Next Header, "
                                "sequence number 0, …",
        "TruncatedPacketError": "The packet ends before its header, IV, trailer or ICV do.",
        "NotEspError": "The packet is not ESP (another protocol, or EESP, IKE or a keepalive on UDP 4500).",
        "NoSaError": "No SA for the packet's SPI (and destination).",
        "PolicyError": "Well-formed, and dropped by policy (a dummy packet).\n\n"
                       "    ``icv_valid`` says whether the packet had authenticated.",
        "DummyPacketError": "A valid dummy packet (Next Header 59, RFC 4303 §2.6): authenticated, then discarded "
                            "by design.",
        "SequenceExhaustedError": "The SA has sent its last sequence number (2^32 - 1, or 2^64 - 1 with ESN); it "
                                  "refuses to cycle\n    (RFC 4303 §3.3.3).  Caught with the other protocols' as "
                                  ":class:`pecore.errors.ExhaustedError`.",
    },
)
# Named one by one, not added to the namespace at run time, so that type checkers and IDEs see every class.
(
    EspError, ConfigurationError, AuthenticationError, ReplayError, MalformedPacketError, TruncatedPacketError,
    CutByCaptureError, NotEspError, NoSaError, PolicyError, LimitError, SequenceExhaustedError,
    PacketTooLargeError, InternalError, CaptureError, KeyFileError, DummyPacketError,
) = _ERRORS.named(
    "EspError", "ConfigurationError", "AuthenticationError", "ReplayError", "MalformedPacketError",
    "TruncatedPacketError", "CutByCaptureError", "NotEspError", "NoSaError", "PolicyError", "LimitError",
    "SequenceExhaustedError", "PacketTooLargeError", "InternalError", "CaptureError", "KeyFileError",
    "DummyPacketError",
)
__all__ = [  # what the package re-exports
    "EspError", "ConfigurationError", "AuthenticationError", "ReplayError", "MalformedPacketError",
    "TruncatedPacketError", "CutByCaptureError", "NotEspError", "NoSaError", "PolicyError", "LimitError",
    "SequenceExhaustedError", "PacketTooLargeError", "InternalError", "CaptureError", "KeyFileError",
    "DummyPacketError",
]


def error_class(code: str) -> Type[CoreError]:
    """The exception class for a core status name."""
    return _ERRORS.error_class(code)


def raise_esp(status: int, context: Optional[str] = None) -> NoReturn:
    _ERRORS.raise_status(status, context)
