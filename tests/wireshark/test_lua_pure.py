"""Decryption in pure Lua (dissectors/lua/src/pecrypto.lua, inlined into psp.lua and eesp.lua) against the C core.

pecrypto under a standalone ``lua5.4`` (tests/wireshark/luaharness.py): SHA-2, HMAC (RFC 4231), HKDF-Expand
(RFC 5869) and the Sub SA key derivation against hashlib/cryptography and vectors/eesp_sskdf_test.json; CMAC
(RFC 4493) and the PSP KDF (vectors/psp_kdf_test.json) with the AES block computed by Python through a pipe,
since the shipped code has no AES of its own; the tables build_scripts.py copies from the core (statuses,
suites, PSP versions, eesp-sa fields) against the core's; the key-file and reference-config readers against
the core's (same verdict, line and message) and pelua's.  And the committed scripts are what
dissectors/lua/build_scripts.py makes of src/pecrypto.lua.

The PSP/EESP open logic is checked in test_lua_pure_open.py, the scripts inside a tshark 4.6+ in
test_lua_pure_tshark.py.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import pytest

import wireshark as ws
from conftest import REPO_ROOT, SHARED_DIR

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")
from cryptography.hazmat.primitives import cmac as crypto_cmac  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.ciphers import algorithms  # noqa: E402
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand  # noqa: E402

from pecore._native import ffi, lib  # noqa: E402
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE  # noqa: E402

from luaharness import (  # noqa: E402
    CoreKeys,
    EESP_LUA,
    Harness,
    LUA_DIR,
    MK0,
    MK1,
    PCAPS,
    PSP_LUA,
    SOURCE,
    VECTORS,
    hx,
    lua,
    status_name,
    workdir,
)


# ---------------------------------------------------------------------------------------------- 1. hashes, MACs, KDFs


def messages(seed: int = 1) -> List[bytes]:
    """Lengths around every SHA-256/512 block and padding boundary, and a few long ones."""
    rng = random.Random(seed)
    lengths = sorted(set(range(0, 260)) | {447, 448, 511, 512, 1000, 4099})
    return [bytes(rng.randrange(256) for _ in range(n)) for n in lengths]


def test_sha2_matches_hashlib(lua: Harness) -> None:
    for m in messages():
        assert lua.call("sha256", hx(m)) == hashlib.sha256(m).hexdigest(), len(m)
        assert lua.call("sha384", hx(m)) == hashlib.sha384(m).hexdigest(), len(m)
        assert lua.call("sha512", hx(m)) == hashlib.sha512(m).hexdigest(), len(m)


# RFC 4231 §4.2-4.8 inputs; test case 5 (truncated output) is covered by the full outputs compared here.
RFC4231 = [
    (b"\x0b" * 20, b"Hi There"),
    (b"Jefe", b"what do ya want for nothing?"),
    (b"\xaa" * 20, b"\xdd" * 50),
    (bytes(range(1, 26)), b"\xcd" * 50),
    (b"\x0c" * 20, b"Test With Truncation"),
    (b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First"),
    (b"\xaa" * 131, b"This is a test using a larger than block-size key and a larger than block-size data. The key "
                    b"needs to be hashed before being used by the HMAC algorithm."),
]


def test_hmac_rfc4231(lua: Harness) -> None:
    # Two outputs printed in RFC 4231 itself, so the reference is anchored beyond Python's hmac.
    assert lua.call("hmac", "sha256", hx(RFC4231[0][0]), hx(RFC4231[0][1])) == \
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
    assert lua.call("hmac", "sha512", hx(RFC4231[5][0]), hx(RFC4231[5][1])) == (
        "80b24263c7c1a3ebb71493c1dd7be8b49b46d1f41b4aeec1121b013783f8f3526b56d037e05f2598bd0fd2215d6a1e52"
        "95e64f73f63f0aec8b915a985d786598")
    for key, msg in RFC4231:
        for alg in ("sha256", "sha384", "sha512"):
            want = hmac.new(key, msg, alg).hexdigest()
            assert lua.call("hmac", alg, hx(key), hx(msg)) == want, (alg, key[:4], msg[:8])


def test_hkdf_expand_rfc5869_and_cryptography(lua: Harness) -> None:
    # RFC 5869 A.1-A.3 (SHA-256): PRK and info as printed there, OKM = HKDF-Expand(PRK, info, L).
    cases = [
        ("077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5", "f0f1f2f3f4f5f6f7f8f9", 42,
         "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"),
        ("06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
         "b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf"
         "e0e1e2e3e4e5e6e7e8e9eaebecedeeeff0f1f2f3f4f5f6f7f8f9fafbfcfdfeff", 82,
         "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7827271cb41c65e590e09"
         "da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1f3434f1d87"),
        ("19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04", "-", 42,
         "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8"),
    ]
    for prk, info, n, okm in cases:
        assert lua.call("hkdf", "sha256", prk, info, n) == okm
    rng = random.Random(5)
    for alg, hash_cls, size in (("sha256", hashes.SHA256, 32), ("sha384", hashes.SHA384, 48),
                                ("sha512", hashes.SHA512, 64)):
        for n in (1, 19, 20, 35, 36, size, size + 1, 3 * size + 5, 255 * size):
            prk = bytes(rng.randrange(256) for _ in range(rng.choice((size, 16, 100))))
            info = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
            want = HKDFExpand(hash_cls(), n, info).derive(prk).hex()
            assert lua.call("hkdf", alg, hx(prk), hx(info), n) == want, (alg, n)


def test_sskdf_vectors(lua: Harness) -> None:
    """vectors/eesp_sskdf_test.json: the valid tests give the key, the invalid ones a known mistake's output."""
    doc = json.loads((VECTORS / "eesp_sskdf_test.json").read_text())
    which = {"hkdf-sha256": 1, "hkdf-sha384": 2, "hkdf-sha512": 3}
    checked = 0
    for group in doc["testGroups"]:
        for t in group["tests"]:
            inp, want = t["inputs"], t["outputs"]["keymat"]
            got = lua.call("sskdf", which[group["sskdf"]], inp["rootKey"], inp["sessionId"], inp["length"])
            if t["result"] == "valid":
                assert got == want, t["tcId"]
                checked += 1
            else:
                assert got != want, t["tcId"]
    assert checked >= 100


# RFC 4493 §4: AES-128, the four example messages.
RFC4493_KEY = "2b7e151628aed2a6abf7158809cf4f3c"
RFC4493_MSG = ("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51"
               "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710")
RFC4493 = [(0, "bb1d6929e95937287fa37d129b756746"), (16, "070a16b46b4d4144f79bdd9dd04a287c"),
           (40, "dfa66747de9ae63030ca32611497c827"), (64, "51f0bebf7e3b9d92fc49741779363cfe")]


def test_cmac_rfc4493_and_cryptography(lua: Harness) -> None:
    msg = bytes.fromhex(RFC4493_MSG)
    for n, tag in RFC4493:
        assert lua.call("cmac", RFC4493_KEY, hx(msg[:n])) == tag, n
    rng = random.Random(7)
    for key_len in (16, 24, 32):
        for n in list(range(0, 50)) + [63, 64, 65, 200]:
            key = bytes(rng.randrange(256) for _ in range(key_len))
            m = bytes(rng.randrange(256) for _ in range(n))
            c = crypto_cmac.CMAC(algorithms.AES(key))
            c.update(m)
            assert lua.call("cmac", key.hex(), hx(m)) == c.finalize().hex(), (key_len, n)


def test_psp_kdf_vectors(lua: Harness) -> None:
    """vectors/psp_kdf_test.json and the spec's table (psp.md §5): AES-256-CMAC counter mode, Pv0..Pv3."""
    doc = json.loads((VECTORS / "psp_kdf_test.json").read_text())
    checked = 0
    for group in doc["testGroups"]:
        for t in group["tests"]:
            inp, out = t["inputs"], t["outputs"]
            got = lua.call("pspkdf", inp["masterKey"], int(inp["spi"], 16), inp["version"], inp.get("label", ""))
            if t["result"] == "valid":
                assert got == out["derivedKey"], t["tcId"]
                checked += 1
            else:
                assert got != out["derivedKey"], t["tcId"]
    assert checked >= 40
    mk0 = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
    assert lua.call("pspkdf", mk0, 0x12345678, 0) == "96c22dc799198090b74b70ae468e4e30"
    assert lua.call("pspkdf", mk0, 0x12345678, 1) == "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"


def test_status_table_matches_core(lua: Harness) -> None:
    """The source's copy of the core's statuses (name, category, message) and categories (name, meaning), row for
    row: the scripts take every status's expert item from it on every path, pelua's included (build_scripts.py
    copies it into them; test_scripts_are_generated_from_the_source checks the copies)."""
    core = [[status_name(st), ffi.string(lib.pe_category_name(lib.pe_status_category(st))).decode(),
             ffi.string(lib.pe_status_message(st)).decode()] for st in range(lib.PE_STATUS_COUNT)]
    assert len(core) > 70 and all(CATEGORY_BY_CODE[name] == category for name, category, _ in core)
    assert lua.call("statuses") == core
    categories = [[name, meaning] for name, meaning in CATEGORIES.items()]
    assert lua.call("categories") == categories
    for name, category, _ in core:
        assert lua.call("category", name) == category, name
    assert lua.call("category", "no-such-status") == "internal"  # as pe_status_category out of range


def test_suite_table_matches_core(lua: Harness) -> None:
    """The source's copy of the core's suite table (pe_ipsec_suite_at), row for row: build_scripts.py reads it from
    core/src/proto/ipsec.c, and the key-file parser and the EESP open take every suite name and length from it."""
    alg = {lib.PE_AEAD_AES_GCM: "aes-gcm", lib.PE_AEAD_AES_CCM: "aes-ccm",
           lib.PE_AEAD_CHACHA20_POLY1305: "chacha20-poly1305"}
    core = []
    for i in range(lib.pe_ipsec_suite_count()):
        r = lib.pe_ipsec_suite_at(i)
        core.append([r.encr, ffi.string(r.name).decode(), ffi.string(r.ikev2_name).decode(), alg[r.alg], r.salt_len,
                     r.iv_len, r.icv_len, bool(r.implicit_iv), bool(r.integrity_only),
                     [r.key_lens[k] for k in range(r.n_key_lens)]])
    assert len(core) >= 11
    assert lua.call("suites") == core


def test_psp_version_table_matches_core(lua: Harness) -> None:
    """The source's copy of the core's PSP crypto versions (pe_psp_version_info_get), row for row: the key lengths,
    names and GMAC rule of the pure path come from it (build_scripts.py reads core/src/proto/psp_hdr.c)."""
    core = []
    for v in range(16):
        r = lib.pe_psp_version_info_get(v)
        if r != ffi.NULL:
            core.append([r.version, ffi.string(r.name).decode(), r.key_len, r.icv_len, bool(r.gmac)])
    assert len(core) == 4
    assert lua.call("psp_versions") == core


def test_eesp_sa_fields_match_core(lua: Harness) -> None:
    """The fields an eesp-sa line takes, in the Lua reader as in the core's (pe_keyfile_eesp_sa_field_name):
    build_scripts.py reads core/src/io/keyfile_eesp.c's list."""
    core = []
    while lib.pe_keyfile_eesp_sa_field_name(len(core)) != ffi.NULL:
        core.append(ffi.string(lib.pe_keyfile_eesp_sa_field_name(len(core))).decode())
    assert len(core) > 20 and "max-live-sub-sas" in core
    assert lua.call("eesp_sa_fields") == core


# ---------------------------------------------------------------------------------------------- 1. key files


def core_keyfile(text: bytes) -> dict:
    """What pe_keyfile_parse makes of `text`, in the harness's keyfile_view shape."""
    kf = ffi.new("pe_keyfile *")
    err = ffi.new("pe_keyfile_error *")
    st = lib.pe_keyfile_parse(text, len(text), kf, err)
    if st != lib.PE_OK:
        return dict(status=status_name(st), line=err.line, message=ffi.string(err.message).decode())
    try:
        v: dict = dict(lines=kf.n_lines, psp_sas=kf.n_psp_sas, psp_keys=[], eesp_sas=[])
        if kf.n_psp_master:
            m = kf.psp_master
            v["master"] = dict(line=m.line, key0=bytes(m.key0).hex() if m.has_key0 else "",
                               key1=bytes(m.key1).hex() if m.has_key1 else "")
        for i in range(kf.n_psp_keys):
            k = kf.psp_keys[i]
            v["psp_keys"].append(dict(line=k.line, spi=k.spi, version=k.version, key=bytes(k.key[0 : k.key_len]).hex()))
        for i in range(kf.n_eesp_sas):
            e = kf.eesp_sas[i]
            v["eesp_sas"].append(dict(
                line=e.line, spi=e.spi, encr=e.encr, key_bits=e.key_bits, sskdf=e.sskdf,
                key=bytes(e.key[0 : e.key_len]).hex(), root_key=bytes(e.root_key[0 : e.root_key_len]).hex(),
                mode=e.mode, format=e.format, seq_present=e.seq_present, aad=e.aad, anti_replay=e.anti_replay,
                replay_window=e.replay_window, max_sub_sa_id=e.max_sub_sa_id, max_crypt_offset=e.max_crypt_offset,
                crypt_offset=e.crypt_offset, align=e.align_options, strict=e.strict, ip_protocol=e.ip_protocol,
                udp_encap=e.udp_encap, src_family=e.src_family if e.has_src else 0,
                src=bytes(e.src).hex() if e.has_src else "00" * 16, dst_family=e.dst_family if e.has_dst else 0,
                dst=bytes(e.dst).hex() if e.has_dst else "00" * 16, sub_sas=e.sub_sas))
        return dict(status="ok", view=v)
    finally:
        lib.pe_keyfile_free(kf)


def lua_keyfile(lua: Harness, text: bytes) -> dict:
    res = lua.call("keyfile", hx(text))
    assert isinstance(res, dict)
    view = res.get("view")
    if view:  # empty Lua tables come back as {}; the core's view has lists
        for k in ("psp_keys", "eesp_sas"):
            view[k] = view[k] or []
    return res


K20, K36 = bytes(range(20)).hex(), bytes(range(36)).hex()

# One line (or a few) for every way the C reader accepts or refuses a line, in the order it checks.
# The start of a valid AES-GCM-16 line, for the field-by-field cases below.
E16 = f"eesp-sa spi=1 suite=aes-gcm-16 key={K20}"
KEYFILE_LINES = [
    "", "# only a comment", "   \t  ", "psp-master key0=" + MK0.hex(), "psp-master key1=0X" + MK1.hex().upper(),
    "psp-master key0=" + MK0.hex() + " key1=" + MK1.hex() + "   # trailing comment",
    "psp-master key0=" + MK0.hex()[:-1], "psp-master key0=" + MK0.hex()[:-2], "psp-master key0=zz",
    "psp-master key0=0x", "psp-master foo=1", "psp-master", "psp-master key0=" + MK0.hex() + " key0=" + MK0.hex(),
    "psp-key spi=1 key=" + "ab" * 16, "psp-key spi=0x9A345678 key=" + "cd" * 32 + " version=3",
    "psp-key spi=123456789 key=" + "ab" * 16, "psp-key spi= key=" + "ab" * 16, "psp-key spi=0x key=" + "ab" * 16,
    "psp-key spi=1 key=" + "ab" * 17, "psp-key spi=1 version=1 key=" + "ab" * 16,
    "psp-key spi=1 version=4 key=" + "ab" * 16,
    "psp-key spi=1 version=+1 key=" + "ab" * 16, "psp-key key=" + "ab" * 16, "psp-key spi=1",
    "psp-key spi=1 key=96:c2:2d:c7:99:19:80:90:b7:4b:70:ae:46:8e:4e:30",
    "psp-sa spi=1 version=0 mode=transport", "psp-sa spi=1 version=0 mode=Tunnel",
    "psp-sa spi=1 version=0 mode=tunnel crypt-offset=64", "psp-sa spi=1 mode=tunnel",
    "psp-sa spi=1 version=2 mode=tunnel vc=00000000",
    "psp-sa spi=1 version=2 mode=tunnel vc=0000000000000000 sample=1 drop=1",
    "psp-sa spi=1 version=0 mode=tunnel first-iv=0", "psp-sa spi=1 version=0 mode=tunnel first-iv=0x",
    "psp-sa spi=1 version=0 mode=tunnel first-iv=18446744073709551615",
    "psp-sa spi=1 version=0 mode=tunnel first-iv=18446744073709551616",
    "psp-sa spi=1 version=0 mode=tunnel first-iv=0xffffffffffffffff",
    "psp-sa spi=1 version=0 mode=tunnel first-iv=0x1ffffffffffffffff",
    "psp-sa spi=1 version=0 mode=tunnel first-iv=ff",
    "psp-sa spi=1 version=0 mode=tunnel sample=2", "psp-sa spi=1 version=0 mode=tunnel bogus=1",
    E16, f"eesp-sa spi=1 suite=ENCR_AES_GCM_16 key={K20}",
    f"eesp-sa spi=1 suite=encr_aes_gcm_16 key={K20}", f"eesp-sa spi=1 suite=AES-GCM-16 key={K20}",
    f"eesp-sa spi=1 suite=20 key={K20}", f"eesp-sa spi=1 suite=0020 key={K20}", f"eesp-sa spi=1 suite=17 key={K20}",
    f"eesp-sa spi=1 suite=aes-gcm-16 key-bits=192 key={bytes(28).hex()}",
    f"eesp-sa spi=1 suite=aes-gcm-16 key-bits=256 key={K36}", f"eesp-sa spi=1 suite=aes-gcm-16 key-bits=64 key={K20}",
    f"eesp-sa spi=1 suite=aes-gcm-16 key-bits=0x80 key={K20}", f"eesp-sa spi=1 suite=chacha20-poly1305 key={K36}",
    f"eesp-sa spi=1 suite=chacha20-poly1305 key-bits=128 key={K36}", f"eesp-sa spi=1 suite=aes-ccm-8 key={K20}",
    f"eesp-sa spi=1 suite=aes-ccm-8 key={bytes(19).hex()}", f"{E16} root-key={K20}",
    "eesp-sa spi=1 suite=aes-gcm-16", f"{E16} sskdf=hkdf-sha256",
    f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(32).hex()}",
    f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(32).hex()} sskdf=aes256-cmac",
    f"{E16} sskdf=aes256-cmac", f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(32).hex()} sskdf=hkdf-md5",
    f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(48).hex()} sskdf=hkdf-sha384",
    f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(48).hex()} sskdf=hkdf-sha512",
    f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(64).hex()} sskdf=hkdf-sha512 max-sub-sa-id=3 sub-sas=4",
    f"eesp-sa spi=1 suite=aes-gcm-16 root-key={bytes(64).hex()} sskdf=hkdf-sha512 max-sub-sa-id=3 sub-sas=5",
    f"{E16} sub-sas=2", f"{E16} sub-sas=0",
    f"eesp-sa spi=1 suite=aes-gcm-16-iiv key={K20} seq=0", f"{E16} seq=0",
    f"{E16} seq=0 anti-replay=1", f"{E16} anti-replay=0",
    f"{E16} anti-replay=2", f"eesp-sa spi=1 suite=aes-gmac key={K20} aad=linux-xfrm",
    f"{E16} aad=linux-xfrm mode=transport format=full",
    f"{E16} mode=beet", f"{E16} format=compact",
    f"{E16} aad=none",
    f"{E16} replay-window=63", f"{E16} replay-window=1048576",
    f"{E16} replay-window=1048577",
    f"{E16} max-crypt-offset=255 crypt-offset=63 align=0 strict=1 udp-encap=1",
    f"{E16} max-crypt-offset=256", f"{E16} crypt-offset=64",
    f"{E16} ip-protocol=253", f"{E16} ip-protocol=256",
    f"{E16} dst=192.0.2.1 src=192.0.2.2",
    f"{E16} dst=192.0.2.01", f"{E16} dst=192.0.2",
    f"{E16} dst=192.0.2.256", f"{E16} dst=1.2.3.4.5",
    f"{E16} dst=*", f"{E16} dst=0.0.0.0",
    f"{E16} dst=2001:db8::1", f"{E16} dst=::",
    f"{E16} dst=::1", f"{E16} dst=1::",
    f"{E16} dst=::ffff:192.0.2.1", f"{E16} dst=1:2:3:4:5:6:7:8",
    f"{E16} dst=1:2:3:4:5:6:7::", f"{E16} dst=1:2:3:4:5:6:7:8:9",
    f"{E16} dst=1::2::3", f"{E16} dst=:1",
    f"{E16} dst=1:", f"{E16} dst=12345::",
    f"{E16} dst=fe80::1%eth0", f"{E16} dst=1:2:3:4:5:6:1.2.3.4",
    f"{E16} dst=1:2:3:4:5:6:7:1.2.3.4", f"{E16} dst=::1.2.3.4:5",
    f"{E16} dst=2001:DB8:0:0:0:0:0:1", f"{E16} dst=[::1]",
    f"{E16} src=192.0.2.1 dst=2001:db8::1",
    f"{E16} dst=192.0.2.1 src=*", f"{E16} note=x",
    "ah-sa spi=0x1000 note=example", "kind-only", "Psp-key spi=1", "9a345678", "1bad-kind x=1", "k x", "k =v",
    "k x=",
    "k A=1", "k x=1 x=2", "k 0123456789abcdef=1 0123456789abcdef=2", "k x=a=b", "k x=1\x01", "k x=1\x7f",
    "k x=\xc3\xa9",
    "k x=1 # caf\xc3\xa9 in a comment", "k x=1\rk", "k " + " ".join(f"f{i}=1" for i in range(32)),
    "k " + " ".join(f"f{i}=1" for i in range(33)), "deadbeefcafe0123 x=1", "psp-key " + "ab" * 16 + "=1",
    "psp-key spi=1 zz-" + "ab" * 8 + "=1", "psp-key spi=1 " + "x" * 41 + "=1",
]

KEYFILE_FILES = [
    "psp-master key0=" + MK0.hex() + "\npsp-master key1=" + MK1.hex() + "\n",
    "psp-key spi=1 key=" + "ab" * 16 + "\npsp-key spi=0x1 key=" + "cd" * 16 + "\n",
    "psp-key spi=1 key=" + "ab" * 16 + "\npsp-key spi=1 key=" + "cd" * 32 +
    "\npsp-key spi=1 version=2 key=" + "ef" * 16 + "\n",
    "psp-key spi=1 version=0 key=" + "ab" * 16 + "\npsp-key spi=1 version=2 key=" + "cd" * 16 +
    "\npsp-key spi=1 key=" + "ef" * 16 + "\n",
    "psp-key spi=1 version=1 key=" + "ab" * 32 + "\npsp-key spi=1 key=" + "cd" * 16 +
    "\npsp-key spi=1 version=3 key=" + "ef" * 32 + "\n",
    "psp-sa spi=1 version=0 mode=tunnel\npsp-sa spi=00000001 version=1 mode=transport\n",
    f"eesp-sa spi=1 suite=aes-gcm-16 key={K20}\neesp-sa spi=1 suite=aes-gcm-16 key={K20} dst=*\n",
    f"{E16} dst=2001:db8::1\neesp-sa spi=0x1 suite=aes-gmac key={K20} dst=2001:DB8:0::1\n",
    f"{E16} dst=192.0.2.1\n{E16} dst=::ffff:192.0.2.1\n"
    f"eesp-sa spi=1 suite=aes-gcm-16 key={K20}\neesp-sa spi=1 suite=aes-gcm-16 key={K20} dst=192.0.2.1\n",
    "\ufeffpsp-master key0=" + MK0.hex() + "\r\n# comment\r\n\r\npsp-key spi=2 key=" + "ab" * 16,
    "psp-master key0=" + MK0.hex() + "\n\n\npsp-key spi=2 key=" + "ab" * 16 + "\x00\n",
    "# a NUL in a comment\n#\x00\n", "\ufeff\ufeffpsp-master key0=" + MK0.hex(), "line one\rline two\n", "\n\n\r\n",
    "psp-master key0=" + MK0.hex() + "\r\r\n",
]


def keyfile_corpus() -> List[bytes]:
    texts: List[bytes] = [t.encode("utf-8", "surrogateescape") for t in KEYFILE_FILES]
    texts += [(line + "\n").encode("latin-1") if "\xc3" in line else (line + "\n").encode() for line in KEYFILE_LINES]
    texts += [p.read_bytes() for p in sorted((REPO_ROOT / "fuzz" / "corpus" / "keyfile").glob("*"))]
    texts += [p.read_bytes() for p in sorted(PCAPS.glob("*.keys"))]
    doc = (REPO_ROOT / "docs" / "keys.md").read_text()
    for block in re.findall(r"```\n(.*?)```", doc, re.S):
        texts.append(block.encode())
        texts += [(line + "\n").encode() for line in block.splitlines()]
    # Mutations of every line above: cut, doubled, a byte changed, a field dropped or repeated.
    rng = random.Random(12)
    lines = sorted({ln for t in texts for ln in t.split(b"\n") if b"=" in ln})
    alphabet = b"=# \t\r0x:.*g-Ff9_" + bytes([0, 1, 0x80, 0xFF])
    for ln in lines:
        for _ in range(6):
            i = rng.randrange(len(ln))
            op = rng.randrange(5)
            if op == 0:
                m = ln[:i]
            elif op == 1:
                m = ln[:i] + ln[i + 1 :]
            elif op == 2:
                m = ln[:i] + bytes([rng.choice(alphabet)]) + ln[i + 1 :]
            elif op == 3:
                words = ln.split(b" ")
                m = b" ".join(words[:1] + [w for w in words[1:] if rng.random() < 0.7])
            else:
                words = ln.split(b" ")
                m = ln + b" " + rng.choice(words[1:] or [b"x=1"])
            texts.append(m + b"\n")
    return texts


@pytest.fixture(scope="module")
def keyfile_texts() -> List[bytes]:
    return keyfile_corpus()


def test_keyfile_reader_matches_core(lua: Harness, keyfile_texts: List[bytes]) -> None:
    """Every text: the same verdict; refused with the same status, line and message; accepted with the same content."""
    seen = {"ok": 0, "keyfile-syntax": 0, "keyfile-bad-value": 0, "keyfile-duplicate": 0}
    messages = set()
    for text in keyfile_texts:
        want, got = core_keyfile(text), lua_keyfile(lua, text)
        assert got == want, text
        seen[want["status"]] += 1
        messages.add(want.get("message"))
    # The corpus reaches every verdict, and many distinct refusals.
    assert all(n > 5 for n in seen.values()), seen
    assert len(messages) > 120, len(messages)


def refcfg_corpus() -> List[bytes]:
    octets = lambda k: " ".join(f"{b:02x}" for b in k)  # noqa: E731
    base = f"{octets(MK0)}\n{octets(MK1)}\n"
    enc = base + "9A345678\ntransport\naes-gcm-128\n1\n6\n11\nno-vc\n"
    texts = [base, enc, base.replace(" 44 ", " 4 "), base.replace("\n", " "), enc + "anything after the VC\n",
             enc.replace("no-vc", "vc"), enc.replace("transport", "tunnel").replace("aes-gcm-128", "aes-gcm-256"),
             enc.replace("11\n", "63\n"), enc.replace("11\n", "64\n"), enc.replace("11\n", "0011\n"),
             enc.replace("11\n", "1a\n"), enc.replace("9A345678", "0x9A345678"), enc.replace("9A345678", "19A345678"),
             enc.replace("transport", "Transport"), enc.replace("aes-gcm-128", "aes-gmac-128"),
             enc.replace("no-vc", "novc"), enc.split("no-vc")[0], enc.split("6\n11")[0], base[:200], base[:1],
             "", "\n\n", base.replace(" 44 ", " 0x4 "), base.replace(" 44 ", " 344 "), base.replace(" 44 ", " +4 "),
             base + "9A345678", base + "9A345678 transport", "\v\f" + enc.replace("\n", "\r\n")]
    shared = SHARED_DIR / "reference" / "psp" / "cfg"
    files = [p.read_text() for p in sorted(shared.glob("*.cfg"))] if shared.is_dir() else []
    return [t.encode() for t in texts + files]


def core_refcfg(text: bytes) -> dict:
    cfg = ffi.new("pe_psp_refcfg *")
    err = ffi.new("pe_keyfile_error *")
    st = lib.pe_psp_refcfg_parse(text, len(text), cfg, err)
    if st != lib.PE_OK:
        return dict(status=status_name(st), line=err.line, message=ffi.string(err.message).decode())
    d = dict(status="ok", key0=bytes(cfg.key0).hex(), key1=bytes(cfg.key1).hex(), has_sa=bool(cfg.has_sa))
    if cfg.has_sa:
        d.update(spi=cfg.spi, tunnel=cfg.tunnel, version=cfg.version, crypt_offset=cfg.crypt_offset,
                 crypt_offset_ipv4=cfg.crypt_offset_ipv4, crypt_offset_ipv6=cfg.crypt_offset_ipv6, vc=cfg.vc)
    return d


def test_refcfg_reader_matches_core(lua: Harness) -> None:
    verdicts = set()
    for text in refcfg_corpus():
        want, got = core_refcfg(text), lua.call("refcfg", hx(text))
        assert got == want, text
        verdicts.add(want["status"])
    assert verdicts == {"ok", "keyfile-syntax", "keyfile-bad-value"}


# pelua itself, in the standalone Lua it was built for (it links no Lua: the interpreter provides one), answering
# "load <path>" with what load_keyfile says, as JSON.
PELUA_HARNESS = r"""
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local pelua = require "pelua"
local function json(v)
    local t = type(v)
    if t == "nil" then return "null" end
    if t == "boolean" then return tostring(v) end
    if t == "string" then
        return '"' .. v:gsub('[%c"\\\128-\255]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
    end
    local parts = {}
    for k, x in pairs(v) do parts[#parts + 1] = json(tostring(k)) .. ":" .. json(x) end
    return "{" .. table.concat(parts, ",") .. "}"
end
for line in io.stdin:lines() do
    local path = line:match("^load (.*)$")
    local k, err, st = pelua.load_keyfile(path)
    local r = { ok = k ~= nil, error = err, status = st }
    if k then
        r.reference_config = k:summary().reference_config
        k:close()
    end
    io.stdout:write(json(r), "\n")
    io.stdout:flush()
end
"""


class Pelua:
    """pelua.load_keyfile, the real module (build/lua/pelua.so) in the standalone Lua of its build."""

    def __init__(self, workdir: Path, lua: str) -> None:
        script = workdir / "pelua_harness.lua"
        script.write_text(PELUA_HARNESS)
        self.proc = subprocess.Popen([lua, str(script), str(ws.LUA_MODULE_DIR)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def load(self, path: Path) -> dict:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"load {path}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the pelua harness exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def pelua(workdir: Path) -> Iterator[Pelua]:
    """pelua for the Lua of the system's tshark, built when missing, run by that Lua's interpreter."""
    lua_version = ws.versions()[1] or "5.2"
    interpreter = shutil.which(f"lua{lua_version}")
    if interpreter is None:
        pytest.skip(f"lua{lua_version} is not installed: pelua cannot run outside tshark")
    if not (ws.LUA_MODULE_DIR / "pelua.so").exists():
        if shutil.which("cmake") is None:
            pytest.skip("cmake is needed to build pelua (cmake -S dissectors/lua -B build/lua)")
        for cmd in (["cmake", "-S", str(LUA_DIR), "-B", str(ws.LUA_MODULE_DIR)],
                    ["cmake", "--build", str(ws.LUA_MODULE_DIR)]):
            subprocess.run(cmd, check=True, capture_output=True, cwd=REPO_ROOT)
    h = Pelua(workdir, interpreter)
    yield h
    h.close()


def key_text_files(workdir: Path) -> List[Path]:
    """Key files every reader must take or refuse alike: good and bad lines, reference configs whole and cut, and
    files that are no key text at all."""
    octets = lambda k: " ".join(f"{b:02x}" for b in k)  # noqa: E731
    texts = {
        "bad.keys": "# ok\npsp-key spi=1 key=zz\n",
        "good.keys": f"psp-master key0={MK0.hex()}\n",
        "both.keys": f"psp-master key0={MK0.hex()} key1={MK1.hex()}\neesp-sa spi=1 suite=aes-gcm-16 key={K20}\n",
        "duplicate.keys": f"{E16}\n{E16}\n",
        "short.cfg": "34 44 8a\n",
        "decrypt.cfg": f"{octets(MK0)}\n{octets(MK1)}\n",
        "bad-octet.cfg": f"{octets(MK0)}\n{octets(MK1)[:-2]}zz\n",
        "encrypt.cfg": f"{octets(MK0)}\n{octets(MK1)}\n9A345678\ntunnel\naes-gcm-256\n0\n6\n11\nvc\n",
        "nul.keys": "psp-master key0=00\0\n",
        "empty.keys": "",
        "comments.keys": "# nothing but a comment\n\n",
    }
    paths = []
    for name, text in texts.items():
        paths.append(workdir / f"load-{name}")
        paths[-1].write_bytes(text.encode("latin-1"))
    shared = SHARED_DIR / "reference" / "psp" / "cfg"
    paths += sorted(shared.glob("*.cfg")) if shared.is_dir() else []
    huge = workdir / "load-huge.keys"  # above the 16 MiB every reader refuses (sparse: nothing is written)
    with open(huge, "wb") as f:
        f.truncate(16 * 1024 * 1024 + 1)
    return paths + [huge, workdir / "load-missing.keys", workdir]


def test_load_keyfile_matches_pelua(lua: Harness, pelua: Pelua, workdir: Path) -> None:
    """pecrypto.load_keyfile says what pelua.load_keyfile says of every file: accepted (a key file or a reference
    config, told apart by the core's rule), or refused with the same message ("path, line N: ..." for the text,
    "path: ..." for the file) and the same status, whose category the dissectors show."""
    statuses = set()
    for path in key_text_files(workdir):
        want, got = pelua.load(path), lua.call("load", str(path))
        got = {k: v for k, v in got.items() if v is not None}
        want = {k: v for k, v in want.items() if v is not None}
        assert got == want, path
        statuses.add(want.get("status", "ok"))
    assert {"ok", "keyfile-syntax", "keyfile-bad-value", "keyfile-duplicate", "capture-io",
            "invalid-argument"} <= statuses, statuses
    bad = workdir / "load-bad.keys"
    assert lua.call("load", str(bad)) == {
        "ok": False, "status": "keyfile-bad-value",
        "error": f"{bad}, line 2: psp-key: field 'key' is not a hex string (optional 0x, then hex digits)"}
    assert CoreKeys(bad.read_bytes(), str(bad)).error == f"{bad}, line 2: psp-key: field 'key' is not a hex string " \
                                                         "(optional 0x, then hex digits)"
    missing = workdir / "load-missing.keys"
    assert lua.call("load", str(missing))["error"] == f"{missing}: cannot open key file: No such file or directory"
    assert lua.call("load", str(workdir))["error"] == f"{workdir}: cannot read key file: Is a directory"
    cfg = workdir / "load-short.cfg"
    assert lua.call("load", str(cfg))["error"] == (f"{cfg}, line 1: google/psp reference config: master key 0: "
                                                   "expected 32 hex octets, the file ends after 3")


def detection_corpus() -> List[bytes]:
    """Texts on both sides of the rule: reference configs, key-file lines, and the edges of 'one or two hex
    digits first, no =' (whitespace of every kind, NUL, signs, 0x, long tokens, an = anywhere)."""
    edges = ["", " ", "\n\n", "1", "ab", "AB", "abc", "g", "0x12", "+1", "-1", "1\0", "\0", "a=b", "12 =", "12\n=",
             "1 2 3", "\v\f\t\r\n 7f rest", "7f\x85", "\xa07f", "7f=", "12" + "\n" * 3 + "x=1", "zz 12", "1g",
             "12\x0b34", "# 12", "12 # comment", "psp-master key0=" + MK0.hex(), MK0.hex()]
    texts = [t.encode("latin-1") for t in edges]
    texts += refcfg_corpus()
    texts += [(line + "\n").encode("latin-1") for line in KEYFILE_LINES]
    return texts


def test_refcfg_detection_matches_core(lua: Harness, pelua: Pelua, workdir: Path) -> None:
    """pecrypto's copy of the rule that tells a reference config from a key file decides as the core's
    pe_psp_refcfg_detect does (through pelua, which asks it) on every text of the corpus."""
    detected = set()
    for i, text in enumerate(detection_corpus()):
        path = workdir / f"detect-{i}.txt"
        path.write_bytes(text)
        res = pelua.load(path)
        # pelua read it as a reference config when it took it as one, or refused it as one.
        core = res.get("reference_config") is True or ": google/psp reference config: " in (res.get("error") or "")
        assert lua.call("detect", hx(text)) is core, text
        detected.add(core)
        path.unlink()
    assert detected == {True, False}


def test_scripts_are_generated_from_the_source() -> None:
    """psp.lua and eesp.lua hold src/pecrypto.lua exactly as build_scripts.py inlines it."""
    proc = subprocess.run([os.environ.get("PYTHON", "python3"), str(LUA_DIR / "build_scripts.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    sys.path.insert(0, str(LUA_DIR))
    try:
        import build_scripts
    finally:
        sys.path.remove(str(LUA_DIR))
    source = build_scripts.inlined(SOURCE.read_text())
    assert "local CATEGORY_LIST, STATUS_LIST = ...\n" in source
    for script in (PSP_LUA, EESP_LUA):
        text = script.read_text()
        assert text.count("-- BEGIN GENERATED pecrypto") == 1 and source in text, script.name
        # each table once: the status tables as plain code (handed to the inlined source), the suites in the source
        for table in ("local CATEGORY_LIST = {", "local STATUS_LIST = {", "local SUITE_LIST = {",
                      "local PSP_VERSION_LIST = {", "local EESP_SA_FIELDS = {"):
            assert text.count(table) == 1, (script.name, table)


@pytest.mark.parametrize("luac", ["luac5.2", "luac5.4"])
def test_scripts_compile(luac: str) -> None:
    """Both scripts parse as Lua 5.2 (Wireshark 4.0) and 5.4 (4.4, 4.6); the inlined source as 5.4."""
    exe = shutil.which(luac)
    if exe is None:
        pytest.skip(f"{luac} is not installed")
    files = [PSP_LUA, EESP_LUA] + ([SOURCE] if luac == "luac5.4" else [])
    for f in files:  # one file per run: luac5.4 -p with several files can crash on Debian 12
        proc = subprocess.run([exe, "-p", str(f)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


