"""ESP exceptions: one hierarchy under :class:`EspError`, each carrying the core's status name and message.

Every class stands for one of the core's status categories (``category``, the
meaning the Wireshark dissectors show too); some refine their category's class
(:class:`DummyPacketError` is a :class:`PolicyError`).  The same classes as
:mod:`pyeesp.errors`, less the two EESP has alone (no version field, no Sub SAs).
"""
from __future__ import annotations

from typing import Dict, NoReturn, Optional, Type

from pecore.capture import CaptureError as _CaptureError
from pecore.errors import CoreError, ExhaustedError, code_table, raise_status
from pecore.keys import KeyFileError as _KeyFileError


class EspError(CoreError):
    """Base class of every ESP error.  ``code`` is the core's status name, ``category`` its category."""


class ConfigurationError(EspError, ValueError):
    """Invalid or contradictory SA settings (suite, key length, ESN, …)."""

    category = "configuration"


class AuthenticationError(EspError):
    """The ICV did not verify: wrong key, a wrong ESN guess, or the packet was altered."""

    category = "authentication"


class ReplayError(EspError):
    """A duplicate, or a sequence number left of the replay window; never reached decryption."""

    category = "replay"


class MalformedPacketError(EspError):
    """The packet breaks the ESP (or IP/UDP) format: bad padding, Pad Length, Next Header, sequence number 0, …"""

    category = "malformed"


class TruncatedPacketError(MalformedPacketError):
    """The packet ends before its header, IV, trailer or ICV do."""


class CutByCaptureError(TruncatedPacketError):
    """The capture's snap length cut the packet: what is missing was never recorded."""

    category = "cut-by-capture"


class NotEspError(MalformedPacketError):
    """The packet is not ESP (another protocol, or EESP, IKE or a keepalive on UDP 4500)."""

    category = "not-this-protocol"


class NoSaError(EspError):
    """No SA for the packet's SPI (and destination)."""

    category = "no-key"


class PolicyError(EspError):
    """Well-formed, and dropped by policy (a dummy packet).

    ``icv_valid`` says whether the packet had authenticated."""

    category = "policy"
    icv_valid: bool = False


class DummyPacketError(PolicyError):
    """A valid dummy packet (Next Header 59, RFC 4303 §2.6): authenticated, then discarded by design."""


class LimitError(EspError):
    """A size or counter limit was reached."""

    category = "limit"


class SequenceExhaustedError(LimitError, ExhaustedError):
    """The SA has sent its last sequence number (2^32 - 1, or 2^64 - 1 with ESN); it refuses to cycle
    (RFC 4303 §3.3.3).  Caught with the other protocols' as :class:`pecore.errors.ExhaustedError`."""


class PacketTooLargeError(LimitError, ValueError):
    """The encapsulated packet would exceed the IP length limit, or the output room."""


class InternalError(EspError):
    """Out of memory, or OpenSSL failed."""

    category = "internal"


class CaptureError(EspError, _CaptureError):
    """A capture file could not be read or written."""


class KeyFileError(EspError, _KeyFileError):
    """A key file could not be parsed."""


_BY_CODE: Dict[str, Type[EspError]] = code_table(  # type: ignore[assignment]
    {
        "malformed": MalformedPacketError,
        "authentication": AuthenticationError,
        "replay": ReplayError,
        "policy": PolicyError,
        "no-key": NoSaError,
        "not-this-protocol": NotEspError,
        "cut-by-capture": CutByCaptureError,
        "configuration": ConfigurationError,
        "io": CaptureError,
        "limit": LimitError,
        "internal": InternalError,
    },
    {
        "esp-truncated": TruncatedPacketError,
        "ip-truncated": TruncatedPacketError,
        "udp-truncated": TruncatedPacketError,
        "esp-dummy-packet": DummyPacketError,
        "sequence-exhausted": SequenceExhaustedError,
        "ip-too-long": PacketTooLargeError,
        "buffer-too-small": PacketTooLargeError,
        "keyfile-syntax": KeyFileError,
        "keyfile-bad-value": KeyFileError,
        "keyfile-duplicate": KeyFileError,
    },
)


def error_class(code: str) -> Type[EspError]:
    """The exception class for a core status name."""
    return _BY_CODE.get(code, EspError)


def raise_esp(status: int, context: Optional[str] = None) -> NoReturn:
    raise_status(status, _BY_CODE, EspError, context)
