"""PSP interop test vectors: generation and checking (vectors/README.md).

Files (``pypsp vectors generate``): ``psp_kdf_test.json`` and
``psp_v0_test.json`` … ``psp_v3_test.json``, in the Wycheproof layout of
:mod:`pecore.tools.vectors`, schemas ``psp_kdf_test_schema_v1.json`` and
``psp_packet_test_schema_v1.json``.

A packet test is receiver-centric: ``inputs`` hold the key material and the
sending SA's per-packet parameters (SPI, IV, crypt offset, VC, S/D) and the
full wire octets ``ciphertextPacket`` (outer IP ‖ UDP ‖ PSP ‖ ICV);
``outputs`` hold what a receiver must deliver (``plaintextPacket``: in
transport mode the original IP packet, in tunnel mode the inner IP packet)
or, for invalid tests, the core's status name in ``error``.  A valid test
without the ``DecryptOnly`` flag must also be reproduced byte for byte by a
sender given ``plaintextPacket`` and the group's version, mode and VC.

Valid packets come from the core's encoder (:class:`pypsp.Encryptor`);
hand-built ones (reserved bits, extension octets, mutations) are sealed here
with :mod:`pecore.primitives`.  The expected error of every invalid test is
stated by the generator from the packet's construction, never read back from
the decoder.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pecore import primitives
from pecore.protocol import PSP_VERSIONS
from pecore.tools._tables import PSP_KEY_LEN, PSP_VERSION_NUMBERS, psp_gmac
from pecore.tools.vectors import (
    Checker, ERROR, Family, Group, HEX, Inner, Outcome, Rng, SealedPacket, Test, VectorFile, assemble,
    check_kat_doc, dropped, first_diff, hex_of, hex_of_any, hopopts, ip_packet, ipv4_header, ipv4_recheck,
    ipv6_header, kept_flags, key_file_head, l4_checksum, l4_offset, mark_self_computed, outer_template, put,
    register as _register, register_family, shared_notes, test_object, top_schema, udp_segment, when_result,
)

PACKET_SCHEMA = "psp_packet_test_schema_v1.json"
KDF_SCHEMA = "psp_kdf_test_schema_v1.json"
SOURCE_SELF = {"name": "self", "version": "pypsp 0.1.0"}
SOURCE_REF = {"name": "google/psp", "version": "reference tools (psp.md §10.4), reproduced from the cfgs and create_pcap frames"}
SOURCE_SPEC = {"name": "psp-spec", "version": "PSP Architecture Specification 2022-04-27, §5 KDF vectors"}
SOURCE_SCAPY = {"name": "scapy", "version": "2.7.0 scapy/contrib/psp.py docstring example"}

#: The spec's (and reference tools') public master keys (psp.md §5).  Test keys only.
REF_MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
REF_MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")

KEY_LEN = PSP_KEY_LEN  # derived key octets, from the core
#: A derived test keeps these flags of the packet it was made from (they describe its keys and header).
KEEP_FLAGS = ("MasterKey1", "DerivedKey", "Vc")
ALG = {v.version: v.name for v in PSP_VERSIONS}

# --------------------------------------------------------------------------------------------------------
# notes (flags)
# --------------------------------------------------------------------------------------------------------

NOTES: Dict[str, Dict[str, str]] = {
    "SpecKat": {"bugType": "BASIC", "description": "A known answer published in the PSP Architecture Specification (psp.md §5)."},
    "RefTool": {"bugType": "BASIC", "description": "Reproduces an output of the google/psp reference tools byte for byte "
                "(psp.md §10.4: the reference master keys, SPI, IV 1, crypt offsets and create_pcap cleartext frame; the "
                "Ethernet header is left out)."},
    "ScapyKat": {"bugType": "BASIC", "description": "The AEAD example of scapy's contrib/psp.py (psp.md §11), wrapped in "
                 "IPv4/UDP by the reference conventions."},
    "SelfComputed": {"bugType": "BASIC", "description": "No public vector covers this case: computed by this project and "
                     "checked by two implementations that share no code (the C core and a cryptography-based model)."},
    "KdfKat": {"bugType": "BASIC", "description": "SP 800-108 counter-mode KDF over AES-256-CMAC as PSP uses it: 16-octet "
               "input blocks counter ‖ label ‖ SPI ‖ L (psp.md §5)."},
    "AssumedKdfLabel": {"bugType": "FUNCTIONALITY", "description": "Versions 2/3: keys derived with the labels "
                        "\"Pv2\" (0x50763200, L = 128) and \"Pv3\" (0x50763300, L = 256), the project's working assumption "
                        "(psp.md §5); the spec defines only Pv0/Pv1."},
    "KdfMistake": {"bugType": "MODIFIED_PARAMETER", "description": "The expected output was computed with a known KDF "
                   "mistake, named in the comment; a correct implementation must not produce it."},
    "MasterKey1": {"bugType": "BASIC", "description": "The SPI's most significant bit is 1, so master key 1 is used (psp.md §3.4)."},
    "SpiEdge": {"bugType": "EDGE_CASE", "description": "SPI 0x00000000, 0x7fffffff, 0x80000000 or 0xffffffff."},
    "IvEdge": {"bugType": "EDGE_CASE", "description": "IV 0 (what Linux writes before the NIC fills it in) or 2^64-1."},
    "DerivedKey": {"bugType": "BASIC", "description": "The receiver holds only the SA's derived key (as a Linux host gets it "
                   "over netlink), no master key."},
    "CryptOffset": {"bugType": "EDGE_CASE", "description": "A crypt offset edge: 0, inside or at the end of the VC, the end "
                    "of the payload, or the maximum 63 words (252 octets) (psp.md §3.1)."},
    "EmptyCiphertext": {"bugType": "EDGE_CASE", "description": "The crypt offset lands exactly on the end of the payload: "
                        "nothing is encrypted, and the ICV must still be verified (psp.md §3.1, §9.1: the reference decoder "
                        "skips that check)."},
    "Vc": {"bugType": "BASIC", "description": "Carries a Virtualization Cookie (V = 1, Hdr Ext Len 2); its octets before the "
           "crypt offset are in the AAD, the others are encrypted."},
    "VcEncrypted": {"bugType": "EDGE_CASE", "description": "Crypt offset < 2 with a VC: the VC octets past the offset travel "
                    "encrypted. scapy diverges here (psp.md §9.3)."},
    "SampleDrop": {"bugType": "BASIC", "description": "S and/or D bit set: opaque to the crypto, inside the AAD, never rejected."},
    "MixedTunnel": {"bugType": "EDGE_CASE", "description": "Tunnel mode with an outer header of the other IP version "
                    "than the inner packet."},
    "Ipv6ExtensionHeaders": {"bugType": "EDGE_CASE", "description": "IPv6 transport packet with a Hop-by-Hop Options "
                             "header: UDP + PSP are inserted after it (psp.md §6 step 7)."},
    "NonPortL4": {"bugType": "EDGE_CASE", "description": "The inner L4 protocol is neither TCP nor UDP, so the reference "
                  "source-port rule gives 1000 (psp.md §8)."},
    "DecryptOnly": {"bugType": "FUNCTIONALITY", "description": "Valid on receive, but built by hand: a conforming sender "
                    "does not produce it (reserved bits set, extension octets, a UDP checksum). Check it by decryption only."},
    "ReservedBits": {"bugType": "EDGE_CASE", "description": "R bits (octet 2, mask 0xC0) not zero: ignored on receive, "
                     "but authenticated (psp.md §2)."},
    "ExtensionArea": {"bugType": "EDGE_CASE", "description": "Hdr Ext Len larger than needed: opaque extension octets "
                      "after the IV (and VC), authenticated or encrypted like the VC and stripped on decapsulation."},
    "UdpChecksum": {"bugType": "EDGE_CASE", "description": "A non-zero UDP checksum. Receivers must accept 0 and may "
                    "verify a non-zero one (psp.md §8): a wrong non-zero checksum is therefore acceptable either way."},
    "GmacCryptOffset": {"bugType": "EDGE_CASE", "description": "AES-GMAC (versions 2/3) with a non-zero, reserved crypt "
                        "offset, sealed over the whole payload as psp.md §4.2 reads the spec. Receivers may accept it "
                        "(the core does) or drop it."},
    **shared_notes("ModifiedIcv"),
    "ModifiedCiphertext": {"bugType": "AUTH_BYPASS", "description": "An encrypted octet (for GMAC a payload octet) flipped."},
    "ModifiedAad": {"bugType": "AUTH_BYPASS", "description": "An authenticated clear octet changed after sealing (a header "
                    "field named in the comment, the VC, or the clear part before the crypt offset)."},
    "WrongKeySelection": {"bugType": "MODIFIED_PARAMETER", "description": "Sealed with a key the receiver must not use: "
                          "the other master key (SPI MSB ignored), a wrong KDF label, or the master key itself."},
    "WrongPrimitive": {"bugType": "WRONG_PRIMITIVE", "description": "Sealed with the other algorithm of the key size: "
                       "a GMAC version run as AES-GCM (payload encrypted) or a GCM version run as GMAC."},
    "Truncated": {"bugType": "MODIFIED_PARAMETER", "description": "The PSP part is cut short (IP and UDP lengths fixed up)."},
    "AlwaysOneClear": {"bugType": "MODIFIED_PARAMETER", "description": "The always-1 bit (octet 3, 0x01) is 0."},
    "BadVersion": {"bugType": "MODIFIED_PARAMETER", "description": "Version 4-15 (reserved), or a version this receiver "
                   "does not accept (inputs.acceptedVersions)."},
    "BadHdrExtLen": {"bugType": "MODIFIED_PARAMETER", "description": "Hdr Ext Len 0, or running past the ICV, or too small "
                     "for the VC that V announces."},
    "CryptOffsetTooLarge": {"bugType": "MODIFIED_PARAMETER", "description": "The crypt offset points past the end of the "
                            "payload: malformed (psp.md §3.1)."},
    "NoKey": {"bugType": "MISSING_STEP", "description": "The receiver has no key for the SPI: the master key its MSB "
              "selects is missing, and no derived key matches."},
    "TunnelInnerMismatch": {"bugType": "MODIFIED_PARAMETER", "description": "Tunnel mode: Next Header says IPv4 (4) or "
                            "IPv6 (41) but the authenticated inner packet is of the other version, or empty."},
    "TunnelInnerMalformed": {"bugType": "MODIFIED_PARAMETER", "description": "Tunnel mode: the authenticated inner "
                             "packet is not one whole IP packet (IHL below 5, or a Total Length that is not the "
                             "packet's length); the core delivers only whole packets."},
    "NotPsp": {"bugType": "FUNCTIONALITY", "description": "Not a PSP packet for this receiver: not UDP, or another "
               "destination port."},
    "IpFraming": {"bugType": "MODIFIED_PARAMETER", "description": "Broken outer IP/UDP framing (lengths, IHL, version, "
                  "a fragment). The status names are those of the core's IP layer."},
}

# --------------------------------------------------------------------------------------------------------
# schemas
# --------------------------------------------------------------------------------------------------------

_SPI = hex_of(4)
_IV = hex_of(8)

PACKET_GROUP = {
    "type": "object",
    "required": ["type", "source", "version", "mode", "vc", "tests"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "PspPacketTest"},
        "source": {"$ref": "#/$defs/source"},
        "version": {"type": "integer", "minimum": 0, "maximum": 3, "description": "PSP crypto version of the sending SA"},
        "mode": {"enum": ["transport", "tunnel"]},
        "vc": {"type": "boolean", "description": "the sending SA adds a Virtualization Cookie"},
        "comment": {"type": "string"},
        "tests": {"type": "array", "items": {"$ref": "#/$defs/test"}},
    },
}
PACKET_TEST = test_object(
    {
        "type": "object",
        "required": ["spi", "iv", "cryptOffset", "sample", "drop", "ciphertextPacket"],
        "additionalProperties": False,
        "anyOf": [{"required": ["masterKey0"]}, {"required": ["masterKey1"]}, {"required": ["derivedKey"]}],
        "properties": {
            "masterKey0": hex_of(32),
            "masterKey1": hex_of(32),
            "derivedKey": hex_of_any(*sorted(set(KEY_LEN.values()))),
            "spi": _SPI,
            "iv": _IV,
            "cryptOffset": {"type": "integer", "minimum": 0, "maximum": 63, "description": "in 4-octet words"},
            "vcValue": hex_of(8),
            "sample": {"type": "boolean"},
            "drop": {"type": "boolean"},
            "acceptedVersions": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3},
                                 "description": "receiver policy: the versions it accepts (default all four)"},
            "ciphertextPacket": HEX,
        },
    },
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {"plaintextPacket": HEX, "icv": hex_of(16), "error": ERROR},
    },
    [when_result("valid", ["plaintextPacket", "icv"]), when_result("invalid", ["error"]),
     when_result("acceptable", ["error"])],
)
KDF_GROUP = {
    "type": "object",
    "required": ["type", "source", "tests"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "PspKdfTest"},
        "source": {"$ref": "#/$defs/source"},
        "comment": {"type": "string"},
        "tests": {"type": "array", "items": {"$ref": "#/$defs/test"}},
    },
}
KDF_TEST = test_object(
    {
        "type": "object",
        "required": ["masterKey", "spi", "version"],
        "additionalProperties": False,
        "properties": {
            "masterKey": hex_of(32),
            "spi": _SPI,
            "version": {"type": "integer", "minimum": 0, "maximum": 3},
            "label": {"type": "string", "pattern": "^[0-9a-f]{8}$",
                      "description": "KDF label override (default 50763000 | version << 8)"},
        },
    },
    {"type": "object", "required": ["derivedKey"], "additionalProperties": False,
     "properties": {"derivedKey": hex_of_any(*sorted(set(KEY_LEN.values())))}},
)

SCHEMAS = {
    PACKET_SCHEMA: top_schema(
        PACKET_SCHEMA, "PSP packet test vectors",
        "Wycheproof-style PSP (crypto versions 0-3) packet vectors: full wire octets and the recovered packet, or the "
        "reason a receiver drops the packet. See vectors/README.md.",
        ["PSP"], PACKET_GROUP, {"test": PACKET_TEST}),
    KDF_SCHEMA: top_schema(
        KDF_SCHEMA, "PSP key derivation test vectors",
        "PSP SA key derivation (SP 800-108 counter mode, AES-256-CMAC, psp.md §5).",
        ["PSP-KDF"], KDF_GROUP, {"test": KDF_TEST}),
}

# --------------------------------------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------------------------------------


def _h(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else bytes(b).hex()


def kdf(mk: bytes, spi: int, version: int, label: Optional[int] = None) -> bytes:
    from pypsp import derive_key

    return derive_key(mk, spi, version, label=label)


def h16(next_header: int, spi: int, iv: int, *, version: int, co: int = 0, hdr_ext_len: int = 1, virt: bool = False,
        sample: bool = False, drop: bool = False, r: int = 0, one: int = 1) -> bytes:
    o2 = (r & 3) << 6 | (co & 0x3F)
    o3 = (0x80 if sample else 0) | (0x40 if drop else 0) | (version & 0xF) << 2 | (0x02 if virt else 0) | (one & 1)
    return struct.pack(">BBBBIQ", next_header, hdr_ext_len, o2, o3, spi, iv)


def seal_psp(key: bytes, hdr: bytes, body: bytes, clear: int, gmac: bool) -> bytes:
    """hdr (16) ‖ body[:clear] ‖ ct ‖ ICV; GMAC authenticates everything and encrypts nothing."""
    nonce = hdr[4:16]
    if gmac:
        _ct, tag = primitives.aead_seal(primitives.AES_GCM, key, nonce, [hdr + body], b"")
        return hdr + body + tag
    ct, tag = primitives.aead_seal(primitives.AES_GCM, key, nonce, [hdr + body[:clear]], body[clear:])
    return hdr + body[:clear] + ct + tag


class Sealed(SealedPacket):
    """A valid packet and what is needed to build variants of it (``secured``: the PSP part)."""

    def __init__(self, test: Test, wire: bytes, plain: bytes, key: bytes, body: bytes, clear: int, version: int,
                 spi: int, iv: int, mode: str) -> None:
        super().__init__(test, wire, plain)
        self.plain, self.key, self.body = plain, key, body
        self.clear, self.version, self.spi, self.iv, self.mode = clear, version, spi, iv, mode


class PspGroupBuilder:
    """Adds tests to one group; every sealed packet comes from pypsp.Encryptor unless said otherwise."""

    def __init__(self, fb: "PspFileBuilder", group: Group) -> None:
        self.fb, self.g = fb, group
        self.version = group.fields["version"]
        self.mode = group.fields["mode"]
        self.vc = group.fields["vc"]
        self.gmac = psp_gmac(self.version)
        self.master_keys: Optional[Tuple[Optional[bytes], Optional[bytes]]] = None
        self.psp_keys: Dict[Tuple[int, int], bytes] = {}

    # -- inputs -------------------------------------------------------------------------------------------

    def _inputs(self, *, spi: int, iv: int, co: int, vc: Optional[bytes], sample: bool, drop: bool, wire: bytes,
                mks: Optional[Tuple[Optional[bytes], Optional[bytes]]], derived: Optional[bytes],
                register: bool = True) -> Dict[str, Any]:
        inp: Dict[str, Any] = {}
        if derived is not None:
            inp["derivedKey"] = _h(derived)
            if register:
                self.psp_keys[(spi, self.version)] = derived
        else:
            assert mks is not None
            if mks[0] is not None:
                inp["masterKey0"] = _h(mks[0])
            if mks[1] is not None:
                inp["masterKey1"] = _h(mks[1])
            if not register:
                pass
            elif self.master_keys is None:
                self.master_keys = mks
            elif self.master_keys != mks:
                raise ValueError("one group, one master key pair (its key file has one psp-master line)")
        inp.update(spi=f"{spi:08x}", iv=f"{iv:016x}", cryptOffset=co, sample=sample, drop=drop,
                   ciphertextPacket=_h(wire))
        if vc is not None:
            inp["vcValue"] = _h(vc)
        return inp

    def key_for(self, spi: int, mks=None, version: Optional[int] = None) -> bytes:
        mks = mks or self.fb.mks
        return kdf(mks[spi >> 31], spi, self.version if version is None else version)

    # -- valid packets from the core -------------------------------------------------------------------------

    def valid(self, comment: str, flags: Sequence[str], pkt: bytes, *, spi: Optional[int] = None, iv: int = 1,
              co: int = 0, vc: Optional[bytes] = None, sample: bool = False, drop: bool = False,
              derived: bool = False, mks=None, tunnel_header: Optional[bytes] = None, add: bool = True) -> Sealed:
        import pypsp

        mks = mks or self.fb.mks
        if spi is None:
            spi = self.fb.spi(self.fb.msb())
        if vc is None and self.vc:
            vc = self.fb.rng.child("vc", comment).bytes(8)
        key = self.key_for(spi, mks)
        kw: Dict[str, Any] = dict(spi=spi, version=self.version, mode=self.mode, crypt_offset=co, vc=vc,
                                  sample=sample, drop=drop, first_iv=iv, tunnel_header=tunnel_header)
        enc = pypsp.Encryptor(key=key, **kw) if derived else pypsp.Encryptor(master_keys=mks, **kw)
        wire = enc.encrypt(pkt)
        flags = list(flags)
        if spi >> 31:
            flags.append("MasterKey1")
        if derived:
            flags.append("DerivedKey")
        if vc is not None:
            flags.append("Vc")
            if co < 2 and not self.gmac:
                flags.append("VcEncrypted")
        if sample or drop:
            flags.append("SampleDrop")
        body = (vc or b"") + (pkt if self.mode == "tunnel" else pkt[l4_offset(pkt)[0] :])
        if not self.gmac and 4 * co == len(body):
            flags.append("EmptyCiphertext")
        inp = self._inputs(spi=spi, iv=iv, co=co, vc=vc, sample=sample, drop=drop, wire=wire,
                           mks=None if derived else mks, derived=key if derived else None, register=add)
        out = {"plaintextPacket": _h(pkt), "icv": _h(wire[-16:])}
        t = Test(comment, list(dict.fromkeys(flags)), inp, out, "valid", wire)
        if add:
            self.g.add(t)
        return Sealed(t, wire, pkt, key, body, len(body) if self.gmac else 4 * co, self.version, spi, iv, self.mode)

    # -- variants -------------------------------------------------------------------------------------------

    def invalid(self, comment: str, flags: Sequence[str], base: Sealed, wire: bytes, error: str,
                result: str = "invalid", **inputs: Any) -> Test:
        inp = dict(base.test.inputs, ciphertextPacket=_h(wire))
        inp.update(inputs)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp, dropped(error), result, wire))

    def crafted(self, comment: str, flags: Sequence[str], base: Sealed, *, hdr: bytes, body: bytes, clear: int,
                gmac: Optional[bool] = None, key: Optional[bytes] = None, plaintext: Optional[bytes] = None,
                result: str = "valid", error: Optional[str] = None, co: Optional[int] = None,
                sample: Optional[bool] = None, drop: Optional[bool] = None) -> Tuple[Test, bytes]:
        """A hand-sealed variant of ``base``: header ``hdr`` (16 octets), P = ``body``, first ``clear`` octets
        of P in clear."""
        gmac = self.gmac if gmac is None else gmac
        wire = base.with_secured(seal_psp(key or base.key, hdr, body, clear, gmac))
        inp = dict(base.test.inputs, ciphertextPacket=_h(wire))
        if co is not None:
            inp["cryptOffset"] = co
        if sample is not None:
            inp["sample"] = sample
        if drop is not None:
            inp["drop"] = drop
        if result == "valid":
            out = {"plaintextPacket": _h(plaintext if plaintext is not None else base.plain), "icv": _h(wire[-16:])}
            flags = ["DecryptOnly"] + list(flags)
        else:
            out = dropped(error, plaintext=plaintext if result == "acceptable" else None)
        return self.g.add(Test(comment, kept_flags(base.test, KEEP_FLAGS, flags), inp, out, result, wire)), wire

    def finish(self) -> None:
        lines = []
        if self.master_keys is not None:
            mk0, mk1 = self.master_keys
            parts = ([f"key0={mk0.hex()}"] if mk0 else []) + ([f"key1={mk1.hex()}"] if mk1 else [])
            lines.append("psp-master " + " ".join(parts))
        for (spi, version), key in sorted(self.psp_keys.items()):
            lines.append(f"psp-key spi=0x{spi:08x} version={version} key={key.hex()}")
        self.g.keys = key_file_head("PSP test keys", self.fb.name, len(self.fb.groups)) + "".join(l + "\n" for l in lines)


class PspFileBuilder:
    def __init__(self, seed: int, version: int) -> None:
        self.version = version
        self.name = f"psp_v{version}_test.json"
        self.rng = Rng(seed, "psp", f"v{version}")
        self.mks = (self.rng.child("mk", 0).bytes(32), self.rng.child("mk", 1).bytes(32))
        self.inner = Inner(self.rng.child("inner"))
        self._spi = self.rng.child("spi")
        self._msb = 0
        self.groups: List[Group] = []

    def spi(self, msb: int) -> int:
        return (msb << 31) | self._spi.int(1, 0x7FFFFFFE)

    def msb(self) -> int:
        self._msb ^= 1
        return self._msb

    def group(self, mode: str, vc: bool, comment: str, source: Optional[dict] = None) -> PspGroupBuilder:
        g = Group({"type": "PspPacketTest", "source": source or SOURCE_SELF, "version": self.version, "mode": mode,
                   "vc": vc, "comment": comment})
        self.groups.append(g)
        return PspGroupBuilder(self, g)


# --------------------------------------------------------------------------------------------------------
# the reference cases (psp.md §10.3, §10.4)
# --------------------------------------------------------------------------------------------------------

#: case, SPI, version, crypt offsets (transport, IPv4 tunnel, IPv6 tunnel), VC, kind
REF_CASES = [
    ("v4_transport_crypt_off_128", 0x9A345678, 0, (1, 6, 11), False, "normal"),
    ("v4_transport_crypt_off_128_empty", 0x9A345678, 0, (2, 7, 12), False, "normal"),
    ("v4_transport_crypt_off_128_err", 0x9A345678, 0, (1, 6, 11), False, "corrupt-after-seal"),
    ("v4_transport_crypt_off_128_vc", 0x9A345678, 0, (3, 8, 13), True, "normal"),
    ("v4_transport_crypt_off_256", 0x9A345678, 1, (1, 6, 11), False, "normal"),
    ("v4_transport_no_crypt_off_128", 0x1A345678, 0, (0, 0, 0), False, "normal"),
    ("v4_transport_no_crypt_off_128_vc", 0x9A345678, 0, (0, 0, 0), True, "normal"),
    ("v4_transport_no_crypt_off_256", 0x1A345678, 1, (0, 0, 0), False, "normal"),
    ("v4_tunnel_crypt_off_128", 0x1A345678, 0, (1, 6, 11), False, "normal"),
    ("v4_tunnel_crypt_off_256", 0x1A345678, 1, (1, 6, 11), False, "normal"),
    ("v4_tunnel_no_crypt_off_128", 0x9A345678, 0, (0, 0, 0), False, "normal"),
    ("v4_tunnel_no_crypt_off_256", 0x9A345678, 1, (0, 0, 0), False, "normal"),
    ("v6_transport_crypt_off_128", 0x9A345678, 0, (1, 6, 11), False, "normal"),
    ("v6_transport_crypt_off_256", 0x9A345678, 1, (1, 6, 11), False, "normal"),
    ("v6_transport_no_crypt_off_128", 0x1A345678, 0, (0, 0, 0), False, "normal"),
    ("v6_transport_no_crypt_off_256", 0x1A345678, 1, (0, 0, 0), False, "normal"),
    ("v6_tunnel_crypt_off_128", 0x1A345678, 0, (1, 6, 11), False, "normal"),
    ("v6_tunnel_crypt_off_256", 0x1A345678, 1, (1, 6, 11), False, "normal"),
    ("v6_tunnel_crypt_off_256_empty", 0x1A345678, 1, (2, 7, 12), False, "normal"),
    ("v6_tunnel_crypt_off_256_err", 0x1A345678, 1, (1, 6, 11), False, "corrupt-after-seal"),
    ("v6_tunnel_crypt_off_256_vc", 0x1A345678, 1, (3, 8, 13), True, "normal"),
    ("v6_tunnel_no_crypt_off_128", 0x9A345678, 0, (0, 0, 0), False, "normal"),
    ("v6_tunnel_no_crypt_off_256", 0x9A345678, 1, (0, 0, 0), False, "normal"),
    ("v6_tunnel_no_crypt_off_256_vc", 0x1A345678, 1, (0, 0, 0), True, "normal"),
]


def reference_cleartext(ipv: int, empty: bool, i: int = 0) -> bytes:
    """Frame i of a google/psp create_pcap run, without its Ethernet header (psp.md §10.3)."""
    n = 0 if empty else (1392 if ipv == 4 else 1372)
    payload = bytes((i + k) & 0xFF for k in range(n))
    seg = udp_segment(11111, 22222, payload)
    if ipv == 4:
        return ip_packet("10.0.0.1", "10.0.0.2", 17, seg, ident=0)
    return ip_packet("a00::1", "a00::2", 17, seg)


def reference_case_id(case: str) -> Tuple[int, str, bool]:
    ipv = 4 if case.startswith("v4_") else 6
    mode = "tunnel" if "_tunnel_" in case else "transport"
    return ipv, mode, case.endswith("_empty")


def _reference_groups(fb: PspFileBuilder) -> None:
    mks = (REF_MK0, REF_MK1)
    by_group: Dict[Tuple[str, bool], List[tuple]] = {}
    for row in REF_CASES:
        if row[2] == fb.version:
            by_group.setdefault((reference_case_id(row[0])[1], row[4]), []).append(row)
    for (mode, vc), rows in sorted(by_group.items()):
        gb = fb.group(mode, vc, f"google/psp reference cases, {mode}, {'VC' if vc else 'no VC'}", SOURCE_REF)
        for case, spi, _v, offsets, _vc, kind in rows:
            ipv, _m, empty = reference_case_id(case)
            co = offsets[0] if mode == "transport" else offsets[1 if ipv == 4 else 2]
            pkt = reference_cleartext(ipv, empty)
            normal = case.removesuffix("_err")
            s = gb.valid(f"reference case {normal}", ["RefTool", "CryptOffset"] if co in (0, 2) else ["RefTool"], pkt,
                         spi=spi, iv=1, co=co, vc=bytes(8) if vc else None, mks=mks, add=kind == "normal")
            if kind != "normal":
                gb.invalid(f"reference case {case}: octet 2 of the PSP header |= 0x80 after sealing (R bit)",
                           ["RefTool", "ModifiedAad", "ReservedBits"], s, s.eflip(2, 0x80), "authentication-failed")
        gb.finish()


def _scapy_group(fb: PspFileBuilder) -> None:
    gb = fb.group("tunnel", False, "the scapy contrib/psp.py example (derived key given)", SOURCE_SCAPY)
    inner = bytes.fromhex("450000250001000040117cc57f0000017f00000104d2162e0011a0c4414141414141414141")
    key = bytes.fromhex("ffeeddccbbaa99887766554433221100")
    import pypsp

    enc = pypsp.Encryptor(key=key, spi=0x11223344, version=0, mode="tunnel", crypt_offset=5,
                          first_iv=0x0102030405060708)
    wire = enc.encrypt(inner)
    inp = {"derivedKey": key.hex(), "spi": "11223344", "iv": "0102030405060708", "cryptOffset": 5,
           "sample": False, "drop": False, "ciphertextPacket": wire.hex()}
    gb.psp_keys[(0x11223344, 0)] = key
    gb.g.add(Test("scapy contrib/psp.py docstring example: IPv4/UDP inner packet, crypt offset 5 (20 octets in clear); "
                  "17-octet ciphertext (no padding)", ["ScapyKat", "DerivedKey"], inp,
                  {"plaintextPacket": inner.hex(), "icv": wire[-16:].hex()}, "valid", wire))
    gb.finish()


# --------------------------------------------------------------------------------------------------------
# self-computed groups
# --------------------------------------------------------------------------------------------------------


def _header_mutations(gb: PspGroupBuilder, s: Sealed, tag: str) -> None:
    """Every header field changed after sealing, and the header-parsing rejections."""
    v = gb.version
    gb.invalid(f"{tag}: Next Header changed after sealing", ["ModifiedAad"], s, s.eflip(0, 0x01),
               "authentication-failed")
    gb.invalid(f"{tag}: SPI low bit flipped (other SA key and nonce)", ["ModifiedAad"], s, s.eflip(7, 0x01),
               "authentication-failed")
    gb.invalid(f"{tag}: SPI MSB flipped (the other master key)", ["ModifiedAad", "WrongKeySelection"], s,
               s.eflip(4, 0x80), "authentication-failed")
    gb.invalid(f"{tag}: IV flipped", ["ModifiedAad"], s, s.eflip(15, 0x01), "authentication-failed")
    gb.invalid(f"{tag}: R bit 0x40 set after sealing", ["ModifiedAad", "ReservedBits"], s, s.eflip(2, 0x40),
               "authentication-failed")
    gb.invalid(f"{tag}: S bit set after sealing", ["ModifiedAad", "SampleDrop"], s, s.eflip(3, 0x80),
               "authentication-failed")
    gb.invalid(f"{tag}: D bit set after sealing", ["ModifiedAad", "SampleDrop"], s, s.eflip(3, 0x40),
               "authentication-failed")
    gb.invalid(f"{tag}: crypt offset +1 after sealing", ["ModifiedAad"], s,
               put(s.wire, s.at + 2, bytes([s.secured[2] + 1])), "authentication-failed")
    other = next(x for x in PSP_VERSION_NUMBERS if KEY_LEN[x] == KEY_LEN[v] and psp_gmac(x) != psp_gmac(v))
    gb.invalid(f"{tag}: version {v} -> {other} after sealing (same key size, "
               f"{'GMAC' if psp_gmac(other) else 'GCM'} run on the receiver)", ["ModifiedAad"], s,
               put(s.wire, s.at + 3, bytes([(s.secured[3] & 0xC3) | other << 2])), "authentication-failed")
    other = v ^ 1
    gb.invalid(f"{tag}: version {v} -> {other} after sealing (other key length)", ["ModifiedAad"], s,
               put(s.wire, s.at + 3, bytes([(s.secured[3] & 0xC3) | other << 2])), "authentication-failed")
    gb.invalid(f"{tag}: always-1 bit cleared", ["AlwaysOneClear"], s, s.eflip(3, 0x01),
               "psp-always-one-bit-clear")
    for bad in (4, 15):
        gb.invalid(f"{tag}: version field {bad} (reserved)", ["BadVersion"], s,
                   put(s.wire, s.at + 3, bytes([(s.secured[3] & 0xC3) | bad << 2])), "psp-unsupported-version")
    gb.invalid(f"{tag}: receiver accepts only the other versions", ["BadVersion"], s, s.wire, "psp-version-disabled",
               acceptedVersions=[x for x in PSP_VERSION_NUMBERS if x != v])
    if not gb.vc:
        gb.invalid(f"{tag}: V bit set after sealing, Hdr Ext Len 1 leaves no room for a VC", ["BadHdrExtLen"], s,
                   s.eflip(3, 0x02), "psp-vc-without-room")
    gb.invalid(f"{tag}: Hdr Ext Len 0", ["BadHdrExtLen"], s, put(s.wire, s.at + 1, b"\x00"), "psp-bad-hdr-ext-len")
    gb.invalid(f"{tag}: Hdr Ext Len 255 runs past the packet", ["BadHdrExtLen"], s, put(s.wire, s.at + 1, b"\xff"),
               "psp-bad-hdr-ext-len")
    p_len = len(s.secured) - 32
    too = p_len // 4 + 1
    if too <= 63:
        gb.invalid(f"{tag}: crypt offset {too} words, 4 octets past the {p_len}-octet payload",
                   ["CryptOffsetTooLarge"], s, put(s.wire, s.at + 2, bytes([(s.secured[2] & 0xC0) | too])),
                   "psp-crypt-offset-past-payload")
    gb.invalid(f"{tag}: crypt offset 63 words (252 octets) on a {p_len}-octet payload", ["CryptOffsetTooLarge"], s,
               put(s.wire, s.at + 2, bytes([(s.secured[2] & 0xC0) | 63])), "psp-crypt-offset-past-payload")


def _body_mutations(gb: PspGroupBuilder, s: Sealed, tag: str) -> None:
    gb.invalid(f"{tag}: first ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-16, 0x80), "authentication-failed")
    gb.invalid(f"{tag}: last ICV bit flipped", ["ModifiedIcv"], s, s.eflip(-1, 0x01), "authentication-failed")
    hl = 16 + (8 if gb.vc else 0)
    if s.clear < len(s.body):
        gb.invalid(f"{tag}: first encrypted octet flipped", ["ModifiedCiphertext"], s, s.eflip(16 + s.clear, 0x01),
                   "authentication-failed")
        gb.invalid(f"{tag}: last encrypted octet flipped", ["ModifiedCiphertext"], s, s.eflip(-17, 0x80),
                   "authentication-failed")
    if gb.gmac:
        gb.invalid(f"{tag}: a payload octet flipped (GMAC: in clear, authenticated)", ["ModifiedCiphertext"], s,
                   s.eflip(hl + 2, 0x10), "authentication-failed")
    elif s.clear > (hl - 16):
        gb.invalid(f"{tag}: an octet of the clear part before the crypt offset flipped", ["ModifiedAad"], s,
                   s.eflip(s.clear + 15, 0x01), "authentication-failed")
    gb.invalid(f"{tag}: last octet cut off (ICV truncated)", ["Truncated"], s, s.with_secured(s.secured[:-1]),
               "authentication-failed")
    gb.invalid(f"{tag}: PSP part cut to 31 octets", ["Truncated"], s, s.with_secured(s.secured[:31]), "psp-truncated")
    gb.invalid(f"{tag}: UDP payload empty", ["Truncated"], s, s.with_secured(b""), "psp-truncated")


def _key_mistakes(gb: PspGroupBuilder, s: Sealed, tag: str) -> None:
    fb, v = gb.fb, gb.version
    hdr, body = s.secured[:16], s.body
    other = fb.mks[(s.spi >> 31) ^ 1]
    gb.crafted(f"{tag}: sealed with the key derived from the other master key (SPI MSB ignored)",
               ["WrongKeySelection"], s, hdr=hdr, body=body, clear=s.clear, key=kdf(other, s.spi, v),
               result="invalid", error="authentication-failed")
    if v >= 2:
        gb.crafted(f"{tag}: sealed with the key of label Pv{v - 2} (KDF label without the version OR-ed in)",
                   ["WrongKeySelection"], s, hdr=hdr, body=body, clear=s.clear,
                   key=kdf(fb.mks[s.spi >> 31], s.spi, v, label=0x50763000 | (v - 2) << 8),
                   result="invalid", error="authentication-failed")
    if KEY_LEN[v] == 32:
        gb.crafted(f"{tag}: sealed with the master key itself instead of the derived key", ["WrongKeySelection"], s,
                   hdr=hdr, body=body, clear=s.clear, key=fb.mks[s.spi >> 31], result="invalid",
                   error="authentication-failed")
    if gb.gmac:
        gb.crafted(f"{tag}: GMAC version sealed as AES-GCM (payload encrypted, crypt offset 0)", ["WrongPrimitive"], s,
                   hdr=hdr, body=body, clear=0, gmac=False, result="invalid", error="authentication-failed")
    else:
        gb.crafted(f"{tag}: GCM version sealed as GMAC (payload in clear, all of it authenticated)",
                   ["WrongPrimitive"], s, hdr=hdr, body=body, clear=len(body), gmac=True, result="invalid",
                   error="authentication-failed")


def _ip_framing(gb: PspGroupBuilder, s: Sealed, tag: str) -> None:
    w = s.wire
    u = s.at - 8
    gb.invalid(f"{tag}: UDP destination port 1001", ["NotPsp"], s, put(w, u + 2, struct.pack(">H", 1001)),
               "udp-wrong-port")
    gb.invalid(f"{tag}: IP protocol 6 (TCP) instead of UDP", ["NotPsp"], s,
               ipv4_recheck(put(w, 9, b"\x06")), "not-udp")
    gb.invalid(f"{tag}: UDP length one more than the datagram", ["IpFraming"], s,
               put(w, u + 4, struct.pack(">H", len(w) - u + 1)), "udp-bad-length")
    gb.invalid(f"{tag}: last octet missing, IP Total Length not fixed up", ["IpFraming", "Truncated"], s, w[:-1],
               "ip-bad-length")
    gb.invalid(f"{tag}: IHL 4", ["IpFraming"], s, ipv4_recheck(put(w, 0, b"\x44")), "ip-bad-header-length")
    gb.invalid(f"{tag}: IP version nibble 5", ["IpFraming"], s, put(w, 0, b"\x55"), "ip-bad-version")
    gb.invalid(f"{tag}: IP packet of 19 octets", ["IpFraming", "Truncated"], s, w[:19], "ip-truncated")
    short = ipv4_recheck(put(w[: u + 4], 2, struct.pack(">H", u + 4)))
    gb.invalid(f"{tag}: UDP header cut to 4 octets", ["IpFraming", "Truncated"], s, short, "udp-truncated")
    gb.invalid(f"{tag}: MF set (a first fragment; reassemble before PSP, or drop)", ["IpFraming"], s,
               ipv4_recheck(put(w, 6, bytes([w[6] | 0x20]))), "ip-fragment", result="acceptable")


def _udp_checksum(gb: PspGroupBuilder, s: Sealed, tag: str) -> None:
    w = s.wire
    u = s.at - 8
    src, dst = (w[12:16], w[16:20]) if w[0] >> 4 == 4 else (w[8:24], w[24:40])
    good = w[:u] + l4_checksum(src, dst, 17, w[u:], 6)
    t, _ = gb.crafted(f"{tag}: correct non-zero UDP checksum (senders write 0; receivers accept either)",
                      ["UdpChecksum"], s, hdr=s.secured[:16], body=s.body, clear=s.clear)
    t.inputs["ciphertextPacket"] = good.hex()
    t.wire = good
    bad = put(good, u + 6, struct.pack(">H", struct.unpack(">H", good[u + 6 : u + 8])[0] ^ 0x0101))
    gb.invalid(f"{tag}: wrong non-zero UDP checksum (a receiver may verify it)", ["UdpChecksum"], s, bad,
               "udp-bad-checksum", result="acceptable")


def _transport_group(fb: PspFileBuilder) -> None:
    v = fb.version
    gmac = psp_gmac(v)
    gb = fb.group("transport", False, "transport mode, no VC: offsets, S/D, SPIs, IVs, keys; mutations")
    inner = fb.inner
    co1 = 0 if gmac else 1
    bases = {}
    for ipv in (4, 6):
        for kind in ("udp", "tcp"):
            n = inner.rng.int(8, 40)
            bases[(ipv, kind)] = gb.valid(f"IPv{ipv}/{kind.upper()}, {n}-octet payload, crypt offset {co1}"
                                          + (" (ports in clear)" if co1 else ""), [], inner.by_kind(kind, ipv, n),
                                          co=co1)
        gb.valid(f"IPv{ipv}/ICMP echo request (no ports: UDP source port 1000)", ["NonPortL4"], inner.icmp(ipv, 12),
                 co=co1)
    # crypt offsets
    if not gmac:
        for co in range(64):  # every offset, each with 12 octets left to encrypt
            pkt = inner.udp(4, 4 * co + 4)
            gb.valid(f"IPv4/UDP, {4 * co + 12}-octet body, crypt offset {co} ({4 * co} octets in clear)",
                     ["CryptOffset"] if co in (0, 1, 2, 62, 63) else [], pkt, co=co, iv=1000 + co)
        pkt = inner.udp(4, 244)
        gb.valid("IPv4/UDP, 252-octet body, crypt offset 63: the maximum, and nothing encrypted",
                 ["CryptOffset"], pkt, co=63)
        for ipv in (4, 6):
            pkt = inner.udp(ipv, 0)
            gb.valid(f"IPv{ipv}/UDP with an empty payload, crypt offset 2: the 8-octet UDP header in clear, "
                     "nothing encrypted (the reference `_empty` shape)", ["CryptOffset"], pkt, co=2)
            pkt = inner.udp(ipv, 5)
            gb.valid(f"IPv{ipv}/UDP, 13-octet body, crypt offset 3: one octet encrypted", ["CryptOffset"], pkt, co=3)
        pkt = inner.udp(6, 30)
        gb.valid("IPv6/UDP, crypt offset 0: the ports encrypted too", ["CryptOffset"], pkt, co=0)
    else:
        for ipv in (4, 6):
            gb.valid(f"IPv{ipv}/UDP with an empty payload (GMAC over header and UDP header only)", [],
                     inner.udp(ipv, 0))
    for sample, drop in ((True, False), (False, True), (True, True)):
        gb.valid(f"IPv4/UDP with S={int(sample)} D={int(drop)}", [], inner.udp(4, 20), co=co1, sample=sample, drop=drop)
    for spi in (0, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF):
        gb.valid(f"SPI {spi:08x}", ["SpiEdge"], inner.udp(4, 16), spi=spi, co=co1)
    for iv in (0, 2**64 - 1):
        gb.valid(f"IV {iv:016x}", ["IvEdge"], inner.udp(6, 16), iv=iv, co=co1)
    for msb in (0, 1):
        gb.valid("receiver holds the derived key only", [], inner.tcp(4, 24), spi=fb.spi(msb), co=co1, derived=True)
    src, dst = inner.addrs(6)
    seg = udp_segment(inner.port(), inner.port(), inner.payload(20))
    pkt6 = ip_packet(src, dst, 17, seg, ext=hopopts(17), ext_nh=0)
    shbh = gb.valid("IPv6/UDP behind a Hop-by-Hop Options header: UDP + PSP follow the extension header",
                    ["Ipv6ExtensionHeaders"], pkt6, co=co1)

    s = bases[(4, "udp")]
    s6 = bases[(6, "tcp")]
    # hand-built valid packets
    for r in (1, 2, 3):
        gb.crafted(f"IPv4/UDP sealed with R = {r} (octet 2 = {r << 6 | (s.secured[2] & 0x3F):02x}): ignored on receive",
                   ["ReservedBits"], s, hdr=h16(s.secured[0], s.spi, s.iv, version=v, co=s.secured[2] & 0x3F, r=r),
                   body=s.body, clear=s.clear)
    ext = fb.rng.child("ext").bytes(16)
    for hel, extn in ((2, ext[:8]), (3, ext)):
        co = 0 if gmac else len(extn) // 4 + 1
        gb.crafted(f"IPv4/UDP, Hdr Ext Len {hel} without V: {len(extn)} opaque extension octets, crypt offset {co}",
                   ["ExtensionArea"], s, hdr=h16(s.secured[0], s.spi, s.iv, version=v, co=co, hdr_ext_len=hel),
                   body=extn + s.body, clear=len(extn) + len(s.body) if gmac else 4 * co, co=co)
    if not gmac:
        gb.crafted("IPv6/TCP, Hdr Ext Len 2 without V and crypt offset 0: the extension octets encrypted",
                   ["ExtensionArea"], s6, hdr=h16(s6.secured[0], s6.spi, s6.iv, version=v, co=0, hdr_ext_len=2),
                   body=ext[:8] + s6.body, clear=0, co=0)
    else:
        for co in (1, len(s.body) // 4):
            gb.crafted(f"GMAC with crypt offset {co} in the header (reserved; sealed over the whole payload)",
                       ["GmacCryptOffset"], s, hdr=h16(s.secured[0], s.spi, s.iv, version=v, co=co), body=s.body,
                       clear=len(s.body), co=co, result="acceptable", error="psp-gmac-crypt-offset",
                       plaintext=s.plain)
    _udp_checksum(gb, s, "IPv4/UDP")
    # invalid
    _header_mutations(gb, s, "IPv4/UDP")
    _body_mutations(gb, s, "IPv4/UDP")
    _body_mutations(gb, s6, "IPv6/TCP")
    _key_mistakes(gb, s, "IPv4/UDP")
    if v == 0:
        _ip_framing(gb, s, "IPv4/UDP")
        gb.invalid("IPv6 Hop-by-Hop header length 200 (runs past the packet)", ["IpFraming"], shbh,
                   put(shbh.wire, 41, bytes([200])), "ip-bad-extension-header")
    gb.finish()


def _transport_vc_group(fb: PspFileBuilder) -> None:
    v = fb.version
    gmac = psp_gmac(v)
    gb = fb.group("transport", True, "transport mode with a Virtualization Cookie")
    inner = fb.inner
    offsets = [0] if gmac else [0, 1, 2, 3, 4]
    bases = {}
    for co in offsets:
        for ipv in (4, 6):
            bases[(co, ipv)] = gb.valid(f"IPv{ipv}/UDP, VC, crypt offset {co}", ["CryptOffset"] if co <= 2 else [],
                                        inner.udp(ipv, inner.rng.int(4, 30)), co=co)
    gb.valid("IPv4/TCP, all-zero VC (what the reference tool sends)", [], inner.tcp(4, 20), co=0 if gmac else 3,
             vc=bytes(8))
    gb.valid("IPv6/UDP, VC, S and D set", [], inner.udp(6, 10), co=0 if gmac else 2, sample=True, drop=True)
    if not gmac:
        pkt = inner.udp(4, 0)
        gb.valid("IPv4/UDP with an empty payload, VC, crypt offset 4: VC and UDP header in clear, nothing encrypted",
                 ["CryptOffset"], pkt, co=4)
        pkt = inner.udp(4, 236)
        gb.valid("IPv4/UDP, VC + 244-octet body = 252 octets, crypt offset 63: nothing encrypted",
                 ["CryptOffset"], pkt, co=63)
    s = bases[(0 if gmac else 2, 4)]
    s0 = bases[(0, 6)]
    vcv = s.body[:8]
    extra = fb.rng.child("ext").bytes(8)
    co = 0 if gmac else 4
    gb.crafted(f"Hdr Ext Len 3: VC + 8 opaque extension octets, crypt offset {co}", ["ExtensionArea"], s,
               hdr=h16(s.secured[0], s.spi, s.iv, version=v, co=co, hdr_ext_len=3, virt=True),
               body=vcv + extra + s.body[8:], clear=16 + len(s.body) - 8 if gmac else 16, co=co)
    gb.invalid("VC octet 0 flipped" + (" (in clear)" if not gmac else ""), ["ModifiedAad"], s, s.eflip(16, 0x01),
               "authentication-failed")
    if not gmac:
        gb.invalid("IPv6: VC octet 7 flipped while encrypted (crypt offset 0)", ["ModifiedCiphertext"], s0,
                   s0.eflip(23, 0x01), "authentication-failed")
    gb.invalid("V bit cleared after sealing (the VC becomes opaque extension octets)", ["ModifiedAad"], s,
               s.eflip(3, 0x02), "authentication-failed")
    gb.invalid("Hdr Ext Len 1 with V set: no room for the VC", ["BadHdrExtLen"], s, put(s.wire, s.at + 1, b"\x01"),
               "psp-vc-without-room")
    _body_mutations(gb, s, "IPv4/UDP with VC")
    gb.finish()


def _tunnel_group(fb: PspFileBuilder, vc: bool) -> None:
    v = fb.version
    gmac = psp_gmac(v)
    gb = fb.group("tunnel", vc, "tunnel mode" + (" with a Virtualization Cookie" if vc else "")
                  + ": outer header copied from the inner one unless the comment says otherwise")
    inner = fb.inner
    d = 2 if vc else 0  # VC words
    bases = {}
    for ipv in (4, 6):
        offsets = [0] if gmac else sorted({0, d, d + (6 if ipv == 4 else 11)})
        for co in offsets:
            what = ("everything encrypted" if co == 0 else "VC in clear, inner packet encrypted" if co == d
                    else "inner IP header and ports in clear")
            bases[(ipv, co)] = gb.valid(f"IPv{ipv} in IPv{ipv}, UDP inner, crypt offset {co} ({what})",
                                        ["CryptOffset"] if co in (0, d) else [], inner.udp(ipv, inner.rng.int(4, 40)),
                                        co=co)
        gb.valid(f"IPv{ipv}/TCP inner in IPv{ipv}", [], inner.tcp(ipv, 24), co=0 if gmac else d + 1)
    for ipv in (4, 6):
        other = 10 - ipv
        src, dst = inner.addrs(other)
        th = ipv4_header(src, dst, 17, 0, ident=0) if other == 4 else ipv6_header(src, dst, 17, 0)
        gb.valid(f"IPv{ipv} inner in an IPv{other} outer header (a tunnel_header template)", ["MixedTunnel"],
                 inner.udp(ipv, 16), co=0 if gmac else d + 2, tunnel_header=th)
    if not gmac:
        pkt = inner.udp(4, 0)  # 28 octets
        gb.valid("IPv4/UDP inner with an empty payload, everything in clear: nothing encrypted", ["CryptOffset"], pkt,
                 co=d + 7)
        pkt = inner.udp(6, 0)  # 48 octets: the reference v6 `_empty` shape
        gb.valid("IPv6/UDP inner with an empty payload, everything in clear: nothing encrypted", ["CryptOffset"], pkt,
                 co=d + 12)
        pkt = inner.udp(6, 240 - 4 * d)  # 288 octets
        gb.valid("IPv6/UDP inner, crypt offset 63 (the maximum)", ["CryptOffset"], pkt, co=63)
    gb.valid("IPv4 inner, S set", [], inner.udp(4, 8), co=0 if gmac else d + 6, sample=True)
    s4, s6 = bases[(4, 0)], bases[(6, 0)]
    # The inner packet of the other version behind NH 4/41.  The reference decapsulator sets the Ethertype from
    # the inner version nibble and delivers these; psp.md §7 step 9 (the project's rule) drops them (psp-bad-mode).
    # The test's comment below predates docs/spec and is kept so the vector files stay byte for byte the same.
    vcv = s4.body[:d * 4]
    for s, nh, what in ((s6, 4, "IPv6 packet behind Next Header 4"), (s4, 41, "IPv4 packet behind Next Header 41")):
        gb.crafted(f"tunnel: {what} (sealed correctly); psp.md takes the version from the inner packet, the core "
                   "drops it", ["TunnelInnerMismatch"], s,
                   hdr=h16(nh, s.spi, s.iv, version=v, co=0, hdr_ext_len=2 if vc else 1, virt=vc), body=s.body,
                   clear=len(s.body) if gmac else 0, result="acceptable", error="psp-bad-mode", plaintext=s.plain)
    gb.crafted("tunnel: Next Header 4 and an empty inner packet (sealed correctly)", ["TunnelInnerMismatch"], s4,
               hdr=h16(4, s4.spi, s4.iv, version=v, co=0, hdr_ext_len=2 if vc else 1, virt=vc), body=vcv,
               clear=len(vcv) if gmac else 0, result="acceptable", error="psp-bad-mode", plaintext=b"")
    inner4 = s4.plain
    for what, bad in (("a 1-octet 'IPv4 packet'", inner4[:1]),
                      ("an inner IPv4 Total Length of 4", inner4[:2] + b"\x00\x04" + inner4[4:]),
                      ("an inner IPv4 IHL of 4", bytes([0x44]) + inner4[1:])):
        body = vcv + bad
        gb.crafted(f"tunnel: {what} behind Next Header 4 (sealed correctly)", ["TunnelInnerMalformed"], s4,
                   hdr=h16(4, s4.spi, s4.iv, version=v, co=0, hdr_ext_len=2 if vc else 1, virt=vc), body=body,
                   clear=len(body) if gmac else 0, result="invalid", error="psp-bad-inner-packet")
    _body_mutations(gb, s4, "IPv4 in IPv4")
    gb.finish()


def _nokey_group(fb: PspFileBuilder) -> None:
    gb = fb.group("transport", False, "receiver with master key 0 only")
    mks = (fb.mks[0], None)
    co = 0 if psp_gmac(fb.version) else 1
    gb.valid("SPI MSB 0: master key 0 present", [], fb.inner.udp(4, 12), spi=fb.spi(0), co=co, mks=mks)
    s = gb.valid("", [], fb.inner.udp(4, 12), spi=fb.spi(1), co=co, add=False)
    gb.invalid("SPI MSB 1 selects master key 1, which the receiver lacks", ["NoKey"], s, s.wire, "no-key")
    gb.g.tests[-1].inputs.pop("masterKey1", None)
    gb.finish()


def packet_file(seed: int, version: int) -> VectorFile:
    fb = PspFileBuilder(seed, version)
    _transport_group(fb)
    _transport_vc_group(fb)
    _tunnel_group(fb, False)
    _tunnel_group(fb, True)
    _nokey_group(fb)
    if version <= 1:
        _reference_groups(fb)
    if version == 0:
        _scapy_group(fb)
    header = [
        f"PSP (header version 0) packet vectors, crypto version {version} ({ALG[version]}).",
        f"Generated by `pypsp vectors generate --seed {seed}`; see vectors/README.md.",
        "inputs: key material, the sending SA's per-packet parameters and the wire octets; "
        "outputs: what a receiver delivers (plaintextPacket) or the core's reason for dropping it (error).",
    ]
    groups = [g for g in fb.groups]
    vf = assemble(fb.name, "PSP", PACKET_SCHEMA, header, NOTES, groups,
                  common_flags=["AssumedKdfLabel"] if version >= 2 else [])
    mark_self_computed(vf, NOTES["SelfComputed"], only_source="self")
    return vf


# --------------------------------------------------------------------------------------------------------
# KDF file
# --------------------------------------------------------------------------------------------------------

SPEC_KDF = [  # version, SPI, master key, derived key, source
    (0, 0x12345678, 0, "96c22dc799198090b74b70ae468e4e30", "spec"),
    (0, 0x9A345678, 1, "3946da2554eae46ad1ef77a64372edc4", "spec; scapy tests"),
    (1, 0x12345678, 0, "2b7d72074e42ca334487f2990e3f8c4037e436f38283449b76463e9b7fb2e3de", "spec"),
    (1, 0x9A345678, 1, "fa00f609df6020289a1c93d6027081a637ad45b24a5576b36e6f49dd43114d80", "scapy tests"),
]


def _kdf_test(comment: str, flags: List[str], mk: bytes, spi: int, version: int, out: bytes,
              result: str = "valid", label: Optional[int] = None) -> Test:
    inp: Dict[str, Any] = {"masterKey": mk.hex(), "spi": f"{spi:08x}", "version": version}
    if label is not None:
        inp["label"] = f"{label:08x}"
    if version >= 2 and label is None:
        flags = flags + ["AssumedKdfLabel"]
    return Test(comment, flags, inp, {"derivedKey": out.hex()}, result)


def _cmac_kdf(mk: bytes, blocks: Sequence[bytes]) -> bytes:
    """A KDF computed block by block, to express mistakes the core's KDF cannot make."""
    return b"".join(primitives.cmac_aes256(mk, b) for b in blocks)


def kdf_file(seed: int) -> VectorFile:
    rng = Rng(seed, "psp", "kdf")
    mks = {0: REF_MK0, 1: REF_MK1}
    spec = Group({"type": "PspKdfTest", "source": SOURCE_SPEC, "comment": "the specification's KDF vectors"}, pcap=False)
    for version, spi, mk, want, src in SPEC_KDF:
        spec.add(_kdf_test(f"version {version}, SPI {spi:08x}, master key {mk} ({src})", ["SpecKat", "KdfKat"],
                           mks[mk], spi, version, bytes.fromhex(want)))
    ref = Group({"type": "PspKdfTest", "source": SOURCE_REF, "comment": "keys of the reference configs "
                 "(SPI 1a345678 under master key 0, psp.md §5)"}, pcap=False)
    for version in (0, 1):
        ref.add(_kdf_test(f"version {version}, SPI 1a345678, master key 0", ["RefTool", "KdfKat"], REF_MK0,
                          0x1A345678, version, kdf(REF_MK0, 0x1A345678, version)))
    own = Group({"type": "PspKdfTest", "source": SOURCE_SELF, "comment": "every version, SPI edges, both master keys"},
                pcap=False)
    for version in PSP_VERSION_NUMBERS:
        for spi in (0x00000000, 0x00000001, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x12345678, 0x9A345678):
            mk = mks[spi >> 31]
            own.add(_kdf_test(f"version {version}, SPI {spi:08x} (master key {spi >> 31})", ["KdfKat"]
                              + (["SpiEdge"] if spi in (0, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF) else []),
                              mk, spi, version, kdf(mk, spi, version)))
        for i in range(3):
            mk = rng.child("mk", version, i).bytes(32)
            spi = int.from_bytes(rng.child("spi", version, i).bytes(4), "big")
            own.add(_kdf_test(f"version {version}, random master key and SPI", ["KdfKat"], mk, spi, version,
                              kdf(mk, spi, version)))
    for version in (2, 3):
        label = 0x50763000 | (version - 2) << 8
        own.add(_kdf_test(f"version {version} with the label overridden to {label:08x} (\"Pv{version - 2}\"): "
                          f"equals the version {version - 2} key", ["KdfKat"], REF_MK0, 0x12345678, version,
                          kdf(REF_MK0, 0x12345678, version, label=label), label=label))
    bad = Group({"type": "PspKdfTest", "source": SOURCE_SELF, "comment": "known KDF mistakes: must not match"},
                pcap=False)
    mk, spi = REF_MK1, 0x9A345678

    def blk(i: int, label: int, context: int, bits: int, fmt: str = ">IIII") -> bytes:
        return struct.pack(fmt, i, label, context, bits)

    mistakes = [
        (0, "label Pv1 used for version 0", [blk(1, 0x50763100, spi, 128)]),
        (1, "label Pv0 used for version 1", [blk(1, 0x50763000, spi, 256), blk(2, 0x50763000, spi, 256)]),
        (0, "counter starting at 0", [blk(0, 0x50763000, spi, 128)]),
        (1, "counter starting at 0", [blk(0, 0x50763100, spi, 256), blk(1, 0x50763100, spi, 256)]),
        (1, "L = 128 in both blocks of a 256-bit key", [blk(1, 0x50763100, spi, 128), blk(2, 0x50763100, spi, 128)]),
        (1, "the same counter (1) in both blocks", [blk(1, 0x50763100, spi, 256), blk(1, 0x50763100, spi, 256)]),
        (0, "SPI with its MSB cleared in the context", [blk(1, 0x50763000, spi & 0x7FFFFFFF, 128)]),
        (0, "SPI little-endian in the context", [blk(1, 0x50763000, int.from_bytes(spi.to_bytes(4, "big"), "little"), 128)]),
        (0, "L in bytes (16) instead of bits", [blk(1, 0x50763000, spi, 16)]),
        (0, "label and counter swapped", [blk(0x50763000, 1, spi, 128)]),
    ]
    for version, what, blocks in mistakes:
        bad.add(_kdf_test(f"version {version}, SPI {spi:08x}, master key 1: {what}", ["KdfMistake"], mk, spi,
                          version, _cmac_kdf(mk, blocks), result="invalid"))
    bad.add(_kdf_test(f"version 0, SPI {spi:08x}: derived from master key 0 although the SPI MSB is 1",
                      ["KdfMistake", "WrongKeySelection"], REF_MK0, spi, 0, kdf(REF_MK1, spi, 0), result="invalid"))
    header = ["PSP key derivation vectors (psp.md §5): SP 800-108 counter mode over AES-256-CMAC.",
              f"Generated by `pypsp vectors generate --seed {seed}`; see vectors/README.md.",
              "Invalid tests give the output of a known mistake: an implementation must not reproduce it."]
    vf = assemble("psp_kdf_test.json", "PSP-KDF", KDF_SCHEMA, header, NOTES, [spec, ref, own, bad])
    mark_self_computed(vf, NOTES["SelfComputed"], only_source="self")
    return vf


def generate(seed: int) -> List[VectorFile]:
    return [kdf_file(seed)] + [packet_file(seed, v) for v in PSP_VERSION_NUMBERS]


# --------------------------------------------------------------------------------------------------------
# checking against the core
# --------------------------------------------------------------------------------------------------------


def _b(x: Optional[str]) -> Optional[bytes]:
    return None if x is None else bytes.fromhex(x)


def check_packet_test(ck: Checker, group: dict, t: dict) -> None:
    import pypsp

    inp, out = t["inputs"], t["outputs"]
    mks = (_b(inp.get("masterKey0")), _b(inp.get("masterKey1")))
    spi = int(inp["spi"], 16)
    derived = _b(inp.get("derivedKey"))
    wire = bytes.fromhex(inp["ciphertextPacket"])
    dec = pypsp.Decryptor(master_keys=mks if any(mks) else None, keys={spi: derived} if derived else None,
                          versions=inp.get("acceptedVersions", PSP_VERSION_NUMBERS))
    problems: List[str] = []
    got: Optional[str] = None
    try:
        d = dec.decrypt(wire)
    except pypsp.PspError as e:
        got = e.code
    else:
        want = _b(out.get("plaintextPacket"))
        if want is not None and d.packet != want:
            problems.append("decrypted packet differs from plaintextPacket: " + first_diff(d.packet, want))
    if "icv" in out and out["icv"] != wire[-16:].hex():
        problems.append("outputs.icv is not the last 16 octets of ciphertextPacket")
    if t["result"] == "valid" and "DecryptOnly" not in t.get("flags", ()) and "plaintextPacket" in out:
        plain = bytes.fromhex(out["plaintextPacket"])
        u = l4_offset(wire)[0]
        kw: Dict[str, Any] = dict(spi=spi, version=group["version"], mode=group["mode"], crypt_offset=inp["cryptOffset"],
                                  vc=_b(inp.get("vcValue")) if group["vc"] else None, sample=inp["sample"],
                                  drop=inp["drop"], first_iv=int(inp["iv"], 16),
                                  udp_sport=struct.unpack(">H", wire[u : u + 2])[0])
        if group["mode"] == "tunnel":
            kw["tunnel_header"] = outer_template(wire)
        try:
            enc = pypsp.Encryptor(key=derived, **kw) if derived else pypsp.Encryptor(master_keys=mks, **kw)
            sent = enc.encrypt(plain)
        except pypsp.PspError as e:
            problems.append(f"sender refused the packet: {e.code}")
        else:
            if sent != wire:
                problems.append("sender output differs from ciphertextPacket: " + first_diff(sent, wire))
    ck.verdict(t, got, problems=problems)


def check_packet_doc(doc: dict, file: str, loose: bool = False) -> List[Outcome]:
    ck = Checker(file, loose)
    for g in doc["testGroups"]:
        for t in g["tests"]:
            with ck.guard(t):
                check_packet_test(ck, g, t)
    return ck.outcomes


def check_kdf_doc(doc: dict, file: str, loose: bool = False) -> List[Outcome]:
    def derive(_g: dict, inp: dict) -> bytes:
        return kdf(bytes.fromhex(inp["masterKey"]), int(inp["spi"], 16), inp["version"],
                   int(inp["label"], 16) if "label" in inp else None)

    return check_kat_doc(doc, file, loose, derive, "derivedKey", "a KDF mistake")


CHECKERS = {PACKET_SCHEMA: check_packet_doc, KDF_SCHEMA: check_kdf_doc}


#: This family, registered with pecore's vector tooling on import (and offered as an entry point).
FAMILY = register_family(Family("psp", generate, SCHEMAS, CHECKERS))


def register(sub: Any) -> None:
    """``pypsp vectors generate|check`` (called from pypsp.tools.cli.build_parser)."""
    _register(sub, FAMILY)
