"""Shared by the pure-Lua tests (test_lua_pure*.py, tests/shared/test_keyfile_grammar.py): the core as the
reference (CoreKeys), captures, dissectors/lua/src/pecrypto.lua under a standalone ``lua5.4`` (Harness: AEADs
and the AES block served by Python through a pipe) and a tshark without C plugins and pelua (Tshark: the
system's, or a Debian chroot's with PE_TSHARK_CHROOT=<dir>).
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

import wireshark as ws
from conftest import REPO_ROOT

pypsp = pytest.importorskip("pypsp")
pyeesp = pytest.importorskip("pyeesp")
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, ChaCha20Poly1305  # noqa: E402
from cryptography.exceptions import InvalidTag  # noqa: E402

from pecore._native import ffi, lib  # noqa: E402
from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter, read_capture  # noqa: E402
from pecore.errors import CATEGORY_BY_CODE  # noqa: E402


LUA_DIR = REPO_ROOT / "dissectors" / "lua"
SOURCE = LUA_DIR / "src" / "pecrypto.lua"
PSP_LUA = LUA_DIR / "psp.lua"
EESP_LUA = LUA_DIR / "eesp.lua"
VECTORS = REPO_ROOT / "vectors"
PCAPS = VECTORS / "pcap"
LUA54 = shutil.which("lua5.4")
needs_lua54 = pytest.mark.skipif(LUA54 is None, reason="lua5.4 is not installed (apt-get install lua5.4)")


def status_name(st: int) -> str:
    return ffi.string(lib.pe_status_name(st)).decode()


# ---------------------------------------------------------------------------------------------- the core, as pelua


class CoreKeys:
    """pelua.load_keyfile and keys:psp_open / keys:eesp_open (dissectors/lua/pelua.c), through pecore's cffi."""

    def __init__(self, text: bytes, path: str = "keys") -> None:
        self.error: Optional[str] = None
        kf = ffi.new("pe_keyfile *")
        err = ffi.new("pe_keyfile_error *")
        st = lib.pe_keyfile_parse(text, len(text), kf, err)
        if st != lib.PE_OK:
            msg = ffi.string(err.message).decode()
            self.error = f"{path}, line {err.line}: {msg}" if err.line else f"{path}: {msg}"
            return
        keep: list = []
        try:
            cfg = ffi.new("pe_psp_rx_config *")
            lib.pe_psp_rx_config_init(cfg)
            if kf.n_psp_master:
                if kf.psp_master.has_key0:
                    cfg.master_key0 = self._pin(keep, bytes(kf.psp_master.key0))
                if kf.psp_master.has_key1:
                    cfg.master_key1 = self._pin(keep, bytes(kf.psp_master.key1))
            rx = ffi.new("pe_psp_rx **")
            assert lib.pe_psp_rx_new(cfg, rx) == lib.PE_OK
            self.psp = ffi.gc(rx[0], lib.pe_psp_rx_free)
            for i in range(kf.n_psp_keys):
                k = kf.psp_keys[i]
                assert lib.pe_psp_rx_add_key(self.psp, k.spi, k.version, k.key, k.key_len) == lib.PE_OK
            rc = ffi.new("pe_eesp_rx_config *")
            lib.pe_eesp_rx_config_init(rc)
            if kf.n_eesp_sas:
                rc.ip_protocol = kf.eesp_sas[0].ip_protocol
            erx = ffi.new("pe_eesp_rx **")
            assert lib.pe_eesp_rx_new(rc, erx) == lib.PE_OK
            self.eesp = ffi.gc(erx[0], lib.pe_eesp_rx_free)
            for i in range(kf.n_eesp_sas):
                e = kf.eesp_sas[i]
                c = ffi.new("pe_eesp_sa_config *")
                lib.pe_eesp_sa_config_init(c)  # as pe_keyfile_eesp_sa_config(e, for_receiver=1, c)
                c.spi, c.encr, c.key_bits, c.sskdf = e.spi, e.encr, e.key_bits, e.sskdf
                if e.sskdf == 0:
                    c.key, c.key_len = self._pin(keep, bytes(e.key[0 : e.key_len])), e.key_len
                else:
                    c.root_key, c.root_key_len = self._pin(keep, bytes(e.root_key[0 : e.root_key_len])), e.root_key_len
                c.mode, c.format, c.seq_present, c.aad = e.mode, e.format, e.seq_present, e.aad
                c.anti_replay, c.replay_window = e.anti_replay, e.replay_window
                c.max_sub_sa_id, c.max_crypt_offset, c.crypt_offset = e.max_sub_sa_id, e.max_crypt_offset, -1
                c.align_options, c.strict = e.align_options, e.strict
                c.ip_protocol, c.udp_encap = e.ip_protocol, e.udp_encap
                c.dst_family = e.dst_family if e.has_dst else 0
                c.dst = bytes(e.dst)
                assert lib.pe_eesp_rx_add_sa(self.eesp, c) == lib.PE_OK
        finally:
            lib.pe_keyfile_free(kf)

    @staticmethod
    def _pin(keep: list, data: bytes):
        buf = ffi.new("uint8_t[]", data)
        keep.append(buf)
        return buf

    @classmethod
    def from_refcfg(cls, text: bytes) -> "CoreKeys":
        cfg = ffi.new("pe_psp_refcfg *")
        err = ffi.new("pe_keyfile_error *")
        st = lib.pe_psp_refcfg_parse(text, len(text), cfg, err)
        assert st == lib.PE_OK, ffi.string(err.message)
        line = f"psp-master key0={bytes(cfg.key0).hex()} key1={bytes(cfg.key1).hex()}\n"
        return cls(line.encode())

    def psp_open(self, payload: bytes) -> Tuple[str, Optional[bytes], dict]:
        out = ffi.new("uint8_t[]", max(len(payload), 1))
        out_len = ffi.new("size_t *")
        h = ffi.new("pe_psp_hdr *")
        st = lib.pe_psp_open(self.psp, payload, len(payload), out, len(payload), out_len, h)
        info = dict(next_header=h.next_header, hdr_ext_len=h.hdr_ext_len, crypt_offset=h.crypt_offset,
                    version=h.version, virt=bool(h.virt), spi=h.spi, iv_hex=f"{h.iv:016x}",
                    icv_valid=st == lib.PE_OK, status=status_name(st), category=CATEGORY_BY_CODE[status_name(st)])
        inner = None
        if st == lib.PE_OK:
            inner = bytes(ffi.buffer(out, out_len[0]))
            info["ext"] = bytes(ffi.buffer(h.ext, h.ext_len)).hex() if h.ext != ffi.NULL else ""
        return status_name(st), inner, info

    def eesp_open(self, e: bytes, ip_version: int, dst: Optional[bytes]) -> Tuple[str, Optional[bytes], dict]:
        out = ffi.new("uint8_t[]", max(len(e), 1))
        out_len = ffi.new("size_t *")
        info = ffi.new("pe_eesp_info *")
        st = lib.pe_eesp_open(self.eesp, e, len(e), ip_version, dst if dst else ffi.NULL, lib.PE_EESP_OPEN_NO_REPLAY,
                              out, len(e), out_len, info)
        d = dict(spi=info.hdr.spi, session_id=info.hdr.session_id, opt_len=info.hdr.opt_len,
                 seq_hex=f"{info.seq:016x}", seq_present=bool(info.seq_present), iv_len=info.iv_len,
                 icv_len=info.icv_len, payload_offset=info.payload_offset, full_format=bool(info.full_format),
                 format=("full" if info.full_format else "optimized") if info.payload_offset else "",
                 next_header=info.next_header, pad_len=info.pad_len, sa_found=bool(info.sa_found),
                 icv_valid=bool(info.icv_valid), status=status_name(st), category=CATEGORY_BY_CODE[status_name(st)])
        if info.sa_found:
            d["suite"] = ffi.string(lib.pe_ipsec_suite_name(ffi.addressof(info, "suite"))).decode()
            d["key_bits"] = info.suite.key_len * 8
            d["mode"] = "tunnel" if info.mode == 1 else "transport"
        inner = bytes(ffi.buffer(out, out_len[0])) if st == lib.PE_OK else None
        return status_name(st), inner, d


# ---------------------------------------------------------------------------------------------- captures


def frames(path: Path) -> List[bytes]:
    return [rec.ip_packet() or b"" for rec in read_capture(path)]


def ip_info(pkt: bytes):
    info = ffi.new("pe_ip_info *")
    if lib.pe_ip_parse(pkt, len(pkt), info) != lib.PE_OK:
        return None
    return info


def psp_payload(pkt: bytes, port: int = 1000) -> Optional[bytes]:
    """The UDP payload a UDP-port dissector would get, for datagrams to `port`."""
    ip = ip_info(pkt)
    if ip is None or ip.protocol != 17 or ip.is_fragment or ip.len - ip.l4_offset < 8:
        return None
    udp = pkt[ip.l4_offset : ip.len]
    if struct.unpack("!H", udp[2:4])[0] != port:
        return None
    ulen = struct.unpack("!H", udp[4:6])[0]
    return udp[8:ulen] if 8 <= ulen <= len(udp) else udp[8:]


def eesp_octets(pkt: bytes, ip_protocol: int = 49) -> Optional[Tuple[bytes, int, bytes]]:
    """(EESP octets, outer IP version, outer destination) for EESP on `ip_protocol` or UDP 4500 (MSB set)."""
    ip = ip_info(pkt)
    if ip is None or ip.is_fragment:
        return None
    dst = pkt[16:20] if ip.version == 4 else pkt[24:40]
    body = pkt[ip.l4_offset : ip.len]
    if ip.protocol == ip_protocol:
        return body, ip.version, dst
    if ip.protocol == 17 and len(body) >= 9 and struct.unpack("!H", body[2:4])[0] == 4500:
        ulen = struct.unpack("!H", body[4:6])[0]
        payload = body[8:ulen] if 8 <= ulen <= len(body) else body[8:]
        if payload and payload[0] & 0x80 and not (len(payload) >= 4 and payload[:4] == bytes(4)):
            return payload, ip.version, dst
    return None


@functools.lru_cache(maxsize=None)
def _sample_traffic():
    import importlib.util

    spec = importlib.util.spec_from_file_location("sample_traffic", REPO_ROOT / "demo" / "sample_traffic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def clear_packets(n: int = 8, seed: int = 0) -> List[bytes]:
    """Small IPv4/IPv6, TCP/UDP packets of assorted sizes with distinct destination ports."""
    st = _sample_traffic()
    v6a = bytes.fromhex("20010db8000000000000000000000001")
    out = []
    for i in range(n):
        proto = (17, 6)[i % 2]
        payload = bytes((i * 7 + j + seed) & 0xFF for j in range((0, 3, 40, 100, 1200)[(i + seed) % 5]))
        if (i // 2) % 2 == 0:
            out.append(st.ipv4("10.1.0.1", f"10.1.{seed}.{i + 2}", proto, 40000 + i, 5000 + 10 * seed + i, payload, i))
        else:
            dst = v6a[:-1] + bytes([i + 2 + seed])
            out.append(st.ipv6(v6a, dst, proto, 40000 + i, 5000 + 10 * seed + i, payload, i))
    return out


def write_frames(path: Path, ip_packets: Sequence[bytes], ts0: int = 1_700_000_000) -> Path:
    st = _sample_traffic()
    with CaptureWriter(path, LINKTYPE_ETHERNET, "pcap") as w:
        for i, pkt in enumerate(ip_packets):
            etype = b"\x08\x00" if pkt[0] >> 4 == 4 else b"\x86\xdd"
            w.write(st.MAC_B + st.MAC_A + etype + pkt, (ts0 + i, 1000 * i))
    path.chmod(0o644)
    return path


def vector_pcaps(prefix: str) -> List[Tuple[Path, Path]]:
    return [(p, p.with_suffix(".keys")) for p in sorted(PCAPS.glob(f"{prefix}*.pcap"))]


def keyfile_ip_protocol(text: str) -> int:
    m = re.search(r"^eesp-sa .*\bip-protocol=(\d+)", text, re.M)
    return int(m.group(1)) if m else 49


# ---------------------------------------------------------------------------------------------- lua5.4 harness

# Runs pecrypto from its source file and answers one command per line.  The backend it hands pecrypto asks the
# Python side (over stdout/stdin) for every AES block and AEAD open, so no AES is written in Lua.
HARNESS = r"""
local pecrypto = dofile(arg[1])
local hex, unhex = pecrypto.tohex, pecrypto.fromhex
local function h2s(s) if s == "-" then return "" end return unhex(s) end
local function s2h(s) if #s == 0 then return "-" end return hex(s) end
local function ask(line)
    io.stdout:write(line, "\n")
    io.stdout:flush()
    return assert(io.stdin:read("l"), "the Python side went away")
end
local backend = {}
function backend.block(key)
    local kh = hex(key)
    return function(b) return unhex(ask("BLOCK " .. kh .. " " .. hex(b))) end
end
function backend.aead(alg, key, tag_len)
    local kh = hex(key)
    return function(nonce, aad, ct, tag)
        local words = { "AEAD", alg, kh, tostring(tag_len), s2h(nonce), s2h(aad), s2h(ct), s2h(tag) }
        local a = ask(table.concat(words, " "))
        if a == "FAIL" then return nil end
        return h2s(assert(a:match("^OK (%S+)$"), a))
    end
end
local function json(v)
    local t = type(v)
    if t == "nil" then return "null" end
    if t == "boolean" then return tostring(v) end
    if t == "number" then return math.type(v) == "integer" and string.format("%d", v) or tostring(v) end
    if t == "string" then
        return '"' .. v:gsub('[%c"\\\128-\255]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
    end
    local parts = {}
    if #v > 0 then
        for _, x in ipairs(v) do parts[#parts + 1] = json(x) end
        return "[" .. table.concat(parts, ",") .. "]"
    end
    for k, x in pairs(v) do parts[#parts + 1] = json(tostring(k)) .. ":" .. json(x) end
    return "{" .. table.concat(parts, ",") .. "}"
end
local MODES, FORMATS = { transport = 0, tunnel = 1 }, { auto = 0, full = 1, optimized = 2 }
local AADS = { draft = 0, ["linux-xfrm"] = 1 }
local function keyfile_view(kf)
    local v = { lines = #kf.lines, psp_keys = {}, eesp_sas = {}, psp_sas = 0 }
    for _ in pairs(kf.psp_sa_line_by_spi) do v.psp_sas = v.psp_sas + 1 end
    if kf.psp_master then
        v.master = { line = kf.psp_master.line, key0 = kf.psp_master.key0 and hex(kf.psp_master.key0) or "",
            key1 = kf.psp_master.key1 and hex(kf.psp_master.key1) or "" }
    end
    for _, k in ipairs(kf.psp_keys) do
        v.psp_keys[#v.psp_keys + 1] = { line = k.line, spi = k.spi, version = k.version or -1, key = hex(k.key) }
    end
    for _, e in ipairs(kf.eesp_sas) do
        v.eesp_sas[#v.eesp_sas + 1] = { line = e.line, spi = e.spi, encr = e.suite.encr, key_bits = e.key_bits,
            sskdf = e.sskdf, key = e.key and hex(e.key) or "", root_key = e.root_key and hex(e.root_key) or "",
            mode = MODES[e.mode], format = FORMATS[e.format], seq_present = e.seq_present and 1 or 0,
            aad = AADS[e.aad], anti_replay = e.anti_replay and 1 or 0, replay_window = e.replay_window,
            max_sub_sa_id = e.max_sub_sa_id, max_crypt_offset = e.max_crypt_offset, crypt_offset = e.crypt_offset,
            align = e.align, strict = e.strict and 1 or 0, ip_protocol = e.ip_protocol, udp_encap = e.udp_encap,
            src_family = e.src_family, src = hex(e.src), dst_family = e.dst_family, dst = hex(e.dst),
            sub_sas = e.sub_sas }
    end
    return v
end
local function opened(st, inner, info)
    local r = { status = st, inner = inner and s2h(inner) or nil }
    for k, x in pairs(info) do r["info_" .. k] = x end
    if info.ext then r.info_ext = hex(info.ext) end
    r.info_iv, r.info_seq = nil, nil
    return r
end
local keys
local commands = {
    sha256 = function(m) return hex(pecrypto.sha256(h2s(m))) end,
    sha384 = function(m) return hex(pecrypto.sha384(h2s(m))) end,
    sha512 = function(m) return hex(pecrypto.sha512(h2s(m))) end,
    hmac = function(alg, k, m) return hex(pecrypto.hmac(alg, h2s(k), h2s(m))) end,
    hkdf = function(alg, prk, info, n) return hex(pecrypto.hkdf_expand(alg, h2s(prk), h2s(info), tonumber(n))) end,
    sskdf = function(which, root, sid, n)
        return hex(pecrypto.derive_sub_sa_key(tonumber(which), h2s(root), tonumber(sid), tonumber(n)))
    end,
    cmac = function(k, m) return hex(pecrypto.cmac(backend.block(h2s(k)), h2s(m))) end,
    pspkdf = function(mk, spi, v, label)
        return hex(pecrypto.psp_derive_key(backend.block(h2s(mk)), tonumber(spi), tonumber(v),
            label and tonumber(label, 16) or nil))
    end,
    keyfile = function(text)
        local kf, st, line, msg = pecrypto.parse_keyfile(h2s(text))
        if not kf then return { status = st, line = line, message = msg } end
        return { status = "ok", view = keyfile_view(kf) }
    end,
    refcfg = function(text)
        local cfg, st, line, msg = pecrypto.parse_refcfg(h2s(text))
        if not cfg then return { status = st, line = line, message = msg } end
        local r = { status = "ok", key0 = hex(cfg.key0), key1 = hex(cfg.key1), has_sa = cfg.has_sa or false }
        local names = { "spi", "tunnel", "version", "crypt_offset", "crypt_offset_ipv4", "crypt_offset_ipv6", "vc" }
        for _, k in ipairs(names) do
            r[k] = cfg[k]
        end
        return r
    end,
    load = function(path)
        local k, err, st = pecrypto.load_keyfile(path, backend)
        keys = k
        return { ok = k ~= nil, error = err, status = st, reference_config = k and k:summary().reference_config }
    end,
    psp = function(p) return opened(keys:psp_open(h2s(p))) end,
    eesp = function(e, ipv, dst)
        return opened(keys:eesp_open(h2s(e), tonumber(ipv), dst ~= "none" and h2s(dst) or nil))
    end,
    statuses = function() return pecrypto.STATUS_LIST end,
    categories = function() return pecrypto.CATEGORY_LIST end,
    suites = function() return pecrypto.SUITE_LIST end,
    psp_versions = function() return pecrypto.PSP_VERSION_LIST end,
    eesp_sa_fields = function() return pecrypto.EESP_SA_FIELDS end,
    category = function(name) return pecrypto.status_category(name) end,
    detect = function(text) return pecrypto.looks_like_refcfg(h2s(text)) end,
    state = function()
        local subs = 0
        for _, list in pairs(keys.eesp_by_spi) do
            for _, sa in ipairs(list) do
                for _ in pairs(sa.subs) do subs = subs + 1 end
            end
        end
        return { psp_cache = keys.psp_cache_count, eesp_subs = subs }
    end,
}
for line in io.stdin:lines() do
    local words = {}
    for w in line:gmatch("%S+") do words[#words + 1] = w end
    local f = commands[table.remove(words, 1)]
    local ok, res = pcall(f, table.unpack(words))
    io.stdout:write("RESULT ", json(ok and { value = res } or { lua_error = tostring(res) }), "\n")
    io.stdout:flush()
end
"""


def _gcm_open(key: bytes, nonce: bytes, aad: bytes, ct: bytes, tag: bytes) -> Optional[bytes]:
    d = Cipher(algorithms.AES(key), modes.GCM(nonce, tag, min_tag_length=len(tag))).decryptor()
    d.authenticate_additional_data(aad)
    try:
        return d.update(ct) + d.finalize()
    except InvalidTag:
        return None


def aead_open(alg: str, key: bytes, tag_len: int, nonce: bytes, aad: bytes, ct: bytes, tag: bytes) -> Optional[bytes]:
    assert len(tag) == tag_len
    if alg == "aes-gcm":
        return _gcm_open(key, nonce, aad, ct, tag)
    try:
        if alg == "aes-ccm":
            return AESCCM(key, tag_length=tag_len).decrypt(nonce, ct + tag, aad)
        assert alg == "chacha20-poly1305"
        return ChaCha20Poly1305(key).decrypt(nonce, ct + tag, aad)
    except InvalidTag:
        return None


def aes_block(key: bytes, block: bytes) -> bytes:
    e = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return e.update(block) + e.finalize()


def hx(b: bytes) -> str:
    return b.hex() if b else "-"


def unhx(s: str) -> bytes:
    return b"" if s == "-" else bytes.fromhex(s)


class Harness:
    """pecrypto under lua5.4; AES blocks and AEAD opens are served here, by `cryptography`."""

    def __init__(self, workdir: Path) -> None:
        script = workdir / "harness.lua"
        script.write_text(HARNESS)
        self.proc = subprocess.Popen([LUA54, str(script), str(SOURCE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.blocks = self.aeads = 0

    def call(self, *words: object) -> object:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"lua5.4 exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "RESULT":
                res = json.loads(rest)
                assert "lua_error" not in res, res["lua_error"]
                return res["value"]
            if kind == "BLOCK":
                key, block = rest.split()
                self.blocks += 1
                answer = aes_block(bytes.fromhex(key), bytes.fromhex(block)).hex()
            elif kind == "AEAD":
                alg, key, tag_len, nonce, aad, ct, tag = rest.split()
                self.aeads += 1
                pt = aead_open(alg, bytes.fromhex(key), int(tag_len), unhx(nonce), unhx(aad), unhx(ct), unhx(tag))
                answer = "FAIL" if pt is None else "OK " + hx(pt)
            else:
                raise AssertionError(f"unexpected line from lua5.4: {line!r}")
            self.proc.stdin.write(answer + "\n")
            self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    d = ws.shared_dir("pe-lua-pure-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def lua(workdir: Path) -> Iterator[Harness]:
    if LUA54 is None:
        pytest.skip("lua5.4 is not installed (apt-get install lua5.4)")
    h = Harness(workdir)
    yield h
    h.close()


MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
K = lambda n, start=0: bytes((start + i) & 0xFF for i in range(n))  # noqa: E731
PROBE = ('io.stderr:write("pe-probe ", _VERSION, " gcrypt=", tostring(GcryptCipher ~= nil), " pelua=", '
         'tostring((pcall(require, "pelua"))), "\\n")\n')
# Each script gets its own environment over _G: what 4.4 offers (Lua 5.4 without GcryptCipher) is set up in _G.
HIDE_GCRYPT = "_G.GcryptCipher = nil\n"
EMPTY_PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


class Tshark:
    """tshark run as an unprivileged user without C plugins and without pelua (no Lua C module can load).

    The system's (tests/wireshark.py), or with PE_TSHARK_CHROOT the one of a Debian chroot; files it reads are
    staged into a directory it can see either way.
    """

    def __init__(self, chroot: Optional[str], pelua_dir: Optional[Path] = None) -> None:
        self.chroot = chroot
        self.pelua_dir = pelua_dir
        if chroot:
            self.inside = Path(tempfile.mkdtemp(prefix="pe-lua-pure-", dir=Path(chroot) / "tmp"))
            self.inside.chmod(0o777)
            self.stage_dir = self.inside
        else:
            self.stage_dir = ws.shared_dir("pe-lua-pure-ts-")
        (self.stage_dir / "empty").mkdir()
        (self.stage_dir / "empty" / "epan").mkdir()
        (self.stage_dir / "home").mkdir()
        for d in ("empty", "home", "empty/epan"):
            (self.stage_dir / d).chmod(0o777)
        self._staged: Dict[Tuple[str, str], str] = {}
        self.lua_version, self.gcrypt = self._probe()

    def close(self) -> None:
        shutil.rmtree(self.stage_dir, ignore_errors=True)

    def seen(self, host_path: Path) -> str:
        """`host_path` as tshark opens it (inside the chroot: below its /tmp)."""
        if self.chroot:
            return "/" + str(host_path.relative_to(self.chroot))
        return str(host_path)

    def stage(self, src: Path, name: Optional[str] = None) -> str:
        """A copy of `src` that tshark can read; the path tshark opens."""
        name = name or src.name
        key = (str(src), name)
        if key not in self._staged:
            dst = self.stage_dir / name
            shutil.copyfile(src, dst)
            dst.chmod(0o644)
            self._staged[key] = self.seen(dst)
        return self._staged[key]

    def stage_bytes(self, data: bytes, name: str) -> str:
        dst = self.stage_dir / name
        dst.write_bytes(data)
        dst.chmod(0o644)
        return self.seen(dst)

    def run(self, args: Sequence[str], scripts: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        empty = self.seen(self.stage_dir / "empty")
        home = self.seen(self.stage_dir / "home")
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home, "WIRESHARK_CONFIG_DIR": home,
               "WIRESHARK_PLUGIN_DIR": empty, "TZ": "UTC", "LC_ALL": "C.UTF-8",
               # no Lua C module at all: on 5.4 a stray pelua build must not be picked up either
               "LUA_CPATH": f"{empty}/?.so", "LUA_CPATH_5_4": f"{empty}/?.so", "LUA_CPATH_5_3": f"{empty}/?.so",
               "LUA_CPATH_5_2": f"{self.pelua_dir or empty}/?.so"}
        cmd = [a for s in scripts for a in ("-X", f"lua_script:{s}")] + list(args)
        if self.chroot:
            chroot = shutil.which("chroot", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/chroot"
            full = [chroot, "--userspec=nobody:nogroup", self.chroot, "env", "-i",
                    *(f"{k}={v}" for k, v in env.items()), "tshark", *cmd]
        else:
            runuser = shutil.which("runuser", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/runuser"
            as_user = [runuser, "-u", "nobody", "--"] if os.geteuid() == 0 else []
            full = [*as_user, "env", "-i", *(f"{k}={v}" for k, v in env.items()), ws.TSHARK, *cmd]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=900, env={})
        if check and proc.returncode != 0:
            raise AssertionError(f"tshark failed ({proc.returncode}): {' '.join(full)}\n{proc.stderr[-3000:]}")
        return proc

    def _probe(self) -> Tuple[str, bool]:
        probe = self.stage_bytes(PROBE.encode(), "probe.lua")
        empty = self.stage_bytes(EMPTY_PCAP, "empty.pcap")
        proc = self.run(["-r", empty], [probe], check=False)
        m = re.search(r"pe-probe (Lua \S+) gcrypt=(\w+) pelua=(\w+)", proc.stderr)
        if not m:
            raise AssertionError(f"tshark did not run the probe script: {proc.stderr[-2000:]}")
        self.pelua = m.group(3) == "true"
        return m.group(1), m.group(2) == "true"


@pytest.fixture(scope="module")
def tshark54() -> Iterator[Tshark]:
    """A tshark whose Lua is 5.3+ (Wireshark 4.4 or 4.6), without pelua."""
    chroot = os.environ.get("PE_TSHARK_CHROOT")
    if chroot and os.geteuid() != 0:
        pytest.skip("PE_TSHARK_CHROOT needs root (chroot)")
    if not chroot and not Path(ws.TSHARK).exists():
        pytest.skip("tshark is not installed")
    t = Tshark(chroot)
    try:
        if t.lua_version == "Lua 5.2":
            pytest.skip("this tshark's Lua is 5.2 (Wireshark 4.0: tests/wireshark/test_lua_dissectors.py); "
                        "PE_TSHARK_CHROOT=<Debian trixie or sid chroot> runs a newer one from a chroot")
        # Installed for this Lua (scripts/wireshark-chroot.sh does), pelua would decrypt instead.
        assert not t.pelua, "pelua loads despite the empty LUA_CPATH: the pure-Lua path would go untested"
        yield t
    finally:
        t.close()


@pytest.fixture(scope="module")
def tshark46(tshark54: Tshark) -> Tshark:
    """A tshark whose Lua has GcryptCipher (Wireshark 4.6+), without pelua: the scripts decrypt in Lua."""
    if not tshark54.gcrypt:
        pytest.skip(f"this tshark's Lua ({tshark54.lua_version}) has no GcryptCipher: pure-Lua decryption needs "
                    "Wireshark 4.6 or later (PE_TSHARK_CHROOT=<Debian sid chroot> runs one from a chroot)")
    return tshark54


