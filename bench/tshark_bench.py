"""tshark bench: the PSP plugin decrypting a capture, against Wireshark's own ESP decryption.

Three tshark runs over captures of the same inner packets, all with the same
output work (``-n -T fields -e frame.number -e tcp.dstport -e udp.dstport``,
stdout to /dev/null, so the inner TCP/UDP header is dissected):

* **plugin decrypting**: the PSP capture (transport mode, version 0,
  AES-GCM-128, crypt offset 0), keys from a key file holding only the
  ``psp-master`` pair, read by our plugin (``-o psp.keyfile:PATH``);
* **plugin disabled**: the same capture and key file, plugin loaded, with
  ``--disable-protocol psp`` (UDP port 1000 payload shown as data);
* **Wireshark ESP**: an ESP capture of the same inner packets (transport
  mode, AES-GCM-128 with 16-octet ICV [RFC 4106]: key || 4-octet salt,
  8-octet explicit IV, AAD = SPI || SN), decrypted by Wireshark's own
  dissector with ``esp.enable_encryption_decode`` and
  ``esp.enable_authentication_check`` on (ICV checked, as PSP's always is),
  ``esp.do_esp_sequence_analysis`` left at its default (on).

Every run is a whole tshark process (start-up included), run as ``nobody``
with WIRESHARK_PLUGIN_DIR=build/plugin/plugins (tshark as root ignores it; the
same method as tests/wireshark.py).  The contenders take turns, --repeats
times, and the best (shortest) wall time counts; on a shared machine
interference only slows a run down.  For information, also: ESP in UDP 4500
(the same layers as PSP), the plaintext capture, the PSP capture with no
plugin, and an empty capture (start-up only).  Before timing, every run's
output is checked: the inner port of every packet where it must be decrypted,
none where it must not.

Target: plugin decrypting <= 1.3 x Wireshark ESP (best wall times).

A second section, the Lua dissectors (issue 12; information rows, no target),
times on the same PSP capture, with the same output work:

* **(a)** the C plugin decrypting (the run above);
* **(b)** dissectors/lua/psp.lua decrypting in pure Lua, with no C plugin and
  a LUA_CPATH that finds no C module: only where this tshark's Lua has
  GcryptCipher and math.type (Wireshark 4.6+), which a probe script run the
  same way tells; otherwise the row says why it was not measured;
* **(c)** psp.lua with the pelua C module (build/lua/pelua.so) decrypting;
* **(d)** psp.lua without a key file: headers only;
* **(e)** no PSP dissector at all (the "no plugin" run above);
* for information: the C plugin without a key file, and psp.lua's start-up.

Each of these is checked first with ``-e frame.protocols`` added: inner
ports in every packet for (a)-(c), none for (d) and (e), a psp layer in
every packet except in (e), and nothing from psp.lua on stderr.
``--lua-only`` runs only this section (and builds no ESP captures):
``scripts/wireshark-chroot.sh sid --bench`` runs it that way against
Wireshark 4.6.

Run it alone with ``.venv/bin/python bench/tshark_bench.py [--packets N]`` or
through ``bench/run --only tshark``; ``bench/run`` without --only runs it
after the other sections.  Markdown goes to stdout, progress to stderr.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, NoReturn, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_DIR = ROOT / "build" / "plugin" / "plugins"  # cmake -S dissectors/plugin -B build/plugin
EMPTY_PLUGIN_DIR = ROOT / "build" / "no-plugins"  # as tests/wireshark.py: a plugin dir with nothing in it
PSP_LUA = ROOT / "dissectors" / "lua" / "psp.lua"
LUA_MODULE_DIR = ROOT / "build" / "lua"  # cmake -S dissectors/lua -B build/lua: pelua.so for this tshark's Lua
TSHARK = shutil.which("tshark") or "/usr/bin/tshark"
RUNUSER = shutil.which("runuser") or "/usr/sbin/runuser"  # absolute: the child runs with an empty environment

RATIO_MAX = 1.3  # plugin decrypting vs Wireshark ESP decryption, best wall times

# PSP: the reference master keys (demo/keys.txt); SPI MSB 1 selects key 1.
PSP_MASTER = (bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca"),
              bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739"))
PSP_SPI = 0x9A345678
PSP_VERSION = 0  # AES-GCM-128
# ESP: AES-GCM-128 key || salt (RFC 4106), one SA for IPv4 and IPv6.
ESP_SPI = 0x00001000
ESP_KEY = bytes(range(0x10, 0x20))
ESP_SALT = bytes.fromhex("c0ffee00")
ESP_ALG = "AES-GCM with 16 octet ICV [RFC4106]"

# The traffic: demo/sample_traffic.py's flows (IPv4/IPv6 50:50, TCP/UDP 50:50, its ports),
# TCP/UDP payload sizes from this mix, in a seeded random order.  No ARP: every frame is encrypted.
PAYLOAD_MIX = ((0, 2), (40, 2), (200, 1), (512, 1), (1000, 1), (1400, 3))  # (payload octets, weight)
FIELDS = ("frame.number", "tcp.dstport", "udp.dstport")
PSP_PORT = 1000

MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def die(msg: str) -> NoReturn:
    """An error, not a missed target: exit status 2 (bench/run passes it on)."""
    log(msg)
    raise SystemExit(2)


def _sample_traffic():
    """demo/sample_traffic.py as a module (its ipv4()/ipv6() packet builders)."""
    spec = importlib.util.spec_from_file_location("sample_traffic", ROOT / "demo" / "sample_traffic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# ----------------------------------------------------------------- captures


def make_frames(n: int, seed: int = 1) -> Tuple[List[bytes], List[Tuple[str, int]]]:
    """n Ethernet frames of inner IPv4/IPv6 TCP/UDP packets, and each one's (l4 name, destination port)."""
    st = _sample_traffic()
    rng = random.Random(seed)
    sizes = [s for s, w in PAYLOAD_MIX for _ in range(w)]
    v6a, v6b = bytes.fromhex("20010db8000000000000000000000001"), bytes.fromhex("20010db8000000000000000000000002")
    frames, expect = [], []
    for i in range(n):
        payload = rng.randbytes(rng.choice(sizes))
        proto = rng.choice((6, 17))
        ports = (rng.choice((443, 53, 8080)), 40000 + i % 16)
        if rng.random() < 0.5:
            pkt, etype = st.ipv4("10.1.0.1", "10.1.0.2", proto, *ports, payload, i), b"\x08\x00"
        else:
            pkt, etype = st.ipv6(v6a, v6b, proto, *ports, payload, i), b"\x86\xdd"
        frames.append(MAC_B + MAC_A + etype + pkt)
        expect.append(("tcp" if proto == 6 else "udp", ports[1]))
    return frames, expect


def _ts(i: int) -> Tuple[int, int]:
    return 1_700_000_000 + i // 1000, (i % 1000) * 1_000_000 + 123


def write_pcap(path: Path, frames: Sequence[bytes]) -> None:
    from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter

    with CaptureWriter(path, LINKTYPE_ETHERNET, "pcap") as w:
        for i, f in enumerate(frames):
            w.write(f, _ts(i))


def read_pcap_sizes(path: Path) -> List[int]:
    """Captured length of every record of a classic little-endian pcap (what CaptureWriter writes)."""
    data = path.read_bytes()
    if data[:4] not in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        die(f"tshark bench: {path} is not a little-endian pcap")
    sizes, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        sizes.append(incl)
        off += 16 + incl
    return sizes


def _ipv4_csum(hdr: bytes) -> int:
    from pecore.protocol import checksum

    return checksum(hdr)


def esp_frames(frames: Sequence[bytes], udp_encap: bool = False) -> List[bytes]:
    """ESP transport mode (RFC 4303) with AES-GCM-128, 16-octet ICV (RFC 4106), one SA, SN from 1.

    Payload: L4 segment || padding 1, 2, ... to a multiple of 4 with the two trailer octets || pad length || next
    header; nonce = salt || IV (IV = the SN as 8 octets); AAD = SPI || SN (32-bit SN).  ``udp_encap``: in UDP
    port 4500 (RFC 3948), checksum computed, as PSP rides in UDP.
    """
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    csum = _sample_traffic()._csum
    gcm = AESGCM(ESP_KEY)
    out = []
    for sn, f in enumerate(frames, 1):
        eth, etype, ip = f[:14], f[12:14], f[14:]
        if etype == b"\x08\x00":
            ihl = (ip[0] & 0x0F) * 4
            hdr, seg, nh = bytearray(ip[:ihl]), ip[ihl:], ip[9]
        else:
            hdr, seg, nh = bytearray(ip[:40]), ip[40:], ip[6]
        pad = (-(len(seg) + 2)) % 4
        plain = seg + bytes(range(1, pad + 1)) + bytes((pad, nh))
        esp_hdr = struct.pack("!II", ESP_SPI, sn)
        iv = struct.pack("!Q", sn)
        body = esp_hdr + iv + gcm.encrypt(ESP_SALT + iv, plain, esp_hdr)
        proto = 50
        if udp_encap:
            proto = 17
            addrs = bytes(hdr[12:20]) if etype == b"\x08\x00" else bytes(hdr[8:40])
            ulen = 8 + len(body)
            c = csum(addrs + bytes((0, 17)) + struct.pack("!HHHHH", ulen, 4500, 4500, ulen, 0) + body) or 0xFFFF
            body = struct.pack("!HHHH", 4500, 4500, ulen, c) + body
        if etype == b"\x08\x00":
            struct.pack_into("!H", hdr, 2, len(hdr) + len(body))
            hdr[9] = proto
            struct.pack_into("!H", hdr, 10, 0)
            struct.pack_into("!H", hdr, 10, _ipv4_csum(bytes(hdr)))
        else:
            struct.pack_into("!H", hdr, 4, len(body))
            hdr[6] = proto
        out.append(eth + bytes(hdr) + body)
    return out


def psp_capture(plain: Path, out: Path) -> None:
    """pypsp.encrypt_capture: transport mode, version 0, crypt offset 0, key derived from the master pair."""
    import pypsp

    enc = pypsp.Encryptor(master_keys=PSP_MASTER, spi=PSP_SPI, version=PSP_VERSION, mode="transport", crypt_offset=0)
    s = pypsp.encrypt_capture(enc, plain, out)
    if s.transformed != s.packets:
        die(f"tshark bench: encrypt_capture transformed {s.transformed} of {s.packets} packets")


def key_file_text() -> str:
    return ("# tshark bench: the reference master keys (public test vectors)\n"
            f"psp-master key0={PSP_MASTER[0].hex()} key1={PSP_MASTER[1].hex()}\n")


def esp_uat_options() -> List[str]:
    keyhex = "0x" + (ESP_KEY + ESP_SALT).hex()
    opts = ["-o", "esp.enable_encryption_decode:TRUE", "-o", "esp.enable_authentication_check:TRUE"]
    for fam in ("IPv4", "IPv6"):
        opts += ["-o", f'uat:esp_sa:"{fam}","*","*","0x{ESP_SPI:08x}","{ESP_ALG}","{keyhex}","NULL",""']
    return opts


# -------------------------------------------------------------------- tshark


_versions: Optional[Tuple[Optional[str], Optional[str]]] = None


def tshark_versions() -> Tuple[Optional[str], Optional[str]]:
    """(Wireshark major.minor, Lua major.minor) of the tshark under test, as tests/wireshark.py reads them."""
    global _versions
    if _versions is None:
        out = subprocess.run([TSHARK, "--version"], capture_output=True, text=True,
                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"}).stdout
        ws = re.search(r"\(Wireshark\) (\d+\.\d+)\.", out)
        lua = re.search(r"\bwith Lua\s+(\d+\.\d+)", out)  # the version line wraps anywhere
        _versions = (ws.group(1) if ws else None), (lua.group(1) if lua else None)
    return _versions


def plugin_so() -> Path:
    """Where the plugin build puts the module for this tshark: plugins load only from plugins/<major.minor>/."""
    return PLUGIN_DIR / (tshark_versions()[0] or "4.0") / "epan" / "psp_eesp.so"


class Tshark:
    """tshark as ``nobody`` (when root) with a chosen plugin dir, as tests/wireshark.py runs it.

    ``cpath``: a folder for LUA_CPATH (``<cpath>/?.so``, without ``;;``), so that ``require`` sees only what
    is there and not the Lua's default folders, where the chroot script installs pelua.  The environment is
    otherwise empty, so no LUA_CPATH_5_x is set to take precedence over it.
    """

    def __init__(self, work: Path) -> None:
        self.home = work / "home"
        self.home.mkdir(mode=0o777)
        self.home.chmod(0o777)

    def command(self, args: Sequence[str], plugin: bool, cpath: Optional[Path] = None) -> List[str]:
        if not plugin:
            (EMPTY_PLUGIN_DIR / (tshark_versions()[0] or "4.0") / "epan").mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "WIRESHARK_CONFIG_DIR": str(self.home),
            "WIRESHARK_PLUGIN_DIR": str(PLUGIN_DIR if plugin else EMPTY_PLUGIN_DIR),
            "TZ": "UTC",
            "LC_ALL": "C.UTF-8",
        }
        if cpath is not None:
            env["LUA_CPATH"] = f"{cpath}/?.so"
        as_user = [RUNUSER, "-u", "nobody", "--"] if os.geteuid() == 0 else []
        return [*as_user, "/usr/bin/env", *(f"{k}={v}" for k, v in env.items()), TSHARK, *args]

    def completed(self, args: Sequence[str], plugin: bool, cpath: Optional[Path] = None) -> subprocess.CompletedProcess:
        cmd = self.command(args, plugin, cpath)
        p = subprocess.run(cmd, capture_output=True, text=True, env={})
        if p.returncode != 0:
            die(f"tshark bench: tshark failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
        return p

    def output(self, args: Sequence[str], plugin: bool, cpath: Optional[Path] = None) -> str:
        return self.completed(args, plugin, cpath).stdout

    def timed(self, args: Sequence[str], plugin: bool, cpath: Optional[Path] = None) -> Tuple[float, float]:
        """(wall seconds, CPU seconds user+sys of tshark and its wrappers) of one run, stdout to /dev/null."""
        cmd = self.command(args, plugin, cpath)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={})
        wall = time.perf_counter() - t
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            die(f"tshark bench: tshark failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:].decode(errors='replace')}")
        return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def fields_args(capture: Path) -> List[str]:
    args = ["-n", "-r", str(capture), "-T", "fields"]
    for f in FIELDS:
        args += ["-e", f]
    return args


def check_decrypted(out: str, expect: Sequence[Tuple[str, int]], what: str, outer_udp: int = 0) -> None:
    """Every packet's inner TCP or UDP destination port must be in tshark's output (after UDP ``outer_udp``)."""
    lines = out.splitlines()
    if len(lines) != len(expect):
        die(f"tshark bench: {what}: {len(lines)} packets in tshark's output, expected {len(expect)}")
    bad = []
    for i, (line, (l4, port)) in enumerate(zip(lines, expect), 1):
        _, tcp, udp = (line.split("\t") + ["", ""])[:3]
        udps = [u for u in udp.split(",") if u]
        if outer_udp:  # PSP, ESP in UDP: the outer UDP header first
            if not udps or udps[0] != str(outer_udp):
                bad.append(i)
                continue
            udps = udps[1:]
        got = tcp if l4 == "tcp" else (udps[-1] if udps else "")
        if got != str(port) or (l4 == "tcp" and udps):
            bad.append(i)
    if bad:
        die(f"tshark bench: {what}: {len(bad)} packets not decrypted (first: frame {bad[0]}: "
                         f"{lines[bad[0] - 1]!r}, expected {expect[bad[0] - 1]})")


def check_not_decrypted(out: str, n: int, what: str) -> None:
    lines = out.splitlines()
    bad = [line for line in lines if line.split("\t")[1:] != ["", str(PSP_PORT)]]
    if len(lines) != n or bad:
        die(f"tshark bench: {what}: expected {n} packets with only the outer UDP port, "
                         f"got {len(lines)} lines ({len(bad)} others, e.g. {bad[:1]})")


def shell_cmd(args: Sequence[str]) -> str:
    import shlex

    return "tshark " + " ".join(shlex.quote(a) for a in args)


# --------------------------------------------------------------------- bench


def plugin_missing() -> Optional[str]:
    if not Path(TSHARK).exists():
        return "tshark is not installed"
    if not plugin_so().exists():
        return f"no plugin at {plugin_so().relative_to(ROOT)} (`cmake -S dissectors/plugin -B build/plugin && cmake --build build/plugin`)"
    return None


# What this tshark's Lua offers psp.lua, whose engine is pelua when require finds it, else pure Lua when
# GcryptCipher and math.type exist.  Run exactly as the Lua rows are (no C plugin, the same LUA_CPATH).
PROBE_LUA = r"""
local ok, m = pcall(require, "pelua")
local err = ok and "" or (tostring(m):match("^[^\n]*"))
io.stdout:write(table.concat({ "PE_PROBE", "lua=" .. _VERSION, "gcrypt=" .. tostring(GcryptCipher ~= nil),
    "math_type=" .. tostring(math.type ~= nil),
    "pelua=" .. tostring(ok and type(m) == "table" and type(m.load_keyfile) == "function"),
    "pelua_error=" .. (err:gsub("\t", " ")) }, "\t") .. "\n")
"""


def lua_probe(ts: Tshark, probe: Path, empty: Path, cpath: Path) -> Optional[Dict[str, str]]:
    """The probe's key=value fields, or None when tshark ran no Lua script (built without Lua)."""
    out = ts.output(fields_args(empty) + ["-X", f"lua_script:{probe}"], False, cpath)
    for line in out.splitlines():
        if line.startswith("PE_PROBE\t"):
            return dict(f.split("=", 1) for f in line.split("\t")[1:])
    return None


def check_lua_row(p: subprocess.CompletedProcess, expect: Sequence[Tuple[str, int]], what: str,
                  decrypted: bool, psp_layer: bool) -> None:
    """A Lua-section run's output with frame.protocols as a 4th column: ports as for the ESP section, and the
    psp layer in every packet or in none, so that a dissector that failed to load cannot pass for fast."""
    if "psp.lua:" in p.stderr or "Lua Error" in p.stderr or "Lua: Error" in p.stderr:
        die(f"tshark bench: {what}: psp.lua complained on stderr:\n{p.stderr[-3000:]}")
    lines, protos = [], []
    for line in p.stdout.splitlines():
        head, _, proto = line.rpartition("\t")
        lines.append(head)
        protos.append(proto)
    wrong = [i for i, pr in enumerate(protos, 1) if ("psp" in pr.split(":")) != psp_layer]
    if wrong:
        die(f"tshark bench: {what}: {len(wrong)} packets {'without' if psp_layer else 'with'} a psp layer "
            f"(first: frame {wrong[0]}: {protos[wrong[0] - 1]!r})")
    out = "".join(line + "\n" for line in lines)
    if decrypted:
        check_decrypted(out, expect, what, outer_udp=PSP_PORT)
    else:
        check_not_decrypted(out, len(expect), what)


# The Lua section's rows, in the order of its table (and, with --lua-only, of the runs in each round):
# name: (label, decrypted, psp layer present)
LUA_ROWS = {
    "plugin": ("(a) C plugin decrypting", True, True),
    "lua_pure": ("(b) psp.lua decrypting in pure Lua (GcryptCipher), no C module", True, True),
    "lua_pelua": ("(c) psp.lua + pelua decrypting", True, True),
    "lua_headers": ("(d) psp.lua, headers only (no key file)", False, True),
    "plugin_headers": ("C plugin, headers only (no key file) (information)", False, True),
    "no_plugin": ("(e) no PSP dissector (UDP data)", False, False),
    "lua_startup": ("empty capture, psp.lua start-up, no C module (information)", None, None),
    "startup": ("empty capture, start-up without psp.lua (C plugin loaded if built) (information)", None, None),
}


def run(n_packets: int, repeats: int, tmp_root: Optional[str] = None, keep: bool = False,
        lua_only: bool = False) -> dict:
    """Make the captures, check what each tshark run dissects, and time the runs."""
    missing = plugin_missing()
    if not Path(TSHARK).exists():
        return {"skipped": missing, "lua_only": lua_only}
    have_plugin = missing is None
    work = Path(tempfile.mkdtemp(prefix="pe-tshark-bench-", dir=tmp_root))
    work.chmod(0o755)  # tshark runs as nobody: everything in here must be world-readable
    lua: dict = {}
    try:
        t0 = time.perf_counter()
        frames, expect = make_frames(n_packets)
        plain, psp, esp, empty = work / "plain.pcap", work / "psp.pcap", work / "esp.pcap", work / "empty.pcap"
        esp_udp = work / "esp-udp.pcap"
        write_pcap(plain, frames)
        psp_capture(plain, psp)
        captures = [("plain", plain), ("psp", psp)]
        if not lua_only:
            write_pcap(esp, esp_frames(frames))
            write_pcap(esp_udp, esp_frames(frames, udp_encap=True))
            captures += [("esp", esp), ("esp_udp", esp_udp)]
        write_pcap(empty, [])
        keyfile = work / "keys.txt"
        keyfile.write_text(key_file_text())
        # psp.lua as it is in the tree, copied so that nobody can read it wherever the tree is
        psp_lua, probe = work / "psp.lua", work / "probe.lua"
        shutil.copyfile(PSP_LUA, psp_lua)
        probe.write_text(PROBE_LUA)
        no_modules = work / "no-lua-modules"  # LUA_CPATH folder with nothing in it: require finds no C module
        no_modules.mkdir(mode=0o755)
        for _, p in captures:
            p.chmod(0o644)
        for p in (empty, keyfile, psp_lua, probe):
            p.chmod(0o644)
        gen_s = time.perf_counter() - t0
        sizes = {name: read_pcap_sizes(p) for name, p in captures}
        for name, s in sizes.items():
            if len(s) != n_packets:
                die(f"tshark bench: {name} capture has {len(s)} packets, expected {n_packets}")

        ts = Tshark(work)
        psp_opts = ["-o", f"psp.keyfile:{keyfile}"]
        # name: (args, plugin loaded, LUA_CPATH folder or None)
        # In this order in every round: the two the target compares run back to back.
        contenders: Dict[str, Tuple[List[str], bool, Optional[Path]]] = {}
        if not lua_only:
            if have_plugin:
                contenders["plugin"] = (fields_args(psp) + psp_opts, True, None)
            contenders["esp"] = (fields_args(esp) + esp_uat_options(), have_plugin, None)
            if have_plugin:
                contenders["plugin_disabled"] = (fields_args(psp) + psp_opts + ["--disable-protocol", "psp"], True,
                                                 None)
            # ESP in UDP 4500 (information): the same layers as PSP (outer UDP, then the security header).
            contenders["esp_udp"] = (fields_args(esp_udp) + esp_uat_options(), have_plugin, None)
            contenders["no_plugin"] = (fields_args(psp), False, None)
            # The inner packets unencrypted (information): the dissection work both decrypting runs share.
            contenders["plaintext"] = (fields_args(plain), have_plugin, None)
            # Start-up only (information): an empty capture, the decrypting run's options.
            startup_args = (fields_args(empty) + psp_opts) if have_plugin else fields_args(empty)
            contenders["startup"] = (startup_args, have_plugin, None)

        # The Lua section (issue 12): which engines this tshark can run psp.lua with, then its rows.
        lua_script = ["-X", f"lua_script:{psp_lua}"]
        lua["not_measured"] = {}
        info = lua_probe(ts, probe, empty, no_modules)
        if info is None:
            why = "this tshark runs no Lua scripts (the probe script printed nothing)"
            lua["skipped"] = why
            for k in ("lua_pure", "lua_pelua", "lua_headers", "lua_startup"):
                lua["not_measured"][k] = why
        else:
            lua["tshark_lua"] = info["lua"]
            if info["pelua"] == "true":
                die(f"tshark bench: require finds pelua with LUA_CPATH={no_modules}/?.so, so psp.lua would not "
                    "decrypt in pure Lua there")
            if info["gcrypt"] != "true":
                lua["not_measured"]["lua_pure"] = (f"this tshark's Lua ({info['lua']}) has no GcryptCipher "
                                                   "(Wireshark 4.6 and later have it)")
            elif info["math_type"] != "true":
                lua["not_measured"]["lua_pure"] = f"this tshark's Lua ({info['lua']}) has no math.type (Lua 5.3+)"
            pelua_so = LUA_MODULE_DIR / "pelua.so"
            if not pelua_so.exists():
                lua["not_measured"]["lua_pelua"] = (f"pelua is not built ({pelua_so.relative_to(ROOT)}: "
                                                    "`cmake -S dissectors/lua -B build/lua && cmake --build build/lua`)")
            else:
                with_pelua = lua_probe(ts, probe, empty, LUA_MODULE_DIR)
                if not with_pelua or with_pelua["pelua"] != "true":
                    lua["not_measured"]["lua_pelua"] = (f"{pelua_so.relative_to(ROOT)} does not load in this tshark's "
                                                        f"Lua: {(with_pelua or {}).get('pelua_error', '?')}")
        if have_plugin:
            contenders.setdefault("plugin", (fields_args(psp) + psp_opts, True, None))
        else:
            lua["not_measured"]["plugin"] = lua["not_measured"]["plugin_headers"] = missing
        if "lua_pure" not in lua["not_measured"]:
            contenders["lua_pure"] = (fields_args(psp) + psp_opts + lua_script, False, no_modules)
        if "lua_pelua" not in lua["not_measured"]:
            contenders["lua_pelua"] = (fields_args(psp) + psp_opts + lua_script, False, LUA_MODULE_DIR)
        if "lua_headers" not in lua["not_measured"]:
            contenders["lua_headers"] = (fields_args(psp) + lua_script, False, no_modules)
        if have_plugin:
            contenders["plugin_headers"] = (fields_args(psp), True, None)
        contenders.setdefault("no_plugin", (fields_args(psp), False, None))
        if "lua_startup" not in lua["not_measured"]:
            contenders["lua_startup"] = (fields_args(empty) + psp_opts + lua_script, False, no_modules)
        contenders.setdefault("startup", ((fields_args(empty) + psp_opts) if have_plugin else fields_args(empty),
                                          have_plugin, None))
        lua["rows"] = [k for k in LUA_ROWS if k in contenders]

        log("tshark bench: checking what each run dissects ...")
        if not lua_only:
            check_decrypted(ts.output(*contenders["esp"]), expect, "Wireshark ESP")
            check_decrypted(ts.output(*contenders["esp_udp"]), expect, "Wireshark ESP in UDP", outer_udp=4500)
            if have_plugin:
                check_decrypted(ts.output(*contenders["plugin"]), expect, "plugin decrypting", outer_udp=PSP_PORT)
                check_not_decrypted(ts.output(*contenders["plugin_disabled"]), n_packets, "plugin disabled")
            check_not_decrypted(ts.output(*contenders["no_plugin"]), n_packets, "no plugin")
            check_decrypted(ts.output(*contenders["plaintext"]), expect, "plaintext")
        for name in lua["rows"]:
            label, decrypted, psp_layer = LUA_ROWS[name]
            if decrypted is None:
                continue
            args, plugin, cpath = contenders[name]
            check_lua_row(ts.completed(list(args) + ["-e", "frame.protocols"], plugin, cpath), expect, label,
                          decrypted, psp_layer)

        runs: Dict[str, List[Tuple[float, float]]] = {k: [] for k in contenders}
        for r in range(repeats):
            log(f"tshark bench: timing, round {r + 1} of {repeats} ...")
            for name, (args, plugin, cpath) in contenders.items():
                runs[name].append(ts.timed(args, plugin, cpath))
        if keep:
            log(f"tshark bench: captures kept in {work}")
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)

    rows = {}
    for name, rr in runs.items():
        walls, cpus = [w for w, _ in rr], [c for _, c in rr]
        args, plugin, cpath = contenders[name]
        env = f"WIRESHARK_PLUGIN_DIR={PLUGIN_DIR if plugin else EMPTY_PLUGIN_DIR}"
        if cpath is not None:
            env += f" LUA_CPATH={cpath}/?.so"
        rows[name] = {"wall_best": min(walls), "wall_median": statistics.median(walls), "cpu_best": min(cpus),
                      "walls": walls, "cpus": cpus, "plugin_loaded": plugin,
                      "command": shell_cmd(args).replace(str(work), "$DIR"),
                      "env": env.replace(str(work), "$DIR").replace(str(ROOT) + "/", "")}
    res: dict = {
        "packets": n_packets,
        "repeats": repeats,
        "lua_only": lua_only,
        "generate_seconds": gen_s,
        "mean_frame": {k: statistics.fmean(v) for k, v in sizes.items()},
        "file_mb": {k: sum(v) / 1e6 for k, v in sizes.items()},
        "rows": rows,
        "plugin": None if missing else str(plugin_so().relative_to(ROOT)),
        "plugin_missing": missing,
        "tshark": subprocess.run([TSHARK, "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "lua": lua,
        "plugin_backend": None if missing else plugin_backend(plugin_so()),
    }
    start = rows["startup"]["wall_best"]
    if "plugin" in rows and "esp" in rows:
        p, e, d = rows["plugin"]["wall_best"], rows["esp"]["wall_best"], rows["plugin_disabled"]["wall_best"]
        res["ratio"] = p / e
        res["ratio_median"] = rows["plugin"]["wall_median"] / rows["esp"]["wall_median"]
        res["ratio_cpu"] = rows["plugin"]["cpu_best"] / rows["esp"]["cpu_best"]
        # Round by round (the two ran back to back): less exposed to a slow spell that hit only one of them.
        paired = [a / b for a, b in zip(rows["plugin"]["walls"], rows["esp"]["walls"])]
        res["ratio_paired"] = {"median": statistics.median(paired), "min": min(paired), "max": max(paired), "all": paired}
        res["ratio_no_startup"] = (p - start) / (e - start) if e > start else None
        res["vs_disabled"] = p / d
        plain_t = rows["plaintext"]["wall_best"]
        # What decryption adds over dissecting the same packets in clear, per packet (information).
        res["added_us_per_packet"] = {k: (rows[k]["wall_best"] - plain_t) / n_packets * 1e6 for k in ("plugin", "esp", "esp_udp")}
        res["ratio_esp_udp"] = p / rows["esp_udp"]["wall_best"]
        res["pass"] = res["ratio"] <= RATIO_MAX
    else:
        res["pass"] = None
    lua_derived(res)
    return res


# Differences of best wall times, per packet: what each layer of work costs (the Lua section's breakdown).
# name: (minuend row, subtrahend row, what the difference is)
LUA_DIFFS = {
    "lua_header_tree": ("lua_headers", "no_plugin", "psp.lua's header fields and tree (headers only - no dissector)"),
    # Can be negative: without a PSP dissector, UDP tries its heuristic dissectors on every payload before "data".
    "c_header_tree": ("plugin_headers", "no_plugin", "the C plugin's header fields and tree (headers only - no "
                      "dissector, which runs UDP's heuristic dissectors on every packet)"),
    "lua_over_c_headers": ("lua_headers", "plugin_headers",
                           "psp.lua's header dissection over the C plugin's (headers only, both)"),
    "c_open_inner": ("plugin", "plugin_headers",
                     "C plugin: decryption + the inner packet's dissection (decrypting - headers only)"),
    "pelua_open_inner": ("lua_pelua", "lua_headers",
                         "psp.lua + pelua: decryption + the inner packet's dissection (decrypting - headers only)"),
    "pure_open_inner": ("lua_pure", "lua_headers",
                        "psp.lua in pure Lua: decryption + the inner packet's dissection (decrypting - headers only)"),
    "pure_over_pelua": ("lua_pure", "lua_pelua", "the pure-Lua open over pelua's (pure Lua - pelua)"),
}


def lua_derived(res: dict) -> None:
    rows, lua, n = res["rows"], res["lua"], res["packets"]
    lua["vs_plugin"] = {k: rows[k]["wall_best"] / rows["plugin"]["wall_best"] for k in lua["rows"]
                        if "plugin" in rows and LUA_ROWS[k][1] is not None}
    lua["over_no_dissector_us_per_packet"] = {
        k: (rows[k]["wall_best"] - rows["no_plugin"]["wall_best"]) / n * 1e6 for k in lua["rows"]
        if LUA_ROWS[k][1] is not None}
    lua["derived_us_per_packet"] = {k: (rows[a]["wall_best"] - rows[b]["wall_best"]) / n * 1e6
                                    for k, (a, b, _) in LUA_DIFFS.items() if a in rows and b in rows}
    if "lua_startup" in rows:
        lua["lua_startup_over_c_s"] = rows["lua_startup"]["wall_best"] - rows["startup"]["wall_best"]


# -------------------------------------------------------------------- output


ROW_LABELS = {
    "plugin": "PSP capture, plugin decrypting",
    "plugin_disabled": "PSP capture, plugin loaded, `--disable-protocol psp`",
    "no_plugin": "PSP capture, no plugin (information)",
    "plaintext": "plaintext capture, the same inner packets in clear (information)",
    "esp": "ESP capture, Wireshark ESP decrypting",
    "esp_udp": "ESP-in-UDP (4500) capture, Wireshark ESP decrypting (information)",
    "startup": "empty capture, start-up only (information)",
}


def target_row(res: dict) -> dict:
    name = f"tshark + plugin decrypting PSP <= {RATIO_MAX}x Wireshark ESP decryption ({res.get('packets', 0):,} packets)"
    if res.get("pass") is None:
        why = "--lua-only" if res.get("lua_only") else (res.get("plugin_missing") or res.get("skipped"))
        return {"name": name, "measured": "n/a", "result": f"not measured ({why})", "pass": None}
    return {"name": name, "measured": f"{res['ratio']:.2f}x", "result": "PASS" if res["pass"] else "FAIL", "pass": res["pass"]}


def markdown(res: dict) -> str:
    if res.get("lua_only"):
        return markdown_lua(res)
    return markdown_esp(res) + "\n" + markdown_lua(res)


def markdown_esp(res: dict) -> str:
    if res.get("skipped"):
        return f"## tshark: PSP plugin vs Wireshark ESP\n\nnot measured: {res['skipped']}\n"
    n = res["packets"]
    mf = res["mean_frame"]
    out = [
        f"## tshark: PSP plugin vs Wireshark ESP ({n:,} packets)",
        "",
        f"{res['tshark'].rstrip('.')}; the plugin's crypto backend: {res.get('plugin_backend') or 'no plugin'}; "
        f"best of {res['repeats']} runs, contenders in turns, whole tshark process "
        "(start-up included), output `-T fields -e frame.number -e tcp.dstport -e udp.dstport` to /dev/null. "
        f"Mean frame: {mf['psp']:.1f} octets PSP (transport, v0, crypt offset 0), {mf['esp']:.1f} ESP "
        f"(transport, AES-GCM-128, ICV 16), {mf['esp_udp']:.1f} ESP in UDP, {mf['plain']:.1f} plaintext.",
        "",
        "| run | best wall s | median wall s | best CPU s | packets/s (best) | vs ESP |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    esp = res["rows"]["esp"]["wall_best"]
    for name in ("plugin", "plugin_disabled", "esp", "esp_udp", "plaintext", "no_plugin", "startup"):
        r = res["rows"].get(name)
        if not r:
            continue
        pps = f"{n / r['wall_best']:,.0f}" if name != "startup" else ""
        out.append(f"| {ROW_LABELS[name]} | {r['wall_best']:.3f} | {r['wall_median']:.3f} | {r['cpu_best']:.3f} | "
                   f"{pps} | {r['wall_best'] / esp:.2f}x |")
    out.append("")
    if "ratio" in res:
        nos = res["ratio_no_startup"]
        rp = res["ratio_paired"]
        out.append(f"Plugin decrypting / Wireshark ESP: **{res['ratio']:.2f}x** (medians {res['ratio_median']:.2f}x, "
                   f"CPU {res['ratio_cpu']:.2f}x, start-up subtracted {'n/a' if nos is None else f'{nos:.2f}x'}, "
                   f"round by round {rp['min']:.2f}-{rp['max']:.2f}x, median {rp['median']:.2f}x); "
                   f"target <= {RATIO_MAX}x: **{'PASS' if res['pass'] else 'FAIL'}**. "
                   f"Plugin decrypting / plugin disabled: {res['vs_disabled']:.2f}x. "
                   f"Over the plaintext run, decrypting adds {res['added_us_per_packet']['plugin']:.1f} µs per packet "
                   f"with the plugin, {res['added_us_per_packet']['esp']:.1f} µs with Wireshark ESP and "
                   f"{res['added_us_per_packet']['esp_udp']:.1f} µs with ESP in UDP "
                   f"(plugin / ESP in UDP: {res['ratio_esp_udp']:.2f}x).")
    else:
        out.append(f"Plugin rows not measured: {res['plugin_missing']}.")
    out += ["", "Commands (`$DIR`: the bench's temp dir; as `nobody` with WIRESHARK_PLUGIN_DIR=build/plugin/plugins):", ""]
    for name, label in (("plugin", "plugin decrypting"), ("plugin_disabled", "plugin disabled"), ("esp", "Wireshark ESP")):
        if name in res["rows"]:
            out.append(f"- {label}: `{res['rows'][name]['command']}`")
    out.append("")
    return "\n".join(out)


def markdown_lua(res: dict) -> str:
    title = "## tshark: Lua dissectors (psp.lua) vs the C plugin"
    if res.get("skipped"):
        return f"{title}\n\nnot measured: {res['skipped']}\n"
    n, lua, rows = res["packets"], res["lua"], res["rows"]
    out = [
        f"{title} ({n:,} packets)",
        "",
        f"{res['tshark'].rstrip('.')}, {lua.get('tshark_lua', 'Lua: none')}; the PSP capture (transport, v0, crypt "
        f"offset 0, mean frame {res['mean_frame']['psp']:.1f} octets), output `-T fields -e frame.number -e tcp.dstport "
        f"-e udp.dstport` to /dev/null; best of {res['repeats']} runs, in turns. psp.lua runs with no C plugin "
        "(an empty WIRESHARK_PLUGIN_DIR) and LUA_CPATH set to build/lua "
        "(pelua) or to an empty folder (no C module). Information rows, no target.",
        "",
        "| run | best wall s | median wall s | best CPU s | packets/s (best) | µs/packet over (e) | vs (a) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (label, decrypted, _) in LUA_ROWS.items():
        r = rows.get(name)
        if name in lua["not_measured"]:
            out.append(f"| {label} | not measured: {lua['not_measured'][name]} | | | | | |")
            continue
        if r is None:
            continue
        timed_packets = decrypted is not None
        pps = f"{n / r['wall_best']:,.0f}" if timed_packets else ""
        over = f"{lua['over_no_dissector_us_per_packet'][name]:.1f}" if timed_packets else ""
        vs = f"{lua['vs_plugin'][name]:.2f}x" if name in lua["vs_plugin"] else ""
        out.append(f"| {label} | {r['wall_best']:.3f} | {r['wall_median']:.3f} | {r['cpu_best']:.3f} | {pps} | "
                   f"{over} | {vs} |")
    out.append("")
    if lua["derived_us_per_packet"]:
        out += ["Per packet, from differences of best wall times:", ""]
        for k, v in lua["derived_us_per_packet"].items():
            out.append(f"- {LUA_DIFFS[k][2]}: {v:.1f} µs")
        if "lua_startup_over_c_s" in lua:
            out.append(f"- psp.lua's start-up (empty capture, no C module) over tshark's without it: {lua['lua_startup_over_c_s'] * 1e3:.0f} ms per run")
        out.append("")
    out += ["Commands (`$DIR`: the bench's temp dir; as `nobody`, with the environment shown and HOME, "
            "WIRESHARK_CONFIG_DIR, TZ, LC_ALL):", ""]
    for name in lua["rows"]:
        out.append(f"- {LUA_ROWS[name][0]}: `{rows[name]['env']} {rows[name]['command']}`")
    out.append("")
    return "\n".join(out)


def plugin_backend(so: Path) -> str:
    """The crypto backend the plugin's core takes inside tshark (pe/backend.h): ipsec-mb when the module links it and
    PE_CRYPTO_BACKEND does not force OpenSSL.  The plugin runs in tshark's process, so this is read off the module."""
    try:
        linked = "libIPSec_MB" in subprocess.run(["ldd", str(so)], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (ldd failed)"
    if not linked:
        return "openssl (the plugin was built without intel-ipsec-mb)"
    if os.environ.get("PE_CRYPTO_BACKEND") == "openssl":
        return "openssl (PE_CRYPTO_BACKEND=openssl)"
    return "ipsec-mb where the CPU has AES-NI (the plugin links libIPSec_MB)"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/tshark_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI smoke test: 2,000 packets, 1 run each")
    ap.add_argument("--packets", type=int, help="packets per capture (default 100000; --quick 2000)")
    ap.add_argument("--repeats", type=int, help="runs per contender, best taken (default 5; --quick 1)")
    ap.add_argument("--tmpdir", help="where the captures go (default: the system temp dir)")
    ap.add_argument("--json", metavar="PATH", help="also write every run as JSON")
    ap.add_argument("--merge-json", metavar="PATH",
                    help="add the result (key 'tshark', and its target) to an existing bench JSON (bench/run uses this)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the target is missed (not when not measured)")
    ap.add_argument("--keep", action="store_true", help="keep the captures and the key file (the path goes to stderr)")
    ap.add_argument("--lua-only", action="store_true",
                    help="only the Lua dissector section (psp.lua pure Lua / pelua / headers only vs the C plugin): "
                         "no ESP captures, no target")
    ap.add_argument("--part", action="store_true", help=argparse.SUPPRESS)  # bench/run: after bench.py's report
    args = ap.parse_args(argv)
    n = args.packets or (2_000 if args.quick else 100_000)
    repeats = args.repeats or (1 if args.quick else 5)

    log(f"tshark bench: {n:,} packets, {repeats} runs each ...")
    t = time.perf_counter()
    res = run(n, repeats, args.tmpdir, args.keep, args.lua_only)
    res["seconds"] = time.perf_counter() - t
    res["command"] = "bench/tshark_bench.py " + " ".join(sys.argv[1:] if argv is None else argv)
    res["target"] = target_row(res)
    sys.stdout.write(markdown(res))
    if not (args.part or args.merge_json or args.lua_only):  # else bench.py's report has its own targets table above
        sys.stdout.write(f"\n## Targets\n\n| target | measured | result |\n|---|---:|---|\n"
                         f"| {res['target']['name']} | {res['target']['measured']} | {res['target']['result']} |\n")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    if args.merge_json:
        p = Path(args.merge_json)
        doc = json.loads(p.read_text()) if p.exists() else {}
        doc["tshark"] = res
        doc.setdefault("targets", []).append(res["target"])
        doc.setdefault("section_seconds", {})["tshark"] = round(res["seconds"], 1)
        p.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"tshark bench: done in {res['seconds']:.0f} s")
    return 1 if args.strict and res["target"]["pass"] is False else 0


if __name__ == "__main__":
    sys.exit(main())
