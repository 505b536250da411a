"""Encrypt and decrypt whole capture files with PSP, at C speed."""
from __future__ import annotations

from typing import Optional, Union

from pecore.capture import PathLike, ProgressFn, Summary
from pecore.keys import KeyFile
from pypsp.crypto import Decryptor, Encryptor


def encrypt_capture(
    encryptor: Encryptor,
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
    return encryptor.encrypt_capture(in_path, out_path, drop_failed=drop_failed, progress=progress, fmt=fmt, jobs=jobs)


def decrypt_capture(
    decryptor: Union[Decryptor, KeyFile],
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

    ``decryptor``: a :class:`~pypsp.Decryptor`, or a parsed key file (:func:`pecore.keys.load_key_file`: a
    decryptor of its PSP keys, :meth:`Decryptor.from_key_file`).  Non-PSP packets are copied unchanged; PSP packets that fail (bad ICV, no
    key, malformed) are copied unchanged and counted by reason, or left out
    with ``drop_failed``.  Timestamps are kept.  ``jobs`` threads share the
    work (default: the CPUs this process may use), with one thread's output.
    """
    if isinstance(decryptor, KeyFile):
        decryptor = Decryptor.from_key_file(decryptor)
    return decryptor.decrypt_capture(in_path, out_path, drop_failed=drop_failed, progress=progress, fmt=fmt, jobs=jobs)
