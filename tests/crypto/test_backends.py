"""The core's two crypto backends (core/include/pe/backend.h) held equal from Python, and the choice exposed.

- Property: random suites, keys, nonces, AADs in parts and plaintexts (empty included) seal to the same octets on
  ipsec-mb and on OpenSSL, and both equal `cryptography`'s AEADs (the reference, sharing no code with the core);
  each backend opens the other's packet; a flipped bit of tag, ciphertext or AAD fails on both.
- The three `vectors check` CLIs pass in subprocesses on the default backend (ipsec-mb where it runs) and with
  PE_CRYPTO_BACKEND=openssl, each process saying which backend its keys took; and on each of ipsec-mb's code paths
  below the CPU's own (PE_IMB_ARCH).
- pecore.util's selection: names from the core, typed errors for unknown and unavailable backends, the current
  backend switched and switched back; the CLIs' --version prints the core's pe_version().
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305
from hypothesis import given
from hypothesis import strategies as st

from pecore import CoreError
from pecore import primitives as p
from pecore import util

ROOT = Path(__file__).resolve().parents[2]
IPSEC_MB_HERE = util.crypto_backends().get("ipsec-mb", False)
needs_ipsec_mb = pytest.mark.skipif(not IPSEC_MB_HERE, reason=f"no second backend here: {util.crypto_version()}")

#: (alg, key length, tag length): every AEAD, key length and tag length the suites use.
SUITES = ([(p.AES_GCM, k, t) for k in (16, 24, 32) for t in (8, 12, 16)]
          + [(p.AES_CCM, k, t) for k in (16, 24, 32) for t in (8, 12, 16)]
          + [(p.CHACHA20_POLY1305, 32, 16)])


def reference_seal(alg: str, key: bytes, nonce: bytes, aad: bytes, msg: bytes, tag_len: int) -> bytes:
    """ciphertext || tag by `cryptography`; a GCM tag of t octets is the first t of the full one (SP 800-38D)."""
    if alg == p.AES_CCM:
        return AESCCM(key, tag_length=tag_len).encrypt(nonce, msg, aad)
    whole = (AESGCM(key) if alg == p.AES_GCM else ChaCha20Poly1305(key)).encrypt(nonce, msg, aad)
    return whole[:len(msg) + tag_len]


@st.composite
def packets(draw):  # type: ignore[no-untyped-def]
    alg, key_len, tag_len = draw(st.sampled_from(SUITES))
    key = draw(st.binary(min_size=key_len, max_size=key_len))
    nonce = draw(st.binary(min_size=11 if alg == p.AES_CCM else 12, max_size=11 if alg == p.AES_CCM else 12))
    # up to 4 parts, and 4 long ones: a split past the 512 octets the ipsec-mb side gathers for one call
    aad = draw(st.one_of(st.lists(st.binary(max_size=160), max_size=4),
                         st.lists(st.binary(min_size=130, max_size=160), min_size=4, max_size=4)))
    msg = draw(st.one_of(st.binary(max_size=64), st.binary(max_size=2000)))
    return alg, key, tag_len, nonce, aad, msg


@needs_ipsec_mb
@given(pkt=packets(), flip=st.integers(min_value=0), what=st.sampled_from(["tag", "ciphertext", "aad"]))
def test_backends_seal_and_open_alike(pkt, flip, what):
    alg, key, tag_len, nonce, aad, msg = pkt
    sealed = {b: p.aead_seal(alg, key, nonce, aad, msg, tag_len, backend=b) for b in ("openssl", "ipsec-mb")}
    assert sealed["openssl"] == sealed["ipsec-mb"]
    ct, tag = sealed["openssl"]
    assert ct + tag == reference_seal(alg, key, nonce, b"".join(aad), msg, tag_len)
    for b, other in (("openssl", "ipsec-mb"), ("ipsec-mb", "openssl")):
        assert p.aead_open(alg, key, nonce, aad, *sealed[other], backend=b) == msg

    if what == "ciphertext" and ct:
        i = flip % (8 * len(ct))
        ct = ct[:i // 8] + bytes([ct[i // 8] ^ 1 << i % 8]) + ct[i // 8 + 1:]
    elif what == "aad" and any(aad):
        joined = b"".join(aad)
        i = flip % (8 * len(joined))
        joined = joined[:i // 8] + bytes([joined[i // 8] ^ 1 << i % 8]) + joined[i // 8 + 1:]
        aad = [joined]  # the same octets, forged, in one part
    else:
        i = flip % (8 * tag_len)
        tag = tag[:i // 8] + bytes([tag[i // 8] ^ 1 << i % 8]) + tag[i // 8 + 1:]
    for b in ("openssl", "ipsec-mb"):
        assert p.aead_open(alg, key, nonce, aad, ct, tag, backend=b) is None


def test_selection_names_and_errors():
    backends = util.crypto_backends()
    assert list(backends) == ["openssl", "ipsec-mb"] and backends["openssl"] is True
    was = util.crypto_backend()
    assert was in backends
    try:
        for name, available in backends.items():
            if available:
                util.set_crypto_backend(name)
                assert util.crypto_backend() == name
                assert util.crypto_version().startswith(f"crypto backend {name}: ")
            else:
                with pytest.raises(util.CryptoBackendError) as e:
                    util.set_crypto_backend(name)
                assert e.value.code == "unsupported" and util.crypto_backend() != name
    finally:
        util.set_crypto_backend(was)
    assert util.crypto_backend() == was
    with pytest.raises(util.CryptoBackendError) as e:
        util.set_crypto_backend("libsodium")
    assert e.value.code == "invalid-argument" and "openssl, ipsec-mb" in str(e.value)
    assert isinstance(e.value, CoreError) and isinstance(e.value, ValueError)
    assert e.value.category == "configuration"
    with pytest.raises(util.CryptoBackendError):
        p.aead_seal(p.AES_GCM, bytes(16), bytes(12), [], b"", backend="OpenSSL")


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PE_CRYPTO_BACKEND", "PE_IMB_ARCH")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def _version(cli: str, env: dict) -> str:
    res = subprocess.run([sys.executable, "-m", cli, "--version"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("cli", ["pypsp", "pyeesp", "pyesp"])
def test_version_prints_the_core_backend(cli):
    out = _version(cli, _env())
    assert out.startswith(f"{cli} 0.") and out.count("\n") == 1
    want = "crypto backend ipsec-mb: intel-ipsec-mb " if IPSEC_MB_HERE else "crypto backend openssl: OpenSSL 3"
    assert want in out
    forced = _version(cli, _env(PE_CRYPTO_BACKEND="openssl"))
    assert "crypto backend openssl: OpenSSL 3" in forced and "ipsec-mb not used: PE_CRYPTO_BACKEND=openssl" in forced


VECTOR_CHECKS = [("pypsp", "psp_"), ("pyeesp", "eesp_"), ("pyesp", "esp_")]
#: The CLI's main in a process that first says which backend its keys take.
RUN_CLI = ("import sys, importlib; from pecore import util; print('backend', util.crypto_backend()); "
           "sys.exit(importlib.import_module(sys.argv[1] + '.tools.cli').main(sys.argv[2:]))")


@pytest.mark.parametrize("forced", [False, True], ids=["default", "openssl"])
@pytest.mark.parametrize("cli, prefix", VECTOR_CHECKS, ids=[c for c, _ in VECTOR_CHECKS])
def test_vectors_check_on_each_backend(cli, prefix, forced):
    env = _env(PE_CRYPTO_BACKEND="openssl") if forced else _env()
    files = sorted(str(f) for f in (ROOT / "vectors").glob(f"{prefix}*_test.json"))
    assert len(files) >= 5
    res = subprocess.run([sys.executable, "-c", RUN_CLI, cli, "vectors", "check", "-q", *files], capture_output=True,
                         text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[0] == f"backend {'openssl' if forced or not IPSEC_MB_HERE else 'ipsec-mb'}"
    assert lines[-1].startswith("total: ") and "passed" in lines[-1]



#: ipsec-mb's code paths from the slowest up: PE_IMB_ARCH puts the managers on one of them.
IMB_ARCHS = ("sse", "avx", "avx2", "avx512")


def _imb_path(version: str) -> str:
    """What the parentheses after "intel-ipsec-mb X.Y.Z" say: the code path, then any word about PE_IMB_ARCH."""
    return version.split("intel-ipsec-mb ", 1)[1].split("(", 1)[1].split(")", 1)[0]


def _auto_arch() -> str:
    return _imb_path(_version("pyesp", _env())).split(",")[0]


@needs_ipsec_mb
@pytest.mark.parametrize("arch", IMB_ARCHS[:-1])
def test_vectors_check_on_each_imb_path(arch):
    """Every vector through ipsec-mb's lower code paths, so that a CI machine with AVX-512 also checks the AVX2,
    AVX and SSE code that other CPUs run; the version names the path."""
    auto = _auto_arch()
    if IMB_ARCHS.index(arch) >= IMB_ARCHS.index(auto):
        pytest.skip(f"ipsec-mb runs {auto} here: {arch} is not below it")
    env = _env(PE_IMB_ARCH=arch)
    assert _imb_path(_version("pyesp", env)) == f"{arch}, by PE_IMB_ARCH"
    for cli, prefix in VECTOR_CHECKS:
        files = sorted(str(f) for f in (ROOT / "vectors").glob(f"{prefix}*_test.json"))
        res = subprocess.run([sys.executable, "-c", RUN_CLI, cli, "vectors", "check", "-q", *files],
                             capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        lines = res.stdout.splitlines()
        assert lines[0] == "backend ipsec-mb" and lines[-1].startswith("total: ") and "passed" in lines[-1]


@needs_ipsec_mb
def test_imb_arch_unknown_or_beyond_the_cpu_is_said():
    auto = _auto_arch()
    assert _imb_path(_version("pyesp", _env(PE_IMB_ARCH="avx9000"))) == f"{auto}, PE_IMB_ARCH=avx9000 unknown"
    if auto != "avx512":
        assert _imb_path(_version("pyesp", _env(PE_IMB_ARCH="avx512"))) == f"{auto}, PE_IMB_ARCH=avx512 beyond this CPU"
