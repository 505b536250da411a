"""What the atheris harnesses (fuzz/atheris/fuzz_*.py) share.

Importing this module imports nothing of the project: each harness imports
pecore/pypsp/pyeesp itself inside ``atheris.instrument_imports(...)`` so that
their code is instrumented for coverage.  The helpers here that need the
project import it lazily, after the harness has done so.

Input framing: every harness reads its choices (which entry point, which key
set) with ``FuzzedDataProvider.ConsumeIntInRange`` -- atheris takes integers
from the *end* of the input, one octet each for ranges below 256 -- and then
the rest of the input, from the front, as the bytes under test.
:func:`frame` builds such inputs for the seed corpora (make_corpus.py).
"""
from __future__ import annotations

import glob
import os
import sys
from typing import List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VECTORS = os.path.join(ROOT, "vectors")
PCAPS = os.path.join(VECTORS, "pcap")
CORPUS = os.path.join(HERE, "corpus")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

#: Modules whose code atheris instruments (scapy, cffi and the standard library are left alone).
INSTRUMENT = ["pecore", "pypsp", "pyeesp", "pyesp"]


def frame(payload: bytes, choices: Sequence[int]) -> bytes:
    """An input that makes a harness consume ``choices`` (in that order, each below 256
    and taken modulo its range) and then ``payload``."""
    if any(not 0 <= c < 256 for c in choices):
        raise ValueError("choices are single octets")
    return bytes(payload) + bytes(reversed(list(choices)))


def psp_key_files() -> List[str]:
    """The PSP vector groups' key files, in a fixed order (the decrypt harnesses index them)."""
    return sorted(glob.glob(os.path.join(PCAPS, "psp_v*_g*.keys")))


def eesp_key_files() -> List[str]:
    return sorted(glob.glob(os.path.join(PCAPS, "eesp_*_g*.keys")))


def psp_decryptors():
    """One pypsp.Decryptor per PSP vector group (its master pair and psp-key lines)."""
    import pypsp
    from pecore.keys import load_key_file

    out = []
    for path in psp_key_files():
        kf = load_key_file(path)
        master = kf.psp_master_keys if any(k is not None for k in kf.psp_master_keys) else None
        out.append(pypsp.Decryptor(master_keys=master, keys=kf.psp_keys or None))
    return out


def eesp_entries():
    """Every eesp-sa line of the vector key files, first one per (SPI, destination)."""
    from pecore.keys import load_key_file

    seen, out = set(), []
    for path in eesp_key_files():
        for e in load_key_file(path).eesp_sas:
            if (e.spi, e.dst) in seen:
                continue
            seen.add((e.spi, e.dst))
            out.append(e)
    return out


#: The ESP SAs of fuzz_esp.py (no ESP vectors to take them from): SPI, suite, key bits, and settings.  Every
#: suite family, both modes, ESN (resumed above 2^32), UDP encapsulation, and one SPI with its top bit set.
ESP_SAS = (
    (0x101, "aes-gcm-16", 128, dict(mode="tunnel")),
    (0x102, "aes-ccm-8", 128, dict(mode="transport", esn=True, first_seq=(5 << 32) + 1)),
    (0x103, "chacha20-poly1305", 256, dict(mode="transport", udp_encap=True)),
    (0x104, "aes-gmac", 256, dict(mode="tunnel", esn=True)),
    (0x105, "aes-gcm-16-iiv", 128, dict(mode="tunnel", udp_encap=True)),
    (0x106, "aes-gcm-8", 192, dict(mode="transport", anti_replay=False)),
    (0x80000107, "aes-ccm-16", 256, dict(mode="tunnel")),  # octet 0 0x80: ESP on UDP 4500 only as an SA held (§14)
)


def esp_sas():
    """One pyesp.SA per row of ESP_SAS (KEYMAT 00 01 02 ...: the key, then the suite's salt, by the core's table)."""
    import pyesp
    from pecore.protocol import eesp_suite

    return [pyesp.SA(spi, suite, bytes(range(eesp_suite(suite).keymat_len(bits))), **kw)  # type: ignore[union-attr]
            for spi, suite, bits, kw in ESP_SAS]


def replays_protected(entry) -> bool:
    return bool(entry.settings["anti_replay"] and entry.settings["seq"])
