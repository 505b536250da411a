"""EESP exceptions: one hierarchy under :class:`EespError`, each carrying the core's status name and message."""
from __future__ import annotations

from typing import Dict, NoReturn, Optional, Type

from pecore.capture import CaptureError as _CaptureError
from pecore.errors import IP_MALFORMED_CODES, CoreError, raise_status
from pecore.keys import KeyFileError as _KeyFileError


class EespError(CoreError):
    """Base class of every EESP error.  ``code`` is the core's status name."""


class ConfigurationError(EespError, ValueError):
    """Invalid or contradictory SA settings (suite, key length, SSKDF, …)."""


class AuthenticationError(EespError):
    """The ICV did not verify: wrong key, or the packet was altered."""


class ReplayError(EespError):
    """A duplicate, or a sequence number left of the replay window; never reached decryption state."""


class MalformedPacketError(EespError):
    """The packet breaks the EESP (or IP/UDP) format."""


class TruncatedPacketError(MalformedPacketError):
    """The packet ends before its headers or ICV do."""


class NotEespError(MalformedPacketError):
    """The packet is not EESP (another protocol, or ESP, IKE or a keepalive on UDP 4500)."""


class UnsupportedVersionError(EespError):
    """An EESP version other than the negotiated 0."""


class NoSaError(EespError):
    """No SA for the packet's SPI."""


class SubSaError(EespError):
    """The Session ID names a Sub SA outside the announced range."""


class PolicyError(EespError):
    """Dropped by policy (a Crypt Offset option not allowed, unknown options on a strict SA).

    ``icv_valid`` says whether the packet had authenticated, so that policy can delete the SA."""

    icv_valid: bool = False


class DummyPacketError(EespError):
    """A valid dummy packet (Next Header 59): authenticated, then discarded by design."""


class SequenceExhaustedError(EespError):
    """The Sub SA has sent its last sequence number; it refuses to wrap."""


class PacketTooLargeError(EespError, ValueError):
    """The encapsulated packet would exceed the IP length limit."""


class CaptureError(EespError, _CaptureError):
    """A capture file could not be read or written."""


class KeyFileError(EespError, _KeyFileError):
    """A key file could not be parsed."""


_BY_CODE: Dict[str, Type[EespError]] = {
    "authentication-failed": AuthenticationError,
    "replay-duplicate": ReplayError,
    "replay-too-old": ReplayError,
    "eesp-sequence-zero": MalformedPacketError,
    "eesp-truncated": TruncatedPacketError,
    "ip-truncated": TruncatedPacketError,
    "udp-truncated": TruncatedPacketError,
    "eesp-unsupported-version": UnsupportedVersionError,
    "eesp-no-sa": NoSaError,
    "eesp-sub-sa-out-of-range": SubSaError,
    "eesp-crypt-offset-not-allowed": PolicyError,
    "eesp-unknown-option": PolicyError,
    "eesp-dummy-packet": DummyPacketError,
    "sequence-exhausted": SequenceExhaustedError,
    "not-eesp": NotEespError,
    "not-udp": NotEespError,
    "nat-keepalive": NotEespError,
    "ike-non-esp-marker": NotEespError,
    "esp-in-udp": NotEespError,
    "eesp-compat-bit-clear": NotEespError,
    "ip-too-long": PacketTooLargeError,
    "buffer-too-small": PacketTooLargeError,
    "bad-key-length": ConfigurationError,
    "invalid-argument": ConfigurationError,
    "eesp-bad-suite": ConfigurationError,
    "eesp-bad-config": ConfigurationError,
    "eesp-iiv-needs-seq": ConfigurationError,
    "eesp-gmac-linux-xfrm": ConfigurationError,
    "eesp-optimized-needs-ip": ConfigurationError,
    "sskdf-undefined": ConfigurationError,
}
for _code in (
    "eesp-reserved-bits-set",
    "eesp-options-overrun",
    "eesp-bad-crypt-offset-option",
    "eesp-bad-payload-offset",
    "eesp-crypt-offset-past-payload",
    "eesp-bad-pad-length",
    "eesp-bad-inner-packet",
    *IP_MALFORMED_CODES,
):
    _BY_CODE[_code] = MalformedPacketError


def error_class(code: str) -> Type[EespError]:
    """The exception class for a core status name."""
    return _BY_CODE.get(code, EespError)


def raise_eesp(status: int, context: Optional[str] = None) -> NoReturn:
    raise_status(status, _BY_CODE, EespError, context)
