"""pyeesp: byte-exact IPsec Enhanced ESP (draft-ietf-ipsecme-eesp-04) over the project's C core.

>>> import pyeesp
>>> sa = pyeesp.SA(0x1000, "aes-gcm-16", root_key=bytes(range(32)), sskdf="hkdf-sha256")
>>> wire = sa.encrypt(ip_packet, sub_sa_id=1)          # doctest: +SKIP
>>> sa.decrypt(wire).packet == ip_packet               # doctest: +SKIP
"""
from pecore.capture import Summary
from pecore.errors import ExhaustedError
from pyeesp.capture import decrypt_capture, encrypt_capture
from pyeesp.errors import (  # every exception class (pyeesp.errors.__all__)
    AuthenticationError, CaptureError, ConfigurationError, CutByCaptureError, DummyPacketError, EespError,
    InternalError, KeyFileError, LimitError, MalformedPacketError, NoSaError, NotEespError,
    PacketTooLargeError, PolicyError, ReplayError, SequenceExhaustedError, SubSaError, TruncatedPacketError,
    UnsupportedVersionError,
)
from pyeesp.header import Header, Option
from pyeesp.sa import SA, SUITES, Decrypted, Receiver, derive_sub_sa_key, suite_id

__version__ = "0.1.0"

# A literal list, sorted (tests/architecture/test_typing.py), so that type checkers see what is exported; it holds every
# name of pyeesp.errors.__all__.
__all__ = [
    "AuthenticationError", "CaptureError", "ConfigurationError", "CutByCaptureError", "Decrypted",
    "DummyPacketError", "EespError", "ExhaustedError", "Header", "InternalError", "KeyFileError", "LimitError",
    "MalformedPacketError", "NoSaError", "NotEespError", "Option", "PacketTooLargeError", "PolicyError",
    "Receiver", "ReplayError", "SA", "SUITES", "SequenceExhaustedError", "SubSaError", "Summary",
    "TruncatedPacketError", "UnsupportedVersionError", "decrypt_capture", "derive_sub_sa_key", "encrypt_capture",
    "suite_id",
]
