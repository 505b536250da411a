"""ESP (RFC 4303) interop test vectors: generation and checking (vectors/README.md).

Files (``pyesp vectors generate``): ``esp_<suite>_test.json`` for every AEAD suite the core has (schema
``esp_packet_test_schema_v1.json``), in the Wycheproof layout of :mod:`pecore.tools.vectors`, with a pcap and an
``esp-sa`` key file per group.

A packet test is receiver-centric, as for PSP and EESP: the group holds the SA settings both ends share (suite,
key size, mode, ESN, the receiver's anti-replay window, UDP encapsulation); ``inputs`` hold the KEYMAT (``key``
and ``salt``), the SPI, the sender's 64-bit sequence number ``seq`` and explicit IV ``iv``, the receiver's
highest sequence number accepted so far ``replayTop`` (it and every number below it count as received; it
places the ESN inference of RFC 4303 Appendix A2.2) and the wire octets; ``outputs`` what the receiver delivers or why it drops the packet.  Groups with
``stateful: true`` are processed by one receiver in tcId order.

The wire octets are built here, with :mod:`pecore.primitives` (one AEAD call per packet) and the framing of
RFC 4303 §3.1 / RFC 3948, never with the core's encapsulation: ``check`` then runs every vector against the
core through :mod:`pyesp` (the receiver on the wire octets and, for valid tests without ``DecryptOnly``, the
sender with the same sequence number, which must give the same octets), and the test suite runs them against
the independent model tests/esp_model.py and scapy's SecurityAssociation.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pecore import primitives
from pyesp.tools import vectors_cbc
from pyesp.tools.vectors_framing import frame, split, transport_split
from pecore.tools.vectors import (
    DELIVERY_OUTPUTS, DELIVERY_RULES, Family, Group, HEX, Inner, KEYMAT_INPUTS, PacketDocChecker, SealedPacket,
    SUITE_GROUP_FIELDS, SuiteFileBuilder, SuiteGroupBuilder, SuiteInfo, SUITES, Test, VectorFile, assemble,
    delivered, dropped, fix_ip, hex_of, hopopts, ip_packet, ipv4_header, ipv4_recheck, ipv6_header, kept_flags,
    key_file_head, l4_checksum, mark_self_computed, put, register as _register, register_family, secured_offset,
    shared_notes, test_object, top_schema, udp_checksum_v6_vectors, udp_encap_mutations, udp_segment,
)

PACKET_SCHEMA = "esp_packet_test_schema_v1.json"
SOURCE_SELF = {"name": "self", "version": "pyesp 0.1.0, RFC 4303 with RFC 4106/4309/4543/7634/8750 and RFC 3948"}
SOURCE_MCGREW = {"name": "draft-mcgrew-gcm-test-01", "version": "§4: the AES-GCM test cases 1-14 and the AES-GMAC case"}
SOURCE_RFC7634 = {"name": "rfc7634", "version": "Appendix A: ESP with ChaCha20-Poly1305"}
M32 = 0xFFFFFFFF
MAX_SEQ = 2**64 - 1
IPPROTO_ESP, IPPROTO_UDP = 50, 17
#: A derived test keeps these flags of the packet it was made from (they describe its SA and framing).
KEEP_FLAGS = ("MixedTunnel", "Esn")


# --------------------------------------------------------------------------------------------------------
# notes (flags)
# --------------------------------------------------------------------------------------------------------

NOTES: Dict[str, Dict[str, str]] = {
    **shared_notes("MixedTunnel", "ModifiedIcv", "ModifiedCiphertext", "NoSa", "OrderDependent", "IpFraming"),
    "SpecKat": {"bugType": "BASIC", "description": "A published ESP packet (draft-mcgrew-gcm-test-01 §4, RFC 7634 "
                "Appendix A) in an outer IPv4 header (the documents give the ESP octets only). Its IV is random, so "
                "it is checked by decryption only."},
    "SelfComputed": {"bugType": "BASIC", "description": "Computed by this project from RFC 4303 and the AEAD RFCs; "
                     "checked by the project's core, by an independent model (tests/esp_model.py) and, for the suites "
                     "it has, by scapy's SecurityAssociation."},
    "ImplicitIv": {"bugType": "BASIC", "description": "RFC 8750: no IV field; the nonce is salt ‖ the 64-bit "
                   "sequence number."},
    "IntegrityOnly": {"bugType": "BASIC", "description": "AES-GMAC (RFC 4543): nothing is encrypted; the AAD is SPI ‖ "
                      "Sequence Number ‖ IV ‖ payload ‖ padding ‖ trailer (the IV included, as draft-mcgrew-gcm-test-01 "
                      "clarifies)."},
    "Esn": {"bugType": "BASIC", "description": "Extended sequence numbers (RFC 4303 §2.2.1): only the low half "
            "travels; the AAD is SPI ‖ Seq high ‖ Seq low (RFC 4106 §5) and the receiver infers the high half."},
    "EsnInference": {"bugType": "EDGE_CASE", "description": "An edge of the ESN inference of RFC 4303 Appendix A2.2 "
                     "(Case A or B, the subspace boundary), from the receiver's replayTop and window."},
    "EsnSubspaceZero": {"bugType": "EDGE_CASE", "description": "Appendix A2.2 Case B while the high half is 0: no "
                        "subspace lies below, so the project keeps high half 0 and accepts the packet; Linux "
                        "(xfrm_replay_seqhi) takes high half 2^32-1 and fails the ICV."},
    "EsnBeyondWindow": {"bugType": "FUNCTIONALITY", "description": "A sequence number more than 2^32 - W ahead of "
                        "the receiver: the inferred high half is wrong, so the ICV fails (RFC 4303 Appendix A3's "
                        "resynchronisation is not triggered by one packet)."},
    "EsnAadMistake": {"bugType": "WRONG_PRIMITIVE", "description": "Sealed with an ESN AAD of a known mistake (the "
                      "high half left out, or after the low half): authentication must fail."},
    "UdpEncap": {"bugType": "BASIC", "description": "ESP in UDP port 4500 (RFC 3948): UDP checksum 0 over IPv4 "
                 "(RFC 3948 §2.1), computed over IPv6 (RFC 8200 §8.1; eesp.md D17)."},
    "Padding": {"bugType": "EDGE_CASE", "description": "Payload lengths 0-3 mod 4: 0-3 octets of default padding "
                "1, 2, 3 (RFC 4303 §2.4)."},
    "ExtraPadding": {"bugType": "EDGE_CASE", "description": "More padding than the 4-octet alignment needs, up to "
                     "255 octets, still 1, 2, 3, ...: receivers accept it (RFC 4303 §2.4)."},
    "BadPadding": {"bugType": "EDGE_CASE", "description": "Padding octets other than 1, 2, 3, ... (authenticated): "
                   "RFC 4303 §2.4 says the receiver SHOULD inspect them; the project drops the packet, Linux does not "
                   "look."},
    "BadPadLength": {"bugType": "MODIFIED_PARAMETER", "description": "A Pad Length that runs past the payload "
                     "(authenticated)."},
    "MaxSeq": {"bugType": "EDGE_CASE", "description": "The last sequence number of the SA: 2^32-1, or 2^64-1 with ESN."},
    "Ipv6ExtensionHeaders": {"bugType": "EDGE_CASE", "description": "IPv6 transport mode with extension headers: ESP "
                             "follows Hop-by-Hop, Routing, Fragment and a Destination Options header that precedes a "
                             "Routing header; a Destination Options header alone travels inside ESP (RFC 4303 §3.1.1 "
                             "allows either side; scapy and Linux keep it in front)."},
    "Ipv4Options": {"bugType": "EDGE_CASE", "description": "IPv4 transport mode with header options: ESP follows them."},
    "IvNotSeq": {"bugType": "EDGE_CASE", "description": "An explicit IV unrelated to the sequence number (random, as "
                 "scapy and the documents' vectors send): receivers must take the nonce from the IV field."},
    "DecryptOnly": {"bugType": "FUNCTIONALITY", "description": "Valid on receive, but a sender that uses the sequence "
                    "number as IV with default padding does not produce it (random IV, extra padding, a UDP checksum, "
                    "a published vector). Check it by decryption only."},
    "ModifiedAad": {"bugType": "AUTH_BYPASS", "description": "An authenticated clear field (Sequence Number, IV) "
                    "changed after sealing (named in the comment)."},
    "AadMistake": {"bugType": "WRONG_PRIMITIVE", "description": "AES-GMAC sealed with the IV left out of the AAD "
                   "(RFC 4543 read without draft-mcgrew-gcm-test-01's clarification): authentication must fail."},
    "KeySplitMistake": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with key and salt taken from the "
                        "wrong ends of the KEYMAT block (the salt is its last 3/4 octets)."},
    "NonceMistake": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with a nonce of a known mistake (named "
                     "in the comment): authentication must fail."},
    "Truncated": {"bugType": "MODIFIED_PARAMETER", "description": "The ESP part is cut short (IP and UDP lengths "
                  "fixed up)."},
    "SpiZero": {"bugType": "EDGE_CASE", "description": "SPI 0, which RFC 4303 §2.1 reserves (MUST NOT be sent), in a "
                "published vector (draft-mcgrew-gcm-test-01 case 4): a receiver may have no SA for it (the error "
                "names that drop); one configured for it, as the core can be, opens it. scapy reads SPI 0 as the "
                "non-ESP marker."},
    "SeqZero": {"bugType": "MODIFIED_PARAMETER", "description": "Sequence number 0, never sent (RFC 4303 §3.3.3)."},
    "ReplayedSeq": {"bugType": "FUNCTIONALITY", "description": "A sequence number already received."},
    "ReplayTooOld": {"bugType": "FUNCTIONALITY", "description": "A sequence number left of the replay window."},
    "DummyPacket": {"bugType": "FUNCTIONALITY", "description": "Next Header 59 (RFC 4303 §2.6): a dummy packet, "
                    "authenticated and then discarded; nothing is delivered (icvValid: it verified, and it moved the "
                    "window)."},
    "BadNextHeader": {"bugType": "MODIFIED_PARAMETER", "description": "Tunnel mode: a Next Header other than 4 or 41 "
                      "(authenticated)."},
    "BadInnerPacket": {"bugType": "MODIFIED_PARAMETER", "description": "Tunnel mode: the decrypted payload is not one "
                       "whole IPv4/IPv6 packet of the version Next Header names (authenticated)."},
    "NotEsp": {"bugType": "FUNCTIONALITY", "description": "Not ESP for this receiver: another IP protocol or UDP port, "
               "or on UDP 4500 a NAT keepalive, an IKE message (non-ESP marker) or EESP (an SPI of no SA whose first octet "
               "is 0x80, for a host that runs EESP beside ESP; eesp.md §14)."},
    "TrailingOctets": {"bugType": "EDGE_CASE", "description": "Octets after the end the IP length field gives "
                       "(link-layer padding): not part of the datagram, so not part of ESP."},
    "UdpChecksum": {"bugType": "EDGE_CASE", "description": "The UDP checksum of ESP in UDP: a correct one is "
                    "accepted; a wrong non-zero one is discarded (RFC 1122 §4.1.3.4; RFC 3948 gives no leave to skip "
                    "it); 0 over IPv6 is discarded (RFC 8200 §8.1) unless both ends run RFC 6936's zero-checksum mode "
                    "for the port (off by default). Tools that read captures may still decrypt these packets, saying "
                    "so (eesp.md D17)."},
    "TfcPadding": {"bugType": "FUNCTIONALITY", "description": "Tunnel mode: Traffic Flow Confidentiality padding "
                   "after the inner packet (RFC 4303 §2.7), of any value; the receiver takes the inner packet by its "
                   "own length and drops the rest. tfcPad: zero octets a sender adds (the SA setting)."},
}

# --------------------------------------------------------------------------------------------------------
# schema
# --------------------------------------------------------------------------------------------------------

_U64 = hex_of(8)
PACKET_GROUP = {
    "type": "object",
    "required": ["type", "source", "suite", "encrId", "keySize", "ivSize", "tagSize", "mode", "esn", "antiReplay",
                 "replayWindow", "udpEncap", "stateful", "tests"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "EspPacketTest"},
        "source": {"$ref": "#/$defs/source"},
        **SUITE_GROUP_FIELDS,
        "ivSize": {"enum": [0, 64], "description": "explicit IV on the wire, bits (0: RFC 8750 implicit IV)"},
        "tagSize": {"enum": [64, 96, 128], "description": "ICV, bits"},
        "mode": {"enum": ["transport", "tunnel"]},
        "esn": {"type": "boolean", "description": "extended sequence numbers (RFC 4303 §2.2.1)"},
        "antiReplay": {"type": "boolean", "description": "the receiver checks and moves its replay window"},
        "replayWindow": {"type": "integer", "minimum": 64,
                         "description": "the receiver's window W in packets; with ESN it also places the inference"},
        "udpEncap": {"type": "boolean", "description": "ESP in UDP 4500 (RFC 3948)"},
        "stateful": {"type": "boolean", "description": "one receiver processes the tests in tcId order"},
        "comment": {"type": "string"},
        "tests": {"type": "array", "items": {"$ref": "#/$defs/test"}},
    },
}
PACKET_TEST = test_object(
    {
        "type": "object",
        "required": ["key", "salt", "spi", "seq", "ciphertextPacket"],
        "additionalProperties": False,
        "properties": {
            **KEYMAT_INPUTS,
            "spi": hex_of(4),
            "seq": {**_U64, "description": "the sender's sequence number, all 64 bits (only the low 32 travel)"},
            "iv": {**_U64, "description": "the explicit IV (absent with an implicit-IV suite)"},
            "replayTop": {**_U64, "description": "the receiver's highest sequence number accepted before this packet "
                          "(absent: 0, a fresh SA): it and every number below it count as received; with ESN it "
                          "places the inference of RFC 4303 Appendix A2.2"},
            "tfcPad": {"type": "integer", "minimum": 1, "maximum": 1024, "description": "the sender's TFC padding "
                       "(RFC 4303 §2.7, tunnel mode): zero octets after the inner packet; a receiver needs no setting"},
            "ciphertextPacket": HEX,
        },
    },
    DELIVERY_OUTPUTS,
    DELIVERY_RULES,
)
_SOURCE = {
    "type": "object",
    "required": ["name", "version"],
    "additionalProperties": False,
    "properties": {"name": {"enum": ["self", "draft-mcgrew-gcm-test-01", "rfc7634", "scapy"]},
                   "version": {"type": "string"}},
}
SCHEMAS = {
    PACKET_SCHEMA: top_schema(
        PACKET_SCHEMA, "ESP packet test vectors",
        "Wycheproof-style ESP (RFC 4303 with the AEAD suites of RFC 4106, 4309, 4543, 7634 and 8750; RFC 3948) "
        "packet vectors: full wire octets and what a receiver delivers, or why it drops the packet. See "
        "vectors/README.md.",
        ["ESP"], PACKET_GROUP, {"test": PACKET_TEST, "source": _SOURCE}),
    **vectors_cbc.SCHEMAS,
}

# --------------------------------------------------------------------------------------------------------
# building blocks: ESP octets from the primitives, RFC 4303 §3.1 framing
# --------------------------------------------------------------------------------------------------------


def esn_aad(spi: int, seq: int, esn: bool) -> bytes:
    """RFC 4106 §5 (RFC 4309 §5, RFC 7634 §2.1, RFC 8750 §4): SPI ‖ Seq, or SPI ‖ Seq high ‖ Seq low."""
    return struct.pack(">III", spi, seq >> 32, seq & M32) if esn else struct.pack(">II", spi, seq & M32)


def seal_esp(su: SuiteInfo, key: bytes, salt: bytes, spi: int, seq: int, esn: bool, body: bytes, *,
             iv: Optional[bytes] = None, aad: Optional[bytes] = None, nonce: Optional[bytes] = None,
             gmac_iv_in_aad: bool = True) -> bytes:
    """SPI ‖ Seq low ‖ IV ‖ AEAD(body) ‖ ICV.  ``body`` = payload ‖ padding ‖ Pad Length ‖ Next Header.  The IV
    defaults to the sequence number; ``aad``/``nonce`` replace the RFCs' (known mistakes)."""
    iv_field = b"" if su.iiv else (struct.pack(">Q", seq) if iv is None else iv)
    head = struct.pack(">II", spi, seq & M32) + iv_field
    if nonce is None:
        nonce = salt + (struct.pack(">Q", seq) if su.iiv else iv_field)
    if aad is None:
        aad = esn_aad(spi, seq, esn)
    if su.kind == "gmac":  # RFC 4543 §3.3: all authenticated, nothing encrypted
        _ct, tag = primitives.aead_seal(su.alg, key, nonce, [aad, iv_field if gmac_iv_in_aad else b"", body], b"",
                                        su.icv)
        return head + body + tag
    ct, tag = primitives.aead_seal(su.alg, key, nonce, [aad], body, su.icv)
    return head + ct + tag


def trailer_body(payload: bytes, nh: int, padding: Optional[bytes] = None, pad_len: Optional[int] = None) -> bytes:
    if padding is None:  # RFC 4303 §2.4: to a 4-octet boundary, octets 1, 2, 3
        padding = bytes(range(1, -(len(payload) + 2) % 4 + 1))
    return payload + padding + bytes([len(padding) if pad_len is None else pad_len, nh])


class Sealed(SealedPacket):
    """A sealed packet and the parts it was sealed from (for the mutations)."""

    def __init__(self, gb: "EspGroupBuilder", test: Test, wire: bytes, pkt: bytes, *, seq: int, iv: bytes,
                 payload: bytes, nh: int, body: bytes, outer: Optional[bytes], udp_sport: int) -> None:
        super().__init__(test, wire, pkt)
        self.gb = gb
        self.seq, self.iv, self.payload, self.nh, self.body = seq, iv, payload, nh, body
        self.outer, self.udp_sport = outer, udp_sport


class EspGroupBuilder(SuiteGroupBuilder):
    ip_protocol = IPPROTO_ESP

    def __init__(self, fb: "EspFileBuilder", group: Group, key_bits: int) -> None:
        super().__init__(fb, group, key_bits)
        self.esn = group.fields["esn"]
        spi = int.from_bytes(self.rng.child("spi").bytes(4), "big")
        # SPIs 1-255 are reserved (RFC 4303 §2.1); on UDP 4500 the MSB says EESP (eesp.md §14)
        self.spi = (spi & 0x7FFFFFFF if self.udp else spi) | 0x100
        km = self.rng.child("key").bytes(key_bits // 8 + self.suite.salt)
        self.key, self.salt = km[: -self.suite.salt], km[-self.suite.salt :]
        self._seq = self.rng.child("seq")

    def next_seq(self) -> int:
        return self._seq.int(1, 2**31 - 1) if not self.esn else self._seq.int(2**32, 2**40)

    def frame(self, pkt: bytes, esp: bytes, *, outer: Optional[bytes], udp_sport: int = 4500,
              udp_dport: int = 4500) -> bytes:
        return frame(self.mode, self.udp, pkt, esp, outer=outer, udp_sport=udp_sport, udp_dport=udp_dport)

    def split(self, pkt: bytes) -> Tuple[bytes, int]:
        return split(self.mode, pkt)

    def inputs(self, seq: int, iv: bytes, replay_top: int, wire: bytes) -> Dict[str, Any]:
        inp: Dict[str, Any] = {"key": self.key.hex(), "salt": self.salt.hex(), "spi": f"{self.spi:08x}",
                               "seq": f"{seq:016x}"}
        if self.suite.iv:
            inp["iv"] = iv.hex()
        if replay_top:
            inp["replayTop"] = f"{replay_top:016x}"
        inp["ciphertextPacket"] = wire.hex()
        return inp

    def valid(self, comment: str, flags: Sequence[str], pkt: bytes, *, seq: Optional[int] = None,
              replay_top: int = 0, outer: Optional[int] = None, udp_sport: int = 4500, iv: Optional[bytes] = None,
              padding: Optional[bytes] = None, tfc: bytes = b"", add: bool = True) -> Sealed:
        """A packet as the core's sender makes it (IV = sequence number, default padding, TFC padding of zeros),
        unless ``iv``, ``padding`` or ``tfc`` say otherwise (then DecryptOnly)."""
        if seq is None:
            seq = self.next_seq()
        payload, nh = self.split(pkt)
        body = trailer_body(payload + tfc, nh, padding)
        esp = seal_esp(self.suite, self.key, self.salt, self.spi, seq, self.esn, body, iv=iv)
        tmpl = self.outer(outer or (pkt[0] >> 4)) if self.mode == "tunnel" else None
        wire = self.frame(pkt, esp, outer=tmpl, udp_sport=udp_sport)
        flags = list(flags)
        if iv is not None or padding is not None or tfc.strip(b"\0"):
            flags.append("DecryptOnly")
        if tfc:
            flags.append("TfcPadding")
        if seq == (MAX_SEQ if self.esn else M32):
            flags.append("MaxSeq")
        if self.mode == "tunnel" and tmpl is not None and tmpl[0] >> 4 != pkt[0] >> 4:
            flags.append("MixedTunnel")
        iv_field = b"" if self.suite.iiv else (struct.pack(">Q", seq) if iv is None else iv)
        out = delivered(pkt, esp[-self.suite.icv :], nh, body[-2])
        inp = self.inputs(seq, iv_field, replay_top, wire)
        if tfc:
            inp = {**inp, "tfcPad": len(tfc)}
        t = Test(comment, list(dict.fromkeys(flags)), inp, out, "valid", wire)
        s = Sealed(self, t, wire, pkt, seq=seq, iv=iv_field, payload=payload, nh=nh, body=body, outer=tmpl,
                   udp_sport=udp_sport)
        if add:
            self.g.add(t)
        return s

    def invalid(self, comment: str, flags: Sequence[str], base: Sealed, wire: bytes, error: str, *,
                result: str = "invalid", icv_valid: Optional[bool] = None, plaintext: Optional[bytes] = None,
                **inputs: Any) -> Test:
        inp = dict(base.test.inputs, ciphertextPacket=wire.hex())
        inp.update(inputs)
        out = dropped(error, icv_valid, plaintext)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp, out, result, wire))

    def crafted(self, comment: str, flags: Sequence[str], base: Sealed, *, body: Optional[bytes] = None,
                seq: Optional[int] = None, iv: Optional[bytes] = None, key: Optional[bytes] = None,
                salt: Optional[bytes] = None, aad: Optional[bytes] = None, nonce: Optional[bytes] = None,
                gmac_iv_in_aad: bool = True, result: str = "invalid", error: Optional[str] = None,
                icv_valid: Optional[bool] = None, plaintext: Optional[bytes] = None, replay_top: Optional[int] = None,
                frame: Optional[Any] = None) -> Tuple[Test, bytes]:
        """A packet sealed here from base's SA with some parts changed (before sealing: it authenticates unless a
        key/AAD/nonce mistake is asked for)."""
        seq = base.seq if seq is None else seq
        body = base.body if body is None else body
        esp = seal_esp(self.suite, key or self.key, salt or self.salt, self.spi, seq, self.esn, body, iv=iv, aad=aad,
                       nonce=nonce, gmac_iv_in_aad=gmac_iv_in_aad)
        wire = frame(esp) if frame is not None else base.with_secured(esp)
        iv_field = esp[8 : 8 + self.suite.iv]
        top = int(base.test.inputs.get("replayTop", "0"), 16) if replay_top is None else replay_top
        inp = self.inputs(seq, iv_field, top, wire)
        if result == "valid":
            out = delivered(base.pkt if plaintext is None else plaintext, esp[-self.suite.icv :], body[-1], body[-2])
            flags = list(flags) + ["DecryptOnly"]
        else:
            out = dropped(error, icv_valid, plaintext if result == "acceptable" else None)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp, out, result, wire)), wire

    def finish(self) -> None:
        """The group's key file: one esp-sa line per SA (the published vectors' groups hold several)."""
        f = self.g.fields
        sas = dict.fromkeys((t.inputs["spi"], t.inputs["key"] + t.inputs["salt"]) for t in self.g.tests)
        if len({spi for spi, _k in sas}) != len(sas):
            raise ValueError(f"{self.fb.name}: two keys for one SPI in a group")
        lines = []
        for spi, key in sas:
            parts = [f"spi=0x{spi}", f"suite={self.suite.name}"]
            if self.suite.kind != "chacha":
                parts.append(f"key-bits={self.key_bits}")
            parts += [f"key={key}", f"mode={self.mode}", f"esn={int(self.esn)}", f"anti-replay={int(f['stateful'])}",
                      f"replay-window={f['replayWindow']}"]
            tops = {t.inputs.get("replayTop") for t in self.g.tests}
            if f["stateful"] and len(tops) == 1 and None not in tops:
                parts.append(f"first-seq={int(tops.pop(), 16) + 1}")
            parts.append(f"udp-encap={int(self.udp)}")
            lines.append("esp-sa " + " ".join(parts) + "\n")
        self.g.keys = key_file_head("ESP test SA" + ("s" if len(lines) > 1 else ""), self.fb.name, len(self.fb.groups)) + "".join(lines)


class EspFileBuilder(SuiteFileBuilder):
    def __init__(self, seed: int, suite: str) -> None:
        super().__init__("esp", seed, suite)

    def group(self, comment: str, *, mode: str, key_bits: int, esn: bool = False, udp: bool = False,
              stateful: bool = False, anti_replay: bool = True, window: int = 1024,
              source: Optional[dict] = None) -> EspGroupBuilder:
        key_bits = self.key_bits(key_bits)
        f: Dict[str, Any] = {"type": "EspPacketTest", "source": source or SOURCE_SELF, **self.suite_fields(key_bits),
                             "mode": mode, "esn": esn, "antiReplay": anti_replay, "replayWindow": window,
                             "udpEncap": udp, "stateful": stateful, "comment": comment}
        g = Group(f)
        gb = EspGroupBuilder(self, g, key_bits)
        self.groups.append(g)
        return gb


# --------------------------------------------------------------------------------------------------------
# groups
# --------------------------------------------------------------------------------------------------------


def _mutations(gb: EspGroupBuilder, s: Sealed, tag: str, full: bool = True) -> None:
    """ICV, ciphertext and header-field changes, the unknown SPI and (``full``) truncation at each field and the
    key mistakes."""
    su = gb.suite
    e = s.secured
    start = 8 + su.iv
    need = 8 + su.iv + 2 + su.icv
    if not full:
        gb.invalid(f"{tag}: last ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-1, 0x01), "authentication-failed")
        gb.invalid(f"{tag}: first {'payload' if su.kind == 'gmac' else 'encrypted'} octet flipped",
                   ["ModifiedCiphertext"], s, s.eflip(start, 0x01), "authentication-failed")
        gb.invalid(f"{tag}: Sequence Number bit 30 flipped", ["ModifiedAad"], s, s.eflip(4, 0x40),
                   "authentication-failed")
        gb.invalid(f"{tag}: SPI flipped: no SA", ["NoSa"], s, s.eflip(3, 0x01), "esp-no-sa")
        gb.invalid(f"{tag}: cut to {need - 1} octets", ["Truncated"], s, s.with_secured(e[: need - 1]), "esp-truncated")
        return
    gb.invalid(f"{tag}: first ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-su.icv, 0x80), "authentication-failed")
    gb.invalid(f"{tag}: last ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-1, 0x01), "authentication-failed")
    if su.kind == "gmac":
        gb.invalid(f"{tag}: a payload octet flipped (AES-GMAC: in clear, authenticated)", ["ModifiedCiphertext"], s,
                   s.eflip(start, 0x01), "authentication-failed")
        gb.invalid(f"{tag}: the Next Header octet flipped (in clear, authenticated)", ["ModifiedCiphertext"], s,
                   s.eflip(-su.icv - 1, 0x01), "authentication-failed")
    else:
        gb.invalid(f"{tag}: first encrypted octet flipped", ["ModifiedCiphertext"], s, s.eflip(start, 0x01),
                   "authentication-failed")
        gb.invalid(f"{tag}: last encrypted octet (Next Header) flipped", ["ModifiedCiphertext"], s,
                   s.eflip(-su.icv - 1, 0x40), "authentication-failed")
    gb.invalid(f"{tag}: Sequence Number bit 30 flipped", ["ModifiedAad"], s, s.eflip(4, 0x40), "authentication-failed")
    if su.iv:
        gb.invalid(f"{tag}: IV flipped", ["ModifiedAad"], s, s.eflip(15, 0x04), "authentication-failed")
    gb.invalid(f"{tag}: SPI flipped: no SA", ["NoSa"], s, s.eflip(3, 0x01), "esp-no-sa")
    gb.invalid(f"{tag}: last ICV octet cut off", ["Truncated"], s, s.with_secured(e[:-1]), "authentication-failed")
    gb.invalid(f"{tag}: cut to {need - 1} octets, one short of header" + (" + IV" if su.iv else "")
               + " + Pad Length + Next Header + ICV", ["Truncated"], s, s.with_secured(e[: need - 1]), "esp-truncated")
    for n, what in ((8, "the SPI and Sequence Number alone"), (7, "in the Sequence Number"), (3, "in the SPI"),
                    (0, "no ESP octets at all")):
        gb.invalid(f"{tag}: cut to {n} octets ({what})", ["Truncated"], s, s.with_secured(e[:n]), "esp-truncated")
    km = s.gb.key + s.gb.salt
    gb.crafted(f"{tag}: salt taken from the front of the KEYMAT block", ["KeySplitMistake"], s,
               key=km[su.salt :], salt=km[: su.salt], error="authentication-failed")
    seq = s.seq
    if su.iiv:
        gb.crafted(f"{tag}: nonce salt ‖ Seq low ‖ 0 (the 32-bit number in the wrong half)", ["NonceMistake"], s,
                   nonce=gb.salt + struct.pack(">II", seq & M32, 0), error="authentication-failed")
    else:
        iv2 = gb.rng.child("iv-mistake", tag).bytes(8)
        gb.crafted(f"{tag}: IV field {iv2.hex()} but the nonce built from the sequence number (RFC 8750's rule on "
                   "an explicit-IV suite)", ["NonceMistake"], s, iv=iv2, nonce=gb.salt + struct.pack(">Q", seq),
                   error="authentication-failed")
    if su.kind == "gmac":
        gb.crafted(f"{tag}: AES-GMAC with the IV left out of the AAD", ["AadMistake"], s, gmac_iv_in_aad=False,
                   error="authentication-failed")


def _receiver_rules(gb: EspGroupBuilder, s: Sealed, tag: str, full: bool = True) -> None:
    """Packets that authenticate and are dropped after the ICV (padding, trailer, dummy), and the valid
    hand-made ones (random IV, extra padding)."""
    su = gb.suite
    p = s.payload
    gb.crafted(f"{tag}: sequence number 0 (sealed)", ["SeqZero"], s, seq=0, error="esp-sequence-zero")
    if su.iv:
        iv = gb.rng.child("random-iv", tag).bytes(8)
        gb.crafted(f"{tag}: a random IV {iv.hex()} (the nonce is salt ‖ IV field)", ["IvNotSeq"], s, iv=iv,
                   result="valid")
    pad = bytes(range(1, len(s.body) - len(p) - 2 + 9))
    gb.crafted(f"{tag}: {len(pad)} octets of padding (8 more than needed)", ["ExtraPadding"], s,
               body=trailer_body(p, s.nh, pad), result="valid")
    if full:
        pad = bytes(range(1, 256 - (len(p) + 2 + 255) % 4 if (len(p) + 2 + 255) % 4 else 256))
        gb.crafted(f"{tag}: {len(pad)} octets of padding, the most Pad Length holds on a 4-octet boundary",
                   ["ExtraPadding"], s, body=trailer_body(p, s.nh, pad), result="valid")
    n = len(s.body) - len(p) - 2
    zeros = bytes(n) if n else bytes(4)
    gb.crafted(f"{tag}: {len(zeros)} zero padding octets", ["BadPadding"], s, body=trailer_body(p, s.nh, zeros),
               result="acceptable", error="esp-bad-padding", icv_valid=True, plaintext=s.pkt)
    region = len(s.body) - 2
    gb.crafted(f"{tag}: Pad Length {region + 1}, one more than the payload and padding", ["BadPadLength"], s,
               body=s.body[:-2] + bytes([region + 1, s.nh]), error="esp-bad-pad-length", icv_valid=True)
    if not full:
        return
    gb.crafted(f"{tag}: padding 1, 2, 4, 4", ["BadPadding"], s, body=trailer_body(p, s.nh, b"\x01\x02\x04\x04"),
               result="acceptable", error="esp-bad-padding", icv_valid=True, plaintext=s.pkt)
    gb.crafted(f"{tag}: Pad Length 255", ["BadPadLength"], s, body=s.body[:-2] + bytes([255, s.nh]),
               error="esp-bad-pad-length", icv_valid=True)
    gb.crafted(f"{tag}: Next Header 59, a dummy packet", ["DummyPacket"], s, body=trailer_body(p, 59),
               error="esp-dummy-packet", icv_valid=True)


def _framing(gb: EspGroupBuilder, s: Sealed, tag: str) -> None:
    w = s.wire
    t = gb.invalid(f"{tag}: four octets after the IP length (link-layer padding): not part of the datagram",
                   ["TrailingOctets", "DecryptOnly"], s, w + bytes(4), "")
    t.result, t.outputs = "valid", dict(s.test.outputs, icv=w[-gb.suite.icv :].hex())
    if w[0] >> 4 == 4:
        gb.invalid(f"{tag}: outer IPv4 MF set (a fragment)", ["IpFraming"], s, ipv4_recheck(put(w, 6, b"\x20\x00")),
                   "ip-fragment")
        gb.invalid(f"{tag}: outer IPv4 Total Length one more than the packet", ["IpFraming"], s,
                   ipv4_recheck(put(w, 2, struct.pack(">H", len(w) + 1))), "ip-bad-length")
        if not gb.udp:
            gb.invalid(f"{tag}: outer IP protocol 51 (AH)", ["NotEsp"], s, ipv4_recheck(put(w, 9, b"\x33")), "not-esp")
    else:
        if not gb.udp:
            gb.invalid(f"{tag}: outer IPv6 Next Header 51 (AH)", ["NotEsp"], s, put(w, 6, b"\x33"), "not-esp")


def _tunnel_group(fb: EspFileBuilder) -> None:
    gb = fb.group("tunnel mode: IPv4 and IPv6, mixed tunnels, padding, and every rejection of the decoder",
                  mode="tunnel", key_bits=128)
    inner = fb.inner
    base = gb.valid("IPv4/UDP in IPv4", [], inner.udp(4, 12))
    b6 = gb.valid("IPv6/TCP in IPv6", [], inner.tcp(6, 12))
    gb.valid("IPv6/UDP in IPv4", [], inner.udp(6, 8), outer=4)
    gb.valid("IPv4/TCP in IPv6", [], inner.tcp(4, 8), outer=6)
    gb.valid("IPv4/ICMP in IPv4", [], inner.icmp(4, 8))
    gb.valid("IPv6/ICMPv6 in IPv6", [], inner.icmp(6, 8))
    gb.valid("sequence number 1", [], inner.udp(4, 4), seq=1)
    gb.valid("sequence number 2^32-1, the last of a 32-bit SA", [], inner.udp(4, 4), seq=M32)
    for n in range(4):
        pkt = inner.udp(4, 4 + n)
        gb.valid(f"IPv4 inner packet of {len(pkt)} octets: {-(len(pkt) + 2) % 4} octets of padding", ["Padding"], pkt)
    _mutations(gb, base, "IPv4 in IPv4")
    _receiver_rules(gb, base, "IPv4 in IPv4")
    p = base.payload
    gb.crafted("Next Header 17 in tunnel mode", ["BadNextHeader"], base, body=trailer_body(p, 17),
               error="esp-bad-next-header", icv_valid=True)
    gb.crafted("Next Header 41 over an IPv4 packet", ["BadInnerPacket"], base, body=trailer_body(p, 41),
               error="esp-bad-inner-packet", icv_valid=True)
    gb.crafted("Next Header 4 over an IPv6 packet", ["BadInnerPacket"], b6, body=trailer_body(b6.payload, 4),
               error="esp-bad-inner-packet", icv_valid=True)
    longer = put(p, 2, struct.pack(">H", len(p) + 1))
    gb.crafted("inner IPv4 Total Length one more than the payload", ["BadInnerPacket"], base,
               body=trailer_body(ipv4_recheck(longer), 4), error="esp-bad-inner-packet", icv_valid=True)
    gb.crafted("inner packet with version nibble 5", ["BadInnerPacket"], base, body=trailer_body(b"\x50" + p[1:], 4),
               error="esp-bad-inner-packet", icv_valid=True)
    # RFC 4303 §2.7: TFC padding after the tunnelled packet (Linux adds zeros; any value is allowed)
    gb.valid("IPv4/UDP in IPv4 with 4 octets of TFC padding", [], inner.udp(4, 12), tfc=bytes(4))
    gb.valid("IPv4/UDP in IPv4 with 7 octets of TFC padding", [], inner.udp(4, 9), tfc=bytes(7))
    gb.valid("IPv6/TCP in IPv6 with 40 octets of TFC padding", [], inner.tcp(6, 4), tfc=bytes(40))
    gb.valid("IPv4/UDP in IPv4 with 13 octets of TFC padding that are not zeros", [], inner.udp(4, 8),
             tfc=bytes(range(0xF0, 0xFD)))
    _framing(gb, base, "IPv4 in IPv4")
    _framing(gb, b6, "IPv6 in IPv6")
    gb.finish()


def _ipv4_with_options(inner: Inner) -> bytes:
    seg = udp_segment(inner.port(), inner.port(), inner.payload(8))
    src, dst = inner.addrs(4)
    h = ipv4_header(src, dst, IPPROTO_UDP, 0)
    h = bytes([0x46]) + h[1:20] + b"\x01\x01\x01\x00"  # IHL 6: NOP, NOP, NOP, End of Options
    seg = l4_checksum(h[12:16], h[16:20], IPPROTO_UDP, seg, 6)
    return fix_ip(h + seg)


def _transport_group(fb: EspFileBuilder) -> None:
    gb = fb.group("transport mode: IPv4 (with options) and IPv6 (with extension headers), padding, dummy packets",
                  mode="transport", key_bits=192)
    inner = fb.inner
    base = gb.valid("IPv4/UDP", [], inner.udp(4, 8))
    gb.valid("IPv4/TCP", [], inner.tcp(4, 8))
    gb.valid("IPv4/ICMP", [], inner.icmp(4, 8))
    gb.valid("IPv4 with header options (IHL 6)/UDP", ["Ipv4Options"], _ipv4_with_options(inner))
    b6 = gb.valid("IPv6/TCP", [], inner.tcp(6, 8))
    gb.valid("IPv6/ICMPv6", [], inner.icmp(6, 4))
    src, dst = inner.addrs(6)
    seg = udp_segment(inner.port(), inner.port(), inner.payload(8))
    gb.valid("IPv6 Hop-by-Hop/UDP: ESP after Hop-by-Hop", ["Ipv6ExtensionHeaders"],
             ip_packet(src, dst, IPPROTO_UDP, seg, ext=hopopts(IPPROTO_UDP), ext_nh=0))
    gb.valid("IPv6 Destination Options/UDP: the Destination Options header travels inside ESP",
             ["Ipv6ExtensionHeaders"], ip_packet(src, dst, IPPROTO_UDP, seg, ext=hopopts(IPPROTO_UDP), ext_nh=60))
    routing = bytes([IPPROTO_UDP, 0, 253, 0, 0, 0, 0, 0])  # an experimental Routing Type, Segments Left 0
    gb.valid("IPv6 Hop-by-Hop/Destination Options/Routing/UDP: all three in front of ESP", ["Ipv6ExtensionHeaders"],
             ip_packet(src, dst, IPPROTO_UDP, seg, ext=hopopts(60) + hopopts(43) + routing, ext_nh=0))
    for n in range(4):
        pkt = inner.udp(4, n)
        gb.valid(f"IPv4/UDP with {n} payload octets: {-(8 + n + 2) % 4} octets of padding", ["Padding"], pkt)
    gb.valid("IPv4 header alone, protocol 253: an empty ESP payload", ["Padding"],
             ipv4_header(*inner.addrs(4), 253, 0))
    _mutations(gb, base, "IPv4/UDP", full=False)
    _receiver_rules(gb, base, "IPv4/UDP", full=False)
    nonext = ipv6_header(*inner.addrs(6), 59, 8) + inner.payload(8)
    s = gb.valid("", [], nonext, add=False)
    gb.invalid("IPv6 with No Next Header (59): sealed as it is, so it reads as a dummy packet (ESP cannot tell them "
               "apart, RFC 4303 §2.6)", ["DummyPacket"], s, s.wire, "esp-dummy-packet", icv_valid=True)
    _framing(gb, b6, "IPv6/TCP")
    gb.finish()


def _esn_group(fb: EspFileBuilder) -> None:
    gb = fb.group("extended sequence numbers (tunnel, window 64): the high half inferred from the receiver's "
                  "replayTop (RFC 4303 Appendix A2.2), Case A and Case B, the subspace boundaries",
                  mode="tunnel", key_bits=256, esn=True, window=64)
    inner = fb.inner

    def v(comment: str, seq: int, top: int, flags: Sequence[str] = ("EsnInference",), **kw: Any) -> Sealed:
        return gb.valid(comment, ["Esn", *flags], inner.udp(4, 8), seq=seq, replay_top=top, **kw)

    base = v("sequence number 2^40 + 5, receiver at the number before", 2**40 + 5, 2**40 + 4, ())
    v("IPv6 inner, high half 0x12345678", 0x1234_5678_9ABC_DEF0, 0x1234_5678_9ABC_DEEF, (), outer=6)
    v("low half 0: sequence number 2^32, receiver at 2^32 - 1 (Case A, next subspace)", 2**32, 2**32 - 1)
    v("low half 0: sequence number 2^32, receiver at 2^32 - 10", 2**32, 2**32 - 10)
    v("Case A, Seql below Bl: receiver at 0x1fffffff0, sequence number 0x200000005", 0x2_0000_0005, 0x1_FFFF_FFF0)
    # Below replayTop a resumed receiver has received everything, so a late number is refused: as a duplicate
    # only when the inference kept it at or below the top (read in the next subspace it would fail the ICV).
    s = v("", 0x1_FFFF_FFB1, 0x1_FFFF_FFF0, add=False)
    gb.invalid("Case A, Seql in the window: receiver resumed at 0x1fffffff0, 0x1ffffffb1 (the window's bottom) "
               "inferred in the same subspace: already received", ["Esn", "EsnInference", "ReplayedSeq"], s, s.wire,
               "replay-duplicate")
    s = v("", 0x1_FFFF_FFF0, 0x2_0000_0005, add=False)
    gb.invalid("Case B, Seql >= Bl: receiver resumed at 0x200000005, 0x1fffffff0 inferred in the previous subspace: "
               "already received", ["Esn", "EsnInference", "ReplayedSeq"], s, s.wire, "replay-duplicate")
    v("Case B, Seql < Bl: receiver at 0x200000005, 0x200000010 ahead", 0x2_0000_0010, 0x2_0000_0005)
    v("Case A, 2^32 - 64 ahead: the farthest number the inference reaches", 0x1_0000_0100 + 2**32 - 64,
      0x1_0000_0100)
    v("sequence number 2^64 - 1, the last of an ESN SA", MAX_SEQ, MAX_SEQ - 1)
    s = v("", 0xFFFF_FFF0, 5, add=False)
    gb.invalid("Case B in subspace 0: receiver at 5, sequence number 0xfffffff0 (a receiver that wraps to high half "
               "2^32 - 1 fails the ICV)", ["Esn", "EsnInference", "EsnSubspaceZero"], s, s.wire,
               "authentication-failed", result="acceptable", plaintext=s.pkt)
    s = v("", 2**32 + 7, 0, add=False)
    gb.invalid("low half 0 to a fresh receiver: sequence number 2^32 read as 0", ["Esn", "EsnInference", "SeqZero"],
               s, s.with_secured(seal_esp(gb.suite, gb.key, gb.salt, gb.spi, 2**32, True, s.body)), "esp-sequence-zero",
               seq=f"{2**32:016x}", **({"iv": f"{2**32:016x}"} if gb.suite.iv else {}))
    s = v("", 0x3_8000_0001, 0x1_8000_0000, add=False)
    gb.invalid("Case A, more than 2^32 - 64 ahead: receiver at 0x180000000, sequence number 0x380000001 inferred as "
               "0x180000001", ["Esn", "EsnBeyondWindow"], s, s.wire, "authentication-failed")
    s = v("", 0x1_7FFF_F000, 0x1_8000_0000, add=False)
    gb.invalid("Case A, left of the window: receiver at 0x180000000, old 0x17ffff000 inferred as 0x27ffff000 "
               "(with ESN an old number fails the ICV instead of replay-too-old)", ["Esn", "EsnInference",
               "ReplayTooOld"], s, s.wire, "authentication-failed")
    s = v("", 0x1_FFFF_FF00, 0x2_0000_0005, add=False)
    gb.invalid("Case B, left of the window: receiver at 0x200000005, old 0x1ffffff00 inferred as 0x2ffffff00",
               ["Esn", "EsnInference", "ReplayTooOld"], s, s.wire, "authentication-failed")
    seq = base.seq
    gb.crafted("sealed with the AAD SPI ‖ Seq low (the high half left out)", ["EsnAadMistake"], base,
               aad=esn_aad(gb.spi, seq, False), error="authentication-failed")
    gb.crafted("sealed with the AAD SPI ‖ Seq low ‖ Seq high (halves swapped)", ["EsnAadMistake"], base,
               aad=struct.pack(">III", gb.spi, seq & M32, seq >> 32), error="authentication-failed")
    if gb.suite.iiv:
        gb.crafted("nonce salt ‖ 0 ‖ Seq low (the high half left out of the implicit IV)", ["NonceMistake"], base,
                   nonce=gb.salt + struct.pack(">II", 0, seq & M32), error="authentication-failed")
    _mutations(gb, base, "ESN", full=False)
    gb.finish()


def _udp_group(fb: EspFileBuilder) -> None:
    gb = fb.group("UDP encapsulation (RFC 3948, port 4500), tunnel mode, SPIs below 0x80000000", mode="tunnel",
                  key_bits=128, udp=True)
    inner = fb.inner
    base = gb.valid("IPv4/UDP in IPv4/UDP 4500", ["UdpEncap"], inner.udp(4, 12))
    gb.valid("IPv6/TCP in IPv6/UDP 4500", ["UdpEncap"], inner.tcp(6, 8))
    s6 = gb.valid("IPv4/UDP in IPv6/UDP 4500", ["UdpEncap"], inner.udp(4, 8), outer=6)
    gb.valid("source port 61000 (behind a NAT)", ["UdpEncap"], inner.udp(4, 8), udp_sport=61000)
    w, at = base.wire, base.at - 8
    seg = l4_checksum(w[12:16], w[16:20], IPPROTO_UDP, w[at:], 6)
    t = gb.invalid("IPv4: a correct non-zero UDP checksum", ["UdpEncap", "UdpChecksum", "DecryptOnly"], base,
                   w[:at] + seg, "")
    t.result, t.outputs = "valid", dict(base.test.outputs)
    gb.invalid("IPv4: a wrong non-zero UDP checksum (RFC 1122 §4.1.3.4: discarded)", ["UdpEncap", "UdpChecksum"], base,
               w[:at] + put(seg, 6, struct.pack(">H", struct.unpack(">H", seg[6:8])[0] ^ 0x0101)), "udp-bad-checksum")
    udp_checksum_v6_vectors(gb, s6)
    udp_encap_mutations(gb, base, "NotEsp", "not-esp")
    gb.invalid("SPI of no SA with octet 0 0x80 (an EESP version-0 Base Header's): EESP on the port (eesp.md §14)",
               ["NotEsp"], base, base.eput(0, b"\x80"), "eesp-in-udp")
    _mutations(gb, base, "UDP", full=False)
    _framing(gb, base, "UDP")
    gb.finish()


def _stateful_group(fb: EspFileBuilder) -> None:
    gb = fb.group("stateful: one receiver with a 64-packet replay window processes the tests in tcId order",
                  mode="tunnel", key_bits=128, stateful=True, window=64)
    inner = fb.inner
    od = ["OrderDependent"]

    def v(comment: str, seq: int) -> Sealed:
        return gb.valid(comment, od, inner.udp(4, 8), seq=seq)

    def again(s: Sealed, comment: str, error: str, flag: str) -> None:
        gb.invalid(comment, od + [flag], s, s.wire, error)

    s1, s2 = v("sequence number 1", 1), v("sequence number 2", 2)
    again(s2, "sequence number 2 again", "replay-duplicate", "ReplayedSeq")
    again(s1, "sequence number 1 again", "replay-duplicate", "ReplayedSeq")
    v("sequence number 100", 100)
    v("sequence number 40: late, inside the window [37, 100]", 40)
    s36 = gb.valid("", od, inner.udp(4, 8), seq=36, add=False)
    again(s36, "sequence number 36: left of the window [37, 100]", "replay-too-old", "ReplayTooOld")
    s37 = v("sequence number 37: the window's bottom", 37)
    again(s37, "sequence number 37 again", "replay-duplicate", "ReplayedSeq")
    s101 = gb.valid("", od, inner.udp(4, 8), seq=101, add=False)
    gb.invalid("sequence number 101 with a flipped ICV: the window does not move", od + ["ModifiedIcv"], s101,
               s101.eflip(-1), "authentication-failed")
    gb.g.add(Test("sequence number 101, intact: still new", od, s101.test.inputs, s101.test.outputs, "valid", s101.wire))
    gb.crafted("sequence number 102 as a dummy packet (Next Header 59): authenticated, so it moves the window",
               od + ["DummyPacket"], s101, seq=102, body=trailer_body(s101.payload, 59), error="esp-dummy-packet",
               icv_valid=True)
    s102 = gb.valid("", od, inner.udp(4, 8), seq=102, add=False)
    again(s102, "sequence number 102 again, now with data: the dummy packet took it", "replay-duplicate", "ReplayedSeq")
    gb.crafted("sequence number 0", od + ["SeqZero"], s1, seq=0, error="esp-sequence-zero")
    smax = v("sequence number 2^32 - 1", M32)
    again(s101, "sequence number 101 again: now far left of the window", "replay-too-old", "ReplayTooOld")
    again(smax, "sequence number 2^32 - 1 again", "replay-duplicate", "ReplayedSeq")
    gb.finish()


def _stateful_esn_group(fb: EspFileBuilder) -> None:
    top = 0xFFFF_FFF0
    gb = fb.group("stateful ESN: one receiver (window 64, resumed at 0xfffffff0) across the 2^32 boundary, in tcId "
                  "order", mode="tunnel", key_bits=128, esn=True, stateful=True, window=64)
    inner = fb.inner
    od = ["Esn", "OrderDependent"]

    def v(comment: str, seq: int, flags: Sequence[str] = ()) -> Sealed:
        return gb.valid(comment, od + list(flags), inner.udp(4, 8), seq=seq, replay_top=top)

    def later(seq: int) -> Sealed:
        return gb.valid("", od, inner.udp(4, 8), seq=seq, replay_top=top, add=False)

    v("0xfffffff8", 0xFFFF_FFF8)
    sff = v("0xffffffff", 0xFFFF_FFFF)
    s100 = v("0x100000000: low half 0, the high half moves to 1 (Case A)", 0x1_0000_0000, ["EsnInference"])
    v("0x100000001", 0x1_0000_0001)
    v("0xfffffffc: late, across the boundary (Case B, previous subspace)", 0xFFFF_FFFC, ["EsnInference"])
    gb.invalid("0xffffffff again", od + ["ReplayedSeq"], sff, sff.wire, "replay-duplicate")
    gb.invalid("0x100000000 again", od + ["ReplayedSeq"], s100, s100.wire, "replay-duplicate")
    v("0x100000040: Case A from here on", 0x1_0000_0040)
    s = later(0xFFFF_FFFD)
    gb.invalid("0xfffffffd: now left of the window [0x100000001, 0x100000040], inferred as 0x1fffffffd",
               od + ["EsnInference", "ReplayTooOld"], s, s.wire, "authentication-failed")
    v("0x100000002: inside the window, not seen yet", 0x1_0000_0002)
    s = later(0x2_0000_0005)
    gb.invalid("0x200000005: more than 2^32 - 64 ahead, inferred as 0x100000005", od + ["EsnBeyondWindow"], s,
               s.wire, "authentication-failed")
    v("0x100000005: not taken by the packet before (its ICV failed)", 0x1_0000_0005)
    gb.finish()


def _kat_groups(fb: EspFileBuilder) -> None:
    su = fb.suite
    outer = ("192.0.2.1", "192.0.2.2")
    if su.name == "aes-gcm-16":
        by: Dict[Tuple[int, bool], List[Tuple[int, tuple]]] = {}
        for i, case in enumerate(MCGREW, 1):
            by.setdefault((len(case[0]) * 4, len(case[3]) == 24), []).append((i, case))
        for (bits, esn), cases in sorted(by.items()):
            gb = fb.group(f"draft-mcgrew-gcm-test-01 §4, AES-{bits}-GCM-16 with {'extended' if esn else '32-bit'} "
                          "sequence numbers, transport mode (the draft's Next Header 1)", mode="transport",
                          key_bits=bits, esn=esn, source=SOURCE_MCGREW)
            for i, (key, nonce, pt, aad, ct, tag) in cases:
                aad_b, pt_b = bytes.fromhex(aad), bytes.fromhex(pt)
                spi = struct.unpack(">I", aad_b[:4])[0]
                seq = struct.unpack(">Q", aad_b[4:])[0] if esn else struct.unpack(">I", aad_b[4:])[0]
                esp = aad_b[:4] + aad_b[-4:] + bytes.fromhex(nonce[8:] + ct + tag)
                _kat(gb, f"draft-mcgrew-gcm-test-01 §4 test case {i}", bytes.fromhex(key), bytes.fromhex(nonce[:8]),
                     spi, seq, bytes.fromhex(nonce[8:]), pt_b, esp, outer)
            gb.finish()
    elif su.name == "aes-gmac":
        gb = fb.group("draft-mcgrew-gcm-test-01 §4, the AES-GMAC case (RFC 4543), transport mode", mode="transport",
                      key_bits=128, source=SOURCE_MCGREW)
        keymat, body, icv = (bytes.fromhex(x) for x in MCGREW_GMAC)
        esp = struct.pack(">II", 0x4321, 7) + bytes(8) + body + icv
        _kat(gb, "draft-mcgrew-gcm-test-01 §4, AES-GMAC", keymat[:16], keymat[16:], 0x4321, 7, bytes(8), body, esp,
             outer)
        gb.finish()
    elif su.name == "chacha20-poly1305":
        gb = fb.group("RFC 7634 Appendix A, tunnel mode", mode="tunnel", key_bits=256, source=SOURCE_RFC7634)
        keymat, esp, inner = (bytes.fromhex(x) for x in (RFC7634_KEYMAT, RFC7634_ESP, RFC7634_INNER))
        t = _kat(gb, "RFC 7634 Appendix A", keymat[:32], keymat[32:], 0x01020304, 5, esp[8:16],
                 trailer_body(inner, 4), esp, ("203.0.113.1", "203.0.113.2"))
        t.outputs["plaintextPacket"] = inner.hex()
        gb.finish()


def _kat(gb: EspGroupBuilder, comment: str, key: bytes, salt: bytes, spi: int, seq: int, iv: bytes, body: bytes,
         esp: bytes, addrs: Tuple[str, str]) -> Test:
    """A published packet: wire = an outer IPv4 header ‖ the ESP octets.  In transport mode the plaintext is that
    header with the document's Next Header and the payload behind it."""
    gb.key, gb.salt, gb.spi = key, salt, spi
    payload, pad, nh = body[: len(body) - 2 - body[-2]], body[-2], body[-1]
    wire = fix_ip(ipv4_header(addrs[0], addrs[1], IPPROTO_ESP, 0) + esp)
    plain = fix_ip(ipv4_header(addrs[0], addrs[1], nh, 0) + payload)
    inp = gb.inputs(seq, iv, seq - 1 if gb.esn else 0, wire)
    out = {"plaintextPacket": plain.hex(), "icv": esp[-gb.suite.icv :].hex(), "nextHeader": nh, "padLength": pad}
    flags = ["SpecKat", "DecryptOnly"] + (["Esn"] if gb.esn else [])
    if spi == 0:  # RFC 4303 §2.1: reserved, never on the wire -- yet test case 4 of the draft sends it
        out["error"] = "esp-no-sa"
        return gb.g.add(Test(comment + ": SPI 0", flags + ["SpiZero"], inp, out, "acceptable", wire))
    return gb.g.add(Test(comment, flags, inp, out, "valid", wire))


def packet_file(seed: int, suite: str) -> VectorFile:
    fb = EspFileBuilder(seed, suite)
    su = fb.suite
    _kat_groups(fb)
    _tunnel_group(fb)
    _transport_group(fb)
    _esn_group(fb)
    _udp_group(fb)
    _stateful_group(fb)
    _stateful_esn_group(fb)
    header = [
        f"ESP (RFC 4303) packet vectors, suite {suite} (IKEv2 ENCR {su.encr_id}), {8 * su.icv}-bit ICV"
        + (", implicit IV (RFC 8750)." if su.iiv else "."),
        f"Generated by `pyesp vectors generate --seed {seed}`; see vectors/README.md.",
        "Wire octets sealed with the AEAD primitive alone; checked against the core, an independent model and scapy.",
    ]
    vf = assemble(fb.name, "ESP", PACKET_SCHEMA, header, NOTES, fb.groups, common_flags=su.file_flags)
    mark_self_computed(vf, NOTES["SelfComputed"], published=["SpecKat"])
    return vf


def generate(seed: int) -> List[VectorFile]:
    """The AEAD suites' files, then ESP's AES-CBC + HMAC ones (pyesp.tools.vectors_cbc)."""
    return [packet_file(seed, s) for s in SUITES] + vectors_cbc.generate(seed)


# --------------------------------------------------------------------------------------------------------
# published vectors: esp_kat.json, the one copy of their bytes in Python (tests/test_esp_model.py reads it too;
# core/tests/test_esp.c holds them for the C tests)
# --------------------------------------------------------------------------------------------------------

KAT_FILE = Path(__file__).with_name("esp_kat.json")
_KAT = json.loads(KAT_FILE.read_text(encoding="utf-8"))
MCGREW = [tuple(c) for c in _KAT["mcgrewGcm"]["cases"]]  # key, nonce (salt || IV), plaintext, AAD, ciphertext, ICV
MCGREW_GMAC = tuple(_KAT["mcgrewGmac"][k] for k in ("keymat", "body", "icv"))
RFC7634_KEYMAT, RFC7634_ESP, RFC7634_INNER = (_KAT["rfc7634"][k] for k in ("keymat", "esp", "inner"))

# --------------------------------------------------------------------------------------------------------
# checking against the core (through pyesp)
# --------------------------------------------------------------------------------------------------------


def _datagram(wire: bytes) -> bytes:
    """The octets the IP length field covers (what follows it is link-layer padding)."""
    n = struct.unpack(">H", wire[2:4])[0] if wire[0] >> 4 == 4 else 40 + struct.unpack(">H", wire[4:6])[0]
    return wire[:n]


def sa_settings(group: dict, inp: dict) -> Dict[str, Any]:
    """pyesp.SA keyword arguments (receiving side) from a group and a test's inputs."""
    return dict(spi=int(inp["spi"], 16), suite=group["suite"], key=bytes.fromhex(inp["key"] + inp["salt"]),
                mode=group["mode"], esn=group["esn"], anti_replay=group["antiReplay"],
                replay_window=group["replayWindow"], replay_top=int(inp.get("replayTop", "0"), 16),
                udp_encap=group["udpEncap"])


class EspPacketChecker(PacketDocChecker):
    icv_where = "ciphertextPacket's IP datagram"

    def sa_settings(self, group: dict, inp: dict) -> Dict[str, Any]:
        return sa_settings(group, inp)

    def receiver(self, sa: Dict[str, Any]) -> Any:
        import pyesp

        return pyesp.Receiver([pyesp.SA(**sa)])

    def core_error(self) -> type:
        import pyesp

        return pyesp.EspError

    def delivery(self, d: Any, inp: dict, out: dict) -> List[str]:
        problems = super().delivery(d, inp, out)
        if d.seq != int(inp["seq"], 16):
            problems.append(f"sequence number {d.seq:#x}, expected {inp['seq']}")
        return problems

    def icv_octets(self, wire: bytes, n: int) -> bytes:
        return _datagram(wire)[-n:]

    def sender_sa(self, group: dict, wire: bytes, sa: Dict[str, Any]) -> Dict[str, Any]:
        """The sending SA's keyword arguments: the receiver's, with the ports and outer header of ``wire``."""
        skw = dict(sa, anti_replay=False, replay_top=0)
        if group["udpEncap"]:
            at = secured_offset(wire) - 8
            skw["udp_sport"], skw["udp_dport"] = struct.unpack(">HH", wire[at : at + 4])
        if group["mode"] == "tunnel":
            skw["outer_header"] = wire[:20] if wire[0] >> 4 == 4 else wire[:40]
        return skw

    def send(self, group: dict, inp: dict, out: dict, wire: bytes, sa: Dict[str, Any]) -> "bytes | List[str]":
        import pyesp

        seq = int(inp["seq"], 16)
        if "iv" in inp and int(inp["iv"], 16) != seq:
            return ["IV differs from the sequence number: the core's sender cannot produce it (flag DecryptOnly?)"]
        tx = pyesp.SA(**self.sender_sa(group, wire, sa), tfc_pad=inp.get("tfcPad", 0))
        tx.set_next_seq(seq)
        return tx.encrypt(bytes.fromhex(out["plaintextPacket"]))


class EspCbcPacketChecker(EspPacketChecker):
    """The AES-CBC files (:mod:`pyesp.tools.vectors_cbc`): the KEYMAT key ‖ integKey, and the sender given the
    vector's random IV once (``pyesp.SA.set_test_iv``)."""

    def sa_settings(self, group: dict, inp: dict) -> Dict[str, Any]:
        return vectors_cbc.sa_settings(group, inp)

    def send(self, group: dict, inp: dict, out: dict, wire: bytes, sa: Dict[str, Any]) -> "bytes | List[str]":
        import pyesp

        tx = pyesp.SA(**self.sender_sa(group, wire, sa))
        tx.set_next_seq(int(inp["seq"], 16))
        tx.set_test_iv(bytes.fromhex(inp["iv"]))
        return tx.encrypt(bytes.fromhex(out["plaintextPacket"]))


check_packet_doc = EspPacketChecker()

CHECKERS = {PACKET_SCHEMA: check_packet_doc, vectors_cbc.CBC_SCHEMA: EspCbcPacketChecker()}

#: This family, registered with pecore's vector tooling on import (and offered as an entry point).
FAMILY = register_family(Family("esp", generate, SCHEMAS, CHECKERS))


def register(sub: Any) -> None:
    """``pyesp vectors generate|check`` (called from pyesp.tools.cli)."""
    _register(sub, FAMILY)
