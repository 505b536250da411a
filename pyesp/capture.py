"""Encrypt and decrypt whole capture files with ESP, at C speed (pe_esp_capture_encap/decap in the core's
capture loop; docs/captures.md)."""
from __future__ import annotations

from typing import Optional, Union

from pecore import face
from pecore.capture import PathLike, ProgressFn, Summary
from pecore.keys import KeyFile
from pyesp.errors import CaptureError, ConfigurationError
from pyesp.sa import SA, Receiver

_ERRORS = (CaptureError, ConfigurationError)


def encrypt_capture(
    sa: SA,
    in_path: PathLike,
    out_path: PathLike,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    fmt: Optional[str] = None,
    jobs: Optional[int] = None,
) -> Summary:
    """Encrypt every IPv4/IPv6 packet of a pcap/pcapng file (same format out, or ``fmt``
    "pcap"/"pcapng"; "-" is standard input or output; docs/captures.md).

    Non-IP frames pass unchanged; refused packets are kept (or left out with ``drop_failed``) and counted
    by reason.  Timestamps are kept.  ``jobs`` threads share the work (default: the CPUs this process may
    run on); the output and the SA's sequence numbers are those of one thread.
    """
    if not isinstance(sa, SA):
        raise TypeError(f"sa must be a pyesp.SA, not {type(sa).__name__}")
    return face.encrypt_capture(sa._core, in_path, out_path, drop_failed=drop_failed, progress=progress, fmt=fmt,
                                jobs=jobs, errors=_ERRORS)


def decrypt_capture(
    receiver: Union[SA, Receiver, KeyFile],
    in_path: PathLike,
    out_path: PathLike,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    fmt: Optional[str] = None,
    jobs: Optional[int] = None,
) -> Summary:
    """Decrypt every ESP packet of a pcap/pcapng file (same format out, or ``fmt``
    "pcap"/"pcapng"; "-" is standard input or output; docs/captures.md).

    ``receiver``: an :class:`SA`, a :class:`Receiver`, or a parsed key file (:func:`pecore.keys.load_key_file`:
    a receiver of all its ``esp-sa`` lines, :meth:`Receiver.from_key_file`).  Other traffic, EESP, IKE and keepalives on UDP 4500 and valid
    dummy packets pass unchanged and are counted by kind; ESP packets that fail (bad ICV, replay, no SA,
    malformed) are kept (or left out with ``drop_failed``) and counted by reason.  Replay windows persist in
    the receiver across calls.  ``jobs``: as for :func:`encrypt_capture` (replay verdicts and windows as one thread's).
    """
    if isinstance(receiver, KeyFile):
        receiver = Receiver.from_key_file(receiver)
    if not isinstance(receiver, (SA, Receiver)):
        raise TypeError(f"receiver must be a pyesp.SA, pyesp.Receiver or KeyFile, not {type(receiver).__name__}")
    rx = receiver._receiver if isinstance(receiver, SA) else receiver
    return face.decrypt_capture(rx._core, in_path, out_path, drop_failed=drop_failed, progress=progress, fmt=fmt,
                                jobs=jobs, errors=_ERRORS)
