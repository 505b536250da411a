"""Argument handling shared by the protocol packages: keys, ranges, C buffers, batches."""
from __future__ import annotations

import ipaddress
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, TypeVar, Union

from pecore.binding import ffi, lib
from pecore.errors import CoreError, status_message, status_name

Key = Union[bytes, bytearray, memoryview, str]
#: What calls that take packet octets accept: any contiguous bytes-like object.
Buffer = Union[bytes, bytearray, memoryview]


def aead_alg_names() -> Dict[int, str]:
    """The core's AEADs (pe_aead_alg) by value: PE_AEAD_AES_GCM is "aes-gcm", the rule by which
    dissectors/lua/build_scripts.py names them too, so a new algorithm is named nowhere else."""
    elements = ffi.typeof("pe_aead_alg").elements
    return {v: n[len("PE_AEAD_"):].lower().replace("_", "-") for v, n in sorted(elements.items())}


def key_bytes(key: Key, what: str, error: Type[Exception]) -> bytes:
    """Keys are bytes or hex strings (with optional 0x, spaces or colons)."""
    if isinstance(key, str):
        text = key.strip().lower().removeprefix("0x").replace(":", "").replace(" ", "")
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise error(f"{what} is not valid hex") from None
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise error(f"{what} must be bytes or a hex string, not {type(key).__name__}")


def require_extra(module: str, extra: str, for_what: str) -> None:
    """Import ``module`` or fail with the pip extra that installs it (not a bare ModuleNotFoundError)."""
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        raise ModuleNotFoundError(f"{for_what} needs {module}: pip install 'psp-eesp[{extra}]' (or pip install {module})",
                                  name=module) from None


def packet_buffer(data: object, name: str):
    """A C view (``uint8_t[]``, no copy) of any bytes-like object: bytes, bytearray, memoryview, array, mmap.

    Anything else (str, None, int, a non-contiguous view) is a TypeError that names the parameter, so the
    caller is not left with cffi's own message about C types.
    """
    if isinstance(data, str) or data is None:
        raise TypeError(f"{name} must be a bytes-like object (bytes, bytearray, memoryview), not {type(data).__name__}")
    try:
        return ffi.from_buffer("uint8_t[]", data)
    except (TypeError, ValueError, BufferError) as e:
        raise TypeError(f"{name} must be a contiguous bytes-like object (bytes, bytearray, memoryview), "
                        f"not {type(data).__name__}: {e}") from None


def check_range(name: str, value: int, top: int, error: Type[Exception], bottom: int = 0) -> int:
    """An int (not a bool) within bottom..top, or `error`."""
    if isinstance(value, bool) or not isinstance(value, int) or not bottom <= value <= top:
        raise error(f"{name} must be an integer in {bottom}..{top}, not {value!r}")
    return value


def udp_checksum_mode(value: object, error: Type[Exception]) -> int:
    """A receiver's ``check_udp_checksum`` as the core's PE_UDP_CHECKSUM_*: True (an endpoint's: refuse a wrong
    one, and 0 over IPv6 outside RFC 6936 mode), ``"note"`` (a reader of captures: decrypt anyway, say so in
    ``Decrypted.udp_checksum``), False (do not look)."""
    if value is True:
        return int(lib.PE_UDP_CHECKSUM_VERIFY)
    if value is False:
        return int(lib.PE_UDP_CHECKSUM_IGNORE)
    if value == "note":
        return int(lib.PE_UDP_CHECKSUM_NOTE)
    raise error(f"check_udp_checksum must be True, False or 'note', not {value!r}")


def udp_checksum_note(info) -> Optional[str]:  # type: ignore[no-untyped-def]
    """What a receiver in "note" mode found wrong with a decrypted packet's UDP checksum (a status name)."""
    from pecore.errors import status_name
    return status_name(info.udp_checksum) if info.udp_checksum != lib.PE_OK else None


def ip_address(text: Optional[str], error: Type[Exception], what: str = "dst"):  # type: ignore[no-untyped-def]
    """An SA's or a call's address setting (None stays None), or ``error`` naming the setting."""
    if text is None:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise error(f"{what} is not an IPv4 or IPv6 address: {text!r}") from None


def destination_fields(dst: Optional[str], error: Type[Exception]) -> Dict[str, Any]:
    """An SA config's ``dst`` as its fields (pe_esp_sa_config, pe_eesp_sa_config: ``dst_family`` and the start of
    ``dst``, for pecore.face.c_struct): the SA serves that destination only, so one SPI can serve several; None
    leaves it unbound."""
    addr = ip_address(dst, error)
    if addr is None:
        return {}
    return {"dst_family": addr.version, "dst": list(addr.packed)}


def open_destination(ip_version: int, dst: Optional[str], error: Type[Exception]):  # type: ignore[no-untyped-def]
    """``open()``'s outer destination as the core takes it: NULL, or the address octets of ``ip_version``."""
    if ip_version not in (4, 6):
        raise error(f"ip_version must be 4 or 6, not {ip_version!r}")
    addr = ip_address(dst, error)
    if addr is None:
        return ffi.NULL
    if addr.version != ip_version:
        raise error(f"dst {dst} is not an IPv{ip_version} address")
    return ffi.new("uint8_t[]", addr.packed)


def config_error(st: int, error: Type[CoreError], context: str = "") -> CoreError:
    """A refused SA configuration is the caller's setting, whatever layer noticed it: the face's
    ConfigurationError (``error``) with the core's status."""
    return error(f"{context}{status_message(st)}", status_name(st))


def check_sa_added(st: int, spi: int, error: Type[CoreError]) -> None:
    """The status of adding an SA to a receiver (pe_esp_rx_add_sa, pe_eesp_rx_add_sa): a refusal is the
    caller's setting, named by the SA's SPI."""
    if st == lib.PE_OK:
        return
    if status_name(st) == "invalid-argument":
        raise error(f"SA {spi:#010x}: a second SA with this SPI and destination", "invalid-argument")
    raise config_error(st, error, f"SA {spi:#010x}: ")


def pin(keep: list, data: Optional[bytes]):
    """A C pointer to ``data`` (NULL for None), kept alive by ``keep`` while the core copies it."""
    if data is None:
        return ffi.NULL
    buf = ffi.from_buffer(data)
    keep.append(buf)
    return buf


_alloc_uncleared = ffi.new_allocator(should_clear_after_alloc=False)


def run_batch(fn, ctx, packets: Sequence[bytes], extra: int, keep: Optional[list] = None,
              stop_at_failure: bool = False, burst=None) -> List[Tuple[int, bytes]]:  # type: ignore[no-untyped-def]
    """Run a core transform over many packets in one call: (status, result) per packet.

    The packets are joined into one input buffer; pass ``keep`` to hold it
    alive when the transform leaves pointers into it (e.g. header fields).
    With ``stop_at_failure`` the packets after the first failure are not
    processed at all (status ``batch-stopped``): senders spend no IV on them.
    """
    n = len(packets)
    if n == 0:
        return []
    try:
        blob = b"".join(packets)  # one copy, which the batch needs anyway: the packets back to back
    except TypeError:  # str, None, int, a non-contiguous view: say which packet, as single calls do
        for i, p in enumerate(packets):
            packet_buffer(p, f"packets[{i}]")
        raise
    if keep is not None:
        keep.append(blob)
    in_off = ffi.new("size_t[]", n)
    in_len = ffi.new("size_t[]", n)
    pos = 0
    for i, p in enumerate(packets):
        size = len(p) if isinstance(p, bytes) else memoryview(p).nbytes  # an array('I') counts items, not octets
        in_off[i] = pos
        in_len[i] = size
        pos += size
    cap = len(blob) + n * extra
    out = _alloc_uncleared("uint8_t[]", max(cap, 1))  # every octet read back was written first
    out_off = ffi.new("size_t[]", n)
    out_len = ffi.new("size_t[]", n)
    status = ffi.new("pe_status[]", n)
    if burst is not None:  # the same results (pe/batch.h), in slots of ``extra`` octets beyond each input
        lib.pe_batch_burst(burst, ctx, extra, int(stop_at_failure), n, blob, in_off, in_len, out, cap, out_off,
                           out_len, status)
    else:
        transform = lib.pe_batch_transform_until_failure if stop_at_failure else lib.pe_batch_transform
        transform(fn, ctx, n, blob, in_off, in_len, out, cap, out_off, out_len, status)
    buf = ffi.buffer(out, cap)
    return [(status[i], buf[out_off[i] : out_off[i] + out_len[i]]) for i in range(n)]


#: The core's transform callback type (batch.h): one packet in, one out, a verdict and a status.
TRANSFORM_FN = "pe_verdict(void *, const uint8_t *, size_t, uint8_t *, size_t, size_t *, pe_status *)"
T = TypeVar("T")


def failed_verdict(_exc_type, _exc, _tb) -> int:  # type: ignore[no-untyped-def]
    """``onerror`` of a transform callback: one that raised (it cannot: no Python work in it) fails its packet."""
    return lib.PE_VERDICT_FAILED


def sent_or_raise(results: List[Tuple[int, bytes]], error_class: Callable[[str], Type[CoreError]]) -> List[bytes]:
    """What ``encrypt_batch`` returns from :func:`run_batch` (``stop_at_failure``): every packet, or the first
    failure raised as its face's exception, with the packets before it in ``err.results``."""
    out: List[bytes] = []
    for i, (st, data) in enumerate(results):
        if st != lib.PE_OK:
            err = error_class(status_name(st))(f"packet {i}: {status_message(st)}", status_name(st))
            err.results = out  # type: ignore[attr-defined]
            raise err
        out.append(data)
    return out


def decap_error(st: int, error_class: Callable[[str], Type[CoreError]], icv_valid: bool = False) -> CoreError:
    """The face's exception for a refused packet; a policy drop (a class with ``icv_valid``) says whether the
    packet had authenticated, so that policy can delete the SA."""
    code = status_name(st)
    err = error_class(code)(status_message(st), code)
    if hasattr(type(err), "icv_valid"):
        err.icv_valid = icv_valid  # type: ignore[attr-defined]
    return err


def decap_batch(decap, rx, info, fields: Callable[[Any], Dict[str, Any]], packets: Sequence[bytes],
                decrypted: Callable[..., T], error_class: Callable[[str], Type[CoreError]]
                ) -> List[Union[T, CoreError]]:  # type: ignore[no-untyped-def]
    """``decrypt_batch`` of a receiver whose decap reports a per-packet info (pe_esp_info, pe_eesp_info):
    ``decap(rx, ip, n, out, cap, out_len, info)`` per packet in one core call (pe_batch_transform).

    The core's capture transforms pass no info out, and a Decrypted needs it (ESN, Pad Length, IV): a thin
    callback calls ``decap`` inside the core's batch loop, which joins, walks and writes back the packets,
    and keeps ``fields(info)`` while the input it points into is alive.  A failed packet's slot holds its
    exception; replay windows move as they would packet by packet.  Call it under the receiver's lock.
    """
    seen: list = []  # per packet the callback saw: the Decrypted's fields, or the ICV verdict of a drop

    @ffi.callback(TRANSFORM_FN, onerror=failed_verdict)
    def one(_ctx, ip, n, out, cap, out_len, why):  # type: ignore[no-untyped-def]
        why[0] = decap(rx, ip, n, out, cap, out_len, info)
        if why[0] == lib.PE_OK:
            seen.append(fields(info))
            return lib.PE_VERDICT_TRANSFORMED
        seen.append(bool(info.icv_valid))
        return lib.PE_VERDICT_FAILED

    results: List[Union[T, CoreError]] = []
    for i, (st, data) in enumerate(run_batch(one, ffi.NULL, packets, 0)):
        got = seen[i] if i < len(seen) else False
        if st != lib.PE_OK:
            results.append(decap_error(st, error_class, icv_valid=bool(got) if not isinstance(got, dict) else False))
        else:
            results.append(decrypted(packet=data, **got))
    return results


class CryptoBackendError(CoreError, ValueError):
    """A crypto backend the core does not know (``invalid-argument``), or one not built in or not able to run
    on this machine (``unsupported``)."""

    category = "configuration"


def crypto_backends() -> Dict[str, bool]:
    """The core's crypto backends (pe/backend.h) by name, each with whether it can run here: ``"openssl"``
    always can, ``"ipsec-mb"`` when the core was built with intel-ipsec-mb and the CPU has AES-NI."""
    return {ffi.string(lib.pe_backend_name(b)).decode(): bool(lib.pe_backend_available(b))
            for b in range(lib.PE_BACKEND_COUNT)}


def crypto_backend_id(name: str) -> int:
    """The core's pe_backend for a name of :func:`crypto_backends`, or :class:`CryptoBackendError`."""
    for b in range(lib.PE_BACKEND_COUNT):
        if ffi.string(lib.pe_backend_name(b)).decode() == name:
            if not lib.pe_backend_available(b):
                raise CryptoBackendError(f"crypto backend {name!r} is not available here: {crypto_version()}",
                                         "unsupported")
            return b
    raise CryptoBackendError(f"unknown crypto backend {name!r} (one of {', '.join(crypto_backends())})",
                             "invalid-argument")


def crypto_backend() -> str:
    """The backend keys made from now on take (``"ipsec-mb"`` or ``"openssl"``)."""
    return ffi.string(lib.pe_backend_name(lib.pe_backend_current())).decode()


def set_crypto_backend(name: str) -> None:
    """Choose the backend for keys made from now on, in the whole process; keys already made keep theirs.
    The environment variable PE_CRYPTO_BACKEND=openssl chooses OpenSSL at start-up the same way."""
    st = lib.pe_backend_set(crypto_backend_id(name))
    if st != lib.PE_OK:
        raise CryptoBackendError(f"crypto backend {name!r}: {status_message(st)}", status_name(st))


def crypto_version() -> str:
    """The core's pe_version(): the current backend and the libraries behind it, as --version prints it
    (e.g. "crypto backend ipsec-mb: intel-ipsec-mb 1.3.0 (avx512) for the AEADs; OpenSSL 3.0.19 ... for the
    rest"), and why ipsec-mb is not used when it is not."""
    return ffi.string(lib.pe_version()).decode()
