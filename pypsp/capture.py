"""Encrypt and decrypt whole capture files with PSP, at C speed."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pecore import face
from pecore.capture import PathLike, ProgressFn, Summary
from pypsp.errors import CaptureError, ConfigurationError

if TYPE_CHECKING:  # annotations only: pypsp.crypto imports this module for Encryptor.encrypt_capture
    from pypsp.crypto import Decryptor, Encryptor

_ERRORS = (CaptureError, ConfigurationError)


def encrypt_capture(
    encryptor: "Encryptor",
    in_path: PathLike,
    out_path: PathLike,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    fmt: Optional[str] = None,
    jobs: Optional[int] = None,
) -> Summary:
    """Encrypt every IPv4/IPv6 packet of a pcap/pcapng file into ``out_path`` (same format, or
    ``fmt`` "pcap"/"pcapng"; "-" is standard input or output; docs/captures.md).

    Non-IP frames are copied unchanged; packets the SA refuses (e.g. fragments
    in transport mode) are copied unchanged and counted by reason, or left out
    with ``drop_failed``.  Timestamps are kept.  ``jobs`` threads share the
    work (default: the CPUs this process may use); the output, the IVs and
    the summary are those of one thread.  An encryptor with a ``udp_sport``
    callable runs on one thread (its function is called in packet order).
    """
    return face.encrypt_capture(encryptor._core, in_path, out_path, drop_failed=drop_failed, progress=progress,
                                fmt=fmt, jobs=jobs, errors=_ERRORS)


def decrypt_capture(
    decryptor: "Decryptor",
    in_path: PathLike,
    out_path: PathLike,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    fmt: Optional[str] = None,
    jobs: Optional[int] = None,
) -> Summary:
    """Decrypt every PSP packet of a pcap/pcapng file into ``out_path`` (same format, or
    ``fmt`` "pcap"/"pcapng"; "-" is standard input or output; docs/captures.md).

    Non-PSP packets are copied unchanged; PSP packets that fail (bad ICV, no
    key, malformed) are copied unchanged and counted by reason, or left out
    with ``drop_failed``.  Timestamps are kept.  ``jobs`` threads share the
    work (default: the CPUs this process may use), with one thread's output.
    """
    return face.decrypt_capture(decryptor._core, in_path, out_path, drop_failed=drop_failed, progress=progress,
                                fmt=fmt, jobs=jobs, errors=_ERRORS)
