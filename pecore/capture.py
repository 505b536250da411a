"""Capture files through the core: bulk transforms at C speed, reading and writing.

The bulk path never calls Python per packet: the core reads, transforms and
writes every record; Python only sees progress every few thousand packets.
"""
from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, Optional, TextIO, Tuple

from pecore.binding import ffi, lib
from pecore.errors import CoreError, status_message, status_name
from pecore.util import Buffer, packet_buffer

LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229

FORMATS = {"pcap": lib.PE_CAPTURE_PCAP, "pcap-nsec": lib.PE_CAPTURE_PCAP_NSEC, "pcapng": lib.PE_CAPTURE_PCAPNG}


class CaptureError(CoreError, OSError):
    """A capture file could not be read or written, or is not a pcap/pcapng file."""

    category = "io"


ProgressFn = Callable[[int, int, int], Optional[bool]]


@dataclass
class Summary:
    """What a bulk run did: every packet is counted once, as transformed, passed or failed."""

    packets: int = 0
    transformed: int = 0
    passed: int = 0
    failed: int = 0
    failed_by_reason: Dict[str, int] = field(default_factory=dict)
    passed_by_reason: Dict[str, int] = field(default_factory=dict)
    #: transformed packets with a note, e.g. ``udp-zero-checksum``: decrypted, though an endpoint would refuse them
    noted_by_reason: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def format(self, verb: str = "transformed") -> str:
        """A short human report."""
        lines = [
            f"packets read:    {self.packets}",
            f"{verb + ':':<17}{self.transformed}",
            f"passed through:  {self.passed}"
            + ("" if not self.passed_by_reason else " (" + ", ".join(f"{k}: {v}" for k, v in sorted(self.passed_by_reason.items())) + ")"),
            f"failed:          {self.failed}",
        ]
        for reason, n in sorted(self.failed_by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"  {reason}: {n}")
        if self.noted_by_reason:
            lines.append(f"noted:           {sum(self.noted_by_reason.values())} (of the {verb}; an endpoint "
                         "would refuse them)")
            for reason, n in sorted(self.noted_by_reason.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"  {reason}: {n}")
        if self.seconds > 0:
            lines.append(f"time:            {self.seconds:.3f} s ({self.packets / self.seconds:,.0f} packets/s)")
        return "\n".join(lines)


def _summary_from_c(c) -> Summary:
    s = Summary(packets=c.packets, transformed=c.transformed, passed=c.passed, failed=c.failed)
    for i in range(lib.PE_STATUS_COUNT):
        if c.failed_by_status[i]:
            s.failed_by_reason[status_name(i)] = c.failed_by_status[i]
        if c.passed_by_status[i]:
            s.passed_by_reason[status_name(i)] = c.passed_by_status[i]
        if c.noted_by_status[i]:
            s.noted_by_reason[status_name(i)] = c.noted_by_status[i]
    return s


class _Run:
    """One bulk run's Python side: the caller's progress function and whatever stopped the run."""

    def __init__(self, progress: Optional[ProgressFn]) -> None:
        self.progress = progress
        self.stopped_by: Optional[BaseException] = None


_runs: Dict[int, _Run] = {}


def _progress_error(exc_type, exc_value, tb):  # type: ignore[no-untyped-def]
    """cffi's onerror: an exception raised in the callback before its own ``try`` (a signal handler runs at
    the first bytecode) stops the run whose callback it was, and is raised again once the core has returned."""
    ctx = tb.tb_frame.f_locals.get("ctx") if tb is not None else None
    run = _runs.get(int(ffi.cast("uintptr_t", ctx))) if ctx is not None else None
    for r in [run] if run is not None else list(_runs.values()):  # no frame to tell: stop them all
        if r.stopped_by is None:
            r.stopped_by = exc_value
    return 1


@ffi.def_extern(onerror=_progress_error)
def pe_py_progress(ctx, done, total, packets):  # type: ignore[no-untyped-def]
    run = _runs.get(int(ffi.cast("uintptr_t", ctx)))
    if run is None:
        return 0
    try:
        if run.progress is not None and run.progress(done, total, packets) is False:
            return 1
        return 0
    except BaseException as e:  # KeyboardInterrupt, a SIGTERM turned into an exception, a broken callback
        run.stopped_by = e
        return 1


class ProgressBar:
    """A one-line progress bar on a terminal; silent when the stream is not a tty."""

    def __init__(self, stream: TextIO = sys.stderr, label: str = "", min_bytes: int = 8 << 20) -> None:
        self.stream = stream
        self.label = label
        self.min_bytes = min_bytes
        self.enabled = stream.isatty()
        self.shown = False

    def __call__(self, done: int, total: int, packets: int) -> None:
        if not self.enabled or total < self.min_bytes:
            return
        frac = done / total if total else 1.0
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{self.label}[{bar:<30}] {frac * 100:5.1f}% {packets:,} packets")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


def default_jobs() -> int:
    """Threads a capture run uses by default: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def check_jobs(jobs: Optional[int], error: type) -> int:
    """``jobs`` as given (an int >= 1), or the default for None."""
    if jobs is None:
        return default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise error(f"jobs must be a positive integer, not {jobs!r}")
    return jobs


#: The core worker pool's transforms by protocol (pe_py_parallel_ops in pecore/_build.py).
POOL_PSP, POOL_EESP, POOL_ESP = 0, 1, 2


class _Pool:
    """A core worker pool (pe/parallel.h) for one run: ``jobs`` threads, each with its own copy of the SA."""

    def __init__(self, protocol: int, decrypt: bool, ctx, jobs: int, error: type) -> None:
        p = ffi.new("pe_parallel **")
        st = lib.pe_parallel_new(lib.pe_py_parallel_ops(protocol, int(decrypt)), ctx, jobs, p)
        if st != lib.PE_OK:
            raise error(f"cannot start {jobs} threads: {status_message(st)}", status_name(st))
        self.p = p[0]

    def close(self) -> None:
        if self.p is not None:
            lib.pe_parallel_free(self.p)
            self.p = None


def _temp_beside(out_path: "os.PathLike[str] | str", error: type) -> str:
    """A new file next to the output (same directory, so the final rename cannot cross file systems)."""
    out = os.fspath(out_path)
    directory, name = os.path.split(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory)
    except OSError as e:
        raise error(f"{out}: cannot write the output here: {e.strerror}", "capture-write-failed") from None
    os.close(fd)
    return tmp


STDIO = "-"


def _is_stdio(path: "os.PathLike[str] | str") -> bool:
    return isinstance(path, str) and path == STDIO


#: ``-F`` values: the format family written; pcap keeps the input's microsecond or nanosecond resolution.
OUTPUT_FORMATS = ("pcap", "pcapng")


def _format_flags(fmt: Optional[str]) -> int:
    if fmt is None:
        return 0
    if fmt == "pcap":
        return lib.PE_TRANSFORM_TO_PCAP
    if fmt == "pcapng":
        return lib.PE_TRANSFORM_TO_PCAPNG
    raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(OUTPUT_FORMATS)} (or None: the input's)")


def _open_input(in_path: "os.PathLike[str] | str", error: type) -> int:
    try:
        return os.open(in_path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        raise error(f"{os.fspath(in_path)}: {status_message(lib.PE_ERR_CAP_IO)}", status_name(lib.PE_ERR_CAP_IO)) \
            from None


def run_transform(
    in_path: "os.PathLike[str] | str",
    out_path: "os.PathLike[str] | str",
    fn,
    fn_ctx,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    error: type = None,  # type: ignore[assignment]
    fmt: Optional[str] = None,
    grows: bool = False,
    parallel: Optional[Tuple[int, bool, int]] = None,
) -> Summary:
    """Run a core transform (a ``pe_ip_transform_fn`` and its context) over a capture.

    With ``parallel`` = (protocol, decrypt, jobs) (protocol: POOL_PSP, POOL_EESP, POOL_ESP) the core's worker
    pool runs that protocol's transform on ``jobs`` threads instead (the output, summary and SA state are those of one thread; the
    GIL is released meanwhile; ``progress`` is still called on this thread).

    ``"-"`` as ``in_path`` reads standard input, as ``out_path`` writes standard output (nothing else is
    written there).  The core streams: memory does not grow with the capture.  ``fmt`` ("pcap",
    "pcapng") converts; ``None`` keeps the input's format.  ``grows``: the transform lengthens packets
    (encryption), see docs/captures.md on snap lengths.

    An output path is written to a temporary file beside it and renamed into place only when the run
    completed: an error, Ctrl-C or a signal leaves no half-written file behind.  One exception: an input
    that ends inside a record (``capture-truncated``) keeps the output of every whole record before the
    cut, renamed into place, and the error says so (``.output_kept``) with the cut's offset in
    ``.offset``.  Failures raise ``error`` (a protocol package's CaptureError; default
    :class:`CaptureError`) naming the file at fault (the input, or the output with the system's reason)
    with the partial summary in ``.summary``.  A reader of standard output that goes away raises
    ``BrokenPipeError``.  An exception raised by ``progress`` or by a signal handler while the core runs
    (``KeyboardInterrupt``) stops the run within a few thousand packets and is raised again here, with
    ``.summary`` set.
    """
    error = error or CaptureError
    flags = _format_flags(fmt) | (lib.PE_TRANSFORM_DROP_FAILED if drop_failed else 0) \
        | (lib.PE_TRANSFORM_GROWS if grows else 0)
    in_std, out_std = _is_stdio(in_path), _is_stdio(out_path)
    in_name = "standard input" if in_std else os.fspath(in_path)
    out_name = "standard output" if out_std else os.fspath(out_path)
    if not in_std and not out_std:
        try:
            if os.path.samefile(in_path, out_path):
                raise error(f"{os.fspath(in_path)}: input and output are the same file", "invalid-argument")
        except FileNotFoundError:
            pass
    if not out_std and os.path.isdir(out_path):
        raise error(f"{os.fspath(out_path)}: is a directory, not an output file", "capture-write-failed")
    # Only a regular file (or a new one) is written aside and renamed into place: a device such as
    # /dev/null, a FIFO or a terminal is written to directly (renaming over it would replace the device
    # node itself), and through a symbolic link the file it names is the one replaced.
    special = out_std
    target = tmp = ""
    if not out_std:
        target = os.path.realpath(out_path) if os.path.islink(out_path) else os.fspath(out_path)
        try:
            special = not stat.S_ISREG(os.stat(target).st_mode)
        except FileNotFoundError:
            special = False
        tmp = os.fspath(out_path) if special else _temp_beside(target, error)
    c = ffi.new("pe_capture_summary *")
    run = _Run(progress)
    key = id(run)
    _runs[key] = run
    t0 = time.perf_counter()
    keep = False
    in_fd = out_fd = -1
    pool = None
    try:
        if parallel is not None:
            pool = _Pool(parallel[0], parallel[1], fn_ctx, parallel[2], error)
        if in_std or out_std:
            in_fd = 0 if in_std else _open_input(in_path, error)
            if out_std:
                sys.stdout.flush()  # whatever Python buffered goes first; the core writes the descriptor
                out_fd = 1
            else:
                try:
                    out_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o666)
                except OSError as e:
                    raise error(f"{out_name}: cannot write the output: {e.strerror}", "capture-write-failed") \
                        from None
            if pool is not None:
                st = lib.pe_capture_transform_fd_parallel(in_fd, out_fd, pool.p, flags, lib.pe_py_progress,
                                                          ffi.cast("void *", key), c)
            else:
                st = lib.pe_capture_transform_fd(in_fd, out_fd, fn, fn_ctx, flags, lib.pe_py_progress,
                                                 ffi.cast("void *", key), c)
        elif pool is not None:
            st = lib.pe_capture_transform_file_parallel(os.fsencode(in_path), os.fsencode(tmp), pool.p, flags,
                                                        lib.pe_py_progress, ffi.cast("void *", key), c)
        else:
            st = lib.pe_capture_transform_file(
                os.fsencode(in_path),
                os.fsencode(tmp),
                fn,
                fn_ctx,
                flags,
                lib.pe_py_progress,  # always: it is where a pending Ctrl-C gets its chance to stop the run
                ffi.cast("void *", key),
                c,
            )
        write_errno = ffi.errno
        summary = _summary_from_c(c)
        summary.seconds = time.perf_counter() - t0
        if run.stopped_by is not None:
            run.stopped_by.summary = summary  # type: ignore[attr-defined]
            run.stopped_by.to_stdout = out_std  # type: ignore[attr-defined]  # what was written there stays
            raise run.stopped_by
        if st == lib.PE_ERR_CAP_WRITE and out_std and write_errno == errno.EPIPE:
            raise BrokenPipeError(errno.EPIPE, "standard output closed by its reader")
        if st == lib.PE_ERR_CAP_WRITE:
            why = os.strerror(write_errno) if write_errno else status_message(st)
            err = error(f"{out_name}: cannot write the output: {why}", status_name(st))
        elif st != lib.PE_OK and (st != lib.PE_ERR_CAP_TRUNCATED or c.offset == 0):
            # (a file header cut short is no capture at all: nothing to keep)
            err = error(f"{in_name}: {status_message(st)}", status_name(st))
        else:
            # A cut input keeps what was written: every record in it is whole (docs/captures.md).
            if not special:
                if out_fd >= 0:
                    os.close(out_fd)
                    out_fd = -1
                os.chmod(tmp, 0o666 & ~_umask())
                os.replace(tmp, target)
            keep = True
            if st == lib.PE_OK:
                return summary
            err = error(f"{in_name}: {status_message(st)} (at octet {c.offset:,}; the {summary.packets:,} "
                        f"packets before it were processed)", status_name(st))
            err.output_kept = True  # type: ignore[attr-defined]
        err.summary = summary  # type: ignore[attr-defined]
        err.offset = c.offset  # type: ignore[attr-defined]
        raise err
    finally:
        if pool is not None:
            pool.close()
        _runs.pop(key, None)
        if in_fd > 0:
            os.close(in_fd)
        if out_fd > 1:
            os.close(out_fd)
        if not keep and not special:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


#: A capture's place: a path, or ``"-"`` for standard input or output (the faces' annotations).
PathLike = "os.PathLike[str] | str"


def face_transform(
    fn,
    ctx,
    lock,
    in_path: "os.PathLike[str] | str",
    out_path: "os.PathLike[str] | str",
    *,
    drop_failed: bool,
    progress: Optional[ProgressFn],
    fmt: Optional[str],
    jobs: Optional[int],
    grows: bool,
    errors: Tuple[type, type],
    pool: Optional[int],
    bursts: bool = False,
    setup: Optional[Callable[[], None]] = None,
) -> Summary:
    """The body of every face's ``encrypt_capture``/``decrypt_capture``, once its argument is checked: the core
    transform ``fn`` over ``ctx`` (an SA's or receiver's C object) under that object's ``lock``.

    ``errors`` = (the face's CaptureError, its ConfigurationError): ``jobs`` is checked the same way for
    every protocol.  ``pool`` picks the core worker pool's ops (pe/parallel.h: POOL_PSP, POOL_EESP,
    POOL_ESP) when ``jobs`` > 1, or for one job too with ``bursts`` (a sender whose cryptography gains
    from several packets at once: the pool's work step takes them so), or None to run on the calling thread
    (a PSP sender with a Python ``udp_sport``).  ``setup`` runs under the lock first (EESP's capture Sub SAs).
    """
    capture_error, config_error = errors
    jobs = check_jobs(jobs, config_error)
    with lock:
        if setup is not None:
            setup()
        return run_transform(in_path, out_path, fn, ctx, drop_failed=drop_failed, progress=progress,
                             error=capture_error, fmt=fmt, grows=grows,
                             parallel=None if pool is None or (jobs == 1 and not bursts) else (pool, not grows, jobs))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class Record:
    """One packet record of a capture."""

    linktype: int
    ts_sec: int
    ts_nsec: int
    data: bytes
    origlen: int
    interface_id: int = 0

    @property
    def timestamp(self) -> float:
        return self.ts_sec + self.ts_nsec / 1e9

    def ip_packet(self) -> Optional[bytes]:
        """The IP packet inside the frame, or None when the frame carries no IP."""
        off = ffi.new("size_t *")
        if lib.pe_frame_ip_offset(self.linktype, self.data, len(self.data), off) != lib.PE_OK:
            return None
        return self.data[off[0] :]

    def l2_header(self) -> bytes:
        off = ffi.new("size_t *")
        if lib.pe_frame_ip_offset(self.linktype, self.data, len(self.data), off) != lib.PE_OK:
            return b""
        return self.data[: off[0]]


#: The first four octets of a pcap (both byte orders, usec and nsec magic) or a pcapng file.
CAPTURE_MAGICS = (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x0a\x0d\x0d\x0a")


def looks_like_capture(data: bytes) -> bool:
    """Whether data starts as a pcap or pcapng file does (a quick test, not a check)."""
    return bytes(data[:4]) in CAPTURE_MAGICS


def read_capture(path: "os.PathLike[str] | str") -> Iterator[Record]:
    """Yield every packet record of a pcap or pcapng file ("-": standard input), read as a stream.

    A capture that ends inside a record raises :class:`CaptureError` ``capture-truncated`` after the
    records before it, with the cut's offset in ``.offset``.
    """
    reader = ffi.new("pe_capture_reader **")
    name = "standard input" if _is_stdio(path) else os.fspath(path)
    st = lib.pe_capture_open_fd(0, reader) if _is_stdio(path) else lib.pe_capture_open_file(os.fsencode(path), reader)
    yield from _records(st, reader, name, None)  # a generator: errors come at the first next(), as ever


def read_capture_bytes(data: bytes, name: str = "capture") -> Iterator[Record]:
    """Yield every packet record of a pcap or pcapng file held in memory (``name`` for messages)."""
    buf = ffi.from_buffer("uint8_t[]", data)
    reader = ffi.new("pe_capture_reader **")
    yield from _records(lib.pe_capture_open_mem(buf, len(data), reader), reader, name, buf)


def _records(st: int, reader, name: str, keep) -> Iterator[Record]:  # type: ignore[no-untyped-def]
    if st != lib.PE_OK:
        raise CaptureError(f"{name}: {status_message(st)}", status_name(st))
    return _iterate(ffi.gc(reader[0], lib.pe_capture_close), name, keep)


def _iterate(r, name: str, keep) -> Iterator[Record]:  # type: ignore[no-untyped-def]
    # `keep`: the memory a memory reader wraps, alive as long as the records are read
    rec = ffi.new("pe_capture_record *")
    eof = ffi.new("int *")
    while True:
        st = lib.pe_capture_next(r, rec, eof)
        if st != lib.PE_OK:
            offset = lib.pe_capture_reader_offset(r)
            at = f" (at octet {offset:,})" if st == lib.PE_ERR_CAP_TRUNCATED else ""
            err = CaptureError(f"{name}: {status_message(st)}{at}", status_name(st))
            err.offset = offset  # type: ignore[attr-defined]
            raise err
        if eof[0]:
            return
        yield Record(
            linktype=rec.linktype,
            ts_sec=rec.ts_sec,
            ts_nsec=rec.ts_nsec,
            data=bytes(ffi.buffer(rec.data, rec.caplen)),
            origlen=rec.origlen,
            interface_id=rec.interface_id,
        )


class CaptureWriter:
    """Write frames of one link type to a new pcap or pcapng file."""

    def __init__(
        self, path: "os.PathLike[str] | str", linktype: int = LINKTYPE_ETHERNET, fmt: str = "pcap", snaplen: int = 262144
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown capture format {fmt!r}; one of {', '.join(FORMATS)}")
        w = ffi.new("pe_capture_writer **")
        st = lib.pe_capture_writer_open(os.fsencode(path), FORMATS[fmt], linktype, snaplen, w)
        if st != lib.PE_OK:
            raise CaptureError(f"{os.fspath(path)}: {status_message(st)}", status_name(st))
        self._w = w[0]
        self.path = path

    def write(self, data: Buffer, ts: Tuple[int, int] = (0, 0)) -> None:
        if self._w is None:
            raise ValueError("writer is closed")
        buf = packet_buffer(data, "data")
        st = lib.pe_capture_write(self._w, ts[0], ts[1], buf, len(buf))
        if st != lib.PE_OK:
            raise CaptureError(f"{os.fspath(self.path)}: {status_message(st)}", status_name(st))

    def close(self) -> None:
        if self._w is not None:
            w, self._w = self._w, None
            st = lib.pe_capture_writer_close(w)
            if st != lib.PE_OK:
                raise CaptureError(f"{os.fspath(self.path)}: {status_message(st)}", status_name(st))

    def __enter__(self) -> "CaptureWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
