"""The Wireshark plugin's EESP through tshark, and the UDP 4500 dispatch.

Captures are made by pyeesp; what tshark says about every packet (``-T fields``, ``-T json``) is compared with
what ``pyeesp.Receiver`` says it holds, the decrypted inner layers against the cleartext packet.

- EESP: a suite of each family (GCM, CCM, ChaCha20, GMAC, implicit IV), full/optimized, tunnel/transport, Crypt Offset option, extra options,
  no Sequence Number, the Linux XFRM AAD, Sub SAs from a root key, SAs bound to a destination, UDP
  encapsulation; keys from the key file and the ``eesp_sa`` UAT file; failures; per-Sub SA sequence analysis;
- UDP 4500 shared by EESP, ESP, IKE and keepalives; the port / IP protocol / dispatch preferences.

tshark runs through tests/wireshark.py (as ``nobody`` when root, WIRESHARK_PLUGIN_DIR=build/plugin...):
every file it reads lives in a world-readable directory.  The module builds the plugin (cmake) when
needed and skips only when tshark is not installed; the captures and fixtures are tests/wireshark/wsplugin.py's.
"""
from __future__ import annotations

import json
import re
import struct

import pytest

import pypsp

from wsplugin import (
    CATEGORY_LOOK,
    EESP_FIELDS,
    EespSpec,
    MK0,
    MK1,
    PADN4,
    UDP4500_FIELDS,
    _esp_in_udp,
    _ike,
    _key,
    _profile,
    check_eesp_decrypted,
    editcap,
    eesp_bytes,
    eesp_cases,
    eesp_error_capture,
    eesp_files,
    eesp_specs,
    empty_profile,
    expert_items,
    experts,
    fields,
    flow_packet,
    layer,
    packets_json,
    plugin_built,
    psp_cases,
    psp_files,
    seq_capture,
    status_expert,
    tshark,
    udp4500_capture,
    work,
    write_capture,
    write_text,
)


# --------------------------------------------------------------------------- 4. EESP



@pytest.mark.parametrize("keys,capture", [("keyfile", "pcap-ether"), ("uat-file", "pcapng-raw")])
def test_eesp_decrypts_every_suite_format_and_mode(work, eesp_cases, eesp_files, empty_profile, keys, capture):
    profile, opts = empty_profile, []
    if keys == "keyfile":
        opts = [f"eesp.keyfile:{eesp_files['keyfile']}"]
    else:
        profile = _profile(work, "eesp-uat", {"eesp_sa": "\n".join(s.uat_row() for s in eesp_specs()) + "\n"})
    rows = fields(eesp_files[capture], EESP_FIELDS, profile=profile, opts=opts)
    assert len(rows) == len(eesp_cases)
    for row, case in zip(rows, eesp_cases):
        check_eesp_decrypted(row, case)
    # what the matrix covers
    gots = [c.got for c in eesp_cases]
    assert {c.spec.suite for c in eesp_cases} >= {"aes-gcm-16", "aes-ccm-8", "chacha20-poly1305", "aes-gmac",
                                                  "aes-gcm-16-iiv", "aes-ccm-8-iiv", "chacha20-poly1305-iiv"}
    assert {g.full_format for g in gots} == {True, False} and {g.udp_encap for g in gots} == {True, False}
    assert any(g.header.crypt_offset_option for g in gots) and any(g.seq is None for g in gots)
    assert any(g.header.options and not g.header.crypt_offset_option for g in gots)
    assert len({g.header.session_id for g in gots}) >= 5


def test_eesp_uat_from_the_command_line(eesp_cases, eesp_files, empty_profile):
    specs = eesp_specs()
    rows = fields(eesp_files["pcap-ether"], ("eesp.spi", "eesp.status"), profile=empty_profile,
                  opts=[f"uat:eesp_sa:{s.uat_row()}" for s in specs])
    assert [r["eesp.status"] for r in rows] == [["ok"]] * len(eesp_cases)


def test_eesp_json_options_and_layout(eesp_cases, eesp_files, empty_profile):
    """-T json: the option tree of the Crypt Offset and PadN SAs, the Sub SA IDs, generated fields."""
    pkts = packets_json(eesp_files["pcapng-raw"], profile=empty_profile,
                        opts=[f"eesp.keyfile:{eesp_files['keyfile']}"])
    assert len(pkts) == len(eesp_cases)
    for pkt, case in zip(pkts, eesp_cases):
        e = layer(pkt, "eesp")
        assert e["eesp.spi"] == f"0x{case.got.header.spi:08x}"
        assert e["eesp.session_id"] == str(case.got.header.session_id)
        assert e["eesp.status"] == "ok" and e["eesp.next_header"] == str(case.got.next_header)
        assert not [x for x in experts(pkt) if x.startswith("eesp.")], case.label
        text = json.dumps(e)
        co = case.got.header.crypt_offset_option
        if co:
            assert f'"eesp.option.crypt_offset": "{co.crypt_offset_value}"' in text
            assert f'"eesp.option.payload_offset": "{co.payload_offset}"' in text
        if case.spec.sa_kw.get("options") == PADN4:
            assert '"eesp.option.type": "1"' in text and '"eesp.option.data": "00:00"' in text


def test_eesp_sub_sas_each_decrypt(eesp_cases, eesp_files, empty_profile):
    rows = fields(eesp_files["pcap-ether"], ("eesp.spi", "eesp.session_id", "eesp.status"), profile=empty_profile,
                  opts=[f"eesp.keyfile:{eesp_files['keyfile']}"])
    seen = {}
    for row, case in zip(rows, eesp_cases):
        if case.spec.root_key is not None:
            seen.setdefault(case.spec.spi, set()).add((row["eesp.session_id"][0], row["eesp.status"][0]))
    assert seen[0x1001] == {("0", "ok"), ("1", "ok"), ("7", "ok")}
    assert seen[0x1008] == {("2", "ok"), ("3", "ok")}
    assert seen[0x1009] == {("0", "ok"), ("65535", "ok")}



def test_eesp_failures_are_flagged(eesp_error_capture, empty_profile):
    path, items, keyfile = eesp_error_capture
    opts = [f"eesp.keyfile:{keyfile}"]
    pkts = packets_json(path, profile=empty_profile, opts=opts)
    rows = fields(path, ("eesp.status", "eesp.icv_good", "eesp.icv_bad", "eesp.data", "eesp.spi",
                         "eesp.session_id", "eesp.payload", "eesp.version", "udp.dstport"),
                  profile=empty_profile, opts=opts)
    got = {label: (row, experts(pkt)) for (label, _), row, pkt in zip(items, rows, pkts)}
    assert len(rows) == len(items)

    row, ex = got["ok"]
    assert row["eesp.status"] == ["ok"] and not [e for e in ex if e.startswith("eesp.")]

    for label in ("wrong-key", "icv-flipped"):
        row, ex = got[label]
        assert row["eesp.status"] == ["authentication-failed"], label
        assert (row["eesp.icv_good"], row["eesp.icv_bad"]) == (["0"], ["1"]), label
        assert "eesp.expert.authentication" in ex, label

    row, ex = got["no-sa"]
    assert row["eesp.status"] == ["eesp-no-sa"] and "eesp.expert.no_key" in ex
    assert row["eesp.spi"] == ["0x00002999"] and row["eesp.data"] and row["eesp.payload"] == []

    row, ex = got["sub-sa-out-of-range"]
    assert row["eesp.session_id"] == ["9"] and row["eesp.status"] == ["eesp-sub-sa-out-of-range"]
    assert "eesp.expert.policy" in ex
    row, ex = got["crypt-offset-not-allowed"]
    assert row["eesp.status"] == ["eesp-crypt-offset-not-allowed"] and "eesp.expert.policy" in ex

    assert got["empty"][0]["eesp.status"] == []  # IP hands no empty payload on
    for label in ("truncated-5", "truncated-after-base", "options-overrun"):
        row, ex = got[label]
        assert row["eesp.status"] and row["eesp.status"] != ["ok"], label
        assert "eesp.expert.malformed" in ex, (label, ex)
    assert got["truncated-5"][0]["eesp.status"] == ["eesp-truncated"]
    assert got["options-overrun"][0]["eesp.status"] == ["eesp-options-overrun"]
    row, ex = got["bad-version"]
    assert row["eesp.version"] == ["1"] and row["eesp.status"] == ["eesp-unsupported-version"]
    assert "eesp.expert.malformed" in ex


def test_eesp_without_sa_shows_base_header_and_data(eesp_cases, eesp_files, empty_profile):
    rows = fields(eesp_files["pcap-ether"], ("eesp.spi", "eesp.session_id", "eesp.status", "eesp.data",
                                             "eesp.option.type", "eesp.seq", "eesp.icv"), profile=empty_profile)
    for row, case in zip(rows, eesp_cases):
        h = case.got.header
        wire = eesp_bytes(case.outer, case.got.udp_encap)
        assert row["eesp.spi"] == [f"0x{h.spi:08x}"] and row["eesp.session_id"] == [str(h.session_id)]
        assert row["eesp.status"] == ["eesp-no-sa"], case.label
        assert row["eesp.option.type"] == [str(o.type) for o in h.options]
        assert row["eesp.data"] == [wire[h.header_len:].hex()], case.label
        assert row["eesp.seq"] == row["eesp.icv"] == []


def test_eesp_snap_length_cut(work, eesp_files, eesp_cases, empty_profile):
    cut = work / "eesp-cut.pcap"
    # Ethernet + IPv6 + UDP + the EESP Base Header fit in 80 octets; every packet is longer
    editcap("-s", "80", str(eesp_files["pcap-ether"]), str(cut))
    opts = [f"eesp.keyfile:{eesp_files['keyfile']}"]
    rows = fields(cut, ("eesp.status", "eesp.spi", "eesp.icv", "frame.len"), profile=empty_profile, opts=opts)
    pkts = packets_json(cut, profile=empty_profile, opts=opts)
    for row, pkt, case in zip(rows, pkts, eesp_cases):
        assert int(row["frame.len"][0]) > 80
        assert row["eesp.spi"] == [f"0x{case.got.header.spi:08x}"]
        assert row["eesp.status"] == ["capture-packet-cut"], case.label
        assert row["eesp.icv"] == []
        assert "eesp.expert.cut_by_capture" in experts(pkt)


def test_bad_key_files_are_reported_by_line_without_key_material(work, empty_profile):
    """A key file with an error: tshark says which file and line (docs/keys.md: "The error gives the 1-based
    line and a message"), never a key, decrypts nothing from that file, and does not fail.  It says so once per
    load on the console (also when it reads the capture twice), and on every packet the file may have cost its
    key: an expert item of category configuration naming the file, the line and the core's message."""
    secret = "96c22dc799198090b74b70ae468e4e30"
    psp_bad = write_text(work / "bad-psp-keys.txt", f"# keys\npsp-master key0={MK0.hex()}\n"
                                                     f"psp-key spi=1 version=1 key={secret}\n")
    eesp_bad = write_text(work / "bad-eesp-keys.txt", "# keys\n\neesp-sa spi=0x6001 suite=aes-gcm-16 "
                                                       f"key={secret}\n")
    sa = EespSpec("bad", 0x00006001, "aes-gcm-16", key=_key(20, 70)).sa()
    enc = pypsp.Encryptor(spi=0x00006002, master_keys=(MK0, MK1))
    packets = [enc.encrypt(flow_packet(960, 4, 17)), sa.encrypt(flow_packet(961, 4, 17)),
               enc.encrypt(flow_packet(962, 6, 6)), sa.encrypt(flow_packet(963, 6, 17)),
               enc.encrypt(flow_packet(964, 4, 6))]
    path = write_capture(work / "bad-keys.pcap", packets)
    opts = ["-o", f"psp.keyfile:{psp_bad}", "-o", f"eesp.keyfile:{eesp_bad}"]
    proc = tshark(["-n", "-r", str(path), "-2", "-T", "fields", "-e", "psp.status", "-e", "eesp.status", *opts],
                  profile=empty_profile, allow_stderr=True)
    assert [line.split("\t") for line in proc.stdout.splitlines()] == [
        ["no-key", ""], ["", "eesp-no-sa"], ["no-key", ""], ["", "eesp-no-sa"], ["no-key", ""]]
    err = proc.stderr
    assert secret not in err and MK0.hex() not in err
    psp_msgs = [l for l in err.splitlines() if str(psp_bad) in l]
    eesp_msgs = [l for l in err.splitlines() if str(eesp_bad) in l]
    assert len(psp_msgs) == 1 and len(eesp_msgs) == 1, err
    assert re.search(r"\bline 3\b|:3\b", psp_msgs[0]), f"no line number in {psp_msgs[0]!r}"
    assert re.search(r"\bline 3\b|:3\b", eesp_msgs[0]), f"no line number in {eesp_msgs[0]!r}"

    pkts = packets_json(path, profile=empty_profile, opts=[o for o in opts if o != "-o"], allow_stderr=True)
    for i, pkt in enumerate(pkts):
        proto, bad = ("psp", psp_bad) if i % 2 == 0 else ("eesp", eesp_bad)
        items = [(n, m, g, sv) for n, m, g, sv in expert_items(pkt) if n == f"{proto}.expert.configuration"]
        assert len(items) == 1, (i, expert_items(pkt))
        name, msg, group, severity = items[0]
        assert f"{bad}, line 3: " in msg and "(keyfile-bad-value)" in msg, msg
        assert secret not in msg and MK0.hex() not in msg
        assert (group, severity) == CATEGORY_LOOK["configuration"]
        assert status_expert(proto, "no-key" if proto == "psp" else "eesp-no-sa") in experts(pkt)


def test_unreadable_key_file_is_an_io_problem_on_every_packet(work, psp_files, psp_cases, empty_profile):
    """A key file that cannot be opened: the core's io category, on every packet left without a key."""
    missing = work / "no-such-keys.txt"
    rows = fields(psp_files["pcap-raw"], ("psp.status",), profile=empty_profile, opts=[f"psp.keyfile:{missing}"],
                  allow_stderr=True)
    pkts = packets_json(psp_files["pcap-raw"], profile=empty_profile, opts=[f"psp.keyfile:{missing}"],
                        allow_stderr=True)
    for row, pkt, case in zip(rows, pkts, psp_cases):
        assert row["psp.status"] == ["no-key"], case.label
        io = [m for n, m, _, _ in expert_items(pkt) if n == "psp.expert.io"]
        assert len(io) == 1 and f"PSP key file {missing}: cannot open key file" in io[0] and "(capture-io)" in io[0]


# --------------------------------------------------------------------------- 5. sequence analysis


@pytest.mark.parametrize("two_pass", [False, True], ids=["one-pass", "two-pass"])
def test_eesp_sequence_analysis_per_sub_sa(seq_capture, empty_profile, two_pass):
    path, frames, keyfile = seq_capture
    opts = [f"eesp.keyfile:{keyfile}"]
    extra = ["-2"] if two_pass else []
    rows = fields(path, ("eesp.session_id", "eesp.seq", "eesp.status", "eesp.replay",
                         "eesp.sequence_analysis_expected_sn", "eesp.sequence_analysis_previous_frame"),
                  profile=empty_profile, opts=opts, extra=extra)
    pkts = json.loads(tshark(["-n", "-r", str(path), "-T", "json", "--no-duplicate-keys", "-o", opts[0], *extra],
                             profile=empty_profile).stdout)
    want_seq = ["1", "1", "2", "2", "2", "3", "3", "6", "4", "7"]
    want_expected = ["1", "1", "2", "2", "3", "3", "3", "4", "4", "7"]
    want_prev = [[], [], ["1"], ["2"], ["3"], ["5"], ["4"], ["6"], ["7"], ["8"]]
    for i, (row, pkt, (label, _)) in enumerate(zip(rows, pkts, frames)):
        ex = experts(pkt)
        assert row["eesp.status"] == ["ok"], label
        assert row["eesp.session_id"] == [label[0]] and row["eesp.seq"] == [want_seq[i]], label
        assert row["eesp.sequence_analysis_expected_sn"] == [want_expected[i]], label
        assert row["eesp.sequence_analysis_previous_frame"] == want_prev[i], label
        if "dup" in label:
            assert row["eesp.replay"] == ["1"] and "eesp.expert.replay" in ex, label
        else:
            assert row["eesp.replay"] == [] and "eesp.expert.replay" not in ex, label
        if "gap" in label or "dup" in label:
            assert "eesp.expert.seq_wrong" in ex, label
        else:  # in order on its own Sub SA, however interleaved with the other
            assert "eesp.expert.seq_wrong" not in ex, (label, ex)


def test_eesp_sequence_analysis_can_be_switched_off(seq_capture, empty_profile):
    path, frames, keyfile = seq_capture
    rows = fields(path, ("eesp.status", "eesp.replay", "eesp.sequence_analysis_expected_sn", "_ws.expert.message"),
                  profile=empty_profile, opts=[f"eesp.keyfile:{keyfile}", "eesp.do_sequence_analysis:FALSE"])
    for row in rows:
        assert row["eesp.status"] == ["ok"]
        assert row["eesp.replay"] == row["eesp.sequence_analysis_expected_sn"] == row["_ws.expert.message"] == []


# --------------------------------------------------------------------------- 6. UDP 4500 and the preferences



def test_udp_4500_each_to_its_dissector(udp4500_capture, empty_profile):
    path, items, keyfile = udp4500_capture
    rows = fields(path, UDP4500_FIELDS, profile=empty_profile, opts=[f"eesp.keyfile:{keyfile}"])
    assert len(rows) == len(items)
    esp_i = 0
    for n, (row, (kind, pkt)) in enumerate(zip(rows, items), 1):
        protos = row["frame.protocols"][0].split(":")
        if kind == "eesp":
            assert "eesp" in protos and "esp" not in protos and "udpencap" not in protos, (n, protos)
            assert row["eesp.status"] == ["ok"], n
            assert row["udp.dstport"][0] == "4500" and row["esp.spi"] == [], n
        elif kind == "esp":
            assert protos[-2:] == ["udpencap", "esp"], (n, protos)
            assert row["esp.spi"] == [f"0x{0x1234 + esp_i:08x}"] and row["esp.sequence"] == [str(esp_i + 1)]
            assert row["eesp.spi"] == []
            esp_i += 1
        elif kind == "ike":
            assert "isakmp" in protos and "udpencap" in protos, (n, protos)
            assert row["isakmp.ispi"] == ["0123456789abcdef"] and row["isakmp.exchangetype"] == ["34"]
            assert row["udpencap.non_esp_marker"] == ["1"], n
            assert row["eesp.spi"] == []
        else:
            assert protos[-1] == "udpencap" and row["eesp.spi"] == [], (n, protos)
            assert row["udpencap.nat_keepalive"] == ["1"], n


def test_udp_4500_non_eesp_is_not_labelled_eesp(udp4500_capture, empty_profile):
    """ESP, IKE and keepalives go to udpencap "as before": the protocol stack must not claim an EESP layer
    (frame.protocols feeds the protocol hierarchy statistics and the `eesp` display filter's neighbours)."""
    path, items, keyfile = udp4500_capture
    rows = fields(path, ("frame.protocols",), profile=empty_profile, opts=[f"eesp.keyfile:{keyfile}"])
    wrong = [(n, r["frame.protocols"][0]) for n, (r, (kind, _)) in enumerate(zip(rows, items), 1)
             if kind != "eesp" and "eesp" in r["frame.protocols"][0].split(":")]
    assert wrong == [], f"non-EESP frames with an eesp layer: {wrong[:4]}"
    plain = fields(path, ("frame.protocols",), profile=empty_profile, plugin=None)
    for r, p, (kind, _) in zip(rows, plain, items):
        if kind != "eesp":
            assert r["frame.protocols"] == p["frame.protocols"]


def test_udp_dispatch_off_leaves_port_4500_to_udpencap(udp4500_capture, empty_profile):
    path, items, keyfile = udp4500_capture
    rows = fields(path, ("eesp.spi", "esp.spi", "isakmp.ispi"), profile=empty_profile,
                  opts=[f"eesp.keyfile:{keyfile}", "eesp.udp_dispatch:FALSE"])
    for row, (kind, pkt) in zip(rows, items):
        assert row["eesp.spi"] == [], kind
        if kind == "eesp":  # ESP's dissector reads the Base Header as an ESP header
            spi = struct.unpack("!I", eesp_bytes(pkt, True)[:4])[0]
            assert row["esp.spi"] == [f"0x{spi:08x}"]
        if kind == "ike":
            assert row["isakmp.ispi"] == ["0123456789abcdef"]


def test_udp_port_and_ip_protocol_preferences(work, empty_profile):
    spec_udp = EespSpec("port", 0x00005001, "aes-gcm-16", key=_key(20, 60), mode="transport",
                        sa_kw={"udp_encap": True, "udp_sport": 4600, "udp_dport": 4600})
    spec_ip = EespSpec("proto", 0x00005002, "aes-gcm-16", key=_key(20, 61), sa_kw={"ip_protocol": 253})
    spec_49 = EespSpec("proto49", 0x00005003, "aes-gcm-16", key=_key(20, 62))
    items = [("udp4600", spec_udp.sa().encrypt(flow_packet(800, 4, 17))),
             ("proto253", spec_ip.sa().encrypt(flow_packet(801, 4, 17))),
             ("proto49", spec_49.sa().encrypt(flow_packet(802, 6, 6))),
             ("esp4500", _esp_in_udp(5)), ("ike4500", _ike(5))]
    path = write_capture(work / "prefs.pcap", [p for _, p in items])
    keyfile = write_text(work / "prefs-keys.txt", "\n".join(s.keyfile_line() for s in (spec_udp, spec_ip, spec_49)) + "\n")
    names = ("eesp.spi", "eesp.status", "esp.spi", "isakmp.ispi")
    base = [f"eesp.keyfile:{keyfile}"]

    rows = fields(path, names, profile=empty_profile, opts=base)
    assert [r["eesp.status"] for r in rows] == [[], [], ["ok"], [], []]

    rows = fields(path, names, profile=empty_profile, opts=base + ["eesp.udp_port:4600", "eesp.ip_protocol:253"])
    assert [r["eesp.status"] for r in rows] == [["ok"], ["ok"], [], [], []]
    # port 4500 went back to udpencap
    assert rows[3]["esp.spi"] == [f"0x{0x1234 + 5:08x}"] and rows[4]["isakmp.ispi"] == ["0123456789abcdef"]


