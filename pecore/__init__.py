"""Shared Python face of the C core used by :mod:`pypsp` (and the EESP package).

It holds what both protocols need exactly once: the compiled core
(``pecore._native``, held by ``pecore.binding`` alone), the error base class, capture-file processing at C
speed and the key-file reader.
"""
from pecore.errors import CoreError, status_name

__all__ = ["CoreError", "status_name"]
