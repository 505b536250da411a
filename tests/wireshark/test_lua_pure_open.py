"""The PSP/EESP open logic of dissectors/lua/src/pecrypto.lua under a standalone ``lua5.4`` against
pe_psp_open / pe_eesp_open, the calls pelua makes, with Python's AEADs behind the pipe
(tests/wireshark/luaharness.py), on every vector pcap and on mutilated copies of its packets; and the
state it keeps for forged packets and Sub SAs stays bounded.
"""
from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Dict, Iterator, Optional, Sequence

import pytest

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")

from pecore._native import ffi, lib  # noqa: E402

from luaharness import (  # noqa: E402
    CoreKeys,
    Harness,
    K,
    MK0,
    MK1,
    clear_packets,
    eesp_octets,
    frames,
    hx,
    keyfile_ip_protocol,
    lua,
    psp_payload,
    status_name,
    vector_pcaps,
    workdir,
)


# ---------------------------------------------------------------------------------------------- 1. opening packets

PSP_INFO_KEYS = ("next_header", "hdr_ext_len", "crypt_offset", "version", "virt", "spi", "iv_hex", "icv_valid",
                 "status", "category")
EESP_INFO_KEYS = ("spi", "session_id", "opt_len", "seq_hex", "seq_present", "iv_len", "icv_len", "payload_offset",
                  "full_format", "format", "next_header", "pad_len", "sa_found", "icv_valid", "status", "category",
                  "suite", "key_bits", "mode")


def mutations(data: bytes, rng: random.Random, hot: Sequence[int]) -> Iterator[bytes]:
    """`data`, cut at the edges that matter, and with single octets changed (the `hot` header octets first)."""
    yield data
    n = len(data)
    if n == 0:
        return
    for cut in sorted({0, 1, 7, 8, 15, 16, 17, 24, 31, 32, 33, n - 17, n - 16, n - 9, n - 8, n - 1}):
        if 0 <= cut < n:
            yield data[:cut]
    for i in list(hot) + [rng.randrange(n) for _ in range(3)] + [n - 1]:
        if 0 <= i < n:
            yield data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
            yield data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]


# What the harness's load says of a key file (not a reference config) it took.
LOADED = {"ok": True, "reference_config": False}


def write_keys(dirpath: Path, name: str, text: bytes) -> Path:
    p = dirpath / name
    p.write_bytes(text)
    p.chmod(0o644)
    return p


def compare_open(lua_res: dict, status: str, inner: Optional[bytes], info: dict, keys: Sequence[str], what) -> None:
    assert lua_res["status"] == status, (what, lua_res, info)
    assert (lua_res.get("inner") or "") == (hx(inner) if inner is not None else ""), what
    assert lua_res["info_message"] == ffi.string(lib.pe_status_message(
        next(i for i in range(200) if status_name(i) == status))).decode(), what
    for k in keys:
        if k in info:
            assert lua_res.get("info_" + k) == info[k], (what, k, lua_res.get("info_" + k), info[k])
    if "ext" in info:
        assert (lua_res.get("info_ext") or "") == info["ext"], what


def test_psp_open_matches_core(lua: Harness, workdir: Path) -> None:
    """Every packet of every PSP vector pcap, whole, cut and with octets changed: pe_psp_open's verdict and output."""
    rng = random.Random(3)
    statuses: Dict[str, int] = {}
    for pcap, keys in vector_pcaps("psp"):
        text = keys.read_bytes()
        core = CoreKeys(text)
        assert lua.call("load", str(write_keys(workdir, "psp.keys", text))) == LOADED
        for pkt in frames(pcap):
            payload = psp_payload(pkt)
            if payload is None:
                continue
            for m in mutations(payload, rng, hot=(0, 1, 2, 3, 4, 8, 16)):
                status, inner, info = core.psp_open(m)
                compare_open(lua.call("psp", hx(m)), status, inner, info, PSP_INFO_KEYS, (pcap.name, m.hex()))
                statuses[status] = statuses.get(status, 0) + 1
    for want in ("ok", "authentication-failed", "no-key", "psp-truncated", "psp-always-one-bit-clear",
                 "psp-unsupported-version", "psp-bad-hdr-ext-len", "psp-vc-without-room",
                 "psp-crypt-offset-past-payload"):
        assert statuses.get(want, 0) > 0, (want, statuses)


def test_psp_open_reference_config(lua: Harness, workdir: Path) -> None:
    """A google/psp reference config serves as the key file: its master keys decrypt, as in pelua and the plugin."""
    octets = " ".join(f"{b:02x}" for b in MK0) + "\n" + " ".join(f"{b:02x}" for b in MK1) + "\n"
    cfg = write_keys(workdir, "decrypt.cfg", octets.encode())
    assert lua.call("load", str(cfg)) == {"ok": True, "reference_config": True}
    core = CoreKeys.from_refcfg(cfg.read_bytes())
    for spi, version in ((0x9A345678, 0), (0x1A345678, 1), (0x1A345679, 2), (0x9A34567A, 3)):
        enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=spi, version=version, mode="transport")
        for pkt in clear_packets(4, seed=version):
            payload = psp_payload(enc.encrypt(pkt))
            status, inner, info = core.psp_open(payload)
            assert status == "ok"
            compare_open(lua.call("psp", hx(payload)), status, inner, info, PSP_INFO_KEYS, spi)


def test_eesp_open_matches_core(lua: Harness, workdir: Path) -> None:
    """Every packet of every EESP vector pcap (all suites, SSKDFs, formats, options), whole, cut and changed."""
    rng = random.Random(4)
    statuses: Dict[str, int] = {}
    for pcap, keys in vector_pcaps("eesp"):
        text = keys.read_bytes()
        core = CoreKeys(text)
        assert lua.call("load", str(write_keys(workdir, "eesp.keys", text))) == LOADED
        proto = keyfile_ip_protocol(text.decode())
        for pkt in frames(pcap):
            found = eesp_octets(pkt, proto)
            if found is None:
                continue
            e, ipv, dst = found
            for m in mutations(e, rng, hot=(0, 1, 2, 3, 4, 7, 8, 9, 10, 16, 20, 24)):
                status, inner, info = core.eesp_open(m, ipv, dst)
                res = lua.call("eesp", hx(m), ipv, dst.hex())
                compare_open(res, status, inner, info, EESP_INFO_KEYS, (pcap.name, m.hex()))
                statuses[status] = statuses.get(status, 0) + 1
    for want in ("ok", "authentication-failed", "eesp-no-sa", "eesp-truncated", "eesp-compat-bit-clear",
                 "eesp-unsupported-version", "eesp-reserved-bits-set", "eesp-options-overrun",
                 "eesp-bad-crypt-offset-option", "eesp-bad-payload-offset", "eesp-crypt-offset-past-payload",
                 "eesp-crypt-offset-not-allowed", "eesp-sub-sa-out-of-range", "eesp-sequence-zero",
                 "eesp-dummy-packet", "eesp-bad-inner-packet", "eesp-bad-pad-length"):
        assert statuses.get(want, 0) > 0, (want, statuses)


def test_eesp_open_by_destination(lua: Harness, workdir: Path) -> None:
    """Two SAs with one SPI: the one bound to the packet's destination wins over the one for any destination."""
    text = (f"eesp-sa spi=0x7000 suite=aes-gcm-16 key={bytes(range(20)).hex()} mode=tunnel\n"
            f"eesp-sa spi=0x7000 suite=aes-ccm-8 key={bytes(range(5, 24)).hex()} mode=tunnel dst=192.0.2.9\n"
            f"eesp-sa spi=0x7000 suite=chacha20-poly1305 key={bytes(range(36)).hex()} mode=tunnel "
            "dst=2001:db8::9\n").encode()
    core = CoreKeys(text)
    assert lua.call("load", str(write_keys(workdir, "dst.keys", text))) == LOADED
    sas = [pyeesp.SA(0x7000, "aes-gcm-16", key=bytes(range(20))),
           pyeesp.SA(0x7000, "aes-ccm-8", key=bytes(range(5, 24)), dst="192.0.2.9"),
           pyeesp.SA(0x7000, "chacha20-poly1305", key=bytes(range(36)), key_bits=256, dst="2001:db8::9")]
    dsts = [(4, bytes([192, 0, 2, 9])), (4, bytes([192, 0, 2, 10])), (6, ipaddress.ip_address("2001:db8::9").packed),
            (6, ipaddress.ip_address("2001:db8::a").packed)]
    oks = 0
    for sa in sas:
        for pkt in clear_packets(2, seed=7):
            e, _, _ = eesp_octets(sa.encrypt(pkt))
            for ipv, dst in dsts:
                for d in (dst, None):
                    status, inner, info = core.eesp_open(e, ipv, d)
                    res = lua.call("eesp", hx(e), ipv, d.hex() if d else "none")
                    compare_open(res, status, inner, info, EESP_INFO_KEYS, (sa, ipv, d))
                    oks += status == "ok"
    assert oks >= 8


def test_sub_sa_table_is_bounded_by_max_live_sub_sas(lua: Harness, workdir: Path) -> None:
    """As the core (docs/keys.md, max-live-sub-sas=), the scripts keep at most that many Sub SA keys per SA, the
    least recently used going first; an evicted Session ID still decrypts (its key is derived again)."""
    root = K(32, 2)
    text = (f"eesp-sa spi=0x300 suite=aes-gcm-16 root-key={root.hex()} sskdf=hkdf-sha256 mode=tunnel "
            "max-live-sub-sas=3\n").encode()
    assert lua.call("load", str(write_keys(workdir, "live.keys", text))) == LOADED
    tx = pyeesp.SA(0x300, "aes-gcm-16", root_key=root, sskdf="hkdf-sha256", mode="tunnel")
    pkt = clear_packets(1)[0]
    wire = {sid: eesp_octets(tx.encrypt(pkt, sid)) for sid in range(1, 8)}

    def open_(sid: int) -> str:
        e, ipv, dst = wire[sid]
        return lua.call("eesp", hx(e), ipv, dst.hex())["status"]

    for sid in (1, 2, 3):
        assert open_(sid) == "ok"
    assert lua.call("state")["eesp_subs"] == 3
    assert open_(1) == "ok"  # 1 is now the most recently used: 2 goes next
    for sid in range(4, 8):
        assert open_(sid) == "ok"
        assert lua.call("state")["eesp_subs"] == 3
    for sid in range(1, 8):  # evicted or not, every Session ID still opens
        assert open_(sid) == "ok"
        assert lua.call("state")["eesp_subs"] == 3


def test_forged_packets_keep_no_keys(lua: Harness, workdir: Path) -> None:
    """As in the core, a key derived for a packet is kept only once a packet verified under it: forged SPIs and
    Session IDs build no state."""
    root = K(32, 1)
    text = (f"psp-master key0={MK0.hex()}\n"
            f"eesp-sa spi=0x100 suite=aes-gcm-16 root-key={root.hex()} sskdf=hkdf-sha256 mode=tunnel\n").encode()
    assert lua.call("load", str(write_keys(workdir, "state.keys", text))) == LOADED
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1234, version=0, mode="transport")
    good = psp_payload(enc.encrypt(clear_packets(1)[0]))
    forged = good[:-1] + bytes([good[-1] ^ 1])
    tx = pyeesp.SA(0x100, "aes-gcm-16", root_key=root, sskdf="hkdf-sha256", mode="tunnel")
    e_good, ipv, dst = eesp_octets(tx.encrypt(clear_packets(1)[0], 5))
    e_forged = e_good[:-1] + bytes([e_good[-1] ^ 1])
    for p in (forged, forged):
        assert lua.call("psp", hx(p))["status"] == "authentication-failed"
    for e in (e_forged, e_forged):
        assert lua.call("eesp", hx(e), ipv, dst.hex())["status"] == "authentication-failed"
    assert lua.call("state") == {"psp_cache": 0, "eesp_subs": 0}
    assert lua.call("psp", hx(good))["status"] == "ok"
    assert lua.call("eesp", hx(e_good), ipv, dst.hex())["status"] == "ok"
    assert lua.call("state") == {"psp_cache": 1, "eesp_subs": 1}
    assert lua.call("psp", hx(forged))["status"] == "authentication-failed"  # the kept key still checks the ICV
