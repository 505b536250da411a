"""The core's cryptographic primitives, one call each, for tools that must
compute what a *mistaken* implementation would have sent (the interop
checker, vector generators).  Protocol code uses pypsp / pyeesp instead;
these functions know nothing about headers, and do key setup per call."""
from __future__ import annotations

from typing import Optional, Sequence

from pecore.binding import ffi, lib
from pecore.errors import CoreError, status_message, status_name
from pecore.util import aead_alg_names, crypto_backend_id

AES_GCM = "aes-gcm"
AES_CCM = "aes-ccm"
CHACHA20_POLY1305 = "chacha20-poly1305"
_ALGS = {name: alg for alg, name in aead_alg_names().items()}
_HASHES = {"sha256": lib.PE_HASH_SHA256, "sha384": lib.PE_HASH_SHA384, "sha512": lib.PE_HASH_SHA512}


class PrimitiveError(CoreError, ValueError):
    """Bad parameters for a primitive (key or nonce length, algorithm)."""

    category = "configuration"


def _check(st: int, what: str) -> None:
    if st != lib.PE_OK:
        raise PrimitiveError(f"{what}: {status_message(st)}", status_name(st))


def _aead(alg: str, direction: int, key: bytes, tag_len: int, backend: Optional[str]):
    if alg not in _ALGS:
        raise PrimitiveError(f"unknown AEAD {alg!r} (one of {', '.join(_ALGS)})", "invalid-argument")
    a = ffi.new("pe_aead *")
    on = lib.pe_backend_current() if backend is None else crypto_backend_id(backend)
    _check(lib.pe_aead_init_on(a, on, _ALGS[alg], direction, key, len(key), tag_len), alg)
    return ffi.gc(a, lib.pe_aead_free)


def _iovs(aad: Sequence[bytes]):
    parts = [bytes(p) for p in aad]
    iov = ffi.new("pe_iov[]", max(1, len(parts)))
    keep = []
    for i, p in enumerate(parts):
        buf = ffi.from_buffer(p)
        keep.append(buf)
        iov[i].base = buf
        iov[i].len = len(p)
    return iov, len(parts), keep


def aead_seal(alg: str, key: bytes, nonce: bytes, aad: Sequence[bytes], plaintext: bytes, tag_len: int = 16,
              backend: Optional[str] = None):
    """(ciphertext, tag).  ``aad`` is a list of parts, authenticated in order.  ``backend`` (a name of
    :func:`pecore.util.crypto_backends`) keys this call on that crypto backend instead of the current one, for
    tests that hold the backends equal; an AEAD the backend lacks (ipsec-mb: AES-192-CCM) runs on OpenSSL."""
    a = _aead(alg, lib.PE_AEAD_SEAL, bytes(key), tag_len, backend)
    iov, n, _keep = _iovs(aad)
    ct = ffi.new("uint8_t[]", max(1, len(plaintext)))
    tag = ffi.new("uint8_t[]", tag_len)
    _check(lib.pe_aead_seal(a, bytes(nonce), iov, n, bytes(plaintext), len(plaintext), ct, tag), "seal")
    return bytes(ffi.buffer(ct, len(plaintext))), bytes(ffi.buffer(tag, tag_len))


def aead_open(alg: str, key: bytes, nonce: bytes, aad: Sequence[bytes], ciphertext: bytes, tag: bytes,
              backend: Optional[str] = None):
    """The plaintext, or None when the tag does not verify.  ``backend`` as for :func:`aead_seal`."""
    a = _aead(alg, lib.PE_AEAD_OPEN, bytes(key), len(tag), backend)
    iov, n, _keep = _iovs(aad)
    pt = ffi.new("uint8_t[]", max(1, len(ciphertext)))
    st = lib.pe_aead_open(a, bytes(nonce), iov, n, bytes(ciphertext), len(ciphertext), bytes(tag), pt)
    if st != lib.PE_OK and status_name(st) == "authentication-failed":
        return None
    _check(st, "open")
    return bytes(ffi.buffer(pt, len(ciphertext)))


def kdf_ctr_cmac_aes256(key: bytes, label: int, context: int, out_len: int) -> bytes:
    """SP 800-108 counter-mode KDF over AES-256-CMAC as PSP uses it (psp.md §5)."""
    out = ffi.new("uint8_t[]", out_len)
    _check(lib.pe_kdf_ctr_cmac_aes256(bytes(key), label, context, out, out_len), "kdf")
    return bytes(ffi.buffer(out, out_len))


def cmac_aes256(key: bytes, data: bytes) -> bytes:
    """AES-256-CMAC (SP 800-38B), the PRF under the PSP KDF, for KDF layouts the core does not build."""
    key = bytes(key)
    if len(key) != 32:
        raise PrimitiveError(f"AES-256-CMAC takes a 32-octet key, not {len(key)}", "bad-key-length")
    out = ffi.new("uint8_t[]", 16)
    _check(lib.pe_cmac_aes256(key, bytes(data), len(data), out), "cmac")
    return bytes(ffi.buffer(out, 16))


def hkdf_expand(hash_name: str, prk: bytes, info: bytes, out_len: int) -> bytes:
    """RFC 5869 HKDF-Expand."""
    if hash_name not in _HASHES:
        raise PrimitiveError(f"unknown hash {hash_name!r} (one of {', '.join(_HASHES)})", "invalid-argument")
    out = ffi.new("uint8_t[]", out_len)
    _check(lib.pe_hkdf_expand(_HASHES[hash_name], bytes(prk), len(prk), bytes(info), len(info), out, out_len), "hkdf")
    return bytes(ffi.buffer(out, out_len))
