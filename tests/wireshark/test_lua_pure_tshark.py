"""psp.lua and eesp.lua without pelua inside tshark.

A tshark whose Lua has GcryptCipher (Wireshark 4.6+; these tests are marked ``tshark`` and skip elsewhere):
the scripts decrypt the vector pcaps and captures made by pypsp/pyeesp, and per packet the status and the
decrypted bytes must be the core's.  Without GcryptCipher (hidden by a script loaded first, as on 4.4) the
headers are dissected and a note says what would decrypt.

The tshark is the system's.  For development on a machine whose tshark is older, PE_TSHARK_CHROOT=<dir> runs
the tshark of a Debian chroot instead (files are copied into <dir>/tmp; needs root), and where the host has
tshark 4.0 with pelua as well, the two paths are compared field for field.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

import wireshark as ws

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")

from pecore._native import ffi, lib  # noqa: E402
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE  # noqa: E402

from luaharness import (  # noqa: E402
    CoreKeys,
    EESP_LUA,
    HIDE_GCRYPT,
    K,
    MK0,
    MK1,
    PSP_LUA,
    Tshark,
    _sample_traffic,
    clear_packets,
    eesp_octets,
    frames,
    keyfile_ip_protocol,
    psp_payload,
    status_name,
    tshark46,
    tshark54,
    vector_pcaps,
    workdir,
    write_frames,
)


# ---------------------------------------------------------------------------------------------- 2. tshark 4.6+

def parse_hex_dumps(text: str) -> Dict[int, Dict[str, bytes]]:
    """`tshark -P -x` with the frame number as first column: per frame, its data sources by name."""
    out: Dict[int, Dict[str, bytes]] = {}
    frame: Optional[int] = None
    source: Optional[str] = None
    for line in text.splitlines():
        m = re.match(r"^\s*(\d+)(?:\s+(\S+))?\s*$", line)
        if m and source is None:
            frame = int(m.group(1))
            out[frame] = {"": (m.group(2) or "").encode()}
            continue
        if not line.strip():
            source = None
            continue
        m = re.match(r"^(.+) \((\d+) bytes?\):$", line)
        if m and frame is not None:
            source = m.group(1)
            out[frame][source] = b""
            continue
        if source is not None and re.match(r"^[0-9a-f]{4,}  ", line):
            out[frame][source] += bytes.fromhex(line.split("  ")[1])
    return out


def decrypted_sources(t: Tshark, pcap: str, proto: str, scripts: Sequence[str], opts: Sequence[str]):
    """Per frame, the proto's decrypted data source (None when there is none)."""
    proc = t.run(["-n", "-r", pcap, "-o", 'gui.column.format:"No.","%m"', *opts, "-P", "-x"], scripts)
    assert "Lua Error" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    name = "Decrypted PSP" if proto == "psp" else "Decrypted EESP"
    return {n: d.get(name) for n, d in parse_hex_dumps(proc.stdout).items()}


def first(v):
    return v[0] if isinstance(v, list) else v


def layer_experts(layer) -> List[Tuple[str, str]]:
    """(field, message) of the expert items in one -T json layer."""
    found: List[Tuple[str, str]] = []

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "_ws.expert":
                    for e in v if isinstance(v, list) else [v]:
                        found.extend((n, e.get("_ws.expert.message", "")) for n in e if ".expert." in n)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(layer)
    return found


def status_expert(proto: str, status: str) -> str:
    """The expert item a status gets: the one its core category names (core/include/pe/status.h)."""
    return f"{proto}.expert.{CATEGORY_BY_CODE[status].replace('-', '_')}"


def dissected(t: Tshark, pcap: str, proto: str, scripts: Sequence[str], opts: Sequence[str]) -> List[dict]:
    """Per frame: the octets the dissector was handed (its protocol item's), its status, its expert items, the
    outer destination and whether the frame was cut by the capture."""
    # -J: the layers with everything below them (the expert items hang below the fields they are about).
    proc = t.run(["-n", "-r", pcap, *opts, "-T", "json", "-x", "--no-duplicate-keys", "-J", f"frame ip ipv6 {proto}"],
                 scripts)
    assert "Lua Error" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    out = []
    for pkt in json.loads(proc.stdout or "[]"):
        layers = pkt["_source"]["layers"]
        frame = first(layers["frame"])
        raw = layers.get(f"{proto}_raw")  # [hex, pos, len, ...], or a list of those for repeated layers
        if raw and isinstance(raw[0], list):
            raw = raw[0]
        fields = first(layers.get(proto)) or {}
        # The outer header: the first IP layer (eesp.lua matches SAs on the destination it sets).
        ip, ipv6 = first(layers.get("ip")), first(layers.get("ipv6"))
        ipv, dst = 0, None
        if ip and "ip.dst" in ip:
            ipv, dst = 4, ipaddress.ip_address(first(ip["ip.dst"])).packed
        elif ipv6 and "ipv6.dst" in ipv6:
            ipv, dst = 6, ipaddress.ip_address(first(ipv6["ipv6.dst"])).packed
        out.append(dict(raw=bytes.fromhex(raw[0]) if raw else None, status=first(fields.get(f"{proto}.status", "")),
                        cut=int(frame["frame.cap_len"]) < int(frame["frame.len"]), ipv=ipv, dst=dst,
                        experts=layer_experts(first(layers.get(proto)))))
    return out


def check_capture_against_core(t: Tshark, pcap: Path, keys: Path, proto: str, scripts: Sequence[str],
                               opts: Sequence[str] = ()) -> Dict[str, int]:
    """psp.status / eesp.status and the decrypted bytes of every frame, against pe_psp_open / pe_eesp_open on the
    octets the dissector was handed (a frame the capture cut: capture-packet-cut, as the plugin says); and the
    expert item of each status the one its core category names, with the core's message and the status's name."""
    text = keys.read_bytes()
    core = CoreKeys(text)
    opts = ["-o", f"{proto}.keyfile:{t.stage(keys)}", *opts]
    if proto == "eesp" and keyfile_ip_protocol(text.decode()) != 49:
        opts += ["-o", f"eesp.ip_protocol:{keyfile_ip_protocol(text.decode())}"]
    staged = t.stage(pcap)
    views = dissected(t, staged, proto, scripts, opts)
    sources = decrypted_sources(t, staged, proto, scripts, opts)
    assert len(views) == len(sources) > 0, pcap.name
    statuses: Dict[str, int] = {}
    for n, v in enumerate(views, 1):
        where = f"{pcap.name} frame {n}"
        if v["raw"] is None:
            assert sources[n] is None, where
            continue
        if v["cut"]:
            status, inner = "capture-packet-cut", None
        elif proto == "psp":
            status, inner, _ = core.psp_open(v["raw"])
        else:
            status, inner, _ = core.eesp_open(v["raw"], v["ipv"], v["dst"])
        assert v["status"] == status, (where, v["status"], status)
        assert sources[n] == inner, where
        if status != "ok":
            message = ffi.string(lib.pe_status_message(
                next(i for i in range(lib.PE_STATUS_COUNT) if status_name(i) == status))).decode()
            titled = [m for name, m in v["experts"] if name == status_expert(proto, status)]
            assert any(m.endswith(f": {message} ({status})") for m in titled), (where, v["experts"])
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


@pytest.mark.tshark
def test_tshark_psp_vector_pcaps(tshark46: Tshark) -> None:
    """Every PSP vector pcap (versions 0-3, derived and master keys, every rejection) through psp.lua."""
    psp = tshark46.stage(PSP_LUA)
    total: Dict[str, int] = {}
    for pcap, keys in vector_pcaps("psp"):
        for k, v in check_capture_against_core(tshark46, pcap, keys, "psp", [psp]).items():
            total[k] = total.get(k, 0) + v
    assert total.get("ok", 0) > 300 and total.get("authentication-failed", 0) > 20, total
    assert len(total) >= 6, total


@pytest.mark.tshark
def test_tshark_eesp_vector_pcaps(tshark46: Tshark) -> None:
    """Every EESP vector pcap (all 11 suites, 128/192/256-bit keys, the three SSKDFs, both AAD variants, options,
    formats, UDP encapsulation, every rejection) through eesp.lua."""
    eesp = tshark46.stage(EESP_LUA)
    total: Dict[str, int] = {}
    for pcap, keys in vector_pcaps("eesp"):
        for k, v in check_capture_against_core(tshark46, pcap, keys, "eesp", [eesp]).items():
            total[k] = total.get(k, 0) + v
    assert total.get("ok", 0) > 500 and total.get("authentication-failed", 0) > 50, total
    assert len(total) >= 12, total


def tshark_fields(t: Tshark, pcap: str, names: Sequence[str], scripts: Sequence[str],
                  opts: Sequence[str] = ()) -> List[dict]:
    args = ["-n", "-r", pcap, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", *opts]
    for n in names:
        args += ["-e", n]
    proc = t.run(args, scripts)
    assert "Lua Error" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    # tshark 4.4+ prints booleans as True/False, 4.0 as 1/0.
    norm = {"True": "1", "False": "0"}
    return [{n: ",".join(norm.get(x, x) for x in v.split(",")) if v else "" for n, v in zip(names, line.split("\t"))}
            for line in proc.stdout.splitlines()]



# Every PSP version, transport and tunnel, VCs in clear and encrypted by the crypt offset; master key 0 derives
# for SPIs with MSB 0, psp-key lines serve some SPIs with MSB 1 (versioned or not), the rest have no key.
PSP_SAS = [
    dict(spi=0x1A345678, version=0, mode="transport", crypt_offset=1),
    dict(spi=0x1A345679, version=1, mode="tunnel", crypt_offset_ipv4=8, crypt_offset_ipv6=13, vc=K(8, 0xA0)),
    dict(spi=0x1A34567A, version=2, mode="transport"),
    dict(spi=0x1A34567B, version=3, mode="tunnel", vc=K(8, 0x10)),
    dict(spi=0x1A34567C, version=0, mode="transport", crypt_offset=0, vc=K(8, 0xB0)),
    dict(spi=0x1A34567D, version=1, mode="transport", crypt_offset=1, vc=K(8, 0xC0)),
    dict(spi=0x9A345678, version=0, mode="transport", key=K(16, 0x40)),
    dict(spi=0x9A345679, version=3, mode="tunnel", key=K(32, 0x50)),
    dict(spi=0x9A34567A, version=1, mode="transport", key=K(32, 0x60)),  # no key for it in the file
]
PSP_KEYS = (f"psp-master key0={MK0.hex()}\n"
            f"psp-key spi=0x9A345678 version=0 key={K(16, 0x40).hex()}\n"
            f"psp-key spi=0x9A345679 key={K(32, 0x50).hex()}\n")

# Every suite, every key size it takes, the three SSKDFs with Sub SAs, both AAD variants, forced formats, no
# Sequence Numbers, Crypt Offset options (allowed and not), UDP encapsulation, SAs bound to a destination.
EESP_SAS: List[Tuple[dict, str]] = []
_spi = 0x4000
for _suite in ("aes-gcm-8", "aes-gcm-12", "aes-gcm-16", "aes-ccm-8", "aes-ccm-12", "aes-ccm-16", "aes-gmac",
               "aes-gcm-16-iiv", "aes-ccm-8-iiv"):
    for _bits in (128, 192, 256):
        _salt = 3 if "ccm" in _suite else 4
        _key = K(_bits // 8 + _salt, _spi)
        EESP_SAS.append((dict(spi=_spi, suite=_suite, key=_key, key_bits=_bits, mode=("tunnel", "transport")[_spi % 2]),
                         f"eesp-sa spi={_spi:#x} suite={_suite} key-bits={_bits} key={_key.hex()} "
                         f"mode={('tunnel', 'transport')[_spi % 2]}"))
        _spi += 1
for _suite in ("chacha20-poly1305", "chacha20-poly1305-iiv"):
    EESP_SAS.append((dict(spi=_spi, suite=_suite, key=K(36, 3), key_bits=256, mode="tunnel"),
                     f"eesp-sa spi={_spi:#x} suite={_suite} key={K(36, 3).hex()} mode=tunnel"))
    _spi += 1
for _sskdf, _n in (("hkdf-sha256", 32), ("hkdf-sha384", 48), ("hkdf-sha512", 64)):
    for _suite, _bits in (("aes-gcm-16", 256), ("aes-ccm-8", 192), ("chacha20-poly1305", 256), ("aes-gmac", 128)):
        EESP_SAS.append((dict(spi=_spi, suite=_suite, root_key=K(_n, _spi), sskdf=_sskdf, key_bits=_bits,
                              mode="tunnel", max_sub_sa_id=7, sub_sas=4),
                         f"eesp-sa spi={_spi:#x} suite={_suite} key-bits={_bits} root-key={K(_n, _spi).hex()} "
                         f"sskdf={_sskdf} mode=tunnel max-sub-sa-id=7"))
        _spi += 1
for _kw, _line in (
    (dict(aad="linux-xfrm", mode="transport", align_options=False, udp_encap=True),
     "aad=linux-xfrm mode=transport align=0"),
    (dict(format="full", mode="tunnel"), "format=full mode=tunnel"),
    (dict(seq=False, mode="transport", anti_replay=False), "seq=0 mode=transport"),
    (dict(crypt_offset=2, max_crypt_offset=8, mode="transport"), "max-crypt-offset=8 mode=transport"),
    (dict(crypt_offset=3, max_crypt_offset=8, mode="tunnel"), "max-crypt-offset=2 mode=tunnel"),
    (dict(mode="tunnel", dst="192.0.2.77", outer_to="192.0.2.77"), "mode=tunnel dst=192.0.2.77"),
    (dict(mode="tunnel", udp_encap=True), "mode=tunnel"),
):
    _key = K(20, _spi)
    EESP_SAS.append((dict(spi=_spi, suite="aes-gcm-16", key=_key, **_kw),
                     f"eesp-sa spi={_spi:#x} suite=aes-gcm-16 key={_key.hex()} {_line}"))
    _spi += 1
EESP_KEYS = "".join(line + "\n" for _, line in EESP_SAS)


@pytest.fixture(scope="module")
def pure_captures(workdir: Path) -> Dict[str, Tuple[Path, Path]]:
    """A PSP and an EESP capture made by pypsp/pyeesp, with their key files."""
    psp_pkts = []
    for i, sa in enumerate(PSP_SAS):
        kw = dict(sa)
        key = kw.pop("key", None)
        enc = pypsp.Encryptor(key=key, **kw) if key else pypsp.Encryptor(master_keys=(MK0, MK1), **kw)
        psp_pkts += [enc.encrypt(p) for p in clear_packets(5, seed=i)]
    eesp_pkts = []
    for i, (sa, _) in enumerate(EESP_SAS):
        kw = dict(sa)
        sub_sas, outer_to = kw.pop("sub_sas", 1), kw.pop("outer_to", None)
        if outer_to:  # an outer header to the SA's destination, instead of a copy of the inner one
            kw["tunnel_header"] = _sample_traffic().ipv4("192.0.2.1", outer_to, 17, 1, 2, b"", 0)[:20]
        tx = pyeesp.SA(**kw)
        for j, p in enumerate(clear_packets(4, seed=i % 7)):
            eesp_pkts.append(tx.encrypt(p, j % sub_sas))
    out = {}
    for name, pkts, keys in (("psp", psp_pkts, PSP_KEYS), ("eesp", eesp_pkts, EESP_KEYS)):
        cap = write_frames(workdir / f"pure_{name}.pcap", pkts)
        kf = workdir / f"pure_{name}.keys"
        kf.write_text(keys)
        kf.chmod(0o644)
        out[name] = (cap, kf)
    return out


@pytest.mark.tshark
def test_tshark_psp_capture(tshark46: Tshark, pure_captures) -> None:
    """pypsp's packets: the core's status and bytes, and the fields that come from decrypting (the VC)."""
    cap, keys = pure_captures["psp"]
    script = tshark46.stage(PSP_LUA)
    statuses = check_capture_against_core(tshark46, cap, keys, "psp", [script])
    assert statuses == {"ok": 40, "no-key": 5}, statuses
    core = CoreKeys(keys.read_bytes())
    names = ["psp.spi", "psp.status", "psp.icv_good", "psp.icv_bad", "psp.vc", "psp.sectoken", "psp.virtkey",
             "_ws.expert.message", "frame.protocols"]
    rows = tshark_fields(tshark46, tshark46.stage(cap), names, [script], ["-o", f"psp.keyfile:{tshark46.stage(keys)}"])
    for row, pkt in zip(rows, frames(cap)):
        status, inner, info = core.psp_open(psp_payload(pkt))
        assert row["psp.status"] == status
        # As in the plugin: the ICV fields only where the ICV was checked.
        checked = status in ("ok", "authentication-failed")
        assert row["psp.icv_good"] == (("1" if status == "ok" else "0") if checked else "")
        assert row["psp.icv_bad"] == (("1" if status == "authentication-failed" else "0") if checked else "")
        if status == "ok":
            assert "udp:psp" in row["frame.protocols"] and row["frame.protocols"].count(":ip") >= 1
            if info["virt"]:
                vc = int(info["ext"][:16], 16)  # as sent, decrypted where the crypt offset hid it
                assert int(row["psp.vc"], 16) == vc
                assert int(row["psp.sectoken"], 16) == vc >> 32 and int(row["psp.virtkey"], 16) == vc & 0xFFFFFFFF
        else:
            assert "No key: no key configured for this SPI (no-key)" in row["_ws.expert.message"]


@pytest.mark.tshark
def test_tshark_eesp_capture(tshark46: Tshark, pure_captures) -> None:
    """pyeesp's packets over every suite, key size and SSKDF: the core's status and bytes, and what the SA tells."""
    cap, keys = pure_captures["eesp"]
    script = tshark46.stage(EESP_LUA)
    statuses = check_capture_against_core(tshark46, cap, keys, "eesp", [script])
    assert set(statuses) == {"ok", "eesp-crypt-offset-not-allowed"}, statuses
    core = CoreKeys(keys.read_bytes())
    names = ["eesp.spi", "eesp.status", "eesp.suite", "eesp.format", "eesp.next_header", "eesp.pad_len",
             "eesp.icv_good", "eesp.icv_bad", "eesp.seq", "eesp.iv", "eesp.icv", "eesp.session_id",
             "_ws.expert.message"]
    rows = tshark_fields(tshark46, tshark46.stage(cap), names, [script], ["-o", f"eesp.keyfile:{tshark46.stage(keys)}"])
    suites, sessions = set(), set()
    for row, pkt in zip(rows, frames(cap)):
        e, ipv, dst = eesp_octets(pkt)
        status, inner, info = core.eesp_open(e, ipv, dst)
        where = (row["eesp.spi"], status)
        assert row["eesp.status"] == status, where
        assert row["eesp.suite"] == info["suite"] and row["eesp.format"] == info["format"], where
        assert row["eesp.icv_good"] == ("1" if info["icv_valid"] else "0"), where
        assert row["eesp.icv_bad"] == "0", where
        icv = e[len(e) - info["icv_len"] :]
        assert row["eesp.icv"] == icv.hex(), where
        if info["iv_len"]:
            off = info["payload_offset"] - info["iv_len"]
            assert row["eesp.iv"] == e[off : info["payload_offset"]].hex(), where
        assert row["eesp.seq"] == (str(int(info["seq_hex"], 16)) if info["seq_present"] else ""), where
        if status == "ok":
            assert row["eesp.next_header"] == str(info["next_header"]) and row["eesp.pad_len"] == str(info["pad_len"])
        else:
            assert "Crypt Offset option not allowed" in row["_ws.expert.message"], where
        suites.add((info["suite"], info["key_bits"]))
        sessions.add((info["spi"], info["session_id"]))
    assert len(suites) == 9 * 3 + 2, sorted(suites)
    assert len(sessions) > len(EESP_SAS) + 20


@pytest.mark.tshark
def test_tshark_key_problems(tshark46: Tshark, pure_captures, workdir: Path) -> None:
    """Wrong keys, no key file, a key file the core refuses or that cannot be read, a reference config: the
    statuses and expert items the C plugin gives (pelua's path too); a key-file problem on every packet left
    without a key (its category's item naming file, line and the core's message, never a key) and once per load
    on the console."""
    cap, _ = pure_captures["psp"]
    staged, script = tshark46.stage(cap), tshark46.stage(PSP_LUA)
    names = ["psp.spi", "psp.status", "psp.icv_good", "psp.icv_bad", "_ws.expert.message"]
    wrong = tshark46.stage_bytes(f"psp-master key0={bytes(32).hex()} key1={K(32, 9).hex()}\n".encode(), "wrong.keys")
    for row in tshark_fields(tshark46, staged, names, [script], ["-o", f"psp.keyfile:{wrong}"]):
        assert row["psp.status"] == "authentication-failed" and row["psp.icv_bad"] == "1", row
        assert "Authentication failed: ICV verification failed (authentication-failed)" in row["_ws.expert.message"]
    for row in tshark_fields(tshark46, staged, names, [script]):
        assert row["psp.status"] == "no-key" and row["psp.icv_good"] == row["psp.icv_bad"] == "", row
        assert "No key: no key configured for this SPI (no-key)" in row["_ws.expert.message"], row
    bad_text = f"psp-master key0={MK0.hex()}\npsp-key spi=1 version=1 key={K(16).hex()}\n".encode()
    bad = tshark46.stage_bytes(bad_text, "bad.keys")
    want = CoreKeys(bad_text, bad).error  # what pelua.load_keyfile says
    assert want and "line 2" in want
    args = ["-n", "-r", staged, "-2", "-T", "fields", "-e", "psp.status", "-e", "_ws.expert.message",
            "-o", f"psp.keyfile:{bad}"]
    proc = tshark46.run(args, [script])
    assert [line for line in proc.stderr.splitlines() if bad in line] == [f"psp.lua: PSP key file {want}"]
    assert K(16).hex() not in proc.stderr + proc.stdout and MK0.hex() not in proc.stderr + proc.stdout
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert rows and all(status == "no-key" for status, _ in rows), rows
    assert all(f"Configuration: PSP key file {want} (keyfile-bad-value)" in msgs for _, msgs in rows), rows
    missing = tshark46.seen(tshark46.stage_dir / "missing.keys")
    for row in tshark_fields(tshark46, staged, names, [script], ["-o", f"psp.keyfile:{missing}"]):
        assert row["psp.status"] == "no-key", row
        assert (f"I/O error: PSP key file {missing}: cannot open key file: No such file or directory (capture-io)"
                in row["_ws.expert.message"]), row
    # A google/psp decrypt config: its master keys decrypt what they derive for.
    cfg = tshark46.stage_bytes((" ".join(f"{b:02x}" for b in MK0) + "\n" + " ".join(f"{b:02x}" for b in MK1) +
                                "\n").encode(), "decrypt.cfg")
    rows = tshark_fields(tshark46, staged, names, [script], ["-o", f"psp.keyfile:{cfg}"])
    by_spi = {int(r["psp.spi"], 16): r["psp.status"] for r in rows}
    assert all(by_spi[sa["spi"]] == "ok" for sa in PSP_SAS if "key" not in sa), by_spi


@pytest.mark.tshark
def test_tshark_truncated_and_cut(tshark54: Tshark, pure_captures, workdir: Path) -> None:
    """A PSP payload of 9 octets and EESP of 5 (on IP and in UDP) are too short; cut by the snap length inside
    the EESP Base Header (on IP, in UDP) or the PSP header, a packet says the capture cut it, never that it is
    malformed: decrypting in Lua (4.6) and headers only (4.4) alike, as the plugin does."""
    t = tshark54
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap is not installed")
    st = _sample_traffic()
    inner = clear_packets(2, seed=3)
    psp_ok = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0).encrypt(inner[0])
    sa = pyeesp.SA(0x4000, "aes-gcm-8", key=K(20, 0x4000), key_bits=128, mode="tunnel")
    eesp_ip = sa.encrypt(inner[1])
    psp = psp_payload(psp_ok)
    eesp, _, _ = eesp_octets(eesp_ip)

    def on_ip(data: bytes) -> bytes:
        return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), 1, 0, 64, 49, 0, bytes([192, 0, 2, 1]),
                           bytes([192, 0, 2, 2])) + data

    def udp(dport: int, data: bytes) -> bytes:
        return st.ipv4("192.0.2.1", "192.0.2.2", 17, 40000, dport, data, 4)

    wire = write_frames(workdir / "short.pcap", [udp(1000, psp[:9]), on_ip(eesp[:5]), udp(4500, eesp[:6]),
                                                 psp_ok, eesp_ip])
    parts = [wire]
    # Ethernet + IPv4 is 34 octets: 38 keeps 4 octets of EESP on IP, 45 three of EESP in UDP, 50 eight of PSP.
    for snap in (38, 45, 50):
        out = workdir / f"short_cut{snap}.pcap"
        subprocess.run([editcap, "-s", str(snap), str(wire), str(out)], check=True)
        parts.append(out)
    merged = workdir / "short_all.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(merged), *map(str, parts)], check=True)
    names = ["frame.cap_len", "frame.len", "psp.status", "eesp.status", "_ws.expert.message"]
    keys = t.stage_bytes(f"psp-master key0={MK0.hex()}\n{EESP_SAS[0][1]}\n".encode(), "short.keys")
    assert EESP_SAS[0][0]["spi"] == 0x4000
    rows = tshark_fields(t, t.stage(merged), names, [t.stage(PSP_LUA), t.stage(EESP_LUA)],
                         ["-o", f"psp.keyfile:{keys}", "-o", f"eesp.keyfile:{keys}"])
    assert len(rows) == 4 * 5
    opened = "ok" if t.gcrypt else ""
    statuses = [r["psp.status"] or r["eesp.status"] for r in rows]
    assert statuses[:5] == ["psp-truncated", "eesp-truncated", "eesp-truncated", opened, opened], statuses
    assert "Malformed: PSP packet shorter than its header and ICV (psp-truncated)" in rows[0]["_ws.expert.message"]
    assert "Malformed: EESP packet shorter than its headers and ICV (eesp-truncated)" in rows[1]["_ws.expert.message"]
    cut = "Cut by the capture: packet was cut by the capture snap length (capture-packet-cut)"
    for snap, i, proto in ((38, 1, "eesp"), (38, 4, "eesp"), (45, 2, "eesp"), (50, 0, "psp")):
        r = rows[5 * (1 + (38, 45, 50).index(snap)) + i]
        assert int(r["frame.cap_len"]) == snap < int(r["frame.len"]), (snap, i, r)
        assert r[f"{proto}.status"] == "capture-packet-cut", (snap, i, r)
        assert cut in r["_ws.expert.message"] and "Malformed" not in r["_ws.expert.message"], (snap, i, r)


@pytest.mark.tshark
def test_tshark_without_gcrypt_is_header_only(tshark54: Tshark, pure_captures) -> None:
    """Lua 5.4 without GcryptCipher (Wireshark 4.4; on 4.6 a script hides it): headers dissected, and a note
    names what would decrypt."""
    t = tshark54
    first = [t.stage_bytes(HIDE_GCRYPT.encode(), "hide_gcrypt.lua")] if t.gcrypt else []
    for proto, lua_file in (("psp", PSP_LUA), ("eesp", EESP_LUA)):
        cap, keys = pure_captures[proto]
        names = [f"{proto}.spi", f"{proto}.status", "_ws.expert.message"]
        rows = tshark_fields(t, t.stage(cap), names, [*first, t.stage(lua_file)],
                             ["-o", f"{proto}.keyfile:{t.stage(keys)}"])
        assert rows and all(r[f"{proto}.spi"] for r in rows)
        for r in rows:
            assert r[f"{proto}.status"] == ""
            assert ("decryption needs the pelua module (see docs/wireshark.md) or Wireshark 4.6 or later (its Lua "
                    "has GcryptCipher)") in r["_ws.expert.message"]
        # Without a key file the core could only say "no key" after its header checks: so do the scripts.
        rows = tshark_fields(t, t.stage(cap), names, [*first, t.stage(lua_file)])
        no_key = "no-key" if proto == "psp" else "eesp-no-sa"
        assert rows and all(r[f"{proto}.status"] == no_key for r in rows), rows
        assert all(f"No key: {'no key configured for this SPI' if proto == 'psp' else 'no EESP SA for this SPI'} "
                   f"({no_key})" in r["_ws.expert.message"] for r in rows), rows


def sequence_capture(workdir: Path) -> Tuple[Path, Path, List[str]]:
    """Two Sub SAs interleaved; on Sub SA 1 a duplicate and a gap; Sub SA 2 in order (as the C plugin's test)."""
    root = K(64, 0x33)
    tx = pyeesp.SA(0x3001, "aes-gcm-16", root_key=root, sskdf="hkdf-sha512", mode="tunnel",
                   tunnel_header=_sample_traffic().ipv4("192.0.2.1", "192.0.2.2", 17, 1, 2, b"", 0)[:20])
    p = clear_packets(12, seed=9)
    s1 = [tx.encrypt(p[i], 1) for i in range(3)]
    s2 = [tx.encrypt(p[3 + i], 2) for i in range(4)]
    tx.set_next_seq(6, 1)
    gap, after = tx.encrypt(p[8], 1), tx.encrypt(p[9], 1)
    labels = ["1:1", "2:1", "1:2", "2:2", "1:2 dup", "1:3", "2:3", "1:6 gap", "2:4", "1:7"]
    pkts = [s1[0], s2[0], s1[1], s2[1], s1[1], s1[2], s2[2], gap, s2[3], after]
    cap = write_frames(workdir / "seq.pcap", pkts)
    keys = workdir / "seq.keys"
    keys.write_text(f"eesp-sa spi=0x3001 suite=aes-gcm-16 root-key={root.hex()} sskdf=hkdf-sha512 mode=tunnel\n")
    keys.chmod(0o644)
    return cap, keys, labels


SEQ_FIELDS = ["eesp.session_id", "eesp.seq", "eesp.status", "eesp.replay", "eesp.sequence_analysis_expected_sn",
              "eesp.sequence_analysis_previous_frame", "_ws.expert.message"]


def check_sequence_rows(rows: List[dict], labels: List[str]) -> None:
    want_seq = ["1", "1", "2", "2", "2", "3", "3", "6", "4", "7"]
    want_expected = ["1", "1", "2", "2", "3", "3", "3", "4", "4", "7"]
    want_prev = ["", "", "1", "2", "3", "5", "4", "6", "7", "8"]
    assert len(rows) == len(labels)
    for i, (row, label) in enumerate(zip(rows, labels)):
        assert row["eesp.status"] == "ok", label
        assert row["eesp.session_id"] == label[0] and row["eesp.seq"] == want_seq[i], label
        assert row["eesp.sequence_analysis_expected_sn"] == want_expected[i], label
        assert row["eesp.sequence_analysis_previous_frame"] == want_prev[i], label
        msg = row["_ws.expert.message"]
        if "dup" in label:
            assert row["eesp.replay"] == "1", label
            assert "Replay: sequence number already received (replay) (replay-duplicate)" in msg, label
        else:
            assert row["eesp.replay"] == "" and "Replay:" not in msg, label
        if "gap" in label or "dup" in label:
            assert f"Wrong sequence number for this Sub SA: {want_seq[i]}, expected {want_expected[i]}" in msg, label
        else:
            assert "Wrong sequence number" not in msg, label


@pytest.mark.tshark
@pytest.mark.parametrize("two_pass", [False, True], ids=["one-pass", "two-pass"])
def test_tshark_sequence_analysis(tshark46: Tshark, workdir: Path, two_pass: bool) -> None:
    """Per Sub SA, on whatever decrypted: expected numbers, previous frames, replays and gaps."""
    cap, keys, labels = sequence_capture(workdir)
    opts = ["-o", f"eesp.keyfile:{tshark46.stage(keys)}"] + (["-2"] if two_pass else [])
    rows = tshark_fields(tshark46, tshark46.stage(cap), SEQ_FIELDS, [tshark46.stage(EESP_LUA)], opts)
    check_sequence_rows(rows, labels)
    off = tshark_fields(tshark46, tshark46.stage(cap), SEQ_FIELDS, [tshark46.stage(EESP_LUA)],
                        opts + ["-o", "eesp.do_sequence_analysis:FALSE"])
    assert all(r["eesp.status"] == "ok" and r["eesp.sequence_analysis_expected_sn"] == "" for r in off)


@pytest.mark.tshark
def test_tshark_fuzzed_and_cut(tshark54: Tshark, pure_captures, workdir: Path) -> None:
    """Corrupted octets (editcap -E) and cut packets (editcap -s), decrypted in Lua (4.6) or only dissected
    (4.4): no Lua error."""
    tshark46 = tshark54
    editcap = shutil.which("editcap")
    if editcap is None:
        pytest.skip("editcap is not installed")
    variants = []
    for name, (cap, _) in pure_captures.items():
        for seed in (1, 2, 3):
            out = workdir / f"fuzz_{name}_{seed}.pcap"
            subprocess.run([editcap, "--seed", str(seed), "-E", "0.03", str(cap), str(out)], check=True)
            variants.append(out)
        for snap in (20, 50, 62, 70, 90):
            out = workdir / f"cut_{name}_{snap}.pcap"
            subprocess.run([editcap, "-s", str(snap), str(cap), str(out)], check=True)
            variants.append(out)
    merged = workdir / "fuzz.pcap"
    subprocess.run(["mergecap", "-a", "-F", "pcap", "-w", str(merged), *map(str, variants)], check=True)
    scripts = [tshark46.stage(PSP_LUA), tshark46.stage(EESP_LUA)]
    opts = ["-o", f"psp.keyfile:{tshark46.stage(pure_captures['psp'][1])}",
            "-o", f"eesp.keyfile:{tshark46.stage(pure_captures['eesp'][1])}"]
    proc = tshark46.run(["-n", "-r", tshark46.stage(merged), "-V", *opts], scripts, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Lua Error" not in proc.stdout + proc.stderr and "[string" not in proc.stderr, proc.stderr[-3000:]
    assert "Decryption status: crypto-backend" not in proc.stdout
    assert proc.stdout.count("Decryption status: ok") > (50 if tshark54.gcrypt else -1)


@pytest.mark.tshark
def test_tshark_fields_registered(tshark54: Tshark) -> None:
    """The names, types and expert items the 4.0 tests check (tests/wireshark/test_lua_dissectors.py), on Lua 5.4."""
    tshark46 = tshark54
    proc = tshark46.run(["-G", "fields", "-X", f"lua_script:{tshark46.stage(PSP_LUA)}",
                         "-X", f"lua_script:{tshark46.stage(EESP_LUA)}"], [])
    assert "Lua" not in proc.stderr, proc.stderr
    have = {c[2]: c[3] for c in (line.split("\t") for line in proc.stdout.splitlines()) if c[0] == "F"}
    for name, ftype in {"psp.spi": "FT_UINT32", "psp.iv": "FT_UINT64", "psp.vc": "FT_UINT64",
                        "psp.status": "FT_STRING", "psp.icv_good": "FT_BOOLEAN", "psp.sample": "FT_BOOLEAN",
                        "psp.reserved1": "FT_UINT8", "eesp.seq": "FT_UINT64", "eesp.status": "FT_STRING",
                        "eesp.suite": "FT_STRING", "eesp.option.crypt_offset": "FT_UINT16",
                        "eesp.sequence_analysis_expected_sn": "FT_UINT64",
                        "eesp.sequence_analysis_previous_frame": "FT_FRAMENUM", "eesp.replay": "FT_BOOLEAN"}.items():
        assert have.get(name) == ftype, name
    registered = {c[2] for c in (line.split("\t") for line in proc.stdout.splitlines())
                  if len(c) > 2 and c[0] == "F" and ".expert." in c[2]}
    for proto, extra in (("psp", {"gmac_unverified", "udp_zero_checksum", "no_module"}),
                         ("eesp", {"seq_wrong", "udp_zero_checksum", "udp_bad_checksum", "no_module"})):
        want = {c.replace("-", "_") for c in CATEGORIES if c != "ok"} | extra
        assert {n for n in registered if n.startswith(f"{proto}.expert.")} == {f"{proto}.expert.{w}" for w in want}


def normalized(v):
    """A JSON layer with tshark 4.4+'s True/False booleans written as 4.0's 1/0."""
    if isinstance(v, dict):
        return {k: normalized(x) for k, x in v.items()}
    if isinstance(v, list):
        return [normalized(x) for x in v]
    return {"True": "1", "False": "0"}.get(v, v) if isinstance(v, str) else v


INNER_FAILED = "decrypted packet could not be dissected"


def without_inner_failure(layer):
    """The layer less what a Wireshark release may add when a decrypted packet is malformed: where its
    DissectorTable:try raises (4.6 more often than 4.0) the script notes the failure and a Malformed item lands
    here, where the other marks the inner layer."""
    if not isinstance(layer, dict):
        return layer
    out = {k: v for k, v in layer.items() if k != "_ws.malformed"}
    experts = out.get("_ws.expert")
    if experts is not None:
        kept = [e for e in (experts if isinstance(experts, list) else [experts])
                if not str(e.get("_ws.expert.message", "")).startswith(INNER_FAILED)]
        if kept:
            out["_ws.expert"] = kept if isinstance(experts, list) and len(kept) > 1 else kept[0]
        else:
            del out["_ws.expert"]
    return out


def layers_of(t: Tshark, pcap: Path, proto: str, scripts: Sequence[str], opts: Sequence[str]) -> List[object]:
    proc = t.run(["-n", "-r", t.stage(pcap), *opts, "-T", "json", "--no-duplicate-keys", "-j",
                  f"{proto} _ws.expert _ws.malformed"], scripts)
    assert "Lua Error" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return [without_inner_failure(normalized(p["_source"]["layers"].get(proto)))
            for p in json.loads(proc.stdout or "[]")]


@pytest.fixture(scope="module")
def tshark40_pelua() -> Iterator[Tshark]:
    """The host's tshark 4.0 with pelua (development machines), beside the 4.6 of PE_TSHARK_CHROOT."""
    if not os.environ.get("PE_TSHARK_CHROOT"):
        pytest.skip("compares the host's tshark 4.0 and pelua with the tshark of PE_TSHARK_CHROOT")
    if not (ws.LUA_MODULE_DIR / "pelua.so").exists() or not Path(ws.TSHARK).exists():
        pytest.skip("pelua is not built (cmake -S dissectors/lua -B build/lua)")
    t = Tshark(None, pelua_dir=ws.LUA_MODULE_DIR)
    try:
        if t.lua_version != "Lua 5.2" or not t.pelua:
            pytest.skip(f"the host's tshark ({t.lua_version}) cannot load pelua")
        yield t
    finally:
        t.close()


@pytest.mark.tshark
def test_pelua_and_pure_lua_show_the_same(tshark46: Tshark, tshark40_pelua: Tshark, pure_captures,
                                          workdir: Path) -> None:
    """Wireshark 4.0 decrypting through pelua and 4.6 decrypting in Lua: the psp and eesp layers (every field and
    expert item) and the decrypted bytes are identical, packet for packet."""
    seq_cap, seq_keys, _ = sequence_capture(workdir)
    cases = [("psp", *pure_captures["psp"]), ("eesp", *pure_captures["eesp"]), ("eesp", seq_cap, seq_keys)]
    cases += [("psp", p, k) for p, k in vector_pcaps("psp")[::3]]
    cases += [("eesp", p, k) for p, k in vector_pcaps("eesp")[::4]]
    compared = 0
    for proto, cap, keys in cases:
        lua_file = PSP_LUA if proto == "psp" else EESP_LUA
        views = []
        for t in (tshark40_pelua, tshark46):
            opts = ["-o", f"{proto}.keyfile:{t.stage(keys)}"]
            if proto == "eesp" and keyfile_ip_protocol(keys.read_text()) != 49:
                opts += ["-o", f"eesp.ip_protocol:{keyfile_ip_protocol(keys.read_text())}"]
            scripts = [t.stage(lua_file)]
            views.append((layers_of(t, cap, proto, scripts, opts),
                          decrypted_sources(t, t.stage(cap), proto, scripts, opts)))
        (layers40, sources40), (layers46, sources46) = views
        assert len(layers40) == len(layers46), cap.name
        for n, (a, b) in enumerate(zip(layers40, layers46), 1):
            assert a == b, (cap.name, n)
        assert sources40 == sources46, cap.name
        compared += len(layers40)
    assert compared > 500


