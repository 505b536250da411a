"""Shared pytest fixtures and settings for the test suite.

- `shared_dir` fixture: `<repo>/../shared` (the google/psp reference captures, under reference/), as a Path.
- `@pytest.mark.needs_shared`: skips a test when that directory is absent. The module-level object
  `needs_shared` is the same marker for `from conftest import needs_shared` users.
- hypothesis profiles: "ci" (derandomize, no deadline, max_examples from env PE_HYPOTHESIS_EXAMPLES,
  default 2000) and "dev" (no deadline, fewer examples: env PE_HYPOTHESIS_DEV_EXAMPLES, default 200).
  "ci" is loaded when the env variable CI is set, else "dev"; HYPOTHESIS_PROFILE=<name> overrides both.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent


def from_test_folder(folder: str, module: str):  # type: ignore[no-untyped-def]
    """A test module of another tests/<folder>, for the few tests that share its harness: imported under its own
    name, as pytest imports it (rootdir-relative "prepend" mode), so it is never loaded twice."""
    import importlib

    path = str(TESTS_DIR / folder)
    if path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module)
SHARED_DIR = REPO_ROOT.parent / "shared"
DATA_DIR = TESTS_DIR / "data"

if str(TESTS_DIR) not in sys.path:  # psp_model, pcaputil are plain modules beside the tests
    sys.path.insert(0, str(TESTS_DIR))

needs_shared = pytest.mark.needs_shared


def shared_present() -> bool:
    return SHARED_DIR.is_dir()


try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci",
        derandomize=True,
        deadline=None,
        max_examples=int(os.environ.get("PE_HYPOTHESIS_EXAMPLES", "2000")),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )
    settings.register_profile(
        "dev",
        deadline=None,
        max_examples=int(os.environ.get("PE_HYPOTHESIS_DEV_EXAMPLES", "200")),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
except ImportError:  # hypothesis is only needed by the property tests
    pass


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_shared: needs the ../shared reference-capture directory")
    config.addinivalue_line("markers", "tshark: drives tshark with the project's dissectors (tests/wireshark.py)")
    config.addinivalue_line("markers", "tunnel: runs live endpoints in network namespaces (root; tests/tunnel)")


# Modules that drive tshark: their Python side only makes captures, so the run
# against the sanitizer-built extension leaves them out (-m "not tshark").
TSHARK_MODULES = {"test_wireshark_plugin", "test_wireshark_plugin_eesp", "test_wireshark_plugin_reference",
                  "test_wireshark_plugin_display", "test_lua_dissectors", "test_lua_beside_plugin"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rpartition(".")[2] in TSHARK_MODULES:
            item.add_marker(pytest.mark.tshark)


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_shared") is not None and not shared_present():
        pytest.skip(f"shared directory not present: {SHARED_DIR}")


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return SHARED_DIR


@pytest.fixture(scope="session")
def reference_dir(shared_dir) -> Path:
    """<shared>/reference/psp (skips when absent)."""
    d = shared_dir / "reference" / "psp"
    if not d.is_dir():
        pytest.skip(f"reference captures not present: {d}")
    return d


@pytest.fixture(scope="session")
def psp_kat() -> dict:
    import json

    return json.loads((DATA_DIR / "psp_kat.json").read_text())
