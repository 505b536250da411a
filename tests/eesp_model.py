"""Independent pure-Python model of IPsec Enhanced ESP (EESP v0, draft-ietf-ipsecme-eesp-03/-04).

A second implementation written only from the project's specification (docs/spec/eesp.md) for the tests. It
shares no code with the C core and uses only the standard library, the `cryptography` package and what the
three models share (tests/model_common.py: the error type, the IP checksum). It favours
being obviously right over being fast or complete. Section numbers (§) and decisions (D1-D16) refer to eesp.md.

Layout of one EESP packet (the octets after the outer IP header, or after the UDP header with UDP
encapsulation) as this model names its parts::

    Base(8) | Options(OptLen) | Seq(8 or 0) | IV(8 or 0) | [PIH(4)] | payload | padding | ICV
    \\________________ hdr_len = 4 * PayloadOffset _____/ \\__ "body": PIH? + payload + padding __/

    full format:       PIH = 0x0 | Reserved(12) | Next Header | Pad Length, then the payload
    optimized format:  no PIH; the payload is an IP packet and the receiver recovers NH and Pad Length from it
    clear_len          4 * CryptOffset of a Crypt Offset option: body[:clear_len] is sent in clear and added
                       to the AAD; body[clear_len:] is encrypted (GMAC: nothing is encrypted)

Public entry points: `SA` (configuration), `derive_sub_sa_key`, header helpers, `seal` / `open` (one EESP
packet), `encap` / `decap` (whole IP packets), `Sender` (sequence / IV counters), `ReplayModel`.
Every failure raises `EespModelError` whose `code` is the core's kebab-case reason name where one exists.

Choices this model makes where the notes leave room (reported to the lead, not decisions):
- Opt Len running past the end of the packet is "eesp-truncated" (a TLV running past Opt Len is
  "eesp-options-overrun"). Within step 4: overrun, then Crypt Offset option shape (D3/D13), then strict unknown.
- Crypt Offset not allowed / above the maximum: steps 6-9 still run (their drops win); after the AEAD the
  packet is dropped as "eesp-crypt-offset-not-allowed" whether or not the ICV verified (`icv_valid` says which).
- D16 on receive is checked after decryption (step 11/12), once Pad Length / the inner length is known.
- Optimized format: an inner packet too short to hold its whole fixed IP header (20 / 40 octets), an IPv4
  header with IHL < 5 or a Total Length below IHL * 4, or an empty one, is "eesp-bad-inner-packet"; a negative
  or > 255 Pad Length is "eesp-bad-pad-length".
- Tunnel-mode decap requires PIH Next Header 4 or 41 (full format) and one whole IP packet of that version
  (docs/eesp.md), else "eesp-bad-inner-packet".
- The Version check uses the version of the SA the SPI selects (0 when no SA matches).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from model_common import ModelError, inet_checksum, udp_checksum_verdict, udp_encap_header

__all__ = [
    "EespModelError", "Suite", "SUITES", "suite", "SSKDF_NONE", "SSKDF_HKDF_SHA2_256", "SSKDF_HKDF_SHA2_384",
    "SSKDF_HKDF_SHA2_512", "SSKDF_AES256_CMAC", "sskdf_root_len", "derive_sub_sa_key", "split_keymat", "SA",
    "BaseHeader", "build_base_header", "parse_base_header", "pad1", "padn", "crypt_offset_option",
    "parse_crypt_offset", "encode_options", "parse_options", "build_pih", "parse_pih", "alignment_padding",
    "Opened", "seal", "open", "ReplayModel", "Sender", "encap", "decap", "classify_udp_payload",
    "ipv4_checksum", "ipv6_insertion_point", "MAX_SEQ", "UDP_ENCAP_PORT", "DEFAULT_IP_PROTO", "ERROR_CODES",
]

DEFAULT_IP_PROTO = 49  # D7: provisional, test-only
UDP_ENCAP_PORT = 4500
MAX_SEQ = 2**64 - 1
BASE_LEN = 8
PIH_LEN = 4
SEQ_LEN = 8
UDP_LEN = 8
IPPROTO_IPV4 = 4
IPPROTO_IPV6 = 41
IPPROTO_UDP = 17
NH_DUMMY = 59
IPV6_HBH, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_DSTOPTS = 0, 43, 44, 60
IPV6_EXT_HEADERS = (IPV6_HBH, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_DSTOPTS)
OPT_PAD1, OPT_PADN, OPT_CRYPT_OFFSET = 0, 1, 2
MODES = ("tunnel", "transport", "beet", "iptfs")
FORMATS = ("full", "optimized")
AAD_VARIANTS = ("draft", "linux-xfrm")

# The receiver's reason codes in check order (§16), shared vocabulary with the core.
ERROR_CODES = (
    "eesp-truncated", "eesp-compat-bit-clear", "eesp-unsupported-version", "eesp-reserved-bits-set",
    "eesp-no-sa", "eesp-options-overrun", "eesp-bad-crypt-offset-option", "eesp-unknown-option",
    "eesp-bad-payload-offset", "eesp-crypt-offset-past-payload", "eesp-sub-sa-out-of-range",
    "eesp-sequence-zero", "replay-duplicate", "replay-too-old", "authentication-failed",
    "eesp-crypt-offset-not-allowed", "eesp-bad-pad-length", "eesp-dummy-packet", "eesp-bad-inner-packet",
)


class EespModelError(ModelError):
    """Any failure of the model. `code` is kebab-case; `icv_valid` is set for eesp-crypt-offset-not-allowed
    (§16 step 5: the ICV is still checked so that policy can delete the SA)."""


# --------------------------------------------------------------------------------------------------------
# §10 suites
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    encr_id: int
    name: str
    kind: str  # "gcm", "ccm", "gmac", "chacha"
    icv_len: int
    salt_len: int
    iiv: bool
    key_bits: tuple  # allowed key sizes in bits

    @property
    def iv_len(self) -> int:
        """Length of the explicit IV field on the wire (0 with RFC 8750 implicit IV)."""
        return 0 if self.iiv else 8


_AES = (128, 192, 256)
SUITES = {
    s.encr_id: s
    for s in (
        Suite(18, "ENCR_AES_GCM_8", "gcm", 8, 4, False, _AES),
        Suite(19, "ENCR_AES_GCM_12", "gcm", 12, 4, False, _AES),
        Suite(20, "ENCR_AES_GCM_16", "gcm", 16, 4, False, _AES),
        Suite(14, "ENCR_AES_CCM_8", "ccm", 8, 3, False, _AES),
        Suite(15, "ENCR_AES_CCM_12", "ccm", 12, 3, False, _AES),
        Suite(16, "ENCR_AES_CCM_16", "ccm", 16, 3, False, _AES),
        Suite(21, "ENCR_NULL_AUTH_AES_GMAC", "gmac", 16, 4, False, _AES),
        Suite(28, "ENCR_CHACHA20_POLY1305", "chacha", 16, 4, False, (256,)),
        Suite(29, "ENCR_AES_CCM_8_IIV", "ccm", 8, 3, True, _AES),
        Suite(30, "ENCR_AES_GCM_16_IIV", "gcm", 16, 4, True, _AES),
        Suite(31, "ENCR_CHACHA20_POLY1305_IIV", "chacha", 16, 4, True, (256,)),
    )
}


def suite(encr_id: int) -> Suite:
    try:
        return SUITES[encr_id]
    except KeyError:
        raise EespModelError("bad-config", f"unsupported ENCR transform {encr_id}") from None


def _aead_seal(s: Suite, key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> tuple[bytes, bytes]:
    """Returns (ciphertext, ICV). GMAC is GCM with everything in the AAD and an empty plaintext."""
    if s.kind in ("gcm", "gmac"):
        out = AESGCM(key).encrypt(nonce, plaintext, aad)
        return out[: len(plaintext)], out[len(plaintext) : len(plaintext) + s.icv_len]  # truncated tag
    if s.kind == "ccm":
        out = AESCCM(key, tag_length=s.icv_len).encrypt(nonce, plaintext, aad)
    else:
        out = ChaCha20Poly1305(key).encrypt(nonce, plaintext, aad)
    return out[: len(plaintext)], out[len(plaintext) :]


def _aead_open(s: Suite, key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes, icv: bytes) -> bytes | None:
    """Returns the plaintext, or None when the ICV does not verify."""
    try:
        if s.kind in ("gcm", "gmac"):
            d = Cipher(algorithms.AES(key), modes.GCM(nonce, icv, min_tag_length=len(icv))).decryptor()
            d.authenticate_additional_data(aad)
            return d.update(ciphertext) + d.finalize()
        if s.kind == "ccm":
            return AESCCM(key, tag_length=s.icv_len).decrypt(nonce, ciphertext + icv, aad)
        return ChaCha20Poly1305(key).decrypt(nonce, ciphertext + icv, aad)
    except InvalidTag:
        return None


# --------------------------------------------------------------------------------------------------------
# §12 key derivation
# --------------------------------------------------------------------------------------------------------

SSKDF_NONE = 0
SSKDF_HKDF_SHA2_256 = 1
SSKDF_HKDF_SHA2_384 = 2
SSKDF_HKDF_SHA2_512 = 3
SSKDF_AES256_CMAC = 4
_SSKDF_HASH = {SSKDF_HKDF_SHA2_256: hashes.SHA256, SSKDF_HKDF_SHA2_384: hashes.SHA384,
               SSKDF_HKDF_SHA2_512: hashes.SHA512}
_SSKDF_NAMES = {"none": SSKDF_NONE, "hkdf-sha256": SSKDF_HKDF_SHA2_256, "hkdf-sha384": SSKDF_HKDF_SHA2_384,
                "hkdf-sha512": SSKDF_HKDF_SHA2_512, "aes256-cmac": SSKDF_AES256_CMAC}
D8_MESSAGE = "SSKDF_AES256_CMAC is not defined by draft-ietf-ipsecme-eesp-ikev2-02"


def _sskdf_id(sskdf) -> int:
    if isinstance(sskdf, str):
        key = sskdf.lower().replace("_", "-").replace("sskdf-", "").replace("sha2-", "sha")
        if key not in _SSKDF_NAMES:
            raise EespModelError("bad-config", f"unknown SSKDF {sskdf!r}")
        sskdf = _SSKDF_NAMES[key]
    if sskdf == SSKDF_AES256_CMAC:
        raise EespModelError("bad-config", D8_MESSAGE)
    if sskdf != SSKDF_NONE and sskdf not in _SSKDF_HASH:
        raise EespModelError("bad-config", f"unknown SSKDF transform {sskdf}")
    return sskdf


def sskdf_root_len(sskdf) -> int:
    """Nk: 32 / 48 / 64 octets for HKDF-SHA2-256 / 384 / 512."""
    sid = _sskdf_id(sskdf)
    if sid == SSKDF_AES256_CMAC:
        raise EespModelError("bad-config", D8_MESSAGE)
    if sid not in _SSKDF_HASH:
        raise EespModelError("bad-config", "no SSKDF")
    return _SSKDF_HASH[sid].digest_size


def derive_sub_sa_key(sskdf, root: bytes, session_id: int, length: int) -> bytes:
    """KEYMAT_sub = HKDF-Expand(PRK = root, info = Session ID as 2 octets big-endian (D4), L = length)."""
    sid = _sskdf_id(sskdf)
    if sid == SSKDF_AES256_CMAC:
        raise EespModelError("bad-config", D8_MESSAGE)
    if sid not in _SSKDF_HASH:
        raise EespModelError("bad-config", "no SSKDF negotiated")
    if not 0 <= session_id <= 0xFFFF:
        raise EespModelError("bad-argument", "the Session ID is 16 bits")
    return HKDFExpand(_SSKDF_HASH[sid](), length, struct.pack(">H", session_id)).derive(root)


def split_keymat(encr_id: int, keymat: bytes) -> tuple[bytes, bytes]:
    """key || salt: the salt is the last 3 (CCM) or 4 octets."""
    s = suite(encr_id)
    return keymat[: -s.salt_len], keymat[-s.salt_len :]


# --------------------------------------------------------------------------------------------------------
# SA configuration
# --------------------------------------------------------------------------------------------------------


@dataclass
class SA:
    """One EESP SA in one direction; both the sender and the receiver use it.

    Keys: `keymat` (key || salt, used as the only Sub SA 0 when `sskdf` is NONE) or `root_key` (with an
    SSKDF; every Sub SA key is derived from it). `max_sub_sa_id` is the receiver's EESP_MAX_SUB_SA_ID
    announcement (None: absent). `max_crypt_offset` is the receiver's EESP_MAX_CRYPT_OFFSET in 4-octet units
    (None: absent, so no Crypt Offset option may be sent). `seq` False means SN = None. `format` None applies D2.
    `known_option_types` are private option types with a registered handler (skipped silently, never strict-
    dropped). `replay_window` is the receiver's window size.
    """

    spi: int
    encr_id: int = 20
    key_bits: int = 128
    keymat: bytes | None = None
    sskdf: int = SSKDF_NONE
    root_key: bytes | None = None
    max_sub_sa_id: int | None = None
    seq: bool = True
    mode: str = "tunnel"
    format: str | None = None
    aad: str = "draft"
    align_options: bool = True
    max_crypt_offset: int | None = None
    strict: bool = False
    version: int = 0
    ip_proto: int = DEFAULT_IP_PROTO
    udp_encap: bool = False
    known_option_types: frozenset = field(default_factory=frozenset)
    replay_window: int = 64

    def __post_init__(self):
        s = suite(self.encr_id)
        self.sskdf = _sskdf_id(self.sskdf)
        if self.key_bits not in s.key_bits:
            raise EespModelError("bad-config", f"{s.name} takes {s.key_bits}-bit keys")
        if not 0 <= self.spi <= 0xFFFFFFFF:
            raise EespModelError("bad-config", "the SPI is 32 bits")
        if self.mode not in MODES or self.format not in (None,) + FORMATS or self.aad not in AAD_VARIANTS:
            raise EespModelError("bad-config", f"mode {self.mode!r}, format {self.format!r}, aad {self.aad!r}")
        if s.iiv and not self.seq:
            raise EespModelError("bad-config", "an implicit-IV suite needs SN = 64-bit")
        if s.kind == "gmac" and self.aad == "linux-xfrm":
            raise EespModelError("bad-config", "AES-GMAC with aad = linux-xfrm is undefined (D12)")
        if self.sskdf == SSKDF_NONE:
            if self.keymat is None or len(self.keymat) != self.keymat_len:
                raise EespModelError("bad-config", f"keymat must be {self.keymat_len} octets (key || salt)")
            if self.max_sub_sa_id is not None:
                self.max_sub_sa_id = None  # §13: ignored without an SSKDF
        else:
            if self.root_key is None or len(self.root_key) != sskdf_root_len(self.sskdf):
                raise EespModelError("bad-config", f"root_key must be {sskdf_root_len(self.sskdf)} octets")
            if self.max_sub_sa_id is not None and not 0 <= self.max_sub_sa_id <= 0xFFFF:
                raise EespModelError("bad-config", "max_sub_sa_id is 16 bits")
        if self.max_crypt_offset is not None and not 0 <= self.max_crypt_offset <= 255:
            raise EespModelError("bad-config", "max_crypt_offset is one octet")
        if not 0 <= self.version <= 15 or not 0 <= self.ip_proto <= 255 or self.replay_window < 1:
            raise EespModelError("bad-config", "version / ip_proto / replay_window out of range")
        self.known_option_types = frozenset(self.known_option_types)

    @property
    def suite(self) -> Suite:
        return SUITES[self.encr_id]

    @property
    def key_len(self) -> int:
        return self.key_bits // 8

    @property
    def keymat_len(self) -> int:
        """L: key + salt octets (20/28/36 for GCM, GMAC (D15) and ChaCha20-Poly1305; 19/27/35 for CCM)."""
        return self.key_len + self.suite.salt_len

    @property
    def seq_len(self) -> int:
        return SEQ_LEN if self.seq else 0

    @property
    def iv_len(self) -> int:
        return self.suite.iv_len

    @property
    def icv_len(self) -> int:
        return self.suite.icv_len

    @property
    def n_sub_sas(self) -> int:
        """N (D6, D9): 1 without an SSKDF; Max + 1 when announced; else every 16-bit value."""
        if self.sskdf == SSKDF_NONE:
            return 1
        return 0x10000 if self.max_sub_sa_id is None else self.max_sub_sa_id + 1

    def sub_sa_keymat(self, session_id: int) -> tuple[bytes, bytes]:
        """(key, salt) of one Sub SA."""
        if not 0 <= session_id < self.n_sub_sas:
            raise EespModelError("eesp-sub-sa-out-of-range", f"Session ID {session_id}, N = {self.n_sub_sas}")
        if self.sskdf == SSKDF_NONE:
            km = self.keymat
        else:
            km = derive_sub_sa_key(self.sskdf, self.root_key, session_id, self.keymat_len)
        return split_keymat(self.encr_id, km)

    def packet_format(self, has_crypt_offset: bool) -> str:
        """D2: a forced format wins; else a Crypt Offset option means full; else tunnel -> optimized."""
        if self.format is not None:
            return self.format
        if has_crypt_offset:
            return "full"
        return "optimized" if self.mode == "tunnel" else "full"


# --------------------------------------------------------------------------------------------------------
# §3 Base Header, §4 options, §6 PIH
# --------------------------------------------------------------------------------------------------------


@dataclass
class BaseHeader:
    compat: int  # the ESP-compat bit (1)
    version: int
    reserved: int  # R, 3 bits
    opt_len: int
    session_id: int
    spi: int

    def build(self) -> bytes:
        return build_base_header(self.opt_len, self.session_id, self.spi, version=self.version,
                                 reserved=self.reserved, compat=self.compat)


def build_base_header(opt_len: int, session_id: int, spi: int, *, version: int = 0, reserved: int = 0,
                      compat: int = 1) -> bytes:
    octet0 = ((compat & 1) << 7) | ((version & 0xF) << 3) | (reserved & 0x7)
    return struct.pack(">BBHI", octet0, opt_len & 0xFF, session_id & 0xFFFF, spi & 0xFFFFFFFF)


def parse_base_header(data: bytes) -> BaseHeader:
    if len(data) < BASE_LEN:
        raise EespModelError("eesp-truncated", f"{len(data)} octets, the Base Header is 8")
    o0, opt_len, session_id, spi = struct.unpack(">BBHI", data[:BASE_LEN])
    return BaseHeader(o0 >> 7, (o0 >> 3) & 0xF, o0 & 0x7, opt_len, session_id, spi)


def pad1() -> tuple[int, bytes]:
    return (OPT_PAD1, b"")


def padn(n: int) -> tuple[int, bytes]:
    """A PadN option covering n >= 2 octets in total."""
    if not 2 <= n <= 257:
        raise EespModelError("bad-argument", "PadN covers 2..257 octets")
    return (OPT_PADN, bytes(n - 2))


def crypt_offset_option(payload_offset: int, crypt_offset: int, r: int = 0) -> bytes:
    """The 4 option octets `02 02 v`: v = PayloadOffset << 10 | CryptOffset << 4 | R (§4, D3)."""
    if not 0 <= payload_offset <= 63 or not 0 <= crypt_offset <= 63 or not 0 <= r <= 15:
        raise EespModelError("bad-argument", "PayloadOffset / CryptOffset are 6 bits, R 4")
    return struct.pack(">BBH", OPT_CRYPT_OFFSET, 2, (payload_offset << 10) | (crypt_offset << 4) | r)


def parse_crypt_offset(data: bytes) -> tuple[int, int, int]:
    """(PayloadOffset, CryptOffset, R) from the 2 option data octets."""
    v = struct.unpack(">H", data)[0]
    return v >> 10, (v >> 4) & 0x3F, v & 0xF


def encode_options(options) -> bytes:
    """Options given as raw bytes, or as a list of (type, data) pairs (type 0 = Pad1: data must be empty)."""
    if isinstance(options, (bytes, bytearray)):
        return bytes(options)
    out = b""
    for opt in options:
        if isinstance(opt, (bytes, bytearray)):
            out += bytes(opt)
            continue
        t, data = opt
        if t == OPT_PAD1:
            if data:
                raise EespModelError("bad-argument", "Pad1 has no data")
            out += b"\x00"
        else:
            if len(data) > 255:
                raise EespModelError("bad-argument", "option data is at most 255 octets")
            out += bytes([t, len(data)]) + bytes(data)
    return out


def parse_options(raw: bytes) -> list[tuple[int, bytes]]:
    """Exactly len(raw) octets of TLVs; a TLV that runs past the end is eesp-options-overrun."""
    out, i = [], 0
    while i < len(raw):
        t = raw[i]
        if t == OPT_PAD1:
            out.append((OPT_PAD1, b""))
            i += 1
            continue
        if i + 2 > len(raw) or i + 2 + raw[i + 1] > len(raw):
            raise EespModelError("eesp-options-overrun", f"option type {t} at {i}")
        out.append((t, raw[i + 2 : i + 2 + raw[i + 1]]))
        i += 2 + raw[i + 1]
    return out


def build_pih(next_header: int, pad_len: int, reserved: int = 0) -> bytes:
    """`0x0 | Reserved(12) | NH | PadLen`; `reserved` is the whole first 16 bits (nibble included)."""
    return struct.pack(">HBB", reserved & 0xFFFF, next_header & 0xFF, pad_len & 0xFF)


def parse_pih(data: bytes) -> tuple[int, int, int]:
    """(next_header, pad_len, reserved16)."""
    reserved, nh, pad = struct.unpack(">HBB", data[:PIH_LEN])
    return nh, pad, reserved


def alignment_padding(n: int) -> list[tuple[int, bytes]]:
    """Pad1 for one octet, PadN for two or more, nothing for zero."""
    if n == 0:
        return []
    return [pad1()] if n == 1 else [padn(n)]


def _aad_and_split(sa: SA, pkt_wo_icv: bytes, hdr_len: int, clear_len: int) -> tuple[bytes, int]:
    """(AAD, index of the first encrypted octet) over the packet without its ICV (D1, §9)."""
    if sa.suite.kind == "gmac":
        return pkt_wo_icv, len(pkt_wo_icv)  # everything authenticated, nothing encrypted
    enc_start = hdr_len + clear_len
    if sa.aad == "linux-xfrm":
        iv_at = hdr_len - sa.iv_len
        return pkt_wo_icv[:iv_at] + pkt_wo_icv[hdr_len:enc_start], enc_start
    return pkt_wo_icv[:enc_start], enc_start


def _nonce(sa: SA, salt: bytes, seq: int | None, iv_field: bytes) -> bytes:
    if sa.suite.iiv:
        return salt + struct.pack(">Q", seq)
    return salt + iv_field


# --------------------------------------------------------------------------------------------------------
# §15 sender: one EESP packet
# --------------------------------------------------------------------------------------------------------


def seal(
    sa: SA,
    payload: bytes,
    *,
    next_header: int,
    session_id: int = 0,
    seq: int | None = None,
    iv: int | None = None,
    options=(),
    crypt_offset: int | None = None,
    outer_ip_version: int = 4,
    pad_len: int | None = None,
    pih_reserved: int = 0,
    check: bool = True,
) -> bytes:
    """Build one EESP packet (Base .. ICV) around `payload` (L4 segment or inner IP packet).

    seq: the 64-bit Sequence Number (required iff sa.seq). iv: the explicit IV as a 64-bit integer; defaults
    to seq (required when there is no seq; ignored with IIV). options: caller TLVs (list of (type, data) or
    raw bytes), placed after the Crypt Offset option and before the alignment padding (D13). crypt_offset:
    in 4-octet units, None for no option. outer_ip_version: 4 or 6, the IP version that carries EESP (§7
    alignment, only with sa.align_options). pad_len: override the D11 padding (0..255). next_header is
    written to the PIH (full format) and otherwise unused. check=False skips the sender-only policy checks
    (peer maximum, D16, PayloadOffset expressible, duplicate Crypt Offset) to build malformed test packets.
    """
    s = sa.suite
    if sa.seq:
        if seq is None or not 0 <= seq <= MAX_SEQ:
            raise EespModelError("bad-argument", "this SA sends a 64-bit Sequence Number")
    elif seq is not None:
        raise EespModelError("bad-argument", "SN = None: no Sequence Number")
    if not s.iiv:
        if iv is None:
            iv = seq
        if iv is None or not 0 <= iv <= MAX_SEQ:
            raise EespModelError("bad-argument", "an explicit 64-bit IV is needed")
    if not 0 <= session_id <= 0xFFFF or not 0 <= next_header <= 255:
        raise EespModelError("bad-argument", "Session ID 16 bits, Next Header 8 bits")
    if outer_ip_version not in (4, 6):
        raise EespModelError("bad-argument", "outer_ip_version is 4 or 6")
    key, salt = sa.sub_sa_keymat(session_id)

    fmt = sa.packet_format(crypt_offset is not None)
    pih_len = PIH_LEN if fmt == "full" else 0
    peer_len = sa.seq_len + sa.iv_len
    user = encode_options(options)
    co_opt = b"" if crypt_offset is None else bytes(4)  # placeholder, same length as the real option
    opts = co_opt + user
    if sa.align_options:
        align = 4 if outer_ip_version == 4 else 8
        opts += encode_options(alignment_padding(-(BASE_LEN + len(opts) + peer_len + pih_len) % align))
    if len(opts) > 255:
        raise EespModelError("eesp-options-too-long", f"{len(opts)} octets of options")
    hdr_len = BASE_LEN + len(opts) + peer_len

    if crypt_offset is not None:
        if check:
            if sa.max_crypt_offset is None or crypt_offset > sa.max_crypt_offset:
                raise EespModelError("eesp-crypt-offset-not-allowed", f"peer maximum {sa.max_crypt_offset}")
            if any(t == OPT_CRYPT_OFFSET for t, _ in parse_options(user)):
                raise EespModelError("eesp-bad-crypt-offset-option", "a second Crypt Offset option")
            if hdr_len % 4 or hdr_len // 4 > 63:
                raise EespModelError("eesp-bad-payload-offset", f"header of {hdr_len} octets")
            if 4 * crypt_offset > pih_len + len(payload):  # D16
                raise EespModelError("eesp-crypt-offset-past-payload", f"{4 * crypt_offset} octets")
        opts = crypt_offset_option((hdr_len // 4) & 0x3F, crypt_offset) + opts[4:]
    clear_len = 4 * crypt_offset if crypt_offset is not None else 0

    if pad_len is None:
        pad_len = -(pih_len + len(payload)) % 4  # D11
    if not 0 <= pad_len <= 255:
        raise EespModelError("bad-argument", "Pad Length is 0..255")
    body = (build_pih(next_header, pad_len, pih_reserved) if pih_len else b"") + payload + bytes(pad_len)
    if clear_len > len(body):
        raise EespModelError("eesp-crypt-offset-past-payload", "Crypt Offset past the packet")

    head = build_base_header(len(opts), session_id, sa.spi, version=sa.version) + opts
    head += struct.pack(">Q", seq) if sa.seq else b""
    iv_field = b"" if s.iiv else struct.pack(">Q", iv)
    plain = head + iv_field + body
    aad, enc_start = _aad_and_split(sa, plain, hdr_len, clear_len)
    ct, icv = _aead_seal(s, key, _nonce(sa, salt, seq, iv_field), aad, plain[enc_start:])
    return plain[:enc_start] + ct + icv


# --------------------------------------------------------------------------------------------------------
# §16 receiver: one EESP packet
# --------------------------------------------------------------------------------------------------------


@dataclass
class Opened:
    """What `open` recovered. `payload` is the L4 segment / inner packet without PIH or padding."""

    spi: int
    session_id: int
    seq: int | None
    iv: int | None
    options: list  # every (type, data) TLV in wire order
    unknown_options: list  # the (type, data) TLVs of unknown types (D5, non-strict)
    crypt_offset: tuple | None  # (PayloadOffset, CryptOffset, R) of the option, if any
    format: str
    next_header: int
    pad_len: int
    pih_reserved: int | None  # the PIH's first 16 bits (full format), ignored on receive (D5)
    payload: bytes


def _lookup(sas, spi: int) -> SA | None:
    if isinstance(sas, SA):
        return sas if sas.spi == spi else None
    return sas.get(spi)


def open(sas, packet: bytes, *, windows: dict | None = None) -> Opened:
    """§16 steps 2-12 on one EESP packet (Base .. ICV); raises EespModelError with the first failing check.

    sas: one SA or a mapping SPI -> SA. windows: a dict (spi, session_id) -> ReplayModel, created lazily
    after a valid ICV and updated in place; None disables the replay check (sequence 0 is still dropped).
    """
    # step 2
    if len(packet) < BASE_LEN:
        raise EespModelError("eesp-truncated", f"{len(packet)} octets")
    base = parse_base_header(packet)
    if base.compat != 1:
        raise EespModelError("eesp-compat-bit-clear")
    # step 3 (the version is the negotiated one, which the SA fixes; v0 unless configured otherwise)
    sa = _lookup(sas, base.spi)
    want_version = sa.version if sa is not None else 0
    if base.version != want_version:
        raise EespModelError("eesp-unsupported-version", f"version {base.version}")
    if base.reserved != 0:
        raise EespModelError("eesp-reserved-bits-set", f"R = {base.reserved}")
    if sa is None:
        raise EespModelError("eesp-no-sa", f"SPI {base.spi:08x}")
    s = sa.suite

    # step 4: options
    if BASE_LEN + base.opt_len > len(packet):
        raise EespModelError("eesp-truncated", f"Opt Len {base.opt_len} past the packet")
    options = parse_options(packet[BASE_LEN : BASE_LEN + base.opt_len])
    co_opts = [d for t, d in options if t == OPT_CRYPT_OFFSET]
    if len(co_opts) > 1:
        raise EespModelError("eesp-bad-crypt-offset-option", "more than one Crypt Offset option")  # D13
    if co_opts and len(co_opts[0]) != 2:
        raise EespModelError("eesp-bad-crypt-offset-option", f"Opt Data Len {len(co_opts[0])}")  # D3
    unknown = [(t, d) for t, d in options
               if t not in (OPT_PAD1, OPT_PADN, OPT_CRYPT_OFFSET) and t not in sa.known_option_types]
    if unknown and sa.strict:
        raise EespModelError("eesp-unknown-option", f"type {unknown[0][0]}")

    hdr_len = BASE_LEN + base.opt_len + sa.seq_len + sa.iv_len
    data_end = len(packet) - s.icv_len  # end of the data before the ICV (may be < hdr_len when truncated)

    # step 5: Crypt Offset
    co = parse_crypt_offset(co_opts[0]) if co_opts else None
    not_allowed = False
    if co is not None:
        payload_offset, crypt_offset, _r = co
        not_allowed = sa.max_crypt_offset is None or crypt_offset > sa.max_crypt_offset
        if 4 * payload_offset != hdr_len:
            raise EespModelError("eesp-bad-payload-offset", f"{4 * payload_offset} != {hdr_len}")
        if 4 * (payload_offset + crypt_offset) > data_end:
            raise EespModelError("eesp-crypt-offset-past-payload", f"{4 * (payload_offset + crypt_offset)}")
    fmt = sa.packet_format(co is not None)
    pih_len = PIH_LEN if fmt == "full" else 0
    clear_len = 4 * co[1] if co is not None else 0

    # step 6
    if not 0 <= base.session_id < sa.n_sub_sas:
        raise EespModelError("eesp-sub-sa-out-of-range", f"Session ID {base.session_id}")
    # step 7
    if len(packet) < hdr_len + pih_len + s.icv_len:
        raise EespModelError("eesp-truncated", f"{len(packet)} octets")

    # step 8
    seq = None
    if sa.seq:
        seq = struct.unpack(">Q", packet[BASE_LEN + base.opt_len : BASE_LEN + base.opt_len + SEQ_LEN])[0]
        if seq == 0:
            raise EespModelError("eesp-sequence-zero")
        win = windows.get((sa.spi, base.session_id)) if windows is not None else None
        if win is not None:
            verdict = win.check(seq)
            if verdict != "ok":
                raise EespModelError(verdict, f"sequence {seq}")

    # step 9
    key, salt = sa.sub_sa_keymat(base.session_id)
    iv_field = packet[hdr_len - sa.iv_len : hdr_len]
    aad, enc_start = _aad_and_split(sa, packet[:data_end], hdr_len, clear_len)
    plain = _aead_open(s, key, _nonce(sa, salt, seq, iv_field), aad, packet[enc_start:data_end],
                       packet[data_end:])
    if not_allowed:  # step 5's deferred drop, reporting whether the ICV was valid
        raise EespModelError("eesp-crypt-offset-not-allowed", f"CryptOffset {co[1]}, maximum "
                             f"{sa.max_crypt_offset}", icv_valid=plain is not None)
    if plain is None:
        raise EespModelError("authentication-failed")

    # step 10
    if sa.seq and windows is not None:
        windows.setdefault((sa.spi, base.session_id), ReplayModel(sa.replay_window)).update(seq)

    body = packet[hdr_len:enc_start] + plain  # PIH? + payload + padding, all in clear now
    if fmt == "full":  # step 11
        nh, pad, reserved = parse_pih(body)
        if PIH_LEN + pad > len(body):
            raise EespModelError("eesp-bad-pad-length", f"Pad Length {pad}, {len(body)} octets")
        if clear_len > len(body) - pad:  # D16 on receive
            raise EespModelError("eesp-crypt-offset-past-payload", "Crypt Offset reaches into the padding")
        if nh == NH_DUMMY:
            raise EespModelError("eesp-dummy-packet")
        payload = body[PIH_LEN : len(body) - pad]
    else:  # step 12
        reserved = None
        nh, inner_len = _inner_ip_length(body)
        pad = len(body) - inner_len
        if not 0 <= pad <= 255:
            raise EespModelError("eesp-bad-pad-length", f"Pad Length {pad}")
        if clear_len > inner_len:  # D16 on receive
            raise EespModelError("eesp-crypt-offset-past-payload", "Crypt Offset reaches into the padding")
        payload = body[:inner_len]
    iv = None if s.iiv else struct.unpack(">Q", iv_field)[0]
    return Opened(sa.spi, base.session_id, seq, iv, options, unknown, co, fmt, nh, pad, reserved, payload)


def _whole_ip_packet(pkt: bytes) -> bool:
    """IPv4: IHL >= 5 and Total Length = len >= IHL*4; IPv6: 40 + Payload Length = len."""
    if pkt[0] >> 4 == 4:
        ihl = (pkt[0] & 0xF) * 4
        return len(pkt) >= 20 and ihl >= 20 and struct.unpack(">H", pkt[2:4])[0] == len(pkt) >= ihl
    if pkt[0] >> 4 == 6:
        return len(pkt) >= 40 and 40 + struct.unpack(">H", pkt[4:6])[0] == len(pkt)
    return False


def _inner_ip_length(body: bytes) -> tuple[int, int]:
    """§8 optimized format: (Next Header, inner IP length) from the inner header's version nibble."""
    # The length field is trusted only inside a whole fixed header (20 / 40 octets), and an IPv4 Total Length
    # must at least cover the header its IHL (>= 5) announces: anything else cannot be the one IP packet a
    # tunnel delivers (docs/eesp.md), so it is a bad inner packet, not a bad Pad Length.
    ver = body[0] >> 4 if body else None
    if ver == 4 and len(body) >= 20:
        ihl, total = (body[0] & 0xF) * 4, struct.unpack(">H", body[2:4])[0]
        if ihl >= 20 and total >= ihl:
            return IPPROTO_IPV4, total
    elif ver == 6 and len(body) >= 40:
        return IPPROTO_IPV6, 40 + struct.unpack(">H", body[4:6])[0]
    raise EespModelError("eesp-bad-inner-packet", f"version nibble {ver}, {len(body)} octets")


# --------------------------------------------------------------------------------------------------------
# §11 anti-replay reference model and sender state
# --------------------------------------------------------------------------------------------------------


class ReplayModel:
    """Every accepted sequence number of one Sub SA, plus the window rule: the window covers
    [top - size + 1, top]; s > top is new, s <= top - size is too old, otherwise a duplicate iff accepted."""

    def __init__(self, size: int = 64):
        self.size = size
        self.top = 0
        self.accepted: set[int] = set()

    def check(self, s: int) -> str:
        """"ok", "replay-duplicate" or "replay-too-old" (no state change)."""
        if s > self.top:
            return "ok"
        if s <= self.top - self.size:
            return "replay-too-old"
        return "replay-duplicate" if s in self.accepted else "ok"

    def update(self, s: int) -> None:
        self.accepted.add(s)
        self.top = max(self.top, s)

    def accept(self, s: int) -> str:
        """check, and update when it passes; returns the verdict."""
        verdict = self.check(s)
        if verdict == "ok":
            self.update(s)
        return verdict


class Sender:
    """Per Sub SA counters (§11, §15, D10): the sequence number starts at 1 and never wraps; the explicit IV
    is the sequence number, or a per-Sub-SA counter from 1 when SN = None."""

    def __init__(self, sa: SA):
        self.sa = sa
        self.last: dict[int, int] = {}  # session_id -> last sequence number (or IV counter) used

    def next(self, session_id: int = 0) -> tuple[int | None, int | None]:
        """(seq, iv) for the next packet of this Sub SA."""
        n = self.last.get(session_id, 0)
        if n >= MAX_SEQ:
            raise EespModelError("sequence-overflow", f"Sub SA {session_id}")
        self.last[session_id] = n + 1
        if self.sa.seq:
            return n + 1, (None if self.sa.suite.iiv else n + 1)
        return None, n + 1

    def seal(self, payload: bytes, *, next_header: int, session_id: int = 0, **kw) -> bytes:
        self.sa.sub_sa_keymat(session_id)  # refuse an out-of-range Sub SA before using up a number
        seq, iv = self.next(session_id)
        return seal(self.sa, payload, next_header=next_header, session_id=session_id, seq=seq, iv=iv, **kw)

    def encap(self, ip_packet: bytes, *, session_id: int = 0, **kw) -> bytes:
        self.sa.sub_sa_keymat(session_id)
        seq, iv = self.next(session_id)
        return encap(self.sa, ip_packet, session_id=session_id, seq=seq, iv=iv, **kw)


# --------------------------------------------------------------------------------------------------------
# IP helpers
# --------------------------------------------------------------------------------------------------------



def ipv4_checksum(hdr: bytes) -> int:
    """Header checksum of an IPv4 header (its own checksum field counted as zero)."""
    return inet_checksum(hdr[:10] + b"\0\0" + hdr[12:])


def _fix_ip(hdr: bytearray, total_len: int) -> bytes:
    """Set the IPv4 Total Length + checksum, or the IPv6 Payload Length, of a header chain."""
    if hdr[0] >> 4 == 4:
        if total_len > 0xFFFF:
            raise EespModelError("too-long", f"{total_len} octets")
        hdr[2:4] = struct.pack(">H", total_len)
        hdr[10:12] = struct.pack(">H", ipv4_checksum(bytes(hdr[: (hdr[0] & 0xF) * 4])))
    else:
        if total_len - 40 > 0xFFFF:
            raise EespModelError("too-long", f"{total_len} octets")
        hdr[4:6] = struct.pack(">H", total_len - 40)
    return bytes(hdr)


def _ipv6_chain(pkt: bytes, end: int) -> list[tuple[int, int, int, int]]:
    """The IPv6 extension headers 0/43/44/60 in front of the L4 header: (type, offset, length, nh_field)."""
    out, nh, nh_field, off = [], pkt[6], 6, 40
    while nh in IPV6_EXT_HEADERS:
        if off + 8 > end:
            raise EespModelError("ip-truncated", "IPv6 extension header")
        elen = 8 if nh == IPV6_FRAGMENT else (pkt[off + 1] + 1) * 8
        if off + elen > end:
            raise EespModelError("ip-truncated", "IPv6 extension header")
        out.append((nh, off, elen, nh_field))
        nh, nh_field, off = pkt[off], off, off + elen
    return out


def _ip_length(pkt: bytes) -> int:
    ver = pkt[0] >> 4 if pkt else None
    if ver == 4 and len(pkt) >= 20:
        total, ihl = struct.unpack(">H", pkt[2:4])[0], (pkt[0] & 0xF) * 4
        if ihl < 20 or not ihl <= total <= len(pkt):
            raise EespModelError("ip-bad-length")
        return total
    if ver == 6 and len(pkt) >= 40:
        total = 40 + struct.unpack(">H", pkt[4:6])[0]
        if total > len(pkt):
            raise EespModelError("ip-bad-length")
        return total
    raise EespModelError("not-ip", f"version nibble {ver}, {len(pkt)} octets")


def ipv6_insertion_point(pkt: bytes) -> tuple[int, int]:
    """D14: (offset where EESP goes, offset of the Next Header octet that must point to it).

    EESP follows Hop-by-Hop, Routing and Fragment headers, and a Destination Options header that precedes a
    Routing header; everything from the first other header on travels inside EESP.
    """
    chain = _ipv6_chain(pkt, _ip_length(pkt))
    at, nh_field = 40, 6
    for i, (t, off, elen, _f) in enumerate(chain):
        before_routing = t == IPV6_DSTOPTS and any(c[0] == IPV6_ROUTING for c in chain[i + 1 :])
        if t in (IPV6_HBH, IPV6_ROUTING, IPV6_FRAGMENT) or before_routing:
            at, nh_field = off + elen, off
        else:
            break
    return at, nh_field


def _is_fragment(pkt: bytes, hdr_end: int) -> bool:
    if pkt[0] >> 4 == 4:
        return struct.unpack(">H", pkt[6:8])[0] & 0x3FFF != 0  # MF or a fragment offset
    for t, off, _elen, _f in _ipv6_chain(pkt, hdr_end):
        if off >= hdr_end:
            break
        if t == IPV6_FRAGMENT and struct.unpack(">H", pkt[off + 2 : off + 4])[0] & 0xFFF9:
            return True
    return False


# --------------------------------------------------------------------------------------------------------
# §14 encapsulation and demultiplexing of whole IP packets
# --------------------------------------------------------------------------------------------------------


def encap(
    sa: SA,
    ip_packet: bytes,
    *,
    seq: int | None = None,
    iv: int | None = None,
    session_id: int = 0,
    outer: bytes | None = None,
    udp_sport: int = UDP_ENCAP_PORT,
    options=(),
    crypt_offset: int | None = None,
    pad_len: int | None = None,
) -> bytes:
    """Encapsulate one IPv4/IPv6 packet; returns the outer IP packet.

    Transport mode: EESP goes after the IPv4 header (options included) or at the D14 IPv6 point; the PIH
    carries the protocol it displaced. Tunnel mode: `outer` is the new outer header chain (an IPv4 header with
    any options, or an IPv6 header with any extension headers), whose last protocol field, lengths and IPv4
    checksum are filled in; the payload is the whole inner packet (NH 4 / 41). With sa.udp_encap a UDP header
    (sport `udp_sport`, dport 4500, checksum 0 over IPv4, computed over IPv6) sits between the outer IP header
    and EESP.
    """
    pkt = ip_packet[: _ip_length(ip_packet)]
    if sa.mode == "transport":
        if pkt[0] >> 4 == 4:
            at, nh_field = (pkt[0] & 0xF) * 4, 9
        else:
            at, nh_field = ipv6_insertion_point(pkt)
        head, payload, next_header = bytearray(pkt[:at]), pkt[at:], pkt[nh_field]
    elif sa.mode == "tunnel":
        if outer is None:
            raise EespModelError("bad-argument", "tunnel mode needs an outer header template")
        head, payload = bytearray(outer), pkt
        next_header = IPPROTO_IPV4 if pkt[0] >> 4 == 4 else IPPROTO_IPV6
        if head[0] >> 4 == 4:
            if len(head) != (head[0] & 0xF) * 4 or len(head) < 20:
                raise EespModelError("bad-argument", "IPv4 template length must equal IHL * 4")
            nh_field = 9
        elif head[0] >> 4 == 6 and len(head) >= 40:
            chain = _ipv6_chain(bytes(head), len(head))
            nh_field = chain[-1][1] if chain else 6
            if (chain[-1][1] + chain[-1][2] if chain else 40) != len(head):
                raise EespModelError("bad-argument", "IPv6 template must be a header chain only")
        else:
            raise EespModelError("bad-argument", "outer template is not IPv4/IPv6")
    else:
        raise EespModelError("bad-config", f"encap does not do mode {sa.mode}")

    outer_version = head[0] >> 4
    eesp = seal(sa, payload, next_header=next_header, session_id=session_id, seq=seq, iv=iv, options=options,
                crypt_offset=crypt_offset, outer_ip_version=outer_version, pad_len=pad_len)
    if sa.udp_encap:
        if len(eesp) + UDP_LEN > 0xFFFF:
            raise EespModelError("too-long")
        eesp = udp_encap_header(head, udp_sport, UDP_ENCAP_PORT, eesp) + eesp
        head[nh_field] = IPPROTO_UDP
    else:
        head[nh_field] = sa.ip_proto
    return _fix_ip(head, len(head) + len(eesp)) + eesp


def classify_udp_payload(payload: bytes, esp_spis=()) -> str:  # type: ignore[no-untyped-def]
    """§14 order on UDP 4500: "keepalive", "ike" (non-ESP marker), "esp" for an SPI in ``esp_spis`` (the
    ESP SAs on the port), "eesp" for a first octet 0x80 (the only version-0 one, §3), else "esp"."""
    if payload == b"\xff":
        return "keepalive"
    if len(payload) >= 4 and payload[:4] == bytes(4):
        return "ike"
    if len(payload) >= 4 and struct.unpack(">I", payload[:4])[0] in esp_spis:
        return "esp"
    if payload[:1] == b"\x80":
        return "eesp"
    return "esp"


def decap(sas, packet: bytes, *, windows: dict | None = None, ip_proto: int | None = None,
          check_udp_checksum: bool = True, zero_ok_v6: bool = False) -> tuple[Opened, bytes]:
    """§14 demultiplexing + §16 on one outer IP packet; returns (Opened, recovered IP packet).  UDP checksums are
    verified as an endpoint does (D17) unless `check_udp_checksum` is off.

    The SA's mode decides: tunnel returns the inner packet; transport puts the payload back behind the outer
    header chain with the PIH's Next Header. `ip_proto` defaults to the (first) SA's protocol number.
    """
    if ip_proto is None:
        first = sas if isinstance(sas, SA) else next(iter(sas.values()), None)
        ip_proto = first.ip_proto if first is not None else DEFAULT_IP_PROTO
    pkt = packet[: _ip_length(packet)]
    if pkt[0] >> 4 == 4:
        at, nh_field = (pkt[0] & 0xF) * 4, 9
    else:  # EESP (or UDP) follows the extension headers 0/43/44/60 that precede it
        at, nh_field = 40, 6
        for _t, off, elen, _f in _ipv6_chain(pkt, len(pkt)):
            at, nh_field = off + elen, off
    if _is_fragment(pkt, at):
        raise EespModelError("eesp-fragment")
    proto = pkt[nh_field]
    rest = pkt[at:]
    if proto == ip_proto:
        eesp = rest
    elif proto == IPPROTO_UDP and len(rest) >= UDP_LEN and struct.unpack(">H", rest[2:4])[0] == UDP_ENCAP_PORT:
        if struct.unpack(">H", rest[4:6])[0] != len(rest):
            raise EespModelError("udp-length-mismatch")
        why = udp_checksum_verdict(pkt, at, zero_ok_v6) if check_udp_checksum else None
        if why:
            raise EespModelError(why)
        eesp = rest[UDP_LEN:]
        kind = classify_udp_payload(eesp)
        if kind != "eesp":
            raise EespModelError("not-eesp", kind)
    else:
        raise EespModelError("not-eesp", f"protocol {proto}")

    opened = open(sas, eesp, windows=windows)
    sa = _lookup(sas, opened.spi)
    if sa.mode == "tunnel":
        if opened.next_header not in (IPPROTO_IPV4, IPPROTO_IPV6):
            raise EespModelError("eesp-bad-inner-packet", f"Next Header {opened.next_header} in tunnel mode")
        # The project's decision (docs/eesp.md): only one whole IP packet, of the version the Next Header names
        # (4 -> IPv4, 41 -> IPv6), is delivered.
        if not opened.payload or not _whole_ip_packet(opened.payload):
            raise EespModelError("eesp-bad-inner-packet", f"{len(opened.payload)} octets, not one whole IP packet")
        want = 4 if opened.next_header == IPPROTO_IPV4 else 6
        if opened.payload[0] >> 4 != want:
            raise EespModelError("eesp-bad-inner-packet",
                                 f"an IPv{opened.payload[0] >> 4} packet under Next Header {opened.next_header}")
        return opened, opened.payload
    head = bytearray(pkt[:at])
    head[nh_field] = opened.next_header  # the UDP header (if any) goes with the EESP packet
    return opened, _fix_ip(head, len(head) + len(opened.payload)) + opened.payload
