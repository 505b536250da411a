"""Encrypt and decrypt whole capture files with PSP, at C speed."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pecore.binding import lib
from pecore.capture import ProgressFn, Summary, run_transform
from pypsp.errors import CaptureError

if TYPE_CHECKING:  # annotations only: pypsp.crypto imports this module for Encryptor.encrypt_capture
    from pypsp.crypto import Decryptor, Encryptor

PathLike = "os.PathLike[str] | str"


def _run(fn, ctx, in_path, out_path, drop_failed: bool, progress: Optional[ProgressFn]) -> Summary:
    return run_transform(in_path, out_path, fn, ctx, drop_failed=drop_failed, progress=progress, error=CaptureError)


def encrypt_capture(
    encryptor: "Encryptor",
    in_path: PathLike,
    out_path: PathLike,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
) -> Summary:
    """Encrypt every IPv4/IPv6 packet of a pcap/pcapng file into ``out_path`` (same format).

    Non-IP frames are copied unchanged; packets the SA refuses (e.g. fragments
    in transport mode) are copied unchanged and counted by reason, or left out
    with ``drop_failed``.  Timestamps are kept.
    """
    with encryptor._lock:
        return _run(lib.pe_psp_capture_encap, encryptor._tx, in_path, out_path, drop_failed, progress)


def decrypt_capture(
    decryptor: "Decryptor",
    in_path: PathLike,
    out_path: PathLike,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
) -> Summary:
    """Decrypt every PSP packet of a pcap/pcapng file into ``out_path`` (same format).

    Non-PSP packets are copied unchanged; PSP packets that fail (bad ICV, no
    key, malformed) are copied unchanged and counted by reason, or left out
    with ``drop_failed``.  Timestamps are kept.
    """
    with decryptor._lock:
        return _run(lib.pe_psp_capture_decap, decryptor._rx, in_path, out_path, drop_failed, progress)
