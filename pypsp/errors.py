"""PSP exceptions: one hierarchy under :class:`PspError`, each carrying the core's status name and message.

Every class stands for one of the core's status categories (``category``, the
meaning the Wireshark dissectors show too); some refine their category's class
(:class:`TruncatedPacketError` is a :class:`MalformedPacketError`).
"""
from __future__ import annotations

from typing import Dict, NoReturn, Optional, Type

from pecore.capture import CaptureError as _CaptureError
from pecore.errors import CoreError, ExhaustedError, code_table, raise_status
from pecore.keys import KeyFileError as _KeyFileError


class PspError(CoreError):
    """Base class of every PSP error.  ``code`` is the core's status name, ``category`` its category."""


class ConfigurationError(PspError, ValueError):
    """Invalid parameters: key length, version, crypt offset range, …"""

    category = "configuration"


class AuthenticationError(PspError):
    """The ICV did not verify: wrong key, or the packet was altered."""

    category = "authentication"


class MalformedPacketError(PspError):
    """The packet breaks the PSP (or IP/UDP) format."""

    category = "malformed"


class TruncatedPacketError(MalformedPacketError):
    """The packet ends before its header, payload or ICV does."""


class CutByCaptureError(TruncatedPacketError):
    """The capture's snap length cut the packet: what is missing was never recorded."""

    category = "cut-by-capture"


class NotPspError(MalformedPacketError):
    """The packet is not PSP at all (not IP, not UDP, or not the PSP port)."""

    category = "not-this-protocol"


class UnsupportedVersionError(PspError):
    """Crypto version 4-15 (reserved).  Malformed by category, but kept
    apart from :class:`MalformedPacketError`: a peer speaking a newer version is not sending garbage."""

    category = "malformed"


class PolicyError(PspError):
    """Well-formed, and refused by the receiver's settings."""

    category = "policy"


class VersionDisabledError(UnsupportedVersionError, PolicyError):
    """A version 0-3 that this receiver does not accept (``versions=``)."""

    category = "policy"


class ReplayError(PspError):
    """A replayed sequence number.  PSP has no replay protection, so its receivers never raise this; it
    exists so that every category of the core has its class in both packages."""

    category = "replay"


class NoKeyError(PspError):
    """No derived key or master key is configured for the packet's SPI."""

    category = "no-key"


class LimitError(PspError):
    """A size or counter limit was reached."""

    category = "limit"


class IvExhaustedError(LimitError, ExhaustedError):
    """The SA has used its last IV; it refuses to wrap and reuse one.  Caught with the other protocol's as :class:`pecore.errors.ExhaustedError`."""


class PacketTooLargeError(LimitError, ValueError):
    """The encapsulated packet would exceed the IP length limit, or the output room."""


class InternalError(PspError):
    """Out of memory, or OpenSSL failed."""

    category = "internal"


class CaptureError(PspError, _CaptureError):
    """A capture file could not be read or written."""


class KeyFileError(PspError, _KeyFileError):
    """A key file or reference config could not be parsed."""


_BY_CODE: Dict[str, Type[PspError]] = code_table(  # type: ignore[assignment]
    {
        "malformed": MalformedPacketError,
        "authentication": AuthenticationError,
        "replay": ReplayError,
        "policy": PolicyError,
        "no-key": NoKeyError,
        "not-this-protocol": NotPspError,
        "cut-by-capture": CutByCaptureError,
        "configuration": ConfigurationError,
        "io": CaptureError,
        "limit": LimitError,
        "internal": InternalError,
    },
    {
        "psp-truncated": TruncatedPacketError,
        "ip-truncated": TruncatedPacketError,
        "udp-truncated": TruncatedPacketError,
        "psp-unsupported-version": UnsupportedVersionError,
        "psp-version-disabled": VersionDisabledError,
        "iv-exhausted": IvExhaustedError,
        "ip-too-long": PacketTooLargeError,
        "buffer-too-small": PacketTooLargeError,
        "keyfile-syntax": KeyFileError,
        "keyfile-bad-value": KeyFileError,
        "keyfile-duplicate": KeyFileError,
    },
)


def error_class(code: str) -> Type[PspError]:
    """The exception class for a core status name."""
    return _BY_CODE.get(code, PspError)


def raise_psp(status: int, context: Optional[str] = None) -> NoReturn:
    raise_status(status, _BY_CODE, PspError, context)
