"""The registry of vector families (PSP, EESP, ESP): each registers itself, and the ``psp_eesp.vectors`` entry
points offer them to a process that imported none, so this shared floor never imports the packages above it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List

if TYPE_CHECKING:
    from pecore.tools.vectors.check import Outcome
    from pecore.tools.vectors.documents import VectorFile


#: The entry-point group through which an installed package offers a vector family (pyproject.toml).
ENTRY_POINT_GROUP = "psp_eesp.vectors"


@dataclass(frozen=True)
class Family:
    """A vector family (``psp``, ``eesp``): its generator, its schemas and a checker per schema."""

    name: str
    generate: Callable[[int], List["VectorFile"]]
    schemas: Dict[str, dict]
    checkers: Dict[str, Callable[..., List["Outcome"]]]


_FAMILIES: Dict[str, Family] = {}
_discovered = False


def register_family(family: Family) -> Family:
    """Make a family's schemas and checkers known to ``check``/``validate`` (idempotent per name)."""
    _FAMILIES[family.name] = family
    return family


def families() -> Dict[str, Family]:
    """The registered families, after loading those that installed packages offer as entry points, so that
    either CLI checks any family's files."""
    global _discovered
    if not _discovered:
        _discovered = True
        from importlib.metadata import entry_points

        try:
            eps = entry_points(group=ENTRY_POINT_GROUP)
        except TypeError:  # pragma: no cover - Python 3.9: entry_points() takes no group
            eps = entry_points().get(ENTRY_POINT_GROUP, ())  # type: ignore[attr-defined]
        for ep in eps:
            if ep.name in _FAMILIES:
                continue
            try:
                fam = ep.load()
            except ImportError:  # stale metadata of another install: that family is simply unknown
                continue
            if isinstance(fam, Family):
                register_family(fam)
    return dict(_FAMILIES)


def all_schemas() -> Dict[str, dict]:
    out: Dict[str, dict] = {}
    for fam in families().values():
        out.update(fam.schemas)
    return out
