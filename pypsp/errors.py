"""PSP exceptions: one hierarchy under :class:`PspError`, each carrying the core's status name and message."""
from __future__ import annotations

from typing import Dict, NoReturn, Optional, Type

from pecore.capture import CaptureError as _CaptureError
from pecore.errors import IP_MALFORMED_CODES, CoreError, raise_status
from pecore.keys import KeyFileError as _KeyFileError


class PspError(CoreError):
    """Base class of every PSP error.  ``code`` is the core's status name."""


class ConfigurationError(PspError, ValueError):
    """Invalid parameters: key length, version, crypt offset range, …"""


class AuthenticationError(PspError):
    """The ICV did not verify: wrong key, or the packet was altered."""


class MalformedPacketError(PspError):
    """The packet breaks the PSP (or IP/UDP) format."""


class TruncatedPacketError(MalformedPacketError):
    """The packet ends before its header, payload or ICV does."""


class NotPspError(MalformedPacketError):
    """The packet is not PSP at all (not UDP, or not the PSP port)."""


class UnsupportedVersionError(PspError):
    """Crypto version 4-15, or a version this receiver has disabled."""


class NoKeyError(PspError):
    """No derived key or master key is configured for the packet's SPI."""


class IvExhaustedError(PspError):
    """The SA has used its last IV; it refuses to wrap and reuse one."""


class PacketTooLargeError(PspError, ValueError):
    """The encapsulated packet would exceed the IP length limit."""


class CaptureError(PspError, _CaptureError):
    """A capture file could not be read or written."""


class KeyFileError(PspError, _KeyFileError):
    """A key file or reference config could not be parsed."""


_BY_CODE: Dict[str, Type[PspError]] = {
    "authentication-failed": AuthenticationError,
    "no-key": NoKeyError,
    "iv-exhausted": IvExhaustedError,
    "psp-unsupported-version": UnsupportedVersionError,
    "psp-version-disabled": UnsupportedVersionError,
    "psp-truncated": TruncatedPacketError,
    "ip-truncated": TruncatedPacketError,
    "udp-truncated": TruncatedPacketError,
    "not-udp": NotPspError,
    "udp-wrong-port": NotPspError,
    "ip-too-long": PacketTooLargeError,
    "psp-too-long": PacketTooLargeError,
    "buffer-too-small": PacketTooLargeError,
    "bad-key-length": ConfigurationError,
    "invalid-argument": ConfigurationError,
    "psp-crypt-offset-out-of-range": ConfigurationError,
    "psp-gmac-crypt-offset": ConfigurationError,
}
for _code in (
    "psp-always-one-bit-clear",
    "psp-bad-hdr-ext-len",
    "psp-vc-without-room",
    "psp-crypt-offset-past-payload",
    "psp-bad-mode",
    "psp-bad-inner-packet",
    *IP_MALFORMED_CODES,
):
    _BY_CODE[_code] = MalformedPacketError


def error_class(code: str) -> Type[PspError]:
    """The exception class for a core status name."""
    return _BY_CODE.get(code, PspError)


def raise_psp(status: int, context: Optional[str] = None) -> NoReturn:
    raise_status(status, _BY_CODE, PspError, context)
