"""pecore.primitives: the core's AEAD and KDFs, one call each, against `cryptography`."""
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand
from hypothesis import given
from hypothesis import strategies as st

import pypsp
from pecore import primitives as p

CASES = [
    (p.AES_GCM, lambda k, t: AESGCM(k), 16, 12, 16),
    (p.AES_GCM, lambda k, t: AESGCM(k), 32, 12, 16),
    (p.AES_CCM, lambda k, t: AESCCM(k, tag_length=t), 16, 11, 8),
    (p.CHACHA20_POLY1305, lambda k, t: ChaCha20Poly1305(k), 32, 12, 16),
]


@pytest.mark.parametrize("alg, ref, key_len, nonce_len, tag_len", CASES)
@given(data=st.data())
def test_aead_matches_cryptography(alg, ref, key_len, nonce_len, tag_len, data):
    key = data.draw(st.binary(min_size=key_len, max_size=key_len))
    nonce = data.draw(st.binary(min_size=nonce_len, max_size=nonce_len))
    parts = data.draw(st.lists(st.binary(max_size=40), max_size=3))
    msg = data.draw(st.binary(max_size=200))
    ct, tag = p.aead_seal(alg, key, nonce, parts, msg, tag_len)
    assert ct + tag == ref(key, tag_len).encrypt(nonce, msg, b"".join(parts))
    assert p.aead_open(alg, key, nonce, [b"".join(parts)], ct, tag) == msg
    bad = bytes([tag[0] ^ 1]) + tag[1:]
    assert p.aead_open(alg, key, nonce, parts, ct, bad) is None


def test_bad_parameters_are_typed_errors():
    with pytest.raises(p.PrimitiveError) as e:
        p.aead_seal(p.AES_GCM, bytes(15), bytes(12), [], b"")
    assert e.value.code == "bad-key-length"
    with pytest.raises(p.PrimitiveError):
        p.aead_seal("rot13", bytes(16), bytes(12), [], b"")
    with pytest.raises(p.PrimitiveError):
        p.hkdf_expand("md5", bytes(32), b"", 16)


@given(prk=st.binary(min_size=32, max_size=64), info=st.binary(max_size=8), n=st.integers(1, 100))
def test_hkdf_expand_matches_cryptography(prk, info, n):
    assert p.hkdf_expand("sha256", prk, info, n) == HKDFExpand(hashes.SHA256(), n, info).derive(prk)


@given(mk=st.binary(min_size=32, max_size=32), spi=st.integers(0, 2**32 - 1))
def test_kdf_is_the_psp_kdf(mk, spi):
    # psp.md §5: label "Pv0" (0x50763000 for version 0), context = SPI, two CMAC blocks for a 256-bit key.
    assert p.kdf_ctr_cmac_aes256(mk, 0x50763000, spi, 16) == pypsp.derive_key(mk, spi, 0)
