"""The Lua dissectors (dissectors/lua/psp.lua, eesp.lua) and their C module pelua, inside tshark.

Captures come from the Python packages (pypsp / pyeesp encrypt_capture); what each packet holds
is computed again with the libraries (pypsp.Header / Decryptor, pyeesp.Receiver) and compared
with tshark's fields.  tshark runs without the C plugin (plugin=None): the plugin registers the
same field names.  One tshark run per capture, with many fields, keeps the file fast.

Without pelua the scripts decrypt in Lua where Wireshark has GcryptCipher (4.6+) and only
dissect elsewhere; tests/wireshark/test_lua_pure.py checks that path against the core in depth.

What each path must show beside the C plugin (the same statuses and expert items, also for bad
input) is tests/wireshark/test_lua_beside_plugin.py; the shared captures and fixtures are
tests/wireshark/luadissect.py.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional, Sequence

import pytest

import wireshark as ws

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")
from pecore.keys import load_psp_ref_config  # noqa: E402

if not Path(ws.TSHARK).exists():
    pytest.skip("tshark is not installed (bash scripts/install.sh installs it)", allow_module_level=True)

from luadissect import (  # noqa: E402
    EESP_FIELDS,
    EESP_LUA,
    LUA_EXPERTS,
    MK0,
    MK1,
    NO_ENGINE,
    PSP_FIELDS,
    PSP_LUA,
    PSP_SAS,
    REF,
    SCRIPTS,
    WRONG_KEYS,
    _sample_traffic,
    clear_packets,
    eesp_capture,
    frames_of,
    ip_payload,
    keyfile,
    l4_dport,
    lua_has_gcrypt,
    merge,
    no_lua_error,
    occurrences,
    pelua_built,
    psp_capture,
    rows,
    run,
    tshark_home,
    work,
    write_frames,
)


# ---------------------------------------------------------------------------------------------- tests

def test_pelua_builds_without_liblua(pelua_built: Path) -> None:
    """The module exports luaopen_pelua and leaves the Lua API to the host (no liblua linked)."""
    nm = subprocess.run(["nm", "-D", "--defined-only", str(pelua_built)], capture_output=True, text=True, check=True)
    assert "luaopen_pelua" in nm.stdout
    assert not any(line.split()[-1].startswith("pe_") for line in nm.stdout.splitlines() if line.strip())
    ldd = subprocess.run(["ldd", str(pelua_built)], capture_output=True, text=True)
    assert "liblua" not in ldd.stdout


def test_fields_registered(pelua_built: Path) -> None:
    # -G must come first, before the -X lua_script options wireshark.run() would put there.
    proc = run(["-G", "fields", *[a for s in SCRIPTS for a in ("-X", f"lua_script:{s}")]], plugin=None)
    assert "Lua" not in proc.stderr and "lua" not in proc.stderr, proc.stderr  # (-G fields lists _ws.lua.error)
    have = {}
    for line in proc.stdout.splitlines():
        cols = line.split("\t")
        if cols[0] == "F" and (cols[2].startswith("psp.") or cols[2].startswith("eesp.")):
            have[cols[2]] = cols[3]
    want = {
        "psp.nexthdr": "FT_UINT8", "psp.hdrextlen": "FT_UINT8", "psp.reserved0": "FT_UINT8",
        "psp.cryptoffset": "FT_UINT8", "psp.sample": "FT_BOOLEAN", "psp.drop": "FT_BOOLEAN",
        "psp.version": "FT_UINT8", "psp.is_virt": "FT_BOOLEAN", "psp.one_bit": "FT_BOOLEAN",
        "psp.spi": "FT_UINT32", "psp.master_key": "FT_UINT32", "psp.iv": "FT_UINT64", "psp.vc": "FT_UINT64",
        "psp.sectoken": "FT_UINT32", "psp.virtkey": "FT_UINT32", "psp.ext": "FT_BYTES", "psp.payload": "FT_BYTES",
        "psp.icv": "FT_BYTES", "psp.status": "FT_STRING", "psp.icv_good": "FT_BOOLEAN", "psp.icv_bad": "FT_BOOLEAN",
        "eesp.compat": "FT_BOOLEAN", "eesp.version": "FT_UINT8", "eesp.reserved": "FT_UINT8",
        "eesp.opt_len": "FT_UINT8", "eesp.session_id": "FT_UINT16", "eesp.spi": "FT_UINT32",
        "eesp.option": "FT_BYTES", "eesp.option.type": "FT_UINT8", "eesp.option.len": "FT_UINT8",
        "eesp.option.data": "FT_BYTES", "eesp.option.payload_offset": "FT_UINT16",
        "eesp.option.crypt_offset": "FT_UINT16", "eesp.option.co_reserved": "FT_UINT16", "eesp.seq": "FT_UINT64",
        "eesp.iv": "FT_BYTES", "eesp.payload": "FT_BYTES", "eesp.icv": "FT_BYTES", "eesp.next_header": "FT_UINT8",
        "eesp.pad_len": "FT_UINT8", "eesp.format": "FT_STRING", "eesp.suite": "FT_STRING",
        "eesp.status": "FT_STRING", "eesp.icv_good": "FT_BOOLEAN", "eesp.icv_bad": "FT_BOOLEAN",
        "eesp.data": "FT_BYTES", "eesp.sequence_analysis_expected_sn": "FT_UINT64",
        "eesp.sequence_analysis_previous_frame": "FT_FRAMENUM", "eesp.replay": "FT_BOOLEAN",
    }
    missing = {k: v for k, v in want.items() if have.get(k) != v}
    assert not missing, f"missing or wrongly typed: {missing}"
    # Exactly the C plugin's expert items (and the note for "cannot decrypt here"), nothing of their own.
    registered = {c[2] for c in (line.split("\t") for line in proc.stdout.splitlines())
                  if len(c) > 2 and c[0] == "F" and ".expert." in c[2]}
    for proto, want_experts in LUA_EXPERTS.items():
        assert {n for n in registered if n.startswith(f"{proto}.expert.")} == want_experts, proto


def test_psp_all_versions_decrypt(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    cap, expected = psp_capture
    got = rows(cap, PSP_FIELDS, extra=["-o", f"psp.keyfile:{keyfile}"])
    assert len(got) == len(expected) == 4 * len(PSP_SAS)
    for r, x in zip(got, expected):
        hdr, sa = x["hdr"], x["sa"]
        where = f"packet {r['frame.number']} (SPI {sa['spi']:#x})"
        assert r["psp.spi"] == f"{hdr.spi:#010x}", where
        assert int(r["psp.iv"], 16) == hdr.iv, where
        assert r["psp.version"] == str(hdr.version) == str(sa["version"]), where
        assert r["psp.nexthdr"] == str(hdr.next_header), where
        assert r["psp.hdrextlen"] == str(hdr.hdr_ext_len), where
        assert r["psp.cryptoffset"] == str(hdr.crypt_offset), where
        assert r["psp.one_bit"] == "1", where
        assert r["psp.master_key"] == str(hdr.spi >> 31), where
        assert r["psp.status"] == "ok", (where, r["_ws.expert.message"])
        assert r["psp.icv_good"] == "1" and r["psp.icv_bad"] == "0", where
        assert "Lua Error" not in r["_ws.expert.message"], where
        if "vc" in sa:
            vc = int.from_bytes(sa["vc"], "big")
            assert r["psp.is_virt"] == "1" and int(r["psp.vc"], 16) == vc, where  # decrypted when the offset hid it
            assert int(r["psp.sectoken"], 16) == vc >> 32 and int(r["psp.virtkey"], 16) == vc & 0xFFFFFFFF, where
        else:
            assert r["psp.is_virt"] == "0" and r["psp.vc"] == "", where
        # The decrypted inner packet went through Wireshark's own dissectors.
        assert "udp:psp" in r["frame.protocols"], where
        if sa["mode"] == "tunnel":
            field = "ip.dst" if x["inner_version"] == 4 else "ipv6.dst"
            assert occurrences(r[field])[-1] == x["inner_dst"], where
            assert hdr.next_header in (4, 41)
        else:
            assert hdr.next_header == x["proto"]
        port_field = "udp.dstport" if x["proto"] == 17 else "tcp.dstport"
        assert occurrences(r[port_field])[-1] == x["dport"], where
        assert occurrences(r["udp.dstport"])[0] == "1000", where


def test_psp_wrong_key(pelua_built: Path, psp_capture, work: Path) -> None:
    cap, expected = psp_capture
    wrong = work / "wrong_keys.txt"
    wrong.write_text(WRONG_KEYS)
    wrong.chmod(0o644)
    got = rows(cap, PSP_FIELDS, extra=["-o", f"psp.keyfile:{wrong}"])
    assert len(got) == len(expected)
    for r in got:
        assert r["psp.status"] == "authentication-failed", r
        assert r["psp.icv_good"] == "0" and r["psp.icv_bad"] == "1"
        assert "ICV verification failed" in r["_ws.expert.message"]
        assert occurrences(r["udp.dstport"]) == ["1000"]  # nothing decrypted, nothing dissected inside


def test_psp_without_pelua(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    """The Lua C path without pelua: decrypted in Lua where Wireshark has GcryptCipher (4.6+); elsewhere the
    headers are still dissected and a note says what would decrypt."""
    cap, expected = psp_capture
    empty = ws.shared_dir("pe-no-pelua-")
    try:
        got = rows(cap, PSP_FIELDS, extra=["-o", f"psp.keyfile:{keyfile}"],
                   env={"LUA_CPATH_5_2": f"{empty}/?.so"})
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    assert len(got) == len(expected)
    in_lua = lua_has_gcrypt()
    for r, x in zip(got, expected):
        assert r["psp.spi"] == f"{x['hdr'].spi:#010x}"
        assert int(r["psp.iv"], 16) == x["hdr"].iv
        assert r["psp.version"] == str(x["hdr"].version)
        if in_lua:
            assert r["psp.status"] == "ok" and r["psp.icv_good"] == "1", r
            assert NO_ENGINE not in r["_ws.expert.message"]
            port_field = "udp.dstport" if x["proto"] == 17 else "tcp.dstport"
            assert occurrences(r[port_field])[-1] == x["dport"]
        else:
            assert r["psp.status"] == ""
            assert NO_ENGINE in r["_ws.expert.message"]
            assert occurrences(r["udp.dstport"]) == ["1000"]


def test_psp_loaded_twice(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    """A second psp.lua (as beside the C plugin) says so and registers nothing: no Lua error."""
    cap, expected = psp_capture
    args = ["-n", "-r", str(cap), "-T", "fields", "-e", "psp.spi", "-e", "psp.status", "-o", f"psp.keyfile:{keyfile}"]
    proc = run(args, plugin=None, lua_scripts=[PSP_LUA, PSP_LUA, EESP_LUA, EESP_LUA])
    no_lua_error(proc)
    assert "already registered" in proc.stderr and "not registering the Lua PSP dissector" in proc.stderr
    assert "not registering the Lua EESP dissector" in proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(expected) and all(line.endswith("\tok") for line in lines)


@pytest.mark.skipif(not ws.plugin_path().exists(), reason="the C plugin is not built (build/plugin)")
def test_beside_c_plugin(pelua_built: Path, psp_capture, keyfile: Path) -> None:
    cap, _ = psp_capture
    proc = run(["-n", "-r", str(cap), "-T", "fields", "-e", "psp.spi"], plugin="plain", lua_scripts=SCRIPTS)
    no_lua_error(proc)
    assert "not registering the Lua PSP dissector" in proc.stderr
    assert "not registering the Lua EESP dissector" in proc.stderr


def test_eesp_tunnel_and_udp(pelua_built: Path, eesp_capture, keyfile: Path) -> None:
    cap, expected = eesp_capture
    got = rows(cap, EESP_FIELDS, extra=["-o", f"eesp.keyfile:{keyfile}"])
    assert len(got) == len(expected)
    sessions = set()
    for r, x in zip(got, expected):
        where = f"packet {r['frame.number']}"
        assert "Lua Error" not in r["_ws.expert.message"], where
        if x is None:
            assert r["eesp.spi"] == "", where  # ESP, IKE, keepalive: Wireshark's own dissectors
            continue
        d = x["d"]
        sessions.add(d.header.session_id)
        assert r["eesp.spi"] == f"{d.header.spi:#010x}", where
        assert r["eesp.session_id"] == str(d.header.session_id), where
        assert r["eesp.compat"] == "1" and r["eesp.version"] == "0", where
        assert r["eesp.opt_len"] == str(d.header.opt_len), where
        assert occurrences(r["eesp.option.type"]) == [str(o.type) for o in d.header.options], where
        co = d.header.crypt_offset_option
        if co is not None:
            assert r["eesp.option.payload_offset"] == str(co.payload_offset), where
            assert r["eesp.option.crypt_offset"] == str(co.crypt_offset_value), where
        assert r["eesp.seq"] == str(d.seq), where
        if x["refused"]:
            assert r["eesp.status"] == "eesp-crypt-offset-not-allowed", where
            assert r["eesp.icv_good"] == "1", where
            assert "Crypt Offset option not allowed" in r["_ws.expert.message"], where
            continue
        assert r["eesp.status"] == "ok", (where, r["_ws.expert.message"])
        assert r["eesp.icv_good"] == "1" and r["eesp.icv_bad"] == "0", where
        assert r["eesp.next_header"] == str(d.next_header), where
        assert r["eesp.pad_len"] == str(d.pad_len), where
        assert r["eesp.format"] == ("full" if d.full_format else "optimized"), where
        assert r["eesp.iv"] == (d.iv.hex() if d.iv else ""), where
        assert r["eesp.data"] == "", where
        if x["udp"]:
            assert r["eesp.suite"] == "ENCR_CHACHA20_POLY1305", where
            assert occurrences(r["udp.dstport"])[0] == "4500", where
            assert "udp:eesp_udp:eesp" in r["frame.protocols"], where
            assert d.next_header == x["proto"]
        elif d.header.spi == 0x1000:
            assert r["eesp.suite"] == "ENCR_AES_GCM_16", where
            field = "ip.dst" if x["inner_version"] == 4 else "ipv6.dst"
            assert occurrences(r[field])[-1] == x["inner_dst"], where
        else:
            assert d.header.crypt_offset_option is not None and r["eesp.format"] == "full", where
        port_field = "udp.dstport" if x["proto"] == 17 else "tcp.dstport"
        assert occurrences(r[port_field])[-1] == x["dport"], where
    assert len(sessions) > 1, "the tunnel SA should spread flows over several Sub SAs"
    assert any(x and x["d"].header.crypt_offset_option for x in expected)
    assert any(x and x["refused"] for x in expected)
    others = [r for r, x in zip(got, expected) if x is None]
    assert len(others) == 3
    esp, ike, keepalive = others
    assert esp["esp.spi"] == "0x01020304" and "udpencap:esp" in esp["frame.protocols"]
    assert ike["isakmp.ispi"] == "1122334455667788" and "isakmp" in ike["frame.protocols"]
    assert "udpencap" in keepalive["frame.protocols"] and "esp" not in keepalive["frame.protocols"].split(":")


def test_eesp_without_key_or_module(pelua_built: Path, eesp_capture, keyfile: Path, work: Path) -> None:
    """Without an SA the octets after the options are eesp.data; without pelua a note says what would decrypt
    (where Wireshark has GcryptCipher, 4.6+, the script decrypts in Lua instead)."""
    cap, expected = eesp_capture
    empty = ws.shared_dir("pe-no-pelua-")
    only_psp = work / "only_psp.txt"
    only_psp.write_text(f"psp-master key0={MK0.hex()}\n")
    only_psp.chmod(0o644)
    try:
        no_module = rows(cap, EESP_FIELDS, extra=["-o", f"eesp.keyfile:{keyfile}"],
                         env={"LUA_CPATH_5_2": f"{empty}/?.so"})
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    no_sa = rows(cap, EESP_FIELDS, extra=["-o", f"eesp.keyfile:{only_psp}"])
    in_lua = lua_has_gcrypt()
    for label, got in (("no module", no_module), ("no SA", no_sa)):
        assert len(got) == len(expected)
        for r, x in zip(got, expected):
            if x is None:
                continue
            assert r["eesp.spi"] == f"{x['d'].header.spi:#010x}", label
            assert r["eesp.session_id"] == str(x["d"].header.session_id), label
            if label == "no module" and in_lua:
                assert r["eesp.status"] == ("eesp-crypt-offset-not-allowed" if x["refused"] else "ok"), r
                assert r["eesp.seq"] == str(x["d"].seq) and r["eesp.data"] == "", label
                continue
            assert r["eesp.seq"] == "" and r["eesp.data"] != "", label
            if label == "no module":
                assert r["eesp.status"] == "" and NO_ENGINE in r["_ws.expert.message"]
            else:
                assert r["eesp.status"] == "eesp-no-sa", r
                assert "No key: no EESP SA for this SPI (eesp-no-sa)" in r["_ws.expert.message"]


def test_eesp_sequence_analysis(pelua_built: Path, work: Path) -> None:
    """Per Sub SA (SPI, Session ID, destination), as the C plugin does it: expected numbers, previous frames,
    a replay and a gap, on one and on two passes; and off when the preference says so."""
    root = bytes(range(0x20, 0x60))
    tx = pyeesp.SA(0x3001, "aes-gcm-16", root_key=root, sskdf="hkdf-sha512", mode="tunnel",
                   tunnel_header=_sample_traffic().ipv4("192.0.2.1", "192.0.2.2", 17, 1, 2, b"", 0)[:20])
    p = clear_packets(12, seed=9)
    s1 = [tx.encrypt(p[i], 1) for i in range(3)]  # seq 1, 2, 3 on Sub SA 1
    s2 = [tx.encrypt(p[3 + i], 2) for i in range(4)]  # seq 1..4 on Sub SA 2
    tx.set_next_seq(6, 1)
    gap, after = tx.encrypt(p[8], 1), tx.encrypt(p[9], 1)  # 6 and 7: 4 and 5 never sent
    labels = ["1:1", "2:1", "1:2", "2:2", "1:2 dup", "1:3", "2:3", "1:6 gap", "2:4", "1:7"]
    cap = write_frames(work / "eesp_seq.pcap", [s1[0], s2[0], s1[1], s2[1], s1[1], s1[2], s2[2], gap, s2[3], after])
    keys = work / "eesp_seq.txt"
    keys.write_text(f"eesp-sa spi=0x3001 suite=aes-gcm-16 root-key={root.hex()} sskdf=hkdf-sha512 mode=tunnel\n")
    keys.chmod(0o644)
    names = ["eesp.session_id", "eesp.seq", "eesp.status", "eesp.replay", "eesp.sequence_analysis_expected_sn",
             "eesp.sequence_analysis_previous_frame", "_ws.expert.message"]
    want_seq = ["1", "1", "2", "2", "2", "3", "3", "6", "4", "7"]
    want_expected = ["1", "1", "2", "2", "3", "3", "3", "4", "4", "7"]
    want_prev = ["", "", "1", "2", "3", "5", "4", "6", "7", "8"]
    for extra in ([], ["-2"]):
        got = rows(cap, names, extra=["-o", f"eesp.keyfile:{keys}", *extra])
        assert len(got) == len(labels)
        for i, (r, label) in enumerate(zip(got, labels)):
            assert r["eesp.status"] == "ok", label
            assert r["eesp.session_id"] == label[0] and r["eesp.seq"] == want_seq[i], label
            assert r["eesp.sequence_analysis_expected_sn"] == want_expected[i], (label, extra)
            assert r["eesp.sequence_analysis_previous_frame"] == want_prev[i], (label, extra)
            msg = r["_ws.expert.message"]
            if "dup" in label:
                assert r["eesp.replay"] == "1", label
                assert "Replay: sequence number already received (replay) (replay-duplicate)" in msg
            else:
                assert r["eesp.replay"] == "" and "Replay:" not in msg, label
            wrong = f"Wrong sequence number for this Sub SA: {want_seq[i]}, expected {want_expected[i]}"
            assert (wrong in msg) == ("gap" in label or "dup" in label), (label, msg)
    off = rows(cap, names, extra=["-o", f"eesp.keyfile:{keys}", "-o", "eesp.do_sequence_analysis:FALSE"])
    for r in off:
        assert r["eesp.status"] == "ok" and r["eesp.sequence_analysis_expected_sn"] == "" and r["eesp.replay"] == ""
        assert "Replay:" not in r["_ws.expert.message"] and "Wrong sequence" not in r["_ws.expert.message"]


def test_preferences_move_registrations(pelua_built: Path, work: Path, keyfile: Path) -> None:
    """psp.udp_port and eesp.ip_protocol re-register the dissectors."""
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0, udp_dport=2000)
    sa = pyeesp.SA(0x3000, "aes-gcm-16", key=bytes(range(20)), mode="tunnel", ip_protocol=253)
    pkts = clear_packets(2, seed=5)
    cap = write_frames(work / "prefs.pcap", [enc.encrypt(pkts[0]), sa.encrypt(pkts[1])])
    names = ["psp.spi", "psp.status", "eesp.spi", "eesp.status", "udp.dstport", "tcp.dstport"]
    got = rows(cap, names, extra=["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}",
                                  "-o", "psp.udp_port:2000", "-o", "eesp.ip_protocol:253"])
    assert got[0]["psp.spi"] == "0x1a345678" and got[0]["psp.status"] == "ok"
    assert got[1]["eesp.spi"] == "0x00003000" and got[1]["eesp.status"] == "ok"
    default = rows(cap, names, extra=["-o", f"psp.keyfile:{keyfile}"])
    assert default[0]["psp.spi"] == "" and default[1]["eesp.spi"] == ""


@pytest.mark.needs_shared
@pytest.mark.skipif(not (REF / "manifest.csv").exists(), reason="reference captures absent")
@pytest.mark.parametrize("keys", ["decrypt.cfg", "encrypt_tunnel_crypt_off_256_vc.cfg", "key file"])
def test_reference_captures(pelua_built: Path, work: Path, keys: str) -> None:
    """google/psp's outputs decrypt with the reference master keys, given as its own configs (the decrypt config,
    or an encrypt config, whose master keys are used as psp_decrypt uses them) or as a key file; the `_err` cases
    do not."""
    if keys == "key file":
        cfg = load_psp_ref_config(REF / "cfg" / "decrypt.cfg")
        kf = work / "ref_keys.txt"
        kf.write_text(f"psp-master key0={cfg.master_keys[0].hex()} key1={cfg.master_keys[1].hex()}\n")
    else:
        kf = work / keys
        shutil.copyfile(REF / "cfg" / keys, kf)
    kf.chmod(0o644)
    with open(REF / "manifest.csv", newline="") as f:
        cases = list(csv.DictReader(f))
    files = [REF / "encrypted" / f"{c['case']}.enc.pcap" for c in cases]
    cap = merge(work / "reference.pcap", files)
    names = ["psp.spi", "psp.version", "psp.status", "psp.icv_good", "udp.dstport", "_ws.expert.message"]
    proc = run(["-n", "-r", str(cap), "-T", "fields", *[a for n in names for a in ("-e", n)],
                "-o", f"psp.keyfile:{kf}"], plugin=None, lua_scripts=[PSP_LUA])
    no_lua_error(proc)
    assert "psp.lua:" not in proc.stderr, proc.stderr  # the file loaded: no problem to report
    got = [dict(zip(names, line.split("\t"))) for line in proc.stdout.splitlines()]
    got = [{k: ws.bool_text(v) if k == "psp.icv_good" else v for k, v in r.items()} for r in got]
    assert len(got) == len(cases)
    for case, r in zip(cases, got):
        enc_cfg = load_psp_ref_config(REF / "cfg" / case["encrypt_cfg"])
        assert r["psp.spi"] == f"{enc_cfg.spi:#010x}", case["case"]
        assert r["psp.version"] == str(enc_cfg.version), case["case"]
        if case["kind"] == "normal":
            assert r["psp.status"] == "ok", (case["case"], r)
            clear_ip = frames_of(REF / "clear" / case["cleartext"])[0]
            _, _, proto, seg = ip_payload(clear_ip)
            assert occurrences(r["udp.dstport"])[-1] == l4_dport(proto, seg), case["case"]
        else:
            assert r["psp.status"] not in ("", "ok"), (case["case"], r)
            assert r["psp.icv_good"] == "0"


def test_fuzzed_and_truncated_captures(pelua_built: Path, psp_capture, eesp_capture, keyfile: Path,
                                       work: Path) -> None:
    """Corrupted octets (editcap -E) and cut packets (editcap -s): no Lua error, exit status 0."""
    variants = []
    for name, (cap, _) in (("psp", psp_capture), ("eesp", eesp_capture)):
        for seed in (1, 2, 3, 4):
            out = work / f"fuzz_{name}_{seed}.pcap"
            subprocess.run(["editcap", "--seed", str(seed), "-E", "0.05", str(cap), str(out)], check=True,
                           capture_output=True)
            variants.append(out)
        for snap in (15, 43, 50, 60, 70, 90):
            out = work / f"cut_{name}_{snap}.pcap"
            subprocess.run(["editcap", "-s", str(snap), str(cap), str(out)], check=True, capture_output=True)
            variants.append(out)
    cap = merge(work / "fuzz.pcap", variants)
    proc = run(["-n", "-r", str(cap), "-V", "-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"],
                  plugin=None, lua_scripts=SCRIPTS, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    no_lua_error(proc)
    assert proc.stdout.count("Frame ") >= len(variants)


def replay_model(seqs: Sequence[int], size: int = 1024) -> List[Optional[str]]:
    """RFC 4303 §3.4.3 as a set: what the core's window (replay.c, the C plugin's default size) says of each."""
    top, seen, out = 0, set(), []
    for s in seqs:
        if s > top:
            top = s
            verdict = None
        elif top >= size and s <= top - size:
            verdict = "replay-too-old"
        elif s in seen:
            verdict = "replay-duplicate"
        else:
            verdict = None
        if verdict is None:
            seen.add(s)
        out.append(verdict)
    return out


def test_eesp_replay_window(pelua_built: Path, work: Path) -> None:
    """Jumps of less and more than the window, numbers left of it, duplicates inside it after a slide."""
    key = bytes(range(0x70, 0x84))
    tx = pyeesp.SA(0x3002, "aes-gcm-16", key=key, mode="tunnel")
    seqs = [1, 2000, 1, 1500, 1500, 977, 976, 3000, 2000, 1977, 1976, 3001, 70000, 3001, 68977, 68977, 68976, 69999,
            69999]
    pkts = {}
    inner = clear_packets(1)[0]  # one outer destination: the analysis keys on SPI, Session ID and destination
    for s in sorted(set(seqs)):
        tx.set_next_seq(s)
        pkts[s] = tx.encrypt(inner)
    cap = write_frames(work / "eesp_replay.pcap", [pkts[s] for s in seqs])
    keys = work / "eesp_replay.txt"
    keys.write_text(f"eesp-sa spi=0x3002 suite=aes-gcm-16 key={key.hex()} mode=tunnel\n")
    keys.chmod(0o644)
    got = rows(cap, ["eesp.seq", "eesp.status", "eesp.replay", "_ws.expert.message"],
               extra=["-o", f"eesp.keyfile:{keys}"])
    want = replay_model(seqs)
    assert want.count("replay-too-old") >= 3 and want.count("replay-duplicate") >= 3
    messages = {"replay-duplicate": "sequence number already received (replay)",
                "replay-too-old": "sequence number is left of the replay window"}
    for r, s, verdict in zip(got, seqs, want):
        assert r["eesp.status"] == "ok" and r["eesp.seq"] == str(s)
        if verdict:
            assert r["eesp.replay"] == "1", (s, verdict)
            assert f"Replay: {messages[verdict]} ({verdict})" in r["_ws.expert.message"], (s, verdict)
        else:
            assert r["eesp.replay"] == "" and "Replay:" not in r["_ws.expert.message"], s
