"""Security properties (docs/security.md), each as a test.

- Nonce management: IVs / sequence numbers never repeat for a key through the
  public API -- across threads, batch calls, explicit IVs from the caller
  (forward only), failed encrypts and the end of the counter (refused, never
  wrapped).
- Tag comparison: every ICV is verified by OpenSSL's AEAD (constant time); a
  source scan finds no memcmp/strcmp on tags and checks the one verification
  path.
- No key material in error messages, reprs, CLI output or diagnose reports.

Key wiping on the C side is core/tests/test_wipe.c (ctest); the whole suite
under valgrind is scripts/valgrind.sh.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import random
import re
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pyeesp
import pypsp
from pecore.capture import LINKTYPE_RAW, CaptureWriter
from pecore.errors import CoreError
from pecore.protocol import checksum
from pecore.keys import KeyFileError, load_key_file, load_psp_ref_config, parse_key_file

ROOT = Path(__file__).resolve().parents[2]
_rng = random.Random(0x5EC)
KEY16 = _rng.randbytes(16)
KEY32 = _rng.randbytes(32)
MK0 = _rng.randbytes(32)
MK1 = _rng.randbytes(32)
WRONG_MK0 = _rng.randbytes(32)
EKEY = _rng.randbytes(36)  # AES-256 key || 4-octet salt
EKEY20 = _rng.randbytes(20)  # AES-128 key || salt
ROOT32 = _rng.randbytes(32)
ROOT64 = _rng.randbytes(64)
WRONG_ROOT = _rng.randbytes(32)
SECRETS = [KEY16, KEY32, MK0, MK1, WRONG_MK0, EKEY, EKEY20, ROOT32, ROOT64, WRONG_ROOT]


def udp4(n: int = 40, sport: int = 1111, dport: int = 2222) -> bytes:
    payload = bytes((i * 7 + n) & 0xFF for i in range(n))
    seg = struct.pack("!HHHH", sport, dport, 8 + n, 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 0, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:] + seg


PKT = udp4()


# ============================================================================ nonces


def psp_iv(out: bytes) -> int:
    """The IV of a transport-mode PSP packet in IPv4 (20-octet header, UDP, PSP)."""
    return pypsp.Header.parse(out[28:]).iv


def eesp_nonce_parts(out: bytes, seq: bool = True, explicit_iv: bool = True):
    """(Sub SA, sequence number or None, explicit IV or None) of a tunnel-mode EESP packet in IPv4."""
    e = out[20:]
    sid, opt_len = int.from_bytes(e[2:4], "big"), e[1]
    off = 8 + opt_len
    sn = int.from_bytes(e[off : off + 8], "big") if seq else None
    off += 8 if seq else 0
    iv = e[off : off + 8] if explicit_iv else None
    return sid, sn, iv


def test_psp_one_encryptor_shared_by_threads_never_repeats_an_iv():
    enc = pypsp.Encryptor(spi=0x1234, key=KEY16, first_iv=1000)
    outs: list = []
    lock = threading.Lock()
    stop = threading.Event()

    def sender(seed: int) -> None:
        r = random.Random(seed)
        mine = []
        for _ in range(120):
            if r.random() < 0.5:
                mine.append(enc.encrypt(PKT))
            else:
                mine += enc.encrypt_batch([PKT] * r.randint(1, 12))
        with lock:
            outs.extend(mine)

    def jumper() -> None:  # moves the counter forward now and then; a stale (lower) value must be refused
        r = random.Random(99)
        while not stop.is_set():
            target = enc.next_iv() + r.randint(0, 50) - 25
            try:
                enc.set_next_iv(target)
            except pypsp.ConfigurationError:
                pass

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(8)]
    j = threading.Thread(target=jumper)
    j.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    j.join()
    ivs = [psp_iv(o) for o in outs]
    assert len(ivs) > 1000
    assert len(set(ivs)) == len(ivs), "an IV was used twice under one key"
    assert min(ivs) >= 1000 and enc.next_iv() > max(ivs)
    dec = pypsp.Decryptor(keys={0x1234: KEY16})
    assert all(dec.decrypt(o).packet == PKT for o in outs[:: max(1, len(outs) // 50)])


EESP_CONFIGS = {
    "gcm-root-key": dict(suite="aes-gcm-16", root_key=ROOT32, sskdf="hkdf-sha256"),
    "gcm-iiv": dict(suite="aes-gcm-16-iiv", key=EKEY20),
    "chacha-no-seq": dict(suite="chacha20-poly1305", key=EKEY, seq=False),
}


@pytest.mark.parametrize("name", EESP_CONFIGS)
def test_eesp_one_sa_shared_by_threads_never_repeats_a_nonce(name):
    cfg = EESP_CONFIGS[name]
    sa = pyeesp.SA(0x1000, **cfg)
    seq = cfg.get("seq", True)
    explicit = not cfg["suite"].endswith("-iiv")
    subs = 4 if "root_key" in cfg else 1
    outs: list = []
    lock = threading.Lock()

    def sender(seed: int) -> None:
        r = random.Random(seed)
        mine = []
        for _ in range(80):
            sid = r.randrange(subs)
            if r.random() < 0.5:
                mine.append(sa.encrypt(PKT, sid))
            else:
                mine += sa.encrypt_batch([PKT] * r.randint(1, 8), sid)
            if r.random() < 0.1:  # jump forward, or try a stale value (refused)
                try:
                    sa.set_next_seq((sa.next_seq(sid) or 1) + r.randint(-5, 20), sid)
                except pyeesp.ConfigurationError:
                    pass
        with lock:
            outs.extend(mine)

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_sub: dict = {}
    for o in outs:
        sid, sn, iv = eesp_nonce_parts(o, seq, explicit)
        # The nonce is salt || (explicit IV, or the sequence number for implicit-IV suites): per Sub SA key.
        per_sub.setdefault(sid, []).append(iv if explicit else sn)
        if seq and explicit:
            assert iv == sn.to_bytes(8, "big")  # the explicit IV is the sequence number
    assert sum(len(v) for v in per_sub.values()) == len(outs) > 500
    for sid, nonces in per_sub.items():
        assert len(set(nonces)) == len(nonces), f"Sub SA {sid}: a nonce was used twice"
    rx = pyeesp.Receiver([pyeesp.SA(0x1000, **{**cfg, "anti_replay": False})])
    assert all(rx.decrypt(o).packet == PKT for o in outs[:: max(1, len(outs) // 40)])


def test_psp_counter_model_forward_only():
    """Random encrypts, batches and set_next_iv calls against a model: the IV on the wire is
    always the model's next one, and a value below it is refused and changes nothing."""
    r = random.Random(3)
    enc = pypsp.Encryptor(spi=7, key=KEY32, version=1)
    nxt, seen = 1, set()
    for _ in range(400):
        op = r.random()
        if op < 0.4:
            iv = psp_iv(enc.encrypt(PKT))
            assert iv == nxt and iv not in seen
            seen.add(iv)
            nxt += 1
        elif op < 0.6:
            outs = enc.encrypt_batch([PKT] * r.randint(0, 5))
            for o in outs:
                assert psp_iv(o) == nxt and nxt not in seen
                seen.add(nxt)
                nxt += 1
        else:
            target = nxt + r.randint(-10, 40)
            if target < nxt:
                with pytest.raises(pypsp.ConfigurationError):
                    enc.set_next_iv(target)
            else:
                enc.set_next_iv(target)
                nxt = target
        assert enc.next_iv() == nxt


def test_eesp_counter_model_forward_only():
    r = random.Random(4)
    sa = pyeesp.SA(0x2000, "aes-gcm-16", root_key=ROOT32, sskdf="hkdf-sha256")
    nxt = {0: 1, 1: 1, 2: 1}
    seen = {k: set() for k in nxt}
    for _ in range(400):
        sid = r.randrange(3)
        op = r.random()
        if op < 0.5:
            got = eesp_nonce_parts(sa.encrypt(PKT, sid))
            assert got[:2] == (sid, nxt[sid]) and nxt[sid] not in seen[sid]
            seen[sid].add(nxt[sid])
            nxt[sid] += 1
        else:
            target = nxt[sid] + r.randint(-10, 40)
            if target < 1:
                with pytest.raises(pyeesp.ConfigurationError):
                    sa.set_next_seq(target, sid)
            elif target < nxt[sid]:
                with pytest.raises(pyeesp.ConfigurationError, match="forward"):
                    sa.set_next_seq(target, sid)
            else:
                sa.set_next_seq(target, sid)
                nxt[sid] = target
        assert sa.next_seq(sid) == nxt[sid]


def test_scapy_psp_sa_refuses_an_explicit_iv_that_would_repeat():
    from scapy.layers.inet import IP

    from pypsp.scapy import PSP, PSPSecurityAssociation

    sa = PSPSecurityAssociation(0x9A345678, master_keys=(MK0, MK1), iv=10)
    pkt = IP(PKT)
    assert sa.encrypt(pkt)[PSP].iv == (10).to_bytes(8, "big")
    assert sa.encrypt(pkt, iv=20)[PSP].iv == (20).to_bytes(8, "big")
    for stale in (20, 19, 10, 0, (15).to_bytes(8, "big")):
        with pytest.raises(pypsp.ConfigurationError):
            sa.encrypt(pkt, iv=stale)
    assert sa.next_iv() == 21
    assert sa.encrypt(pkt, iv=(21).to_bytes(8, "big"))[PSP].iv == (21).to_bytes(8, "big")  # the next one itself: fine
    assert sa.encrypt(pkt)[PSP].iv == (22).to_bytes(8, "big")


def test_scapy_eesp_sa_refuses_a_sequence_number_that_would_repeat():
    from scapy.layers.inet import IP

    from pyeesp.scapy import EESP, EESPSecurityAssociation

    sa = EESPSecurityAssociation(0x3000, "aes-gcm-16", crypt_key=EKEY, register_layout=False)
    pkt = IP(PKT)
    seqs = []
    for want in (None, 5, None, 100):
        out = sa.encrypt(pkt, seq_num=want)
        seqs.append(int.from_bytes(bytes(out[EESP])[8 + bytes(out[EESP])[1] :][:8], "big"))
    assert seqs == [1, 5, 6, 100]
    for stale in (100, 99, 6, 1):
        with pytest.raises(pyeesp.ConfigurationError):
            sa.encrypt(pkt, seq_num=stale)
    with pytest.raises(pyeesp.ConfigurationError):
        sa.encrypt(pkt, seq_num=0)
    assert sa.next_seq() == 101


def test_psp_iv_exhaustion_refuses_instead_of_wrapping():
    top = 2**64 - 1
    enc = pypsp.Encryptor(spi=5, key=KEY16, first_iv=top - 1)
    outs = [enc.encrypt(PKT), enc.encrypt(PKT)]
    assert [psp_iv(o) for o in outs] == [top - 1, top]
    for _ in range(2):
        with pytest.raises(pypsp.IvExhaustedError):
            enc.encrypt(PKT)
        with pytest.raises(pypsp.IvExhaustedError):
            enc.encrypt_batch([PKT])
    for target in (0, 1, top):
        with pytest.raises(pypsp.ConfigurationError):
            enc.set_next_iv(target)
    # A batch that runs into the end: the IVs before it are used once, the rest refused.
    enc = pypsp.Encryptor(spi=5, key=KEY16, first_iv=top - 2)
    with pytest.raises(pypsp.IvExhaustedError) as e:
        enc.encrypt_batch([PKT] * 5)
    assert [psp_iv(o) for o in e.value.results] == [top - 2, top - 1, top]
    with pytest.raises(pypsp.IvExhaustedError):
        enc.encrypt(PKT)
    dec = pypsp.Decryptor(keys={5: KEY16})
    assert all(dec.decrypt(o).packet == PKT for o in outs + e.value.results)


def test_eesp_sequence_exhaustion_refuses_instead_of_wrapping():
    top = 2**64 - 1
    sa = pyeesp.SA(0x4000, "aes-gcm-16", root_key=ROOT32, sskdf="hkdf-sha256")
    sa.set_next_seq(top - 1, 3)
    assert [eesp_nonce_parts(sa.encrypt(PKT, 3))[1] for _ in range(2)] == [top - 1, top]
    assert sa.next_seq(3) is None
    with pytest.raises(pyeesp.SequenceExhaustedError):
        sa.encrypt(PKT, 3)
    with pytest.raises(pyeesp.SequenceExhaustedError):
        sa.encrypt_batch([PKT], 3)
    for target in (1, top):
        with pytest.raises(pyeesp.ConfigurationError):
            sa.set_next_seq(target, 3)
    assert eesp_nonce_parts(sa.encrypt(PKT, 4))[1] == 1  # another Sub SA (another key) is unaffected
    # Without a Sequence Number the explicit IV counter ends the same way.
    sa = pyeesp.SA(0x4001, "chacha20-poly1305", key=EKEY, seq=False)
    sa.set_next_seq(top)
    assert eesp_nonce_parts(sa.encrypt(PKT), seq=False)[2] == top.to_bytes(8, "big")
    with pytest.raises(pyeesp.SequenceExhaustedError):
        sa.encrypt(PKT)


def test_psp_failed_encrypts_spend_no_iv_and_never_reuse_one():
    """What the core does: a packet refused before sealing (malformed, a fragment in transport mode,
    too short for the crypt offset, too large) leaves the counter alone; an IV is spent once sealing
    starts (pe_psp_encap: "the IV is spent from here on, whatever happens")."""
    enc = pypsp.Encryptor(spi=9, key=KEY16, crypt_offset=20)  # 80 octets in clear
    frag = bytearray(udp4(100))
    frag[6] = 0x20  # MF
    too_large = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 65535, 0, 0, 64, 17, 0, bytes(4), bytes(4)) + bytes(65515)
    bad = [b"", b"\x45\x00", b"\x60" + bytes(10), bytes(frag), udp4(10), too_large]
    for p in bad:
        before = enc.next_iv()
        with pytest.raises(pypsp.PspError):
            enc.encrypt(p)
        assert enc.next_iv() == before
    assert psp_iv(enc.encrypt(udp4(100))) == 1
    # A batch with a bad packet in it raises on that packet and stops there: the packets before it
    # used their IVs (their results come with the error), it and the packets after it used none.
    seen = [psp_iv(enc.encrypt(udp4(100)))]
    before = enc.next_iv()
    with pytest.raises(pypsp.MalformedPacketError) as e:
        enc.encrypt_batch([udp4(100), udp4(100), b"\x45", udp4(100), udp4(100)])
    assert "packet 2" in str(e.value) and len(e.value.results) == 2
    assert enc.next_iv() == before + 2
    seen += [psp_iv(o) for o in e.value.results]
    seen += [psp_iv(enc.encrypt(udp4(100))) for _ in range(3)]
    assert seen == list(range(seen[0], seen[0] + len(seen)))  # no IV skipped, none repeated


def test_psp_encrypt_batch_stops_at_the_first_failure():
    """4 packets in, the second bad: one result, and the next IV is 2 (not 4, as when the core went on)."""
    enc = pypsp.Encryptor(spi=9, key=KEY16)
    with pytest.raises(pypsp.MalformedPacketError) as e:
        enc.encrypt_batch([udp4(50), b"\x45\x00", udp4(50), udp4(50)])
    assert [psp_iv(o) for o in e.value.results] == [1]
    assert enc.next_iv() == 2
    assert psp_iv(enc.encrypt(udp4(50))) == 2


def test_eesp_next_seq_racing_encrypt_that_opens_sub_sas():
    """SA.next_seq reads the Sub SA table while encrypt() in another thread may grow it (and free the
    old slots): every call on the SA takes its lock.  Under the sanitizer build (scripts/test.sh) an
    unlocked read is a heap-use-after-free that aborts the run; here the values must be exact too."""
    stop = threading.Event()
    current: list = []
    failures: list = []

    def reader() -> None:
        try:
            while not stop.is_set():
                sa = current[-1] if current else None
                if sa is None:
                    continue
                next_seq = sa.next_seq
                for sid in (0, 3, 700, 1023):
                    n = next_seq(sid)
                    if n not in (1, 2):
                        failures.append((sid, n))
        except Exception as e:  # noqa: BLE001 -- reported by the main thread
            failures.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(12):
            sa = pyeesp.SA(0x6000, root_key=ROOT32, sskdf="hkdf-sha256", mode="transport")
            current.append(sa)
            for sid in range(1024):  # the Sub SA table grows from 16 slots to 2048
                sa.encrypt(PKT, sid)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not failures
    assert [current[-1].next_seq(sid) for sid in (0, 1023)] == [2, 2]


def test_eesp_failed_encrypts_spend_no_sequence_number():
    sa = pyeesp.SA(0x5000, "aes-gcm-16", key=EKEY20, mode="transport")
    frag = bytearray(udp4(100))
    frag[6] = 0x20
    for p in (b"", b"\x45\x00", bytes(frag)):
        with pytest.raises(pyeesp.EespError):
            sa.encrypt(p)
        assert sa.next_seq() == 1
    with pytest.raises(pyeesp.SubSaError):
        sa.encrypt(PKT, 1)  # no SSKDF: only Sub SA 0 exists
    assert eesp_nonce_parts(b"\x00" * 20 + sa.encrypt(PKT)[20:])[1] == 1


# ============================================================================ tags

TAG_WORDS = re.compile(r"tag|icv|mac\b|digest|auth", re.I)
_CMP_CALL = re.compile(r"\b(memcmp|CRYPTO_memcmp|bcmp|strcmp|strncmp|strcasecmp|strncasecmp|timingsafe_bcmp)\s*\(")

#: Every byte/string comparison in the C sources, with why it is not a secret: (file, function, first two arguments).
ALLOWED_COMPARISONS = {
    ("core/src/proto/ipsec.c", "memcmp", "k->dst, dst"): "destination address lookup (public header field)",
    ("core/src/io/keyfile.c", "strcmp", "l->names[i], name"): "key-file field names",
    ("core/src/io/keyfile.c", "strcmp", "l->names[i], allowed[k]"): "key-file field names",
    ("core/src/io/keyfile_psp.c", "strcmp", 'mode, "transport"'): "keyword",
    ("core/src/io/keyfile_psp.c", "strcmp", 'mode, "tunnel"'): "keyword",
    ("core/src/proto/ipsec.c", "strcmp", "name, suite_rows[i].name"): "suite names",
    ("core/src/proto/ipsec.c", "strcmp", "name, cbc_rows[i].name"): "ESP's AES-CBC + HMAC suite names",
    ("core/src/io/keyfile_ipsec.c", "strcmp", "v, words[k]"): "keywords",
    ("core/src/io/keyfile_ipsec.c", "strcmp", 'v, "*"'): "address wildcard",
    ("core/src/io/keyfile_eesp.c", "strcmp", 'sv, "aes256-cmac"'): "SSKDF name",
    ("core/src/io/keyfile.c", "strcmp", "l->names[i], tok"): "key-file field names",
    ("core/src/io/keyfile.c", "strcmp", "l.kind, known_kinds[k].kind"): "line kinds",
    ("core/src/io/keyfile.c", "memcmp", 's, "\\xEF\\xBB\\xBF"'): "byte-order mark",
    ("core/src/io/refcfg.c", "memcmp", "lx->tok, word"): "reference-config keywords",
    ("dissectors/plugin/keys.c", "strcmp", 's, "*"'): "UAT wildcard",
    ("dissectors/plugin/packet-eesp.c", "memcmp", "x->dst, y->dst"): "destination address lookup",
    ("dissectors/plugin/packet-eesp.c", "strcmp", 'esp_sa->fields[c].name, "spi"'): "Wireshark's esp_sa column names",
    ("dissectors/plugin/packet-eesp.c", "strcmp", 'row, "*"'): "an esp_sa SPI wildcard (a public header field)",
    ("core/src/crypto/backend.c", "strcmp", 'env, "openssl"'): "the PE_CRYPTO_BACKEND environment variable",
    ("core/src/crypto/backend.c", "strcmp", 'env, "auto"'): "the PE_IMB_ARCH environment variable",
    ("core/src/crypto/backend.c", "strcmp", "env, arch_name(a)"): "the PE_IMB_ARCH environment variable",
    ("core/src/net/tunnel.c", "memcmp", "in + at, cfg->local"): "transport mode: a packet's source address",
    ("core/src/net/tunnel.c", "memcmp", "in + at + alen, cfg->peer"): "transport mode: a packet's destination",
    ("core/src/net/net_io.c", "memcmp", "at, local"): "the device holding the local address",
    ("core/src/net/tunnel.c", "strcmp", "x->kind, y->kind"): "key-file line kinds (a reload comparing two loads)",
    ("core/src/net/tunnel.c", "strcmp", "x->names[i], y->names[i]"): "key-file field names (a reload)",
    ("core/src/net/tunnel.c", "strcmp", "x->values[i], y->values[i]"):
        "a key file's values against the same file's before a reload (keys among them): two local files the "
        "operator wrote, no input of a peer's, so the time it takes tells an attacker nothing",
    ("core/src/crypto/aead.c", "CRYPTO_memcmp", "a->fixed, nonce"):
        "an AES-GCM nonce's fixed field (salt or SPI) against the context's; constant time: a salt is key material",
}


# The crypto layer's files that verify a tag they computed themselves (ipsec-mb computes a tag and leaves the
# comparison to its caller): there, and only with CRYPTO_memcmp, a tag comparison is the check itself.
TAG_VERIFIERS = {"core/src/crypto/aead_imb.c", "core/src/crypto/cbc_hmac.c", "core/src/crypto/cbc_hmac_imb.c"}


def _c_sources():
    pats = ["core/src/**/*.c", "core/src/**/*.h", "core/include/pe/*.h", "dissectors/plugin/*.c", "dissectors/plugin/*.h",
            "dissectors/lua/*.c"]
    for pat in pats:
        yield from sorted(ROOT.glob(pat))


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def _call_args(src: str, start: int) -> str:
    """The argument text of the call whose '(' is at start - 1."""
    depth, i = 1, start
    while depth and i < len(src):
        depth += {"(": 1, ")": -1}.get(src[i], 0)
        i += 1
    return " ".join(src[start : i - 1].split())


def _first_two(args: str) -> str:
    parts, depth, cur = [], 0, ""
    for ch in args:
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        cur += ch
    parts.append(cur.strip())
    return ", ".join(parts[:2])


def test_no_memcmp_or_strcmp_on_tags_anywhere_in_c():
    found = {}
    for path in _c_sources():
        src = _strip_comments(path.read_text(errors="replace"))
        rel = path.relative_to(ROOT).as_posix()
        for m in _CMP_CALL.finditer(src):
            args = _call_args(src, m.end())
            key = (rel, m.group(1), _first_two(args))
            code = re.sub(r'"(\\.|[^"\\])*"', '""', args)  # identifiers only, not string literals
            if rel in TAG_VERIFIERS and m.group(1) == "CRYPTO_memcmp":
                continue
            assert not TAG_WORDS.search(code), f"{rel}: {m.group(1)}({args}) compares a tag: leave that to OpenSSL"
            found[key] = args
    unknown = sorted(set(found) - set(ALLOWED_COMPARISONS))
    assert not unknown, ("comparisons not reviewed yet (add them to ALLOWED_COMPARISONS if they touch no secret): "
                         + "; ".join(f"{f}: {fn}({a})" for f, fn, a in unknown))
    stale = sorted(set(ALLOWED_COMPARISONS) - set(found))
    assert not stale, f"ALLOWED_COMPARISONS lists comparisons that are gone: {stale}"


def _function_body(src: str, name: str) -> str:
    m = re.search(r"\n[a-z_ ]*\b" + name + r"\s*\([^;{]*\)\s*\{", src)
    assert m, name
    depth, i = 1, m.end()
    while depth:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
    return src[m.end() : i]


def test_tags_are_verified_by_openssl_aead_final():
    src = _strip_comments((ROOT / "core/src/crypto/aead.c").read_text())
    body = _function_body(src, "pe_aead_open")
    # GCM / ChaCha20-Poly1305: the expected tag goes to OpenSSL (set_tag: the context's "tag" parameter), whose
    # final step compares in constant time.
    # (The final step is EVP_DecryptFinal_ex since the direct GCM/ChaCha20 path; EVP_CipherFinal_ex before.)
    set_tag = _function_body(src, "set_tag")
    assert "OSSL_CIPHER_PARAM_AEAD_TAG" in set_tag and "set_octets(" in set_tag
    assert "EVP_CIPHER_CTX_set_params(" in _function_body(src, "set_octets")
    assert "set_tag(ctx, tag," in body and re.search(r"EVP_(Cipher|Decrypt)Final_ex", body)
    assert re.search(r"EVP_(Cipher|Decrypt)Final_ex\([^;]*\)\s*!=\s*1\)\s*\{\s*if \(len\)\s*pe_wipe\(pt, len\);\s*"
                     r"return PE_ERR_AUTH;", body)
    # CCM: the tag is set before the payload pass (in ccm_begin()), which verifies it.
    begin = _function_body(src, "ccm_begin")
    assert "set_tag(ctx, tag," in begin and "PE_AEAD_OPEN" in begin
    assert re.search(r"int ok = EVP_CipherUpdate\([^;]*\)\s*==\s*1;", body)
    assert re.search(r"if \(!ok && len\)\s*pe_wipe\(pt, len\);\s*return ok \? PE_OK : PE_ERR_AUTH;", body)
    # The only places that decide "authentication failed" are pe_aead_open and the verifiers it dispatches to,
    # which compare in constant time and wipe what they decrypted.
    for rel in TAG_VERIFIERS:
        text = _strip_comments((ROOT / rel).read_text())
        for m in re.finditer(r"return\s+PE_ERR_AUTH\b", text):
            before = text[max(0, m.start() - 400) : m.start()]
            assert "CRYPTO_memcmp(" in before and "pe_wipe(" in before, f"{rel}: PE_ERR_AUTH without the check and wipe"
    for path in sorted((ROOT / "core/src").rglob("*.c")):
        text = _strip_comments(path.read_text())
        if path.name != "aead.c" and path.relative_to(ROOT).as_posix() not in TAG_VERIFIERS:
            assert not re.search(r"return\s+PE_ERR_AUTH\b", text), f"{path.name} decides an ICV outside pe_aead_open"
    # Receivers verify with pe_aead_open and never recompute a tag to compare it.
    for fname, func in (("psp.c", "pe_psp_open"), ("eesp_rx.c", "open_eesp")):
        body = _function_body(_strip_comments((ROOT / "core/src/proto" / fname).read_text()), func)
        assert "pe_aead_open(" in body and "pe_aead_seal(" not in body, func


def test_dissectors_and_python_leave_tags_to_the_core():
    plugin = (ROOT / "dissectors/plugin/keys.c").read_text()
    assert "pe_psp_open(" in plugin and "pe_eesp_open(" in plugin
    for path in sorted((ROOT / "dissectors").rglob("*")):
        if path.suffix not in (".c", ".h", ".lua"):
            continue
        text = path.read_text(errors="replace")
        for bad in ("gcry_cipher_checktag", "gcry_cipher_gettag", "getTag", "setTag", "openssl.cipher"):
            assert bad not in text, f"{path.relative_to(ROOT)} handles tags itself ({bad})"
        if path.suffix == ".lua":
            assert not re.search(r"\b\w*(icv|tag)\w*\s*[=~]=|[=~]=\s*\w*(icv|tag)\b", text, re.I), path.name
    # Python: no equality test on ICV/tag octets (lengths, validity flags and suite sizes are not octets).
    operand = r"[\w.]+(?:\[[^\]]*\])?"
    cmp = re.compile(rf"({operand})\s*(?:==|!=)\s*({operand})")
    not_octets = re.compile(r"len|valid|good|bad|\bs_icv\b", re.I)
    # The vector checkers compare a vector file's *published* ICV with the packet it describes
    # (consistency of public test data, after the core has verified the packet).
    allowed = {"pypsp/tools/vectors.py": 'out["icv"] != wire[-16:].hex()', "pyeesp/tools/vectors.py": 'out["icv"] != wire[-icv_len:].hex()'}
    for pkg in ("pecore", "pypsp", "pyeesp"):
        for path in sorted((ROOT / pkg).glob("*.py")):
            rel = f"{pkg}/{path.name}"
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if rel in allowed and allowed[rel] in line:
                    continue
                for m in cmp.finditer(line.split("#")[0]):
                    for side in m.groups():
                        assert not (re.search(r"icv|tag", side, re.I) and not not_octets.search(side)), (
                            f"{rel}:{n}: compares ICV octets itself: {line.strip()}")


# ============================================================================ no keys in messages


def _forms(key: bytes):
    """Ways a key could show up in text: hex (8 digits = 4 octets), spaced or colon hex, bytes repr."""
    h = key.hex()
    for i in range(0, len(key) - 3):
        yield h[2 * i : 2 * i + 8]
        yield " ".join(h[2 * j : 2 * j + 2] for j in range(i, i + 4))
        yield ":".join(h[2 * j : 2 * j + 2] for j in range(i, i + 4))
    for i in range(0, len(key) - 5):
        yield repr(key[i : i + 6])[2:-1]


_FORMS = {k: sorted(set(_forms(k))) for k in SECRETS}


def assert_no_key(text: str, what: str = "") -> None:
    low = text.lower()
    for key, forms in _FORMS.items():
        for f in forms:
            assert f.lower() not in low if "\\x" not in f else f not in text, (
                f"{what}: key material ({f!r} of key {key.hex()[:8]}...) in: {text[:500]!r}")


def _error_text(exc: BaseException) -> str:
    return "\n".join([str(exc), repr(exc), repr(exc.args), str(getattr(exc, "code", ""))])


def _api_errors():
    from pypsp.scapy import PSP, PSPSecurityAssociation
    from pyeesp.scapy import EESPSecurityAssociation

    hexk = KEY32.hex()
    calls = [
        lambda: pypsp.Encryptor(spi=1, key=KEY32),  # version 0 wants 16 octets
        lambda: pypsp.Encryptor(spi=1, key=hexk + "zz"),
        lambda: pypsp.Encryptor(spi=1, key=hexk[:-1]),
        lambda: pypsp.Encryptor(spi=1, master_keys=(MK0[:31], MK1)),
        lambda: pypsp.Encryptor(spi=1, master_keys=(MK0, MK1, KEY16)),
        lambda: pypsp.Encryptor(spi=1, key=KEY16, master_keys=(MK0, MK1)),
        lambda: pypsp.Encryptor(spi=2**33, key=KEY16),
        lambda: pypsp.Decryptor(keys={1: KEY16[:15]}),
        lambda: pypsp.Decryptor(keys={1: KEY16, (1, 0): KEY16}),
        lambda: pypsp.Decryptor(keys={1: KEY32.hex().upper() + "G"}),
        lambda: pypsp.derive_key(MK0 + b"\x00", 1, 0),
        lambda: pypsp.derive_key(MK0.hex() + "x", 1, 0),
        lambda: pypsp.derive_key(MK0, 1, 9),
        lambda: pypsp.Decryptor(keys={1: KEY16}).decrypt(pypsp.Encryptor(spi=1, key=bytes(16)).encrypt(PKT)),
        lambda: pypsp.Decryptor(master_keys=(WRONG_MK0, None)).decrypt(
            pypsp.Encryptor(spi=1, master_keys=(MK0, MK1)).encrypt(PKT)),
        lambda: pyeesp.SA(1, key=EKEY[:35]),
        lambda: pyeesp.SA(1, key=EKEY, key_bits=256, suite="aes-ccm-8"),
        lambda: pyeesp.SA(1, root_key=ROOT32[:31]),
        lambda: pyeesp.SA(1, root_key=ROOT64, sskdf="hkdf-sha256"),
        lambda: pyeesp.SA(1, key=EKEY, root_key=ROOT32),
        lambda: pyeesp.SA(1, key=EKEY, sskdf="hkdf-sha256"),
        lambda: pyeesp.SA(1, root_key=ROOT32.hex() + "q"),
        lambda: pyeesp.SA(1, key=EKEY20, suite="nonesuch"),
        lambda: pyeesp.derive_sub_sa_key(ROOT32, 70000, 20),
        lambda: pyeesp.derive_sub_sa_key(ROOT32, 1, 20, "aes256-cmac"),
        lambda: pyeesp.SA(1, key=EKEY20).decrypt(pyeesp.SA(1, key=bytes(20)).encrypt(PKT)),
        lambda: pyeesp.SA(1, root_key=WRONG_ROOT).decrypt(pyeesp.SA(1, root_key=ROOT32).encrypt(PKT, 3)),
        lambda: PSPSecurityAssociation(1, KEY32),
        lambda: PSPSecurityAssociation(1, master_keys=(MK0.hex()[:-2], None)),
        lambda: EESPSecurityAssociation(1, "aes-gcm-16", crypt_key=EKEY[:30]),
        lambda: EESPSecurityAssociation(1, "aes-gcm-16", crypt_key=EKEY, key=EKEY),
        lambda: EESPSecurityAssociation(1, "aes-ccm", crypt_key=EKEY, icv_len=7),
        lambda: PSP(spi=1, data=b"x" * 40).encrypt(KEY32.hex()),
        lambda: PSP(bytes(PSP(spi=1, iv=5, data=b"y" * 40).build())).decrypt(KEY16),
    ]
    out = []
    for i, call in enumerate(calls):
        with pytest.raises(CoreError) as e:
            call()
        out.append((i, e.value))
    return out


def test_api_errors_never_show_keys():
    errors = _api_errors()
    assert len(errors) > 30
    for i, err in errors:
        assert_no_key(_error_text(err), f"call {i} ({type(err).__name__})")


def _hex(k: bytes) -> str:
    return k.hex()


BAD_KEY_LINES = [
    "psp-master key0={k32}",  # valid: its repr is checked instead
    "psp-master key0={k32}00",
    "psp-master key0={k31}",
    "psp-master key0={k32} key0={k32}",
    "psp-master key0={k32} key1={k32}zz",
    "psp-master key0={k32} key2={k32}",
    "psp-master {k32}",
    "psp-master key0={k32}\npsp-master key1={k32}",
    "psp-key spi=0x1 key={k31}",
    "psp-key spi={k32} key=00",
    "psp-key spi=0x1 key={k16} version={k16}",
    "psp-key spi=0x1 key={k16}\npsp-key spi=0x1 key={k16}",
    "psp-sa spi=0x1 version=0 mode=transport vc={k32}",
    "psp-sa spi=0x1 version=0 mode={k16}",
    "psp-sa spi=0x1 version=0 mode=transport first-iv={k32}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 key={k36}",
    "eesp-sa spi=0x1 suite={k16} key={k20}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 root-key={k31} sskdf=hkdf-sha256",
    "eesp-sa spi=0x1 suite=aes-gcm-16 root-key={k32} sskdf={k16}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 key={k20} root-key={k32}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 key={k20} dst={k16}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 key={k20} {k16}={k16}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 key={k20} replay-window={k16}",
    "eesp-sa spi=0x1 suite=aes-gcm-16 key={k20}\neesp-sa spi=0x1 suite=aes-gcm-16 key={k20}",
    "psp-master key0={k32} \x01",
    "psp-master key0={k32}\x00",
    "PSP-MASTER key0={k32}",
    # UAT-like rows (docs/keys.md, the Wireshark eesp_sa table) pasted into a key file
    '"IPv4","*","*","0x00001000","AES-GCM with 16 octet ICV [RFC4106]","0x{k20}","NULL",""',
    "0x00001234,0,derived,{k16},",
    "psp_keys 0x1234 * master-pair {k32} {k32}",
    "esp_sa IPv4 * * 0x1000 AES-GCM 0x{k20}",
]


def _bad_key_files():
    k = {"k16": KEY16.hex(), "k20": EKEY20.hex(), "k31": MK0.hex()[:62], "k32": MK0.hex(), "k36": EKEY.hex()[:-2] + "zz"}
    for line in BAD_KEY_LINES:
        yield line.format(**k)
        yield line.format(**{n: v.upper() for n, v in k.items()})


def test_key_file_errors_never_show_keys(tmp_path):
    n = 0
    for text in _bad_key_files():
        try:
            kf = parse_key_file(text)
        except KeyFileError as e:
            n += 1
            assert_no_key(_error_text(e), f"parse_key_file({text[:60]!r})")
        else:
            assert_no_key(repr(kf), f"repr of a parsed key file ({text[:40]!r})")
        p = tmp_path / "keys.txt"
        p.write_bytes(text.encode("latin-1"))
        for load in (load_key_file, load_psp_ref_config):
            try:
                load(p)
            except KeyFileError as e:
                assert_no_key(_error_text(e), f"{load.__name__}({text[:60]!r})")
    assert n >= 40
    # Undecodable files and reference configs that break after the first key.
    p = tmp_path / "raw.keys"
    p.write_bytes(b"psp-master key0=" + MK0.hex().encode() + b" \xff\xfe\n")
    with pytest.raises(KeyFileError) as e:
        load_key_file(p)
    assert_no_key(_error_text(e.value), "undecodable key file")
    spaced = " ".join(f"{b:02x}" for b in MK0)
    for tail in ("", " zz", " " + spaced + " 1g", "\n" + spaced + "\n" + "1234 sideways aes-gcm-128 0 0 0 no-vc"):
        p.write_text(spaced + tail + "\n")
        try:
            load_psp_ref_config(p)
        except KeyFileError as e:
            assert_no_key(_error_text(e), f"ref config {tail!r}")


def test_parsed_key_files_do_not_show_keys_in_repr(tmp_path):
    text = (f"psp-master key0={MK0.hex()} key1={MK1.hex()}\n"
            f"psp-key spi=0x1234 key={KEY16.hex()}\n"
            f"eesp-sa spi=0x1000 suite=aes-gcm-16 key-bits=256 key={EKEY.hex()}\n"
            f"eesp-sa spi=0x2000 suite=aes-gcm-16 root-key={ROOT64.hex()} sskdf=hkdf-sha512\n"
            f"someone-elses-kind secret={KEY32.hex()}\n")
    kf = parse_key_file(text)
    assert kf.psp_master_keys == (MK0, MK1) and kf.eesp_sas[0].settings["key"] == EKEY  # the keys are there...
    for obj in (kf, *kf.eesp_sas, *kf.lines):
        assert_no_key(repr(obj), f"repr({type(obj).__name__})")  # ...but not in what gets logged
        assert_no_key(str(obj), f"str({type(obj).__name__})")
    p = tmp_path / "ref.cfg"
    p.write_text(" ".join(f"{b:02x}" for b in MK0 + MK1) + "\n")
    cfg = load_psp_ref_config(p)
    assert cfg.master_keys == (MK0, MK1)
    assert_no_key(repr(cfg), "repr(PspRefConfig)")


def test_diagnose_reports_never_show_keys():
    import pyeesp.tools.diagnose
    import pypsp.tools.diagnose

    wire = pypsp.Encryptor(spi=0x1234, master_keys=(MK0, MK1)).encrypt(PKT)
    for kw in (dict(master_keys=(WRONG_MK0, MK1)), dict(master_keys=(MK0, None)), dict(keys={0x1234: KEY16}),
               dict(master_keys=(MK1, MK0)), dict(keys={0x1234: KEY32}, master_keys=(WRONG_MK0, None))):
        for packet in (wire, wire.hex(), wire[28:]):
            rep = pypsp.tools.diagnose.diagnose(packet, **kw)
            assert rep.verdict != "verifies" or kw.get("master_keys") == (MK0, None)
            assert_no_key(rep.format() + json.dumps(rep.to_dict()), f"PSP diagnose with {list(kw)}")
    tampered = bytearray(wire)
    tampered[-1] ^= 1
    rep = pypsp.tools.diagnose.diagnose(bytes(tampered), master_keys=(MK0, MK1))
    assert_no_key(rep.format() + json.dumps(rep.to_dict()), "PSP diagnose, tampered")

    sent = pyeesp.SA(0x1000, root_key=ROOT32, sskdf="hkdf-sha256").encrypt(PKT, 2)
    sent_key = pyeesp.SA(0x2000, key=EKEY20).encrypt(PKT)
    cases = [
        (sent, [dict(spi=0x1000, root_key=WRONG_ROOT, sskdf="hkdf-sha256")]),
        (sent, [dict(spi=0x1000, root_key=ROOT64, sskdf="hkdf-sha512")]),
        (sent, [dict(spi=0x1001, root_key=ROOT32, sskdf="hkdf-sha256")]),
        (sent_key, [dict(spi=0x2000, key=EKEY20[::-1])]),
        (sent_key, [dict(spi=0x2000, key=EKEY, key_bits=256)]),
    ]
    for packet, sas in cases:
        for form in (packet, packet.hex()):
            rep = pyeesp.tools.diagnose.diagnose(form, sas)
            assert rep.verdict != "verifies"
            assert_no_key(rep.format() + json.dumps(rep.to_dict()), f"EESP diagnose {sas[0]['spi']:#x}")


# ----------------------------------------------------------------------------- CLIs


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    psp_wire = pypsp.Encryptor(spi=0x1234, master_keys=(MK0, MK1)).encrypt(PKT)
    eesp_wire = pyeesp.SA(0x1000, key=EKEY20).encrypt(PKT)
    with CaptureWriter(d / "psp.pcap", LINKTYPE_RAW) as w:
        w.write(psp_wire)
    with CaptureWriter(d / "eesp.pcap", LINKTYPE_RAW) as w:
        w.write(eesp_wire)
    (d / "bad.keys").write_text(f"psp-master key0={MK0.hex()} key1={MK1.hex()}\n"
                                f"psp-key spi=0x1234 key={KEY16.hex()}00\n"
                                f"eesp-sa spi=0x1000 suite=aes-gcm-16 key={EKEY20.hex()[:-2]}\n")
    (d / "eesp-bad.keys").write_text(f"eesp-sa spi=0x1000 suite=aes-gcm-16 key={EKEY.hex()}\n")
    (d / "good.keys").write_text(f"psp-master key0={WRONG_MK0.hex()} key1={MK1.hex()}\n"
                                 f"eesp-sa spi=0x1000 suite=aes-gcm-16 key={EKEY20[::-1].hex()}\n")
    return d, psp_wire.hex(), eesp_wire.hex()


def _cli_cases(d: Path, psp_hex: str, eesp_hex: str):
    k16, k32, mk0, wrong = KEY16.hex(), KEY32.hex(), MK0.hex(), WRONG_MK0.hex()
    psp, eesp, out = str(d / "psp.pcap"), str(d / "eesp.pcap"), str(d / "out.pcap")
    return [
        ("pypsp", ["derive-key", "--master-key", mk0[:-2], "--spi", "1", "--version", "0"]),
        ("pypsp", ["derive-key", "--master-key", mk0 + "zz", "--spi", "1", "--version", "0"]),
        ("pypsp", ["derive-key", "--master-key0", mk0, "--spi", "80000001", "--version", "0"]),
        ("pypsp", ["decrypt", psp, out, "--master-key0", mk0[:-4]]),
        ("pypsp", ["decrypt", psp, out, "--master-key1", "0x" + k32 + "g"]),
        ("pypsp", ["decrypt", psp, out, "--key", k16]),  # forgot the SPI
        ("pypsp", ["decrypt", psp, out, "--key", f"{k16}:1234"]),  # SPI and key swapped
        ("pypsp", ["decrypt", psp, out, "--key", f"zz:{k16}"]),
        ("pypsp", ["decrypt", psp, out, "--key", f"1234:{k16[:-2]}"]),
        ("pypsp", ["decrypt", psp, out, "--key", f"1234:{k16}", "--key", f"1234:{k16}", "--master-key0", k16]),
        ("pypsp", ["decrypt", psp, out, "--key-file", str(d / "bad.keys")]),
        ("pypsp", ["decrypt", str(d / "missing.pcap"), out, "--master-key0", mk0]),
        ("pypsp", ["decrypt", psp, psp, "--master-key0", mk0]),
        ("pypsp", ["encrypt", psp, out, "--master-key0", mk0[:-2], "--spi", "1"]),
        ("pypsp", ["encrypt", psp, out, "--key", f"1:{k32}", "--spi", "1", "--version", "0"]),
        ("pypsp", ["encrypt", psp, out, "--master-key0", mk0, "--spi", k16]),  # a key where the SPI goes
        ("pypsp", ["encrypt", psp, out, "--master-key0", mk0, "--spi", k16[:12] + "zz"]),
        ("pypsp", ["show", psp, "--key", f"1:{k16}0"]),
        ("pypsp", ["show", psp, "--ref-config", str(d / "bad.keys")]),
        ("pypsp", ["diagnose", psp_hex, "--master-key0", wrong, "--master-key1", wrong]),
        ("pypsp", ["diagnose", psp_hex, "--key", f"1234:{k16}"]),
        ("pypsp", ["diagnose", psp, "--key-file", str(d / "good.keys"), "--json"]),
        ("pypsp", ["diagnose", "zz" + psp_hex, "--master-key0", mk0]),
        ("pyeesp", ["decrypt", eesp, out, "--spi", "1000", "--key", EKEY.hex()[:-2]]),
        ("pyeesp", ["decrypt", eesp, out, "--spi", "1000", "--root-key", ROOT32.hex()[:-2]]),
        ("pyeesp", ["decrypt", eesp, out, "--spi", "1000", "--root-key", ROOT32.hex(), "--sskdf", "hkdf-sha512"]),
        ("pyeesp", ["decrypt", eesp, out, "--key", EKEY20.hex()]),  # no --spi
        ("pyeesp", ["decrypt", eesp, out, "--spi", EKEY20.hex(), "--key", "00"]),
        ("pyeesp", ["decrypt", eesp, out, "--spi", "1000", "--key", EKEY20.hex() + "x"]),
        ("pyeesp", ["decrypt", eesp, out, "--key-file", str(d / "bad.keys")]),
        ("pyeesp", ["encrypt", eesp, out, "--key-file", str(d / "eesp-bad.keys")]),
        ("pyeesp", ["derive-key", "--root-key", ROOT32.hex()[:-2], "--sub-sa-id", "1"]),
        ("pyeesp", ["derive-key", "--root-key", ROOT32.hex(), "--sub-sa-id", "70000"]),
        ("pyeesp", ["derive-key", "--root-key", ROOT32.hex(), "--sub-sa-id", "1", "--length", "99999"]),
        ("pyeesp", ["show", eesp, "--spi", "1000", "--key", EKEY20.hex()[:10]]),
        ("pyeesp", ["diagnose", eesp_hex, "--spi", "1000", "--key", EKEY20[::-1].hex()]),
        ("pyeesp", ["diagnose", eesp_hex, "--spi", "1000", "--root-key", WRONG_ROOT.hex()]),
        ("pyeesp", ["diagnose", eesp, "--key-file", str(d / "good.keys"), "--json"]),
    ]


def _run_cli(prog: str, argv):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    p = subprocess.run([sys.executable, "-m", prog, *argv], capture_output=True, text=True, timeout=120, env=env,
                       cwd=str(ROOT))
    return p.returncode, p.stdout, p.stderr


def test_cli_errors_and_reports_never_show_keys(cli_files):
    d, psp_hex, eesp_hex = cli_files
    cases = _cli_cases(d, psp_hex, eesp_hex)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: _run_cli(*c), cases))
    for (prog, argv), (rc, out, err) in zip(cases, results):
        what = f"{prog} {' '.join(a[:20] for a in argv)}"
        assert "Traceback" not in err, f"{what}: crashed instead of reporting an error:\n{err[-1500:]}"
        assert rc in (1, 2), f"{what}: exit status {rc}\n{err[-500:]}"
        assert_no_key(out + err, what)


# ============================================================================ input files


def test_capture_truncated_by_another_process_while_read_raises_no_sigbus(tmp_path):
    """A capture cut short by another process after it was opened: a mapped reader died of SIGBUS at the
    first record past the new end; the streaming reader (read, never mapped) hands out the records it had
    read and then reports the cut as capture-truncated."""
    path = tmp_path / "big.pcap"
    with CaptureWriter(str(path), linktype=LINKTYPE_RAW, fmt="pcap") as w:
        for i in range(20000):
            w.write(udp4(400 + i % 100))
    size = path.stat().st_size
    code = (
        "import os, sys\n"
        "from pecore.capture import CaptureError, read_capture\n"
        "it = read_capture(sys.argv[1])\n"
        "first = next(it)\n"
        "os.truncate(sys.argv[1], 4096)  # what another process may do meanwhile\n"
        "n = 1\n"
        "try:\n"
        "    for _ in it:\n"
        "        n += 1\n"
        "except CaptureError as e:\n"
        "    print(n, e.code)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    n, code = p.stdout.split()
    assert code == "capture-truncated" and 1 <= int(n) < 20000 and size > 4096
