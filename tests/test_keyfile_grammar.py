"""One key-file grammar for real: every Python reader hands the core the file's raw octets.

A corpus of hostile key files (bare CR, CRLF, BOM, NUL, Latin-1 and invalid UTF-8, long lines, the size cap,
duplicates, reference configs) must be accepted or refused alike, with the same keys, by the core reading the
octets (pe_keyfile_parse), the Python API reading the file (load_key_file, which is the core's pe_keyfile_load,
as the Wireshark plugin and pelua use) and the CLI.  The plugin and the Lua scripts are held to the same
reader by tests/test_wireshark_plugin.py and tests/test_lua_pure.py.
"""
from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from pecore.keys import KeyFileError, load_key_file, parse_key_file

ROOT = Path(__file__).resolve().parents[1]
MK0 = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
MK1 = "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"
LINES = [
    f"psp-master key0={MK0} key1={MK1}",
    "psp-key spi=0x1234 key=" + "11" * 16,
    "eesp-sa spi=0x1000 suite=aes-gcm-16 key=" + "22" * 20 + " mode=tunnel",
    "# a comment",
    "",
]


def corpus() -> list:
    rng = random.Random(0x6E7)
    out = []
    base = "\n".join(LINES) + "\n"
    for eol in ("\n", "\r\n", "\r"):
        out.append(("eol " + repr(eol), base.replace("\n", eol).encode()))
    out.append(("bom", b"\xef\xbb\xbf" + base.encode()))
    out.append(("comment ending in a bare CR, then a key line", ("# note\r" + LINES[1] + "\n").encode()))
    out.append(("bare CR inside a line", (LINES[1].replace(" key=", "\r key=") + "\n").encode()))
    out.append(("latin-1 in a comment", b"# caf\xe9\n" + LINES[1].encode() + b"\n"))
    out.append(("invalid utf-8 in a comment", b"# \xff\xfe\n" + LINES[1].encode() + b"\n"))
    out.append(("invalid utf-8 in a value", LINES[1].encode()[:-2] + b"\xc3\x28\n"))
    out.append(("nul in a comment", b"# a\x00b\n" + LINES[1].encode() + b"\n"))
    out.append(("nul in a line", LINES[1].encode().replace(b"key=", b"k\x00ey=") + b"\n"))
    out.append(("duplicate", (LINES[1] + "\n" + LINES[1] + "\n").encode()))
    out.append(("long comment", ("#" + "x" * 70000 + "\n" + LINES[1] + "\n").encode()))
    out.append(("long line", ("psp-key spi=0x1 key=" + "ab" * 40000 + "\n").encode()))
    out.append(("size cap", b"#" * (16 * 1024 * 1024 + 1)))
    out.append(("just under the size cap", b"#" * (16 * 1024 * 1024 - 64) + b"\n" + LINES[1].encode() + b"\n"))
    out.append(("empty", b""))
    out.append(("only whitespace", b" \t\r\n\n"))
    ref = ROOT.parent / "shared" / "reference" / "psp" / "cfg" / "decrypt.cfg"
    if ref.exists():
        out.append(("reference config", ref.read_bytes()))
    # random mutations of the good file: flipped, inserted and deleted octets, cut and doubled lines
    good = base.encode()
    specials = [b"\r", b"\n", b"\x00", b"\xff", b"\xe9", b"=", b" ", b"\t", b"#", b"\xef\xbb\xbf", b"0x", b"z"]
    while len(out) < 240:
        b = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            i = rng.randrange(len(b) + 1)
            if op == 0 and b:
                b[min(i, len(b) - 1)] = rng.randrange(256)
            elif op == 1:
                b[i:i] = rng.choice(specials)
            elif op == 2 and b:
                del b[i : i + rng.randint(1, 8)]
            else:
                b = b[:i]
        out.append((f"mutation {len(out)}", bytes(b)))
    return out


def outcome(kf_or_error):
    if isinstance(kf_or_error, KeyFileError):
        return ("refused", kf_or_error.code)
    kf = kf_or_error
    return ("ok", kf.psp_master_keys, tuple(sorted(kf.psp_keys.items(), key=repr)),
            tuple((e.spi, e.settings.get("key"), e.line) for e in kf.eesp_sas))


def via(fn, *args):
    try:
        return outcome(fn(*args))
    except KeyFileError as e:
        return outcome(e)


CORPUS = corpus()


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 200
    kinds = {via(parse_key_file, data)[0] for _, data in CORPUS}
    assert kinds == {"ok", "refused"}


@pytest.mark.parametrize("name,data", CORPUS, ids=[n for n, _ in CORPUS])
def test_file_reader_and_octets_agree(tmp_path, name, data):
    path = tmp_path / "keys.txt"
    path.write_bytes(data)
    from_file = via(load_key_file, path)
    if len(data) > 16 * 1024 * 1024:  # the size cap is the file reader's (the plugin's too); parse takes any text
        assert from_file == ("refused", "invalid-argument")
        return
    assert from_file == via(parse_key_file, data, str(path))


def test_the_cli_reads_as_the_api(tmp_path):
    """The CLI (here `pypsp decrypt` on an empty capture) accepts exactly the files the API accepts."""
    from pecore.capture import LINKTYPE_RAW, CaptureWriter

    empty = tmp_path / "empty.pcap"
    CaptureWriter(str(empty), linktype=LINKTYPE_RAW).close()
    sample = [c for c in CORPUS if len(c[1]) < 1 << 20][::6] + [c for c in CORPUS if c[0] == "size cap"]
    for name, data in sample:
        path = tmp_path / "k.txt"
        path.write_bytes(data)
        api = via(load_key_file, path)
        p = subprocess.run([sys.executable, "-m", "pypsp", "decrypt", str(empty), str(tmp_path / "o.pcap"),
                            "-k", str(path), "-q"], capture_output=True, text=True, timeout=60, cwd=str(ROOT))
        if api[0] == "refused":
            assert p.returncode == 2 and f"[{api[1]}]" in p.stderr, (name, p.stderr)
        else:
            # accepted by both; the CLI may still have nothing to decrypt with (no PSP keys): that is not a
            # key-file refusal
            assert "keyfile-" not in p.stderr and "larger than" not in p.stderr, (name, p.stderr)
