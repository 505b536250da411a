"""Deprecated: :mod:`pypsp.tools.diagnose` (documented as ``pypsp.diagnose``; this alias goes away in the next release)."""
from pecore._moved import alias

alias(__name__, "pypsp.tools.diagnose")
