"""The Wireshark plugin (dissectors/plugin: psp_eesp.so) driven through tshark: registration, PSP, robustness.

Captures are made by pypsp; what tshark says about every packet (``-T fields``, ``-T json``) is compared with
what the Python library says it holds: header fields from ``pypsp.Header``, the decrypted inner packet
(addresses, ports and payload of the inner layers, dissected by Wireshark from the plugin's decrypted data
source) against the cleartext packet.

- registration (``-G fields``, ``-G plugins``: the module of build/plugin, not the installed one);
- PSP: versions 0-3 x transport/tunnel x inner IPv4/IPv6, VC, crypt offsets, S/D bits, both master keys,
  derived keys; keys from the key file, from the ``psp_keys`` UAT file, and from ``-o uat:psp_keys:...``;
  failures (wrong key, no key, GMAC without key, truncated, unknown version, snap-length cut);
- robustness: every capture (PSP and EESP) fuzzed with ``editcap -E`` and cut with ``editcap -s`` through the
  plain and the ASan/UBSan build of the plugin.

tshark runs through tests/wireshark.py (as ``nobody`` when root, WIRESHARK_PLUGIN_DIR=build/plugin...):
every file it reads lives in a world-readable directory.  The module builds the plugin (cmake) when
needed and skips only when tshark is not installed; the captures and fixtures are tests/wireshark/wsplugin.py's.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import List, Optional

import pytest

import pypsp
import wireshark as ws

from wsplugin import (
    CRASH_MARKERS,
    EESP_EXPERTS,
    LAYER_FIELDS,
    MK0,
    MK1,
    PSP_DERIVED,
    PSP_EXPERTS,
    PSP_FIELDS,
    PSP_PORT,
    QUIET,
    REFERENCE,
    V4,
    _profile,
    _readable,
    asan_env,
    b,
    check_psp_decrypted,
    editcap,
    eesp_cases,
    eesp_error_capture,
    eesp_files,
    eesp_keyfile_text,
    empty_profile,
    expected_layers,
    experts,
    fields,
    flow_packet,
    ip_pkt,
    l4,
    layer,
    packets_json,
    parse_ip,
    plugin_built,
    psp_cases,
    psp_cut_capture,
    psp_error_capture,
    psp_files,
    psp_keyfile_text,
    psp_of,
    psp_uat_rows,
    seq_capture,
    tshark,
    uat_row,
    udp4500_capture,
    work,
    write_capture,
    write_text,
)


# --------------------------------------------------------------------------- 1. registration


def test_wireshark_md_filter_example_prints_what_it_says():
    """docs/wireshark.md's filter on decrypted traffic, run as written on the demo's capture (made as
    scripts/demo.sh makes it), prints the lines the document shows."""
    import shlex
    import sys

    doc = (ws.ROOT / "docs" / "wireshark.md").read_text()
    (block,) = [b for b in re.findall(r"^```sh\n(.*?)^```", doc, re.S | re.M) if b.startswith("$ tshark") and
                "psp_9a345678" in b]
    lines = block.replace("\\\n", " ").splitlines()
    command, shown = lines[0][2:], [ln for ln in lines[1:] if ln.strip()]
    assert shown, "the example shows no output"
    out = ws.shared_dir("pe-docfilter-")
    demo = ws.ROOT / "demo"
    env = {**os.environ, "PYTHONPATH": str(ws.ROOT)}
    subprocess.run([sys.executable, str(demo / "sample_traffic.py"), str(out / "sample.pcapng"), "--packets", "2000"],
                   check=True, env=env, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-m", "pypsp", "encrypt", str(out / "sample.pcapng"), str(out / "psp_9a345678.pcapng"),
                    "--key-file", str(demo / "keys.txt"), "--spi", "9a345678", "-q"],
                   check=True, env=env, capture_output=True, timeout=300)
    shutil.copy(demo / "keys.txt", out / "keys.txt")
    for f in out.iterdir():
        f.chmod(0o644)
    args = shlex.split(command.replace("$PWD/demo/keys.txt", str(out / "keys.txt")))
    assert args[0] == "tshark"
    args = [str(out / a[len("out/demo/"):]) if a.startswith("out/demo/") else a for a in args[1:]]
    proc = ws.run(args)
    assert proc.stdout.splitlines() == shown, proc.stdout


def test_fields_and_experts_are_registered(empty_profile):
    out = tshark(["-G", "fields"], profile=empty_profile).stdout
    names = {line.split("\t")[2] for line in out.splitlines() if line.startswith(("F\t", "P\t"))}
    want = {"psp", "eesp", *PSP_FIELDS[:22], *PSP_EXPERTS, *EESP_EXPERTS,
            *("eesp." + n for n in (
                "compat", "version", "reserved", "opt_len", "session_id", "spi", "option", "option.type",
                "option.len", "option.data", "option.payload_offset", "option.crypt_offset", "option.co_reserved",
                "seq", "iv", "payload", "icv", "data", "next_header", "pad_len", "format", "suite", "status",
                "icv_good", "icv_bad", "sequence_analysis_expected_sn", "sequence_analysis_previous_frame",
                "replay"))}
    assert want <= names, sorted(want - names)


def test_plugin_is_the_build_under_test(empty_profile):
    out = tshark(["-G", "plugins"], profile=empty_profile).stdout
    rows = [line.split("\t") for line in out.splitlines() if line.startswith(ws.PLUGIN_NAME)]
    assert len(rows) == 1, out
    assert rows[0][2].strip() == "dissector"
    assert Path(rows[0][3].strip()).resolve() == ws.plugin_path("plain").resolve()


def test_preferences_are_registered(empty_profile):
    out = tshark(["-G", "defaultprefs"], profile=empty_profile).stdout
    for pref in ("psp.keyfile", "psp.encrypted_payload: TRUE", "eesp.keyfile", "eesp.ip_protocol: 49", "eesp.udp_port: 4500",
                 "eesp.udp_dispatch: TRUE", "eesp.do_sequence_analysis: TRUE"):
        assert f"#{pref}" in out, pref
    # an enum: 4.0 writes its name, 4.4 and later its description
    assert "#eesp.udp_classify: auto\n" in out or "#eesp.udp_classify: Auto (eesp.md §14)\n" in out


# --------------------------------------------------------------------------- 2. PSP: every version and mode


@pytest.mark.parametrize("keys,capture", [("keyfile", "pcapng-ether"), ("uat-file", "pcap-raw"),
                                          ("uat-option", "pcap-nsec-ether")])
def test_psp_decrypts_every_version_and_mode(work, psp_cases, psp_files, empty_profile, keys, capture):
    """Header fields as pypsp parses them, status ok, the inner packet dissected as it was sent."""
    profile, opts = empty_profile, []
    if keys == "keyfile":
        opts = [f"psp.keyfile:{psp_files['keyfile']}"]
    elif keys == "uat-file":
        profile = _profile(work, "psp-uat", {"psp_keys": "\n".join(psp_uat_rows()) + "\n"})
    else:
        opts = [f"uat:psp_keys:{r}" for r in psp_uat_rows()]
    rows = fields(psp_files[capture], PSP_FIELDS, profile=profile, opts=opts)
    assert len(rows) == len(psp_cases)
    for row, case in zip(rows, psp_cases):
        check_psp_decrypted(row, case)
    # the matrix covered what it claims
    hs = [c.header for c in psp_cases]
    assert {h.version for h in hs} == {0, 1, 2, 3}
    assert {h.key_phase for h in hs} == {0, 1} and any(h.virt for h in hs) and any(h.crypt_offset for h in hs)
    assert any(h.sample and h.drop for h in hs) and any(h.drop and not h.sample for h in hs)
    assert {(c.mode, parse_ip(c.clear).family, parse_ip(c.outer).family) for c in psp_cases} >= {
        ("transport", 4, 4), ("transport", 6, 6), ("tunnel", 4, 4), ("tunnel", 6, 6), ("tunnel", 6, 4),
        ("tunnel", 4, 6)}


def test_psp_json_matches_the_header(psp_cases, psp_files, empty_profile):
    """-T json: the PSP layer of each packet holds pypsp's header fields, and no expert info."""
    pkts = packets_json(psp_files["pcap-raw"], profile=empty_profile,
                        opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    assert len(pkts) == len(psp_cases)
    for pkt, case in zip(pkts, psp_cases):
        psp = layer(pkt, "psp")
        h = case.header
        assert psp["psp.spi"] == f"0x{h.spi:08x}"
        assert psp["psp.iv"] == f"0x{h.iv:016x}"
        assert psp["psp.version"] == str(h.version)
        assert psp["psp.cryptoffset"] == str(h.crypt_offset)
        assert psp["psp.status"] == "ok"
        assert psp["psp.icv"] == psp_of(case.outer)[-16:].hex(":")
        if h.virt:
            assert psp["psp.vc"] == f"0x{case.vc.hex()}"  # decrypted when the crypt offset covers it
        assert not [e for e in experts(pkt) if e.startswith("psp.")], case.label


def test_psp_derived_key_wins_over_the_master_pair(work, psp_cases, psp_files, empty_profile):
    """Without the derived-key rows the master pair derives another key: ICV bad, for those SPIs only."""
    rows = fields(psp_files["pcap-raw"], ("psp.spi", "psp.status"), profile=empty_profile,
                  opts=[f"uat:psp_keys:{psp_uat_rows()[0]}"])
    for row, case in zip(rows, psp_cases):
        want = "authentication-failed" if case.header.spi in PSP_DERIVED else "ok"
        assert row["psp.status"] == [want], case.label


def test_psp_keyfile_and_table_together(work, psp_cases, psp_files):
    """The table's master pair with the file's derived keys: everything decrypts."""
    keyfile = write_text(work / "psp-derived-only.txt", "\n".join(l for l in psp_keyfile_text().splitlines() if l.startswith("psp-key")) + "\n")
    profile = _profile(work, "psp-master-only", {"psp_keys": psp_uat_rows()[0] + "\n"})
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=profile, opts=[f"psp.keyfile:{keyfile}"])
    assert [r["psp.status"] for r in rows] == [["ok"]] * len(psp_cases)


def test_psp_master_key_selection_by_spi_msb(work, psp_cases, psp_files, empty_profile):
    """A table row with key 0 only decrypts the SPIs whose MSB is 0; the others have no key."""
    rows = fields(psp_files["pcap-raw"], ("psp.spi", "psp.status", "psp.master_key"), profile=empty_profile,
                  opts=[f"uat:psp_keys:{uat_row('*', '*', 'master-pair', MK0.hex(), '')}"])
    for row, case in zip(rows, psp_cases):
        if case.header.spi in PSP_DERIVED:
            continue
        assert row["psp.status"] == (["ok"] if case.header.key_phase == 0 else ["no-key"]), case.label


def test_psp_table_row_restricted_to_one_version(psp_cases, psp_files, empty_profile):
    """A master pair for version 1 only: version 1 packets decrypt, the others find no key."""
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=empty_profile,
                  opts=[f"uat:psp_keys:{uat_row('*', '1', 'master-pair', MK0.hex(), MK1.hex())}"])
    for row, case in zip(rows, psp_cases):
        if case.header.spi in PSP_DERIVED:
            continue
        assert row["psp.status"] == (["ok"] if case.header.version == 1 else ["no-key"]), case.label


# Each row becomes one key-file line (keys.c): a line break inside a field would add lines of its own.
# \x0a is how a UAT file and -o uat: write a newline inside a quoted field.
_K777 = PSP_DERIVED[0x777][1].hex()
_K778 = PSP_DERIVED[0x80000778][1].hex()
_INJECTED = f"\\x0apsp-key spi=0x00000777 key={_K777} version=1"
PSP_INJECTIONS = {
    "master-key1": uat_row("*", "*", "master-pair", MK0.hex(), MK1.hex() + _INJECTED),
    "derived-key0": uat_row("0x80000778", "*", "derived", _K778 + _INJECTED, ""),
    "derived-spi": uat_row(f"0x80000778{_INJECTED}", "*", "derived", _K778, ""),
}


@pytest.mark.parametrize("where", sorted(PSP_INJECTIONS))
@pytest.mark.parametrize("source", ["uat-file", "uat-option"])
def test_psp_table_row_with_a_line_break_is_refused(work, psp_cases, psp_files, empty_profile, where, source):
    """A row whose field holds a newline and a second key line is refused with an error naming the field
    (like an EESP row whose Options hold one): neither the injected key nor the row's own keys decrypt
    anything, and no key reaches the message.  From a UAT file tshark reports the row and goes on; an
    -o uat: value it refuses outright, as any invalid -o."""
    row = PSP_INJECTIONS[where]
    if source == "uat-file":
        profile, opts = _profile(work, f"psp-inject-{where}", {"psp_keys": row + "\n"}), []
    else:
        profile, opts = empty_profile, [f"uat:psp_keys:{row}"]
    proc = ws.run(["-n", "-r", str(psp_files["pcap-raw"]), "-T", "fields", "-e", "psp.spi", "-e", "psp.status",
                   *[a for o in opts for a in ("-o", o)]], profile=profile, check=False)
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr, proc.stderr[-4000:]
    assert re.search(r"(SPI|Key [01]) must be one line", proc.stderr), proc.stderr[-2000:]
    # tshark quotes a refused -o value itself ('Invalid -o flag "...": '); our message follows it.
    ours = "\n".join(line.rsplit('": ', 1)[-1] for line in proc.stderr.splitlines())
    assert _K777 not in ours and _K778 not in ours and MK1.hex() not in ours, ours
    statuses = {case.header.spi: line.split("\t")[1] for line, case in zip(proc.stdout.splitlines(), psp_cases)}
    if source == "uat-option":
        assert proc.returncode != 0 and statuses == {}, proc.stdout[-2000:]
        return
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(statuses) == len({c.header.spi for c in psp_cases}), proc.stdout[-2000:]
    assert statuses[0x00000777] != "ok", "the injected psp-key line was loaded"
    assert set(statuses.values()) == {"no-key"}, f"the row was accepted: {statuses}"


# --------------------------------------------------------------------------- 3. PSP failures



def test_psp_failures_are_flagged(psp_error_capture, empty_profile):
    path, items, keyfile = psp_error_capture
    opts = [f"psp.keyfile:{keyfile}"]
    pkts = packets_json(path, profile=empty_profile, opts=opts)
    rows = fields(path, ("psp.status", "psp.icv_good", "psp.icv_bad", "udp.dstport", "tcp.dstport",
                         "frame.protocols", "psp.version"), profile=empty_profile, opts=opts)
    got = {label: (row, experts(pkt)) for (label, _), row, pkt in zip(items, rows, pkts)}
    assert len(got) == len(items) == len(rows)

    row, ex = got["wrong-key"]
    assert row["psp.status"] == ["authentication-failed"]
    assert (row["psp.icv_good"], row["psp.icv_bad"]) == (["0"], ["1"])
    assert "psp.expert.authentication" in ex and row["udp.dstport"] == [str(PSP_PORT)]

    row, ex = got["icv-flipped"]
    assert row["psp.status"] == ["authentication-failed"] and "psp.expert.authentication" in ex

    row, ex = got["no-key"]
    assert row["psp.status"] == ["no-key"] and "psp.expert.no_key" in ex
    assert row["psp.icv_good"] == row["psp.icv_bad"] == []
    assert row["frame.protocols"][0].endswith(":psp")

    # GMAC without a key: the payload is in clear, dissected and marked as not verified.
    clear = flow_packet(900, 4, 17)
    row, ex = got["gmac-no-key-transport"]
    assert row["psp.status"] == ["no-key"] and {"psp.expert.no_key", "psp.expert.gmac_unverified"} <= set(ex)
    assert row["udp.dstport"] == [str(PSP_PORT), str(struct.unpack("!H", parse_ip(clear).payload[2:4])[0])]
    row, ex = got["gmac-no-key-tunnel"]
    assert "psp.expert.gmac_unverified" in ex
    assert row["tcp.dstport"] == [str(51000 + 901)]
    assert row["frame.protocols"][0].split(":psp:")[1].startswith("ipv6:tcp")

    row, ex = got["ok"]
    assert row["psp.status"] == ["ok"] and not [e for e in ex if e.startswith("psp.")]

    assert got["empty"][0]["psp.status"] == []  # UDP hands no empty payload on
    for label in ("truncated-10", "truncated-header-no-icv", "bad-hdr-ext-len"):
        row, ex = got[label]
        assert row["psp.status"] and row["psp.status"] != ["ok"], label
        assert "psp.expert.malformed" in ex, (label, ex)
    assert got["truncated-10"][0]["psp.status"] == ["psp-truncated"]
    assert got["bad-hdr-ext-len"][0]["psp.status"] == ["psp-bad-hdr-ext-len"]

    row, ex = got["unknown-version"]
    assert row["psp.version"] == ["5"] and row["psp.status"] == ["psp-unsupported-version"]
    assert "psp.expert.malformed" in ex


def test_psp_without_any_key(psp_files, psp_cases, empty_profile):
    """No key configured at all: every packet no-key, GMAC payloads still dissected."""
    rows = fields(psp_files["pcap-raw"], ("psp.status", "_ws.expert.message", "udp.dstport", "tcp.dstport"),
                  profile=empty_profile)
    for row, case in zip(rows, psp_cases):
        assert row["psp.status"] == ["no-key"], case.label
        inner = parse_ip(case.clear)
        inner_dport = str(struct.unpack("!H", inner.payload[2:4])[0])
        seen = row["udp.dstport"][1:] + row["tcp.dstport"]
        if case.header.version >= 2:
            assert inner_dport in seen, case.label
        else:
            assert seen == [], case.label



def test_psp_snap_length_cut(psp_cut_capture, psp_files, psp_cases, empty_profile):
    """Status capture-packet-cut; what was captured of the header is shown, the VC too (as sent: a cut packet
    cannot be decrypted, so a VC under a crypt offset below 2 words shows encrypted)."""
    rows = fields(psp_cut_capture, ("psp.status", "psp.spi", "psp.vc", "psp.sectoken", "psp.virtkey", "psp.ext",
                                    "frame.cap_len", "frame.len", "_ws.col.Info"), profile=empty_profile,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    pkts = packets_json(psp_cut_capture, profile=empty_profile, opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    for row, pkt, case in zip(rows, pkts, psp_cases):
        h = case.header
        assert row["frame.cap_len"] == ["90"] and int(row["frame.len"][0]) > 90
        assert row["psp.spi"] == [f"0x{h.spi:08x}"]
        assert row["psp.status"] == ["capture-packet-cut"], case.label
        assert "psp.expert.cut_by_capture" in experts(pkt)
        # Ethernet + IPv6 + UDP + header + VC is 86 octets: every VC was captured
        assert row["psp.vc"] == ([f"0x{h.vc.hex()}"] if h.virt else []), case.label
        assert row["psp.sectoken"] == ([f"0x{h.vc[:4].hex()}"] if h.virt else []), case.label
        assert row["psp.virtkey"] == ([f"0x{h.vc[4:].hex()}"] if h.virt else []), case.label
        captured = len(psp_of(case.outer)) - (int(row["frame.len"][0]) - 90)
        ext = (h.extension[8:] if h.virt else h.extension)[:max(0, captured - 16 - (8 if h.virt else 0))]
        assert row["psp.ext"] == ([ext.hex()] if ext else []), case.label
        assert "[no key]" not in row["_ws.col.Info"][0]
    assert any(c.header.virt and parse_ip(c.outer).family == 6 for c in psp_cases)


def test_psp_cut_packet_shows_no_icv(psp_cut_capture, psp_files, psp_cases, empty_profile):
    """The ICV is the last 16 octets of the *reported* packet: a cut packet did not capture it, so the
    dissector must not label the last captured octets as the ICV (nor the rest as the payload up to it)."""
    rows = fields(psp_cut_capture, ("psp.icv", "psp.status"), profile=empty_profile,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    bad = [(c.label, r["psp.icv"]) for r, c in zip(rows, psp_cases) if r["psp.icv"]]
    assert bad == [], f"{len(bad)} cut packets show an ICV taken from the captured octets, e.g. {bad[:2]}"


def test_psp_encrypted_payload_off_dissects_cleartext_captures(work, empty_profile):
    """google/psp's psp.lua setting, for captures taken before encryption: header, then the payload in clear
    and no ICV; the payload is dissected by the header's Next Header."""
    inners = [(17, parse_ip(flow_packet(950, 4, 17)).payload, False, 17), (4, flow_packet(951, 4, 6), True, 6),
              (41, flow_packet(952, 6, 17), True, 17), (6, parse_ip(flow_packet(953, 6, 6)).payload, False, 6)]
    outers, headers = [], []
    for i, (nh, inner, _, _) in enumerate(inners):
        h = pypsp.Header(next_header=nh, spi=0x1000 + i, iv=i + 1, version=i, virt=i == 2,
                         extension=bytes(range(8)) if i == 2 else b"")
        headers.append(h)
        udp = l4(17, V4[0], V4[1], 4000, PSP_PORT, h.build() + inner)
        outers.append(ip_pkt(V4[0], V4[1], 17, udp))
    path = write_capture(work / "psp-clear.pcap", outers)
    rows = fields(path, ("psp.spi", "psp.version", "psp.nexthdr", "psp.icv", "psp.status", "psp.payload")
                  + LAYER_FIELDS, profile=empty_profile, opts=["psp.encrypted_payload:FALSE"])
    for row, outer, h, (nh, inner, is_ip, proto) in zip(rows, outers, headers, inners):
        assert row["psp.spi"] == [f"0x{h.spi:08x}"] and row["psp.version"] == [str(h.version)]
        assert row["psp.icv"] == row["psp.status"] == []
        assert row["psp.payload"] == [inner.hex()]
        want = expected_layers(outer, 17, inner, is_ip, proto)
        for name in LAYER_FIELDS:
            assert row[name] == want[name], (nh, name)


# --------------------------------------------------------------------------- 8. robustness


@pytest.fixture(scope="module")
def fuzz_inputs(work, psp_files, psp_error_capture, eesp_files, eesp_error_capture, seq_capture, udp4500_capture):
    """Every capture above (and the reference ones), fuzzed at several rates and cut at several lengths, merged
    into one file; one key file with all the keys."""
    sources = [psp_files["pcapng-ether"], psp_files["pcap-raw"], psp_error_capture[0], eesp_files["pcap-ether"],
               eesp_files["pcapng-raw"], eesp_error_capture[0], seq_capture[0], udp4500_capture[0]]
    if REFERENCE.is_dir():
        sources += sorted((REFERENCE / "encrypted").glob("*.pcap"))
    base = work / "fuzz-base.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(base), *map(str, sources)], check=True)
    variants = []
    for rate in ("0.01", "0.05", "0.2"):
        for seed in ("1", "2", "3"):
            out = work / f"fuzz-E{rate}-s{seed}.pcapng"
            editcap("-E", rate, "--seed", seed, str(base), str(out))
            variants.append(out)
        # the same rate past the Ethernet + IPv4 + UDP headers, so that more of the errors land in PSP/EESP
        out = work / f"fuzz-E{rate}-o42.pcapng"
        editcap("-E", rate, "--seed", "4", "-o", "42", str(base), str(out))
        variants.append(out)
    for snap in ("20", "40", "60"):
        out = work / f"fuzz-s{snap}.pcapng"
        editcap("-s", snap, str(base), str(out))
        variants.append(out)
    merged = work / "fuzz-all.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(merged), *map(str, variants)], check=True)
    _readable(merged)
    keyfile = write_text(work / "fuzz-keys.txt", psp_keyfile_text() + eesp_keyfile_text() +
                       "\n".join(l for l in open(seq_capture[2]).read().splitlines()) + "\n" +
                       open(udp4500_capture[2]).read())
    return merged, variants, keyfile


def _fuzz_args(cap: Path, keyfile: Optional[Path]) -> List[str]:
    """Two passes (sequence analysis revisits packets) and the full tree; with the keys every decryption path
    runs, without them the Base Header / GMAC-in-clear paths do."""
    keys = ["-o", f"psp.keyfile:{keyfile}", "-o", f"eesp.keyfile:{keyfile}"] if keyfile else []
    return ["-n", "-r", str(cap), "-2", "-V", *keys, "-o", "eesp.do_sequence_analysis:TRUE"]


def _check_fuzz_run(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, f"{what}: tshark exited {proc.returncode}\n{proc.stderr[-4000:]}"
    for marker in CRASH_MARKERS:
        assert marker not in proc.stderr, f"{what}: {marker!r} on stderr\n{proc.stderr[-4000:]}"
    assert "Dissector bug" not in proc.stdout, what
    assert "PSP Security Protocol" in proc.stdout and "Enhanced Encapsulating Security Payload" in proc.stdout


@pytest.mark.parametrize("keys", [True, False], ids=["keys", "no-keys"])
def test_fuzzed_and_cut_captures_plain(fuzz_inputs, empty_profile, keys):
    merged, variants, keyfile = fuzz_inputs
    proc = ws.run([*QUIET, *_fuzz_args(merged, keyfile if keys else None)], profile=empty_profile, check=False,
                  timeout=300)
    _check_fuzz_run(proc, "plain plugin")


@pytest.mark.parametrize("keys", [True, False], ids=["keys", "no-keys"])
def test_fuzzed_and_cut_captures_asan(fuzz_inputs, empty_profile, asan_env, keys):
    merged, variants, keyfile = fuzz_inputs
    proc = ws.run([*QUIET, *_fuzz_args(merged, keyfile if keys else None)], profile=empty_profile, plugin="asan",
                  env=asan_env, check=False, timeout=600)
    _check_fuzz_run(proc, "ASan plugin")


def test_clean_captures_asan(psp_files, eesp_files, seq_capture, empty_profile, asan_env, psp_cases):
    """The ASan build decrypts as the plain one does (so the fuzz run above did load it)."""
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=empty_profile, plugin="asan", env=asan_env,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    assert [r["psp.status"] for r in rows] == [["ok"]] * len(psp_cases)
    rows = fields(eesp_files["pcap-ether"], ("eesp.status",), profile=empty_profile, plugin="asan", env=asan_env,
                  opts=[f"eesp.keyfile:{eesp_files['keyfile']}"], extra=["-2"])
    assert {r["eesp.status"][0] for r in rows} == {"ok"}


