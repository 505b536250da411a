"""The pypsp command line: every subcommand, key sources, and clear errors for bad input."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import pypsp
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, read_capture
from pecore.protocol import checksum
from pypsp.tools.cli import main

import cliutil
from cliutil import cli_runner, json_lines

MK0 = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
MK1 = "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"


def ipv4_header(length: int, proto: int, src: bytes, dst: bytes) -> bytes:
    """An IPv4 header with a valid checksum (transport-mode decap recomputes it)."""
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, length, 1, 0, 64, proto, 0, src, dst)
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]


def udp4(payload: bytes, sport: int = 1234, dport: int = 5678) -> bytes:
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return ipv4_header(20 + len(seg), 17, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + seg


def write_frames(path: Path, packets, linktype: int = LINKTYPE_ETHERNET, fmt: str = "pcap") -> None:
    cliutil.write_frames(path, packets, linktype, fmt, ts=lambda i: (1000 + i, 500))


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    p = tmp_path / "keys.txt"
    p.write_text(
        f"psp-master key0={MK0} key1={MK1}\n"
        "psp-sa spi=0x9a345678 version=0 mode=transport crypt-offset=1\n"
        "psp-sa spi=0x1a345678 version=3 mode=tunnel first-iv=100\n"
    )
    return p


run = cli_runner(main)


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--master-key", MK0, "--spi", "12345678", "--version", "0"], "96c22dc799198090b74b70ae468e4e30"),
        (["--master-key", MK0, "--spi", "0x12345678", "--version", "1"],
         "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de"),
        (["--master-key1", MK1, "--spi", "9A345678", "--version", "0"], "3946da2554eae46ad1ef77a64372edc4"),
    ],
)
def test_derive_key(capsys, args, expected):
    rc, out, _ = run(capsys, "derive-key", *args)
    assert rc == 0 and out.strip() == expected


def test_derive_key_from_key_file_uses_spi_msb(capsys, keyfile):
    rc, out, _ = run(capsys, "derive-key", "--key-file", keyfile, "--spi", "9a345678", "--version", "1")
    assert rc == 0
    assert out.strip() == "fa00f609df6020289a1c93d6027081a637ad45b24a5576b36e6f49dd43114d80"


@pytest.mark.parametrize("fmt,linktype", [("pcap", LINKTYPE_ETHERNET), ("pcapng", LINKTYPE_ETHERNET), ("pcap", LINKTYPE_RAW)])
@pytest.mark.parametrize("spi", ["9a345678", "1a345678"])
def test_encrypt_decrypt_round_trip(capsys, tmp_path, keyfile, fmt, linktype, spi):
    packets = [udp4(bytes(range(n % 256)) * 3) for n in range(0, 300, 7)]
    clear, enc, dec = tmp_path / "c", tmp_path / "e", tmp_path / "d"
    write_frames(clear, packets, linktype, fmt)
    rc, out, _ = run(capsys, "encrypt", clear, enc, "--key-file", keyfile, "--spi", spi)
    assert rc == 0 and f"encrypted:       {len(packets)}" in out
    rc, out, _ = run(capsys, "decrypt", enc, dec, "--key-file", keyfile)
    assert rc == 0 and f"decrypted:       {len(packets)}" in out
    a, b = list(read_capture(clear)), list(read_capture(dec))
    assert [r.data for r in a] == [r.data for r in b]
    assert [(r.ts_sec, r.ts_nsec) for r in a] == [(r.ts_sec, r.ts_nsec) for r in b]


def test_encrypt_overrides_and_show_json(capsys, tmp_path, keyfile):
    clear, enc = tmp_path / "c.pcap", tmp_path / "e.pcap"
    write_frames(clear, [udp4(b"x" * 40)])
    rc, _, _ = run(capsys, "encrypt", clear, enc, "--key-file", keyfile, "--spi", "9a345678",
                   "--version", "1", "--vc", "0102030405060708", "--sample", "--drop", "--first-iv", "0x10",
                   "--crypt-offset", "3", "-q")
    assert rc == 0
    rc, out, _ = run(capsys, "show", enc, "--key-file", keyfile, "--json")
    assert rc == 0
    [info] = json_lines(out)
    assert info["spi"] == "0x9a345678" and info["key_phase"] == 1
    assert info["version"] == 1 and info["cipher"] == "AES-GCM-256"
    assert (info["sample"], info["drop"], info["virt"], info["hdr_ext_len"]) == (1, 1, 1, 2)
    assert info["vc"] == "0102030405060708" and info["iv"] == "0x0000000000000010"
    assert info["crypt_offset"] == 3 and info["decrypt"] == "ok"


def test_key_file_sa_first_iv_and_gmac_tunnel(capsys, tmp_path, keyfile):
    clear, enc = tmp_path / "c.pcap", tmp_path / "e.pcap"
    write_frames(clear, [udp4(b"abc")] * 3)
    assert run(capsys, "encrypt", clear, enc, "--key-file", keyfile, "--spi", "1a345678")[0] == 0
    rc, out, _ = run(capsys, "show", enc, "--key-file", keyfile, "--json")
    infos = json_lines(out)
    assert [i["iv"] for i in infos] == [f"{n:#018x}" for n in (100, 101, 102)]
    assert all(i["cipher"] == "AES-GMAC-256" and i["mode"] == "tunnel" and i["decrypt"] == "ok" for i in infos)


def test_explicit_derived_key_option(capsys, tmp_path):
    key = pypsp.derive_key(bytes.fromhex(MK0), 0x0BADF00D, 0)
    clear, enc, dec = tmp_path / "c", tmp_path / "e", tmp_path / "d"
    write_frames(clear, [udp4(b"hello")])
    assert run(capsys, "encrypt", clear, enc, "--key", f"0badf00d:{key.hex()}", "--spi", "0badf00d", "-q")[0] == 0
    assert run(capsys, "decrypt", enc, dec, "--key", f"0x0badf00d:{key.hex()}", "-q")[0] == 0
    assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(clear)]


def test_wrong_key_is_reported_and_packets_kept(capsys, tmp_path, keyfile):
    clear, enc, dec = tmp_path / "c", tmp_path / "e", tmp_path / "d"
    write_frames(clear, [udp4(b"secret")] * 5)
    run(capsys, "encrypt", clear, enc, "--key-file", keyfile, "--spi", "9a345678", "-q")
    rc, out, _ = run(capsys, "decrypt", enc, dec, "--master-key1", "11" * 32)
    assert rc == 1
    assert "failed:          5" in out and "authentication-failed: 5" in out
    assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(enc)]
    rc, out, _ = run(capsys, "decrypt", enc, dec, "--master-key0", "11" * 32)
    assert rc == 1 and "no-key: 5" in out


def _psp_packet(psp: bytes) -> bytes:
    seg = struct.pack("!HHHH", 4321, 1000, 8 + len(psp), 0) + psp
    return ipv4_header(20 + len(seg), 17, bytes(4), bytes(4)) + seg


def test_malformed_packets_each_get_their_own_reason(capsys, tmp_path, keyfile):
    good = pypsp.Encryptor(master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1)), spi=0x9A345678, crypt_offset=1)
    wire = good.encrypt(udp4(b"payload!" * 4))
    psp = wire[28:]
    cases = {
        "psp-truncated": psp[:31],
        "psp-always-one-bit-clear": psp[:3] + bytes([psp[3] & 0xFE]) + psp[4:],
        "psp-unsupported-version": psp[:3] + bytes([(psp[3] & 0xC3) | (5 << 2)]) + psp[4:],
        "psp-bad-hdr-ext-len": psp[:1] + b"\x00" + psp[2:],
        "psp-crypt-offset-past-payload": psp[:2] + b"\x3f" + psp[3:],
        "authentication-failed": psp[:-1] + bytes([psp[-1] ^ 1]),
    }
    clear, out_path = tmp_path / "m.pcap", tmp_path / "o.pcap"
    write_frames(clear, [_psp_packet(p) for p in cases.values()])
    rc, out, _ = run(capsys, "show", clear, "--key-file", keyfile, "--json")
    assert rc == 1
    infos = json_lines(out)
    got = [i["status"] if i["status"] != "ok" else i["decrypt"] for i in infos]
    assert got == list(cases)
    rc, out, _ = run(capsys, "decrypt", clear, out_path, "--key-file", keyfile)
    assert rc == 1
    for reason in cases:
        assert f"  {reason}: 1" in out


@pytest.mark.parametrize(
    "content,needle",
    [
        (b"", "capture"),
        (b"not a capture file at all", "capture"),
        (b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(8) + b"\xff\xff\x00\x00\x01\x00\x00\x00" + b"\x01\x02", "capture"),
    ],
)
def test_garbage_capture_is_a_clear_error(capsys, tmp_path, keyfile, content, needle):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(content)
    rc, _, err = run(capsys, "decrypt", bad, tmp_path / "o", "--key-file", keyfile)
    if content.startswith(b"\xd4\xc3\xb2\xa1"):  # a header, then a cut record: exit status 3 (README)
        assert rc == 3 and err.startswith("pypsp: input truncated:") and "capture-truncated" not in err
        assert "at octet 24" in err
        return
    assert rc == 2 and err.startswith("pypsp: error:") and needle in err


def test_missing_input_and_bad_key_file(capsys, tmp_path, keyfile):
    rc, _, err = run(capsys, "decrypt", tmp_path / "nope.pcap", tmp_path / "o", "--key-file", keyfile)
    assert rc == 2 and "pypsp: error:" in err
    bad = tmp_path / "bad.keys"
    bad.write_text("psp-master key0=zz\n")
    rc, _, err = run(capsys, "decrypt", tmp_path / "x", tmp_path / "o", "--key-file", bad)
    assert rc == 2 and "bad.keys:1" in err and "keyfile" in err
    rc, _, err = run(capsys, "decrypt", tmp_path / "x", tmp_path / "o")
    assert rc == 2 and "no keys" in err


def test_configuration_errors_are_clear(capsys, tmp_path, keyfile):
    clear = tmp_path / "c.pcap"
    write_frames(clear, [udp4(b"x")])
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "--key-file", keyfile, "--spi", "9a345678",
                     "--version", "2", "--crypt-offset", "1")
    assert rc == 2 and "GMAC" in err
    with pytest.raises(SystemExit) as ei:  # refused by the option's own check, as in every subcommand
        run(capsys, "encrypt", clear, tmp_path / "o", "--key-file", keyfile, "--spi", "9a345678", "--crypt-offset", "64")
    err = capsys.readouterr().err
    assert ei.value.code == 2 and "--crypt-offset" in err and "0..63" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "--key-file", keyfile)
    assert rc == 2 and "--spi" in err


def test_console_script_entry_point(tmp_path):
    exe = Path(sys.executable).with_name("pypsp")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pypsp"]
    res = subprocess.run(cmd + ["derive-key", "--master-key", MK0, "--spi", "12345678", "--version", "0"],
                         capture_output=True, text=True, env=dict(os.environ), check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "96c22dc799198090b74b70ae468e4e30"


REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "psp"


def _reference_cases():
    import csv

    manifest = REFERENCE / "manifest.csv"
    if not manifest.exists():
        return []
    with open(manifest, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
@pytest.mark.parametrize("case", _reference_cases(), ids=lambda c: c["case"])
def test_cli_reproduces_reference_captures(capsys, tmp_path, case):
    """The reference tools' configs, read unchanged, give their captures byte for byte."""
    clear = REFERENCE / "clear" / case["cleartext"]
    reference = REFERENCE / "encrypted" / f"{case['case']}.enc.pcap"
    ours, back = tmp_path / "ours.pcap", tmp_path / "back.pcap"
    rc, _, _ = run(capsys, "encrypt", clear, ours, "--ref-config", REFERENCE / "cfg" / case["encrypt_cfg"], "-q")
    assert rc == 0
    [ref_frame] = [r.data for r in read_capture(reference)]
    [our_frame] = [r.data for r in read_capture(ours)]
    rc, out, _ = run(capsys, "decrypt", reference, back, "--ref-config", REFERENCE / "cfg" / "decrypt.cfg")
    if case["kind"] == "corrupt-after-seal":
        # The reference set 0x80 in PSP octet 2 after sealing; ours is the uncorrupted frame.
        diff = [i for i, (a, b) in enumerate(zip(our_frame, ref_frame)) if a != b]
        assert len(diff) == 1 and ref_frame[diff[0]] == our_frame[diff[0]] | 0x80
        assert rc == 1 and "authentication-failed: 1" in out
    else:
        assert our_frame == ref_frame
        assert rc == 0
        assert [r.data for r in read_capture(back)] == [r.data for r in read_capture(clear)]
