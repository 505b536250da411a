"""Encrypt and decrypt whole capture files with PSP, at C speed."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pecore.binding import lib
from pecore.capture import ProgressFn, Summary, check_jobs, run_transform
from pypsp.errors import CaptureError, ConfigurationError

if TYPE_CHECKING:  # annotations only: pypsp.crypto imports this module for Encryptor.encrypt_capture
    from pypsp.crypto import Decryptor, Encryptor

PathLike = "os.PathLike[str] | str"


def _run(fn, ctx, in_path, out_path, drop_failed: bool, progress: Optional[ProgressFn], fmt: Optional[str] = None,
         grows: bool = False, jobs: int = 1) -> Summary:
    # With jobs > 1 the core's pool runs this protocol's transform in fn's direction (encryption grows packets).
    return run_transform(in_path, out_path, fn, ctx, drop_failed=drop_failed, progress=progress, error=CaptureError,
                         fmt=fmt, grows=grows, parallel=(False, not grows, jobs))


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
    jobs = check_jobs(jobs, ConfigurationError)
    if getattr(encryptor, "_sport_handle", None) is not None:
        jobs = 1
    with encryptor._lock:
        return _run(lib.pe_psp_capture_encap, encryptor._tx, in_path, out_path, drop_failed, progress, fmt, grows=True,
                    jobs=jobs)


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
    jobs = check_jobs(jobs, ConfigurationError)
    with decryptor._lock:
        return _run(lib.pe_psp_capture_decap, decryptor._rx, in_path, out_path, drop_failed, progress, fmt, jobs=jobs)
