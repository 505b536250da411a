"""ESP vectors for the suites of an encryption and an integrity transform: AES-CBC (RFC 3602) with HMAC-SHA-1-96
(RFC 2404) or HMAC-SHA-256-128 (RFC 4868), encrypt-then-MAC (RFC 4303 §3.3.2.1).

The same Wycheproof layout, framing and receiver-centric tests as the AEAD files (:mod:`pyesp.tools.vectors`),
with their own schema (``esp_cbc_packet_test_schema_v1.json``): the KEYMAT is the AES key ``key`` and the
integrity key ``integKey`` (RFC 7296 §2.17 takes them in that order), and the IV is 16 random octets
(RFC 3602 §2.3), drawn from the generator's seeded RNG so that the files are reproducible.  The octets are made here with
pyca/cryptography's AES-CBC and the standard library's HMAC, never with the core; ``check`` then runs the core's
receiver on every vector and its sender, given the vector's IV (``pyesp.SA.set_test_iv``), on the valid ones.
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Any, Dict, List, Optional, Sequence

from pecore.protocol import ESP_SUITES
from pecore.tools.vectors import (DELIVERY_OUTPUTS, DELIVERY_RULES, HEX, Group, Inner, Rng, SuiteInfo, Test,
                                  VectorFile, assemble, delivered, dropped, hex_of, hex_of_any, key_file_head,
                                  kept_flags, mark_self_computed, outer_header, shared_notes, test_object,
                                  top_schema, udp_encap_mutations)
from pyesp.tools.vectors_framing import IPPROTO_ESP, frame, split

#: ESP's AES-CBC rows of the core's table, by name.
CBC_ROWS = {s.name: s for s in ESP_SUITES if s.integ}
CBC_SCHEMA = "esp_cbc_packet_test_schema_v1.json"
SOURCE_SELF = {"name": "self", "version": "pyesp 0.1.0, RFC 4303 with RFC 3602, 2404 and 4868; RFC 3948"}
M32 = 0xFFFFFFFF
KEEP_FLAGS = ("MixedTunnel", "Esn")
_DIGESTS = {"aes-cbc-hmac-sha1-96": hashlib.sha1, "aes-cbc-hmac-sha256-128": hashlib.sha256}

NOTES: Dict[str, Dict[str, str]] = {
    **shared_notes("MixedTunnel", "ModifiedIcv", "NoSa", "IpFraming"),
    "SelfComputed": {"bugType": "BASIC", "description": "Computed by this project from RFC 4303, 3602, 2404 and 4868 "
                     "with pyca/cryptography's AES-CBC and Python's hmac; checked by the project's core and by "
                     "scapy's SecurityAssociation."},
    "EncryptThenMac": {"bugType": "BASIC", "description": "AES-CBC then HMAC (RFC 4303 §3.3.2.1): the ICV covers SPI ‖ "
                       "Sequence Number ‖ IV ‖ ciphertext, and with ESN the high half of the sequence number after "
                       "them (RFC 4303 §2.2.1), which is never sent."},
    "Esn": {"bugType": "BASIC", "description": "Extended sequence numbers (RFC 4303 §2.2.1): only the low half travels;"
            " the high half is appended for the ICV only, and the receiver infers it."},
    "Padding": {"bugType": "EDGE_CASE", "description": "Payload lengths over a whole AES block: 0-15 octets of "
                "default padding 1, 2, 3, ... up to the 16-octet boundary (RFC 4303 §2.4, RFC 3602 §2.4)."},
    "ExtraPadding": {"bugType": "EDGE_CASE", "description": "More padding than the block alignment needs, still "
                     "1, 2, 3, ...: valid (RFC 4303 §2.4)."},
    "ModifiedCiphertext": {"bugType": "AUTH_BYPASS", "description": "A ciphertext bit flipped."},
    "ModifiedAad": {"bugType": "AUTH_BYPASS", "description": "An authenticated clear field (Sequence Number, IV) "
                    "flipped."},
    "Truncated": {"bugType": "MODIFIED_PARAMETER", "description": "The ESP part is cut short (IP and UDP lengths "
                  "follow)."},
    "BlockLength": {"bugType": "MODIFIED_PARAMETER", "description": "The ciphertext is no whole number of AES blocks "
                    "(RFC 3602 §3): dropped before the ICV."},
    "KeySplitMistake": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with the integrity key taken from the "
                        "front of the KEYMAT (RFC 7296 §2.17 puts the encryption key first)."},
    "EsnIcvMistake": {"bugType": "WRONG_PRIMITIVE", "description": "An ESN SA's ICV computed without the sequence "
                      "number's high half (RFC 4303 §3.3.2.1 appends it): authentication must fail."},
    "BadPadding": {"bugType": "MODIFIED_PARAMETER", "description": "Padding octets that are not 1, 2, 3, ...: "
                   "authenticated; RFC 4303 §2.4 lets a receiver check them (the core does)."},
    "BadPadLength": {"bugType": "MODIFIED_PARAMETER", "description": "A Pad Length past the payload: authenticated, "
                     "then dropped."},
    "DummyPacket": {"bugType": "FUNCTIONALITY", "description": "Next Header 59 (RFC 4303 §2.6): authenticated and "
                    "discarded."},
    "DecryptOnly": {"bugType": "FUNCTIONALITY", "description": "Valid on receive, but not what the core's sender "
                    "writes (extra padding)."},
    "UdpEncap": {"bugType": "BASIC", "description": "ESP in UDP port 4500 (RFC 3948)."},
    "NotEsp": {"bugType": "FUNCTIONALITY", "description": "Not an ESP packet for this receiver."},
}

_U64 = hex_of(8)
_GROUP = {
    "type": "object",
    "required": ["type", "source", "suite", "encrId", "integId", "keySize", "ivSize", "tagSize", "mode", "esn",
                 "antiReplay", "replayWindow", "udpEncap", "stateful", "tests"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "EspCbcPacketTest"},
        "source": {"$ref": "#/$defs/source"},
        "suite": {"enum": list(CBC_ROWS)},
        "encrId": {"const": 12, "description": "IKEv2 ENCR_AES_CBC"},
        "integId": {"enum": sorted({r.integ for r in CBC_ROWS.values()}), "description": "IKEv2 INTEG transform ID"},
        "keySize": {"enum": [128, 256], "description": "AES key, bits"},
        "ivSize": {"const": 128},
        "tagSize": {"enum": [96, 128], "description": "ICV, bits"},
        "mode": {"enum": ["transport", "tunnel"]},
        "esn": {"type": "boolean", "description": "extended sequence numbers (RFC 4303 §2.2.1)"},
        "antiReplay": {"const": False, "description": "each test stands alone: the receiver keeps no window"},
        "replayWindow": {"type": "integer", "minimum": 64},
        "udpEncap": {"type": "boolean", "description": "ESP in UDP 4500 (RFC 3948)"},
        "stateful": {"const": False},
        "comment": {"type": "string"},
        "tests": {"type": "array", "items": {"$ref": "#/$defs/test"}},
    },
}
_TEST = test_object(
    {
        "type": "object",
        "required": ["key", "integKey", "spi", "seq", "iv", "ciphertextPacket"],
        "additionalProperties": False,
        "properties": {
            "key": hex_of_any(16, 32),
            "integKey": hex_of_any(*sorted({r.integ_key_len for r in CBC_ROWS.values()})),
            "spi": hex_of(4),
            "seq": {**_U64, "description": "the sender's sequence number, all 64 bits (only the low 32 travel)"},
            "iv": {**hex_of(16), "description": "the CBC IV on the wire"},
            "replayTop": {**_U64, "description": "the receiver's highest sequence number accepted before (absent: "
                          "0): it places the ESN inference of RFC 4303 Appendix A2.2"},
            "ciphertextPacket": HEX,
        },
    },
    DELIVERY_OUTPUTS,
    DELIVERY_RULES,
)
_SOURCE = {"type": "object", "required": ["name", "version"], "additionalProperties": False,
           "properties": {"name": {"enum": ["self"]}, "version": {"type": "string"}}}
SCHEMAS = {CBC_SCHEMA: top_schema(
    CBC_SCHEMA, "ESP AES-CBC + HMAC packet test vectors",
    "Wycheproof-style ESP (RFC 4303 with AES-CBC, RFC 3602, and HMAC-SHA-1-96 or HMAC-SHA-256-128, RFC 2404 and "
    "4868; RFC 3948) packet vectors: full wire octets and what a receiver delivers, or why it drops the packet. "
    "See vectors/README.md.", ["ESP"], _GROUP, {"test": _TEST, "source": _SOURCE})}


def _cbc(key: bytes, iv: bytes, data: bytes) -> bytes:
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    except ImportError as e:  # pragma: no cover - the test extra has it
        raise RuntimeError("the AES-CBC vector files are computed with pyca/cryptography: pip install cryptography") \
            from e
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return enc.update(data) + enc.finalize()


def seal_cbc(suite: str, key: bytes, integ_key: bytes, spi: int, seq: int, esn: bool, body: bytes, iv: bytes, *,
             esn_in_icv: bool = True) -> bytes:
    """SPI ‖ Seq low ‖ IV ‖ AES-CBC(body) ‖ HMAC(SPI ‖ Seq low ‖ IV ‖ ciphertext [‖ Seq high]) truncated."""
    head = struct.pack(">II", spi, seq & M32) + iv + _cbc(key, iv, body)
    tail = struct.pack(">I", seq >> 32) if esn and esn_in_icv else b""
    icv = hmac.new(integ_key, head + tail, _DIGESTS[suite]).digest()[: CBC_ROWS[suite].icv_len]
    return head + icv


def trailer_body(payload: bytes, nh: int, padding: Optional[bytes] = None, pad_len: Optional[int] = None) -> bytes:
    """payload ‖ padding (default 1, 2, 3, ... to the 16-octet block) ‖ Pad Length ‖ Next Header."""
    if padding is None:
        padding = bytes(range(1, -(len(payload) + 2) % 16 + 1))
    return payload + padding + bytes([len(padding) if pad_len is None else pad_len, nh])


def _info(suite: str) -> SuiteInfo:
    r = CBC_ROWS[suite]
    return SuiteInfo(r.name, r.id, r.aead, "cbc", 0, r.iv_len, r.icv_len, tuple(8 * n for n in r.key_lens))


class CbcFileBuilder:
    def __init__(self, seed: int, suite: str) -> None:
        self.suite = _info(suite)
        self.row = CBC_ROWS[suite]
        self.name = f"esp_{suite}_test.json"
        self.rng = Rng(seed, "esp", suite)
        self.inner = Inner(self.rng.child("inner"))
        self.groups: List[Group] = []

    def group(self, comment: str, *, mode: str, key_bits: int, esn: bool = False, udp: bool = False) -> "CbcGroup":
        f = {"type": "EspCbcPacketTest", "source": SOURCE_SELF, "suite": self.row.name, "encrId": self.row.id,
             "integId": self.row.integ, "keySize": key_bits, "ivSize": 128, "tagSize": 8 * self.row.icv_len,
             "mode": mode, "esn": esn, "antiReplay": False, "replayWindow": 1024, "udpEncap": udp, "stateful": False,
             "comment": comment}
        g = Group(f)
        self.groups.append(g)
        return CbcGroup(self, g, key_bits)


class CbcGroup:
    """One group: its SA (keys and SPI from the RNG) and the tests made on it."""

    def __init__(self, fb: CbcFileBuilder, g: Group, key_bits: int) -> None:
        self.fb, self.g, self.key_bits = fb, g, key_bits
        self.suite, self.row = fb.suite, fb.row
        self.mode, self.udp, self.esn = g.fields["mode"], g.fields["udpEncap"], g.fields["esn"]
        self.rng = fb.rng.child("group", len(fb.groups) - 1)
        self.spi = (int.from_bytes(self.rng.child("spi").bytes(4), "big") & (0x7FFFFFFF if self.udp else M32)) | 0x100
        self.key = self.rng.child("key").bytes(key_bits // 8)
        self.integ_key = self.rng.child("integ").bytes(self.row.integ_key_len)
        self._seq, self._iv = self.rng.child("seq"), self.rng.child("iv")

    def next_seq(self) -> int:
        return self._seq.int(1, 2**31 - 1) if not self.esn else self._seq.int(2**32, 2**40)

    def inputs(self, seq: int, iv: bytes, wire: bytes, key: Optional[bytes] = None,
               integ_key: Optional[bytes] = None) -> Dict[str, Any]:
        inp = {"key": (key or self.key).hex(), "integKey": (integ_key or self.integ_key).hex(), "spi": f"{self.spi:08x}",
               "seq": f"{seq:016x}", "iv": iv.hex()}
        if self.esn:  # the receiver infers the high half from just below the packet's number
            inp["replayTop"] = f"{seq - 1:016x}"
        inp["ciphertextPacket"] = wire.hex()
        return inp

    def valid(self, comment: str, flags: Sequence[str], pkt: bytes, *, padding: Optional[bytes] = None,
              outer_v: Optional[int] = None) -> "Sealed":
        seq, iv = self.next_seq(), self._iv.bytes(16)
        payload, nh = split(self.mode, pkt)
        body = trailer_body(payload, nh, padding)
        esp = seal_cbc(self.row.name, self.key, self.integ_key, self.spi, seq, self.esn, body, iv)
        tmpl = outer_header(self.rng, outer_v or (pkt[0] >> 4), IPPROTO_ESP) if self.mode == "tunnel" else None
        wire = frame(self.mode, self.udp, pkt, esp, outer=tmpl)
        flags = list(flags) + (["DecryptOnly"] if padding is not None else [])
        if self.esn:
            flags.append("Esn")
        if tmpl is not None and tmpl[0] >> 4 != pkt[0] >> 4:
            flags.append("MixedTunnel")
        t = self.g.add(Test(comment, list(dict.fromkeys(flags)), self.inputs(seq, iv, wire),
                            delivered(pkt, esp[-self.row.icv_len :], nh, body[-2]), "valid", wire))
        return Sealed(self, t, wire, pkt, seq, iv, payload, nh, body)

    def invalid(self, comment: str, flags: Sequence[str], base: "Sealed", wire: bytes, error: str, *,
                result: str = "invalid", icv_valid: Optional[bool] = None, plaintext: Optional[bytes] = None,
                **inputs: Any) -> Test:
        inp = dict(base.test.inputs, ciphertextPacket=wire.hex(), **inputs)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp,
                               dropped(error, icv_valid, plaintext), result, wire))

    def crafted(self, comment: str, flags: Sequence[str], base: "Sealed", *, body: Optional[bytes] = None,
                key: Optional[bytes] = None, integ_key: Optional[bytes] = None, esn_in_icv: bool = True,
                result: str = "invalid", error: Optional[str] = None, icv_valid: Optional[bool] = None,
                plaintext: Optional[bytes] = None) -> Test:
        """base's packet sealed again with some parts changed (authenticating unless a key or ICV mistake is asked
        for); the inputs keep the SA's keys."""
        body = base.body if body is None else body
        esp = seal_cbc(self.row.name, key or self.key, integ_key or self.integ_key, self.spi, base.seq, self.esn,
                       body, base.iv, esn_in_icv=esn_in_icv)
        wire = base.with_secured(esp)
        if result == "valid":
            out = delivered(base.pkt, esp[-self.row.icv_len :], body[-1], body[-2])
            flags = list(flags) + ["DecryptOnly"]
        else:
            out = dropped(error, icv_valid, plaintext if result == "acceptable" else None)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), self.inputs(base.seq, base.iv, wire),
                               out, result, wire))

    def finish(self) -> None:
        parts = [f"spi=0x{self.spi:08x}", f"suite={self.row.name}", f"key-bits={self.key_bits}",
                 f"key={(self.key + self.integ_key).hex()}", f"mode={self.mode}", f"esn={int(self.esn)}",
                 "anti-replay=0", f"udp-encap={int(self.udp)}"]
        self.g.keys = key_file_head("ESP test SA", self.fb.name, len(self.fb.groups)) + "esp-sa " + " ".join(parts) + "\n"


class Sealed:
    def __init__(self, gb: CbcGroup, test: Test, wire: bytes, pkt: bytes, seq: int, iv: bytes, payload: bytes,
                 nh: int, body: bytes) -> None:
        from pecore.tools.vectors import SealedPacket

        self._p = SealedPacket(test, wire, pkt)
        self.gb, self.test, self.wire, self.pkt = gb, test, wire, pkt
        self.seq, self.iv, self.payload, self.nh, self.body = seq, iv, payload, nh, body

    @property
    def at(self) -> int:
        return self._p.at

    @property
    def secured(self) -> bytes:
        return self._p.secured

    def eflip(self, offset: int, mask: int = 0x01) -> bytes:
        return self._p.eflip(offset, mask)

    def with_secured(self, secured: bytes) -> bytes:
        return self._p.with_secured(secured)


def _mutations(gb: CbcGroup, s: Sealed, tag: str) -> None:
    icv, e = gb.row.icv_len, s.secured
    gb.invalid(f"{tag}: first ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-icv, 0x80), "authentication-failed")
    gb.invalid(f"{tag}: last ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-1, 0x01), "authentication-failed")
    gb.invalid(f"{tag}: first ciphertext octet flipped", ["ModifiedCiphertext"], s, s.eflip(24, 0x01),
               "authentication-failed")
    gb.invalid(f"{tag}: last ciphertext octet (Next Header) flipped", ["ModifiedCiphertext"], s,
               s.eflip(-icv - 1, 0x40), "authentication-failed")
    gb.invalid(f"{tag}: IV flipped (CBC: it would flip the first plaintext block)", ["ModifiedAad"], s,
               s.eflip(8, 0x04), "authentication-failed")
    gb.invalid(f"{tag}: Sequence Number bit 30 flipped", ["ModifiedAad"], s, s.eflip(4, 0x40),
               "authentication-failed")
    gb.invalid(f"{tag}: SPI flipped: no SA", ["NoSa"], s, s.eflip(3, 0x01), "esp-no-sa")
    gb.invalid(f"{tag}: last ICV octet cut off (15 octets past a block)", ["Truncated", "BlockLength"], s,
               s.with_secured(e[:-1]), "esp-bad-block-length")
    gb.invalid(f"{tag}: the last ciphertext block cut out", ["Truncated"], s,
               s.with_secured(e[: -icv - 16] + e[-icv:]), "authentication-failed")
    need = 8 + 16 + 2 + icv
    gb.invalid(f"{tag}: cut to {need - 1} octets, one short of header + IV + trailer + ICV", ["Truncated"], s,
               s.with_secured(e[: need - 1]), "esp-truncated")
    km = gb.key + gb.integ_key
    gb.crafted(f"{tag}: integrity key taken from the front of the KEYMAT", ["KeySplitMistake"], s,
               key=km[len(gb.integ_key) :], integ_key=km[: len(gb.integ_key)], error="authentication-failed")


def _receiver_rules(gb: CbcGroup, s: Sealed, tag: str) -> None:
    p = s.payload
    pad = bytes(range(1, len(s.body) - len(p) - 2 + 17))
    gb.crafted(f"{tag}: {len(pad)} octets of padding (a block more than needed)", ["ExtraPadding"], s,
               body=trailer_body(p, s.nh, pad), result="valid")
    n = len(s.body) - len(p) - 2
    zeros = bytes(n) if n else bytes(16)
    gb.crafted(f"{tag}: {len(zeros)} zero padding octets", ["BadPadding"], s, body=trailer_body(p, s.nh, zeros),
               result="acceptable", error="esp-bad-padding", icv_valid=True, plaintext=s.pkt)
    region = len(s.body) - 2
    gb.crafted(f"{tag}: Pad Length {region + 1}, one more than the payload and padding", ["BadPadLength"], s,
               body=s.body[:-2] + bytes([region + 1, s.nh]), error="esp-bad-pad-length", icv_valid=True)
    gb.crafted(f"{tag}: Next Header 59, a dummy packet", ["DummyPacket"], s, body=trailer_body(p, 59),
               error="esp-dummy-packet", icv_valid=True)


def packet_file(seed: int, suite: str) -> VectorFile:
    fb = CbcFileBuilder(seed, suite)
    inner = fb.inner
    gb = fb.group("tunnel mode, 128-bit key: IPv4 and IPv6, every padding length, and the decoder's rejections",
                  mode="tunnel", key_bits=128)
    first = None
    for n in range(16):  # payload lengths 0..15 mod 16: every padding length
        s = gb.valid(f"IPv4 UDP, {n} payload octets", ["EncryptThenMac", "Padding"], inner.udp(4, n))
        first = first or s
    s6 = gb.valid("IPv6 TCP", ["EncryptThenMac"], inner.tcp(6, 40))
    gb.valid("IPv4 in an IPv6 tunnel", ["EncryptThenMac"], inner.udp(4, 21), outer_v=6)
    assert first is not None
    _mutations(gb, first, "IPv4")
    _receiver_rules(gb, s6, "IPv6")
    gb.finish()
    gb = fb.group("transport mode, 256-bit key", mode="transport", key_bits=256)
    s = gb.valid("IPv4 UDP", ["EncryptThenMac"], inner.udp(4, 33))
    gb.valid("IPv6 TCP", ["EncryptThenMac"], inner.tcp(6, 7))
    _mutations(gb, s, "IPv4")
    gb.finish()
    gb = fb.group("extended sequence numbers (the high half in the ICV only), 256-bit key", mode="tunnel",
                  key_bits=256, esn=True)
    s = gb.valid("IPv4 UDP", ["EncryptThenMac"], inner.udp(4, 50))
    gb.valid("IPv6 TCP", ["EncryptThenMac"], inner.tcp(6, 1))
    gb.crafted("ICV without the high half of the sequence number", ["EsnIcvMistake"], s, esn_in_icv=False,
               error="authentication-failed")
    gb.invalid("a receiver a subspace behind: the high half it infers fails the ICV", ["EncryptThenMac"], s, s.wire,
               "authentication-failed", replayTop=f"{s.seq - (1 << 32) - 1:016x}")
    gb.finish()
    gb = fb.group("UDP encapsulation (RFC 3948), 128-bit key", mode="transport", key_bits=128, udp=True)
    s = gb.valid("IPv4 UDP in UDP 4500", ["EncryptThenMac", "UdpEncap"], inner.udp(4, 12))
    udp_encap_mutations(gb, s, "NotEsp", "not-esp")  # type: ignore[arg-type]
    gb.finish()
    row = CBC_ROWS[suite]
    header = [f"ESP (RFC 4303) packet vectors, suite {suite} (IKEv2 ENCR {row.id}, INTEG {row.integ}), "
              f"{8 * row.icv_len}-bit ICV, encrypt-then-MAC.",
              f"Generated by `pyesp vectors generate --seed {seed}`; see vectors/README.md.",
              "Wire octets from pyca/cryptography's AES-CBC and Python's hmac; checked against the core and scapy."]
    vf = assemble(fb.name, "ESP", CBC_SCHEMA, header, NOTES, fb.groups)
    mark_self_computed(vf, NOTES["SelfComputed"])
    return vf


def generate(seed: int) -> List[VectorFile]:
    return [packet_file(seed, s) for s in CBC_ROWS]


def sa_settings(group: dict, inp: dict) -> Dict[str, Any]:
    """pyesp.SA keyword arguments (receiving side): the KEYMAT is key ‖ integKey."""
    return dict(spi=int(inp["spi"], 16), suite=group["suite"], key=bytes.fromhex(inp["key"] + inp["integKey"]),
                mode=group["mode"], esn=group["esn"], anti_replay=False, replay_window=group["replayWindow"],
                replay_top=int(inp.get("replayTop", "0"), 16), udp_encap=group["udpEncap"])
