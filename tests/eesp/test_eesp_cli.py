"""The pyeesp command line: derive-key, encrypt, decrypt and show with key files
(eesp-sa lines, docs/keys.md) and inline SA options, per-reason summaries,
exit statuses, and clear errors for bad input.  Everything runs in-process
through pyeesp.tools.cli.main, plus one subprocess call of the console script."""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import pyeesp
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, read_capture
from pyeesp.tools.cli import main

from cliutil import cli_runner, ipv4, ipv6, round_trip, show_json_runner, write_frames, write_keyfile

ROOT = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"  # §19
ROOT384 = bytes(range(48)).hex()
ROOT512 = bytes(range(64)).hex()
KEY0 = "472a557f71f01e8d125da03ec21f6b770f62b36f"  # §19 Session ID 0 key || salt
CCM_KEY = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122"

KEY_FILE = f"""\
# EESP SAs for the CLI tests (public test values, docs/keys.md)

eesp-sa spi=0x1000 suite=aes-gcm-16 root-key={ROOT} sskdf=hkdf-sha256 mode=tunnel max-sub-sa-id=7 sub-sas=4
eesp-sa spi=2000 suite=20 key={KEY0} mode=transport aad=linux-xfrm align=0 udp-encap=1
eesp-sa spi=4000 suite=aes-ccm-16 key-bits=256 key={CCM_KEY} seq=0 strict=1
psp-master key0=34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca
"""
SECRET_HEX = [ROOT, KEY0, CCM_KEY, "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"]


def udp4(data: bytes, sport: int = 1234, dport: int = 5678) -> bytes:
    return ipv4(17, struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)


def packets(n: int = 24):
    out = []
    for i in range(n):
        data = bytes((i + k) & 0xFF for k in range(7 * i % 200))
        if i % 3 == 2:
            out.append(ipv6(17, struct.pack("!HHHH", 3000 + i, 53, 8 + len(data), 0) + data))
        else:
            out.append(udp4(data, sport=1000 + i))
    return out


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    return write_keyfile(tmp_path, KEY_FILE)


run = cli_runner(main)
show_json = show_json_runner(run)


# --------------------------------------------------------------------------- derive-key


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--root-key", ROOT, "--sub-sa-id", "0"],
         "472a557f71f01e8d125da03ec21f6b770f62b36f  (key 472a557f71f01e8d125da03ec21f6b77 salt 0f62b36f)"),
        (["--root-key", ROOT, "--sub-sa-id", "1"],
         "bfb9feca177e0964367d975ca7e41bd64f44224a  (key bfb9feca177e0964367d975ca7e41bd6 salt 4f44224a)"),
        (["--root-key", ROOT, "--sub-sa-id", "0x1", "--key-bits", "256"],
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfdaeb0b4a1  (key "
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd salt aeb0b4a1)"),
        (["--root-key", ROOT, "--sub-sa-id", "1", "--suite", "chacha20-poly1305"],
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfdaeb0b4a1  (key "
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfd salt aeb0b4a1)"),
        (["--root-key", ROOT, "--sub-sa-id", "1", "--suite", "ENCR_AES_CCM_8"],
         "bfb9feca177e0964367d975ca7e41bd64f4422  (key bfb9feca177e0964367d975ca7e41bd6 salt 4f4422)"),
        (["--root-key", ROOT, "--sub-sa-id", "1", "--length", "36"],
         "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfdaeb0b4a1"),
        (["--root-key", ROOT384, "--sskdf", "hkdf-sha384", "--sub-sa-id", "1", "--length", "36"],
         "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c4258d74111"),
        (["--root-key", ROOT512, "--sskdf", "hkdf-sha512", "--sub-sa-id", "1", "--length", "36"],
         "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a9134f558"),
    ],
)
def test_derive_key_spec_table(capsys, args, expected):
    rc, out, err = run(capsys, "derive-key", *args)
    assert rc == 0 and not err
    assert out.strip() == expected


def test_derive_key_has_no_old_session_id_option(capsys):
    """--session-id was the old name of --sub-sa-id; the package was never released, so the alias is gone."""
    with pytest.raises(SystemExit) as e:
        run(capsys, "derive-key", "--root-key", ROOT, "--sub-sa-id", "0", "--session-id", "0")
    out, err = capsys.readouterr()
    assert e.value.code == 2 and not out and "unrecognized arguments: --session-id" in err


def test_derive_key_from_key_file(capsys, keyfile):
    rc, out, _ = run(capsys, "derive-key", "--key-file", keyfile, "--spi", "1000", "--sub-sa-id", "1")
    assert rc == 0 and out.split()[0] == "bfb9feca177e0964367d975ca7e41bd64f44224a"
    rc, out, _ = run(capsys, "derive-key", "-k", keyfile, "--spi", "0x1000", "--sub-sa-id", "0")
    assert rc == 0 and out.split()[0] == KEY0
    # a line without a root key has nothing to derive; several lines need --spi
    rc, _, err = run(capsys, "derive-key", "-k", keyfile, "--spi", "2000", "--sub-sa-id", "0")
    assert rc == 2 and "pyeesp: error:" in err and "root key" in err and "00002000" in err
    rc, _, err = run(capsys, "derive-key", "-k", keyfile, "--sub-sa-id", "0")
    assert rc == 2 and "--spi" in err
    rc, _, err = run(capsys, "derive-key", "-k", keyfile, "--spi", "9999", "--sub-sa-id", "0")
    assert rc == 2 and "00009999" in err


def test_derive_key_errors(capsys):
    rc, _, err = run(capsys, "derive-key", "--root-key", ROOT[:-2], "--sub-sa-id", "1")
    assert rc == 2 and "bad-key-length" in err and ROOT[:-2] not in err
    rc, _, err = run(capsys, "derive-key", "--root-key", ROOT, "--sub-sa-id", "70000")
    assert rc == 2 and "sub_sa_id" in err
    with pytest.raises(SystemExit) as ei:  # argparse: SSKDF_AES256_CMAC is not even offered
        main(["derive-key", "--root-key", ROOT, "--sub-sa-id", "1", "--sskdf", "aes256-cmac"])
    assert ei.value.code == 2
    capsys.readouterr()


# --------------------------------------------------------------------------- encrypt / decrypt / show


@pytest.mark.parametrize("fmt,linktype", [("pcap", LINKTYPE_ETHERNET), ("pcapng", LINKTYPE_ETHERNET),
                                          ("pcap-nsec", LINKTYPE_RAW)])
@pytest.mark.parametrize("spi", ["1000", "2000", "4000"])
def test_key_file_round_trip(capsys, tmp_path, keyfile, fmt, linktype, spi):
    clear, enc, dec = round_trip(run, capsys, tmp_path, packets(), linktype, fmt, ["--key-file", keyfile, "--spi", spi],
                                 ["--key-file", keyfile])  # decrypt: every SA of the file
    a, b = list(read_capture(clear)), list(read_capture(dec))
    assert [r.data for r in a] == [r.data for r in b]
    assert [(r.ts_sec, r.ts_nsec) for r in a] == [(r.ts_sec, r.ts_nsec) for r in b]
    assert [r.data for r in read_capture(enc)] != [r.data for r in a]


def test_show_json_fields(capsys, tmp_path, keyfile):
    pkts = packets(40)
    clear = tmp_path / "c.pcap"
    write_frames(clear, pkts)
    files = {}
    for spi in ("1000", "2000", "4000"):
        files[spi] = tmp_path / f"e{spi}.pcap"
        assert run(capsys, "encrypt", clear, files[spi], "-k", keyfile, "--spi", spi, "-q")[0] == 0

    # tunnel with 4 Sub SAs (the line's sub-sas): optimized format, several Session IDs, Seq from 1 each
    rc, infos = show_json(capsys, files["1000"], "-k", keyfile)
    assert rc == 0 and len(infos) == 40
    sids = {i["session_id"] for i in infos}
    assert len(sids) >= 2 and sids <= {0, 1, 2, 3}
    for sid in sids:
        assert [i["seq"] for i in infos if i["session_id"] == sid] == list(
            range(1, 1 + sum(1 for i in infos if i["session_id"] == sid)))
    for i, (info, p) in enumerate(zip(infos, pkts)):
        assert info["frame"] == i + 1 and info["time"] == f"{1000 + i}.{(500 + i) * 1000:09d}"
        assert (info["spi"], info["version"], info["status"], info["decrypt"]) == ("0x00001000", 0, "ok", "ok")
        assert info["format"] == "optimized" and info["udp_encap"] is False
        assert info["next_header"] == (4 if p[0] >> 4 == 4 else 41)
        assert info["inner_len"] == len(p) and info["pad_len"] == -len(p) % 4
        assert info["options"] == [] and info["opt_len"] == 0
        assert info["src"] == ("10.0.0.1" if p[0] >> 4 == 4 else "::1")
        assert info["eesp_len"] == 24 + len(p) + info["pad_len"] + 16

    # transport, UDP 4500, no option alignment: full format, Next Header 17
    rc, infos = show_json(capsys, files["2000"], "-k", keyfile)
    assert rc == 0
    for info, p in zip(infos, pkts):
        ih = 20 if p[0] >> 4 == 4 else 40
        assert info["spi"] == "0x00002000" and info["udp_encap"] is True and info["format"] == "full"
        assert info["next_header"] == 17 and info["opt_len"] == 0 and info["decrypt"] == "ok"
        assert info["inner_len"] == len(p)  # the decrypted packet, its IP header restored
        assert info["eesp_len"] == 28 + len(p) - ih + info["pad_len"] + 16
    assert [i["seq"] for i in infos] == list(range(1, 41))

    # CCM without a Sequence Number: seq is null
    rc, infos = show_json(capsys, files["4000"], "-k", keyfile)
    assert rc == 0 and all(i["seq"] is None and i["spi"] == "0x00004000" and i["decrypt"] == "ok" for i in infos)

    # without keys: the headers only; with --limit
    rc, infos = show_json(capsys, files["1000"], "--limit", "5")
    assert rc == 0 and len(infos) == 5
    assert all("decrypt" not in i and "seq" not in i and i["status"] == "ok" for i in infos)


def test_show_text(capsys, tmp_path, keyfile):
    clear, enc = tmp_path / "c.pcap", tmp_path / "e.pcap"
    write_frames(clear, packets(6))
    run(capsys, "encrypt", clear, enc, "-k", keyfile, "--spi", "2000", "-q")
    rc, out, _ = run(capsys, "show", enc, "-k", keyfile)
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == 6
    assert lines[0].startswith("#1 1000.000500000 10.0.0.1 -> 10.0.0.2 udp/4500 EESP spi=0x00002000 sub_sa=0 v0")
    assert "seq=1 nh=17" in lines[0] and "full [decrypted:" in lines[0]
    rc, out, _ = run(capsys, "show", enc)
    assert rc == 0 and "decrypted" not in out and out.count("EESP spi=0x00002000") == 6


def test_inline_sa_options(capsys, tmp_path):
    pkts = packets(12)
    clear = tmp_path / "c.pcap"
    write_frames(clear, pkts)
    cases = [
        ["--spi", "5", "--key", KEY0, "--mode", "transport", "--udp-encap"],
        ["--spi", "0x6", "--root-key", ROOT384, "--sskdf", "hkdf-sha384", "--max-sub-sa-id", "3"],
        ["--spi", "7", "--suite", "aes-ccm-8", "--key-bits", "256", "--key", CCM_KEY, "--format", "full"],
        ["--spi", "8", "--suite", "chacha20-poly1305-iiv", "--key", ROOT + "01020304"],
        ["--spi", "9", "--suite", "aes-gmac", "--key", KEY0, "--no-seq", "--mode", "transport"],
        ["--spi", "a", "--key", KEY0, "--crypt-offset", "2", "--max-crypt-offset", "2"],
        ["--spi", "b", "--key", KEY0, "--aad", "linux-xfrm", "--ip-protocol", "253"],
    ]
    for i, sa_args in enumerate(cases):
        enc, dec = tmp_path / f"e{i}", tmp_path / f"d{i}"
        extra = ["--sub-sas", "4"] if "--root-key" in sa_args else []
        rc, out, err = run(capsys, "encrypt", clear, enc, *sa_args, *extra)
        assert rc == 0, (sa_args, err)
        rc, out, err = run(capsys, "decrypt", enc, dec, *sa_args)
        assert rc == 0 and "failed:          0" in out, (sa_args, out, err)
        assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(clear)], sa_args
        proto = ["--ip-protocol", "253"] if "253" in sa_args else []
        rc, infos = show_json(capsys, enc, *proto)  # the headers, without keys
        spi = int(sa_args[1], 16)
        assert {x["spi"] for x in infos} == {f"{spi:#010x}"}, sa_args
        if extra:
            assert len({x["session_id"] for x in infos}) >= 2
        if "--crypt-offset" in sa_args:
            assert all(x["options"][0]["name"] == "CryptOffset" for x in infos)
    # a wrong inline key: per-reason summary, exit status 1, the packets kept
    enc, dec = tmp_path / "e0", tmp_path / "bad"
    rc, out, _ = run(capsys, "decrypt", enc, dec, "--spi", "5", "--key", "11" * 20, "--mode", "transport")
    assert rc == 1 and "authentication-failed: 12" in out and "failed:          12" in out
    assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(enc)]


def test_inline_sa_errors(capsys, tmp_path):
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(2))
    out = tmp_path / "o.pcap"
    for args, needle in [
        (["--key", KEY0], "--spi"),
        (["--spi", "5", "--key", KEY0[:-2]], "bad-key-length"),
        (["--spi", "5", "--key", KEY0, "--sub-sas", "4"], "eesp-sub-sa-out-of-range"),
        (["--spi", "5", "--root-key", ROOT, "--max-sub-sa-id", "1", "--sub-sas", "4"], "eesp-sub-sa-out-of-range"),
        (["--spi", "5", "--suite", "aes-foo", "--key", KEY0], "eesp-bad-suite"),
        (["--spi", "5", "--suite", "aes-gcm-16-iiv", "--key", KEY0, "--no-seq"], "eesp-iiv-needs-seq"),
        (["--spi", "5", "--suite", "aes-gmac", "--key", KEY0, "--aad", "linux-xfrm"], "eesp-gmac-linux-xfrm"),
        (["--spi", "5", "--key", KEY0, "--crypt-offset", "64", "--max-crypt-offset", "64"], "crypt_offset"),
        ([], "no SA"),
    ]:
        rc, _, err = run(capsys, "encrypt", clear, out, *args)
        assert rc == 2 and err.startswith("pyeesp: error:") and needle in err, (args, err)
        for secret in SECRET_HEX:
            assert secret[:16] not in err and secret[-16:] not in err, (args, err)


def test_wrong_key_is_reported_per_reason(capsys, tmp_path, keyfile):
    clear, enc, dec = tmp_path / "c", tmp_path / "e", tmp_path / "d"
    pkts = packets(10)
    write_frames(clear, pkts)
    run(capsys, "encrypt", clear, enc, "-k", keyfile, "--spi", "1000", "-q")
    wrong = tmp_path / "wrong.txt"
    wrong.write_text(KEY_FILE.replace(ROOT, "11" * 32))
    rc, out, _ = run(capsys, "decrypt", enc, dec, "-k", wrong)
    assert rc == 1
    assert "failed:          10" in out and "authentication-failed: 10" in out and "decrypted:       0" in out
    assert [r.data for r in read_capture(dec)] == [r.data for r in read_capture(enc)]
    rc, out, _ = run(capsys, "decrypt", enc, tmp_path / "dropped", "-k", wrong, "--drop-failed", "-q")
    assert rc == 1 and out == "" and list(read_capture(tmp_path / "dropped")) == []
    rc, infos = show_json(capsys, enc, "-k", wrong)
    assert rc == 1 and {i["decrypt"] for i in infos} == {"authentication-failed"}
    rc, out, _ = run(capsys, "show", enc, "-k", wrong, "--limit", "1")
    assert rc == 1 and "[decrypt failed: authentication-failed]" in out
    # no SA for the SPI: its own reason
    other = tmp_path / "other.txt"
    other.write_text(f"eesp-sa spi=0x1001 suite=aes-gcm-16 key={KEY0}\n")
    rc, out, _ = run(capsys, "decrypt", enc, dec, "-k", other)
    assert rc == 1 and "eesp-no-sa: 10" in out


def _eesp_frame(eesp: bytes) -> bytes:
    return ipv4(49, eesp)


def test_malformed_packets_each_get_their_own_reason(capsys, tmp_path, keyfile):
    sa = pyeesp.SA(0x1000, root_key=ROOT, max_sub_sa_id=7)
    wire = sa.encrypt(udp4(b"payload!" * 4), 2)
    e = wire[20:]
    cases = {
        "eesp-truncated": e[:7],
        "eesp-compat-bit-clear": bytes([e[0] & 0x7F]) + e[1:],
        "eesp-unsupported-version": bytes([0x80 | 2 << 3]) + e[1:],
        "eesp-reserved-bits-set": bytes([0x81]) + e[1:],
        "eesp-options-overrun": bytes([0x80, 2]) + e[2:8] + b"\x01\x05" + e[8:],
        "eesp-bad-crypt-offset-option": bytes([0x80, 3]) + e[2:8] + b"\x02\x01\x00" + e[8:],
        "eesp-no-sa": e[:7] + bytes([e[7] ^ 1]) + e[8:],
        "eesp-sub-sa-out-of-range": e[:3] + b"\x09" + e[4:],
        "authentication-failed": e[:-1] + bytes([e[-1] ^ 1]),
    }
    header_level = {"eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
                    "eesp-options-overrun", "eesp-bad-crypt-offset-option"}
    clear, out_path = tmp_path / "m.pcap", tmp_path / "o.pcap"
    write_frames(clear, [_eesp_frame(p) for p in cases.values()] + [wire])
    rc, infos = show_json(capsys, clear, "-k", keyfile)
    assert rc == 1 and len(infos) == len(cases) + 1
    for (reason, _), info in zip(cases.items(), infos):
        if reason in header_level:
            assert info["status"] == reason and "decrypt" not in info, info
        else:
            assert info["status"] == "ok" and info["decrypt"] == reason, info
    assert infos[-1]["decrypt"] == "ok" and infos[-1]["session_id"] == 2
    rc, out, _ = run(capsys, "decrypt", clear, out_path, "-k", keyfile)
    assert rc == 1
    for reason in cases:
        assert f"  {reason}: 1" in out, (reason, out)
    assert f"failed:          {len(cases)}" in out and "decrypted:       1" in out


def test_mixed_udp_4500_traffic_is_passed_and_counted(capsys, tmp_path, keyfile):
    sa = pyeesp.SA(0x2000, "aes-gcm-16", key=KEY0, mode="transport", aad="linux-xfrm", align_options=False,
                   udp_encap=True)
    pkts = packets(4)
    esp = udp4(struct.pack("!II", 0x1234, 1) + bytes(16), 4500, 4500)  # an ESP SPI: MSB 0
    ike = udp4(bytes(4) + b"IKEv2 header", 4500, 4500)  # the non-ESP marker
    keepalive = udp4(b"\xff", 4500, 4500)
    frames = [sa.encrypt(pkts[0]), esp, ike, keepalive, udp4(b"dns"), sa.encrypt(pkts[1])]
    src, out_path = tmp_path / "mixed.pcap", tmp_path / "out.pcap"
    write_frames(src, frames)
    rc, out, _ = run(capsys, "decrypt", src, out_path, "-k", keyfile)
    assert rc == 0 and "decrypted:       2" in out
    assert "passed through:  4 (esp-in-udp: 1, ike-non-esp-marker: 1, nat-keepalive: 1, not-eesp: 1)" in out
    got = [r.ip_packet() for r in read_capture(out_path)]
    assert got == [pkts[0], esp, ike, keepalive, udp4(b"dns"), pkts[1]]
    rc, infos = show_json(capsys, src)
    assert [i["frame"] for i in infos] == [1, 6]  # only EESP is shown


# --------------------------------------------------------------------------- exit status 2


@pytest.mark.parametrize(
    "content",
    [b"", b"not a capture file at all", b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(8) + b"\xff\xff\x00\x00"
     + b"\x01\x00\x00\x00" + b"\x01\x02", bytes(range(256)) * 4],
)
@pytest.mark.parametrize("command", ["decrypt", "encrypt", "show"])
def test_garbage_capture_is_a_clear_error(capsys, tmp_path, keyfile, content, command):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(content)
    args = [bad] + ([tmp_path / "o"] if command != "show" else []) + ["-k", keyfile]
    if command == "encrypt":
        args += ["--spi", "1000"]
    rc, out, err = run(capsys, command, *args)
    if content.startswith(b"\xd4\xc3\xb2\xa1"):  # a header, then a cut record: exit status 3 (README)
        assert rc == 3 and err.startswith("pyeesp: input truncated:") and "bad.pcap" in err and "octet 24" in err
        return
    assert rc == 2 and err.startswith("pyeesp: error:") and "bad.pcap" in err
    assert re.search(r"\[capture-(bad-format|truncated)\]", err), err


def test_missing_files(capsys, tmp_path, keyfile):
    rc, _, err = run(capsys, "decrypt", tmp_path / "nope.pcap", tmp_path / "o", "-k", keyfile)
    assert rc == 2 and "nope.pcap" in err and "capture-io" in err
    rc, _, err = run(capsys, "show", tmp_path / "nope.pcap")
    assert rc == 2 and "nope.pcap" in err
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(2))
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o", "-k", tmp_path / "no-keys.txt")
    assert rc == 2 and "no-keys.txt" in err and "cannot open key file: No such file or directory" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "no-dir" / "o", "-k", keyfile, "--spi", "1000")
    assert rc == 2 and "capture-write-failed" in err and "No such file or directory" in err


@pytest.mark.parametrize(
    "line,needle,code",
    [
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0[:32]}", "20 bytes", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-ccm-8 key={KEY0}", "key", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0[:-1]}z", "hex", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 sskdf=aes256-cmac root-key={ROOT}",
         "SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0} sskdf=hkdf-sha256", "root-key", "keyfile-syntax"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0} root-key={ROOT}", "key", "keyfile-syntax"),
        ("eesp-sa spi=1 suite=aes-gcm-16 mode=tunnel", "key", "keyfile-syntax"),
        (f"eesp-sa spi=1 suite=aes-gcm-16-iiv key={KEY0} seq=0", "seq", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gmac key={KEY0} aad=linux-xfrm", "linux-xfrm", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=chacha20-poly1305 key-bits=128 key={ROOT}01020304", "key-bits", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0} sub-sas=4", "sub-sas", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-foo key={KEY0}", "suite", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0} dst=192.0.2.01", "dst", "keyfile-bad-value"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0} bogus=1", "bogus", "keyfile-syntax"),
        (f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0} replay-window=10", "replay-window", "keyfile-bad-value"),
    ],
)
def test_bad_key_file_names_the_line_and_no_key_material(capsys, tmp_path, line, needle, code):
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(2))
    bad = tmp_path / "bad.keys"
    bad.write_text(f"# first a comment\n\n{line}\n")
    for command in (["decrypt", clear, tmp_path / "o"], ["encrypt", clear, tmp_path / "o", "--spi", "1"],
                    ["show", clear], ["derive-key", "--sub-sa-id", "1"]):
        rc, out, err = run(capsys, *command, "--key-file", bad)
        assert rc == 2, (command, err)
        assert err.startswith("pyeesp: error:") and "bad.keys:3" in err and f"[{code}]" in err, err
        assert needle in err, err
        for secret in SECRET_HEX:
            for i in range(0, len(secret) - 15, 8):
                assert secret[i : i + 16] not in err, (secret[i : i + 16], err)


def test_duplicate_and_useless_key_files(capsys, tmp_path):
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(2))
    dup = tmp_path / "dup.keys"
    dup.write_text(f"eesp-sa spi=1 suite=aes-gcm-16 key={KEY0}\neesp-sa spi=0x00000001 suite=aes-gcm-16 key={KEY0}\n")
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o", "-k", dup)
    assert rc == 2 and "dup.keys:2" in err and "line 1" in err and "[keyfile-duplicate]" in err and KEY0 not in err
    psp_only = tmp_path / "psp.keys"
    psp_only.write_text("psp-master key0=34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca\n")
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o", "-k", psp_only)
    assert rc == 2 and "no eesp-sa lines" in err
    rc, _, err = run(capsys, "decrypt", clear, tmp_path / "o")
    assert rc == 2 and "no SA" in err


def test_sa_selection_errors(capsys, tmp_path, keyfile):
    clear = tmp_path / "c.pcap"
    write_frames(clear, packets(2))
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "-k", keyfile)
    assert rc == 2 and "--spi" in err
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "-k", keyfile, "--spi", "1234")
    assert rc == 2 and "00001234" in err
    with pytest.raises(SystemExit) as ei:
        main(["encrypt", str(clear), str(tmp_path / "o"), "-k", str(keyfile), "--spi", "xyz"])
    assert ei.value.code == 2
    capsys.readouterr()
    # more Sub SAs than the line's max-sub-sa-id allows
    rc, _, err = run(capsys, "encrypt", clear, tmp_path / "o", "-k", keyfile, "--spi", "1000", "--sub-sas", "9")
    assert rc == 2 and "eesp-sub-sa-out-of-range" in err


# --------------------------------------------------------------------------- docs/keys.md examples


def test_key_file_line_with_a_crypt_offset_and_no_maximum_can_decrypt(capsys, tmp_path):
    # docs/keys.md accepts crypt-offset without max-crypt-offset ("settings that only produce packets
    # a receiver will drop are not refused") and its own example file has such a line (SPI 0x3002).
    # crypt-offset is a sender setting: receivers built from such a line decrypt normally.
    keys = tmp_path / "keys.txt"
    keys.write_text(
        "eesp-sa spi=0x00003001 suite=chacha20-poly1305 key=" + ROOT + "20212223 max-crypt-offset=8\n"
        "eesp-sa spi=0x00003002 suite=chacha20-poly1305 key=" + bytes(range(0x30, 0x54)).hex() + " crypt-offset=2\n"
    )
    sa = pyeesp.SA(0x3001, "chacha20-poly1305", key=ROOT + "20212223", max_crypt_offset=8, crypt_offset=2)
    enc, dec = tmp_path / "e.pcap", tmp_path / "d.pcap"
    write_frames(enc, [sa.encrypt(p) for p in packets(3)])
    rc, out, err = run(capsys, "decrypt", enc, dec, "-k", keys)
    assert rc == 0, err
    assert [r.ip_packet() for r in read_capture(dec)] == packets(3)


def test_key_file_with_one_spi_for_two_destinations(capsys, tmp_path):
    # docs/keys.md: two eesp-sa lines may share an SPI when their dst differ ("packets to 192.0.2.2
    # use this SA, all others with SPI 0x1000 the one above"); the core looks SAs up by SPI alone, so
    # "a tool that loads several lines with one SPI makes the choice above itself".
    # Receivers pick the SA by SPI and destination; encrypt picks a line with --spi and --dst.
    keys = tmp_path / "keys.txt"
    keys.write_text(
        f"eesp-sa spi=0x1000 suite=aes-gcm-16 root-key={ROOT} sskdf=hkdf-sha256 mode=tunnel\n"
        f"eesp-sa spi=0x1000 suite=ENCR_AES_GCM_16_IIV root-key={ROOT} sskdf=hkdf-sha256 max-sub-sa-id=15 "
        "sub-sas=4 dst=192.0.2.2\n"
    )
    sa = pyeesp.SA(0x1000, root_key=ROOT)  # the line without dst: our packets go to 10.0.0.2
    enc, dec = tmp_path / "e.pcap", tmp_path / "d.pcap"
    write_frames(enc, [sa.encrypt(p, 1) for p in packets(3)])
    rc, out, err = run(capsys, "decrypt", enc, dec, "-k", keys)
    assert rc == 0, err
    assert [r.ip_packet() for r in read_capture(dec)] == packets(3)


# --------------------------------------------------------------------------- console script


def test_console_script_entry_point(tmp_path):
    exe = Path(sys.executable).with_name("pyeesp")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "pyeesp"]
    res = subprocess.run(cmd + ["derive-key", "--root-key", ROOT, "--sub-sa-id", "1"],
                         capture_output=True, text=True, env=dict(os.environ), check=False, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == "bfb9feca177e0964367d975ca7e41bd64f44224a"
    res = subprocess.run(cmd + ["decrypt", str(tmp_path / "missing.pcap"), str(tmp_path / "o"), "--spi", "1",
                                "--key", KEY0], capture_output=True, text=True, check=False, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("pyeesp: error:") and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "pyeesp", "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "derive-key" in res.stdout
