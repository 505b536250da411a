"""Encrypt and decrypt whole capture files with EESP, at C speed."""
from __future__ import annotations

from typing import Optional, Union

from pecore import face, ops
from pecore.capture import PathLike, ProgressFn, Summary
from pecore.keys import KeyFile
from pecore.util import check_range
from pyeesp.errors import CaptureError, ConfigurationError, raise_eesp
from pyeesp.sa import SA, Receiver

_ERRORS = (CaptureError, ConfigurationError)


def encrypt_capture(
    sa: SA,
    in_path: PathLike,
    out_path: PathLike,
    *,
    sub_sas: int = 1,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    fmt: Optional[str] = None,
    jobs: Optional[int] = None,
) -> Summary:
    """Encrypt every IPv4/IPv6 packet of a pcap/pcapng file (same format out, or ``fmt``
    "pcap"/"pcapng"; "-" is standard input or output; docs/captures.md).

    With ``sub_sas`` > 1, flows are spread over Sub SAs 0..sub_sas-1 by a hash
    of addresses, protocol and ports (the SA needs an SSKDF).  Non-IP frames
    pass unchanged; refused packets are kept (or left out with
    ``drop_failed``) and counted by reason.  Timestamps are kept.  ``jobs``
    threads share the work (default: the CPUs this process may use); the
    output, sequence numbers and summary are those of one thread.
    """
    def capture_sub_sas(tx) -> None:  # type: ignore[no-untyped-def]
        st = ops.eesp_set_capture_sub_sas(tx, check_range("sub_sas", sub_sas, 65536, ConfigurationError, 1))
        if st != ops.OK:
            raise_eesp(st, f"{sub_sas} Sub SAs")

    return face.encrypt_capture(sa._core, in_path, out_path, drop_failed=drop_failed, progress=progress, fmt=fmt,
                                jobs=jobs, errors=_ERRORS, setup=capture_sub_sas)


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
    """Decrypt every EESP packet of a pcap/pcapng file (same format out, or ``fmt``
    "pcap"/"pcapng"; "-" is standard input or output; docs/captures.md).

    ``receiver``: an :class:`SA`, a :class:`Receiver`, or a parsed key file (:func:`pecore.keys.load_key_file`:
    a receiver of all its ``eesp-sa`` lines, :meth:`Receiver.from_key_file`).  ESP, IKE and keepalives on UDP 4500 and other traffic pass unchanged and
    are counted by kind; EESP packets that fail (bad ICV, replay, no SA,
    malformed) are kept (or left out with ``drop_failed``) and counted by
    reason.  Replay windows persist in the receiver across calls.  ``jobs``
    threads share the work (default: the CPUs this process may use); replay
    windows move in packet order, so verdicts are those of one thread.
    """
    if isinstance(receiver, KeyFile):
        receiver = Receiver.from_key_file(receiver)
    rx = receiver._receiver if isinstance(receiver, SA) else receiver
    return face.decrypt_capture(rx._core, in_path, out_path, drop_failed=drop_failed, progress=progress, fmt=fmt,
                                jobs=jobs, errors=_ERRORS)
