"""docs/scapy.md: every ```python block runs, in order, in one namespace (as the document promises).

The blocks carry their own assertions; this test only executes them.  The UDP 4500 binding, the EESP
layouts and the IP protocol number are process-wide, so they are restored afterwards.
"""
from __future__ import annotations

import re

import pytest

from conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "scapy.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)


@pytest.fixture
def restore_scapy_state():
    import pyeesp.scapy as es

    layouts, default = dict(es._LAYOUTS), es._default_layout
    yield
    es._LAYOUTS.clear()
    es._LAYOUTS.update(layouts)
    es._default_layout = default
    if es.ip_protocol() != es.DEFAULT_IP_PROTOCOL:
        es.set_ip_protocol(es.DEFAULT_IP_PROTOCOL)
    for port in list(es._udp_ports):
        es.unbind_udp_encap(port)


def test_doc_has_examples():
    assert len(BLOCKS) >= 10
    text = DOC.read_text()
    for name in ("PSPSecurityAssociation", "EESPSecurityAssociation", "bind_udp_encap", "register_layout",
                 "EESPOptCryptOffset", "rdpcap", "AuthenticationError"):
        assert name in text, name


def test_doc_examples_run(restore_scapy_state, capsys):
    namespace: dict = {"__name__": "docs_scapy_md"}
    for i, block in enumerate(BLOCKS):
        code = compile(block, f"{DOC.name} (python block {i + 1})", "exec")
        exec(code, namespace)  # noqa: S102 - the document's own examples
    out = capsys.readouterr().out
    assert "###[ PSP ]###" in out and "###[ EESP ]###" in out and "replay: replay-duplicate" in out
    assert "EESP Option Crypt Offset" in out
