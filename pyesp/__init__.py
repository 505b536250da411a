"""pyesp: byte-exact IPsec ESP (RFC 4303) with combined-mode AEADs over the project's C core.

>>> import pyesp
>>> sa = pyesp.SA(0x1000, "aes-gcm-16", key=bytes(20), mode="tunnel", esn=True)
>>> wire = sa.encrypt(ip_packet)                       # doctest: +SKIP
>>> sa.decrypt(wire).packet == ip_packet               # doctest: +SKIP
"""
from pecore.capture import Summary
from pecore.errors import ExhaustedError
from pyesp.capture import decrypt_capture, encrypt_capture
from pyesp.errors import (  # every exception class (pyesp.errors.__all__)
    AuthenticationError, CaptureError, ConfigurationError, CutByCaptureError, DummyPacketError, EspError,
    InternalError, KeyFileError, LimitError, MalformedPacketError, NoSaError, NotEspError,
    PacketTooLargeError, PolicyError, ReplayError, SequenceExhaustedError, TruncatedPacketError,
)
from pyesp.header import Header
from pyesp.sa import SA, SUITES, Decrypted, Receiver, suite_id

__version__ = "0.1.0"

# A literal list, sorted (tests/architecture/test_typing.py), so that type checkers see what is exported; it holds every
# name of pyesp.errors.__all__.
__all__ = [
    "AuthenticationError", "CaptureError", "ConfigurationError", "CutByCaptureError", "Decrypted",
    "DummyPacketError", "EspError", "ExhaustedError", "Header", "InternalError", "KeyFileError", "LimitError",
    "MalformedPacketError", "NoSaError", "NotEspError", "PacketTooLargeError", "PolicyError", "Receiver",
    "ReplayError", "SA", "SUITES", "SequenceExhaustedError", "Summary", "TruncatedPacketError", "decrypt_capture",
    "encrypt_capture", "suite_id",
]
