#!/usr/bin/env python3
"""atheris: the interop checkers pypsp.tools.diagnose and pyeesp.tools.diagnose on hostile input.

The input is the packet, as octets or as a hex string (what ``pypsp diagnose
HEX`` passes on), diagnosed against the keys of a PSP vector group (master
keys and psp-key lines) or a handful of EESP vector SAs (root key and
key||salt, AEAD and GMAC, explicit and implicit IV).  Every report must
format as text and as JSON.  Only the project's typed errors
(pecore.errors.CoreError; DiagnoseInputError among them) are accepted.
"""
import json
import sys

import atheris

import _common

with atheris.instrument_imports(include=_common.INSTRUMENT):
    import pypsp.tools.diagnose
    import pyeesp.tools.diagnose
    from pecore.errors import CoreError
    from pecore.keys import load_key_file

MODES = ("psp-bytes", "psp-hex", "eesp-bytes", "eesp-hex")
_PSP = load_key_file(_common.psp_key_files()[0])
PSP_MASTER = _PSP.psp_master_keys
PSP_KEYS = dict(_PSP.psp_keys)
#: A few SAs that between them take every branch of the EESP diagnosis (make_corpus.py seeds them).
EESP_GROUPS = ("eesp_aes-gcm-16_g01", "eesp_chacha20-poly1305_g04", "eesp_aes-gmac_g01", "eesp_aes-ccm-8-iiv_g03")


def _eesp_entries():
    out = []
    for name in EESP_GROUPS:
        out += load_key_file(f"{_common.PCAPS}/{name}.keys").eesp_sas
    return out


EESP_SAS = _eesp_entries()


def _render(report) -> None:
    report.format()
    json.dumps(report.to_dict())
    report.headline()


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, len(MODES) - 1)
    max_mistakes = fdp.ConsumeIntInRange(0, 2)
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    packet = raw if mode in (0, 2) else raw.decode("latin-1")
    try:
        if mode < 2:
            report = pypsp.tools.diagnose.diagnose(packet, master_keys=PSP_MASTER, keys=PSP_KEYS, max_mistakes=max_mistakes)
        else:
            report = pyeesp.tools.diagnose.diagnose(packet, EESP_SAS, max_mistakes=max_mistakes)
    except CoreError:
        return
    _render(report)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
