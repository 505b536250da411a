"""Deprecated: :mod:`pyeesp.tools.diagnose` (documented as ``pyeesp.diagnose``; this alias goes away in the next release)."""
from pecore._moved import alias

alias(__name__, "pyeesp.tools.diagnose")
