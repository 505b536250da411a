"""What the independent protocol models (tests/psp_model.py, eesp_model.py, esp_model.py) share.

The models are independent of the core and of pecore, not of each other: each is written from its protocol's
documents, and what is the same for all three (how a model reports a drop, the RFC 1071 checksum of its IP
framing) is written once here, with the standard library only.
"""
from __future__ import annotations

import struct


class ModelError(Exception):
    """Any failure of a model. `code` is the reason in the core's kebab-case status vocabulary (where the core
    has a name for it); `icv_valid` is set when the drop came after the ICV check."""

    def __init__(self, code: str, message: str = "", icv_valid: bool | None = None):
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.icv_valid = icv_valid


def inet_checksum(data: bytes) -> int:
    """RFC 1071 one's-complement sum, folded and complemented."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
