#!/usr/bin/env python3
"""atheris: capture files through the Python faces.

- pecore.capture.read_capture on the input as a file: every record, its IP
  packet and link-layer header;
- pypsp.decrypt_capture / pyeesp.decrypt_capture (the C bulk path behind the
  CLIs' ``decrypt``) with the vectors' keys; what they write must read back
  as a capture with as many records as the summary counts.

Only the project's typed errors (pecore.errors.CoreError) are accepted.
"""
import os
import sys
import tempfile

import atheris

import _common

with atheris.instrument_imports(include=_common.INSTRUMENT):
    import pypsp
    import pyeesp
    from pecore.capture import read_capture
    from pecore.errors import CoreError

MODES = ("read", "psp-decrypt", "eesp-decrypt")
MAX_RECORDS = 100000
PSP_DECRYPTORS = _common.psp_decryptors()
_ENTRIES = _common.eesp_entries()
EESP_SAS = [pyeesp.SA(**e.settings) for e in _ENTRIES]
_DIR = tempfile.mkdtemp(prefix="atheris-capture-")
_IN = os.path.join(_DIR, "in.pcap")
_OUT = os.path.join(_DIR, "out.pcap")


def _read(path: str) -> int:
    n = 0
    for rec in read_capture(path):
        ip = rec.ip_packet()
        l2 = rec.l2_header()
        assert ip is None or rec.data.endswith(ip)
        assert rec.data.startswith(l2)
        n += 1
        if n >= MAX_RECORDS:
            break
    return n


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, len(MODES) - 1)
    dec = PSP_DECRYPTORS[fdp.ConsumeIntInRange(0, len(PSP_DECRYPTORS) - 1)]
    with open(_IN, "wb") as f:
        f.write(fdp.ConsumeBytes(fdp.remaining_bytes()))
    try:
        if mode == 0:
            _read(_IN)
            return
        if mode == 1:
            summary = pypsp.decrypt_capture(dec, _IN, _OUT)
        else:
            summary = pyeesp.decrypt_capture(pyeesp.Receiver(EESP_SAS), _IN, _OUT)
    except CoreError:
        return
    assert summary.packets == summary.transformed + summary.passed + summary.failed, summary
    written = _read(_OUT)
    assert written == summary.packets, (written, summary)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
