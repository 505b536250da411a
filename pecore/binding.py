"""The one module that holds the cffi binding of the C core (``ffi``, ``lib``).

Every runtime module of pecore that calls the core imports ``ffi`` and ``lib`` from here and from nowhere else.
The protocol faces (pypsp, pyeesp, pyesp) never do: they go through pecore's face machinery (``pecore.face``,
``pecore.ops``), and the tooling (``*.tools``: CLIs, diagnose, vectors) through the runtime API, so what an
importer of the library uses can be read without the tools.  tests/architecture/test_layers.py, tests/architecture/test_face_layers.py
and the import-linter contracts in pyproject.toml keep it so.
"""
from pecore._native import ffi, lib

__all__ = ["ffi", "lib"]
