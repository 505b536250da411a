"""Old import paths of modules that moved into a ``tools`` subpackage: kept for one release, with a warning."""
from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any, Callable


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there ({old} goes away in the next release)",
                  DeprecationWarning, stacklevel=4)


def alias(old: str, new: str) -> None:
    """Make module ``old`` (the caller, being imported) the module ``new``, after a DeprecationWarning."""
    _warn(old, new)
    sys.modules[old] = importlib.import_module(new)


def reexport(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for package ``old`` that serves ``new``'s names, after a DeprecationWarning."""
    _warn(old, new)
    target = importlib.import_module(new)

    def __getattr__(name: str) -> Any:
        return getattr(target, name)

    return __getattr__
