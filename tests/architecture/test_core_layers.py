"""The core's folders are its layers (README "Layout"): each may include only the layers below it.

    net/     the live endpoint: TUN devices, sockets, the data plane over the protocols' ops
    io/      captures, batches, key files, transforms (the protocols as capture callbacks)
    proto/   PSP; ESP and EESP over what they share (ipsec); IP, link-layer framing, replay windows, key tables
    crypto/  AEAD, KDFs, wiping
    status   the status list every layer reports with

A protocol file that includes a capture header, or a crypto file that knows a protocol, fails here.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"

# Public headers by the layer that implements them.
HEADER_LAYER = {
    "status.h": 0, "bytes.h": 0,
    "wipe.h": 1, "aead.h": 1, "kdf.h": 1, "encauth.h": 1, "backend.h": 1,
    "ip.h": 2, "link.h": 2, "replay.h": 2, "ipsec.h": 2, "psp.h": 2, "eesp.h": 2, "esp.h": 2,
    "capture.h": 3, "batch.h": 3, "keyfile.h": 3, "transforms.h": 3, "parallel.h": 3,
    "tunnel.h": 4,
}
FOLDER_LAYER = {"crypto": 1, "proto": 2, "io": 3, "net": 4}
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


def _includes(path: Path) -> set:
    """Every header `path` reaches, through the headers it includes (public and private)."""
    seen, todo = set(), [path]
    while todo:
        p = todo.pop()
        for name in INCLUDE.findall(p.read_text()):
            q = CORE / "include" / "pe" / name if name in HEADER_LAYER else p.parent / name
            if q.is_file() and q not in seen:
                seen.add(q)
                todo.append(q)
    return {q.name for q in seen}


# ESP and EESP are siblings over proto/ipsec: neither leans on the other, and what they share knows neither.
@pytest.mark.parametrize("path,forbidden", [
    ("include/pe/esp.h", {"eesp.h", "eesp_internal.h"}),
    ("src/proto/esp.c", {"eesp.h", "eesp_internal.h"}),
    ("include/pe/ipsec.h", {"eesp.h", "eesp_internal.h", "esp.h"}),
    ("src/proto/ipsec.c", {"eesp.h", "eesp_internal.h", "esp.h"}),
    ("src/proto/ipsec_internal.h", {"eesp.h", "eesp_internal.h", "esp.h"}),
    ("include/pe/eesp.h", {"esp.h"}),
])
def test_esp_and_eesp_share_only_ipsec(path, forbidden):
    reached = _includes(CORE / path)
    assert not reached & forbidden, f"core/{path} reaches {sorted(reached & forbidden)}"
    if path.startswith("src/proto/e"):
        assert "ipsec.h" in reached
