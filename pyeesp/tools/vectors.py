"""EESP interop test vectors: generation and checking (vectors/README.md).

Files (``pyeesp vectors generate``): ``eesp_<suite>_test.json`` for every
AEAD suite (schema ``eesp_packet_test_schema_v1.json``) and
``eesp_sskdf_test.json`` (schema ``eesp_sskdf_test_schema_v1.json``), in the
Wycheproof layout of :mod:`pecore.tools.vectors`.

A packet test is receiver-centric, as for PSP: the group holds the SA
settings both ends share (suite, key size, mode, format, AAD variant,
Sequence Number, SSKDF, announced limits, encapsulation); ``inputs`` hold the
key material, the per-packet sender parameters (Session ID, Sequence Number,
IV, Crypt Offset, caller options) and the wire octets ``ciphertextPacket``;
``outputs`` hold what the receiver delivers (``plaintextPacket``,
``nextHeader``, ``padLength``) or the core's reason for dropping the packet
(``error``, and ``icvValid`` where the drop comes after the ICV check).
Groups with ``stateful: true`` are processed by one receiver in tcId order
(replay windows).  Valid tests without ``DecryptOnly`` must be reproduced
byte for byte by a sender.

Valid packets come from the core's encoder (:class:`pyeesp.SA`); hand-built
ones are sealed here with :mod:`pecore.primitives` (and every core-built
packet is re-sealed that way too, as a consistency check of this builder).
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pecore import primitives
from pecore.tools.vectors import (
    DELIVERY_OUTPUTS, DELIVERY_RULES, Family, Group, HEX, KEYMAT_INPUTS, Outcome, PacketDocChecker, Rng,
    SealedPacket, SUITE_GROUP_FIELDS, SuiteFileBuilder, SuiteGroupBuilder, SuiteInfo, SUITES, Test, VectorFile,
    assemble, check_kat_doc, delivered, dropped, flip, hex_of, hopopts, ip_packet, ipv4_header, ipv4_recheck,
    ipv6_header, kept_flags, key_file_head, l4_checksum, l4_offset, mark_self_computed, outer_template, put,
    register as _register, register_family, secured_offset, shared_notes, test_object, top_schema,
    udp_checksum_v6_vectors, udp_encap_mutations, udp_segment,
)

PACKET_SCHEMA = "eesp_packet_test_schema_v1.json"
SSKDF_SCHEMA = "eesp_sskdf_test_schema_v1.json"
SOURCE_SELF = {"name": "self", "version": "pyeesp 0.1.0, draft-ietf-ipsecme-eesp-04 with decisions D1-D17"}
SOURCE_SPEC = {"name": "self", "version": "eesp.md §19 vectors E1-E5 (self-computed regression anchors)"}


SSKDF_HASH = {"hkdf-sha256": ("sha256", 32), "hkdf-sha384": ("sha384", 48), "hkdf-sha512": ("sha512", 64)}
MAX_SEQ = 2**64 - 1
#: A derived test keeps these flags of the packet it was made from (they describe its keys and layout).
KEEP_FLAGS = ("SubSa", "CryptOffset", "MixedTunnel")

# --------------------------------------------------------------------------------------------------------
# notes (flags)
# --------------------------------------------------------------------------------------------------------

NOTES: Dict[str, Dict[str, str]] = {
    **shared_notes("MixedTunnel", "ModifiedIcv", "ModifiedCiphertext", "NoSa", "OrderDependent", "IpFraming"),
    "SpecNotesKat": {"bugType": "BASIC", "description": "One of the vectors E1-E5 of the project's spec notes (eesp.md "
                     "§19), wrapped in an outer IP header: self-computed regression anchors, not authoritative (the "
                     "drafts publish none)."},
    "SelfComputed": {"bugType": "BASIC", "description": "Computed by this project from draft-ietf-ipsecme-eesp-04 and "
                     "decisions D1-D17 (eesp.md §18); checked by two implementations that share no code. No published "
                     "EESP vectors exist."},
    "SubSa": {"bugType": "BASIC", "description": "Sub SA keys: key ‖ salt = HKDF-Expand(root key, Session ID as 2 octets "
              "big-endian, L) with the group's SSKDF (eesp.md §12, D4)."},
    "SskdfKat": {"bugType": "BASIC", "description": "SSKDF output: HKDF-Expand(PRK = root key, info = Session ID (2 octets, "
                 "big-endian), L)."},
    "ImplicitIv": {"bugType": "BASIC", "description": "RFC 8750 implicit IV: no IV field; the nonce is salt ‖ Sequence Number."},
    "NoSeq": {"bugType": "BASIC", "description": "SN = None: no Sequence Number field and no anti-replay; the explicit IV "
              "is a per-Sub-SA counter."},
    "LinuxXfrmAad": {"bugType": "FUNCTIONALITY", "description": "The Linux XFRM prototype's AAD: Base Header ‖ options ‖ "
                     "Sequence Number, without the explicit IV (D1)."},
    "UdpEncap": {"bugType": "BASIC", "description": "EESP in UDP 4500 (RFC 3948): told from ESP by the first octet's MSB."},
    "CryptOffset": {"bugType": "EDGE_CASE", "description": "A Crypt Offset option (full format, D2/D3): PayloadOffset and "
                    "CryptOffset in 4-octet units; the exposed octets are in the AAD."},
    "EmptyCiphertext": {"bugType": "EDGE_CASE", "description": "The Crypt Offset exposes the PIH and the whole payload: "
                        "only padding, or nothing, is encrypted; the ICV still covers everything."},
    "IntegrityOnly": {"bugType": "BASIC", "description": "AES-GMAC: nothing is encrypted; the AAD is the whole packet "
                      "before the ICV (eesp.md §9)."},
    "Padding": {"bugType": "EDGE_CASE", "description": "Payload lengths 0-3 mod 4: 0-3 octets of zero padding (D11)."},
    "Alignment": {"bugType": "EDGE_CASE", "description": "Pad1/PadN options that put the next-layer header on a 4-octet "
                  "(IPv4) or 8-octet (IPv6) boundary (eesp.md §7)."},
    "Unaligned": {"bugType": "EDGE_CASE", "description": "A misaligned next-layer header: receivers must not reject it "
                  "(eesp.md §7)."},
    "UnknownOption": {"bugType": "EDGE_CASE", "description": "An option of unknown type: skipped by its length and "
                      "reported, or dropped by a strict receiver (D5)."},
    "PadNContent": {"bugType": "EDGE_CASE", "description": "PadN with non-zero contents: not checked on receive."},
    "PihReserved": {"bugType": "EDGE_CASE", "description": "PIH reserved bits set: ignored on receive (D5)."},
    "ExtraPadding": {"bugType": "EDGE_CASE", "description": "More padding than D11 needs, or non-zero padding octets: "
                     "receivers accept any padding that fits."},
    "CryptOffsetReserved": {"bugType": "EDGE_CASE", "description": "Crypt Offset option R bits set: ignored on receive."},
    "IvNotSeq": {"bugType": "EDGE_CASE", "description": "Explicit IV different from the Sequence Number: receivers must "
                 "take the nonce from the IV field."},
    "OptionOrder": {"bugType": "EDGE_CASE", "description": "Options in another order than D13's send order: receivers "
                    "accept any order."},
    "MaxSeq": {"bugType": "EDGE_CASE", "description": "Sequence Number (or IV counter) 2^64-1, the last one a Sub SA sends."},
    "Ipv6ExtensionHeaders": {"bugType": "EDGE_CASE", "description": "IPv6 transport mode with extension headers: EESP "
                             "goes after Hop-by-Hop; a Destination Options header alone travels inside (D14)."},
    "DecryptOnly": {"bugType": "FUNCTIONALITY", "description": "Valid on receive, but built by hand: a conforming sender "
                    "does not produce it (reserved bits, extra padding, an IV other than the sequence number, option "
                    "layouts, a UDP checksum). Check it by decryption only."},
    "ModifiedAad": {"bugType": "AUTH_BYPASS", "description": "An authenticated clear field changed after sealing "
                    "(named in the comment)."},
    "AadMistake": {"bugType": "WRONG_PRIMITIVE", "description": "Sealed with the other AAD variant (explicit IV in or out "
                   "of the AAD, D1): authentication must fail."},
    "SskdfMistake": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with a Sub SA key derived with a known "
                     "mistake (named in the comment): authentication must fail."},
    "KeySplitMistake": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with key and salt taken from the wrong "
                        "ends of the KEYMAT block (the salt is the last 3/4 octets)."},
    "NonceMistake": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with the nonce of the other IV convention "
                     "(implicit vs explicit IV)."},
    "Truncated": {"bugType": "MODIFIED_PARAMETER", "description": "The EESP part is cut short (IP and UDP lengths fixed up)."},
    "ReservedBits": {"bugType": "MODIFIED_PARAMETER", "description": "Base Header R bits set: dropped (D5)."},
    "BadVersion": {"bugType": "MODIFIED_PARAMETER", "description": "EESP Version other than the negotiated 0."},
    "CompatBitClear": {"bugType": "MODIFIED_PARAMETER", "description": "The ESP-compat bit (first octet's MSB) is 0."},
    "SubSaOutOfRange": {"bugType": "MODIFIED_PARAMETER", "description": "Session ID above the announced Maximum Sub SA ID, "
                        "or not 0 without an SSKDF (D6, D9)."},
    "SeqZero": {"bugType": "MODIFIED_PARAMETER", "description": "Sequence Number 0, never valid (D10)."},
    "ReplayedSeq": {"bugType": "FUNCTIONALITY", "description": "A Sequence Number already received on this Sub SA."},
    "ReplayTooOld": {"bugType": "FUNCTIONALITY", "description": "A Sequence Number left of the replay window."},
    "OptionsOverrun": {"bugType": "MODIFIED_PARAMETER", "description": "An option TLV runs past Opt Len, or Opt Len runs "
                       "past the packet."},
    "BadCryptOffsetOption": {"bugType": "MODIFIED_PARAMETER", "description": "A Crypt Offset option whose data length is "
                             "not 2 (D3), or a second one (D13)."},
    "BadPayloadOffset": {"bugType": "MODIFIED_PARAMETER", "description": "PayloadOffset disagrees with the header lengths."},
    "CryptOffsetTooLarge": {"bugType": "MODIFIED_PARAMETER", "description": "The Crypt Offset reaches past the payload or "
                            "into the padding (D16)."},
    "CryptOffsetNotAllowed": {"bugType": "FUNCTIONALITY", "description": "A Crypt Offset option the receiver did not allow "
                              "(none announced, or above EESP_MAX_CRYPT_OFFSET): dropped; icvValid tells policy whether "
                              "the packet authenticated."},
    "BadPadLength": {"bugType": "MODIFIED_PARAMETER", "description": "Pad Length that does not fit (full format), or an "
                     "inner length that leaves a negative or > 255 padding (optimized format)."},
    "DummyPacket": {"bugType": "FUNCTIONALITY", "description": "Next Header 59: a valid dummy packet, authenticated and "
                    "then discarded; nothing is delivered."},
    "BadInnerPacket": {"bugType": "MODIFIED_PARAMETER", "description": "Tunnel mode: the decrypted payload is not one whole "
                       "IPv4/IPv6 packet (version nibble, IHL, Total Length or Payload Length), or not of the version "
                       "the PIH names."},
    "NotEesp": {"bugType": "FUNCTIONALITY", "description": "Not EESP for this receiver: another IP protocol or UDP port, "
                "or on UDP 4500 an ESP packet, an IKE message (non-ESP marker) or a NAT keepalive."},
    "UdpChecksum": {"bugType": "EDGE_CASE", "description": "The UDP checksum of EESP in UDP: 0 over IPv4 "
                    "(RFC 3948 §2.1), computed over IPv6 (RFC 8200 §8.1). A correct one is accepted; a wrong non-zero one is "
                    "discarded (RFC 1122 §4.1.3.4); 0 over IPv6 is discarded unless both ends run RFC 6936's "
                    "zero-checksum mode for the port (off by default). Tools that read captures may still decrypt "
                    "these packets, saying so (eesp.md D17)."},
}

# --------------------------------------------------------------------------------------------------------
# schemas
# --------------------------------------------------------------------------------------------------------

_SPI = hex_of(4)
_U64 = hex_of(8)

PACKET_GROUP = {
    "type": "object",
    "required": ["type", "source", "suite", "encrId", "keySize", "ivSize", "tagSize", "mode", "format", "aad",
                 "seqPresent", "sskdf", "alignOptions", "strict", "ipProtocol", "udpEncap", "stateful", "tests"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "EespPacketTest"},
        "source": {"$ref": "#/$defs/source"},
        **SUITE_GROUP_FIELDS,
        "ivSize": {"enum": [0, 64], "description": "explicit IV on the wire, bits"},
        "tagSize": {"enum": [64, 96, 128], "description": "ICV, bits"},
        "mode": {"enum": ["transport", "tunnel"]},
        "format": {"enum": ["auto", "full", "optimized"], "description": "D2: auto = optimized in tunnel mode, full in "
                   "transport mode; a Crypt Offset option makes it full"},
        "aad": {"enum": ["draft", "linux-xfrm"]},
        "seqPresent": {"type": "boolean"},
        "sskdf": {"enum": ["none", "hkdf-sha256", "hkdf-sha384", "hkdf-sha512"]},
        "alignOptions": {"type": "boolean", "description": "the sender adds Pad1/PadN to align the next-layer header"},
        "maxSubSaId": {"type": "integer", "minimum": 0, "maximum": 65535,
                       "description": "EESP_MAX_SUB_SA_ID announced by the receiver (absent: no limit)"},
        "maxCryptOffset": {"type": "integer", "minimum": 0, "maximum": 255,
                           "description": "EESP_MAX_CRYPT_OFFSET announced by the receiver (absent: none)"},
        "strict": {"type": "boolean", "description": "the receiver drops unknown options"},
        "ipProtocol": {"type": "integer", "minimum": 0, "maximum": 255},
        "udpEncap": {"type": "boolean"},
        "stateful": {"type": "boolean", "description": "one receiver (with anti-replay) processes the tests in tcId order"},
        "replayWindow": {"type": "integer", "minimum": 64},
        "comment": {"type": "string"},
        "tests": {"type": "array", "items": {"$ref": "#/$defs/test"}},
    },
}
PACKET_TEST = test_object(
    {
        "type": "object",
        "required": ["spi", "sessionId", "ciphertextPacket"],
        "additionalProperties": False,
        "oneOf": [{"required": ["key", "salt"]}, {"required": ["rootKey"]}],
        "properties": {
            **KEYMAT_INPUTS,
            "rootKey": {"type": "string", "pattern": "^([0-9a-f]{64}|[0-9a-f]{96}|[0-9a-f]{128})$"},
            "spi": _SPI,
            "sessionId": {"type": "integer", "minimum": 0, "maximum": 65535},
            "seq": _U64,
            "iv": _U64,
            "cryptOffset": {"type": "integer", "minimum": 0, "maximum": 63,
                            "description": "the sender's Crypt Offset option, 4-octet units"},
            "options": {**HEX, "description": "caller option TLVs, sent after the Crypt Offset and before alignment "
                        "padding (D13)"},
            "ciphertextPacket": HEX,
        },
    },
    DELIVERY_OUTPUTS,
    DELIVERY_RULES,
)
SSKDF_GROUP = {
    "type": "object",
    "required": ["type", "source", "sskdf", "tests"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "EespSskdfTest"},
        "source": {"$ref": "#/$defs/source"},
        "sskdf": {"enum": ["hkdf-sha256", "hkdf-sha384", "hkdf-sha512"]},
        "comment": {"type": "string"},
        "tests": {"type": "array", "items": {"$ref": "#/$defs/test"}},
    },
}
SSKDF_TEST = test_object(
    {"type": "object", "required": ["rootKey", "sessionId", "length"], "additionalProperties": False,
     "properties": {"rootKey": {"type": "string", "pattern": "^([0-9a-f]{64}|[0-9a-f]{96}|[0-9a-f]{128})$"},
                    "sessionId": {"type": "integer", "minimum": 0, "maximum": 65535},
                    "length": {"type": "integer", "minimum": 1, "maximum": 255}}},
    {"type": "object", "required": ["keymat"], "additionalProperties": False, "properties": {"keymat": HEX}},
)
SCHEMAS = {
    PACKET_SCHEMA: top_schema(
        PACKET_SCHEMA, "EESP packet test vectors",
        "Wycheproof-style EESP (draft-ietf-ipsecme-eesp-04, decisions D1-D17 of the project's notes) packet vectors: "
        "full wire octets and what a receiver delivers, or why it drops the packet. See vectors/README.md.",
        ["EESP"], PACKET_GROUP, {"test": PACKET_TEST}),
    SSKDF_SCHEMA: top_schema(
        SSKDF_SCHEMA, "EESP Sub SA key derivation test vectors",
        "SSKDF_HKDF_SHA2_256/384/512: HKDF-Expand(root key, Session ID as 2 octets big-endian, L).",
        ["EESP-SSKDF"], SSKDF_GROUP, {"test": SSKDF_TEST}),
}

# --------------------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------------------


def sub_sa_keymat(sskdf: str, root: bytes, sid: int, length: int) -> bytes:
    from pyeesp import derive_sub_sa_key

    return derive_sub_sa_key(root, sid, length, sskdf)


def pih(nh: int, pad: int, reserved: int = 0) -> bytes:
    return struct.pack(">HBB", reserved, nh, pad)


def co_option(payload_offset: int, crypt_offset: int, r: int = 0) -> bytes:
    return struct.pack(">BBH", 2, 2, payload_offset << 10 | crypt_offset << 4 | r)


def seal_eesp(suite: SuiteInfo, aad: str, seq_present: bool, key: bytes, salt: bytes, head: bytes, body: bytes,
              clear: int, *, opt_len: Optional[int] = None, iiv_nonce: Optional[bool] = None) -> bytes:
    """head (Base ‖ options ‖ Seq? ‖ IV?) ‖ body[:clear] ‖ ct ‖ ICV, sealed per §9 / D1."""
    opt_len = head[1] if opt_len is None else opt_len
    seq_at = 8 + opt_len
    iv_at = seq_at + (8 if seq_present else 0)
    iiv = suite.iiv if iiv_nonce is None else iiv_nonce
    nonce = salt + (head[seq_at : seq_at + 8] if iiv else head[iv_at : iv_at + 8])
    if suite.kind == "gmac":
        _ct, tag = primitives.aead_seal(suite.alg, key, nonce, [head + body], b"", suite.icv)
        return head + body + tag
    clear_part = body[:clear]
    aad_parts = [head, clear_part] if aad == "draft" else [head[:iv_at], head[iv_at + suite.iv :], clear_part]
    ct, tag = primitives.aead_seal(suite.alg, key, nonce, aad_parts, body[clear:], suite.icv)
    return head + clear_part + ct + tag


class ESealed(SealedPacket):
    """A sealed packet and the parts it was sealed from."""

    def __init__(self, gb: "EespGroupBuilder", test: Test, wire: bytes, pkt: bytes, *, key: bytes, salt: bytes,
                 head: bytes, body: bytes, clear: int, sid: int, seq: Optional[int], iv: Optional[int], nh: int,
                 pad: int, payload: bytes, full: bool) -> None:
        super().__init__(test, wire, pkt)
        self.gb = gb
        self.key, self.salt, self.head, self.body, self.clear = key, salt, head, body, clear
        self.sid, self.seq, self.iv, self.nh, self.pad, self.payload, self.full = sid, seq, iv, nh, pad, payload, full


class EespGroupBuilder(SuiteGroupBuilder):
    ip_protocol = 49  # provisional, test-only (D7)

    def __init__(self, fb: "EespFileBuilder", group: Group, *, key_bits: int, sskdf: str) -> None:
        super().__init__(fb, group, key_bits)
        f = group.fields
        self.sskdf = sskdf
        self.fmt, self.aad, self.seq_present = f["format"], f["aad"], f["seqPresent"]
        self.spi = int.from_bytes(self.rng.child("spi").bytes(4), "big")
        self.keymat_len = key_bits // 8 + self.suite.salt
        if sskdf == "none":
            km = self.rng.child("key").bytes(self.keymat_len)
            self.key, self.salt, self.root = km[: -self.suite.salt], km[-self.suite.salt :], None
        else:
            self.root = self.rng.child("root").bytes(SSKDF_HASH[sskdf][1])
        self._seq = self.rng.child("seq")

    # -- keys ------------------------------------------------------------------------------------------

    def keys_for(self, sid: int) -> Tuple[bytes, bytes]:
        if self.root is None:
            return self.key, self.salt
        km = sub_sa_keymat(self.sskdf, self.root, sid, self.keymat_len)
        return km[: -self.suite.salt], km[-self.suite.salt :]

    def key_inputs(self) -> Dict[str, Any]:
        if self.root is None:
            return {"key": self.key.hex(), "salt": self.salt.hex()}
        return {"rootKey": self.root.hex()}

    def sa_kwargs(self) -> Dict[str, Any]:
        f = self.g.fields
        kw: Dict[str, Any] = dict(spi=self.spi, suite=self.suite.encr_id, key_bits=self.key_bits, mode=self.mode,
                                  format=self.fmt, seq=self.seq_present, aad=self.aad,
                                  max_sub_sa_id=f.get("maxSubSaId"), max_crypt_offset=f.get("maxCryptOffset"),
                                  strict=f["strict"], ip_protocol=f["ipProtocol"], udp_encap=self.udp,
                                  align_options=f["alignOptions"])
        if self.root is None:
            kw["key"] = self.key + self.salt
        else:
            kw.update(root_key=self.root, sskdf=self.sskdf)
        return kw

    def next_seq(self) -> int:
        return self._seq.int(1, 2**40)

    # -- packets -------------------------------------------------------------------------------------------

    def valid(self, comment: str, flags: Sequence[str], pkt: bytes, *, sid: int = 0, seq: Optional[int] = None,
              co: Optional[int] = None, options: bytes = b"", outer: Optional[int] = None, udp_sport: int = 4500,
              add: bool = True) -> ESealed:
        import pyeesp

        if seq is None:
            seq = self.next_seq()
        kw = self.sa_kwargs()
        kw.update(crypt_offset=co, options=options, udp_sport=udp_sport)
        if self.mode == "tunnel":
            kw["tunnel_header"] = self.outer(outer or (pkt[0] >> 4))
        sa = pyeesp.SA(**kw)
        sa.set_next_seq(seq, sid)
        wire = sa.encrypt(pkt, sid)
        s = self._parts(comment, list(flags), pkt, wire, sid=sid, seq=seq, co=co, options=options)
        if add:
            self.g.add(s.test)
        return s

    def _parts(self, comment: str, flags: List[str], pkt: bytes, wire: bytes, *, sid: int, seq: int,
               co: Optional[int], options: bytes) -> ESealed:
        su = self.suite
        at = secured_offset(wire)
        e = wire[at:]
        opt_len = e[1]
        head_len = 8 + opt_len + (8 if self.seq_present else 0) + su.iv
        head = e[:head_len]
        full = self.fmt == "full" or (self.fmt == "auto" and (co is not None or self.mode == "transport"))
        if self.mode == "tunnel":
            payload, nh = pkt, 4 if pkt[0] >> 4 == 4 else 41
        else:
            keep, proto, _f = l4_offset(pkt, stop=(60,)) if pkt[0] >> 4 == 6 else l4_offset(pkt)
            payload, nh = pkt[keep:], proto
        pad = -((4 if full else 0) + len(payload)) % 4
        body = (pih(nh, pad) if full else b"") + payload + bytes(pad)
        clear = len(body) if su.kind == "gmac" else (4 * co if co is not None else 0)
        key, salt = self.keys_for(sid)
        again = seal_eesp(su, self.aad, self.seq_present, key, salt, head, body, clear)
        if again != e:
            raise AssertionError(f"{comment}: the vector builder does not reproduce the core's packet")
        if self.root is not None and "SubSa" not in flags:
            flags.append("SubSa")
        if self.seq_present and seq == MAX_SEQ:
            flags.append("MaxSeq")
        if co is not None:
            flags.append("CryptOffset")
            if su.kind != "gmac" and 4 * co >= (4 if full else 0) + len(payload):
                flags.append("EmptyCiphertext")
        inp: Dict[str, Any] = dict(self.key_inputs(), spi=f"{self.spi:08x}", sessionId=sid)
        if self.seq_present:
            inp["seq"] = f"{seq:016x}"
        if su.iv:
            inp["iv"] = f"{seq:016x}"
        if co is not None:
            inp["cryptOffset"] = co
        if options:
            inp["options"] = options.hex()
        inp["ciphertextPacket"] = wire.hex()
        out = delivered(pkt, e[-su.icv :], nh, pad)
        t = Test(comment, list(dict.fromkeys(flags)), inp, out, "valid", wire)
        return ESealed(self, t, wire, pkt, key=key, salt=salt, head=head, body=body, clear=clear, sid=sid,
                       seq=seq if self.seq_present else None, iv=seq if su.iv else None, nh=nh, pad=pad,
                       payload=payload, full=full)

    def invalid(self, comment: str, flags: Sequence[str], base: ESealed, wire: bytes, error: str, *,
                result: str = "invalid", icv_valid: Optional[bool] = None, **inputs: Any) -> Test:
        inp = dict(base.test.inputs, ciphertextPacket=wire.hex())
        inp.update(inputs)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp, dropped(error, icv_valid),
                               result, wire))

    def crafted(self, comment: str, flags: Sequence[str], base: ESealed, *, head: Optional[bytes] = None,
                body: Optional[bytes] = None, clear: Optional[int] = None, key: Optional[bytes] = None,
                salt: Optional[bytes] = None, aad: Optional[str] = None, iiv_nonce: Optional[bool] = None,
                opt_len: Optional[int] = None, result: str = "valid", error: Optional[str] = None,
                icv_valid: Optional[bool] = None, plaintext: Optional[bytes] = None, nh: Optional[int] = None,
                pad: Optional[int] = None, inputs: Optional[Dict[str, Any]] = None,
                post: Optional[Any] = None) -> Tuple[Test, bytes]:
        head = base.head if head is None else head
        body = base.body if body is None else body
        clear = base.clear if clear is None else clear
        e = seal_eesp(self.suite, aad or self.aad, self.seq_present, key or base.key, salt or base.salt, head, body,
                      clear, opt_len=opt_len, iiv_nonce=iiv_nonce)
        if post is not None:
            e = post(e)
        wire = base.with_secured(e)
        inp = dict(base.test.inputs, ciphertextPacket=wire.hex())
        inp.update(inputs or {})
        if result == "valid":
            out = delivered(base.pkt if plaintext is None else plaintext, e[-self.suite.icv :],
                            base.nh if nh is None else nh, base.pad if pad is None else pad)
            flags = ["DecryptOnly"] + list(flags)
        else:
            out = dropped(error, icv_valid, plaintext if result == "acceptable" else None)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp, out, result, wire)), wire

    def finish(self) -> None:
        f = self.g.fields
        parts = [f"spi=0x{self.spi:08x}", f"suite={self.suite.name}"]
        if self.suite.kind != "chacha":
            parts.append(f"key-bits={self.key_bits}")
        if self.root is None:
            parts.append(f"key={(self.key + self.salt).hex()}")
        else:
            parts += [f"root-key={self.root.hex()}", f"sskdf={self.sskdf}"]
        parts += [f"mode={self.mode}", f"format={self.fmt}", f"seq={int(self.seq_present)}", f"aad={self.aad}",
                  f"anti-replay={int(f['stateful'])}"]
        if f["stateful"]:
            parts.append(f"replay-window={f['replayWindow']}")
        if "maxSubSaId" in f:
            parts.append(f"max-sub-sa-id={f['maxSubSaId']}")
        if "maxCryptOffset" in f:
            parts.append(f"max-crypt-offset={f['maxCryptOffset']}")
        parts += [f"align={int(f['alignOptions'])}", f"strict={int(f['strict'])}", f"ip-protocol={f['ipProtocol']}",
                  f"udp-encap={int(self.udp)}"]
        self.g.keys = key_file_head("EESP test SA", self.fb.name, len(self.fb.groups)) + "eesp-sa " + " ".join(parts) + "\n"


class EespFileBuilder(SuiteFileBuilder):
    def __init__(self, seed: int, suite: str) -> None:
        super().__init__("eesp", seed, suite)

    def group(self, comment: str, *, mode: str, key_bits: int, sskdf: str = "none", fmt: str = "auto",
              aad: str = "draft", seq: bool = True, align: bool = True, max_sub_sa_id: Optional[int] = None,
              max_crypt_offset: Optional[int] = None, strict: bool = False, udp: bool = False,
              stateful: bool = False, source: Optional[dict] = None) -> EespGroupBuilder:
        key_bits = self.key_bits(key_bits)
        f: Dict[str, Any] = {"type": "EespPacketTest", "source": source or SOURCE_SELF, **self.suite_fields(key_bits),
                             "mode": mode, "format": fmt, "aad": aad, "seqPresent": seq, "sskdf": sskdf,
                             "alignOptions": align, "strict": strict, "ipProtocol": 49, "udpEncap": udp,
                             "stateful": stateful, "comment": comment}
        if max_sub_sa_id is not None:
            f["maxSubSaId"] = max_sub_sa_id
        if max_crypt_offset is not None:
            f["maxCryptOffset"] = max_crypt_offset
        if stateful:
            f["replayWindow"] = 64
        g = Group(f)
        gb = EespGroupBuilder(self, g, key_bits=key_bits, sskdf=sskdf)
        self.groups.append(g)
        return gb


# --------------------------------------------------------------------------------------------------------
# groups
# --------------------------------------------------------------------------------------------------------


def _common_mutations(gb: EespGroupBuilder, s: ESealed, tag: str, parsing: bool = True) -> None:
    """ICV, ciphertext and header-field changes, truncation and (``parsing``) the Base Header rejections."""
    su = gb.suite
    e = s.secured
    opt_len = e[1]
    seq_at = 8 + opt_len
    iv_at = seq_at + (8 if gb.seq_present else 0)
    gb.invalid(f"{tag}: first ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-su.icv, 0x80), "authentication-failed")
    gb.invalid(f"{tag}: last ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-1, 0x01), "authentication-failed")
    enc_at = len(s.head) + s.clear
    if su.kind == "gmac":
        gb.invalid(f"{tag}: a payload octet flipped (GMAC: in clear, authenticated)", ["ModifiedCiphertext"], s,
                   s.eflip(len(s.head) + len(s.body) - 1, 0x01), "authentication-failed")
    elif enc_at < len(e) - su.icv:
        gb.invalid(f"{tag}: first encrypted octet flipped", ["ModifiedCiphertext"], s, s.eflip(enc_at, 0x01),
                   "authentication-failed")
        gb.invalid(f"{tag}: last encrypted octet flipped", ["ModifiedCiphertext"], s, s.eflip(-su.icv - 1, 0x40),
                   "authentication-failed")
    if gb.seq_present:
        gb.invalid(f"{tag}: Sequence Number flipped", ["ModifiedAad"], s, s.eflip(seq_at + 7, 0x02),
                   "authentication-failed")
    if su.iv:
        gb.invalid(f"{tag}: IV flipped" + (" (outside the AAD, but in the nonce)" if gb.aad == "linux-xfrm" else ""),
                   ["ModifiedAad"], s, s.eflip(iv_at + 7, 0x04), "authentication-failed")
    gb.invalid(f"{tag}: last ICV octet cut off", ["Truncated"], s, s.with_secured(e[:-1]), "authentication-failed")
    if not parsing:
        return
    gb.invalid(f"{tag}: SPI flipped: no SA", ["NoSa"], s, s.eflip(7, 0x01), "eesp-no-sa")
    gb.invalid(f"{tag}: Base Header R bits 001", ["ReservedBits"], s, s.eflip(0, 0x01), "eesp-reserved-bits-set")
    gb.invalid(f"{tag}: Version 1", ["BadVersion"], s, s.eflip(0, 0x08), "eesp-unsupported-version")
    cleared = s.eflip(0, 0x80)
    looks_ike = cleared[s.at : s.at + 4] == bytes(4)
    gb.invalid(f"{tag}: ESP-compat bit cleared" + (" (with Opt Len 0 and Session ID 0 the first word is zero: an IKE "
               "non-ESP marker)" if gb.udp and looks_ike else " (on UDP 4500: an ESP packet)" if gb.udp else
               " (EESP in IP: not ESP either)"), ["CompatBitClear"] + (["NotEesp"] if gb.udp else []), s, cleared,
               ("ike-non-esp-marker" if looks_ike else "esp-in-udp") if gb.udp else "eesp-compat-bit-clear")
    gb.invalid(f"{tag}: Opt Len 255, past the end of the packet", ["OptionsOverrun", "Truncated"], s,
               s.eput(1, b"\xff"), "eesp-truncated")
    need = len(s.head) + (4 if s.full else 0) + su.icv
    gb.invalid(f"{tag}: cut to {need - 1} octets, one short of the headers" + (" + PIH" if s.full else "")
               + " + ICV", ["Truncated"], s, s.with_secured(e[: need - 1]), "eesp-truncated")
    gb.invalid(f"{tag}: cut to 7 octets", ["Truncated"], s, s.with_secured(e[:7]), "eesp-truncated")


def _mistakes(gb: EespGroupBuilder, s: ESealed, tag: str) -> None:
    """Packets sealed with the known interop mistakes: each must fail authentication."""
    su = gb.suite
    if su.iv and su.kind != "gmac":
        other = "linux-xfrm" if gb.aad == "draft" else "draft"
        gb.crafted(f"{tag}: sealed with the {other} AAD (explicit IV {'left out of' if other == 'linux-xfrm' else 'put into'} "
                   "the AAD)", ["AadMistake"], s, aad=other, result="invalid", error="authentication-failed")
    if gb.root is not None:
        info = struct.pack("<H", s.sid)
        km = primitives.hkdf_expand(SSKDF_HASH[gb.sskdf][0], gb.root, info, gb.keymat_len)
        if info != struct.pack(">H", s.sid):
            gb.crafted(f"{tag}: Sub SA key derived with the Session ID little-endian", ["SskdfMistake"], s,
                       key=km[: -su.salt], salt=km[-su.salt :], result="invalid", error="authentication-failed")
        km = primitives.hkdf_expand(SSKDF_HASH[gb.sskdf][0], gb.root, struct.pack(">I", s.sid), gb.keymat_len)
        gb.crafted(f"{tag}: Sub SA key derived with a 4-octet Session ID", ["SskdfMistake"], s,
                   key=km[: -su.salt], salt=km[-su.salt :], result="invalid", error="authentication-failed")
    km = s.key + s.salt
    gb.crafted(f"{tag}: salt taken from the front of the KEYMAT block", ["KeySplitMistake"], s,
               key=km[su.salt :], salt=km[: su.salt], result="invalid", error="authentication-failed")
    if su.iv and gb.seq_present:
        iv2 = gb.rng.child("iv-mistake", tag).bytes(8)
        gb.crafted(f"{tag}: IV field {iv2.hex()} but the nonce built from the Sequence Number (the implicit-IV "
                   "rule on an explicit-IV suite)", ["NonceMistake"], s, head=s.head[:-8] + iv2, iiv_nonce=True,
                   result="invalid", error="authentication-failed", inputs={"iv": iv2.hex()})


def _tunnel_group(fb: EespFileBuilder) -> None:
    su = fb.suite
    gb = fb.group("tunnel mode with Sub SAs (SSKDF HKDF-SHA-256, Maximum Sub SA ID 7, Maximum Crypt Offset 16)",
                  mode="tunnel", key_bits=128, sskdf="hkdf-sha256", max_sub_sa_id=7, max_crypt_offset=16)
    inner = fb.inner
    base = gb.valid("IPv4/UDP in IPv4, Sub SA 0", [], inner.udp(4, 20), sid=0)
    b6 = gb.valid("IPv6/TCP in IPv6, Sub SA 1", [], inner.tcp(6, 16), sid=1)
    gb.valid("IPv6/UDP in IPv4, Sub SA 2", ["MixedTunnel"], inner.udp(6, 12), sid=2, outer=4)
    gb.valid("IPv4/TCP in IPv6, Sub SA 3", ["MixedTunnel"], inner.tcp(4, 12), sid=3, outer=6)
    gb.valid("IPv4/ICMP in IPv4, Sub SA 7 (the maximum)", [], inner.icmp(4, 8), sid=7)
    gb.valid("Sequence Number 1", [], inner.udp(4, 8), sid=4, seq=1)
    gb.valid("Sequence Number 2^64-1", [], inner.udp(4, 8), sid=4, seq=MAX_SEQ)
    for n in range(4):
        pkt = inner.udp(4, 8 + n)
        gb.valid(f"IPv4 inner packet of {len(pkt)} octets: {-len(pkt) % 4} octets of padding", ["Padding"], pkt, sid=5)
    # Crypt Offset (full format, D2)
    pkt4 = inner.udp(4, 20)  # 48 octets: PIH + 48 = 52
    for co, what in ((0, "nothing exposed"), (1, "the PIH exposed"), (8, "PIH, IPv4 and UDP headers exposed"),
                     (13, "everything exposed: nothing encrypted")):
        gb.valid(f"Crypt Offset {co} over IPv4 outer ({what})", [], pkt4, sid=1, co=co, outer=4)
    pkt6 = inner.udp(6, 33)  # 81 octets: PIH + 81 = 85, pad 3
    gb.valid("Crypt Offset 13 over IPv6 outer (PIH, IPv6 and UDP headers exposed), PadN alignment", ["Alignment"],
             pkt6, sid=1, co=13, outer=6)
    big = inner.udp(4, 60)
    gb.valid("Crypt Offset 16, the announced maximum", [], big, sid=6, co=16)
    # options
    gb.valid("a caller option of unassigned type 3 (non-strict receiver: skipped)", ["UnknownOption"],
             inner.udp(4, 8), sid=1, options=bytes.fromhex("030100"))
    gb.valid("a caller option of private type 224", ["UnknownOption"], inner.udp(6, 8), sid=1,
             options=bytes.fromhex("e0020102"), outer=6)
    gb.valid("caller Pad1 and PadN(3) options before the alignment padding", ["Alignment"], inner.udp(4, 8), sid=1,
             options=bytes.fromhex("00010100"))
    # hand-built valid packets
    h = base.head
    iv2 = fb.rng.child("iv").bytes(8)
    if su.iv:
        gb.crafted("explicit IV unrelated to the Sequence Number", ["IvNotSeq"], base,
                          head=h[:-8] + iv2, inputs={"iv": iv2.hex()})
    extra = 8
    gb.crafted(f"optimized format, {base.pad + extra} octets of zero padding (the receiver takes the inner length "
               "from the IPv4 header)", ["ExtraPadding"], base, body=base.body + bytes(extra), pad=base.pad + extra,
               clear=(len(base.body) + extra) if su.kind == "gmac" else None)
    gb.crafted("optimized format, non-zero padding octets", ["ExtraPadding"], base,
               body=base.payload + b"\xa5" * 4, pad=4, clear=(len(base.payload) + 4) if su.kind == "gmac" else None)
    # a Crypt Offset option with R bits, and options in another order (full format)
    s8 = gb.valid("Crypt Offset 8 and a caller Pad1: a PadN(3) aligns the payload", ["Alignment"], pkt4, sid=1,
                  co=8, outer=4, options=b"\x00")
    opts = s8.head[8 : 8 + s8.head[1]]
    co_opt, rest = opts[:4], opts[4:]
    v = struct.unpack(">H", co_opt[2:])[0]
    gb.crafted("Crypt Offset option with R = 0101", ["CryptOffsetReserved", "CryptOffset"], s8,
               head=s8.head[:8] + co_opt[:2] + struct.pack(">H", v | 5) + s8.head[12:])
    if rest:
        gb.crafted("alignment padding before the Crypt Offset option", ["OptionOrder", "CryptOffset"], s8,
                   head=s8.head[:8] + rest + co_opt + s8.head[8 + len(opts) :])
    if rest[:1] == b"\x00" and rest[1:2] == b"\x01" and len(rest) >= 4:
        nonzero = rest[:3] + b"\x5a" * (len(rest) - 3)
        gb.crafted("PadN with non-zero contents", ["PadNContent", "CryptOffset"], s8,
                   head=s8.head[:12] + nonzero + s8.head[8 + len(opts) :])
    # invalid: options and Crypt Offset
    ho = s8.head
    bad_len = ho[:1] + bytes([ho[1] + 1]) + ho[2:8] + b"\x02\x03" + ho[10:12] + b"\x00" + ho[12:]
    gb.crafted("Crypt Offset option with Opt Data Len 3", ["BadCryptOffsetOption"], s8, head=bad_len,
               result="invalid", error="eesp-bad-crypt-offset-option")
    two = ho[:1] + bytes([ho[1] + 4]) + ho[2:8] + co_opt + co_opt + ho[12:]
    two = two[:10] + struct.pack(">H", (len(two) // 4) << 10 | 8 << 4) + two[12:14] + struct.pack(">H", (len(two) // 4) << 10 | 8 << 4) + two[16:]
    gb.crafted("two Crypt Offset options", ["BadCryptOffsetOption"], s8, head=two, result="invalid",
               error="eesp-bad-crypt-offset-option")
    overrun = ho[:1] + bytes([ho[1] + 2]) + ho[2 : 8 + ho[1]] + b"\xe0\x05" + ho[8 + ho[1] :]
    gb.crafted("an option TLV running past Opt Len", ["OptionsOverrun"], s8, head=overrun, result="invalid",
               error="eesp-options-overrun")
    wrong_po = ho[:10] + struct.pack(">H", (v & 0x03FF) | ((v >> 10) + 1) << 10) + ho[12:]
    gb.crafted("PayloadOffset one unit too large", ["BadPayloadOffset"], s8, head=wrong_po, result="invalid",
               error="eesp-bad-payload-offset")
    data_len = len(s8.body)
    past = data_len // 4 + 1
    gb.crafted(f"Crypt Offset {past}: past the end of the data before the ICV", ["CryptOffsetTooLarge"], s8,
               head=ho[:10] + struct.pack(">H", (v & 0xFC0F) | past << 4) + ho[12:], clear=len(s8.body),
               result="invalid", error="eesp-crypt-offset-past-payload")
    sp = gb.valid("", [], inner.udp(4, 21), sid=1, co=2, outer=4, add=False)  # PIH + 49: 3 octets of padding
    vv = struct.unpack(">H", sp.head[10:12])[0]
    into = len(sp.body) // 4
    gb.crafted(f"Crypt Offset {into}: into the padding (D16)", ["CryptOffsetTooLarge"], sp,
               head=sp.head[:10] + struct.pack(">H", (vv & 0xFC0F) | into << 4) + sp.head[12:], clear=4 * into,
               result="invalid", error="eesp-crypt-offset-past-payload")
    above = 17
    sb = gb.valid("", [], big, sid=6, co=16, add=False)
    hv = struct.unpack(">H", sb.head[10:12])[0]
    hd = sb.head[:10] + struct.pack(">H", (hv & 0xFC0F) | above << 4) + sb.head[12:]
    for valid_icv in (True, False):
        gb.crafted(f"Crypt Offset {above}, above the announced maximum 16 (ICV {'valid' if valid_icv else 'broken'})",
                   ["CryptOffsetNotAllowed"], sb, head=hd, clear=len(sb.body) if su.kind == "gmac" else 4 * above,
                   result="invalid", error="eesp-crypt-offset-not-allowed", icv_valid=valid_icv,
                   post=None if valid_icv else (lambda e: flip(e, len(e) - 1, 0x01)), inputs={"cryptOffset": above})
    # invalid: Sub SAs, sequence numbers, inner packet
    k8, s8alt = gb.keys_for(8)
    gb.crafted("Session ID 8, above the Maximum Sub SA ID 7 (sealed with Sub SA 8's key)", ["SubSaOutOfRange"], base,
               head=base.head[:2] + struct.pack(">H", 8) + base.head[4:], key=k8, salt=s8alt,
               result="invalid", error="eesp-sub-sa-out-of-range", inputs={"sessionId": 8})
    gb.invalid("Session ID changed 0 -> 1 after sealing (Sub SA 1's key)", ["ModifiedAad"], base,
               base.eput(3, b"\x01"), "authentication-failed")
    gb.crafted("Sequence Number 0 (sealed)", ["SeqZero"], base, head=base.head[:8 + base.head[1]] + bytes(8)
               + base.head[16 + base.head[1] :], result="invalid", error="eesp-sequence-zero",
               inputs={"seq": "0" * 16})
    nonip = bytes([0x50]) + base.payload[1:]
    gb.crafted("optimized format: the decrypted payload has version nibble 5", ["BadInnerPacket"], base,
               body=nonip + bytes(base.pad), clear=len(base.body) if su.kind == "gmac" else None,
               result="invalid", error="eesp-bad-inner-packet")
    for what, bad in (("an inner IPv4 Total Length of 4 (a 4-octet 'packet')", put(base.payload, 2, b"\x00\x04")),
                      ("an inner IPv4 IHL of 4", bytes([0x44]) + base.payload[1:])):
        gb.crafted(f"optimized format: {what}", ["BadInnerPacket"], base,
                   body=bad + bytes(base.pad), clear=len(base.body) if su.kind == "gmac" else None,
                   result="invalid", error="eesp-bad-inner-packet")
    longer = put(base.payload, 2, struct.pack(">H", len(base.body) + 4))
    gb.crafted("optimized format: the inner IPv4 Total Length exceeds the decrypted data", ["BadPadLength"], base,
               body=longer + bytes(base.pad), clear=len(base.body) if su.kind == "gmac" else None,
               result="invalid", error="eesp-bad-pad-length")
    gb.crafted("optimized format: 256 octets of padding after the inner packet", ["BadPadLength"], base,
               body=base.payload + bytes(256), clear=len(base.payload) + 256 if su.kind == "gmac" else None,
               result="invalid", error="eesp-bad-pad-length")
    w = base.wire
    gb.invalid("outer IP protocol 50 (ESP)", ["NotEesp"], base, ipv4_recheck(put(w, 9, b"\x32")), "not-eesp")
    gb.invalid("outer IPv4 MF set (a fragment)", ["IpFraming"], base, ipv4_recheck(put(w, 6, bytes([w[6] | 0x20]))),
               "ip-fragment")
    _common_mutations(gb, base, "IPv4 in IPv4")
    _common_mutations(gb, b6, "IPv6 in IPv6", parsing=False)
    _mistakes(gb, b6, "IPv6 in IPv6, Sub SA 1")
    gb.finish()


def _transport_group(fb: EespFileBuilder) -> None:
    su = fb.suite
    gb = fb.group("transport mode, full format, key ‖ salt (no Sub SAs), no Crypt Offset announced",
                  mode="transport", key_bits=256)
    inner = fb.inner
    base = gb.valid("IPv4/UDP", [], inner.udp(4, 24))
    b6 = gb.valid("IPv6/TCP (PadN(4): the next-layer header 8-aligned)", ["Alignment"], inner.tcp(6, 20))
    gb.valid("IPv4/TCP", [], inner.tcp(4, 9))
    gb.valid("IPv4/ICMP", [], inner.icmp(4, 8))
    gb.valid("IPv6/UDP", ["Alignment"], inner.udp(6, 5))
    for n in range(4):
        pkt = inner.udp(4, n)
        gb.valid(f"IPv4/UDP with {n} payload octets: PIH + {8 + n} octets, {-(12 + n) % 4} octets of padding",
                 ["Padding"], pkt)
    src, dst = inner.addrs(4)
    empty = ipv4_header(src, dst, 253, 0)
    gb.valid("IPv4 header alone, protocol 253: empty payload (PIH only)", ["Padding"], empty)
    src6, dst6 = inner.addrs(6)
    seg = udp_segment(inner.port(), inner.port(), inner.payload(12))
    hbh = ip_packet(src6, dst6, 17, seg, ext=hopopts(17), ext_nh=0)
    shbh = gb.valid("IPv6 with a Hop-by-Hop Options header: EESP after it", ["Ipv6ExtensionHeaders"], hbh)
    gb.invalid("IPv6 Hop-by-Hop header length 200 (runs past the packet)", ["IpFraming"], shbh,
               put(shbh.wire, 41, bytes([200])), "ip-bad-extension-header")
    dsto = ip_packet(src6, dst6, 17, seg, ext=hopopts(17), ext_nh=60)
    gb.valid("IPv6 with a Destination Options header: it travels inside EESP (Next Header 60)",
             ["Ipv6ExtensionHeaders"], dsto)
    gb.valid("Sequence Number 2^64-1", [], inner.udp(4, 4), seq=MAX_SEQ)
    # hand-built valid packets
    gb.crafted("PIH reserved bits all set (0x0fff, and the leading nibble)", ["PihReserved"], base,
               body=pih(base.nh, base.pad, 0xFFFF) + base.body[4:])
    gb.crafted("8 more octets of padding than needed (Pad Length covers them)", ["ExtraPadding"], base,
               body=pih(base.nh, base.pad + 8) + base.payload + bytes(base.pad + 8), pad=base.pad + 8,
               clear=len(base.body) + 8 if su.kind == "gmac" else None)
    gb.crafted("non-zero padding octets", ["ExtraPadding"], base,
               body=pih(base.nh, 4) + base.payload + b"\xff" * 4, pad=4,
               clear=len(base.payload) + 8 if su.kind == "gmac" else None)
    h6 = b6.head
    no_pad = h6[:1] + b"\x00" + h6[2:8] + h6[8 + h6[1] :]
    gb.crafted("IPv6 without the PadN: next-layer header 4-aligned only", ["Unaligned"], b6, head=no_pad)
    # invalid
    gb.crafted("Next Header 59: a dummy packet", ["DummyPacket"], base, body=pih(59, base.pad) + base.body[4:],
               result="invalid", error="eesp-dummy-packet")
    gb.crafted("Pad Length larger than the data", ["BadPadLength"], base,
               body=pih(base.nh, len(base.body) - 3) + base.body[4:], result="invalid", error="eesp-bad-pad-length")
    gb.crafted("Session ID 1 without an SSKDF (only Sub SA 0 exists, D9)", ["SubSaOutOfRange"], base,
               head=base.head[:2] + b"\x00\x01" + base.head[4:], result="invalid", error="eesp-sub-sa-out-of-range",
               inputs={"sessionId": 1})
    hb = base.head
    po = (len(hb) + 4) // 4
    with_co = hb[:1] + bytes([hb[1] + 4]) + hb[2:8] + co_option(po, 1) + hb[8:]
    for valid_icv in (True, False):
        gb.crafted(f"a Crypt Offset option although none was announced (ICV {'valid' if valid_icv else 'broken'})",
                   ["CryptOffsetNotAllowed", "CryptOffset"], base, head=with_co,
                   clear=len(base.body) if su.kind == "gmac" else 4, result="invalid",
                   error="eesp-crypt-offset-not-allowed", icv_valid=valid_icv,
                   post=None if valid_icv else (lambda e: flip(e, len(e) - 1, 0x01)),
                   inputs={"cryptOffset": 1})
    if su.kind != "gmac":
        gb.invalid("PIH Next Header flipped (encrypted)", ["ModifiedCiphertext"], base,
                   base.eflip(len(base.head) + 2, 0x01), "authentication-failed")
    _common_mutations(gb, base, "IPv4/UDP")
    _mistakes(gb, b6, "IPv6/TCP")
    gb.finish()


def _linux_group(fb: EespFileBuilder) -> None:
    gb = fb.group("the Linux XFRM prototype's profile: tunnel, optimized, AAD without the IV, no option alignment",
                  mode="tunnel", key_bits=128, aad="linux-xfrm", align=False)
    inner = fb.inner
    base = gb.valid("IPv4/UDP in IPv4", ["LinuxXfrmAad"], inner.udp(4, 20))
    gb.valid("IPv6/TCP in IPv6 (no PadN: unaligned by design)", ["LinuxXfrmAad"], inner.tcp(6, 12))
    gb.valid("IPv6/UDP in IPv4", ["LinuxXfrmAad", "MixedTunnel"], inner.udp(6, 3), outer=4)
    _common_mutations(gb, base, "IPv4 in IPv4", parsing=False)
    _mistakes(gb, base, "IPv4 in IPv4")
    gb.finish()


def _udp_group(fb: EespFileBuilder) -> None:
    gb = fb.group("UDP encapsulation (port 4500), transport, Sub SAs (SSKDF HKDF-SHA-512, no limit announced)",
                  mode="transport", key_bits=192, sskdf="hkdf-sha512", udp=True)
    inner = fb.inner
    base = gb.valid("IPv4/UDP, Sub SA 0, source port 4500", ["UdpEncap"], inner.udp(4, 16))
    gb.valid("IPv6/TCP, Sub SA 1, source port 4500", ["UdpEncap"], inner.tcp(6, 8), sid=1)
    gb.valid("IPv4/TCP, Sub SA 65535 on an ephemeral source port", ["UdpEncap"], inner.tcp(4, 8), sid=0xFFFF,
             udp_sport=inner.port())
    s6 = gb.valid("IPv6/UDP, Sub SA 256 (Session ID 0x0100)", ["UdpEncap"], inner.udp(6, 11), sid=0x100)
    w = base.wire
    u = base.at - 8
    src, dst = w[12:16], w[16:20]
    good = w[:u] + l4_checksum(src, dst, 17, w[u:], 6)
    t, _ = gb.crafted("IPv4: a correct non-zero UDP checksum", ["UdpEncap", "UdpChecksum"], base)
    t.inputs["ciphertextPacket"] = good.hex()
    t.wire = good
    bad = put(good, u + 6, struct.pack(">H", struct.unpack(">H", good[u + 6 : u + 8])[0] ^ 0x0101))
    gb.invalid("IPv4: a wrong non-zero UDP checksum (RFC 1122 §4.1.3.4: discarded)", ["UdpEncap", "UdpChecksum"], base,
               bad, "udp-bad-checksum")
    udp_checksum_v6_vectors(gb, s6)
    udp_encap_mutations(gb, base, "NotEesp", "not-eesp")
    _common_mutations(gb, base, "IPv4/UDP in UDP", parsing=False)
    gb.invalid("ESP-compat bit cleared (Session ID 0, no options: the first word is zero, an IKE non-ESP marker)",
               ["NotEesp", "CompatBitClear"], base, base.eflip(0, 0x80), "ike-non-esp-marker")
    s1 = gb.valid("", [], inner.udp(4, 6), sid=1, add=False)
    gb.invalid("ESP-compat bit cleared (Session ID 1): an ESP packet on UDP 4500", ["NotEesp", "CompatBitClear"], s1,
               s1.eflip(0, 0x80), "esp-in-udp")
    gb.finish()


def _inner_mismatch(gb: EespGroupBuilder, base: ESealed) -> None:
    """Tunnel mode, full format: PIH Next Header 41 with the (authenticated) IPv4 packet inside.  The drafts do
    not say what a receiver does; the core drops it, a receiver that trusts the inner header delivers it."""
    gb.crafted("tunnel, full format: PIH Next Header 41 with an IPv4 packet inside (sealed correctly)",
               ["BadInnerPacket"], base, body=pih(41, base.pad) + base.body[4:], result="acceptable",
               error="eesp-bad-inner-packet", plaintext=base.pkt)


def _noseq_group(fb: EespFileBuilder) -> None:
    su = fb.suite
    if su.iiv:
        gb = fb.group("tunnel mode, full format forced (implicit IV needs the Sequence Number)", mode="tunnel",
                      key_bits=256, fmt="full")
        inner = fb.inner
        base = gb.valid("IPv4/UDP in IPv4, full format: PIH Next Header 4", ["ImplicitIv"], inner.udp(4, 12))
        gb.valid("IPv6/UDP in IPv6, full format: PIH Next Header 41", ["ImplicitIv"], inner.udp(6, 12))
        _inner_mismatch(gb, base)
        _common_mutations(gb, base, "IPv4 in IPv4", parsing=False)
        gb.finish()
        return
    gb = fb.group("no Sequence Number (SN = None): tunnel, full format forced, the explicit IV a counter",
                  mode="tunnel", key_bits=256, fmt="full", seq=False)
    inner = fb.inner
    base = gb.valid("IPv4/UDP in IPv4, IV 1", ["NoSeq"], inner.udp(4, 12), seq=1)
    gb.valid("IPv6/TCP in IPv6, IV 0x10000", ["NoSeq"], inner.tcp(6, 12), seq=0x10000)
    gb.valid("IPv4/UDP in IPv6, IV 2^64-1", ["NoSeq", "MixedTunnel"], inner.udp(4, 7), seq=MAX_SEQ, outer=6)
    h = base.head
    gb.crafted("IV 0 (SN = None: no Sequence Number rule applies to the IV)", ["NoSeq"], base,
               head=h[:8 + h[1]] + bytes(8), inputs={"iv": "0" * 16})
    _inner_mismatch(gb, base)
    _common_mutations(gb, base, "IPv4 in IPv4", parsing=False)
    _mistakes(gb, base, "IPv4 in IPv4")
    gb.finish()


def _stateful_group(fb: EespFileBuilder) -> None:
    gb = fb.group("stateful: one receiver with a 64-packet replay window per Sub SA processes the tests in tcId "
                  "order", mode="tunnel", key_bits=128, sskdf="hkdf-sha256", max_sub_sa_id=1, stateful=True)
    inner = fb.inner
    pkt = inner.udp(4, 8)
    pkt2 = inner.udp(4, 8)
    flags = ["OrderDependent"]
    s1 = gb.valid("Sub SA 0, Sequence Number 1", flags, pkt, sid=0, seq=1)
    s2 = gb.valid("Sub SA 0, Sequence Number 2", flags, pkt2, sid=0, seq=2)
    gb.invalid("Sub SA 0, Sequence Number 2 again", flags + ["ReplayedSeq"], s2, s2.wire, "replay-duplicate")
    gb.invalid("Sub SA 0, Sequence Number 1 again", flags + ["ReplayedSeq"], s1, s1.wire, "replay-duplicate")
    gb.valid("Sub SA 1, Sequence Number 1: its own window", flags, pkt, sid=1, seq=1)
    gb.valid("Sub SA 0, Sequence Number 100: the window moves", flags, pkt, sid=0, seq=100)
    old = gb.valid("", flags, pkt2, sid=0, seq=36, add=False)
    gb.invalid("Sub SA 0, Sequence Number 36: left of the window [37, 100]", flags + ["ReplayTooOld"], old,
               old.wire, "replay-too-old")
    gb.valid("Sub SA 0, Sequence Number 37: the window's left edge, not seen", flags, pkt2, sid=0, seq=37)
    s200 = gb.valid("", flags, pkt, sid=0, seq=200, add=False)
    gb.invalid("Sub SA 0, Sequence Number 200 with a broken ICV: must not move the window", flags + ["ModifiedIcv"],
               s200, s200.eflip(-1, 0x01), "authentication-failed")
    gb.valid("Sub SA 0, Sequence Number 99: still inside the window (top 100)", flags, pkt2, sid=0, seq=99)
    gb.g.add(s200.test)
    gb.invalid("Sub SA 0, Sequence Number 200 again", flags + ["ReplayedSeq"], s200, s200.wire, "replay-duplicate")
    s99 = gb.valid("", flags, pkt2, sid=0, seq=99, add=False)
    gb.invalid("Sub SA 0, Sequence Number 99 again: now left of the window [137, 200]", flags + ["ReplayTooOld"],
               s99, s99.wire, "replay-too-old")
    gb.valid("Sub SA 1, Sequence Number 2^64-1", flags, pkt, sid=1, seq=MAX_SEQ)
    s5 = gb.valid("", flags, pkt, sid=1, seq=5, add=False)
    gb.invalid("Sub SA 1, Sequence Number 5: far left of the window", flags + ["ReplayTooOld"], s5, s5.wire,
               "replay-too-old")
    gb.crafted("Sub SA 0, Sequence Number 0", flags + ["SeqZero"], s1,
               head=s1.head[:8 + s1.head[1]] + bytes(8) + s1.head[16 + s1.head[1] :], result="invalid",
               error="eesp-sequence-zero", inputs={"seq": "0" * 16})
    gb.finish()


def _strict_group(fb: EespFileBuilder) -> None:
    gb = fb.group("strict receiver (unknown options dropped), transport, Maximum Crypt Offset 8, Sub SAs (SSKDF "
                  "HKDF-SHA-384, Maximum Sub SA ID 3)", mode="transport", key_bits=128, sskdf="hkdf-sha384",
                  max_sub_sa_id=3, strict=True, max_crypt_offset=8)
    inner = fb.inner
    base = gb.valid("IPv4/UDP, no options, Sub SA 0", [], inner.udp(4, 12))
    gb.valid("IPv6/UDP, Sub SA 3: PadN alignment is a known option", ["Alignment"], inner.udp(6, 12), sid=3)
    gb.valid("IPv4/TCP with Crypt Offset 6 (PIH + TCP ports and sequence number exposed), Sub SA 1", [],
             inner.tcp(4, 12), co=6, sid=1)
    for t, what in ((3, "unassigned type 3"), (0xE0, "private type 224")):
        s = gb.valid("", [], inner.udp(4, 12), options=bytes([t, 2, 0xAB, 0xCD]), add=False)
        gb.g.add(Test(f"an option of {what}: the strict receiver drops it", ["UnknownOption"], s.test.inputs,
                      {"error": "eesp-unknown-option"}, "invalid", s.wire))
    _common_mutations(gb, base, "IPv4/UDP", parsing=False)
    gb.finish()


def _spec_groups(fb: EespFileBuilder) -> None:
    """E1-E5 of eesp.md §19 (AES-128-GCM-16, root 00..1f, SPI 0x1000, Session ID 1)."""
    inner4 = bytes.fromhex("4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef")
    root = bytes(range(32))
    l4 = bytes.fromhex("04d2162e000d000068656c6c6f")

    def group(comment: str, mode: str, aad: str = "draft", mco: Optional[int] = None) -> EespGroupBuilder:
        gb = fb.group(comment, mode=mode, key_bits=128, sskdf="hkdf-sha256", aad=aad, max_crypt_offset=mco,
                      source=SOURCE_SPEC)
        gb.spi, gb.root = 0x1000, root
        return gb

    def add(gb: EespGroupBuilder, name: str, pkt: bytes, seq: int, co: Optional[int] = None, outer: Optional[int] = None):
        gb.valid(f"eesp.md §19 {name}", ["SpecNotesKat"], pkt, sid=1, seq=seq, co=co, outer=outer)

    if fb.suite.name == "aes-gcm-16":
        gb = group("eesp.md §19 E1 and E3: tunnel mode (outer IPv4 203.0.113.x)", "tunnel", mco=8)
        add(gb, "E1: tunnel, optimized, explicit IV", inner4, 1, outer=4)
        add(gb, "E3: tunnel with a Crypt Offset option (PayloadOffset 7, CryptOffset 8)", inner4, 3, co=8, outer=4)
        gb.finish()
        gb = group("eesp.md §19 E1 with the Linux XFRM AAD", "tunnel", aad="linux-xfrm")
        add(gb, "E1 (Linux XFRM AAD variant)", inner4, 1, outer=4)
        gb.finish()
        gb = group("eesp.md §19 E2 and E5: transport mode", "transport")
        # the L4 octets exactly as eesp.md gives them (UDP checksum 0), so no ip_packet(): it would fill it in
        add(gb, "E2: transport, full format, IPv4 outer", ipv4_header("192.0.2.1", "192.0.2.2", 17, len(l4)) + l4, 2)
        add(gb, "E5: transport, full format, IPv6 outer with PadN(4)",
            ipv6_header("2001:db8::1", "2001:db8::2", 17, len(l4)) + l4, 4)
        gb.finish()
    elif fb.suite.name == "aes-gcm-16-iiv":
        gb = group("eesp.md §19 E4: tunnel, optimized, implicit IV", "tunnel")
        add(gb, "E4: tunnel, optimized, implicit IV (ENCR_AES_GCM_16_IIV)", inner4, 5, outer=4)
        gb.finish()


def packet_file(seed: int, suite: str) -> VectorFile:
    fb = EespFileBuilder(seed, suite)
    su = fb.suite
    _spec_groups(fb)
    _tunnel_group(fb)
    _transport_group(fb)
    if su.kind != "gmac":
        _linux_group(fb)
    _udp_group(fb)
    _noseq_group(fb)
    _stateful_group(fb)
    _strict_group(fb)
    header = [
        f"EESP (draft-ietf-ipsecme-eesp-04, decisions D1-D17 of eesp.md §18) packet vectors, suite {suite} "
        f"(IKEv2 ENCR {su.encr_id}), {8 * su.icv}-bit ICV.",
        f"Generated by `pyeesp vectors generate --seed {seed}`; see vectors/README.md.",
        "Self-computed: no published EESP vectors exist. IP protocol 49 is provisional and test-only (D7).",
    ]
    vf = assemble(fb.name, "EESP", PACKET_SCHEMA, header, NOTES, fb.groups, common_flags=su.file_flags)
    mark_self_computed(vf, NOTES["SelfComputed"], published=["SpecNotesKat"])
    return vf


# --------------------------------------------------------------------------------------------------------
# SSKDF file
# --------------------------------------------------------------------------------------------------------

SPEC_SSKDF = [  # sskdf, root length, Session ID, L, keymat
    ("hkdf-sha256", 32, 0, 20, "472a557f71f01e8d125da03ec21f6b770f62b36f"),
    ("hkdf-sha256", 32, 1, 20, "bfb9feca177e0964367d975ca7e41bd64f44224a"),
    ("hkdf-sha256", 32, 1, 36, "bfb9feca177e0964367d975ca7e41bd64f44224af8851afaa04f7a2d92707dfdaeb0b4a1"),
    ("hkdf-sha384", 48, 1, 36, "bc435472e3a65f445e39ed5960b0f5c1f3a2e83994592b3a52d3cc860f9e6c4258d74111"),
    ("hkdf-sha512", 64, 1, 36, "988a26eeb4c69dfd7829f454d63e66913bc60577a13f33b91e65886236739c0a9134f558"),
]


def sskdf_file(seed: int) -> VectorFile:
    rng = Rng(seed, "eesp", "sskdf")
    groups = []
    for name, (hname, nk) in SSKDF_HASH.items():
        g = Group({"type": "EespSskdfTest", "source": SOURCE_SELF, "sskdf": name,
                   "comment": f"SSKDF_HKDF_SHA2_{hname[3:]}: root keys of {nk} octets"}, pcap=False)
        for sk, rlen, sid, length, km in SPEC_SSKDF:
            if sk == name:
                root = bytes(range(rlen))
                g.add(Test(f"eesp.md §19: root 00..{rlen - 1:02x}, Session ID {sid}, L = {length}",
                           ["SpecNotesKat", "SskdfKat"], {"rootKey": root.hex(), "sessionId": sid, "length": length},
                           {"keymat": km}, "valid"))
        root = rng.child(name, "root").bytes(nk)
        for sid in (0, 1, 0x00FF, 0x0100, 0x7FFF, 0x8000, 0xFFFF):
            for length in (19, 20, 27, 28, 35, 36):
                g.add(Test(f"Session ID {sid:#06x}, L = {length} ({'CCM' if length % 4 == 3 else 'GCM/GMAC/ChaCha20'} "
                           f"{8 * (length - (3 if length % 4 == 3 else 4))}-bit key + salt)", ["SskdfKat"],
                           {"rootKey": root.hex(), "sessionId": sid, "length": length},
                           {"keymat": sub_sa_keymat(name, root, sid, length).hex()}, "valid"))
        g.add(Test(f"L = {255 * (nk // 2)}: several HMAC blocks", ["SskdfKat"],
                   {"rootKey": root.hex(), "sessionId": 2, "length": 255},
                   {"keymat": sub_sa_keymat(name, root, 2, 255).hex()}, "valid"))
        sid = 0x0102
        mistakes = [
            ("Session ID little-endian", struct.pack("<H", sid)),
            ("Session ID as 4 octets", struct.pack(">I", sid)),
            ("Session ID as decimal text", str(sid).encode()),
            ("no info (Session ID left out)", b""),
        ]
        for what, info in mistakes:
            g.add(Test(f"Session ID {sid:#06x}, L = 20: {what}", ["SskdfKat", "SskdfMistake"],
                       {"rootKey": root.hex(), "sessionId": sid, "length": 20},
                       {"keymat": primitives.hkdf_expand(hname, root, info, 20).hex()}, "invalid"))
        import hmac
        import hashlib

        prk = hmac.new(bytes(hashlib.new(hname).digest_size), root, hname).digest()
        g.add(Test(f"Session ID {sid:#06x}, L = 20: HKDF-Extract (zero salt) run before Expand",
                   ["SskdfKat", "SskdfMistake"], {"rootKey": root.hex(), "sessionId": sid, "length": 20},
                   {"keymat": primitives.hkdf_expand(hname, prk, struct.pack(">H", sid), 20).hex()}, "invalid"))
        groups.append(g)
    header = ["EESP Sub SA key derivation vectors (eesp.md §12, D4): KEYMAT_sub = HKDF-Expand(KEY_root, Session ID "
              "as 2 octets big-endian, L).",
              f"Generated by `pyeesp vectors generate --seed {seed}`; see vectors/README.md.",
              "Invalid tests give the output of a known mistake: an implementation must not reproduce it."]
    vf = assemble("eesp_sskdf_test.json", "EESP-SSKDF", SSKDF_SCHEMA, header, NOTES, groups)
    mark_self_computed(vf, NOTES["SelfComputed"], published=["SpecNotesKat"])
    return vf


def generate(seed: int) -> List[VectorFile]:
    return [packet_file(seed, s) for s in SUITES] + [sskdf_file(seed)]


# --------------------------------------------------------------------------------------------------------
# checking against the core
# --------------------------------------------------------------------------------------------------------


def sa_settings(group: dict, inp: dict) -> Dict[str, Any]:
    """pyeesp.SA keyword arguments (receiving side) from a group and a test's inputs."""
    kw: Dict[str, Any] = dict(spi=int(inp["spi"], 16), suite=group["suite"], key_bits=group["keySize"],
                              mode=group["mode"], format=group["format"], seq=group["seqPresent"], aad=group["aad"],
                              anti_replay=bool(group["stateful"]) and group["seqPresent"],
                              replay_window=group.get("replayWindow", 1024), max_sub_sa_id=group.get("maxSubSaId"),
                              max_crypt_offset=group.get("maxCryptOffset"), strict=group["strict"],
                              ip_protocol=group["ipProtocol"], udp_encap=group["udpEncap"],
                              align_options=group["alignOptions"])
    if "rootKey" in inp:
        kw.update(root_key=bytes.fromhex(inp["rootKey"]), sskdf=group["sskdf"])
    else:
        kw["key"] = bytes.fromhex(inp["key"] + inp["salt"])
    return kw


class EespPacketChecker(PacketDocChecker):
    def sa_settings(self, group: dict, inp: dict) -> Dict[str, Any]:
        return sa_settings(group, inp)

    def receiver(self, sa: Dict[str, Any]) -> Any:
        import pyeesp

        return pyeesp.Receiver([pyeesp.SA(**sa)])

    def core_error(self) -> type:
        import pyeesp

        return pyeesp.EespError

    def icv_valid(self, error: Any) -> Optional[bool]:
        import pyeesp

        return error.icv_valid if isinstance(error, pyeesp.PolicyError) else None

    def send(self, group: dict, inp: dict, out: dict, wire: bytes, sa: Dict[str, Any]) -> "bytes | List[str]":
        import pyeesp

        plain = bytes.fromhex(out["plaintextPacket"])
        skw = dict(sa, crypt_offset=inp.get("cryptOffset"), options=bytes.fromhex(inp.get("options", "")),
                   anti_replay=False)
        if group["udpEncap"]:
            at = l4_offset(wire)[0]
            skw["udp_sport"] = struct.unpack(">H", wire[at : at + 2])[0]
        if group["mode"] == "tunnel":
            skw["tunnel_header"] = outer_template(wire)
        counter = inp.get("seq") if group["seqPresent"] else inp.get("iv")
        tx = pyeesp.SA(**skw)
        if counter is None:
            return ["no sequence number or IV to start the sender at"]
        if int(counter, 16) == 0:
            return ["a sender never sends sequence number / IV 0"]
        tx.set_next_seq(int(counter, 16), inp["sessionId"])
        if "iv" in inp and "seq" in inp and inp["iv"] != inp["seq"]:
            return ["IV differs from the sequence number: the core's sender cannot produce it (flag DecryptOnly?)"]
        return tx.encrypt(plain, inp["sessionId"])


check_packet_doc = EespPacketChecker()


def check_sskdf_doc(doc: dict, file: str, loose: bool = False) -> List[Outcome]:
    def derive(g: dict, inp: dict) -> bytes:
        return sub_sa_keymat(g["sskdf"], bytes.fromhex(inp["rootKey"]), inp["sessionId"], inp["length"])

    return check_kat_doc(doc, file, loose, derive, "keymat", "an SSKDF mistake")


CHECKERS = {PACKET_SCHEMA: check_packet_doc, SSKDF_SCHEMA: check_sskdf_doc}


#: This family, registered with pecore's vector tooling on import (and offered as an entry point).
FAMILY = register_family(Family("eesp", generate, SCHEMAS, CHECKERS))


def register(sub: Any) -> None:
    """``pyeesp vectors generate|check`` (called from pyeesp.tools.cli.build_parser)."""
    _register(sub, FAMILY)
