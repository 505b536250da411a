#!/usr/bin/env python3
"""atheris: the ESP face (pyesp) on outside octets.

- header: pyesp.Header.parse (typed errors only; a header rebuilds to its octets), .parse_lenient (never
  raises) and pecore.protocol.locate_esp (never raises; what it finds lies inside the packet).
- decrypt: pyesp.Receiver.decrypt of an outer IP packet over the SAs of _common.ESP_SAS, in a receiver
  made afresh for each input; a packet accepted once by an SA with anti-replay is refused as a replay the
  second time, and decrypt_batch on another fresh receiver agrees with decrypt.
- open: pyesp.Receiver.open of bare ESP octets (IPv4 or IPv6 carrier); with replay=False twice the same
  outcome.

Only the project's typed errors (pecore.errors.CoreError) are accepted.
"""
import sys

import atheris

import _common

with atheris.instrument_imports(include=_common.INSTRUMENT):
    import pyesp
    from pecore.errors import CoreError
    from pecore.protocol import locate_esp

SAS = _common.esp_sas()
MODES = ("header", "decrypt", "open")


def _outcome(fn, *args, **kw):
    try:
        d = fn(*args, **kw)
    except CoreError as e:
        return ("error", type(e).__name__, e.code)
    return ("ok", d)


def header(raw: bytes) -> None:
    h, status = pyesp.Header.parse_lenient(raw)
    assert (h is None) == (status != "ok"), (h, status)
    try:
        h = pyesp.Header.parse(raw)
    except CoreError:
        return
    assert h.build() == raw[:8]
    loc, status = locate_esp(raw, either_port=True)
    if loc is not None:
        assert status == "ok" and 0 < loc.offset and loc.offset + loc.length <= len(raw), (loc, len(raw))


def decrypt(raw: bytes) -> None:
    single = _outcome(pyesp.Receiver(SAS).decrypt, raw)
    (batched,) = pyesp.Receiver(SAS).decrypt_batch([raw])
    got = ("error", type(batched).__name__, batched.code) if isinstance(batched, CoreError) else ("ok", batched)
    assert got == single, (single, got)
    if single[0] != "ok":
        return
    d = single[1]
    d.header, d.iv, d.seq_low  # noqa: B018
    sa = next(s for s in SAS if s.spi == d.spi)
    rx = pyesp.Receiver(SAS)
    rx.decrypt(raw)
    again = _outcome(rx.decrypt, raw)
    if sa._settings["anti_replay"]:
        assert again[:2] == ("error", "ReplayError"), again
    else:
        assert again == single


def open_(raw: bytes, ip_version: int) -> None:
    rx = pyesp.Receiver(SAS)
    first = _outcome(rx.open, raw, ip_version=ip_version, replay=False)
    assert _outcome(rx.open, raw, ip_version=ip_version, replay=False) == first


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, len(MODES) - 1)
    if mode == 2:
        version = 4 if fdp.ConsumeIntInRange(0, 1) == 0 else 6
        open_(fdp.ConsumeBytes(fdp.remaining_bytes()), version)
        return
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    (header if mode == 0 else decrypt)(raw)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
