"""pypsp: byte-exact PSP Security Protocol (versions 0-3) over the project's C core.

>>> import pypsp
>>> key = pypsp.derive_key(bytes(32), spi=0x12345678, version=0)
>>> enc = pypsp.Encryptor(key=key, spi=0x12345678)
>>> dec = pypsp.Decryptor(keys={0x12345678: key})
"""
from pecore.capture import Summary
from pypsp.capture import decrypt_capture, encrypt_capture
from pypsp.crypto import Decrypted, Decryptor, Encryptor, derive_key
from pypsp.errors import (
    AuthenticationError,
    CaptureError,
    ConfigurationError,
    IvExhaustedError,
    KeyFileError,
    MalformedPacketError,
    NoKeyError,
    NotPspError,
    PacketTooLargeError,
    PspError,
    TruncatedPacketError,
    UnsupportedVersionError,
)
from pypsp.header import Header

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "CaptureError",
    "ConfigurationError",
    "Decrypted",
    "Decryptor",
    "Encryptor",
    "Header",
    "IvExhaustedError",
    "KeyFileError",
    "MalformedPacketError",
    "NoKeyError",
    "NotPspError",
    "PacketTooLargeError",
    "PspError",
    "Summary",
    "TruncatedPacketError",
    "UnsupportedVersionError",
    "decrypt_capture",
    "derive_key",
    "encrypt_capture",
]
