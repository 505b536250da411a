"""EESP exceptions: one hierarchy under :class:`EespError`, each carrying the core's status name and message.

Every class stands for one of the core's status categories (``category``, the
meaning the Wireshark dissectors show too); some refine their category's class
(:class:`SubSaError` is a :class:`PolicyError`).
"""
from __future__ import annotations

from typing import Dict, NoReturn, Optional, Type

from pecore.capture import CaptureError as _CaptureError
from pecore.errors import CoreError, ExhaustedError, code_table, raise_status
from pecore.keys import KeyFileError as _KeyFileError


class EespError(CoreError):
    """Base class of every EESP error.  ``code`` is the core's status name, ``category`` its category."""


class ConfigurationError(EespError, ValueError):
    """Invalid or contradictory SA settings (suite, key length, SSKDF, …)."""

    category = "configuration"


class AuthenticationError(EespError):
    """The ICV did not verify: wrong key, or the packet was altered."""

    category = "authentication"


class ReplayError(EespError):
    """A duplicate, or a sequence number left of the replay window; never reached decryption state."""

    category = "replay"


class MalformedPacketError(EespError):
    """The packet breaks the EESP (or IP/UDP) format."""

    category = "malformed"


class TruncatedPacketError(MalformedPacketError):
    """The packet ends before its headers or ICV do."""


class CutByCaptureError(TruncatedPacketError):
    """The capture's snap length cut the packet: what is missing was never recorded."""

    category = "cut-by-capture"


class NotEespError(MalformedPacketError):
    """The packet is not EESP (another protocol, or ESP, IKE or a keepalive on UDP 4500)."""

    category = "not-this-protocol"


class UnsupportedVersionError(EespError):
    """An EESP version other than the negotiated 0.  Malformed by category, but kept
    apart from :class:`MalformedPacketError`: a peer speaking a newer version is not sending garbage."""

    category = "malformed"


class NoSaError(EespError):
    """No SA for the packet's SPI."""

    category = "no-key"


class PolicyError(EespError):
    """Well-formed, and dropped by policy (a Crypt Offset option not allowed, unknown options on a strict
    SA, a Session ID above the announced maximum, a dummy packet).

    ``icv_valid`` says whether the packet had authenticated, so that policy can delete the SA."""

    category = "policy"
    icv_valid: bool = False


class SubSaError(PolicyError):
    """The Session ID names a Sub SA outside the announced range."""


class DummyPacketError(PolicyError):
    """A valid dummy packet (Next Header 59): authenticated, then discarded by design."""


class LimitError(EespError):
    """A size or counter limit was reached."""

    category = "limit"


class SequenceExhaustedError(LimitError, ExhaustedError):
    """The Sub SA has sent its last sequence number; it refuses to wrap.  Caught with the other protocol's as :class:`pecore.errors.ExhaustedError`."""


class PacketTooLargeError(LimitError, ValueError):
    """The encapsulated packet would exceed the IP length limit, or the output room."""


class InternalError(EespError):
    """Out of memory, or OpenSSL failed."""

    category = "internal"


class CaptureError(EespError, _CaptureError):
    """A capture file could not be read or written."""


class KeyFileError(EespError, _KeyFileError):
    """A key file could not be parsed."""


_BY_CODE: Dict[str, Type[EespError]] = code_table(  # type: ignore[assignment]
    {
        "malformed": MalformedPacketError,
        "authentication": AuthenticationError,
        "replay": ReplayError,
        "policy": PolicyError,
        "no-key": NoSaError,
        "not-this-protocol": NotEespError,
        "cut-by-capture": CutByCaptureError,
        "configuration": ConfigurationError,
        "io": CaptureError,
        "limit": LimitError,
        "internal": InternalError,
    },
    {
        "eesp-truncated": TruncatedPacketError,
        "ip-truncated": TruncatedPacketError,
        "udp-truncated": TruncatedPacketError,
        "eesp-unsupported-version": UnsupportedVersionError,
        "eesp-sub-sa-out-of-range": SubSaError,
        "eesp-dummy-packet": DummyPacketError,
        "sequence-exhausted": SequenceExhaustedError,
        "ip-too-long": PacketTooLargeError,
        "buffer-too-small": PacketTooLargeError,
        "keyfile-syntax": KeyFileError,
        "keyfile-bad-value": KeyFileError,
        "keyfile-duplicate": KeyFileError,
    },
)


def error_class(code: str) -> Type[EespError]:
    """The exception class for a core status name."""
    return _BY_CODE.get(code, EespError)


def raise_eesp(status: int, context: Optional[str] = None) -> NoReturn:
    raise_status(status, _BY_CODE, EespError, context)
