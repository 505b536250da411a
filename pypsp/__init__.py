"""pypsp: byte-exact PSP Security Protocol (versions 0-3) over the project's C core.

>>> import pypsp
>>> key = pypsp.derive_key(bytes(32), spi=0x12345678, version=0)
>>> enc = pypsp.Encryptor(key=key, spi=0x12345678)
>>> dec = pypsp.Decryptor(keys={0x12345678: key})
"""
from pecore.capture import Summary
from pecore.errors import ExhaustedError
from pypsp.capture import decrypt_capture, encrypt_capture
from pypsp.crypto import Decrypted, Decryptor, Encryptor, derive_key, kdf_label
from pypsp.errors import (  # every exception class (pypsp.errors.__all__)
    AuthenticationError, CaptureError, ConfigurationError, CutByCaptureError, InternalError,
    IvExhaustedError, KeyFileError, LimitError, MalformedPacketError, NoKeyError, NotPspError,
    PacketTooLargeError, PolicyError, PspError, ReplayError, TruncatedPacketError, UnsupportedVersionError,
    VersionDisabledError,
)
from pypsp.header import Header

__version__ = "0.1.0"

# A literal list, sorted (tests/architecture/test_typing.py), so that type checkers see what is exported; it holds every
# name of pypsp.errors.__all__.
__all__ = [
    "AuthenticationError", "CaptureError", "ConfigurationError", "CutByCaptureError", "Decrypted", "Decryptor",
    "Encryptor", "ExhaustedError", "Header", "InternalError", "IvExhaustedError", "KeyFileError", "LimitError",
    "MalformedPacketError", "NoKeyError", "NotPspError", "PacketTooLargeError", "PolicyError", "PspError",
    "ReplayError", "Summary", "TruncatedPacketError", "UnsupportedVersionError", "VersionDisabledError",
    "decrypt_capture", "derive_key", "encrypt_capture", "kdf_label",
]
