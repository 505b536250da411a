"""``pypsp diagnose``: why does a PSP packet not verify?

Give it the packets (a capture, or the hex of one packet) and the keys the
implementer believes in.  Every packet is first opened with the correct
algorithm (the core's :class:`pypsp.Decryptor`).  When that fails, the packet
is recomputed with the known mistakes (psp.md §3-§5, §9), alone and in pairs,
until one reproduces its ICV exactly:

- key: KDF label ("Pv0" for every version, the label of another version,
  the version in the wrong octet, the label's byte order), KDF counter (from
  0, after the fixed data, one octet wide), KDF length field (in octets, 128
  in each half), KDF context (SPI byte order, SPI without its key-phase bit),
  the master key of the other SPI bit, the master key used without the KDF,
  and a configured ``psp-key`` that differs from the master-derived key;
- nonce: IV ‖ SPI, the IV alone (zero-padded either side), either field in
  host byte order;
- layout: Crypt Offset in octets instead of words, counted after the VC, or
  from the start of the PSP header; the cleartext part left out of the AAD;
  the VC left out of the AAD, or kept in it although the offset encrypts it
  (scapy); a GMAC version sealed as GCM and the reverse; S/D or R bits set
  after the ICV was computed.

The recomputations go through ``pecore.primitives`` (the core's AEAD, KDF
and CMAC); this module does no cryptography of its own.
"""
from __future__ import annotations

import argparse
import struct
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pecore import primitives as prim
from pecore.tools._tables import PSP_KEY_LEN, PSP_VERSION_NUMBERS
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
    emit,
    ip_lengths,
    load_input,
    search,
)
from pecore.protocol import PSP_VERSIONS, locate_psp
from pecore.util import key_bytes
from pypsp.crypto import Decryptor, kdf_label
from pypsp.errors import ConfigurationError, PspError
from pypsp.header import VERSION_NAMES, Header

HDR_LEN = 16
ICV_LEN = 16
KEY_LEN = PSP_KEY_LEN
GMAC = tuple(v.version for v in PSP_VERSIONS if v.gmac)
SPEC = "psp.md"

#: Core statuses after which a known mistake may still explain the packet.
_SEARCHABLE = {"authentication-failed", "no-key", "psp-crypt-offset-past-payload"}

KeyTable = Mapping[Union[int, Tuple[int, Optional[int]]], Union[bytes, str]]


def _label_text(label: int) -> str:
    raw = label.to_bytes(4, "big")
    text = f"{label:#010x}"
    if raw[3] == 0 and all(0x20 < b < 0x7F for b in raw[:3]):
        text += f' ("{raw[:3].decode()}")'
    return text


# ---------------------------------------------------------------------- mistakes


def _m(id: str, field: str, description: str, sent: Optional[str] = None, expected: Optional[str] = None,
       ref: str = SPEC, severity: str = "error") -> Mistake:
    return Mistake(id, field, description, sent, expected, ref, severity)


_LABEL_FIELD = "KDF label (PRF input octets 4-7)"
_COUNTER_FIELD = "KDF counter (PRF input octets 0-3)"
_LENGTH_FIELD = "KDF length L (PRF input octets 12-15)"
_CONTEXT_FIELD = "KDF context (PRF input octets 8-11)"
_NONCE_FIELD = "AEAD nonce"


class _Packet:
    """The fields of a PSP packet, read leniently (the crypto layout needs them even when malformed)."""

    def __init__(self, psp: bytes) -> None:
        self.psp = psp
        hdr, self.status = Header.parse_lenient(psp)  # 16 octets or more: every field is read
        assert hdr is not None
        self.next_header, self.hdr_ext_len = hdr.next_header, hdr.hdr_ext_len
        self.reserved, self.crypt_offset = hdr.reserved, hdr.crypt_offset
        self.sample, self.drop = hdr.sample, hdr.drop
        self.version, self.virt, self.always_one = hdr.version, hdr.virt, int(hdr.always_one)
        self.spi, self.iv = hdr.spi, hdr.iv
        self.h16 = psp[:HDR_LEN]
        self.p = psp[HDR_LEN:-ICV_LEN] if len(psp) >= HDR_LEN + ICV_LEN else b""
        self.icv = psp[-ICV_LEN:]
        self.ext_len = max(0, (self.hdr_ext_len + 1) * 8 - HDR_LEN)

    def fields(self) -> Dict[str, object]:
        out: Dict[str, object] = {"spi": f"{self.spi:#010x}"}
        if len(self.psp) >= HDR_LEN:
            out.update(version=self.version, nh=self.next_header, co=self.crypt_offset, iv=f"{self.iv:#x}")
            if self.virt:
                out["vc"] = self.psp[16:24].hex()
            if self.sample or self.drop:
                out["S"], out["D"] = int(self.sample), int(self.drop)
            if self.reserved:
                out["R"] = self.reserved
        out["len"] = len(self.psp)
        return out


# -------------------------------------------------------------------- diagnoser


class PspDiagnoser:
    """Diagnoses PSP packets against one set of keys (master keys and/or derived keys).

    ``master_keys`` is the pair (key0, key1), either may be None; ``keys``
    maps SPI or (SPI, version) to a derived key, as for
    :class:`pypsp.Decryptor`.  ``max_mistakes`` bounds how many mistakes
    one explanation may combine.
    """

    def __init__(self, *, master_keys: Optional[Sequence[Optional[Union[bytes, str]]]] = None,
                 keys: Optional[KeyTable] = None, port: int = 1000, max_mistakes: int = 2) -> None:
        self.master: Tuple[Optional[bytes], Optional[bytes]] = (None, None)
        if master_keys is not None:
            if len(master_keys) != 2:
                raise ConfigurationError("master_keys is a pair (key0, key1); either may be None")
            self.master = tuple(None if k is None else key_bytes(k, f"master key {i}", ConfigurationError)
                                for i, k in enumerate(master_keys))  # type: ignore[assignment]
        self.derived: Dict[Tuple[int, Optional[int]], bytes] = {}
        for spec, key in (keys or {}).items():
            spi, version = spec if isinstance(spec, tuple) else (spec, None)
            self.derived[(spi, version)] = key_bytes(key, f"key for SPI {spi:#010x}", ConfigurationError)
        has_master = any(k is not None for k in self.master)
        self._dec = Decryptor(master_keys=self.master if has_master else None, keys=self.derived or None,
                              udp_dport=port)
        self.port = port
        self.max_mistakes = max_mistakes
        self.hints: Dict[tuple, int] = {}
        self._keys_cache: Dict[Tuple[int, int], List[Choice]] = {}

    # ----------------------------------------------------------------- input

    def locate(self, ip: bytes) -> Optional[bytes]:
        """The PSP part (UDP payload to the PSP port) of an IP packet, or None."""
        loc, _ = locate_psp(ip, self.port)
        return None if loc is None else ip[loc.offset : loc.offset + loc.length]

    @staticmethod
    def is_part(data: bytes) -> bool:
        ipl = ip_lengths(data)
        return not (ipl is not None and ipl[1] == len(data))  # a whole IP packet that is not PSP is not PSP

    # ------------------------------------------------------------------ keys

    def _derived_for(self, spi: int, version: int) -> Optional[bytes]:
        key = self.derived.get((spi, version))
        if key is None:
            key = self.derived.get((spi, None))
            if key is not None and len(key) != KEY_LEN[version]:
                key = None
        return key

    def _kdf_variants(self, mk: bytes, spi: int, v: int) -> List[Tuple[str, Tuple[Mistake, ...], bytes]]:
        n = KEY_LEN[v]
        bits, blocks, label = n * 8, n // 16, kdf_label(v)
        right = _label_text(label)

        def kdf(lab: int, ctx: int = spi) -> bytes:
            return prim.kdf_ctr_cmac_aes256(mk, lab, ctx, n)

        def blocks_of(fmt: str, fields) -> bytes:
            return b"".join(prim.cmac_aes256(mk, struct.pack(fmt, *f)) for f in fields)

        out = [("kdf", (), kdf(label))]
        for w in PSP_VERSION_NUMBERS:
            if w == v:
                continue
            if w == 0:
                m = _m("kdf-label-pv0", _LABEL_FIELD, f'the label "Pv0" used for a version-{v} packet',
                       _label_text(kdf_label(0)), right, f"{SPEC} §5")
            else:
                m = _m("kdf-label-other-version", _LABEL_FIELD,
                       f"the label of version {w} used for a version-{v} packet",
                       _label_text(kdf_label(w)), right, f"{SPEC} §5")
            out.append((f"label-v{w}", (m,), kdf(kdf_label(w))))
        if v:
            out.append(("label-octet7", (_m("kdf-label-version-octet", _LABEL_FIELD,
                                             "the version OR-ed into octet 7 of the label instead of octet 6",
                                             f"{label & ~0xFF00 | v:#010x}", right, f"{SPEC} §5"),),
                        kdf(0x50763000 | v)))
        out.append(("label-bswap", (_m("kdf-label-byte-order", _LABEL_FIELD, "the label written little-endian",
                                       f"octets {bswap(label, 4).to_bytes(4, 'big').hex()}",
                                       f"octets {label.to_bytes(4, 'big').hex()} (big-endian)", f"{SPEC} §5"),),
                    kdf(bswap(label, 4))))
        out.append(("ctx-bswap", (_m("kdf-context-byte-order", _CONTEXT_FIELD, "the SPI written little-endian",
                                     f"octets {spi.to_bytes(4, 'little').hex()}",
                                     f"octets {spi.to_bytes(4, 'big').hex()} (the SPI as on the wire)",
                                     f"{SPEC} §5"),), kdf(label, bswap(spi, 4))))
        if spi >> 31:
            out.append(("ctx-no-msb", (_m("kdf-context-without-key-phase", _CONTEXT_FIELD,
                                          "the SPI's key-phase bit (MSB) cleared in the KDF context",
                                          f"{spi & 0x7FFFFFFF:#010x}", f"{spi:#010x} (MSB included)",
                                          f"{SPEC} §5"),), kdf(label, spi & 0x7FFFFFFF)))
        out.append(("ctr-zero", (_m("kdf-counter-from-zero", _COUNTER_FIELD, "the block counter starts at 0",
                                    "0x00000000" + (", 0x00000001" if blocks == 2 else ""),
                                    "0x00000001" + (", 0x00000002" if blocks == 2 else ""), f"{SPEC} §5"),),
                    blocks_of(">IIII", [(i, label, spi, bits) for i in range(blocks)])))
        out.append(("ctr-after", (_m("kdf-counter-after-fixed-data", "KDF counter position",
                                     "the counter placed after the fixed data (label ‖ context ‖ L ‖ counter)",
                                     "label ‖ context ‖ L ‖ counter", "counter ‖ label ‖ context ‖ L",
                                     f"{SPEC} §5"),),
                    blocks_of(">IIII", [(label, spi, bits, i) for i in range(1, blocks + 1)])))
        out.append(("ctr-octet", (_m("kdf-counter-width", _COUNTER_FIELD, "the counter encoded in one octet",
                                     "1 octet (13-octet PRF input)", "4 octets, big-endian (16-octet PRF input)",
                                     f"{SPEC} §5"),),
                    blocks_of(">BIII", [(i, label, spi, bits) for i in range(1, blocks + 1)])))
        out.append(("len-octets", (_m("kdf-length-in-octets", _LENGTH_FIELD, "L given in octets instead of bits",
                                      f"{n:#010x} ({n} octets)", f"{bits:#010x} ({bits} bits)", f"{SPEC} §5"),),
                    blocks_of(">IIII", [(i, label, spi, n) for i in range(1, blocks + 1)])))
        if blocks == 2:
            out.append(("len-128", (_m("kdf-length-per-block", _LENGTH_FIELD,
                                       "L = 128 in each half of a 256-bit key (two 128-bit derivations)",
                                       "0x00000080", "0x00000100 in both blocks", f"{SPEC} §5"),),
                        blocks_of(">IIII", [(i, label, spi, 128) for i in range(1, 3)])))
        out.append(("direct", (_m("master-key-used-directly", "SA key",
                                  "the master key used as the SA key, without the KDF",
                                  f"the master key's first {n} octets" if n < 32 else "the master key",
                                  f"the key derived from it with the KDF (version {v}, SPI {spi:#010x})",
                                  f"{SPEC} §5"),), mk[:n]))
        return out

    def key_choices(self, spi: int, v: int) -> List[Choice]:
        """The SA keys to try for (SPI, version): the right one first, then the mistaken ones."""
        cached = self._keys_cache.get((spi, v))
        if cached is not None:
            return cached
        choices: List[Choice] = []
        file_key = self._derived_for(spi, v)
        if file_key is not None:
            choices.append(Choice("psp-key", file_key))
        sel = spi >> 31
        for idx in (sel, 1 - sel):
            mk = self.master[idx]
            if mk is None or len(mk) != 32:
                continue
            base: Tuple[Mistake, ...] = ()
            if idx != sel:
                base = (_m("master-key-wrong-spi-bit", "master key selection (SPI bit 31)",
                           "the master key of the other key phase",
                           f"master key {idx}", f"master key {sel} (SPI {spi:#010x} has MSB {sel})", f"{SPEC} §3.4"),)
            for tag, mistakes, key in self._kdf_variants(mk, spi, v):
                ms = base + mistakes
                if file_key is not None and idx == sel and not mistakes:
                    ms += (_m("psp-key-mismatch", "derived key (psp-key)",
                              "the packet uses the key derived from the master key, not the configured psp-key",
                              f"the key derived from master key {idx}", f"the configured psp-key for SPI {spi:#010x}",
                              "docs/keys.md"),)
                choices.append(Choice((idx, tag), key, ms))
        choices = dedupe(choices)
        self._keys_cache[(spi, v)] = choices
        return choices

    # -------------------------------------------------------------- layouts

    @staticmethod
    def nonce_choices(pk: _Packet) -> List[Choice]:
        spi, iv = pk.psp[4:8], pk.psp[8:16]
        right = "SPI ‖ IV, both as on the wire"
        ref = f"{SPEC} §4.1"

        def c(key: str, nonce: bytes, id: str, desc: str, sent: str) -> Choice:
            return Choice(key, nonce, (_m(id, _NONCE_FIELD, desc, sent, right, ref),))

        return dedupe([
            Choice("spi-iv", spi + iv),
            c("iv-spi", iv + spi, "nonce-iv-spi-order", "IV and SPI swapped in the nonce", "IV ‖ SPI"),
            c("zero-iv", bytes(4) + iv, "nonce-iv-only", "the nonce is the IV alone, zero-padded in front",
              "00000000 ‖ IV"),
            c("iv-zero", iv + bytes(4), "nonce-iv-only-left-aligned", "the nonce is the IV alone, zero-padded after it",
              "IV ‖ 00000000"),
            c("spi-iv-le", spi + iv[::-1], "nonce-iv-byte-order", "the IV in the nonce in little-endian byte order",
              "SPI ‖ IV reversed"),
            c("spi-le-iv", spi[::-1] + iv, "nonce-spi-byte-order", "the SPI in the nonce in little-endian byte order",
              "SPI reversed ‖ IV"),
        ])

    @staticmethod
    def layout_choices(pk: _Packet) -> List[Choice]:
        """(AAD, ciphertext) pairs: how the packet splits into authenticated and encrypted parts."""
        p, h16, v, co = pk.p, pk.h16, pk.version, pk.crypt_offset
        n, ext = 4 * co, min(pk.ext_len, len(pk.p))
        gmac = v in GMAC
        out: List[Choice] = []
        co_field = "Crypt Offset (octet 2, bits 5-0)"

        def gcm(key, clear: int, mistakes=(), header: bytes = h16, skip: int = 0) -> None:
            if 0 <= clear <= len(p) and skip <= clear:
                out.append(Choice(key, (header + p[skip:clear], p[clear:]), tuple(mistakes)))

        def gmac_layout(key, mistakes=(), header: bytes = h16, skip: int = 0) -> None:
            out.append(Choice(key, (header + p[skip:], b""), tuple(mistakes)))

        if gmac:
            gmac_layout("right")
            out.append(Choice("gmac-as-gcm", (h16 + p[:n], p[n:]) if n <= len(p) else None, (
                _m("gmac-as-gcm", "Version (octet 3, bits 5-2)",
                   f"a version-{v} ({VERSION_NAMES[v]}) packet sealed with AES-GCM: payload encrypted",
                   "AES-GCM, payload encrypted after the crypt offset",
                   "AES-GMAC: AAD = header ‖ whole payload, nothing encrypted", f"{SPEC} §4.2"),)))
            if ext and pk.virt:
                gmac_layout("vc-out", [_m("vc-outside-aad", "VC (Virtualization Cookie)",
                                          "the VC left out of the AAD", "AAD without the VC",
                                          "AAD = header ‖ VC ‖ payload", f"{SPEC} §4.2")], skip=ext)
        else:
            gcm("right", n)
            out.append(Choice("gcm-as-gmac", (h16 + p, b""), (
                _m("gcm-as-gmac", "Version (octet 3, bits 5-2)",
                   f"a version-{v} ({VERSION_NAMES.get(v, '?')}) packet sealed with AES-GMAC: payload left in clear",
                   "AES-GMAC, nothing encrypted", f"AES-GCM, encrypted from octet {16 + n} (crypt offset {co})",
                   f"{SPEC} §4.1"),)))
            if co:
                gcm("co-octets", co, [_m("crypt-offset-in-octets", co_field,
                                         "the crypt offset counted in octets instead of 4-octet words",
                                         f"{co} octet{'s' if co != 1 else ''} in clear", f"{n} octets in clear ({co} word{'s' if co != 1 else ''})", f"{SPEC} §3.1")])
                gcm("clear-out", n, [_m("clear-part-outside-aad", "AAD",
                                        "the cleartext part before the crypt offset left out of the AAD",
                                        "AAD = the 16 header octets only",
                                        f"AAD = the first {16 + n} octets (header up to the crypt offset)",
                                        f"{SPEC} §4.1")], skip=n)
            if n >= 16:
                gcm("co-from-hdr", n - 16, [_m("crypt-offset-from-header-start", co_field,
                                                "the crypt offset counted from the first PSP octet instead of the end of the IV",
                                                f"{n - 16} octets in clear after the IV",
                                                f"{n} octets in clear after the IV", f"{SPEC} §3.1")])
            if ext and pk.virt:
                if n >= ext:
                    gcm("vc-out", n, [_m("vc-outside-aad", "VC (Virtualization Cookie)",
                                         "the VC left out of the AAD although it is in clear",
                                         "AAD without the VC", f"AAD = header ‖ VC ‖ the {n - ext} octets after it",
                                         f"{SPEC} §4.1")], skip=ext)
                else:
                    gcm("vc-in", ext, [_m("vc-inside-aad", "VC (Virtualization Cookie)",
                                          "the whole VC kept in clear and in the AAD although the crypt offset "
                                          "encrypts it (scapy's behaviour)",
                                          "VC in clear and authenticated",
                                          f"crypt offset {co}: the VC octets from octet {16 + n} on are encrypted",
                                          f"{SPEC} §9.3")])
                    gcm("vc-out", ext, [_m("vc-outside-aad", "VC (Virtualization Cookie)",
                                           "the VC sent in clear but left out of the AAD",
                                           "VC neither encrypted nor authenticated",
                                           f"crypt offset {co}: the VC octets from octet {16 + n} on are encrypted",
                                           f"{SPEC} §4.1")], skip=ext)
            if ext:
                gcm("co-after-vc", ext + n, [_m("crypt-offset-excludes-vc", co_field,
                                                "the crypt offset counted from the end of the VC / extension area",
                                                f"{ext + n} octets in clear after the IV",
                                                f"{n} octets in clear after the IV (the offset counts the VC)",
                                                f"{SPEC} §3.1")])
        layout = gmac_layout if gmac else (lambda key, mistakes, header: gcm(key, n, mistakes, header))
        if pk.sample or pk.drop:
            cleared = h16[:3] + bytes([h16[3] & 0x3F]) + h16[4:]
            layout("sd-after", [_m("sd-bits-outside-aad", "S/D bits (octet 3, bits 7-6)",
                                   "the S/D bits set after the ICV was computed (not covered by it)",
                                   "ICV over S = D = 0", f"ICV over S = {int(pk.sample)}, D = {int(pk.drop)} as sent",
                                   f"{SPEC} §2")], header=cleared)
        if pk.reserved:
            cleared = h16[:2] + bytes([h16[2] & 0x3F]) + h16[3:]
            layout("r-after", [_m("reserved-bits-outside-aad", "R bits (octet 2, bits 7-6)",
                                  "the reserved bits changed after the ICV was computed",
                                  "ICV over R = 0", "R = 0 (send 0; the R bits are inside the AAD)",
                                  f"{SPEC} §2")], header=cleared)
        return dedupe([c for c in out if c.value is not None])

    # -------------------------------------------------------------- diagnosis

    def diagnose_part(self, psp: bytes, *, frame: Optional[int] = None, ip: Optional[bytes] = None) -> PacketReport:
        """Diagnose one PSP packet (the UDP payload: header .. ICV)."""
        rep = PacketReport("PSP", UNDIAGNOSED, frame=frame)
        if ip is not None:
            try:
                rep.src, rep.dst = addresses(ip)
            except (ValueError, IndexError):
                pass
        if len(psp) < HDR_LEN:
            rep.fields = {"len": len(psp)}
            rep.verdict, rep.reason = MALFORMED, "psp-truncated"
            rep.message = f"{len(psp)} octets: shorter than the 16-octet PSP header"
            return rep
        pk = _Packet(psp)
        rep.fields = pk.fields()
        status = pk.status
        try:
            self._dec.open(psp)
            rep.verdict, rep.reason = VERIFIES, None
            rep.warnings = self._warnings(pk)
            return rep
        except PspError as e:
            rep.reason, rep.message = e.code, str(e)
        if rep.reason not in _SEARCHABLE or len(psp) < HDR_LEN + ICV_LEN or status not in ("ok", "psp-crypt-offset-past-payload"):
            rep.verdict = MALFORMED
            return rep
        if pk.version not in KEY_LEN:
            rep.verdict = MALFORMED
            return rep
        keys = self.key_choices(pk.spi, pk.version)
        if not keys:
            rep.verdict = NO_KEY
            rep.message = f"no key for SPI {pk.spi:#010x} and version {pk.version}"
            return rep
        tag = pk.icv

        def compute(key: bytes, nonce: bytes, layout: Tuple[bytes, bytes]):
            return key, nonce, layout[0], layout[1]

        def check(desc):
            key, nonce, aad, ct = desc
            try:
                return prim.aead_open(prim.AES_GCM, key, nonce, [aad], ct, tag)
            except prim.PrimitiveError:
                return None

        match = search([keys, self.nonce_choices(pk), self.layout_choices(pk)], compute, check,
                       max_mistakes=self.max_mistakes, hints=self.hints)
        rep.warnings = self._warnings(pk)
        if match is None:
            rep.verdict = NO_KEY if rep.reason == "no-key" else UNDIAGNOSED
            if rep.reason == "no-key":
                rep.message = (f"no key for SPI {pk.spi:#010x} (master key {pk.spi >> 31} is not configured"
                               " and there is no psp-key for it)")
            return rep
        if match.level == 0:  # the checker's own correct computation verifies: should never happen
            rep.notes.append("the checker's own computation with the correct algorithm verifies this packet, "
                             "the core's decryptor does not; please report this")
            return rep
        explanations = [self._merge(ms, pk.version) for ms in match.explanations]
        rep.verdict = DIAGNOSED
        rep.mistakes = explanations[0]
        rep.alternatives = explanations[1:]
        fields = {m.field for m in rep.mistakes}
        rep.warnings = [w for w in rep.warnings if w.field not in fields]
        return rep

    @staticmethod
    def _merge(mistakes: List[Mistake], v: int) -> List[Mistake]:
        """A GMAC/GCM swap together with the label of the swapped version is one mistake: the wrong version."""
        ids = {m.id for m in mistakes}
        swap = "gmac-as-gcm" if "gmac-as-gcm" in ids else "gcm-as-gmac" if "gcm-as-gmac" in ids else None
        w = v ^ 2
        label = next((m for m in mistakes if m.id in ("kdf-label-pv0", "kdf-label-other-version")
                      and m.sent == _label_text(kdf_label(w))), None)
        if swap is None or label is None:
            return mistakes
        rest = [m for m in mistakes if m.id != swap and m is not label]
        merged = _m("sealed-as-other-version", "Version (octet 3, bits 5-2)",
                    f"the packet says version {v} ({VERSION_NAMES[v]}) but was sealed as version {w} "
                    f"({VERSION_NAMES[w]}): key derived with the version-{w} label and "
                    + ("the payload encrypted" if swap == "gmac-as-gcm" else "the payload left in clear"),
                    f"version {w} processing", f"version {v}: {VERSION_NAMES[v]} with the label {_label_text(kdf_label(v))}",
                    f"{SPEC} §4, §5")
        return [merged] + rest

    @staticmethod
    def _warnings(pk: _Packet) -> List[Mistake]:
        out = []
        if pk.reserved:
            out.append(_m("reserved-bits-set", "R bits (octet 2, bits 7-6)", "reserved bits set",
                          f"R = {pk.reserved}", "R = 0 (send 0, ignore on receive)", f"{SPEC} §2", "warning"))
        if pk.version in GMAC and pk.crypt_offset:
            out.append(_m("gmac-crypt-offset", "Crypt Offset (octet 2, bits 5-0)",
                          "a non-zero crypt offset on a GMAC version (reserved there)",
                          str(pk.crypt_offset), "0", f"{SPEC} §4.2", "warning"))
        return out

    def diagnose(self, packet: Union[bytes, str]) -> PacketReport:
        """Diagnose one packet: bytes or hex of an IP packet, an Ethernet frame, or the PSP part."""
        data = packet if isinstance(packet, (bytes, bytearray)) else None
        _src, packets, _skipped = load_input(bytes(data) if data is not None else _hex_only(packet),
                                             self.locate, self.is_part, "PSP")
        p = next(packets)
        return self.diagnose_part(p.part, frame=p.frame, ip=p.ip)

    def diagnose_source(self, source: Union[str, bytes], *, limit: int = 0) -> Report:
        """Diagnose a capture file path, a hex string of one packet ('-': stdin) or bytes."""
        desc, packets, skipped = load_input(source, self.locate, self.is_part, "PSP", limit)
        report = Report("PSP", desc)
        for p in packets:
            report.packets.append(self.diagnose_part(p.part, frame=p.frame, ip=p.ip))
        report.skipped = skipped[0]
        return report


def _hex_only(text: str) -> bytes:
    from pecore.tools.diagnose import parse_hex

    if not isinstance(text, str):
        raise DiagnoseInputError(f"a packet is bytes or a hex string, not {type(text).__name__}")
    return parse_hex(text)


# --------------------------------------------------------------------- functions


def diagnose(packet: Union[bytes, str], *, master_keys=None, keys: Optional[KeyTable] = None, port: int = 1000,
             max_mistakes: int = 2) -> PacketReport:
    """Diagnose one PSP packet (bytes or hex: an IP packet, an Ethernet frame or the PSP part)."""
    return PspDiagnoser(master_keys=master_keys, keys=keys, port=port, max_mistakes=max_mistakes).diagnose(packet)


def diagnose_capture(path: str, *, master_keys=None, keys: Optional[KeyTable] = None, port: int = 1000,
                     max_mistakes: int = 2, limit: int = 0) -> Report:
    """Diagnose every PSP packet of a pcap/pcapng file."""
    import os

    if not os.path.isfile(path):
        raise DiagnoseInputError(f"{path}: no such capture file")
    d = PspDiagnoser(master_keys=master_keys, keys=keys, port=port, max_mistakes=max_mistakes)
    return d.diagnose_source(path, limit=limit)


# ---------------------------------------------------------------------------- CLI


def cmd_diagnose(args: argparse.Namespace) -> int:
    from pecore.tools.cli import UsageError

    keys = args.keys_from_args(args)
    if not keys.has_master() and not keys.derived:
        raise UsageError("no keys: give --key-file, --ref-config, --master-key0/1 or --key")
    d = PspDiagnoser(master_keys=keys.master if keys.has_master() else None, keys=keys.derived or None,
                     port=args.port, max_mistakes=args.max_mistakes)
    return emit(d.diagnose_source(args.input, limit=args.limit), args)


def register(sub, add_key_options, keys_from_args) -> None:
    """Add the ``diagnose`` subcommand to the pypsp CLI's subparsers.  The CLI hands over its key options
    (``add_key_options(parser)``) and how it reads them (``keys_from_args(args)``), so that this module does
    not import the CLI that imports it."""
    p = sub.add_parser("diagnose", help="explain why PSP packets do not verify (known interop mistakes)",
                       description="Open each PSP packet with the given keys; when one does not verify, recompute it "
                                   "with the known implementation mistakes (KDF, master key, nonce, crypt offset, "
                                   "VC, GMAC/GCM, ...) and name the one that reproduces it exactly. Exit status: 0 "
                                   "when every packet verifies, 1 when some do not, 2 for usage or input errors.")
    add_common_arguments(p, "PSP")
    add_key_options(p)
    p.add_argument("--port", type=int, default=1000, help="PSP UDP port (default 1000)")
    p.set_defaults(func=cmd_diagnose, keys_from_args=keys_from_args)
