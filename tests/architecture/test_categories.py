"""One meaning for every status: the core's category column (core/include/pe/status.h) is what every face shows.

Walks every status name the core has and checks that the Python exception classes of every package (pypsp,
pyeesp, pyesp) stand for its category; the dissectors' expert items are checked against the same table by the tshark tests
(tests/wireshark/test_wireshark_plugin_display.py, tests/wireshark/test_lua_beside_plugin.py).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import pyeesp
import pyesp
import pypsp
from pecore._native import ffi, lib
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE, CoreError
from pyeesp.errors import error_class as eesp_error_class
from pyesp.errors import error_class as esp_error_class
from pypsp.errors import error_class as psp_error_class

ROOT = Path(__file__).resolve().parents[2]


def test_every_status_has_a_known_category():
    names = [ffi.string(lib.pe_status_name(s)).decode() for s in range(lib.PE_STATUS_COUNT)]
    assert len(set(names)) == len(names) == len(CATEGORY_BY_CODE)
    assert set(CATEGORY_BY_CODE.values()) <= set(CATEGORIES)
    # every category but none of the generic ones is used by some status
    assert set(CATEGORY_BY_CODE.values()) == set(CATEGORIES)
    assert ffi.string(lib.pe_category_name(lib.pe_status_category(lib.PE_STATUS_COUNT))).decode() == "internal"
    assert ffi.string(lib.pe_category_name(lib.PE_CATEGORY_COUNT)).decode() == "unknown-category"


def test_the_header_lists_each_status_with_one_category():
    """The X-macro rows carry (code, name, category, message): nothing else decides a category."""
    text = (ROOT / "core" / "include" / "pe" / "status.h").read_text()
    rows = re.findall(r'X\((PE_(?:OK|ERR_\w+)), "([a-z0-9-]+)", PE_CAT_(\w+),', text)
    assert len(rows) == len(CATEGORY_BY_CODE)
    for _, name, cat in rows:
        assert CATEGORY_BY_CODE[name] == cat.lower().replace("_", "-")


@pytest.mark.parametrize("code", sorted(c for c, cat in CATEGORY_BY_CODE.items() if cat != "ok"))
def test_python_classes_stand_for_the_category(code):
    category = CATEGORY_BY_CODE[code]
    for error_class, base in ((psp_error_class, pypsp.PspError), (eesp_error_class, pyeesp.EespError),
                              (esp_error_class, pyesp.EspError)):
        cls = error_class(code)
        assert issubclass(cls, base) and issubclass(cls, CoreError)
        assert cls.category == category, (code, cls.__name__)
        err = cls("message", code)
        assert err.category == category and err.code == code


def test_the_category_classes():
    """Each package has one class per category, and the refinements stay inside theirs."""
    for mod in (pypsp, pyeesp, pyesp):
        assert issubclass(mod.TruncatedPacketError, mod.MalformedPacketError)
        assert mod.CutByCaptureError.category == "cut-by-capture"
        assert mod.PacketTooLargeError.category == "limit" and issubclass(mod.PacketTooLargeError, mod.LimitError)
        assert mod.InternalError.category == "internal"
        assert mod.ReplayError.category == "replay"
        assert mod.PolicyError.category == "policy"
        assert mod.CaptureError.category == "io" and mod.KeyFileError.category == "configuration"
    assert issubclass(pyeesp.SubSaError, pyeesp.PolicyError) and issubclass(pyeesp.DummyPacketError, pyeesp.PolicyError)
    assert issubclass(pypsp.VersionDisabledError, pypsp.PolicyError)
    assert issubclass(pypsp.VersionDisabledError, pypsp.UnsupportedVersionError)
    assert issubclass(pyesp.DummyPacketError, pyesp.PolicyError)
    assert pypsp.IvExhaustedError.category == pyeesp.SequenceExhaustedError.category == "limit"
    assert pyesp.SequenceExhaustedError.category == "limit"
