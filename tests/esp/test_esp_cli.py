"""The pyesp command line: encrypt, decrypt and show with key files (esp-sa lines, docs/keys.md) and inline SA
options, per-reason summaries, exit statuses (README.md), ``-`` for standard input/output, and clear errors for bad
input.  Everything runs in-process through pyesp.tools.cli.main, plus the console script in a subprocess."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, read_capture
from pyesp.tools.cli import main

from cliutil import cli_runner, ipv4, ipv6, round_trip, show_json_runner, write_frames, write_keyfile

KEY_GCM = "00112233445566778899aabbccddeeff01020304"
KEY_CCM = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122"
KEY_CHACHA = bytes(range(36)).hex()

KEY_FILE = f"""\
# ESP SAs for the CLI tests (public test values, docs/keys.md)

esp-sa spi=0x1000 suite=aes-gcm-16 key={KEY_GCM} mode=tunnel
esp-sa spi=2000 suite=20 key={KEY_GCM} mode=transport esn=1 first-seq=0xfffffff0 udp-encap=1
esp-sa spi=4000 suite=aes-ccm-16 key-bits=256 key={KEY_CCM} mode=tunnel
esp-sa spi=5000 suite=chacha20-poly1305 key={KEY_CHACHA} mode=transport
eesp-sa spi=0x1000 suite=aes-gcm-16 key={KEY_GCM}
"""
SECRETS = [KEY_GCM, KEY_CCM, KEY_CHACHA]


def packets(n: int = 24):
    out = []
    for i in range(n):
        data = bytes((i + k) & 0xFF for k in range(7 * i % 200))
        udp = struct.pack("!HHHH", 1000 + i, 53, 8 + len(data), 0) + data
        out.append(ipv6(17, udp) if i % 3 == 2 else ipv4(17, udp))
    return out


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    return write_keyfile(tmp_path, KEY_FILE)


run = cli_runner(main)
show_json = show_json_runner(run)


# --------------------------------------------------------------------------- encrypt / decrypt


@pytest.mark.parametrize("fmt,linktype", [("pcap", LINKTYPE_ETHERNET), ("pcapng", LINKTYPE_ETHERNET),
                                          ("pcap-nsec", LINKTYPE_RAW)])
@pytest.mark.parametrize("spi", ["1000", "2000", "4000", "5000"])
def test_key_file_round_trip_is_byte_identical(capsys, tmp_path, keyfile, fmt, linktype, spi):
    clear, enc, dec = round_trip(run, capsys, tmp_path, packets(), linktype, fmt, ["--key-file", keyfile, "--spi", spi],
                                 ["--key-file", keyfile, "--jobs", "2"])  # decrypt: every esp-sa line
    assert dec.read_bytes() == clear.read_bytes()
    assert [r.data for r in read_capture(enc)] != [r.data for r in read_capture(clear)]


@pytest.mark.parametrize("spi", ["0xc1a2b3c4", "0x80000001", "0xffffffff"])
def test_udp_4500_spi_with_the_top_bit_set_round_trips(capsys, tmp_path, spi):
    """Issue 21: an ESP SA on UDP 4500 whose SPI has its top bit set decrypts with its own key file (eesp.md §14
    step 3: the SPI of an SA the receiver holds is ESP), with the key file's EESP SA beside it."""
    kf = write_keyfile(tmp_path, f"esp-sa spi={spi} suite=aes-gcm-16 key={KEY_GCM} mode=tunnel udp-encap=1\n"
                                 f"eesp-sa spi=0x1000 suite=aes-gcm-16 key={KEY_GCM} udp-encap=1\n")
    clear, enc, dec = round_trip(run, capsys, tmp_path, packets(), LINKTYPE_RAW, "pcap", ["--key-file", kf],
                                 ["--key-file", kf])
    assert dec.read_bytes() == clear.read_bytes()
    rc, infos = show_json(capsys, enc, "--key-file", kf)
    assert rc == 0 and all(i["spi"] == f"{int(spi, 16):#010x}" and i["decrypt"] == "ok" for i in infos)
    # pyeesp with the same key file passes them over as ESP, its first octet 0x80 or not (§14 steps 3, 4)
    from pyeesp.tools.cli import main as eesp_main

    rc, out, _ = cli_runner(eesp_main)(capsys, "decrypt", enc, tmp_path / "x", "--key-file", kf)
    assert rc == 0 and f"passed through:  {len(packets())} (esp-in-udp: {len(packets())})" in out, out


def test_inline_sa_and_output_format(capsys, tmp_path):
    pkts = packets(10)
    clear, enc, dec = tmp_path / "c.pcap", tmp_path / "e.pcapng", tmp_path / "d.pcap"
    write_frames(clear, pkts)
    sa = ["--spi", "0x77", "--suite", "aes-gcm-12", "--key", KEY_GCM + "00" * 8, "--esn", "--first-seq",
          "0x100000000", "--udp-encap", "--mode", "transport"]
    rc, out, err = run(capsys, "encrypt", clear, enc, *sa, "-F", "pcapng", "-q")
    assert rc == 0 and out == "" and err == ""
    assert enc.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    rc, out, _ = run(capsys, "decrypt", enc, dec, *sa, "-F", "pcap")
    assert rc == 0 and "decrypted:       10" in out
    assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(clear)]
    rc, infos = show_json(capsys, enc, *sa)
    assert rc == 0 and [i["seq"] for i in infos] == list(range(2**32, 2**32 + 10))
    assert all(i["seq_low"] == i["seq"] & 0xFFFFFFFF and i["udp_encap"] for i in infos)


def test_inline_tfc_padding(capsys, tmp_path):
    """--tfc-pad: every tunnelled packet grows by it (RFC 4303 §2.7); decrypting needs no setting; transport mode
    and a count past 1024 are refused with a configuration error, not a traceback."""
    pkts = packets(6)
    clear, enc, plain, dec = (tmp_path / n for n in ("c.pcap", "e.pcap", "p.pcap", "d.pcap"))
    write_frames(clear, pkts)
    sa = ["--spi", "0x77", "--key", KEY_GCM]
    assert run(capsys, "encrypt", clear, plain, *sa, "-q")[0] == 0
    assert run(capsys, "encrypt", clear, enc, *sa, "--tfc-pad", "16", "-q")[0] == 0
    assert [len(r.data) for r in read_capture(enc)] == [len(r.data) + 16 for r in read_capture(plain)]
    rc, out, _ = run(capsys, "decrypt", enc, dec, *sa)
    assert rc == 0 and "decrypted:       6" in out
    assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(clear)]
    for bad in (["--tfc-pad", "4", "--mode", "transport"], ["--tfc-pad", "1025"]):
        rc, _out, err = run(capsys, "encrypt", clear, tmp_path / "x.pcap", *sa, *bad, "-q")
        assert rc != 0 and "tfc_pad" in err and "Traceback" not in err, bad


def test_stdio(tmp_path, keyfile):
    """`-` reads standard input and writes standard output; the summary then goes to standard error."""
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(5))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    enc = subprocess.run([sys.executable, "-m", "pyesp", "encrypt", "-", "-", "-k", str(keyfile), "--spi", "1000"],
                         input=clear.read_bytes(), capture_output=True, env=env, timeout=120)
    assert enc.returncode == 0 and b"encrypted:       5" in enc.stderr
    dec = subprocess.run([sys.executable, "-m", "pyesp", "decrypt", "-", "-", "-k", str(keyfile)],
                         input=enc.stdout, capture_output=True, env=env, timeout=120)
    assert dec.returncode == 0 and dec.stdout == clear.read_bytes()


def test_failures_are_counted_per_reason(capsys, tmp_path, keyfile):
    clear, enc, dec = tmp_path / "c.pcap", tmp_path / "e.pcap", tmp_path / "d.pcap"
    write_frames(clear, packets(6))
    run(capsys, "encrypt", clear, enc, "-k", keyfile, "--spi", "1000", "-q")
    wrong = ["--spi", "1000", "--key", "ff" * 20]
    rc, out, _ = run(capsys, "decrypt", enc, dec, *wrong)
    assert rc == 1 and "failed:          6" in out and "authentication-failed: 6" in out
    rc, out, _ = run(capsys, "decrypt", enc, dec, "--spi", "1001", "--key", KEY_GCM)
    assert rc == 1 and "esp-no-sa: 6" in out
    rc, out, _ = run(capsys, "decrypt", clear, dec, "-k", keyfile)  # no ESP at all: everything passes
    assert rc == 0 and "passed through:  6 (not-esp: 6)" in out


# --------------------------------------------------------------------------- show


def test_show_json_fields(capsys, tmp_path, keyfile):
    pkts = packets(20)
    clear = tmp_path / "c.pcap"
    write_frames(clear, pkts)
    files = {}
    for spi in ("1000", "2000", "5000"):
        files[spi] = tmp_path / f"e{spi}.pcap"
        assert run(capsys, "encrypt", clear, files[spi], "-k", keyfile, "--spi", spi, "-q")[0] == 0
    rc, infos = show_json(capsys, files["1000"], "-k", keyfile)
    assert rc == 0 and len(infos) == 20
    for i, (info, p) in enumerate(zip(infos, pkts)):
        assert info["frame"] == i + 1 and info["time"] == f"{1000 + i}.{(500 + i) * 1000:09d}"
        assert (info["spi"], info["status"], info["decrypt"], info["mode"]) == ("0x00001000", "ok", "ok", "tunnel")
        assert info["seq"] == info["seq_low"] == i + 1 and info["iv"] == f"{i + 1:016x}"
        assert info["next_header"] == (4 if p[0] >> 4 == 4 else 41) and info["udp_encap"] is False
        assert info["inner_len"] == len(p) and info["pad_len"] == (-len(p) - 2) % 4
        assert info["esp_len"] == 8 + 8 + len(p) + info["pad_len"] + 2 + 16
        assert info["src"] == ("10.0.0.1" if p[0] >> 4 == 4 else "::1")
    # transport, ESN across 2^32, UDP 4500
    rc, infos = show_json(capsys, files["2000"], "-k", keyfile)
    assert rc == 0 and [i["seq"] for i in infos] == list(range(0xFFFFFFF0, 0xFFFFFFF0 + 20))
    assert infos[-1]["seq_low"] == 0xFFFFFFF0 + 19 - 2**32 and all(i["udp_encap"] and i["next_header"] == 17
                                                                     for i in infos)
    # without keys: the headers only; --limit
    rc, infos = show_json(capsys, files["5000"], "--limit", "5")
    assert rc == 0 and len(infos) == 5 and all("decrypt" not in i and i["spi"] == "0x00005000" for i in infos)
    assert [i["seq_low"] for i in infos] == [1, 2, 3, 4, 5]


def test_show_text_and_bad_packets(capsys, tmp_path, keyfile):
    clear, enc = tmp_path / "c.pcap", tmp_path / "e.pcap"
    write_frames(clear, packets(3))
    run(capsys, "encrypt", clear, enc, "-k", keyfile, "--spi", "1000", "-q")
    rc, out, _ = run(capsys, "show", enc, "-k", keyfile)
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == 3
    assert lines[0].startswith("#1 1000.000500000 10.0.0.1 -> 10.0.0.2 ESP spi=0x00001000 seq=1 (")
    assert "tunnel seq64=1 nh=4 pad=" in lines[0] and "[decrypted:" in lines[0]
    rc, out, _ = run(capsys, "show", enc, "--spi", "1000", "--key", "ee" * 20)
    assert rc == 1 and out.count("[decrypt failed: authentication-failed]") == 3
    short = tmp_path / "short.pcap"
    write_frames(short, [ipv4(50, b"\0\0\0\1\0")], LINKTYPE_RAW)
    rc, out, _ = run(capsys, "show", short)
    assert rc == 1 and "ESP [esp-truncated] (5 octets)" in out


# --------------------------------------------------------------------------- errors, exit statuses


def test_usage_and_file_errors(capsys, tmp_path, keyfile):
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(2))
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o")
    assert rc == 2 and err.startswith("pyesp: error:") and "no SA" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "-k", keyfile)
    assert rc == 2 and "several esp-sa lines match" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "-k", keyfile, "--spi", "9")
    assert rc == 2 and "no esp-sa line for SPI 0x00000009" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "--key", KEY_GCM)
    assert rc == 2 and "needs --spi" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "--spi", "1", "--key", KEY_GCM[:-2])
    assert rc == 2 and "[bad-key-length]" in err and KEY_GCM[:16] not in err
    rc, _, err = run(capsys, "decrypt", tmp_path / "nope.pcap", tmp_path / "o", "-k", keyfile)
    assert rc == 2 and "nope.pcap" in err and "capture-io" in err
    eesp_only = tmp_path / "eesp.keys"
    eesp_only.write_text(f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY_GCM}\n")
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o", "-k", eesp_only)
    assert rc == 2 and "no esp-sa lines" in err
    bad = tmp_path / "bad.keys"
    bad.write_text(f"# comment\nesp-sa spi=1 suite=aes-gcm-16 key={KEY_GCM} first-seq=0x100000000\n")
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o", "-k", bad)
    assert rc == 2 and "bad.keys:2" in err and "[keyfile-bad-value]" in err
    for secret in SECRETS:
        assert secret[:16] not in err
    with pytest.raises(SystemExit) as ei:
        main(["encrypt", str(clear), str(tmp_path / "o"), "--spi", "xyz"])
    assert ei.value.code == 2


def test_truncated_input_exit_status(capsys, tmp_path, keyfile):
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(3))
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(clear.read_bytes()[:-5])
    rc, out, err = run(capsys, "encrypt", cut, tmp_path / "o.pcap", "-k", keyfile, "--spi", "1000")
    assert rc == 3 and "encrypted:       2" in out and err.startswith("pyesp: input truncated:")
    rc, _, err = run(capsys, "show", cut)
    assert rc == 3


def test_keys_export_is_there(capsys, tmp_path, keyfile):
    rc, out, _ = run(capsys, "keys", "export", "--to", "esp_sa", keyfile, "--wireshark-version", "4.0",
                     "--skip-unsupported")
    assert rc == 0 and '"0x00001000","AES-GCM with 16 octet ICV [RFC4106]"' in out


def test_console_script_and_version(tmp_path):
    exe = Path(sys.executable).with_name("pyesp")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pyesp"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    res = subprocess.run(cmd + ["--version"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and res.stdout.startswith("pyesp 0.1.0 (psp-eesp core, crypto backend ")
    res = subprocess.run(cmd + ["decrypt", str(tmp_path / "missing.pcap"), str(tmp_path / "o"), "--spi", "1",
                                "--key", KEY_GCM], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("pyesp: error:") and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "pyesp", "--help"], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0 and all(c in res.stdout for c in ("encrypt", "decrypt", "show", "keys"))
