#!/usr/bin/env python3
"""atheris: decryption through the Python faces, with the vectors' keys.

- PSP: pypsp.Decryptor.decrypt (an outer IP packet) and .open (a bare PSP
  packet), one Decryptor per PSP vector group (its master keys and psp-key
  lines); decrypt_batch of the same packet must agree with decrypt.
- EESP: pyeesp.Receiver.decrypt over every SA of the EESP vector key files.
  SAs with anti-replay sit in a Receiver made afresh for each input (so no
  replay state leaks from one input to the next); a packet they accept must
  be refused as a replay the second time.  The others sit in one long-lived
  Receiver (their only state is the Sub SA key cache), renewed now and then
  to bound the memory that random Session IDs make it cache.

Only the project's typed errors (pecore.errors.CoreError) are accepted.
"""
import sys

import atheris

import _common

with atheris.instrument_imports(include=_common.INSTRUMENT):
    import pypsp
    import pyeesp
    from pecore.errors import CoreError

PSP_DECRYPTORS = _common.psp_decryptors()
_ENTRIES = _common.eesp_entries()
REPLAY_SAS = [pyeesp.SA(**e.settings) for e in _ENTRIES if _common.replays_protected(e)]
OTHER_SAS = [pyeesp.SA(**e.settings) for e in _ENTRIES if not _common.replays_protected(e)]
RENEW_EVERY = 20000

MODES = ("psp-decrypt", "psp-open", "eesp-decrypt")
_state = {"rx": None, "uses": 0}


def _other_receiver() -> "pyeesp.Receiver":
    if _state["rx"] is None or _state["uses"] >= RENEW_EVERY:
        _state["rx"], _state["uses"] = pyeesp.Receiver(OTHER_SAS), 0
    _state["uses"] += 1
    return _state["rx"]


def _outcome(fn, *args):
    try:
        r = fn(*args)
    except CoreError as e:
        return ("error", type(e).__name__, e.code)
    return ("ok", r.packet, r.header)


def psp(dec: "pypsp.Decryptor", raw: bytes, bare: bool) -> None:
    if bare:
        _outcome(dec.open, raw)
        return
    single = _outcome(dec.decrypt, raw)
    (batched,) = dec.decrypt_batch([raw])
    if isinstance(batched, CoreError):
        got = ("error", type(batched).__name__, batched.code)
    else:
        got = ("ok", batched.packet, batched.header)
    assert got == single, (single, got)


def eesp(raw: bytes) -> None:
    fresh = pyeesp.Receiver(REPLAY_SAS)
    for rx in (fresh, _other_receiver()):
        try:
            d = rx.decrypt(raw)
        except pyeesp.NoSaError:
            continue
        except CoreError:
            return
        d.sub_sa_id, d.header.options  # noqa: B018
        if rx is fresh:
            try:
                rx.decrypt(raw)
            except pyeesp.ReplayError:
                return
            raise AssertionError(f"a replayed packet was accepted (seq {d.seq})")
        return


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, len(MODES) - 1)
    if mode < 2:
        dec = PSP_DECRYPTORS[fdp.ConsumeIntInRange(0, len(PSP_DECRYPTORS) - 1)]
        psp(dec, fdp.ConsumeBytes(fdp.remaining_bytes()), bare=mode == 1)
    else:
        eesp(fdp.ConsumeBytes(fdp.remaining_bytes()))


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
