#!/usr/bin/env python3
"""atheris: the header parsers of the Python faces.

pypsp.Header.parse and pyeesp.Header.parse may raise only the project's typed
errors (pecore.errors.CoreError subclasses); pypsp.Header.parse_lenient (what
the CLIs' ``show`` uses) may not raise at all.  A header that parses rebuilds
to the octets it was parsed from.
"""
import sys

import atheris

import _common

with atheris.instrument_imports(include=_common.INSTRUMENT):
    import pypsp
    import pyeesp
    from pecore.errors import CoreError

TARGETS = ("psp-parse", "psp-parse-lenient", "eesp-parse")


def _psp_checks(h: "pypsp.Header", raw: bytes) -> None:
    # Every derived property is computable, and the header rebuilds to its wire octets.
    h.vc, h.key_phase, h.version_name, h.tunnel  # noqa: B018
    n = h.header_len
    assert n <= len(raw), (n, len(raw))
    built = h.build()
    assert built == raw[:n], (built.hex(), raw[:n].hex())


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    which = fdp.ConsumeIntInRange(0, len(TARGETS) - 1)
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    if which == 0:
        try:
            h = pypsp.Header.parse(raw)
        except CoreError:
            return
        _psp_checks(h, raw)
    elif which == 1:
        h, status = pypsp.Header.parse_lenient(raw)  # never raises
        assert isinstance(status, str) and status
        if status == "ok":
            _psp_checks(h, raw)
        elif h is not None:
            h.vc, h.key_phase, h.version_name  # noqa: B018
    else:
        try:
            h = pyeesp.Header.parse(raw)
        except CoreError:
            return
        assert h.header_len <= len(raw)
        for o in h.options:
            o.name, o.wire_len, o.payload_offset, o.crypt_offset_value  # noqa: B018
        h.crypt_offset_option, h.unknown_options  # noqa: B018
        built = h.build()
        assert built == raw[: h.header_len], (built.hex(), raw[: h.header_len].hex())


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
