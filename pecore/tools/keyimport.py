"""Keys from where users have them, as key-file lines (docs/keys.md, "Importing and exporting keys").

Pure functions, text in and text out: the core never sees these formats, only the key-file lines they become,
which it then checks like any other (so an import that produced a line the core refuses is a bug here, and the
tests parse every output with the core).

- ``from_xfrm``: ``ip xfrm state`` output (iproute2, ip/ipxfrm.c): ESP SAs with an AEAD the core has.  The Linux
  EESP prototype's ``ip xfrm`` output format is not published anywhere we could find, so EESP is not imported.
- ``from_esp_sa``: Wireshark's ``esp_sa`` UAT file (its profile directory), in both column layouts:
  8 columns (Wireshark up to 4.2; checked against 4.0) and 10 columns with "Sequence Number length" and
  "ESN High Bits" (checked against 4.4 and 4.6).
- ``from_psp_netlink``: what Linux's PSP netlink family (Documentation/netlink/specs/psp.yaml) returns for
  ``rx-assoc`` or takes for ``tx-assoc``, as ``ynl`` prints it (Python repr: ``b'...'`` keys) or as JSON
  (hex-string keys).
- ``to_esp_sa``: the key file's ``esp-sa`` lines as an ``esp_sa`` UAT for Wireshark's own ESP dissector.

Errors are :class:`KeyImportError` (a :class:`pecore.keys.KeyFileError`) naming the input (``source``: its path)
and line; messages never quote a key.  An SA that is well formed but has no key-file form is an
:class:`UnsupportedSaError`, which ``skip_unsupported`` turns into a comment; an input without any SA is an error.
"""
from __future__ import annotations

import argparse
import ast
import functools
import ipaddress
import json
import re
import sys
from typing import Any, Callable, Dict, Iterable, List, NoReturn, Optional, Sequence, Tuple

from pecore.keys import EspSaEntry, KeyFile, KeyFileError, parse_key_file
from pecore.protocol import ESP_SUITES
from pecore.tools._tables import SUITES

__all__ = ["KeyImportError", "UnsupportedSaError", "from_xfrm", "from_esp_sa", "from_psp_netlink", "to_esp_sa", "WIRESHARK_LAYOUTS",
           "layout_for", "register"]


class KeyImportError(KeyFileError):
    """An input that cannot become key-file lines; ``line`` is its 1-based line (0: not tied to one)."""

    def __init__(self, source: str, line: int, message: str, code: str = "keyfile-bad-value") -> None:
        super().__init__(f"{source}:{line}: {message}" if line else f"{source}: {message}", code)
        self.line = line
        self.source = source
        self.reason = message  # without the source and line


# ---------------------------------------------------------------------------------------------- shared


def _hex_key(text: str) -> Optional[bytes]:
    t = text[2:] if text[:2] in ("0x", "0X") else text
    if not t or len(t) % 2 or not re.fullmatch(r"[0-9a-fA-F]+", t):
        return None
    return bytes.fromhex(t)


def _addr(text: str) -> Optional[str]:
    """An exact address in the key file's spelling, or None when it is not one."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


#: ESP's suites with an integrity transform (AES-CBC + HMAC), by name: the core's rows (pe_ipsec_esp_suite_at), which
#: EESP and so :data:`SUITES` do not have.
ENCAUTH_SUITES = {s.name: s for s in ESP_SUITES if s.integ}


def _esp_line(spi: int, suite: str, key: bytes, key_bits: int, *, src: Optional[str] = None,
              dst: Optional[str] = None, mode: str = "tunnel", esn: bool = False, anti_replay: bool = True,
              replay_window: Optional[int] = None, first_seq: int = 1, udp: Optional[Tuple[int, int]] = None) -> str:
    f = [f"esp-sa spi=0x{spi:08x} suite={suite}"]
    if suite in ENCAUTH_SUITES or len(SUITES[suite].key_sizes) > 1:  # a suite with one key size takes no key-bits
        f.append(f"key-bits={key_bits}")
    f.append(f"key={key.hex()}")
    f.append(f"mode={mode}")
    if esn:
        f.append("esn=1")
    if not anti_replay:
        f.append("anti-replay=0")
    if replay_window is not None:
        f.append(f"replay-window={replay_window}")
    if first_seq != 1:
        f.append(f"first-seq=0x{first_seq:x}")
    if udp is not None:
        f.append("udp-encap=1")
        if udp[0] != 4500:
            f.append(f"udp-sport={udp[0]}")
        if udp[1] != 4500:
            f.append(f"udp-dport={udp[1]}")
    if src:
        f.append(f"src={src}")
    if dst:
        f.append(f"dst={dst}")
    return " ".join(f)


#: How the messages name the construction of a suite that takes one key size.
_SINGLE_KEY_WHAT = {"chacha": "ChaCha20-Poly1305"}


def _key_bits(suite: str, key: bytes, fail) -> int:
    """The key size of a suite's KEYMAT (key || salt, or AES key || integrity key), by the core's lengths."""
    if suite in ENCAUTH_SUITES:
        row = ENCAUTH_SUITES[suite]
        n = len(key) - row.integ_key_len
        if n in row.key_lens:
            return 8 * n
        fail(f"the key of {suite} is a {' or '.join(str(8 * k) for k in row.key_lens)}-bit AES key and a "
             f"{row.integ_key_len}-octet integrity key")
    s = SUITES[suite]
    n = len(key) - s.salt
    if 8 * n in s.key_sizes:
        return 8 * n
    if len(s.key_sizes) == 1:
        fail(f"a {_SINGLE_KEY_WHAT.get(s.kind, suite)} key is {s.key_sizes[0] // 8} octets and a {s.salt}-octet salt")
    sizes = [f"{b}-" for b in s.key_sizes[:-1]]
    fail(f"the key of {suite} is a {', '.join(sizes)} or {s.key_sizes[-1]}-bit AES key and a {s.salt}-octet salt")
    raise AssertionError("fail() returns")  # pragma: no cover


# ---------------------------------------------------------------------------------------------- ip xfrm state

#: Linux crypto API AEAD templates (net/xfrm/xfrm_algo.c) of each construction with an explicit IV; Linux has no
#: RFC 8750 implicit-IV suites.
_XFRM_TEMPLATES = {"gcm": "rfc4106(gcm(aes))", "ccm": "rfc4309(ccm(aes))", "chacha": "rfc7539esp(chacha20,poly1305)",
                   "gmac": "rfc4543(gcm(aes))"}
#: ``ip xfrm``'s AEAD name and ICV bits -> suite, for every suite of the core's table that Linux has.
XFRM_AEADS: Dict[Tuple[str, int], str] = {(_XFRM_TEMPLATES[s.kind], 8 * s.icv): s.name for s in SUITES.values()
                                          if not s.iiv and s.kind in _XFRM_TEMPLATES}
#: ``ip xfrm``'s ``enc`` cipher and ``auth-trunc`` algorithm with its ICV bits -> ESP's AES-CBC suites.
XFRM_CBC = "cbc(aes)"
XFRM_AUTHS: Dict[Tuple[str, int], str] = {("hmac(sha1)", 96): "aes-cbc-hmac-sha1-96",
                                          ("hmac(sha256)", 128): "aes-cbc-hmac-sha256-128"}

#: The headers under which iproute2 prints more deeply indented lines of their own (ip/ipxfrm.c): only the ESN
#: replay state says something the key file holds.  Read by indentation, as ``stats:`` holds a line that starts
#: like the SA's own ``replay-window`` (``replay-window 0 replay 0 failed 0``: counters, not the window).
_XFRM_SECTIONS = ("anti-replay esn context:", "lifetime config:", "lifetime current:", "stats:")


class UnsupportedSaError(KeyImportError):
    """An SA that is well formed but has no key-file form (AH, a CBC cipher, BEET mode, ...): with
    ``skip_unsupported`` it is left out with a message instead of stopping the import."""


def _indent(raw: str) -> int:
    return len(raw.expandtabs(8)) - len(raw.expandtabs(8).lstrip())


def _xfrm_blocks(text: str, source: str) -> List[List[Tuple[int, str]]]:
    """One block per SA of (line number, raw line): a line starting with 'src' (not indented) opens it."""
    blocks: List[List[Tuple[int, str]]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        if not raw[0].isspace() and raw.split()[0] == "src":
            blocks.append([])
        elif not blocks:
            raise KeyImportError(source, n, "expected a 'src ADDR dst ADDR' line to start an SA", "keyfile-syntax")
        blocks[-1].append((n, raw))
    return blocks


def _xfrm_sa(block: List[Tuple[int, str]], source: str) -> Tuple[str, str]:
    """(comment, esp-sa line) of one SA; an UnsupportedSaError names the SA and the first line it cannot take."""
    first = block[0][0]

    def fail(msg: str, line: int = first, code: str = "keyfile-bad-value") -> NoReturn:
        raise KeyImportError(source, line, msg, code)

    words = block[0][1].split()
    if len(words) < 4 or words[0] != "src" or words[2] != "dst":
        fail("expected 'src ADDR dst ADDR'", code="keyfile-syntax")
    src, dst = _addr(words[1]), _addr(words[3])
    if src is None or dst is None:
        fail("'src'/'dst' must be IPv4 or IPv6 addresses")
    sa: Dict[str, Any] = {}
    unsupported: Optional[Tuple[int, str]] = None  # the first line the key file has no form for
    section, section_indent = "", 0
    for n, raw in block[1:]:
        ln = raw.strip()
        if section and _indent(raw) > section_indent:
            if section == "anti-replay esn context:":
                # " seq-hi 0x0, seq 0x0, oseq-hi 0x1, oseq 0x5", " replay_window 128, bitmap-length 4", bitmap words
                w = ln.replace(",", " ").split()
                if w[0] in ("seq-hi", "replay_window"):
                    sa["replay"] = {**sa.get("replay", {}), **_xfrm_numbers(w, n, fail)}
            continue
        section = next((s for s in _XFRM_SECTIONS if ln == s), "")
        section_indent = _indent(raw)
        if section:
            continue
        w = ln.split()
        head = w[0]
        if head == "proto":
            if len(w) < 2:
                fail("expected 'proto PROTO spi SPI ...'", n, "keyfile-syntax")
            if "spi" in w:
                i = w.index("spi")
                try:
                    spi_text = w[i + 1].split("(")[0]  # ip -s: "0x00001002(4098)"
                    sa["spi"] = int(spi_text, 16 if spi_text.lower().startswith("0x") else 10)
                except (IndexError, ValueError):
                    fail("the SPI is not a number", n)
                if not 0 <= sa["spi"] <= 0xFFFFFFFF:
                    fail("the SPI is above 32 bits", n)
            if w[1] != "esp":
                unsupported = unsupported or (n, f"proto {w[1]}: only ESP SAs can be imported (the Linux EESP "
                                                 "prototype's output is not documented)")
            elif "spi" not in sa:
                fail("expected 'proto esp spi SPI ...'", n, "keyfile-syntax")
            if "mode" in w:
                i = w.index("mode")
                mode = w[i + 1] if i + 1 < len(w) else ""
                if mode not in ("tunnel", "transport"):
                    unsupported = unsupported or (n, f"mode {mode!r}: the core has tunnel and transport mode only")
                sa["mode"] = mode
        elif head == "replay-window":
            if "window" in sa:
                fail("a second 'replay-window' line", n, "keyfile-syntax")
            try:
                sa["window"] = int(w[1])
            except (IndexError, ValueError):
                fail("'replay-window' needs a number", n)
            if "flag" in w:
                sa["esn"] = "esn" in w[w.index("flag") + 1:]
        elif head == "aead":
            # ip: "aead NAME 0xKEY ICV-BITS"; ip -s: "aead NAME 0xKEY (KEY-BITS bits) ICV-BITS"
            if len(w) >= 3 and w[2] == "<<Keys":
                fail("the key is hidden ('ip xfrm state nokeys'): run 'ip xfrm state' without nokeys", n)
            bits_given = len(w) == 6 and w[3].startswith("(") and w[4] == "bits)"
            if len(w) != 4 and not bits_given:
                fail("expected 'aead NAME 0xKEY ICV-BITS' (ip xfrm state) or 'aead NAME 0xKEY (N bits) ICV-BITS' "
                     "(ip -s xfrm state)", n, "keyfile-syntax")
            name = w[1].strip("'\"")
            try:
                icv = int(w[-1])
            except ValueError:
                fail("the ICV length is not a number", n)
            key = _hex_key(w[2])
            if key is None:
                fail("the AEAD key is not 0x-prefixed hex", n)
            if bits_given and w[3][1:] != str(len(key) * 8):
                fail(f"the AEAD key is {len(key) * 8} bits long, and the line says {w[3][1:]}", n)
            suite = XFRM_AEADS.get((name, icv))
            if suite is None:
                unsupported = unsupported or (n, f"AEAD {name} with a {icv}-bit ICV is not a suite the core has")
            sa["suite"], sa["key"], sa["key_line"] = suite, key, n
        elif head == "enc" and len(w) >= 3 and w[1].strip("'\"") == XFRM_CBC:
            # "enc cbc(aes) 0xKEY" (ip -s: "enc cbc(aes) 0xKEY (N bits)")
            key = _hex_key(w[2])
            if key is None:
                fail("the encryption key is not 0x-prefixed hex", n)
            sa["enc_key"], sa["key_line"] = key, n
        elif head in ("auth-trunc", "auth") and len(w) >= 3:
            # "auth-trunc hmac(sha1) 0xKEY 96"; plain "auth NAME 0xKEY" is the algorithm's default length
            name = w[1].strip("'\"")
            try:
                icv = int(w[-1]) if head == "auth-trunc" else {"hmac(sha1)": 96, "hmac(sha256)": 96}.get(name, 0)
            except ValueError:
                fail("the ICV length is not a number", n)
            key = _hex_key(w[2])
            if key is None:
                fail("the integrity key is not 0x-prefixed hex", n)
            sa["auth_suite"], sa["auth_key"] = XFRM_AUTHS.get((name, icv)), key
            if sa["auth_suite"] is None:
                unsupported = unsupported or (n, f"'{head} {name}' with a {icv}-bit ICV: the core has HMAC-SHA-1-96 "
                                                 "and HMAC-SHA-256-128 (auth-trunc hmac(sha1) 96, hmac(sha256) 128)")
        elif head in ("enc", "auth", "auth-trunc", "comp"):
            unsupported = unsupported or (n, f"'{head} {w[1] if len(w) > 1 else ''}': the core has the AEADs and "
                                             "cbc(aes) with hmac(sha1) 96 or hmac(sha256) 128")
        elif head == "encap":
            # iproute2 prints "encap type espinudp sport 4500 dport 4500 addr 0.0.0.0"; the add syntax is
            # "encap espinudp 4500 4500 0.0.0.0": both are taken.
            rest = w[1:]
            if rest[:1] == ["type"]:
                kv = dict(zip(rest[::2], rest[1::2]))
                kind, ports = kv.get("type"), (kv.get("sport"), kv.get("dport"))
            else:
                kind, ports = (rest[0] if rest else None), (tuple(rest[1:3]) + (None, None))[:2]
            try:
                sport, dport = int(ports[0]), int(ports[1])  # type: ignore[arg-type]
            except (TypeError, ValueError):
                fail("encap needs a source and a destination port", n, "keyfile-syntax")
            if not (1 <= sport <= 0xFFFF and 1 <= dport <= 0xFFFF):
                fail("encap ports must be 1..65535", n)
            if kind != "espinudp":
                unsupported = unsupported or (n, f"encap {kind!r}: only espinudp (RFC 3948) is supported")
            sa["udp"] = (sport, dport)
        elif head == "anti-replay" and w[1:2] == ["context:"]:
            # The replay state without ESN, on one line: "anti-replay context: seq 0x0, oseq 0x0, bitmap 0x0"
            sa["replay"] = _xfrm_numbers(ln.replace(",", " ").split()[2:], n, fail)
        elif head == "dir":
            # Linux 6.10 and later: "dir in" or "dir out" says which of seq and oseq is this SA's.
            sa["dir"] = w[1] if len(w) > 1 else ""
        # Anything else (sel, lastused, offload, if_id, tfcpad, output-mark, security context) says nothing
        # the key file holds.
    if "spi" not in sa and unsupported is None:
        fail("no 'proto esp spi ...' line", code="keyfile-syntax")
    name = f"SPI 0x{sa['spi']:08x} {src} -> {dst}" if "spi" in sa else f"{src} -> {dst}"
    if unsupported is not None:
        raise UnsupportedSaError(source, unsupported[0], f"SA {name}: {unsupported[1]}")
    if "enc_key" in sa or "auth_key" in sa:
        if "key" in sa or "enc_key" not in sa or "auth_key" not in sa:
            fail("an SA is an 'aead' line, or an 'enc cbc(aes)' line with an 'auth-trunc' line",
                 int(sa.get("key_line", first)))
        # RFC 7296 §2.17: the encryption key, then the integrity key
        sa["suite"], sa["key"] = sa["auth_suite"], bytes(sa["enc_key"]) + bytes(sa["auth_key"])
    if "key" not in sa:
        fail("no 'aead' line, nor 'enc cbc(aes)' with 'auth-trunc': no ESP SA the core has", code="keyfile-syntax")
    suite, key = str(sa["suite"]), bytes(sa["key"])
    bits = _key_bits(suite, key, lambda m: fail(m, int(sa["key_line"])))
    esn = bool(sa.get("esn"))
    replay = sa.get("replay", {})
    window = int(replay.get("replay_window", 0) if esn else 0) or int(sa.get("window", 0))
    # Linux: window 0 turns anti-replay off; the key file's windows are 64..2^20 (a smaller one is rounded up).
    anti_replay = window > 0
    rw = None if not anti_replay else min(max(window, 64), 1 << 20)
    # The key file's first-seq is where a sender continues and, less one, the highest number a receiver has
    # accepted (its replay_top): an inbound SA continues after seq (+ seq-hi), an outbound one after oseq
    # (+ oseq-hi).  Without a 'dir' line the line serves both directions, so it continues after the higher of
    # the two: a sender never sends a number twice and a receiver never accepts one twice.
    seq_in = int(replay.get("seq", 0)) | int(replay.get("seq-hi", 0)) << 32
    seq_out = int(replay.get("oseq", 0)) | int(replay.get("oseq-hi", 0)) << 32
    direction = sa.get("dir")
    if direction not in (None, "in", "out"):
        fail(f"dir {direction!r}: expected 'dir in' or 'dir out'")
    top = seq_in if direction == "in" else seq_out if direction == "out" else max(seq_in, seq_out)
    if top >= (1 << 64) - 1 or (not esn and top >= 0xFFFFFFFF):
        raise UnsupportedSaError(source, first, f"SA {name}: its sequence numbers are exhausted (seq/oseq at the "
                                 "last one)")
    line = _esp_line(sa["spi"], suite, key, bits, src=src, dst=dst, mode=str(sa.get("mode", "tunnel")), esn=esn,
                     anti_replay=anti_replay, replay_window=rw if rw not in (None, 1024) else None,
                     first_seq=top + 1, udp=sa.get("udp"))
    return f"# ip xfrm state SA at {source}:{first}", line


def _xfrm_numbers(words: List[str], n: int, fail: Callable[..., NoReturn]) -> Dict[str, int]:
    """'name value' pairs of the replay state (hex with 0x, else decimal) -> {name: value}."""
    out = {}
    for k, v in zip(words[::2], words[1::2]):
        try:
            out[k] = int(v, 0)
        except ValueError:
            fail(f"'{k}' is not a number", n, "keyfile-syntax")
    return out


def _no_sa(source: str, what: str) -> KeyImportError:
    return KeyImportError(source, 0, what, "keyfile-syntax")


def _import_all(items: Iterable[Callable[[], Tuple[str, str]]], source: str, skip_unsupported: bool,
                skipped: Optional[List[KeyImportError]]) -> List[str]:
    """The (comment, line) of every SA, in input order; an unsupported one is an error saying how to skip it,
    or with ``skip_unsupported`` a comment (and an entry in ``skipped``).  Nothing left is an error too."""
    out: List[str] = []
    n_imported = n_left_out = 0
    for item in items:
        try:
            out.extend(item())
            n_imported += 1
        except UnsupportedSaError as e:
            if not skip_unsupported:
                raise UnsupportedSaError(e.source, e.line, f"{e.reason} (--skip-unsupported leaves such SAs "
                                         "out)") from None
            n_left_out += 1
            out.append(f"# {e.source}:{e.line}: left out: {e.reason}")
            if skipped is not None:
                skipped.append(e)
    if not n_imported:
        raise _no_sa(source, f"nothing to import: every SA ({n_left_out}) is unsupported and was left out")
    return out


def from_xfrm(text: str, source: str = "<string>", skip_unsupported: bool = False,
              skipped: Optional[List[KeyImportError]] = None) -> List[str]:
    """``ip xfrm state`` (or ``ip -s xfrm state``) output -> esp-sa lines, one per SA, in input order, each
    after a comment naming where it came from; ``source`` (the input's path) goes into messages and comments."""
    blocks = _xfrm_blocks(text, source)
    if not blocks:
        raise _no_sa(source, "no SA in the input: 'ip xfrm state' prints nothing when it is not run as root "
                             "(run it as root: sudo ip xfrm state)")
    return _import_all([functools.partial(_xfrm_sa, b, source) for b in blocks], source, skip_unsupported, skipped)


# ---------------------------------------------------------------------------------------------- esp_sa UAT

#: Wireshark's esp_sa "Encryption" labels (epan/dissectors/packet-ipsec.c) -> suite, per layout.
_WS_GCM = {"AES-GCM with 8 octet ICV [RFC4106]": "aes-gcm-8", "AES-GCM with 12 octet ICV [RFC4106]": "aes-gcm-12",
           "AES-GCM with 16 octet ICV [RFC4106]": "aes-gcm-16"}
_WS_46 = {"AES-GCM with IIV and 16 octet ICV [RFC4106 & RFC8750]": "aes-gcm-16-iiv",
          "ChaCha20 with Poly1305 [RFC7634]": "chacha20-poly1305",
          "ChaCha20 with Poly1305 and IIV [RFC7634 & RFC8750]": "chacha20-poly1305-iiv"}
#: --wireshark-version -> (columns, suites it decrypts, has Protocol "Any"), read from the libwireshark of
#: Wireshark 4.0.17, 4.4.19 and 4.6.9 and checked by decrypting with tshark (tests/test_keyimport.py).
WIRESHARK_LAYOUTS: Dict[str, Tuple[int, Dict[str, str], bool]] = {
    "4.0": (8, dict(_WS_GCM), False),
    "4.4": (10, dict(_WS_GCM), False),
    "4.6": (10, {**_WS_GCM, **_WS_46}, True),
}
_LABEL_BY_SUITE = {v: k for k, v in {**_WS_GCM, **_WS_46}.items()}
#: AES-CBC with its "Authentication" label (packet-ipsec.c), in every layout.
_WS_CBC = "AES-CBC [RFC3602]"
_WS_AUTH = {"aes-cbc-hmac-sha1-96": "HMAC-SHA-1-96 [RFC2404]", "aes-cbc-hmac-sha256-128": "HMAC-SHA-256-128 [RFC4868]"}
_SUITE_BY_AUTH = {v: k for k, v in _WS_AUTH.items()}
#: Wireshark 4.6 builds the implicit IV of these suites from the 32-bit Sequence Number field with 0 above it, also
#: on an ESN SA, where RFC 8750 §3 (Figure 2) takes the 64-bit ESN: measured with tshark 4.6.9, whose decryption is
#: then exactly the one under IV 0 || Seq low (tests/test_esp_interop.py).  A row whose ESN high half is not 0 can
#: never decrypt there.
_WS_IIV_LOW_SEQ_ONLY = {"4.6": {"aes-gcm-16-iiv", "chacha20-poly1305-iiv"}}


def layout_for(version: str) -> str:
    """The WIRESHARK_LAYOUTS key for a Wireshark ``major.minor``: the newest layout not newer than it."""
    try:
        want = tuple(int(x) for x in version.split(".")[:2])
    except ValueError:
        raise KeyImportError("esp_sa export", 0, f"not a Wireshark version: {version!r}", "invalid-argument") from None
    older = [k for k in WIRESHARK_LAYOUTS if tuple(int(x) for x in k.split(".")) <= want]
    if not older:
        raise KeyImportError("esp_sa export", 0, f"Wireshark {version} is older than every layout known here "
                             f"({', '.join(WIRESHARK_LAYOUTS)})", "invalid-argument")
    return max(older, key=lambda k: tuple(int(x) for x in k.split(".")))


def _uat_fields(line: str, n: int, source: str) -> List[str]:
    """One UAT record: comma-separated "quoted" fields, with \\xNN escapes (epan/uat.c)."""
    fields, i = [], 0
    while True:
        m = re.match(r'\s*"((?:[^"\\]|\\.)*)"\s*', line[i:])
        if not m:
            raise KeyImportError(source, n, "expected comma-separated \"quoted\" fields", "keyfile-syntax")
        fields.append(re.sub(r"\\x([0-9a-fA-F]{2})", lambda x: chr(int(x.group(1), 16)), m.group(1)))
        i += m.end()
        if i == len(line):
            return fields
        if line[i] != ",":
            raise KeyImportError(source, n, "expected ',' between fields", "keyfile-syntax")
        i += 1


def _esp_sa_record(raw: str, n: int, mode: str, source: str) -> Tuple[str, str]:
    f = _uat_fields(raw.strip(), n, source)

    def fail(msg: str, code: str = "keyfile-bad-value") -> NoReturn:
        raise KeyImportError(source, n, msg, code)

    def unsupported(msg: str) -> NoReturn:
        raise UnsupportedSaError(source, n, f"SA SPI {f[3]} {f[1]} -> {f[2]}: {msg}")

    if len(f) not in (8, 10):
        fail(f"{len(f)} fields: an esp_sa record has 8 (Wireshark up to 4.2) or 10 (4.4 and later)", "keyfile-syntax")
    proto, src, dst, spi_s, enc, key_s = f[:6]
    if proto not in ("IPv4", "IPv6", "Any"):
        fail("Protocol must be IPv4, IPv6 or Any")
    addrs = []
    for what, a in (("Src IP", src), ("Dest IP", dst)):
        if a in ("*", ""):
            addrs.append(None)
            continue
        exact = _addr(a)
        if exact is None:
            unsupported(f"{what}: only an exact address or '*' has a key-file form (no ranges or wildcards)")
        if proto != "Any" and ipaddress.ip_address(exact).version != (4 if proto == "IPv4" else 6):
            fail(f"{what} is not an {proto} address")
        addrs.append(exact)
    if spi_s == "*":
        unsupported("SPI must be one SA's SPI ('*' has no key-file form)")
    if not re.fullmatch(r"0[xX][0-9a-fA-F]{1,8}|[0-9]{1,10}", spi_s):
        fail("SPI must be one SA's SPI (0x-prefixed hex or decimal)")
    spi = int(spi_s, 0)
    if spi > 0xFFFFFFFF:
        fail("SPI is above 32 bits")
    suite = {**_WS_GCM, **_WS_46}.get(enc)
    if enc == _WS_CBC:
        suite = _SUITE_BY_AUTH.get(f[6])
        if suite is None:
            unsupported(f"AES-CBC with Authentication {f[6]!r}: the core has HMAC-SHA-1-96 and HMAC-SHA-256-128")
    if suite is None:
        unsupported("Encryption is not a suite the core has (AES-GCM, ChaCha20-Poly1305, AES-CBC with HMAC)")

    def octets(text: str, what: str) -> bytes:
        # Wireshark reads a key with 0x as hex and any other as the octets of its text (packet-ipsec.c).
        k = _hex_key(text) if text[:2] in ("0x", "0X") else text.encode("latin-1", "replace")
        if k is None:
            fail(f"{what} is not hex after its 0x")
        return k

    key = octets(key_s, "Encryption Key")
    if enc == _WS_CBC:
        key += octets(f[7], "Authentication Key")  # RFC 7296 §2.17: the encryption key, then the integrity key
    bits = _key_bits(suite, key, fail)
    esn, first_seq = False, 1
    if len(f) == 10:
        if f[8] not in ("32-bit", "64-bit"):
            fail("Sequence Number length must be 32-bit or 64-bit")
        esn = f[8] == "64-bit"
        try:
            upper = int(f[9] or "0", 16)
        except ValueError:
            fail("ESN High Bits is not hex")
        if upper > 0xFFFFFFFF or (upper and not esn):
            fail("ESN High Bits needs 64-bit sequence numbers and fits in 32 bits")
        first_seq = (upper << 32) | 1 if upper else 1
    return (f"# esp_sa record at {source}:{n}",
            _esp_line(spi, suite, key, bits, src=addrs[0], dst=addrs[1], mode=mode, esn=esn, first_seq=first_seq))


def from_esp_sa(text: str, mode: str = "tunnel", source: str = "<string>", skip_unsupported: bool = False,
                skipped: Optional[List[KeyImportError]] = None) -> List[str]:
    """Wireshark's esp_sa UAT (8 or 10 columns) -> esp-sa lines.  The UAT has no mode: ``mode`` is given."""
    records = [(n, raw) for n, raw in enumerate(text.splitlines(), 1)
               if raw.strip() and not raw.lstrip().startswith("#")]
    if not records:
        raise _no_sa(source, "no esp_sa record in the input (Wireshark writes the file only once a row is added)")
    return _import_all([functools.partial(_esp_sa_record, raw, n, mode, source) for n, raw in records], source,
                       skip_unsupported, skipped)


def to_esp_sa(kf: KeyFile, wireshark_version: str = "4.0", skip_unsupported: bool = False) -> str:
    """The esp-sa lines of a parsed key file as an esp_sa UAT file for that Wireshark's ESP dissector.

    A line that Wireshark cannot decrypt (a suite it lacks; ESN before 4.4; on 4.6 an implicit-IV suite whose ESN
    high half is not 0) is an error, or with ``skip_unsupported`` a comment in the output naming its line."""
    if wireshark_version not in WIRESHARK_LAYOUTS:
        raise KeyImportError("esp_sa export", 0, f"Wireshark version must be one of {', '.join(WIRESHARK_LAYOUTS)}",
                             "invalid-argument")
    columns, suites, has_any = WIRESHARK_LAYOUTS[wireshark_version]
    rows = []
    for e in kf.esp_sas:
        s = e.settings
        cbc = str(s["suite"]) in _WS_AUTH
        label = _WS_CBC if cbc else _LABEL_BY_SUITE.get(str(s["suite"]))
        problem = None
        if label is None or (label not in suites and not cbc):
            problem = f"Wireshark {wireshark_version}'s esp_sa has no {s['suite']}"
        elif s["esn"] and columns == 8:
            problem = f"Wireshark {wireshark_version}'s ESP dissector has no ESN (use --wireshark-version 4.4 or later)"
        elif s["esn"] and int(s["first_seq"]) >> 32 and s["suite"] in _WS_IIV_LOW_SEQ_ONLY.get(wireshark_version, ()):
            problem = (f"Wireshark {wireshark_version} puts 0 where the ESN high half goes in the implicit IV of "
                       f"{s['suite']} (RFC 8750 §3 puts the high half there): this SA's packets do not decrypt in it")
        if problem and not skip_unsupported:
            raise KeyImportError("key file", e.line, problem)
        if problem:
            rows.append(f"# key file line {e.line} (SPI 0x{e.spi:08x}) left out: {problem}")
            continue
        family = {e.src, e.dst} - {None}
        if family:
            protos = ["IPv6" if ":" in next(iter(family)) else "IPv4"]
        else:
            # Before 4.6 there is no "Any": one row per family, as the key file's line matches both.
            protos = ["Any"] if has_any else ["IPv4", "IPv6"]
        key = bytes(s["key"])  # type: ignore[arg-type]
        enc_key, auth = key, ["NULL", ""]
        if cbc:  # KEYMAT: the AES key, then the integrity key (RFC 7296 §2.17)
            n = int(s["key_bits"]) // 8  # type: ignore[call-overload]
            enc_key, auth = key[:n], [_WS_AUTH[str(s["suite"])], "0x" + key[n:].hex()]
        for p in protos:
            row = [p, e.src or "*", e.dst or "*", f"0x{e.spi:08x}", label, "0x" + enc_key.hex(), *auth]
            if columns == 10:
                row += ["64-bit" if s["esn"] else "32-bit", f"{int(s['first_seq']) >> 32:x}"]  # type: ignore
            rows.append(",".join(f'"{c}"' for c in row))
    header = f"# esp_sa for Wireshark {wireshark_version} from a psp-eesp key file: it holds keys, keep it private\n"
    return header + "".join(r + "\n" for r in rows)


def to_ip_xfrm(kf: KeyFile, src: Optional[str] = None, dst: Optional[str] = None,
               skip_unsupported: bool = False) -> str:
    """The esp-sa lines of a parsed key file as ``ip xfrm state add`` commands for Linux's ESP (one per line).

    The addresses are the line's ``src``/``dst``, or ``src``/``dst`` given here; the names are those the import
    reads back (XFRM_AEADS, XFRM_AUTHS: net/xfrm/xfrm_algo.c's).  Linux has no RFC 8750 implicit-IV suites and no
    TFC padding setting: such a line is an error, or with ``skip_unsupported`` a comment naming it.  The
    policies that steer traffic into the SAs depend on the host's addresses and are left to the user (the
    output's first lines say so)."""
    aead_names = {suite: name for name, suite in XFRM_AEADS.items()}
    auth_names = {suite: name for name, suite in XFRM_AUTHS.items()}
    out = ["# ip xfrm state for Linux's ESP from a psp-eesp key file: it holds keys, keep it private",
           "# add 'ip xfrm policy' rules for the traffic to protect (docs/tunnel.md, \"Against Linux's ESP\")"]
    for reqid, e in enumerate(kf.esp_sas, start=1):
        st = e.settings
        suite, key = str(st["suite"]), bytes(st["key"])  # type: ignore[arg-type]
        a, b = e.src or src, e.dst or dst
        problem = None
        if suite not in aead_names and suite not in auth_names:
            problem = f"Linux's ESP has no {suite}"
        elif not a or not b:
            problem = "the line has no src and dst, and none were given (--src, --dst)"
        elif st.get("tfc_pad"):
            problem = "ip xfrm sets no TFC padding"
        if problem and not skip_unsupported:
            raise KeyImportError("key file", e.line, problem)
        if problem:
            out.append(f"# key file line {e.line} (SPI 0x{e.spi:08x}) left out: {problem}")
            continue
        w = ["ip", "xfrm", "state", "add", "src", a, "dst", b, "proto", "esp", "spi", f"0x{e.spi:08x}",
             "reqid", str(reqid), "mode", str(st["mode"])]
        # replay-window 0 turns Linux's anti-replay off; iproute2 gives a window over 32 a bitmap of its own
        w += ["replay-window", str(int(st["replay_window"]) if st["anti_replay"] else 0)]  # type: ignore
        if st["esn"]:
            w += ["flag", "esn"]
        if suite in aead_names:
            name, icv = aead_names[suite]
            w += ["aead", f"'{name}'", "0x" + key.hex(), str(icv)]
        else:  # KEYMAT: the AES key, then the integrity key (RFC 7296 §2.17)
            n = int(st["key_bits"]) // 8  # type: ignore[call-overload]
            name, icv = auth_names[suite]
            w += ["enc", f"'{XFRM_CBC}'", "0x" + key[:n].hex(), "auth-trunc", f"'{name}'", "0x" + key[n:].hex(), str(icv)]
        if st["udp_encap"]:
            w += ["encap", "espinudp", str(st["udp_sport"]), str(st["udp_dport"]), "0.0.0.0"]
        if int(st["first_seq"]) > 1:  # type: ignore[call-overload]
            top = int(st["first_seq"]) - 1  # type: ignore[call-overload]
            w += ["replay-oseq", str(top & 0xFFFFFFFF), "replay-seq", str(top & 0xFFFFFFFF)]
            if st["esn"]:
                w += ["replay-oseq-hi", str(top >> 32), "replay-seq-hi", str(top >> 32)]
        out.append(" ".join(w))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------- PSP netlink

#: psp.yaml's "version" enum: hdr0-aes-gcm-128, hdr0-aes-gcm-256, hdr0-aes-gmac-128, hdr0-aes-gmac-256.
PSP_VERSIONS = {"hdr0-aes-gcm-128": 0, "hdr0-aes-gcm-256": 1, "hdr0-aes-gmac-128": 2, "hdr0-aes-gmac-256": 3}


def _objects(text: str, source: str) -> List[Tuple[int, object]]:
    """The top-level values of ynl output (Python repr) or JSON: one document, or one per line."""
    stripped = text.strip()
    if not stripped:
        raise _no_sa(source, "no input")
    for loads in (json.loads, ast.literal_eval):
        try:
            v = loads(stripped)
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            continue
        start = text[: len(text) - len(text.lstrip())].count("\n") + 1
        return [(start, x) for x in v] if isinstance(v, list) else [(start, v)]
    out = []
    for n, ln in enumerate(text.splitlines(), 1):
        if not ln.strip():
            continue
        for loads in (json.loads, ast.literal_eval):
            try:
                v = loads(ln.strip())
                break
            except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
                continue
        else:
            raise KeyImportError(source, n, "neither JSON nor ynl's Python-style output", "keyfile-syntax")
        out.extend((n, x) for x in (v if isinstance(v, list) else [v]))
    return out


def _psp_key_bytes(v: object, fail) -> bytes:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, str):
        k = _hex_key(v.replace(":", "") if re.fullmatch(r"(?:[0-9a-fA-F]{2}:)+[0-9a-fA-F]{2}", v) else v)
        if k is not None:
            return k
    if isinstance(v, list) and all(isinstance(b, int) and 0 <= b <= 255 for b in v):
        return bytes(v)
    fail("'key' must be bytes, hex or a list of octets")
    raise AssertionError  # unreachable


def from_psp_netlink(text: str, source: str = "<string>") -> List[str]:
    """rx-assoc replies / tx-assoc requests of the psp netlink family -> psp-key (and for tx, psp-sa) lines."""
    out: List[str] = []
    for n, obj in _objects(text, source):
        def fail(msg: str, code: str = "keyfile-bad-value") -> NoReturn:
            raise KeyImportError(source, n, msg, code)

        if not isinstance(obj, dict):
            fail("expected an object with 'rx-key' or 'tx-key'", "keyfile-syntax")
        version = obj.get("version")
        if version is not None:
            if isinstance(version, str) and version in PSP_VERSIONS:
                version = PSP_VERSIONS[version]
            elif not (isinstance(version, int) and not isinstance(version, bool) and 0 <= version <= 3):
                fail("'version' must be one of " + ", ".join(PSP_VERSIONS) + " (or 0..3)")
        found = False
        for which in ("rx-key", "tx-key"):
            if which not in obj:
                continue
            found = True
            k = obj[which]
            if not isinstance(k, dict) or "key" not in k or "spi" not in k:
                fail(f"'{which}' must hold 'key' and 'spi'", "keyfile-syntax")
            spi = k["spi"]
            if isinstance(spi, str):
                try:
                    spi = int(spi, 0)
                except ValueError:
                    fail("'spi' is not a number")
            if not isinstance(spi, int) or isinstance(spi, bool) or not 0 <= spi <= 0xFFFFFFFF:
                fail("'spi' must be a 32-bit number")
            key = _psp_key_bytes(k["key"], fail)
            if len(key) not in (16, 32):
                fail("a PSP key is 16 octets (AES-128) or 32 octets (AES-256)")
            if version is not None and len(key) != (16 if version in (0, 2) else 32):
                fail("the key length does not match 'version'")
            ver = f" version={version}" if version is not None else ""
            out.append(f"# psp netlink {which.split('-')[0]}-assoc at {source}:{n}")
            out.append(f"psp-key spi=0x{spi:08x} key={key.hex()}{ver}")
            if which == "tx-key":
                if version is None:
                    fail("a tx-assoc needs 'version' to make a sending SA")
                # The kernel's PSP is transport mode over UDP (Documentation/networking/psp.rst).
                out.append(f"psp-sa spi=0x{spi:08x} version={version} mode=transport")
        if not found:
            fail("expected an object with 'rx-key' or 'tx-key'", "keyfile-syntax")
    return out


# ---------------------------------------------------------------------------------------------- CLI

IMPORTERS = {"xfrm": from_xfrm, "esp_sa": from_esp_sa, "psp-netlink": from_psp_netlink}


def _read(path: str) -> str:
    name = "<stdin>" if path == "-" else path
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8", errors="strict") as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise KeyImportError(name, 0, "not UTF-8 text", "keyfile-syntax") from None
    except OSError as e:
        raise KeyImportError(name, 0, f"cannot read: {e.strerror}", "capture-io") from None


def _write(path: Optional[str], text: str) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds keys (docs/keys.md)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def cmd_import(args: argparse.Namespace) -> int:
    text = _read(args.file)
    source = "<stdin>" if args.file == "-" else args.file
    skipped: List[KeyImportError] = []
    if args.source == "psp-netlink":
        lines = from_psp_netlink(text, source)
    elif args.source == "esp_sa":
        lines = from_esp_sa(text, args.mode, source, args.skip_unsupported, skipped)
    else:
        lines = from_xfrm(text, source, args.skip_unsupported, skipped)
    for e in skipped:
        print(f"{getattr(args, 'prog', 'keys import')}: left out: {e}", file=sys.stderr)
    out = "\n".join(lines) + "\n"
    parse_key_file(out, "<imported>")  # what we write, the core reads
    _write(args.output, out)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from pecore.keys import load_key_file

    kf = load_key_file(args.keyfile)
    if args.target == "ip-xfrm":
        _write(args.output, to_ip_xfrm(kf, args.src, args.dst, args.skip_unsupported))
        return 0
    layout = layout_for(args.wireshark_version)
    _write(args.output, to_esp_sa(kf, layout, args.skip_unsupported))
    return 0


def register(sub) -> None:  # type: ignore[no-untyped-def]
    """``keys import --from xfrm|esp_sa|psp-netlink FILE [-o OUT]`` and ``keys export --to esp_sa|ip-xfrm KEYFILE``."""
    k = sub.add_parser("keys", help="import keys from ip xfrm / Wireshark / PSP netlink, export to Wireshark")
    ks = k.add_subparsers(dest="keys_command", required=True)
    i = ks.add_parser("import", help="write key-file lines for the SAs of another tool's output")
    i.add_argument("--from", dest="source", required=True, choices=sorted(IMPORTERS))
    i.add_argument("file", help="the input ('-' for standard input)")
    i.add_argument("-o", "--output", help="key file to write (mode 600; default standard output)")
    i.add_argument("--mode", choices=("tunnel", "transport"), default="tunnel",
                   help="esp_sa only: the UAT has no mode (default tunnel)")
    i.add_argument("--skip-unsupported", action="store_true",
                   help="xfrm, esp_sa: leave out (with a message and a comment) SAs the key file has no form for "
                        "(AH, CBC, BEET, ...) instead of failing")
    i.set_defaults(func=cmd_import)
    e = ks.add_parser("export", help="write the key file's esp-sa lines as Wireshark's esp_sa UAT, or as ip xfrm "
                                     "state commands for Linux's ESP")
    e.add_argument("--to", dest="target", required=True, choices=("esp_sa", "ip-xfrm"))
    e.add_argument("keyfile")
    e.add_argument("-o", "--output", help="file to write (mode 600; default standard output)")
    e.add_argument("--wireshark-version", default="4.0", metavar="MAJOR.MINOR",
                   help="column layout and suites of that Wireshark: those of the newest of "
                        f"{', '.join(WIRESHARK_LAYOUTS)} not newer than it (default 4.0)")
    e.add_argument("--skip-unsupported", action="store_true",
                   help="leave out (with a comment) lines that Wireshark (or Linux) cannot take instead of failing")
    e.add_argument("--src", help="ip-xfrm: the source address of lines without src=")
    e.add_argument("--dst", help="ip-xfrm: the destination address of lines without dst=")
    e.set_defaults(func=cmd_export)
