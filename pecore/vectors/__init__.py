"""Deprecated: :mod:`pecore.tools.vectors` (this alias goes away in the next release).

A package rather than an alias so that ``python -m pecore.vectors`` (vectors/README.md) keeps working.
"""
from pecore._moved import reexport

__getattr__ = reexport(__name__, "pecore.tools.vectors")
