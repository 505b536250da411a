"""The Wireshark plugin on the google/psp reference captures (../shared/reference/psp) with the reference
master keys, and the reference configs read as key files.

tshark runs through tests/wireshark.py (as ``nobody`` when root, WIRESHARK_PLUGIN_DIR=build/plugin...):
every file it reads lives in a world-readable directory.  The module builds the plugin (cmake) when
needed and skips only when tshark is not installed; the captures and fixtures are tests/wireshark/wsplugin.py's.
"""
from __future__ import annotations

import csv
import shutil
import subprocess
from typing import List

import pytest

import pypsp
from pecore.capture import read_capture
from pecore.keys import load_psp_ref_config

from wsplugin import (
    LAYER_FIELDS,
    MK0,
    MK1,
    PSP_PORT,
    REFERENCE,
    _readable,
    b,
    empty_profile,
    expert_items,
    experts,
    fields,
    packets_json,
    plugin_built,
    psp_cases,
    psp_files,
    psp_of,
    work,
    write_text,
)


# --------------------------------------------------------------------------- 7. reference captures


def _manifest() -> List[dict]:
    m = REFERENCE / "manifest.csv"
    if not m.exists():
        return []
    with open(m, newline="") as f:
        return list(csv.DictReader(f))


def _ref_master_keys():
    return load_psp_ref_config(REFERENCE / "cfg" / "decrypt.cfg").master_keys


def _ref_keyfile_text() -> str:
    key0, key1 = _ref_master_keys()
    return f"psp-master key0={key0.hex()} key1={key1.hex()}\n"


REF_FIELDS = ("psp.status", "psp.spi", "psp.version", "psp.cryptoffset", "psp.is_virt", "psp.vc", "psp.iv",
              "psp.nexthdr", "psp.reserved0", "psp.icv", "psp.icv_bad") + LAYER_FIELDS


@pytest.fixture(scope="module")
def reference_run(work, empty_profile):
    """All reference captures in one tshark run each for the encrypted and the clear ones (manifest order)."""
    if not REFERENCE.is_dir():
        pytest.skip(f"reference captures not present: {REFERENCE}")
    cases = _manifest()
    enc = work / "ref-enc.pcapng"
    clear = work / "ref-clear.pcapng"
    subprocess.run(["mergecap", "-a", "-w", str(enc),
                    *(str(REFERENCE / "encrypted" / f"{c['case']}.enc.pcap") for c in cases)], check=True)
    subprocess.run(["mergecap", "-a", "-w", str(clear),
                    *(str(REFERENCE / "clear" / c["cleartext"]) for c in cases)], check=True)
    _readable(enc), _readable(clear)
    keyfile = write_text(work / "ref-keys.txt", _ref_keyfile_text())
    opts = [f"psp.keyfile:{keyfile}"]
    enc_rows = fields(enc, REF_FIELDS, profile=empty_profile, opts=opts)
    enc_json = packets_json(enc, profile=empty_profile, opts=opts)
    clear_rows = fields(clear, LAYER_FIELDS, profile=empty_profile)
    assert len(enc_rows) == len(clear_rows) == len(cases) == len(enc_json)
    frames = [r.data for c in cases for r in read_capture(REFERENCE / "encrypted" / f"{c['case']}.enc.pcap")]
    return {c["case"]: (c, e, j, cl, f) for c, e, j, cl, f in zip(cases, enc_rows, enc_json, clear_rows, frames)}


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
@pytest.mark.parametrize("case", [c["case"] for c in _manifest()])
def test_reference_capture(reference_run, case):
    info, row, pkt, clear, frame = reference_run[case]
    ip = frame[14:]
    h = pypsp.Header.parse(psp_of(ip))
    assert row["psp.spi"] == [f"0x{h.spi:08x}"] and row["psp.version"] == [str(h.version)]
    assert row["psp.cryptoffset"] == [str(h.crypt_offset)] and row["psp.iv"] == [f"0x{h.iv:016x}"]
    vc = h.vc
    if h.virt and row["psp.status"] == ["ok"]:  # shown decrypted when the crypt offset covers it
        vc = pypsp.Decryptor(master_keys=_ref_master_keys()).decrypt(ip).header.vc
    assert row["psp.is_virt"] == b(h.virt) and row["psp.vc"] == ([f"0x{vc.hex()}"] if h.virt else [])
    ex = experts(pkt)
    if info["kind"] == "corrupt-after-seal":
        # the reference tool set a reserved bit after sealing: the header shows it, the ICV fails
        assert row["psp.reserved0"] != ["0"]
        assert row["psp.status"] == ["authentication-failed"] and row["psp.icv_bad"] == ["1"]
        assert "psp.expert.authentication" in ex
        return
    assert row["psp.status"] == ["ok"]
    assert not [e for e in ex if e.startswith("psp.")], ex
    # the decrypted inner layers are the clear capture's layers
    tunnel = "_tunnel_" in case
    for name in ("ip.dst", "ipv6.dst"):
        if clear[name]:
            assert row[name][-1] == clear[name][-1], name
    assert row["udp.dstport"] == [str(PSP_PORT)] + clear["udp.dstport"]
    assert row["udp.payload"][1:] == clear["udp.payload"]
    assert len(row["ip.dst"] + row["ipv6.dst"]) == (2 if tunnel else 1)


# --------------------------------------------------------------------------- 10. google/psp reference configs


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
@pytest.mark.parametrize("cfg", ["decrypt.cfg", "encrypt_tunnel_crypt_off_256_vc.cfg",
                                 "encrypt_transport_no_crypt_off_128.cfg"])
def test_reference_config_as_key_file(work, reference_run, empty_profile, cfg):
    """docs/keys.md: every reader takes the google/psp reference configs unchanged.  The key-file preference
    reads one's master keys (psp_decrypt reads only those): the reference captures decrypt as with a key file;
    as the EESP key file it gives no SA and no complaint."""
    path = work / f"ref-{cfg}"
    shutil.copy(REFERENCE / "cfg" / cfg, path)
    _readable(path)
    enc = work / "ref-enc.pcapng"
    rows = fields(enc, ("psp.status",), profile=empty_profile,
                  opts=[f"psp.keyfile:{path}", f"eesp.keyfile:{path}"])
    want = [row["psp.status"] for _, row, _, _, _ in reference_run.values()]
    assert [r["psp.status"] for r in rows] == want
    assert {s for w in want for s in w} == {"ok", "authentication-failed"}


def test_broken_reference_config_is_reported(work, psp_files, empty_profile):
    """A reference config cut short: a configuration problem naming the file and the line, never a key."""
    text = (REFERENCE / "cfg" / "decrypt.cfg").read_text() if REFERENCE.is_dir() else \
        " ".join(f"{b:02x}" for b in MK0) + "\n" + " ".join(f"{b:02x}" for b in MK1) + "\n"
    lines = text.splitlines()
    broken = write_text(work / "ref-broken.cfg", lines[0] + "\n" + " ".join(lines[1].split()[:10]) + "\n")
    pkts = packets_json(psp_files["pcap-raw"], profile=empty_profile, opts=[f"psp.keyfile:{broken}"],
                        allow_stderr=True)
    for pkt in pkts:
        msgs = [m for n, m, _, _ in expert_items(pkt) if n == "psp.expert.configuration"]
        assert len(msgs) == 1 and f"PSP key file {broken}, line 2: google/psp reference config: " in msgs[0], msgs
        assert "(keyfile-syntax)" in msgs[0]
        assert lines[1].split()[9] + " " not in msgs[0].split("config: ", 1)[1]


