"""Reading the committed vector files (vectors/), for the tests of every family (test_vectors.py,
test_esp_vectors.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Tuple

from conftest import REPO_ROOT

VECTORS = REPO_ROOT / "vectors"


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def group_tests(doc: dict) -> Iterator[Tuple[dict, dict]]:
    """(group, test) for every test of a vector document, in tcId order."""
    for g in doc["testGroups"]:
        for t in g["tests"]:
            yield g, t
