#!/usr/bin/env python3
"""atheris: key files and reference configs through pecore.keys.

- parse_key_file(text) on the input decoded as UTF-8 (bad octets replaced);
- load_key_file(path) on the raw octets in a file (undecodable files too);
- load_psp_ref_config(path) on the raw octets in a file.

A key file that parses is then used as the CLIs use it: every eesp-sa line
becomes a pyeesp.SA, the PSP keys a pypsp.Decryptor and every psp-sa line a
pypsp.Encryptor.  Only the project's typed errors are accepted, and an error
message must never repeat a run of 16 or more hex digits from the input
(key material; the parser names lines and fields, never values).
"""
import os
import re
import sys
import tempfile

import atheris

import _common

with atheris.instrument_imports(include=_common.INSTRUMENT):
    import pypsp
    import pyeesp
    from pecore.errors import CoreError
    from pecore.keys import load_key_file, load_psp_ref_config, parse_key_file

MODES = ("parse-text", "load-file", "ref-config")
_DIR = tempfile.mkdtemp(prefix="atheris-keyfile-")
_PATH = os.path.join(_DIR, "keys")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{16,}")


def _no_key_in_message(err: Exception, source: str) -> None:
    text = str(err)
    low = source.lower()
    for run in _HEX_RUN.findall(text):
        if run.lower() in low:
            raise AssertionError(f"error message repeats {len(run)} hex digits of the input: {text!r}")


def _use(kf, source: str) -> None:
    for e in kf.eesp_sas:
        try:
            pyeesp.SA(**e.settings)
        except CoreError as e:
            _no_key_in_message(e, source)
    master = kf.psp_master_keys if any(k is not None for k in kf.psp_master_keys) else None
    if master is not None or kf.psp_keys:
        try:
            pypsp.Decryptor(master_keys=master, keys=kf.psp_keys or None)
        except CoreError as e:
            _no_key_in_message(e, source)
    for sa in kf.psp_sas:
        key = kf.psp_keys.get((sa.spi, sa.version)) or kf.psp_keys.get((sa.spi, None))
        kwargs = dict(spi=sa.spi, version=sa.version, mode=sa.mode, crypt_offset=sa.crypt_offset,
                      crypt_offset_ipv4=sa.crypt_offset_ipv4, crypt_offset_ipv6=sa.crypt_offset_ipv6,
                      vc=sa.vc, sample=sa.sample, drop=sa.drop)
        if sa.first_iv is not None:
            kwargs["first_iv"] = sa.first_iv
        try:
            if key is not None:
                pypsp.Encryptor(key=key, **kwargs)
            elif master is not None:
                pypsp.Encryptor(master_keys=master, **kwargs)
        except CoreError as e:
            _no_key_in_message(e, source)


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, len(MODES) - 1)
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    source = raw.decode("utf-8", "replace")
    try:
        if mode == 0:
            _use(parse_key_file(source), source)
        elif mode == 1:
            with open(_PATH, "wb") as f:
                f.write(raw)
            _use(load_key_file(_PATH), source)
        else:
            with open(_PATH, "wb") as f:
                f.write(raw)
            cfg = load_psp_ref_config(_PATH)
            assert len(cfg.master_keys) == 2 and all(len(k) == 32 for k in cfg.master_keys)
    except CoreError as e:
        _no_key_in_message(e, source)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
