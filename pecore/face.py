"""The one sender, receiver and capture machinery of the protocol faces (pypsp, pyeesp, pyesp).

A face says what its SA settings mean and which exception a status raises; everything that meets the core is
here, once: the C object and its lock, the output buffers, the single calls, the batches through the core's
batch loop and the capture runs.  What differs between PSP, EESP and ESP is a record of calls into the core, an
:class:`Ops` per protocol (:mod:`pecore.ops`), in the way Linux's ``xfrm_type`` serves each IPsec protocol.

Calls on one object are serialised: cffi releases the GIL around every core call, and a read (the next IV) could
meet another thread's growth of a key table (docs/security.md).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Tuple, Type, Union

from pecore.binding import ffi, lib
from pecore.capture import PathLike, ProgressFn, Summary, face_transform
from pecore.errors import CoreError
from pecore.util import Buffer, decap_batch, decap_error, pin, run_batch, sent_or_raise

#: A face's raise for a refused status (``raise_psp``, ``raise_eesp``, ``raise_esp``, or a configuration error).
Refuse = Callable[[int], NoReturn]
#: A face's status name → exception class (``error_class`` of its errors module).
ErrorClass = Callable[[str], Type[CoreError]]
#: Makes a face's ``Decrypted`` from ``packet=`` and the fields its protocol's ``Ops.fields`` read.
Result = Callable[..., Any]


@dataclass(frozen=True)
class Ops:
    """One protocol's calls into the core, in the shape the machinery calls them.

    ``tx_*``/``rx_*`` name the sender's and receiver's C types: the object, its config struct and the
    config's init, its constructor and destructor.  The per-packet calls take one convention for every protocol, with ``extra``
    the protocol's own arguments (EESP's Sub SA and packet options, the destination of an ``open``):

    - ``encap(tx, pkt, len, extra, out, cap, out_len)`` and ``seal(tx, payload, len, next_header, extra, out,
      cap, out_len)``;
    - ``decap(rx, pkt, len, out, cap, out_len, info)`` and ``open(rx, bare, len, extra, out, cap, out_len,
      info)``, ``info`` a new ``info_type`` per receiver, which ``fields`` turns into the Decrypted's fields
      and ``icv_valid`` reads for a policy drop;
    - ``next_counter(tx, extra)`` (None once spent) and ``set_next_counter(tx, value, extra)``;
    - ``batch_encap(tx, extra)``: the core transform and its context that ``encrypt_batch`` runs;
    - ``decrypt_batch(rx, info, packets, result, error_class)``;
    - ``capture_encap``/``capture_decap``: the core's ``pe_ip_transform_fn`` of the capture loop, ``pool`` its
      worker pool's protocol (pecore.capture.POOL_*);
    - ``bursts(tx)``: where the protocol has them, the core's ``pe_ip_burst_fn`` over ``batch_encap``'s
      context when this sender gains from bursts (several packets' cryptography at once), else None; with
      one, ``encrypt_batch`` runs it (pe_batch_burst) and a capture of one job runs on the worker pool, whose
      work step then takes bursts too;
    - ``rx_bursts(rx)``: whether this receiver gains from bursts, so that a capture of one job runs on the pool.
    """

    name: str
    tx_type: str
    tx_config: str
    tx_config_init: Any
    tx_new: Any
    tx_free: Any
    rx_config: str
    rx_config_init: Any
    rx_new: Any
    rx_free: Any
    rx_type: str
    info_type: str
    out_len: int
    max_overhead: int
    encap: Callable[..., int]
    seal: Callable[..., int]
    decap: Callable[..., int]
    open: Callable[..., int]
    fields: Callable[[Any], Dict[str, Any]]
    icv_valid: Callable[[Any], bool]
    next_counter: Callable[..., Optional[int]]
    set_next_counter: Callable[..., int]
    batch_encap: Callable[..., Tuple[Any, Any]]
    decrypt_batch: Callable[..., list]
    capture_encap: Any
    capture_decap: Any
    pool: int
    bursts: Optional[Callable[[Any], Any]] = None
    rx_bursts: Optional[Callable[[Any], bool]] = None


def c_struct(ctype: str, init: Any, fields: Mapping[str, Any], keep: list):
    """A new ``ctype`` config, set up by the core's ``init`` and then given ``fields`` in order: bytes are pointed
    to (and kept alive in ``keep`` until the core has copied them), None is NULL, a list fills the start of an
    array field, a dict {index: value} sets elements of one; anything else is assigned as it is."""
    c = ffi.new(ctype + " *")
    init(c)
    for name, value in fields.items():
        if isinstance(value, (bytes, bytearray)) or value is None:
            setattr(c, name, pin(keep, None if value is None else bytes(value)))
        elif isinstance(value, list):
            getattr(c, name)[0:len(value)] = value
        elif isinstance(value, dict):
            arr = getattr(c, name)
            for i, v in value.items():
                arr[i] = v
        else:
            setattr(c, name, value)
    return c


def _new(config_type: str, config_init: Any, new: Any, free: Any, obj_type: str, fields: Mapping[str, Any],
         refuse: Refuse):
    keep: list = []  # buffers the config points to, until the core has copied them
    cfg = c_struct(config_type, config_init, fields, keep)
    out = ffi.new(obj_type + " **")
    st = new(cfg, out)
    if st != lib.PE_OK:
        refuse(st)
    return ffi.gc(out[0], free)


class _Endpoint:
    """A core object of one face (``self.c``), its lock and its output buffer."""

    def __init__(self, ops: Ops, c, raise_status: Refuse, error_class: ErrorClass) -> None:
        self.ops = ops
        self.c = c
        self._raise = raise_status
        self._error_class = error_class
        self._out = ffi.new("uint8_t[]", ops.out_len)
        self._out_len = ffi.new("size_t *")
        self.lock = threading.Lock()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(c, *args)`` under the lock: one of the protocol's other calls (``pecore.ops``) on this object."""
        with self.lock:
            return fn(self.c, *args)

    def _output(self, out=None) -> bytes:  # type: ignore[no-untyped-def]
        return ffi.buffer(self._out if out is None else out, self._out_len[0])[:]


class Sender(_Endpoint):
    """A sending SA's core object: ``fields`` set its ``Ops.tx_config``; a refused config raises ``refuse(st)``,
    a refused packet ``raise_status(st)``.  ``hold``: what the core keeps pointers to (a callback)."""

    def __init__(self, ops: Ops, fields: Mapping[str, Any], *, refuse: Refuse, raise_status: Refuse,
                 error_class: ErrorClass, hold: Sequence[Any] = (), serial: bool = False) -> None:
        super().__init__(ops, _new(ops.tx_config, ops.tx_config_init, ops.tx_new, ops.tx_free,
                                   ops.tx_type, fields, refuse), raise_status, error_class)
        self._hold = tuple(hold)
        #: captures run on the calling thread (a Python callback must see the packets in order)
        self.serial = serial

    def encap(self, buf, *extra: Any) -> bytes:  # type: ignore[no-untyped-def]
        """Encapsulate one IP packet (``buf``: the C view :func:`pecore.util.packet_buffer` made, so that a face
        checks its arguments in its own order); returns the outer one."""
        with self.lock:
            st = self.ops.encap(self.c, buf, len(buf), extra, self._out, self.ops.out_len, self._out_len)
            if st != lib.PE_OK:
                self._raise(st)
            return self._output()

    def seal(self, buf, next_header: int, *extra: Any) -> bytes:  # type: ignore[no-untyped-def]
        """The protocol's octets alone around the payload in ``buf`` (no IP or UDP header)."""
        cap = len(buf) + self.ops.max_overhead
        out = ffi.new("uint8_t[]", cap)
        with self.lock:
            st = self.ops.seal(self.c, buf, len(buf), next_header, extra, out, cap, self._out_len)
            if st != lib.PE_OK:
                self._raise(st)
            return self._output(out)

    def next_counter(self, *extra: Any) -> Optional[int]:
        """The IV (or sequence number) the next packet carries; None once spent."""
        return self.call(self.ops.next_counter, extra)

    def set_next_counter(self, value: int, *extra: Any) -> int:
        """Move the counter (forward only); the core's status, for the face to explain."""
        return self.call(self.ops.set_next_counter, value, extra)

    def burst(self) -> Any:
        """The core's burst transform for this sender, or None where bursts gain nothing (``Ops.bursts``)."""
        return self.ops.bursts(self.c) if self.ops.bursts is not None else None

    def encap_batch(self, packets: Iterable[Buffer], *extra: Any) -> List[bytes]:
        """Encrypt many packets in one core call (pe_batch_transform_until_failure): every result, or the first
        failure raised with the results before it in ``err.results`` (the packets after it spent nothing)."""
        pkts = list(packets)
        with self.lock:
            fn, ctx = self.ops.batch_encap(self.c, extra)
            results = run_batch(fn, ctx, pkts, self.ops.max_overhead, stop_at_failure=True, burst=self.burst())
        return sent_or_raise(results, self._error_class)


class Receiver(_Endpoint):
    """A receiving endpoint's core object: ``fields`` set its ``Ops.rx_config``; ``result`` makes the face's
    Decrypted of ``packet=`` and the protocol's fields."""

    def __init__(self, ops: Ops, fields: Mapping[str, Any], *, refuse: Refuse, error_class: ErrorClass,
                 result: Result) -> None:
        super().__init__(ops, _new(ops.rx_config, ops.rx_config_init, ops.rx_new, ops.rx_free,
                                   ops.rx_type, fields, refuse), refuse, error_class)
        self._info = ffi.new(ops.info_type + " *")
        self._result = result

    def _refused(self, st: int) -> NoReturn:
        raise decap_error(st, self._error_class, icv_valid=self.ops.icv_valid(self._info))

    def decap(self, buf) -> Any:  # type: ignore[no-untyped-def]
        """Verify (and replay-check) and decrypt one outer IP packet (``buf`` as for :meth:`Sender.encap`)."""
        with self.lock:
            st = self.ops.decap(self.c, buf, len(buf), self._out, self.ops.out_len, self._out_len, self._info)
            if st != lib.PE_OK:
                self._refused(st)
            return self._result(packet=self._output(), **self.ops.fields(self._info))

    def open(self, buf, *extra: Any) -> Any:  # type: ignore[no-untyped-def]
        """Open the protocol's octets alone (``buf`` as for :meth:`Sender.encap`)."""
        with self.lock:
            st = self.ops.open(self.c, buf, len(buf), extra, self._out, self.ops.out_len, self._out_len,
                               self._info)
            if st != lib.PE_OK:
                self._refused(st)
            return self._result(packet=self._output(), **self.ops.fields(self._info))

    def decap_batch(self, packets: Iterable[Buffer]) -> List[Union[Any, CoreError]]:
        """Decrypt many packets in order in one core call; a failed packet's slot holds its exception."""
        pkts = list(packets)
        with self.lock:
            return self.ops.decrypt_batch(self.c, self._info, pkts, self._result, self._error_class)


def receiver_batch(decap: Callable[..., int], fields: Callable[[Any], Dict[str, Any]]) -> Callable[..., list]:
    """``Ops.decrypt_batch`` for a receiver whose decap fills a per-packet info (ESP, EESP):
    :func:`pecore.util.decap_batch`, the core's batch loop over a thin callback into ``decap``."""

    def batch(rx, info, packets, result, error_class):  # type: ignore[no-untyped-def]
        return decap_batch(decap, rx, info, fields, packets, result, error_class)

    return batch


def encrypt_capture(sender: Sender, in_path: PathLike, out_path: PathLike, *, errors: Tuple[type, type],
                    drop_failed: bool = False, progress: Optional[ProgressFn] = None, fmt: Optional[str] = None,
                    jobs: Optional[int] = None, setup: Optional[Callable[[Any], None]] = None) -> Summary:
    """A face's ``encrypt_capture``: the protocol's capture transform over the sender, under its lock, on the
    core's worker pool unless the sender is ``serial`` (see :func:`pecore.capture.face_transform`).  ``setup``
    is called with the sender's core object under the lock first (EESP's capture Sub SAs)."""
    return face_transform(sender.ops.capture_encap, sender.c, sender.lock, in_path, out_path,
                          drop_failed=drop_failed, progress=progress, fmt=fmt, jobs=jobs, grows=True, errors=errors,
                          pool=None if sender.serial else sender.ops.pool, bursts=sender.burst() is not None,
                          setup=None if setup is None else lambda: setup(sender.c))


def decrypt_capture(receiver: Receiver, in_path: PathLike, out_path: PathLike, *, errors: Tuple[type, type],
                    drop_failed: bool = False, progress: Optional[ProgressFn] = None, fmt: Optional[str] = None,
                    jobs: Optional[int] = None) -> Summary:
    """A face's ``decrypt_capture``: the protocol's capture transform over the receiver, under its lock."""
    bursts = receiver.ops.rx_bursts is not None and receiver.call(receiver.ops.rx_bursts)
    return face_transform(receiver.ops.capture_decap, receiver.c, receiver.lock, in_path, out_path,
                          drop_failed=drop_failed, progress=progress, fmt=fmt, jobs=jobs, grows=False, errors=errors,
                          pool=receiver.ops.pool, bursts=bool(bursts))
