"""One key-file grammar for real: every reader accepts and refuses the same files, with the same keys loaded.

A corpus of hostile key files (bare CR, CRLF, BOM, NUL, Latin-1 and invalid UTF-8, long lines, the size cap,
duplicates, reference configs) must be accepted or refused alike, with the same keys, by the core reading the
octets (pe_keyfile_parse), the Python API reading the file (load_key_file, which is the core's pe_keyfile_load,
as the Wireshark plugin and pelua use) and the CLI; and, through real tshark runs, by the Wireshark plugin and
by the Lua scripts (psp.lua, eesp.lua with pelua), and by the Lua scripts' own pure-Lua reader (pecrypto.lua,
which Wireshark 4.6 uses without pelua: in lua5.4 always, and inside tshark 4.6 with PE_TSHARK_CHROOT=<sid chroot>).

"Same keys loaded" is observed, not assumed: a small capture holds one packet per key the reference lines
define (PSP under the master keys, PSP under the psp-key line's derived key, EESP under the key line, EESP under
the root-key line), and for every file each reader must open the same packets as the API's keys do, and report
a refused file with the same line, message and status code (the dissectors as an expert item on the packets
the file cost their key, see docs/wireshark.md).
"""
from __future__ import annotations

import concurrent.futures
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from conftest import from_test_folder
from pecore._native import ffi, lib
from pecore.errors import status_name
from pecore.keys import KeyFileError, load_key_file, parse_key_file

ROOT = Path(__file__).resolve().parents[2]
MK0 = "34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"
MK1 = "563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"
LINES = [
    f"psp-master key0={MK0} key1={MK1}",
    "psp-key spi=0x1234 key=" + "11" * 16,
    "eesp-sa spi=0x1000 suite=aes-gcm-16 key=" + "22" * 20 + " mode=tunnel",
    "eesp-sa spi=0x2000 suite=aes-gcm-16 root-key=" + "33" * 32 + " sskdf=hkdf-sha256 max-live-sub-sas=64",
    # ESP: every reader checks it (a known kind); the dissectors then leave ESP to Wireshark's own dissector
    "esp-sa spi=0x3000 suite=aes-gcm-12 key=" + "44" * 20 + " esn=1 first-seq=0x100000000 udp-encap=1 dst=192.0.2.2",
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
    root_sa = "eesp-sa spi=0x2000 suite=aes-gcm-16 root-key=" + "33" * 32 + " sskdf=hkdf-sha256"
    for live in ("1", "2", "65536", "0", "65537", "-1", "0x10", ""):
        out.append((f"max-live-sub-sas={live}", f"{root_sa} max-live-sub-sas={live}\n".encode()))
    esp_sa = "esp-sa spi=0x3000 suite=aes-gcm-16 key=" + "55" * 20
    for extra in ("", " esn=0 first-seq=4294967295", " first-seq=4294967296", " esn=1 first-seq=0xffffffffffffffff",
                  " first-seq=0", " udp-dport=4500", " udp-encap=1 udp-sport=1 udp-dport=65535", " udp-encap=1 udp-sport=0",
                  " mode=transport", " mode=beet", " replay-window=63", " anti-replay=0 replay-window=1048576",
                  " suite=aes-ccm-8", " key-bits=256", " root-key=" + "33" * 32, " src=192.0.2.1 dst=2001:db8::1",
                  " dst=2001:DB8::1\n" + esp_sa + " dst=2001:db8:0::1", "\n" + esp_sa.replace("0x3000", "3000"),
                  " dst=192.0.2.1\n" + esp_sa + " dst=192.0.2.2\n" + esp_sa.replace("esp-sa", "eesp-sa"),
                  " tfc-pad=4", " tfc-pad=1024", " tfc-pad=1025", " tfc-pad=-1", " tfc-pad=0x10",
                  " mode=transport tfc-pad=0", " mode=transport tfc-pad=7"):
        out.append((f"esp-sa{extra.splitlines()[0] if extra.strip() else ' plain'}", f"{esp_sa}{extra}\n".encode()))
    # google/psp reference configs (what psp_decrypt -c reads): the dissectors take their master keys; a key-file
    # reader refuses them
    spaced = " ".join(MK0[i:i + 2] for i in range(0, 64, 2)) + "\n" + " ".join(MK1[i:i + 2] for i in range(0, 64, 2))
    out.append(("reference config, master keys only", (spaced + "\n").encode()))
    out.append(("reference config cut short", b"34 44 8a\n"))
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
            tuple((e.spi, e.settings.get("key"), e.settings.get("root_key"), e.settings.get("max_live_sub_sas"), e.line)
                  for e in kf.eesp_sas),
            tuple((e.spi, e.settings["key"], e.settings["first_seq"], e.dst, e.line) for e in kf.esp_sas))


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


# --------------------------------------------------------------------------- the dissectors' legs

SIZE_CAP = 16 * 1024 * 1024
Outcome = Tuple[Tuple[bool, ...], Optional[Tuple[int, str, str]]]  # packets opened; refused: (line, message, code)


def _ipv4_udp(payload: bytes, dport: int = 5001) -> bytes:
    udp = struct.pack("!HHHH", 40000, dport, 8 + len(payload), 0) + payload
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, bytes([192, 0, 2, 1]),
                       bytes([192, 0, 2, 2])) + udp


def sample_packets() -> List[bytes]:
    """One packet per key of LINES (and of the root-key line of the max-live-sub-sas files)."""
    pypsp = pytest.importorskip("pypsp")
    pyeesp = pytest.importorskip("pyeesp")
    inner = _ipv4_udp(bytes(range(48)))
    return [
        pypsp.Encryptor(spi=0x1A345678, master_keys=(bytes.fromhex(MK0), bytes.fromhex(MK1))).encrypt(inner),
        pypsp.Encryptor(spi=0x1234, key=bytes.fromhex("11" * 16)).encrypt(inner),
        pyeesp.SA(0x1000, "aes-gcm-16", key=bytes.fromhex("22" * 20), mode="tunnel").encrypt(inner),
        pyeesp.SA(0x2000, "aes-gcm-16", root_key=bytes.fromhex("33" * 32), sskdf="hkdf-sha256").encrypt(inner, 1),
    ]


N_PSP = 2  # the first two sample packets are PSP (in UDP), the others EESP (on IP protocol 49)


def api_outcome(path: Path, packets: List[bytes]) -> Outcome:
    """What the Python API loads from `path` (a reference config by the core's rule, else a key file), and which
    packets those keys open."""
    import pypsp
    import pyeesp

    data = path.read_bytes()
    master: Tuple[Optional[bytes], Optional[bytes]] = (None, None)
    psp_keys: Dict = {}
    eesp: list = []
    if len(data) <= SIZE_CAP and lib.pe_psp_refcfg_detect(data, len(data)):
        cfg = ffi.new("pe_psp_refcfg *")
        err = ffi.new("pe_keyfile_error *")
        st = lib.pe_psp_refcfg_parse(data, len(data), cfg, err)
        if st != lib.PE_OK:
            msg = "google/psp reference config: " + ffi.string(err.message).decode(errors="replace")
            return (False,) * len(packets), (err.line, msg, status_name(st))
        master = (bytes(cfg.key0), bytes(cfg.key1))
    else:
        try:
            kf = load_key_file(path)
        except KeyFileError as e:
            m = re.match(re.escape(str(path)) + r"(?::(\d+))?: (.*)$", str(e), re.S)
            assert m, str(e)
            return (False,) * len(packets), (int(m.group(1) or 0), m.group(2), e.code)
        master, psp_keys, eesp = kf.psp_master_keys, kf.psp_keys, kf.eesp_sas
    dec = pypsp.Decryptor(master_keys=master, keys=psp_keys) if any(master) or psp_keys else None
    rx = pyeesp.Receiver([pyeesp.SA(**{**e.settings, "crypt_offset": None}) for e in eesp]) if eesp else None
    opened = []
    for i, p in enumerate(packets):
        r = dec if i < N_PSP else rx
        try:
            opened.append(r is not None and r.decrypt(p) is not None)
        except Exception:  # noqa: BLE001 -- any refusal: the packet did not open
            opened.append(False)
    return tuple(opened), None


# "PSP key file <path>, line 3: <message> (keyfile-bad-value)": what the plugin and the Lua scripts say on every
# packet the file may have cost its key (expert item, category configuration or io).
PROBLEM = re.compile(r"\b(PSP|EESP) key file (.*?)(?:, line (\d+))?: (.*) \(([a-z0-9-]+)\)$")


def dissector_outcome(stdout: str, path: str) -> Tuple[Outcome, Outcome]:
    """(PSP side, EESP side) of one tshark run with `path` as both protocols' key file: which packets opened
    (status ok), and the key-file problem each side reported."""
    rows = [line.split("\t") for line in stdout.splitlines()]
    opened = tuple("ok" in row[:2] for row in rows)
    problems: Dict[str, set] = {"PSP": set(), "EESP": set()}
    for row in rows:
        for msg in (row[2].split("|") if len(row) > 2 and row[2] else []):
            m = PROBLEM.search(msg)
            if m and m.group(2) == path:
                problems[m.group(1)].add((int(m.group(3) or 0), m.group(4), m.group(5)))
    sides = []
    for proto in ("PSP", "EESP"):
        got = problems[proto]
        assert len(got) <= 1, got
        sides.append((opened, next(iter(got), None)))
    return sides[0], sides[1]


TSHARK_FIELDS = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|", "-e", "psp.status", "-e",
                 "eesp.status", "-e", "_ws.expert.message"]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """The corpus as files an unprivileged tshark can read, the sample capture, and the API's outcome of each."""
    ws = pytest.importorskip("wireshark")
    from pecore.capture import LINKTYPE_RAW, CaptureWriter

    d = ws.shared_dir("pe-keyfile-grammar-")
    packets = sample_packets()
    cap = d / "sample.pcap"
    w = CaptureWriter(str(cap), linktype=LINKTYPE_RAW)
    for p in packets:
        w.write(p)
    w.close()
    cap.chmod(0o644)
    files = []
    for i, (name, data) in enumerate(CORPUS):
        f = d / f"k{i:03d}.keys"
        f.write_bytes(data)
        f.chmod(0o644)
        files.append((name, f, api_outcome(f, packets)))
    yield {"dir": d, "capture": cap, "packets": packets, "files": files}
    shutil.rmtree(d, ignore_errors=True)


def test_sample_capture_tells_the_keys_apart(staged):
    """Each packet needs its own key: the reference file opens all, and some corpus files open only some."""
    outcomes = {o for _, _, o in staged["files"]}
    assert ((True,) * 4, None) in outcomes
    assert any(o[1] is None and any(o[0]) and not all(o[0]) for o in outcomes), outcomes
    assert any(o[1] is not None for o in outcomes)


def run_corpus(staged, run_one) -> Tuple[List[Tuple[str, Outcome, Outcome, Outcome]], float]:
    """run_one(path) -> tshark stdout, for every corpus file, two tshark processes at a time."""
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        outs = list(pool.map(lambda item: run_one(item[1]), staged["files"]))
    took = time.monotonic() - t0
    results = []
    for (name, path, want), out in zip(staged["files"], outs):
        psp, eesp = dissector_outcome(out, str(path))
        results.append((name, want, psp, eesp))
    return results, took


def check_leg(results, what: str) -> None:
    bad = []
    for name, want, psp, eesp in results:
        opened, problem = want
        # The PSP side must open what the API's PSP keys open and nothing of EESP, and report the same refusal;
        # the EESP side likewise.
        if psp != (opened[:N_PSP] + eesp[0][N_PSP:], problem) or eesp != (psp[0][:N_PSP] + opened[N_PSP:], problem):
            bad.append((name, want, psp, eesp))
    assert not bad, f"{what}: {len(bad)} of {len(results)} files differ from the API, e.g. {bad[:3]}"


def _report(what: str, n: int, took: float) -> None:
    print(f"\n{what}: {n} key files, {n} tshark processes (2 at a time) in {took:.1f} s")


@pytest.mark.tshark
def test_the_plugin_loads_what_the_api_loads(staged):
    """The Wireshark plugin (build/plugin, reading through pe_keyfile_read_text) over the whole corpus."""
    import wireshark as ws

    if ws.available():
        pytest.skip(ws.available())

    def run_one(path: Path) -> str:
        return ws.run(["-n", "-r", str(staged["capture"]), *TSHARK_FIELDS, "-o", f"psp.keyfile:{path}",
                       "-o", f"eesp.keyfile:{path}"], timeout=120).stdout

    results, took = run_corpus(staged, run_one)
    _report("plugin", len(results), took)
    check_leg(results, "the plugin")


@pytest.mark.tshark
def test_the_lua_scripts_with_pelua_load_what_the_api_loads(staged):
    """psp.lua and eesp.lua (no C plugin) with pelua, which reads through the core as the plugin does."""
    import wireshark as ws

    if not Path(ws.TSHARK).exists():
        pytest.skip("tshark is not installed")
    if not (ws.LUA_MODULE_DIR / "pelua.so").exists():
        pytest.skip("pelua is not built (cmake -S dissectors/lua -B build/lua && cmake --build build/lua)")
    scripts = [ws.LUA_DIR / "psp.lua", ws.LUA_DIR / "eesp.lua"]

    def run_one(path: Path) -> str:
        return ws.run(["-n", "-r", str(staged["capture"]), *TSHARK_FIELDS, "-o", f"psp.keyfile:{path}",
                       "-o", f"eesp.keyfile:{path}"], plugin=None, lua_scripts=scripts, timeout=120).stdout

    results, took = run_corpus(staged, run_one)
    _report("Lua scripts with pelua", len(results), took)
    check_leg(results, "the Lua scripts with pelua")


def test_the_pure_lua_reader_loads_what_the_api_loads(staged):
    """pecrypto.load_keyfile (the reader psp.lua/eesp.lua use without pelua, on Wireshark 4.6) under lua5.4, one
    process for the whole corpus: the same verdict, line, message and code, and the same packets opened by its
    own PSP/EESP open logic (AEADs served by Python, as in tests/wireshark/test_lua_pure_open.py)."""
    try:
        luaharness = from_test_folder("wireshark", "luaharness")
        LUA54, Harness = luaharness.LUA54, luaharness.Harness
    except pytest.skip.Exception as e:
        pytest.skip(str(e))
    if LUA54 is None:
        pytest.skip("lua5.4 is not installed (apt-get install lua5.4)")
    packets = staged["packets"]
    psp_octets = [p[28:] for p in packets[:N_PSP]]
    eesp_octets = [p[20:] for p in packets[N_PSP:]]
    lua = Harness(staged["dir"])
    bad = []
    try:
        for name, path, want in staged["files"]:
            res = lua.call("load", str(path))
            if res["ok"]:
                got_problem = None
                opened = tuple(lua.call("psp", o.hex())["status"] == "ok" for o in psp_octets) + tuple(
                    lua.call("eesp", o.hex(), 4, "none")["status"] == "ok" for o in eesp_octets)
            else:
                m = re.match(re.escape(str(path)) + r"(?:, line (\d+))?: (.*)$", res["error"], re.S)
                assert m, res
                got_problem = (int(m.group(1) or 0), m.group(2), res["status"])
                opened = (False,) * len(packets)
            if (opened, got_problem) != want:
                bad.append((name, want, (opened, got_problem)))
    finally:
        lua.close()
    assert not bad, f"pecrypto.load_keyfile: {len(bad)} files differ from the API, e.g. {bad[:3]}"


@pytest.mark.tshark
def test_the_pure_lua_scripts_in_tshark_46_load_what_the_api_loads(staged):
    """psp.lua and eesp.lua without pelua inside a tshark whose Lua has GcryptCipher (4.6+: the system's, or the
    sid chroot's with PE_TSHARK_CHROOT, as tests/wireshark/test_lua_pure_tshark.py runs it)."""
    chroot = os.environ.get("PE_TSHARK_CHROOT")
    if chroot and os.geteuid() != 0:
        pytest.skip("PE_TSHARK_CHROOT needs root (chroot)")
    try:
        Tshark = from_test_folder("wireshark", "luaharness").Tshark
    except pytest.skip.Exception as e:
        pytest.skip(str(e))
    import wireshark as ws

    if not chroot and not Path(ws.TSHARK).exists():
        pytest.skip("tshark is not installed")
    t = Tshark(chroot)
    try:
        if not t.gcrypt or t.pelua:
            pytest.skip(f"this tshark ({t.lua_version}) has no GcryptCipher: pure-Lua decryption needs Wireshark "
                        "4.6 (PE_TSHARK_CHROOT=/var/tmp/pe-chroots/sid runs one from a chroot)")
        scripts = [t.stage(ws.LUA_DIR / "psp.lua"), t.stage(ws.LUA_DIR / "eesp.lua")]
        cap = t.stage(staged["capture"])
        seen = {str(path): t.stage(path) for _, path, _ in staged["files"]}

        def run_one(path: Path) -> str:
            return t.run(["-n", "-r", cap, *TSHARK_FIELDS, "-o", f"psp.keyfile:{seen[str(path)]}",
                          "-o", f"eesp.keyfile:{seen[str(path)]}"], scripts).stdout

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            outs = list(pool.map(lambda item: run_one(item[1]), staged["files"]))
        took = time.monotonic() - t0
        results = []
        for (name, path, want), out in zip(staged["files"], outs):
            psp, eesp = dissector_outcome(out, seen[str(path)])
            # inside a chroot the messages name the path tshark opened
            results.append((name, want, psp, eesp))
        _report(f"pure-Lua scripts in tshark ({t.lua_version})", len(results), took)
        check_leg(results, "the pure-Lua scripts")
    finally:
        t.close()
