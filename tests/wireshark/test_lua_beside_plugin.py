"""The Lua dissectors beside the C plugin: every path must show what the plugin shows.

The same status for a packet and the same expert items (one per status category, named after it),
also for bad input (cut, truncated, a bad key file); the tests run both on the same captures and
compare.  The captures and fixtures are tests/wireshark/luadissect.py's.
"""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path
from typing import Tuple

import pytest

import wireshark as ws
from conftest import REPO_ROOT

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")

if not Path(ws.TSHARK).exists():
    pytest.skip("tshark is not installed (bash scripts/install.sh installs it)", allow_module_level=True)

from luadissect import (  # noqa: E402
    EESP_KEY_2000,
    INNER_FAILED,
    MK0,
    MK1,
    NO_ENGINE,
    SCRIPTS,
    home,
    _sample_traffic,
    check_category_items,
    clear_packets,
    ip_payload,
    keyfile,
    layer_items,
    layer_values,
    lua_has_gcrypt,
    merge,
    no_lua_error,
    pelua_built,
    rows,
    run,
    status_expert,
    tshark_home,
    udp_payload,
    work,
    write_frames,
)


# ---------------------------------------------------------------------------------------------- beside the plugin
#
# The C plugin and the scripts on the same captures (each alone in its tshark): per packet the same status and the
# same expert items of psp/eesp (field, message, group, severity).  Headers only (no pelua, Lua without
# GcryptCipher) the scripts know the statuses the core finds before it looks for a key, and those must be the
# plugin's; for the rest they show no status and note what would decrypt.

VECTORS = REPO_ROOT / "vectors" / "pcap"
# The vector groups that hold, between them, every packet status of both protocols (as the plugin's walk:
# tests/wireshark/test_wireshark_plugin.py): the decoder's rejections, no key, dummy packets, replays (group 6).
WALK_VECTORS = ("psp_v0_g01", "psp_v0_g05", "eesp_aes-ccm-12_g01", "eesp_aes-ccm-12_g02", "eesp_aes-ccm-12_g06",
                "eesp_aes-ccm-12_g07")
WALK_STATUSES = {
    "ok", "authentication-failed", "no-key", "psp-truncated", "psp-always-one-bit-clear", "psp-unsupported-version",
    "psp-bad-hdr-ext-len", "psp-vc-without-room", "psp-crypt-offset-past-payload",
    "eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
    "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-bad-payload-offset",
    "eesp-crypt-offset-past-payload", "eesp-crypt-offset-not-allowed", "eesp-unknown-option", "eesp-no-sa",
    "eesp-sub-sa-out-of-range", "eesp-sequence-zero", "eesp-bad-pad-length", "eesp-bad-inner-packet",
    "eesp-dummy-packet", "capture-packet-cut",
}
# The ones a path without decryption finds as well: the checks before the key or SA lookup, and the lookup
# itself when no key file is set.
HEADER_STATUSES = {
    "no-key", "psp-truncated", "psp-always-one-bit-clear", "psp-unsupported-version", "psp-bad-hdr-ext-len",
    "psp-vc-without-room", "psp-crypt-offset-past-payload", "eesp-truncated", "eesp-compat-bit-clear",
    "eesp-unsupported-version", "eesp-reserved-bits-set", "eesp-no-sa", "capture-packet-cut",
}
# Those found before the lookup only: with a key file set, a path without decryption must still find them (EESP
# shorter than its headers and ICV is also found after the SA lookup).
BEFORE_LOOKUP = HEADER_STATUSES - {"no-key", "eesp-no-sa", "eesp-truncated"}
# Problems of a key file, each the core's status of it (its category picks the item every affected packet gets).
KEYFILE_STATUSES = {"keyfile-syntax", "keyfile-bad-value", "keyfile-duplicate", "capture-io", "invalid-argument"}


def readable(path: Path) -> Path:
    path.chmod(0o644)
    return path


def editcap(*args: str) -> None:
    subprocess.run(["editcap", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def no_pelua_dir() -> Path:
    d = ws.shared_dir("pe-no-pelua-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def lua_engine_kw(engine: str, no_pelua_dir: Path) -> dict:
    kw: dict = dict(plugin=None, lua_scripts=SCRIPTS)
    if engine == "no-pelua":
        kw["env"] = {"LUA_CPATH_5_2": f"{no_pelua_dir}/?.so"}
    return kw


# Ethernet + IPv4 is 34 octets: 38 keeps 4 octets of EESP on IP, 45 three of EESP in UDP, 50 eight of PSP.
BAD_INPUT_SNAPS = (38, 45, 50, 70)


@pytest.fixture(scope="module")
def bad_input_capture(work: Path) -> Path:
    """Packets cut short on the wire (a PSP payload of 9 octets, EESP of 5 and 20) and by the capture's snap
    length (inside the EESP Base Header on IP and in UDP, inside the PSP header, and later)."""
    st = _sample_traffic()
    inner = clear_packets(2, seed=6)
    psp_ok = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0).encrypt(inner[0])
    eesp_ip = pyeesp.SA(0x5000, "aes-gcm-16", key=bytes(range(2, 22)), mode="transport").encrypt(inner[0])
    eesp_udp = pyeesp.SA(0x2000, "chacha20-poly1305", key=EESP_KEY_2000, key_bits=256, mode="transport",
                         udp_encap=True).encrypt(inner[1])
    psp = udp_payload(psp_ok)
    _, _, _, eesp_octets = ip_payload(eesp_ip)

    def on_ip(proto: int, data: bytes) -> bytes:
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), 1, 0, 64, proto, 0, bytes([192, 0, 2, 1]),
                        bytes([192, 0, 2, 2]))
        return h + data

    def udp(dport: int, data: bytes) -> bytes:
        return st.ipv4("192.0.2.1", "192.0.2.2", 17, 40000, dport, data, 4)

    wire = write_frames(work / "bad_input_wire.pcap", [
        udp(1000, psp[:9]), udp(1000, psp[:20]), on_ip(49, eesp_octets[:5]), on_ip(49, eesp_octets[:20]),
        udp(4500, eesp_octets[:6]), psp_ok, eesp_ip, eesp_udp])
    parts = [wire]
    for snap in BAD_INPUT_SNAPS:
        out = work / f"bad_input_cut_{snap}.pcap"
        editcap("-s", str(snap), str(wire), str(out))
        parts.append(readable(out))
    return merge(work / "bad_input.pcap", parts)


@pytest.fixture(scope="module")
def zero_checksum_capture(work: Path) -> Path:
    """IPv6 UDP with checksum 0 (the PSP reference sends it; UDP flags it), a real checksum, IPv4, EESP in UDP
    over IPv6 (its checksum computed, then 0, then wrong: eesp.md D17), EESP on IP: PSP notes UDP's own zero
    checksum over IPv6; EESP warns of a zero or a wrong one whatever UDP says."""
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x1A345678, version=0)
    v6 = [p for p in clear_packets(8, seed=8) if p[0] >> 4 == 6]
    v4 = [p for p in clear_packets(8, seed=8) if p[0] >> 4 == 4]
    udp6 = pyeesp.SA(0x2000, "chacha20-poly1305", key=EESP_KEY_2000, key_bits=256, mode="transport",
                     udp_encap=True)
    on_ip = pyeesp.SA(0x5000, "aes-gcm-16", key=bytes(range(2, 22)), mode="transport")
    psp6 = enc.encrypt(v6[0])
    assert psp6[46:48] == b"\0\0"
    e6 = udp6.encrypt(v6[1])
    assert e6[46:48] != b"\0\0"
    pkts = [psp6, enc.encrypt(v4[0]), e6, on_ip.encrypt(v6[2]), e6[:46] + b"\0\0" + e6[48:],
            e6[:46] + bytes([e6[46] ^ 0x10, e6[47]]) + e6[48:]]
    return write_frames(work / "zero_checksum.pcap", pkts)


@pytest.fixture(scope="module")
def beside_runs(work: Path, keyfile: Path, bad_input_capture: Path, zero_checksum_capture: Path):
    """(label, capture, tshark arguments, whether a key file is set, the plugin's -T json packets) of every run."""
    if not ws.plugin_path().exists():
        pytest.skip("the C plugin is not built (build/plugin)")
    runs = []
    walk = []
    for group in WALK_VECTORS:
        cap, keys = work / f"{group}.pcap", work / f"{group}.keys"
        shutil.copy(VECTORS / f"{group}.pcap", cap)
        shutil.copy(VECTORS / f"{group}.keys", keys)
        readable(cap), readable(keys)
        walk.append(cap)
        runs.append((group, cap, ["-o", f"psp.keyfile:{keys}", "-o", f"eesp.keyfile:{keys}", "-2"], True))
        # Cut inside the EESP and PSP headers (Ethernet + IPv4 + UDP is 42 octets), and after them.
        for snap in (38, 48, 60):
            cut = work / f"{group}_cut{snap}.pcap"
            editcap("-s", str(snap), str(cap), str(cut))
            runs.append((f"{group} cut at {snap}", readable(cut), ["-o", f"psp.keyfile:{keys}",
                                                                  "-o", f"eesp.keyfile:{keys}"], True))
    both = merge(work / "walk_all.pcap", walk)
    runs.append(("no key file", both, ["-2"], False))
    for where in ("keys", "no keys"):
        opts = ["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"] if where == "keys" else []
        runs.append((f"bad input, {where}", bad_input_capture, opts, where == "keys"))
        runs.append((f"zero checksum, {where}", zero_checksum_capture, opts, where == "keys"))
    sa_line = next(line for line in (VECTORS / "eesp_aes-ccm-12_g02.keys").read_text().splitlines()
                   if line.startswith("eesp-sa"))
    secret = "96c22dc799198090b74b70ae468e4e30"
    bad_files = {
        "keyfile-syntax": ("psp-master key0\n", "key0=00\n"),
        "keyfile-bad-value": (f"# keys\npsp-master key0={MK0.hex()}\npsp-key spi=1 version=1 key={secret}\n",
                              f"# keys\n\neesp-sa spi=0x6001 suite=aes-gcm-16 key={secret}\n"),
        "keyfile-duplicate": (f"psp-master key0={MK0.hex()}\npsp-master key1={MK1.hex()}\n",
                              f"{sa_line}\n{sa_line}\n"),
        "capture-io": (None, None),
        "google/psp reference config": (" ".join(f"{b:02x}" for b in MK0) + "\n34 44\n", None),
    }
    for status, (psp_text, eesp_text) in bad_files.items():
        opts = []
        for proto, text in (("psp", psp_text), ("eesp", eesp_text)):
            path = work / f"bad-{status.replace('/', '_').replace(' ', '_')}-{proto}.keys"
            if text is not None:
                path.write_text(text)
                readable(path)
            opts += ["-o", f"{proto}.keyfile:{path}"]
        runs.append((status, both, opts, True))
    # Above the core's limit for a key file (a sparse file: nothing is written).
    huge = work / "huge.keys"
    with open(huge, "wb") as fh:
        fh.truncate(16 * 1024 * 1024 + 1)
    readable(huge)
    runs.append(("invalid-argument", both, ["-o", f"psp.keyfile:{huge}", "-o", f"eesp.keyfile:{huge}"], True))
    out = []
    for label, cap, opts, keyed in runs:
        pkts = ws.packets_json(cap, extra=["--no-duplicate-keys", *opts], profile=home(), plugin="plain")
        out.append((label, cap, opts, keyed, pkts))
    return out


def compare_with_plugin(runs, engine: str, no_pelua_dir: Path) -> Tuple[set, set]:
    """Runs the scripts beside each plugin run; returns the statuses both showed and the items seen."""
    decrypts = engine == "pelua" or lua_has_gcrypt()
    seen, names = set(), set()
    for label, cap, opts, keyed, plugin_pkts in runs:
        lua_pkts = ws.packets_json(cap, extra=["--no-duplicate-keys", *opts], profile=home(),
                                   **lua_engine_kw(engine, no_pelua_dir))
        assert len(lua_pkts) == len(plugin_pkts), label
        for n, (p, q) in enumerate(zip(plugin_pkts, lua_pkts), 1):
            for proto in ("psp", "eesp"):
                where = (label, n, proto, engine)
                want, got = layer_values(p, proto, f"{proto}.status"), layer_values(q, proto, f"{proto}.status")
                want_items = layer_items(p, proto)
                got_items = [i for i in layer_items(q, proto) if not i[1].startswith(INNER_FAILED)]
                check_category_items(got_items, proto, where)
                names.update(i[0] for i in got_items)
                if decrypts or not keyed or got == want:
                    assert got == want, (where, got, want, got_items)
                    assert got_items == want_items, (where, got_items, want_items)
                    seen.update(want)
                    if want:
                        assert want[0] == "ok" or status_expert(proto, want[0]) in {i[0] for i in got_items}, where
                    for name in ("icv_good", "icv_bad"):
                        assert layer_values(q, proto, f"{proto}.{name}") == layer_values(p, proto, f"{proto}.{name}"), \
                            (where, name)
                else:
                    # Not opened here: the statuses that need a key are the plugin's alone.
                    assert not got and want and not set(want) & BEFORE_LOOKUP, (where, got, want)
                    notes = [i for i in layer_items(q, "psp") + layer_items(q, "eesp") if i[0].endswith(".no_module")]
                    assert notes and all(NO_ENGINE in i[1] for i in notes), where
                    zero = [i for i in want_items if i[0].endswith((".udp_zero_checksum", ".udp_bad_checksum"))]
                    assert [i for i in got_items if not i[0].endswith(".no_module")] == zero, where
    return seen, names


@pytest.mark.parametrize("engine", ["pelua", "no-pelua"])
def test_statuses_and_experts_are_the_plugins(pelua_built: Path, beside_runs, engine: str,
                                               no_pelua_dir: Path) -> None:
    """Every vector group with every packet status, cut captures, truncated packets, no key file, bad key files
    (each problem's expert on every packet it may have cost its key), IPv6 zero UDP checksums: with pelua, and
    without it (in Lua on 4.6+, headers only before), the same status and expert items as the C plugin; every
    status item is the one its core category names."""
    seen, names = compare_with_plugin(beside_runs, engine, no_pelua_dir)
    if engine == "pelua" or lua_has_gcrypt():
        assert WALK_STATUSES <= seen, WALK_STATUSES - seen
        for proto in ("psp", "eesp"):
            for category in ("configuration", "io", "malformed", "authentication", "no-key", "cut-by-capture"):
                assert f"{proto}.expert.{category.replace('-', '_')}" in names, (proto, category)
        assert {"eesp.expert.replay", "eesp.expert.policy", "eesp.expert.not_this_protocol",
                "eesp.expert.seq_wrong", "psp.expert.gmac_unverified"} <= names
    else:
        assert HEADER_STATUSES <= seen, HEADER_STATUSES - seen
    assert {"psp.expert.udp_zero_checksum", "eesp.expert.udp_zero_checksum", "eesp.expert.udp_bad_checksum"} <= names


@pytest.mark.parametrize("engine", ["pelua", "no-pelua"])
def test_truncated_and_cut_packets(pelua_built: Path, bad_input_capture: Path, keyfile: Path, engine: str,
                                   no_pelua_dir: Path) -> None:
    """A PSP payload of 9 or 20 octets and EESP of 5 (on IP and in UDP) are too short, as the plugin says, on
    every path; cut by the capture's snap length, inside a header or later, a packet says the capture cut it
    (category cut-by-capture), never that it is malformed."""
    names = ["frame.cap_len", "frame.len", "psp.status", "eesp.status", "_ws.expert.message"]
    got = rows(bad_input_capture, names, extra=["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"],
               **{k: v for k, v in lua_engine_kw(engine, no_pelua_dir).items() if k == "env"})
    decrypts = engine == "pelua" or lua_has_gcrypt()
    n = len(got) // (1 + len(BAD_INPUT_SNAPS))
    assert len(got) == n * (1 + len(BAD_INPUT_SNAPS)) and n == 8
    wire = [r["psp.status"] or r["eesp.status"] for r in got[:n]]
    opened = "ok" if decrypts else ""
    assert wire == ["psp-truncated", "psp-truncated", "eesp-truncated", "eesp-truncated" if decrypts else "",
                    "eesp-truncated", opened, opened, opened], wire
    for r, status in zip(got[:n], wire):
        if status == "psp-truncated":
            assert "Malformed: PSP packet shorter than its header and ICV (psp-truncated)" in r["_ws.expert.message"]
        elif status == "eesp-truncated":
            assert "Malformed: EESP packet shorter than its headers and ICV (eesp-truncated)" in \
                r["_ws.expert.message"]
    cut_in_header = {38: "eesp", 45: "eesp", 50: "psp"}  # where the snap length falls inside that header
    for i, snap in enumerate(BAD_INPUT_SNAPS, 1):
        part = got[i * n : (i + 1) * n]
        for r in part:
            status = r["psp.status"] or r["eesp.status"]
            if int(r["frame.cap_len"]) < int(r["frame.len"]) and status:
                assert status == "capture-packet-cut", (snap, r)
                assert "Cut by the capture: packet was cut by the capture snap length (capture-packet-cut)" in \
                    r["_ws.expert.message"] and "Malformed" not in r["_ws.expert.message"], (snap, r)
            elif int(r["frame.cap_len"]) == int(r["frame.len"]):
                assert status in wire, (snap, r)
        if snap in cut_in_header:
            proto = cut_in_header[snap]
            assert any(r[f"{proto}.status"] == "capture-packet-cut" for r in part), (snap, proto)


@pytest.mark.parametrize("engine", ["pelua", "no-pelua"])
def test_bad_key_file_is_said_once_on_the_console(pelua_built: Path, work: Path, engine: str,
                                                  no_pelua_dir: Path) -> None:
    """A key-file line the core refuses: once per load on stderr (also when tshark reads the capture twice), naming
    the file and line and never a key; every packet left without a key says so too (checked beside the plugin
    above).  Without a way to decrypt the file is never read: nothing is said of it, each packet notes why."""
    secret = "96c22dc799198090b74b70ae468e4e30"
    bad = work / "console-bad.keys"
    bad.write_text(f"# keys\npsp-master key0={MK0.hex()}\npsp-key spi=1 version=1 key={secret}\n")
    readable(bad)
    enc = pypsp.Encryptor(master_keys=(MK0, MK1), spi=0x9A345678)
    sa = pyeesp.SA(0x6001, "aes-gcm-16", key=bytes(range(20)), mode="tunnel")
    cap = write_frames(work / "console.pcap", [enc.encrypt(p) for p in clear_packets(3, seed=4)] +
                       [sa.encrypt(clear_packets(1, seed=5)[0])])
    kw = lua_engine_kw(engine, no_pelua_dir)
    proc = run(["-n", "-r", str(cap), "-2", "-T", "fields", "-e", "psp.status", "-e", "eesp.status", "-e",
                "_ws.expert.message",
                "-o", f"psp.keyfile:{bad}", "-o", f"eesp.keyfile:{bad}"], **kw)
    no_lua_error(proc)
    assert secret not in proc.stderr + proc.stdout and MK0.hex() not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if str(bad) in line]
    if engine == "pelua" or lua_has_gcrypt():
        message = f"{bad}, line 3: psp-key: field 'key' is 16 bytes but version 1 needs 32"
        assert lines == [f"psp.lua: PSP key file {message}", f"eesp.lua: EESP key file {message}"], proc.stderr
        rows = [row.split("\t") for row in proc.stdout.splitlines()]
        assert [r[0] or r[1] for r in rows] == ["no-key", "no-key", "no-key", "eesp-no-sa"]
        for (_, _, msgs), proto in zip(rows, ["PSP"] * 3 + ["EESP"]):
            assert f"Configuration: {proto} key file {message} (keyfile-bad-value)" in msgs, msgs
    else:
        assert lines == [], proc.stderr
        rows = [row.split("\t") for row in proc.stdout.splitlines()]
        assert len(rows) == 4 and all(r[0] == r[1] == "" and NO_ENGINE in r[2] for r in rows), rows


