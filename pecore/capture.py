"""Capture files through the core: bulk transforms at C speed, reading and writing.

The bulk path never calls Python per packet: the core reads, transforms and
writes every record; Python only sees progress every few thousand packets.
"""
from __future__ import annotations

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


def run_transform(
    in_path: "os.PathLike[str] | str",
    out_path: "os.PathLike[str] | str",
    fn,
    fn_ctx,
    *,
    drop_failed: bool = False,
    progress: Optional[ProgressFn] = None,
    error: type = None,  # type: ignore[assignment]
) -> Summary:
    """Run a core transform (a ``pe_ip_transform_fn`` and its context) over a capture file.

    The output is written to a temporary file beside ``out_path`` and renamed into place only when the
    run completed: an error, Ctrl-C or a signal leaves no half-written file behind.  Failures raise
    ``error`` (a protocol package's CaptureError; default :class:`CaptureError`) naming the file at fault
    (the input, or the output with the system's reason) with the partial summary in ``.summary``.  An
    exception raised by ``progress`` or by a signal handler while the core runs (``KeyboardInterrupt``)
    stops the run within a few thousand packets and is raised again here, with ``.summary`` set.
    """
    error = error or CaptureError
    try:
        if os.path.samefile(in_path, out_path):
            raise error(f"{os.fspath(in_path)}: input and output are the same file", "invalid-argument")
    except FileNotFoundError:
        pass
    if os.path.isdir(out_path):
        raise error(f"{os.fspath(out_path)}: is a directory, not an output file", "capture-write-failed")
    # Only a regular file (or a new one) is written aside and renamed into place: a device such as
    # /dev/null, a FIFO or a terminal is written to directly (renaming over it would replace the device
    # node itself), and through a symbolic link the file it names is the one replaced.
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
    done = False
    try:
        st = lib.pe_capture_transform_file(
            os.fsencode(in_path),
            os.fsencode(tmp),
            fn,
            fn_ctx,
            lib.PE_TRANSFORM_DROP_FAILED if drop_failed else 0,
            lib.pe_py_progress,  # always: it is where a pending Ctrl-C gets its chance to stop the run
            ffi.cast("void *", key),
            c,
        )
        write_errno = ffi.errno
        summary = _summary_from_c(c)
        summary.seconds = time.perf_counter() - t0
        if run.stopped_by is not None:
            run.stopped_by.summary = summary  # type: ignore[attr-defined]
            raise run.stopped_by
        if st == lib.PE_ERR_CAP_WRITE:
            why = os.strerror(write_errno) if write_errno else status_message(st)
            err = error(f"{os.fspath(out_path)}: cannot write the output: {why}", status_name(st))
        elif st != lib.PE_OK:
            err = error(f"{os.fspath(in_path)}: {status_message(st)}", status_name(st))
        else:
            if not special:
                os.chmod(tmp, 0o666 & ~_umask())
                os.replace(tmp, target)
            done = True
            return summary
        err.summary = summary  # type: ignore[attr-defined]
        raise err
    finally:
        _runs.pop(key, None)
        if not done and not special:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


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


def read_capture(path: "os.PathLike[str] | str") -> Iterator[Record]:
    """Yield every packet record of a pcap or pcapng file."""
    reader = ffi.new("pe_capture_reader **")
    st = lib.pe_capture_open_file(os.fsencode(path), reader)
    if st != lib.PE_OK:
        raise CaptureError(f"{os.fspath(path)}: {status_message(st)}", status_name(st))
    r = ffi.gc(reader[0], lib.pe_capture_close)
    rec = ffi.new("pe_capture_record *")
    eof = ffi.new("int *")
    while True:
        st = lib.pe_capture_next(r, rec, eof)
        if st != lib.PE_OK:
            raise CaptureError(f"{os.fspath(path)}: {status_message(st)}", status_name(st))
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
