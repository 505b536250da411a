"""``pyeesp diagnose``: why does an EESP packet not verify?

Give it the packets (a capture, or the hex of one packet) and the SAs the
implementer believes in (key-file ``eesp-sa`` lines or one SA on the command
line).  Every packet is first opened with the correct algorithm (the core's
:class:`pyeesp.Receiver`, without replay checks).  When that fails, the packet
is recomputed with the known mistakes (eesp.md §3-§12, D1-D16), alone and in
pairs, until one reproduces its ICV exactly:

- packet structure: Sequence Number left out or sent when the SA has none,
  the explicit IV left out (implicit IV used) or sent with an implicit-IV
  suite, the nonce taken from the Sequence Number although an IV is sent,
  another ICV length;
- key: the Session ID in the SSKDF info in little-endian order, 1 or 4
  octets long, or left out; the salt taken from the front of the KEYMAT; a
  KEYMAT length L for another salt length or key size; another SSKDF hash;
  the root key used without the SSKDF; the key of another Sub SA (in
  particular the Session ID written little-endian in the Base Header);
- AAD: the explicit IV left out (Linux XFRM variant, D1) or put in, the
  options left out, an ESP-style AAD (SPI ‖ Sequence Number), the cleartext
  part of a Crypt Offset left out, the Crypt Offset in octets or counted from
  the Base Header, GMAC payload encrypted / GCM payload left in clear;
- nonce: the IV in little-endian order, the salt after the IV.

When the ICV verifies but the packet is still refused, or decodes to
something other than a packet, the decrypted content is examined: full format
(PIH) sent on an SA that expects optimized and the reverse, an ESP trailer
instead of the PIH, a Pad Length that does not match the inner packet, the
PIH's Next Header, Sequence Number 0, a Session ID out of range, the
PayloadOffset, a Crypt Offset reaching into the padding.  Verified packets
are checked for padding that is not zero (ESP's 1, 2, 3, ...) or longer than
D11's, and reported with warnings.

The recomputations go through ``pecore.primitives`` (the core's AEAD and
HKDF-Expand); this module does no cryptography of its own.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

from pecore import primitives as prim
from pecore.tools._tables import SUITES
from pecore.tools.cli import addresses
from pecore.tools.diagnose import (
    DIAGNOSED,
    MALFORMED,
    NO_KEY,
    UNDIAGNOSED,
    VERIFIES,
    Choice,
    DiagnoseInputError,
    Mistake,
    PacketReport,
    Report,
    add_common_arguments,
    bswap,
    dedupe,
    diagnosis_sas,
    ip_lengths,
    load_input,
    parse_hex,
    run_ipsec_diagnose,
    same_addr,
    search,
)
from pecore.keys import EespSaEntry
from pecore.protocol import crypt_offset_decode, eesp_suite, keymat_key_bits, locate_eesp
from pecore.util import key_bytes
from pyeesp.errors import ConfigurationError, EespError
from pyeesp.header import Header
from pyeesp.sa import SA, Receiver, suite_id

SPEC = "eesp.md"
BASE_LEN, SEQ_LEN, IV_LEN, PIH_LEN = 8, 8, 8, 4
UDP_PORT = 4500

_HASHES = {"hkdf-sha256": "sha256", "hkdf-sha384": "sha384", "hkdf-sha512": "sha512"}

#: Core statuses raised before the payload is looked at, which no crypto mistake explains.
_HEADER_ERRORS = {"eesp-reserved-bits-set", "eesp-compat-bit-clear", "eesp-unsupported-version",
                  "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-unknown-option", "not-eesp"}

SaSpec = Union[SA, EespSaEntry, Mapping[str, object]]
_SA_PARAMS = frozenset(inspect.signature(SA.__init__).parameters) - {"self"}


def _m(id: str, field: str, description: str, sent: Optional[str] = None, expected: Optional[str] = None,
       ref: str = SPEC, severity: str = "error") -> Mistake:
    return Mistake(id, field, description, sent, expected, ref, severity)


def _warn(*args, **kw) -> Mistake:
    return _m(*args, severity="warning", **kw)


# --------------------------------------------------------------------------- SAs


class _Sa:
    """What the diagnosis needs to know about one SA, from its settings (keyword arguments of :class:`pyeesp.SA`)."""

    def __init__(self, settings: Mapping[str, object], dst: Optional[str] = None) -> None:
        s = dict(settings)
        s.pop("self", None)
        self.settings = s
        self.spi = int(s["spi"])  # type: ignore[arg-type]
        self.encr = suite_id(s.get("suite", "aes-gcm-16"))  # type: ignore[arg-type]
        self.suite = eesp_suite(self.encr).name  # type: ignore[union-attr]
        self.info = SUITES[self.suite]  # the core's row
        self.kind, self.icv_len, self.salt_len = self.info.kind, self.info.icv, self.info.salt
        self.iiv = self.info.iiv
        self.keymat: Optional[bytes] = None
        self.root: Optional[bytes] = None
        self.hash = None
        if s.get("key") is not None:
            self.keymat = key_bytes(s["key"], "key", ConfigurationError)  # type: ignore[arg-type]
        else:
            self.root = key_bytes(s["root_key"], "root key", ConfigurationError)  # type: ignore[arg-type]
            self.hash = _HASHES.get(str(s.get("sskdf") or "hkdf-sha256").lower().replace("_", "-"), "sha256")
        # The AES key size as pyeesp.SA takes it: given, or from the KEYMAT's length (0 for ChaCha20-Poly1305).
        bits = keymat_key_bits(self.encr, self.keymat, s.get("key_bits"), "EESP", ConfigurationError)  # type: ignore
        self.key_len = bits // 8 or 32
        self.seq = bool(s.get("seq", True))
        self.aad = str(s.get("aad", "draft"))
        self.format = str(s.get("format", "auto"))
        self.mode = str(s.get("mode", "tunnel"))
        self.max_sub_sa_id = s.get("max_sub_sa_id")
        self.max_crypt_offset = s.get("max_crypt_offset")
        self.ip_protocol = int(s.get("ip_protocol", 49))  # type: ignore[arg-type]
        self.dst = dst if dst is not None else s.get("dst")
        self._receiver: Optional[Receiver] = None
        # Check the settings once, as the product would.
        self.receiver()

    @property
    def iv_len(self) -> int:
        return 0 if self.iiv else IV_LEN

    @property
    def keymat_len(self) -> int:
        return self.key_len + self.salt_len

    def describe(self) -> str:
        return f"SA {self.spi:#010x} ({self.suite}{'' if self.kind == 'chacha' else f', {self.key_len * 8}-bit'})"

    def receiver(self) -> Receiver:
        """The core's receiver for this SA, without replay checks or policy drops (the diagnosis reports those)."""
        if self._receiver is None:
            s = {k: v for k, v in self.settings.items() if k in _SA_PARAMS}
            s.update(anti_replay=False, crypt_offset=None, strict=False, max_crypt_offset=255, dst=None,
                     options=b"", tunnel_header=None)
            self._receiver = Receiver([SA(**s)], ip_protocol=self.ip_protocol)
        return self._receiver

    def with_spi(self, spi: int) -> "_Sa":
        return _Sa({**self.settings, "spi": spi}, self.dst)

    def packet_format(self, has_co: bool) -> str:
        """D2."""
        if self.format in ("full", "optimized"):
            return self.format
        if has_co:
            return "full"
        return "optimized" if self.mode == "tunnel" else "full"

    def keymat_for(self, session_id: int, *, info: Optional[bytes] = None, length: Optional[int] = None,
                   hash: Optional[str] = None) -> bytes:
        if self.keymat is not None:
            return self.keymat
        info = session_id.to_bytes(2, "big") if info is None else info
        return prim.hkdf_expand(hash or self.hash, self.root, info, length or self.keymat_len)  # type: ignore[arg-type]

    def split(self, km: bytes) -> Tuple[bytes, bytes]:
        return km[: -self.salt_len], km[-self.salt_len :]


# ----------------------------------------------------------------------- packets


@dataclass
class _Options:
    opt_len: int
    items: List[Tuple[int, bytes]]
    co: Optional[Tuple[int, int, int]]  # PayloadOffset, CryptOffset, R


def _parse_options(eesp: bytes) -> Optional[_Options]:
    """The options as the core walks them for display (past a bad Base Header or Crypt Offset option);
    None when they run past Opt Len or the packet."""
    hdr, _status = Header.parse_lenient(eesp)
    if hdr is None:
        return None
    opt_len = eesp[1]  # the wire's Opt Len, also when the options could not be walked
    if BASE_LEN + opt_len > len(eesp) or (opt_len and not hdr.options):
        return None
    items = [(o.type, o.data) for o in hdr.options]
    # the fields of the first well-formed Crypt Offset option, as the core's lenient parse takes them
    first = next((o for o in hdr.options if o.type == 2 and len(o.data) == 2), None)
    co = crypt_offset_decode(int.from_bytes(first.data, "big")) if first is not None else None
    return _Options(opt_len, items, co)


_OPT_NAMES = {0: "Pad1", 1: "PadN", 2: "CryptOffset"}


@dataclass(frozen=True)
class _Structure:
    seq: bool
    iv: bool
    icv_len: int
    nonce_from: str  # "iv" or "seq"


def _open_status(receiver: Receiver, eesp: bytes) -> Optional[EespError]:
    """Open bare EESP octets on the SA's receiver as an IPv4 packet's payload would be; the error, or None."""
    try:
        receiver.open(eesp, ip_version=4)
    except EespError as e:
        return e
    return None


def _payload_length(nh: int, data: bytes) -> Optional[Tuple[int, str]]:
    """The length a payload's own header announces, and which field says so; None when it has none."""
    ipl = ip_lengths(data)
    if nh == 4 and ipl and ipl[0] == 4:
        return ipl[1], "the inner IPv4 Total Length"
    if nh == 41 and ipl and ipl[0] == 6:
        return ipl[1], "40 + the inner IPv6 Payload Length"
    if nh == 17 and len(data) >= 8 and int.from_bytes(data[4:6], "big") >= 8:
        return int.from_bytes(data[4:6], "big"), "the UDP Length"
    return None


def _padding_warnings(pad: bytes, covered: int) -> List[Mistake]:
    """Padding content and size (D11): zeros, to the next multiple of 4 of what it follows."""
    out = []
    if any(pad):
        if pad == bytes(range(1, len(pad) + 1)):
            out.append(_warn("padding-esp-style", "Padding",
                             "the padding is ESP's 1, 2, 3, ... (RFC 4303 §2.4)",
                             pad.hex(), f"{len(pad)} octets of 0x00", f"{SPEC} §7, D11"))
        else:
            out.append(_warn("padding-not-zero", "Padding", "the padding octets are not zero",
                             pad.hex(), f"{len(pad)} octets of 0x00", f"{SPEC} §7, D11"))
    need = -covered % 4
    if len(pad) > need:
        out.append(_warn("padding-longer-than-needed", "Pad Length",
                         "more padding than the 4-octet alignment needs (receivers accept it)",
                         f"{len(pad)} octets", f"{need} octet{'s' if need != 1 else ''} (to a multiple of 4)",
                         f"{SPEC} D11"))
    return out


# --------------------------------------------------------------------- diagnoser


class EespDiagnoser:
    """Diagnoses EESP packets against a set of SAs (``pyeesp.SA`` objects, key-file entries or settings mappings)."""

    def __init__(self, sas: Iterable[SaSpec], *, max_mistakes: int = 2, udp_port: int = UDP_PORT) -> None:
        self.sas: List[_Sa] = diagnosis_sas(sas, SA, EespSaEntry, "pyeesp.SA", ConfigurationError, _Sa)
        self.protocols = {sa.ip_protocol for sa in self.sas}
        self.udp_port = udp_port
        self.max_mistakes = max_mistakes
        self.hints: Dict[tuple, int] = {}
        self._key_cache: Dict[Tuple[int, int], List[Choice]] = {}

    # ----------------------------------------------------------------- input

    def locate(self, ip: bytes) -> Optional[bytes]:
        """The EESP part of an IP packet (after the IP header, or in UDP 4500), or None."""
        for protocol in sorted(self.protocols):
            loc, _ = locate_eesp(ip, protocol, self.udp_port, either_port=True)
            if loc is not None:
                part = ip[loc.offset : loc.offset + loc.length]
                return part if loc.udp_encap or self.is_part(part) else None
        return None

    @staticmethod
    def is_part(data: bytes) -> bool:
        return bool(data) and data[0] & 0x80 != 0

    def _sas_for(self, spi: int, dst: Optional[str]) -> List[_Sa]:
        out = [sa for sa in self.sas if sa.spi == spi and (sa.dst is None or dst is None or same_addr(sa.dst, dst))]
        return sorted(out, key=lambda sa: sa.dst is None)  # an SA bound to the destination first

    # ---------------------------------------------------------------- choices

    def _structures(self, sa: _Sa) -> List[Choice]:
        iv_name = f"explicit {IV_LEN}-octet IV ({sa.suite})"
        out = [Choice("right", _Structure(sa.seq, not sa.iiv, sa.icv_len, "seq" if sa.iiv else "iv"))]
        if not sa.iiv and sa.seq:
            out.append(Choice("iiv", _Structure(True, False, sa.icv_len, "seq"), (
                _m("implicit-iv", "IV", "no IV field sent: the nonce built from the Sequence Number (implicit IV, RFC 8750)",
                   "no IV field; nonce = salt ‖ Sequence Number", iv_name, f"{SPEC} §10"),)))
            out.append(Choice("nonce-seq", _Structure(True, True, sa.icv_len, "seq"), (
                _m("nonce-from-sequence", "AEAD nonce",
                   "the nonce built from the Sequence Number although an explicit IV is sent",
                   "salt ‖ Sequence Number", "salt ‖ the IV field", f"{SPEC} §10"),)))
        if sa.iiv:
            out.append(Choice("eiv", _Structure(True, True, sa.icv_len, "iv"), (
                _m("explicit-iv", "IV", "an explicit IV field sent with an implicit-IV suite",
                   "an 8-octet IV field (nonce = salt ‖ IV)",
                   f"no IV field: nonce = salt ‖ Sequence Number ({sa.suite}, RFC 8750)", f"{SPEC} §10"),)))
            out.append(Choice("eiv-seq", _Structure(True, True, sa.icv_len, "seq"), (
                _m("explicit-iv", "IV", "an explicit IV field sent with an implicit-IV suite",
                   "an 8-octet IV field", f"no IV field ({sa.suite}, RFC 8750)", f"{SPEC} §10"),)))
        if sa.seq and not sa.iiv:
            out.append(Choice("no-seq", _Structure(False, True, sa.icv_len, "iv"), (
                _m("sequence-number-absent", "Sequence Number",
                   "no Sequence Number field sent on an SA with 64-bit sequence numbers",
                   "no Sequence Number", "an 8-octet Sequence Number after the options", f"{SPEC} §5"),)))
        if not sa.seq:
            out.append(Choice("seq", _Structure(True, not sa.iiv, sa.icv_len, "iv"), (
                _m("sequence-number-present", "Sequence Number",
                   "a Sequence Number field sent on an SA without sequence numbers (SN = None)",
                   "an 8-octet Sequence Number", "no Sequence Number field", f"{SPEC} §5, §11"),)))
        if sa.kind in ("gcm", "ccm"):
            for t in (8, 12, 16):
                if t != sa.icv_len:
                    out.append(Choice(f"icv{t}", _Structure(sa.seq, not sa.iiv, t, "seq" if sa.iiv else "iv"), (
                        _m("icv-length", "ICV length", "an ICV of another length (another suite of the family)",
                           f"{t} octets", f"{sa.icv_len} octets ({sa.suite})", f"{SPEC} §10"),)))
        return out

    def _key_choices(self, sa: _Sa, sid: int) -> List[Choice]:
        cache_key = (id(sa), sid)
        if cache_key in self._key_cache:
            return self._key_cache[cache_key]
        out: List[Choice] = []
        salt_ref = f"{SPEC} §10, §12"
        if sa.keymat is not None:
            km = sa.keymat
            out.append(Choice("right", sa.split(km)))
            out.append(Choice("salt-front", (km[sa.salt_len :], km[: sa.salt_len]), (
                _m("salt-from-front", "salt (KEYMAT split)", "the salt taken from the front of the KEYMAT",
                   f"the first {sa.salt_len} octets", f"the last {sa.salt_len} octets (KEYMAT = key ‖ salt)",
                   salt_ref),)))
        else:
            L, be = sa.keymat_len, sid.to_bytes(2, "big")
            right_info = f"{be.hex()} (Session ID, 2 octets big-endian)"
            info_field = "SSKDF info (Session ID encoding)"

            def km(info=None, length=None, hash=None, session=sid) -> bytes:
                return sa.keymat_for(session, info=info, length=length, hash=hash)

            out.append(Choice("right", sa.split(km())))
            out.append(Choice("info-le", sa.split(km(sid.to_bytes(2, "little"))), (
                _m("sskdf-session-id-byte-order", info_field, "the Session ID in little-endian order in the SSKDF info",
                   sid.to_bytes(2, "little").hex(), right_info, f"{SPEC} §12, D4"),)))
            for n in (4, 1):
                if sid < 256 ** n:
                    info = sid.to_bytes(n, "big")
                    out.append(Choice(f"info-{n}", sa.split(km(info)), (
                        _m("sskdf-session-id-length", info_field,
                           f"the Session ID encoded in {n} octet{'s' if n > 1 else ''} in the SSKDF info",
                           info.hex(), right_info, f"{SPEC} §12, D4"),)))
            out.append(Choice("info-empty", sa.split(km(b"")), (
                _m("sskdf-session-id-missing", info_field, "an empty SSKDF info (the Session ID left out)",
                   "empty info", right_info, f"{SPEC} §12, D4"),)))
            k = km()
            out.append(Choice("salt-front", (k[sa.salt_len :], k[: sa.salt_len]), (
                _m("salt-from-front", "salt (KEYMAT split)", "the salt taken from the front of the Sub SA KEYMAT",
                   f"the first {sa.salt_len} octets", f"the last {sa.salt_len} octets (KEYMAT = key ‖ salt)",
                   salt_ref),)))
            lengths = sorted({sa.key_len + 3, sa.key_len + 4, 19, 20, 27, 28, 35, 36} - {L})
            for other in lengths:
                k2 = km(length=other)
                pair = (k2[: sa.key_len], k2[other - sa.salt_len : other])
                if other - sa.key_len in (3, 4):
                    m = _m("salt-length", "salt length (SSKDF L)",
                           f"a {other - sa.key_len}-octet salt assumed: the KEYMAT derived with L = {other}",
                           f"L = {other}", f"L = {L} ({sa.key_len}-octet key ‖ {sa.salt_len}-octet salt)", salt_ref)
                else:
                    m = _m("sskdf-length", "SSKDF output length L",
                           "the Sub SA KEYMAT derived with the length of another key size or suite",
                           f"L = {other}", f"L = {L} ({sa.key_len}-octet key ‖ {sa.salt_len}-octet salt)", salt_ref)
                out.append(Choice(f"len-{other}", pair, (m,)))
            for h in ("sha256", "sha384", "sha512"):
                if h != sa.hash:
                    out.append(Choice(f"hash-{h}", sa.split(km(hash=h)), (
                        _m("sskdf-hash", "SSKDF hash", "HKDF-Expand run with another hash",
                           f"HKDF-{h.upper()}", f"HKDF-{sa.hash.upper()} (the SA's sskdf)", f"{SPEC} §12"),)))
            root = sa.root or b""
            if len(root) >= L:
                out.append(Choice("root-direct", sa.split(root[:L]), (
                    _m("sskdf-not-applied", "Sub SA key", "the root key used as the KEYMAT, without the SSKDF",
                       f"the first {L} octets of the root key", f"HKDF-Expand(root key, Session ID, {L})",
                       f"{SPEC} §12"),)))
            swapped = bswap(sid, 2)
            limit = 0x10000 if sa.max_sub_sa_id is None else int(sa.max_sub_sa_id) + 1  # type: ignore[arg-type]
            others = set(range(min(limit, 64))) | {sid - 1, sid + 1, swapped}
            for other in sorted(o for o in others if 0 <= o <= 0xFFFF and o != sid):
                pair = sa.split(km(session=other))
                if other == swapped:
                    m = _m("session-id-byte-order", "Session ID (Base Header octets 2-3)",
                           "the Session ID written little-endian in the Base Header",
                           f"{sid} on the wire for the key of Sub SA {other}",
                           f"{other} (octets {other.to_bytes(2, 'big').hex()})", f"{SPEC} §3")
                else:
                    m = _m("wrong-sub-sa", "Sub SA key (Session ID)",
                           f"the key of another Sub SA: Session ID {other} instead of {sid}",
                           f"the key of Session ID {other}", f"the key of Session ID {sid} (as in the Base Header)",
                           f"{SPEC} §12")
                out.append(Choice(f"sub-{other}", pair, (m,)))
            if swapped < sid:  # the smaller Session ID is the likelier intent: name the Base Header first
                first = next(i for i, c in enumerate(out) if c.key == f"sub-{swapped}")
                out.insert(1, out.pop(first))
        out = dedupe(out)
        self._key_cache[cache_key] = out
        return out

    @staticmethod
    def _aad_choices(sa: _Sa, opts: _Options) -> List[Choice]:
        out = [Choice("right", "right")]
        if sa.kind == "gmac":
            out.append(Choice("gmac-encrypted", "gmac-encrypted", (
                _m("gmac-payload-encrypted", "AEAD (suite)", "the payload encrypted with AES-GCM on an AES-GMAC SA",
                   "AES-GCM: payload encrypted", "AES-GMAC: everything authenticated, nothing encrypted",
                   f"{SPEC} §9"),)))
        else:
            if sa.aad == "draft":
                out.append(Choice("flip-iv", "flip-iv", (
                    _m("aad-iv-excluded", "AAD (D1 variant)",
                       "the explicit IV left out of the AAD (the Linux XFRM prototype's variant)",
                       "AAD = Base ‖ Options ‖ Seq", "AAD = Base ‖ Options ‖ Seq ‖ IV (aad = draft)",
                       f"{SPEC} §9, D1"),)))
            else:
                out.append(Choice("flip-iv", "flip-iv", (
                    _m("aad-iv-included", "AAD (D1 variant)", "the explicit IV put into the AAD (the draft's AAD)",
                       "AAD = Base ‖ Options ‖ Seq ‖ IV", "AAD = Base ‖ Options ‖ Seq (aad = linux-xfrm)",
                       f"{SPEC} §9, D1"),)))
            if sa.kind == "gcm":
                out.append(Choice("gcm-as-gmac", "gcm-as-gmac", (
                    _m("gcm-as-gmac", "AEAD (suite)", "the payload left in clear and authenticated (AES-GMAC)",
                       "AES-GMAC: nothing encrypted", f"{sa.suite}: PIH, payload and padding encrypted",
                       f"{SPEC} §9"),)))
            out.append(Choice("esp", "esp", (
                _m("aad-esp-style", "AAD", "ESP's AAD (SPI ‖ Sequence Number, RFC 4106) instead of the EESP headers",
                   "AAD = SPI ‖ Seq", "AAD = Base ‖ Options ‖ Seq" + (" ‖ IV" if sa.aad == "draft" else ""),
                   f"{SPEC} §9"),)))
            if opts.co is not None and opts.co[1]:
                co = opts.co[1]
                out.append(Choice("co-octets", "co-octets", (
                    _m("crypt-offset-in-octets", "Crypt Offset option (CryptOffset)",
                       "the CryptOffset counted in octets instead of 4-octet units",
                       f"{co} octets in clear", f"{4 * co} octets in clear ({co} units)", f"{SPEC} §4"),)))
                out.append(Choice("co-from-base", "co-from-base", (
                    _m("crypt-offset-from-base-header", "Crypt Offset option (CryptOffset)",
                       "the CryptOffset counted from the start of the Base Header (like PayloadOffset)",
                       f"encryption from octet {4 * co}", f"encryption from octet {4 * (opts.co[0] + co)} "
                       "(CryptOffset counts from the PIH / payload)", f"{SPEC} §4"),)))
                out.append(Choice("clear-out", "clear-out", (
                    _m("clear-part-outside-aad", "AAD", "the octets a Crypt Offset exposes left out of the AAD",
                       "AAD ends at the IV", "AAD runs up to the first encrypted octet", f"{SPEC} §9"),)))
        if opts.opt_len:
            out.append(Choice("no-opts", "no-opts", (
                _m("aad-options-excluded", "AAD", "the options left out of the AAD",
                   "AAD without the Options", "AAD = Base ‖ Options ‖ ...", f"{SPEC} §9"),)))
        return out

    @staticmethod
    def _nonce_choices() -> List[Choice]:
        return [
            Choice("right", "right"),
            Choice("iv-le", "iv-le", (_m("nonce-iv-byte-order", "AEAD nonce", "the IV in little-endian order in the nonce",
                                         "salt ‖ IV reversed", "salt ‖ IV as on the wire", f"{SPEC} §10"),)),
            Choice("salt-after", "salt-after", (_m("nonce-salt-order", "AEAD nonce", "the salt after the IV in the nonce",
                                                   "IV ‖ salt", "salt ‖ IV", f"{SPEC} §10"),)),
        ]

    # ---------------------------------------------------------- computation

    def _compute(self, sa: _Sa, eesp: bytes, opts: _Options, st: _Structure, keysalt: Tuple[bytes, bytes],
                 aadv: str, noncev: str):
        """(alg, key, nonce, aad, ciphertext, tag, clear prefix of the body), or None when it cannot apply."""
        key, salt = keysalt
        opt_end = BASE_LEN + opts.opt_len
        seq_end = opt_end + (SEQ_LEN if st.seq else 0)
        hdr_len = seq_end + (IV_LEN if st.iv else 0)
        data_end = len(eesp) - st.icv_len
        if data_end < hdr_len or 8 * len(key) not in sa.info.key_sizes:
            return None
        seq = eesp[opt_end:seq_end] if st.seq else None
        iv = eesp[seq_end:hdr_len] if st.iv else None
        src = iv if st.nonce_from == "iv" else seq
        if src is None:
            return None
        if noncev == "iv-le":
            src = src[::-1]
        nonce = src + salt if noncev == "salt-after" else salt + src
        if len(nonce) != sa.info.nonce_len:
            return None
        clear = 4 * opts.co[1] if opts.co else 0
        if aadv == "co-octets":
            clear = opts.co[1]  # type: ignore[index]
        elif aadv == "co-from-base":
            clear = 4 * opts.co[1] - hdr_len  # type: ignore[index]
            if clear < 0:
                return None
        tag = eesp[data_end:]
        gmac = (sa.kind == "gmac") != (aadv in ("gmac-encrypted", "gcm-as-gmac"))
        enc = data_end if gmac else hdr_len + clear
        if enc > data_end:
            return None
        xfrm = (sa.aad == "linux-xfrm") != (aadv == "flip-iv")
        if xfrm and not st.iv:
            if aadv == "flip-iv":
                return None
            xfrm = False
        if aadv == "esp":
            if seq is None:
                return None
            aad = eesp[4:8] + seq
        else:
            head = eesp[:hdr_len]
            if xfrm:
                head = head[: hdr_len - IV_LEN]
            if aadv == "no-opts":
                head = head[:BASE_LEN] + head[opt_end:]
            aad = head + (b"" if aadv == "clear-out" else eesp[hdr_len:enc])
        return (sa.info.alg, key, nonce, aad, eesp[enc:data_end], tag, eesp[hdr_len:enc])

    @staticmethod
    def _open(desc) -> Optional[bytes]:
        alg, key, nonce, aad, ct, tag, prefix = desc
        try:
            pt = prim.aead_open(alg, key, nonce, [aad], ct, tag)
        except prim.PrimitiveError:
            return None
        return None if pt is None else prefix + pt

    def _dims(self, sa: _Sa, sid: int, opts: _Options) -> List[List[Choice]]:
        return [self._structures(sa), self._key_choices(sa, sid), self._aad_choices(sa, opts), self._nonce_choices()]

    def _level0(self, sa: _Sa, eesp: bytes, sid: int, opts: _Options) -> Optional[bytes]:
        """The body (PIH? + payload + padding) in clear when the packet verifies with the correct algorithm."""
        dims = self._dims(sa, sid, opts)
        desc = self._compute(sa, eesp, opts, *(d[0].value for d in dims))
        return None if desc is None else self._open(desc)

    # --------------------------------------------------------------- content

    def _content(self, sa: _Sa, body: bytes, opts: _Options, rep: PacketReport) -> List[Mistake]:
        """Mistakes in the decrypted content (errors), and padding warnings added to ``rep``."""
        fmt = sa.packet_format(opts.co is not None)
        tunnel = sa.mode == "tunnel"
        errors: List[Mistake] = []
        clear = 4 * opts.co[1] if opts.co else 0
        if fmt == "full":
            if len(body) < PIH_LEN:
                return errors
            reserved, nh, pad = int.from_bytes(body[:2], "big"), body[2], body[3]
            fits = PIH_LEN + pad <= len(body)
            inner = ip_lengths(body)
            if reserved >> 12 in (4, 6) and inner and 0 <= len(body) - inner[1] <= 255:
                errors.append(_m("format-optimized-instead-of-full", "format (Payload Info Header)",
                                 "optimized format sent (no PIH: the payload starts with the inner IP header) on an SA "
                                 "that expects the full format",
                                 "optimized (no PIH)", f"full: a 4-octet PIH first ({_format_reason(sa, opts)})",
                                 f"{SPEC} §8, D2"))
                rep.warnings += _padding_warnings(body[inner[1] :], inner[1])
                return errors
            if not fits or reserved or (tunnel and nh not in (4, 41)):
                trailer = self._esp_trailer(body)
                if trailer is not None:
                    errors.append(trailer)
                    return errors
            if tunnel and nh not in (4, 41):
                ipl = ip_lengths(body[PIH_LEN:])
                if ipl is not None and 0 <= len(body) - PIH_LEN - ipl[1] <= 255:
                    errors.append(_m("pih-next-header", "Next Header (PIH octet 2)",
                                     "a tunnel-mode packet whose PIH Next Header is not IPv4/IPv6",
                                     str(nh), f"{4 if ipl[0] == 4 else 41} (the payload is an IPv{ipl[0]} packet)",
                                     f"{SPEC} §6, §8"))
                    return errors
            plen = _payload_length(nh, body[PIH_LEN:])
            if plen is not None:
                expected = len(body) - PIH_LEN - plen[0]
                if expected != pad and 0 <= expected <= 255:
                    if pad == expected + PIH_LEN:
                        desc = "the Pad Length counts the PIH as padding"
                        mid = "pad-length-includes-pih"
                    else:
                        desc = "the Pad Length does not match the payload"
                        mid = "pad-length-field"
                    errors.append(_m(mid, "Pad Length (PIH octet 3)", desc, str(pad),
                                     f"{expected} ({plen[1]} is {plen[0]} of the {len(body) - PIH_LEN} octets "
                                     "after the PIH)", f"{SPEC} §6"))
                    return errors
            if not fits:
                return errors
            payload = body[PIH_LEN : len(body) - pad]
            if clear > PIH_LEN + len(payload):
                errors.append(_m("crypt-offset-into-padding", "Crypt Offset option (CryptOffset)",
                                 "the Crypt Offset exposes padding octets", f"{clear} octets in clear",
                                 f"at most {PIH_LEN + len(payload)} (PIH + payload)", f"{SPEC} D16"))
                return errors
            if reserved:
                rep.warnings.append(_warn("pih-reserved-bits", "PIH Reserved (octets 0-1)", "PIH reserved bits set",
                                          f"{reserved:#06x}", "0x0000 (send 0, ignored on receive)", f"{SPEC} §6, D5"))
            rep.warnings += _padding_warnings(body[len(body) - pad :], PIH_LEN + len(payload))
            if nh == 59:
                rep.notes.append("a dummy packet (Next Header 59): authenticated, then discarded by design")
            return errors
        # optimized
        if len(body) >= PIH_LEN and body[0] >> 4 == 0:
            pad = body[3]
            ipl = ip_lengths(body[PIH_LEN:])
            if PIH_LEN + pad <= len(body) and ipl and ipl[1] == len(body) - PIH_LEN - pad:
                errors.append(_m("format-full-instead-of-optimized", "format (Payload Info Header)",
                                 "full format sent (a PIH before the inner packet) on an SA that expects the "
                                 "optimized format", "full (PIH present)",
                                 f"optimized: the inner IP packet right after the IV ({_format_reason(sa, opts)})",
                                 f"{SPEC} §8, D2"))
                return errors
        ipl = ip_lengths(body)
        if ipl is None:
            return errors
        if clear > ipl[1]:
            errors.append(_m("crypt-offset-into-padding", "Crypt Offset option (CryptOffset)",
                             "the Crypt Offset exposes padding octets", f"{clear} octets in clear",
                             f"at most {ipl[1]} (the inner packet)", f"{SPEC} D16"))
            return errors
        pad = body[ipl[1] :]
        if len(pad) >= 2 and pad[-1] == (4 if ipl[0] == 4 else 41) and pad[-2] == len(pad) - 2:
            rep.warnings.append(_warn("esp-trailer-instead-of-pih", "Padding",
                                      "an ESP trailer (padding, Pad Length, Next Header) after the inner packet",
                                      pad.hex(), "zero padding to a multiple of 4, no trailer", f"{SPEC} §2, §8"))
        elif 0 <= len(pad) <= 255:
            rep.warnings += _padding_warnings(pad, ipl[1])
        return errors

    @staticmethod
    def _esp_trailer(body: bytes) -> Optional[Mistake]:
        """An ESP trailer (payload ‖ padding ‖ Pad Length ‖ Next Header) where the PIH should lead."""
        if len(body) < 2:
            return None
        nh, p = body[-1], body[-2]
        if p + 2 > len(body):
            return None
        payload, pad = body[: len(body) - 2 - p], body[len(body) - 2 - p : -2]
        plen = _payload_length(nh, payload)
        if (plen is not None and plen[0] == len(payload)) or (p and pad == bytes(range(1, p + 1))):
            return _m("esp-trailer-instead-of-pih", "Payload Info Header",
                      "an ESP trailer (padding ‖ Pad Length ‖ Next Header at the end) instead of the PIH",
                      f"trailer with Pad Length {p}, Next Header {nh}",
                      f"PIH 0000{nh:02x}{(-(PIH_LEN + len(payload)) % 4):02x} before the payload", f"{SPEC} §6")
        return None

    # ------------------------------------------------------------- diagnosis

    def diagnose_part(self, eesp: bytes, *, frame: Optional[int] = None, ip: Optional[bytes] = None) -> PacketReport:
        """Diagnose one EESP packet (Base Header .. ICV)."""
        rep = PacketReport("EESP", UNDIAGNOSED, frame=frame)
        dst = None
        if ip is not None:
            try:
                rep.src, rep.dst = addresses(ip)
                dst = rep.dst
            except (ValueError, IndexError):
                pass
        if len(eesp) < BASE_LEN:
            rep.fields = {"len": len(eesp)}
            rep.verdict, rep.reason = MALFORMED, "eesp-truncated"
            rep.message = f"{len(eesp)} octets: shorter than the 8-octet Base Header"
            return rep
        spi, sid = int.from_bytes(eesp[4:8], "big"), int.from_bytes(eesp[2:4], "big")
        rep.fields = {"spi": f"{spi:#010x}", "session_id": sid, "optlen": eesp[1], "len": len(eesp)}
        opts = _parse_options(eesp)
        if opts is not None and opts.items:
            rep.fields["options"] = ",".join(_OPT_NAMES.get(t, f"type{t}") for t, _ in opts.items)
        sas = self._sas_for(spi, dst)
        if not sas:
            return self._no_sa(eesp, spi, sid, opts, rep)
        first = None
        for sa in sas:
            fresh = dataclasses.replace(rep, fields=dict(rep.fields), mistakes=[], alternatives=[], warnings=[], notes=[])
            r = self._diagnose_with(sa, eesp, sid, opts, fresh)
            if r.verdict in (VERIFIES, DIAGNOSED):
                return r
            first = first or r
        if len(sas) > 1:
            first.notes.append(f"{len(sas)} SAs have SPI {spi:#010x}; none explains the packet")
        return first

    def _diagnose_with(self, sa: _Sa, eesp: bytes, sid: int, opts: Optional[_Options], rep: PacketReport) -> PacketReport:
        if sa.seq and opts is not None and len(eesp) >= BASE_LEN + opts.opt_len + SEQ_LEN:
            rep.fields["seq"] = int.from_bytes(eesp[BASE_LEN + opts.opt_len : BASE_LEN + opts.opt_len + SEQ_LEN], "big")
        err = _open_status(sa.receiver(), eesp)
        code = None
        if err is not None:
            code = err.code
            rep.reason, rep.message = err.code, str(err)
        if code in _HEADER_ERRORS or opts is None:
            rep.verdict = MALFORMED
            rep.mistakes = self._header_mistakes(eesp, opts)
            if rep.mistakes:
                rep.verdict = DIAGNOSED
            return rep
        policy = []
        if opts.co is not None and (sa.max_crypt_offset is None or opts.co[1] > int(sa.max_crypt_offset)):
            policy.append(_m("crypt-offset-not-allowed", "Crypt Offset option",
                             "a Crypt Offset option the SA does not allow: receivers drop the packet",
                             f"CryptOffset {opts.co[1]}",
                             "no option (no EESP_MAX_CRYPT_OFFSET announced)" if sa.max_crypt_offset is None
                             else f"at most {sa.max_crypt_offset} (max-crypt-offset)", f"{SPEC} §13, §16"))
        body = self._level0(sa, eesp, sid, opts)
        if body is not None:
            errors = policy + self._field_mistakes(sa, eesp, sid, opts, code)
            if len(errors) == len(policy):
                errors += self._content(sa, body, opts, rep)
            if errors:
                rep.verdict, rep.mistakes = DIAGNOSED, errors
                if code is None:
                    rep.message = "the ICV verifies, but the packet is dropped or decodes to the wrong packet"
                else:
                    rep.notes.append("the ICV verifies with the correct algorithm; the packet fails after that")
            elif code is None:
                rep.verdict = VERIFIES
            else:
                rep.verdict = UNDIAGNOSED
                rep.notes.append("the ICV verifies with the correct algorithm; the packet fails after decryption")
            return rep
        if code is None:  # the core accepts what the checker's own computation rejects: should never happen
            rep.verdict = VERIFIES
            rep.notes.append("the checker's own computation does not verify this packet, the core does; please report this")
            return rep

        def compute(st, keysalt, aadv, noncev):
            return self._compute(sa, eesp, opts, st, keysalt, aadv, noncev)

        match = search(self._dims(sa, sid, opts), compute, self._open, max_mistakes=self.max_mistakes,
                       hints=self.hints)
        rep.warnings += [dataclasses.replace(m, severity="warning") for m in policy]
        if match is None:
            rep.verdict = UNDIAGNOSED
            return rep
        rep.verdict = DIAGNOSED
        rep.mistakes = match.explanations[0]
        rep.alternatives = match.explanations[1:]
        rep.mistakes += self._content(sa, match.result, opts, rep)  # type: ignore[arg-type]
        return rep

    def _field_mistakes(self, sa: _Sa, eesp: bytes, sid: int, opts: _Options, code: Optional[str]) -> List[Mistake]:
        """Header fields a verified packet got wrong (the core's refusal names them)."""
        if code == "eesp-sequence-zero":
            return [_m("sequence-number-zero", "Sequence Number", "the Sequence Number 0 (senders start at 1)",
                       "0", "1 for the first packet of a Sub SA, then increasing", f"{SPEC} §11, D10")]
        if code == "eesp-sub-sa-out-of-range":
            if sa.keymat is not None:
                return [_m("session-id-without-sub-sas", "Session ID (Base Header octets 2-3)",
                           "a non-zero Session ID on an SA without Sub SAs (no SSKDF)", str(sid), "0",
                           f"{SPEC} D9")]
            return [_m("session-id-out-of-range", "Session ID (Base Header octets 2-3)",
                       "a Session ID above the announced EESP_MAX_SUB_SA_ID", str(sid),
                       f"0..{sa.max_sub_sa_id} (max-sub-sa-id)", f"{SPEC} §13, D6")]
        if code == "eesp-bad-payload-offset" and opts.co is not None:
            got, want = 4 * opts.co[0], BASE_LEN + opts.opt_len + (SEQ_LEN if sa.seq else 0) + sa.iv_len
            if got == want - sa.iv_len and sa.iv_len:
                desc = "the PayloadOffset leaves out the IV"
            elif got == want + PIH_LEN:
                desc = "the PayloadOffset counts the PIH"
            elif opts.co[0] == want:
                desc = "the PayloadOffset given in octets instead of 4-octet units"
            else:
                desc = "the PayloadOffset does not point at the end of the IV"
            return [_m("payload-offset", "Crypt Offset option (PayloadOffset)", desc,
                       f"{opts.co[0]} ({got} octets)", f"{want // 4} ({want} octets: Base ‖ Options ‖ Seq ‖ IV)",
                       f"{SPEC} §4")]
        return []

    @staticmethod
    def _header_mistakes(eesp: bytes, opts: Optional[_Options]) -> List[Mistake]:
        raw = eesp[BASE_LEN : BASE_LEN + eesp[1]]
        i = 0
        while i + 1 < len(raw):
            if raw[i] == 0:
                i += 1
                continue
            if raw[i] == 2 and raw[i + 1] != 2:
                return [_m("crypt-offset-option-length", "Crypt Offset option (Opt Data Len)",
                           "a Crypt Offset option whose data is not 2 octets (the draft's stale Fig. 19 says 4)",
                           str(raw[i + 1]), "2 (the whole option is 4 octets)", f"{SPEC} §4, D3")]
            i += 2 + raw[i + 1]
        return []

    def _no_sa(self, eesp: bytes, spi: int, sid: int, opts: Optional[_Options], rep: PacketReport) -> PacketReport:
        rep.verdict, rep.reason = NO_KEY, "eesp-no-sa"
        rep.message = f"no SA for SPI {spi:#010x}"
        if opts is None:
            return rep
        for sa in sorted(self.sas, key=lambda s: s.spi != bswap(spi, 4)):
            alias = sa.with_spi(spi)
            if self._level0(alias, eesp, sid, opts) is not None:
                if sa.spi == bswap(spi, 4):
                    m = _m("spi-byte-order", "SPI (Base Header octets 4-7)", "the SPI written little-endian",
                           f"{spi:#010x}", f"{sa.spi:#010x} (octets {sa.spi.to_bytes(4, 'big').hex()})", f"{SPEC} §3")
                else:
                    m = _m("spi-mismatch", "SPI (Base Header octets 4-7)",
                           f"the packet verifies with the keys of the SA with SPI {sa.spi:#010x}",
                           f"{spi:#010x}", f"{sa.spi:#010x}", f"{SPEC} §3")
                rep.verdict, rep.mistakes = DIAGNOSED, [m]
                return rep
        return rep

    # ---------------------------------------------------------------- entry

    def diagnose(self, packet: Union[bytes, str]) -> PacketReport:
        """Diagnose one packet: bytes or hex of an IP packet, an Ethernet frame, or the EESP part."""
        data = bytes(packet) if isinstance(packet, (bytes, bytearray)) else _hex_only(packet)
        _src, packets, _skipped = load_input(data, self.locate, self.is_part, "EESP")
        p = next(packets)
        return self.diagnose_part(p.part, frame=p.frame, ip=p.ip)

    def diagnose_source(self, source: Union[str, bytes], *, limit: int = 0) -> Report:
        """Diagnose a capture file path, a hex string of one packet ('-': stdin) or bytes."""
        desc, packets, skipped = load_input(source, self.locate, self.is_part, "EESP", limit)
        report = Report("EESP", desc)
        for p in packets:
            report.packets.append(self.diagnose_part(p.part, frame=p.frame, ip=p.ip))
        report.skipped = skipped[0]
        return report


def _format_reason(sa: _Sa, opts: _Options) -> str:
    if sa.format in ("full", "optimized"):
        return f"the SA forces format={sa.format}"
    if opts.co is not None:
        return "a Crypt Offset option means the full format"
    return f"{sa.mode} mode"


def _hex_only(text: object) -> bytes:
    if not isinstance(text, str):
        raise DiagnoseInputError(f"a packet is bytes or a hex string, not {type(text).__name__}")
    return parse_hex(text)


# --------------------------------------------------------------------- functions


def diagnose(packet: Union[bytes, str], sas: Iterable[SaSpec], *, max_mistakes: int = 2) -> PacketReport:
    """Diagnose one EESP packet (bytes or hex: an IP packet, an Ethernet frame or the EESP part)."""
    return EespDiagnoser(sas, max_mistakes=max_mistakes).diagnose(packet)


def diagnose_capture(path: str, sas: Iterable[SaSpec], *, max_mistakes: int = 2, limit: int = 0) -> Report:
    """Diagnose every EESP packet of a pcap/pcapng file."""
    import os

    if not os.path.isfile(path):
        raise DiagnoseInputError(f"{path}: no such capture file")
    return EespDiagnoser(sas, max_mistakes=max_mistakes).diagnose_source(path, limit=limit)


# ---------------------------------------------------------------------------- CLI


def cmd_diagnose(args: argparse.Namespace) -> int:
    return run_ipsec_diagnose(args, bool(args.key or args.root_key), "eesp-sa", EespDiagnoser)


def register(sub, sa_options, sa_entries) -> None:
    """Add the ``diagnose`` subcommand to the pyeesp CLI's subparsers.  The CLI hands over its SA options
    (``sa_options(parser)``) and how it reads them (``sa_entries(args)``), so that this module does not import
    the CLI that imports it."""
    p = sub.add_parser("diagnose", help="explain why EESP packets do not verify (known interop mistakes)",
                       description="Open each EESP packet with the given SAs; when one does not verify, recompute it "
                                   "with the known implementation mistakes (AAD variant, SSKDF info, salt split, "
                                   "implicit IV, format, padding, Sub SA, ...) and name the one that reproduces it "
                                   "exactly. Exit status: 0 when every packet verifies, 1 when some do not, 2 for "
                                   "usage or input errors.")
    add_common_arguments(p, "EESP")
    sa_options(p)
    p.set_defaults(func=cmd_diagnose, sa_entries=sa_entries)
