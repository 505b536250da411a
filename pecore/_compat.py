"""Old names of the Python API kept for one release: they work as before and warn (DeprecationWarning)."""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Dict, Optional


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    warnings.warn(f"{old} is deprecated: use {new} ({old} goes away in the next release)", DeprecationWarning,
                  stacklevel=stacklevel)


def renamed_kwargs(**renames: str) -> Callable:
    """Accept old keyword names (old=new) with a warning, e.g. ``@renamed_kwargs(session_id="sub_sa_id")``."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{fn.__qualname__}() got both {old}= and {new}= (the same parameter)")
                    warn_renamed(f"{fn.__qualname__}({old}=)", f"{new}=")
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return call

    return wrap


class CounterValue(int):
    """What ``next_iv`` gives where it used to be a property: call it (``next_iv()``, the new, uniform form) to get
    the value or None once exhausted; used as a plain int (the old form) it still works, and warns."""

    _value: Optional[int]
    _what: str

    def __new__(cls, value: Optional[int], raw: int, what: str) -> "CounterValue":
        obj = super().__new__(cls, raw)
        obj._value, obj._what = value, what
        return obj

    def __call__(self) -> Optional[int]:
        return self._value


def _warning_dunder(name: str) -> Callable:
    base = getattr(int, name)

    def method(self: CounterValue, *args: Any) -> Any:
        warn_renamed(f"the property {self._what}", f"the method {self._what}()")
        return base(int(self), *args) if name != "__int__" else int.__int__(self)

    method.__name__ = name
    return method


_DUNDERS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__index__", "__format__", "__repr__",
            "__str__", "__add__", "__radd__", "__sub__", "__rsub__", "__and__", "__or__", "__xor__", "__lshift__",
            "__rshift__", "__mul__", "__floordiv__", "__mod__", "__bool__", "__float__")
_attrs: Dict[str, Any] = {name: _warning_dunder(name) for name in _DUNDERS}
_attrs["__hash__"] = int.__hash__
for _name, _fn in _attrs.items():
    setattr(CounterValue, _name, _fn)
