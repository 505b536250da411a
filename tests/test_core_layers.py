"""The core's folders are its layers (README "Layout"): each may include only the layers below it.

    io/      captures, batches, key files, transforms (the protocols as capture callbacks)
    proto/   PSP, EESP, IP, replay windows, key tables
    crypto/  AEAD, KDFs, wiping
    status   the status list every layer reports with

A protocol file that includes a capture header, or a crypto file that knows a protocol, fails here.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"

# Public headers by the layer that implements them.
HEADER_LAYER = {
    "status.h": 0, "bytes.h": 0,
    "wipe.h": 1, "aead.h": 1, "kdf.h": 1,
    "ip.h": 2, "replay.h": 2, "psp.h": 2, "eesp.h": 2, "esp.h": 2,
    "capture.h": 3, "batch.h": 3, "keyfile.h": 3, "transforms.h": 3, "parallel.h": 3,
}
FOLDER_LAYER = {"crypto": 1, "proto": 2, "io": 3}
INCLUDE = re.compile(r'^\s*#\s*include\s+"(?:pe/)?([^"]+)"', re.M)


def _layer_of(path: Path) -> int:
    if path.parent == CORE / "include" / "pe":
        return HEADER_LAYER[path.name]
    if path.parent == CORE / "src":
        return 0
    return FOLDER_LAYER[path.parent.name]


def _files():
    yield from sorted((CORE / "include" / "pe").glob("*.h"))
    yield from sorted((CORE / "src").rglob("*.[ch]"))


def test_every_public_header_has_a_layer():
    assert sorted(HEADER_LAYER) == sorted(p.name for p in (CORE / "include" / "pe").glob("*.h"))
    assert {p.name for p in (CORE / "src").iterdir() if p.is_dir()} == set(FOLDER_LAYER)


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(CORE)))
def test_includes_point_down(path):
    own = _layer_of(path)
    for name in INCLUDE.findall(path.read_text()):
        if name in HEADER_LAYER:
            assert HEADER_LAYER[name] <= own, f"{path.relative_to(ROOT)} (layer {own}) includes {name} (layer {HEADER_LAYER[name]})"
        else:  # a private header: must sit beside the file (same folder, same layer)
            assert (path.parent / name).is_file(), f"{path.relative_to(ROOT)} includes {name} from another folder"
