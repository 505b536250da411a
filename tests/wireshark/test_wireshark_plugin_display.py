"""What the Wireshark plugin shows: one expert item per status category, PSP and EESP winning on their
ports over the dissectors of low UDP ports, and what a person sees (Info column, S/D bits, zero UDP checksum).

tshark runs through tests/wireshark.py (as ``nobody`` when root, WIRESHARK_PLUGIN_DIR=build/plugin...):
every file it reads lives in a world-readable directory.  The module builds the plugin (cmake) when
needed and skips only when tshark is not installed; the captures and fixtures are tests/wireshark/wsplugin.py's.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from typing import Dict, List, Optional

import pytest

import pypsp
import wireshark as ws
from pecore.errors import CATEGORIES, CATEGORY_BY_CODE

from wsplugin import (
    CATEGORY_EXPERTS,
    CATEGORY_LOOK,
    EespSpec,
    MK0,
    MK1,
    PI_CHECKSUM,
    PI_NOTE,
    PI_WARN,
    PSP_PORT,
    QUIET,
    V4,
    V6,
    _esp_in_udp,
    _ike,
    _key,
    _profile,
    _readable,
    editcap,
    eesp_cases,
    eesp_files,
    empty_profile,
    expert_items,
    experts,
    fields,
    flow_packet,
    ip_pkt,
    l4,
    layer,
    parse_ip,
    plugin_built,
    psp_cases,
    psp_cut_capture,
    psp_files,
    status_expert,
    tshark,
    work,
    write_capture,
    write_text,
)


# --------------------------------------------------------------------------- 9. one expert item per status category


VECTORS = ws.ROOT / "vectors" / "pcap"
# Vector groups (vectors/README.md) that hold, between them, every packet status of both protocols the core's
# vectors have: the decoder's rejections, no key, dummy packets, replays (stateful group 6).
WALK_VECTORS = ("psp_v0_g01", "psp_v0_g05", "eesp_aes-ccm-12_g01", "eesp_aes-ccm-12_g02", "eesp_aes-ccm-12_g06",
                "eesp_aes-ccm-12_g07")
# Every status the walk must meet: each one the plugin shows for a packet, a capture or a key file.
WALK_STATUSES = {
    "authentication-failed", "no-key", "psp-truncated", "psp-always-one-bit-clear", "psp-unsupported-version",
    "psp-bad-hdr-ext-len", "psp-vc-without-room", "psp-crypt-offset-past-payload",
    "eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
    "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-bad-payload-offset",
    "eesp-crypt-offset-past-payload", "eesp-crypt-offset-not-allowed", "eesp-unknown-option", "eesp-no-sa",
    "eesp-sub-sa-out-of-range", "eesp-sequence-zero", "eesp-bad-pad-length", "eesp-bad-inner-packet",
    "eesp-dummy-packet", "replay-duplicate", "capture-packet-cut",
    "keyfile-syntax", "keyfile-bad-value", "keyfile-duplicate", "capture-io", "invalid-argument",
}
STATUS_IN_MESSAGE = re.compile(r"\(([a-z0-9-]+)\)$")


def category_items(pkt: dict) -> List[tuple]:
    """(protocol, category, status named by the message, field, group, severity) of a packet's status items."""
    out = []
    for name, msg, group, severity in expert_items(pkt):
        proto, _, cat = name.partition(".expert.")
        if proto in ("psp", "eesp") and cat.replace("_", "-") in CATEGORY_LOOK:
            m = STATUS_IN_MESSAGE.search(msg)
            assert m, f"{name}: the message names no status: {msg!r}"
            out.append((proto, cat.replace("_", "-"), m.group(1), name, group, severity))
    return out


@pytest.fixture(scope="module")
def status_walk(work, empty_profile, psp_files, eesp_files, psp_cut_capture) -> List[tuple]:
    """(where, -T json packet) of every run: the vector groups with their keys, cut captures, bad key files."""
    runs = []
    for group in WALK_VECTORS:
        cap, keys = work / f"{group}.pcap", work / f"{group}.keys"
        shutil.copy(VECTORS / f"{group}.pcap", cap)
        shutil.copy(VECTORS / f"{group}.keys", keys)
        _readable(cap), _readable(keys)
        runs.append((group, cap, [f"psp.keyfile:{keys}", f"eesp.keyfile:{keys}"], ["-2"]))
    eesp_cut = work / "walk-eesp-cut.pcap"
    editcap("-s", "80", str(eesp_files["pcap-ether"]), str(eesp_cut))
    runs.append(("psp cut", psp_cut_capture, [f"psp.keyfile:{psp_files['keyfile']}"], []))
    runs.append(("eesp cut", eesp_cut, [f"eesp.keyfile:{eesp_files['keyfile']}"], []))
    both = work / "walk-both.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(both), str(VECTORS / "psp_v0_g05.pcap"),
                    str(VECTORS / "eesp_aes-ccm-12_g02.pcap")], check=True)
    _readable(both)
    sa_line = next(l for l in (VECTORS / "eesp_aes-ccm-12_g02.keys").read_text().splitlines()
                   if l.startswith("eesp-sa"))
    bad_files = {
        "keyfile-syntax": ("psp-master key0\n", "key0=00\n"),
        "keyfile-bad-value": (f"psp-master key0={MK0.hex()[:-1]}z\n", "eesp-sa spi=0x6001 suite=nonsense key=00\n"),
        "keyfile-duplicate": (f"psp-master key0={MK0.hex()}\npsp-master key1={MK1.hex()}\n",
                              f"{sa_line}\n{sa_line}\n"),
        "capture-io": (None, None),
    }
    for status, (psp_text, eesp_text) in bad_files.items():
        opts = []
        for proto, text in (("psp", psp_text), ("eesp", eesp_text)):
            path = work / f"walk-{status}-{proto}.keys"
            if text is not None:
                write_text(path, text)
            opts.append(f"{proto}.keyfile:{path}")
        runs.append((status, both, opts, []))
    # Above the core's limit for a key file (a sparse file: nothing is written); the same SA in the table and
    # the file (the receiver refuses the second).
    huge = work / "walk-huge.keys"
    with open(huge, "wb") as f:
        f.truncate(16 * 1024 * 1024 + 1)
    _readable(huge)
    dup = EespSpec("walk-dup", 0x00006101, "aes-gcm-16", key=_key(20, 90))
    dup_keys = write_text(work / "walk-dup.keys", dup.keyfile_line() + "\n")
    runs.append(("invalid-argument", both, [f"psp.keyfile:{huge}", f"eesp.keyfile:{dup_keys}",
                                            f"uat:eesp_sa:{dup.uat_row()}"], []))
    out = []
    for where, cap, opts, extra in runs:
        args = ["-n", "-r", str(cap), *QUIET, "-T", "json", "--no-duplicate-keys", *extra]
        for o in opts:
            args += ["-o", o]
        proc = tshark(args, profile=empty_profile, allow_stderr=True)
        out += [(where, pkt) for pkt in json.loads(proc.stdout)]
    return out


def test_every_status_gets_the_expert_item_of_its_category(status_walk):
    """Every status the plugin shows (a packet's, a replay found by sequence analysis, a key file's) gets the
    expert item its core category names, <proto>.expert.<category>, with that category's group and severity;
    the item's message ends in the status name."""
    seen = set()
    for where, pkt in status_walk:
        items = category_items(pkt)
        for proto in ("psp", "eesp"):
            status = layer(pkt, proto).get(f"{proto}.status")
            if status and status != "ok":
                assert any(i[3] == status_expert(proto, status) and i[2] == status for i in items), \
                    (where, proto, status, items)
        for proto, category, status, name, group, severity in items:
            seen.add(status)
            assert status in CATEGORY_BY_CODE, (where, status)
            assert name == status_expert(proto, status), (where, status, name)
            assert (group, severity) == CATEGORY_LOOK[category], (where, name)
    assert WALK_STATUSES <= seen, f"never met: {sorted(WALK_STATUSES - seen)}"


def test_every_category_has_its_expert_item_per_protocol(empty_profile):
    """One item per category (but ok) and protocol: the names the Lua dissectors register too."""
    out = tshark(["-G", "fields"], profile=empty_profile).stdout
    names = {line.split("\t")[2] for line in out.splitlines() if line.startswith("F\t")}
    for proto in ("psp", "eesp"):
        ours = {n for n in names if n.startswith(f"{proto}.expert.")}
        assert set(CATEGORY_EXPERTS[proto]) <= ours
        assert len(CATEGORY_EXPERTS[proto]) == len(CATEGORIES) - 1
        # the items not about a status
        assert ours - set(CATEGORY_EXPERTS[proto]) == {
            "psp": {"psp.expert.gmac_unverified", "psp.expert.udp_zero_checksum"},
            "eesp": {"eesp.expert.seq_wrong", "eesp.expert.udp_zero_checksum", "eesp.expert.udp_bad_checksum"}}[proto]


# --------------------------------------------------------------------------- 11. PSP and EESP win on their ports


DNS_QUERY = bytes.fromhex("12340100000100000000000003777777076578616d706c6503636f6d0000010001")


def _with_udp_ports(outer: bytes, sport: Optional[int] = None, dport: Optional[int] = None) -> bytes:
    """The IPv4 packet with other UDP ports and no UDP checksum (0: none, for IPv4)."""
    ihl = (outer[0] & 15) * 4
    udp = bytearray(outer[ihl:])
    if sport is not None:
        udp[0:2] = struct.pack("!H", sport)
    if dport is not None:
        udp[2:4] = struct.pack("!H", dport)
    udp[6:8] = b"\0\0"
    return outer[:ihl] + bytes(udp)


@pytest.fixture(scope="module")
def low_udp_ports(empty_profile) -> Dict[int, str]:
    """Every UDP port below 1024 with a dissector of the tshark under test (without the plugin), but 0."""
    out = ws.run(["-G", "decodes"], plugin=None, profile=empty_profile).stdout
    ports = {}
    for line in out.splitlines():
        table, port, name = (line.split("\t") + ["", "", ""])[:3]
        if table == "udp.port" and 0 < int(port) < 1024 and int(port) != PSP_PORT:
            ports[int(port)] = name
    assert len(ports) > 40, out[-2000:]  # 4.0 has 57
    return ports


@pytest.fixture(scope="module")
def precedence_capture(work, low_udp_ports):
    """For every low port p: PSP p -> 1000, EESP p -> 4500 (then ESP and IKE p -> 4500); traffic that is not to our
    ports: 1000 -> p and p -> 40000 (a DNS query's bytes)."""
    enc = pypsp.Encryptor(spi=0x00007001, master_keys=(MK0, MK1), version=1)
    spec = EespSpec("prec", 0x80007002, "aes-gcm-16", key=_key(20, 80), mode="transport",
                    options={"udp-encap": "1"}, sa_kw={"udp_encap": True})
    sa = spec.sa()
    items = []
    for i, p in enumerate(sorted(low_udp_ports)):
        items.append(("psp", p, _with_udp_ports(enc.encrypt(flow_packet(1000 + i, 4, 17)), sport=p)))
        items.append(("eesp", p, _with_udp_ports(sa.encrypt(flow_packet(1300 + i, 4, 17)), sport=p)))
        items.append(("esp", p, _esp_in_udp(i, sport=p)))
        items.append(("ike", p, _with_udp_ports(_ike(i), sport=p)))
        items.append(("from-psp-port", p, ip_pkt(V4[0], V4[1], 17, l4(17, V4[0], V4[1], PSP_PORT, p, DNS_QUERY))))
        items.append(("unrelated", p, ip_pkt(V4[0], V4[1], 17, l4(17, V4[0], V4[1], p, 40000, DNS_QUERY))))
    path = write_capture(work / "precedence.pcap", [pkt for _, _, pkt in items])
    keyfile = write_text(work / "precedence-keys.txt", f"psp-master key0={MK0.hex()} key1={MK1.hex()}\n"
                                                       + spec.keyfile_line() + "\n")
    return path, items, keyfile


PRECEDENCE_FIELDS = ("frame.protocols", "psp.status", "eesp.status")


def _check_precedence(rows, plain, items, low_udp_ports, psp_port=PSP_PORT):
    assert len(rows) == len(plain) == len(items)
    for row, base, (kind, p, _) in zip(rows, plain, items):
        protos = row["frame.protocols"][0].split(":")
        where = (kind, p, low_udp_ports[p], row["frame.protocols"][0])
        if kind == "psp":
            assert protos[protos.index("udp") + 1] == "psp" and row["psp.status"] == ["ok"], where
        elif kind == "eesp":
            assert protos[protos.index("udp") + 1] == "eesp" and row["eesp.status"] == ["ok"], where
        elif kind in ("esp", "ike", "unrelated"):
            # not EESP, or not to our ports: where Wireshark sends it without the plugin
            assert row["frame.protocols"] == base["frame.protocols"], where
            assert row["psp.status"] == row["eesp.status"] == [], where
        elif p > psp_port:
            # from PSP's port to a higher one: UDP tries the lower port first, PSP's, as it always did
            assert protos[protos.index("udp") + 1] == "psp", where
        else:
            # from PSP's port to a lower one: that port's dissector first, as UDP has it; PSP only where it declines
            if row["frame.protocols"] != base["frame.protocols"]:
                assert protos[-1] == "psp" and low_udp_ports[p] not in base["frame.protocols"][0].split(":"), where


def test_psp_and_eesp_win_on_their_destination_port(precedence_capture, low_udp_ports, empty_profile):
    """A PSP packet to 1000 (an EESP one to 4500) is PSP (EESP) from every source port below 1024 that has a UDP
    dissector of its own; other traffic from or to those ports goes where Wireshark sends it without the plugin."""
    path, items, keyfile = precedence_capture
    opts = [f"psp.keyfile:{keyfile}", f"eesp.keyfile:{keyfile}"]
    rows = fields(path, PRECEDENCE_FIELDS, profile=empty_profile, opts=opts)
    plain = fields(path, ("frame.protocols",), profile=empty_profile, plugin=None)
    _check_precedence(rows, plain, items, low_udp_ports)
    assert {p for k, p, _ in items if k == "psp"} == set(low_udp_ports)
    # a low port the plugin had to beat: 631 (CUPS) in the issue, DNS and IKE here
    assert {53, 500} <= set(low_udp_ports)


def test_precedence_survives_decode_as_and_follows_the_port_preference(work, precedence_capture, low_udp_ports):
    """A profile's Decode As entries (loading them resets every changed entry) leave the precedence in place; a
    Decode As of PSP's own port to another protocol is the user's choice and wins; the port preference moves
    PSP's precedence with PSP."""
    path, items, keyfile = precedence_capture
    opts = [f"psp.keyfile:{keyfile}", f"eesp.keyfile:{keyfile}"]
    header = "# \"Decode As\" entries file for Wireshark.\n"
    other = _profile(work, "decode-as-other", {"decode_as_entries": header + "decode_as_entry: udp.port,5555,(none),DNS\n"})
    rows = fields(path, PRECEDENCE_FIELDS, profile=other, opts=opts)
    plain = fields(path, ("frame.protocols",), profile=other, plugin=None)
    _check_precedence(rows, plain, items, low_udp_ports)

    mine = _profile(work, "decode-as-psp-port", {"decode_as_entries": header + f"decode_as_entry: udp.port,{PSP_PORT},PSP,DNS\n"})
    rows = fields(path, PRECEDENCE_FIELDS, profile=mine, opts=opts)
    for row, (kind, p, _) in zip(rows, items):
        if kind == "psp":
            assert row["psp.status"] == [] and "dns" in row["frame.protocols"][0].split(":"), (p, row)

    moved = [_with_udp_ports(pkt, dport=2000) if kind == "psp" else pkt for kind, _, pkt in items]
    moved_path = write_capture(work / "precedence-2000.pcap", moved)
    rows = fields(moved_path, PRECEDENCE_FIELDS, profile=_profile(work, "psp-port-2000", {}),
                  opts=opts + ["psp.udp.port:2000"])
    for row, (kind, p, _) in zip(rows, items):
        if kind == "psp":
            assert row["psp.status"] == ["ok"], (p, row)


# --------------------------------------------------------------------------- 12. what a person sees


def test_no_key_packets_say_so_in_the_info_column(psp_files, eesp_files, psp_cases, eesp_cases, empty_profile):
    """"[no key]" in the Info column of a packet no key opens; a GMAC one keeps it before the inner packet's."""
    for cap, cases in ((psp_files["pcap-raw"], psp_cases), (eesp_files["pcap-ether"], eesp_cases)):
        rows = fields(cap, ("_ws.col.Info",), profile=empty_profile)
        assert len(rows) == len(cases)
        for row, case in zip(rows, cases):
            info = row["_ws.col.Info"][0]
            if getattr(case, "header", None) is not None and case.header.version >= 2:
                assert re.search(r" AES-GMAC-(128|256) \[no key\] \S", info), (case.label, info)
            else:
                assert info.endswith(" [no key]"), (case.label, info)
    rows = fields(psp_files["pcap-raw"], ("_ws.col.Info",), profile=empty_profile,
                  opts=[f"psp.keyfile:{psp_files['keyfile']}"])
    assert not [r for r in rows if "[no key]" in r["_ws.col.Info"][0]]


def test_sd_bits_are_shown_once(psp_files, psp_cases, empty_profile):
    """The S and D bits have their rows; google/psp's name for them (psp.reserved1) stays a filter, not a row."""
    out = tshark(["-n", "-r", str(psp_files["pcap-raw"]), *QUIET, "-V", "-O", "psp"], profile=empty_profile).stdout
    assert "Sample (S)" in out and "Drop after sampling (D)" in out
    assert "S/D bits" not in out and "google/psp" not in out
    both = [i + 1 for i, c in enumerate(psp_cases) if c.header.sample and c.header.drop]
    rows = fields(psp_files["pcap-raw"], ("frame.number",), profile=empty_profile, extra=["-Y", "psp.reserved1 == 3"])
    assert [int(r["frame.number"][0]) for r in rows] == both and both


def test_ipv6_zero_udp_checksum_is_explained(work, empty_profile):
    """Wireshark calls checksum 0 over IPv6 illegal (udp.checksum.zero, an error on every packet the PSP reference
    sends).  RFC 6936 allows it for tunnels, and PSP's reference sends it: PSP adds a note saying so and naming
    UDP's preference; with the preference set Wireshark flags nothing, and neither does PSP.  EESP over IPv6
    computes the checksum (eesp.md D17): a zero one, or a wrong one, gets EESP's warning whatever UDP's
    preferences say, on a packet decrypted all the same.  A real checksum, or IPv4, gets nothing."""
    enc = pypsp.Encryptor(spi=0x00007101, master_keys=(MK0, MK1))
    sa = EespSpec("zero", 0x80007102, "aes-gcm-16", key=_key(20, 81), mode="transport", options={"udp-encap": "1"},
                  sa_kw={"udp_encap": True}).sa()
    v6 = enc.encrypt(flow_packet(1400, 6, 17))
    o = parse_ip(v6)
    v6_summed = v6[:40] + l4(17, V6[0], o.dst, *struct.unpack("!HH", v6[40:44]), v6[48:])
    e6 = sa.encrypt(flow_packet(1402, 6, 17))
    assert e6[46:48] != b"\0\0"
    e6_zero, e6_wrong = e6[:46] + b"\0\0" + e6[48:], e6[:46] + bytes([e6[46] ^ 1, e6[47]]) + e6[48:]
    packets = [v6, v6_summed, enc.encrypt(flow_packet(1401, 4, 17)), e6, e6_zero, e6_wrong]
    assert v6[46:48] == b"\0\0" and v6_summed[46:48] != b"\0\0"
    path = write_capture(work / "zero-checksum.pcap", packets)
    ours = ("udp.checksum.zero", "psp.expert.udp_zero_checksum", "eesp.expert.udp_zero_checksum",
            "eesp.expert.udp_bad_checksum")
    want = [["udp.checksum.zero", "psp.expert.udp_zero_checksum"], [], [], [],
            ["udp.checksum.zero", "eesp.expert.udp_zero_checksum"], ["eesp.expert.udp_bad_checksum"]]
    quiet = [[], [], [], [], ["eesp.expert.udp_zero_checksum"], ["eesp.expert.udp_bad_checksum"]]
    for ignore, expect in (("FALSE", want), ("TRUE", quiet)):
        proc = ws.run(["-n", "-r", str(path), "-T", "json", "--no-duplicate-keys", "-o",
                       f"udp.ignore_ipv6_zero_checksum:{ignore}"], profile=empty_profile)
        pkts = json.loads(proc.stdout)
        got = [[n for n in experts(p) if n in ours] for p in pkts]
        assert got == expect, ignore
        items = {n: (g, sv) for p in pkts for n, _, g, sv in expert_items(p) if n in ours[1:]}
        assert items.pop("psp.expert.udp_zero_checksum", (PI_CHECKSUM, PI_NOTE)) == (PI_CHECKSUM, PI_NOTE)
        assert set(items.values()) == {(PI_CHECKSUM, PI_WARN)} and len(items) == 2, items
