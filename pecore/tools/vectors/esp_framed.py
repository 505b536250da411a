"""What the two ESP-framed families (ESP and EESP) share: the suite table as the generators use it (from the
core, :mod:`pecore.tools._tables`), outer headers, the sealed-packet surgery of the mutations, the UDP
encapsulation tests, the group and file builders and the notes whose words are the same for both."""
from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from pecore.tools._tables import SUITES
from pecore.tools.vectors.packets import (IPPROTO_UDP, Inner, fix_ip, flip, ipv4_header, ipv6_header, l4_offset,
                                          put)
from pecore.tools.vectors.rng import Rng

if TYPE_CHECKING:
    from pecore.tools.vectors.documents import Group, Test


def outer_header(rng: Rng, ipv: int, proto: int) -> bytes:
    """A tunnel's outer IPv4/IPv6 header (lengths 0: the framing fills them in) from TEST-NET-3 / 2001:db8."""
    r = rng.child("outer", ipv)
    if ipv == 4:
        return ipv4_header(f"203.0.113.{r.int(1, 254)}", f"203.0.113.{r.int(1, 254)}", proto, 0, ident=r.int(0, 0xFFFF))
    return ipv6_header(f"2001:db8:ffff::{r.int(1, 0xFFFF):x}", f"2001:db8:eeee::{r.int(1, 0xFFFF):x}", proto, 0)


def secured_offset(wire: bytes) -> int:
    """Where the ESP, EESP or PSP octets start in a wire packet: after the IP header chain, and the UDP header
    (PSP's, or UDP encapsulation's)."""
    off, proto, _ = l4_offset(wire)
    return off + 8 if proto == IPPROTO_UDP else off


class SealedPacket:
    """A sealed wire packet of any family, with the surgery its mutations make on the secured part (the ESP, EESP
    or PSP octets; IP and UDP lengths fixed up after a cut).  A family's subclass keeps the parts it sealed it
    from."""

    def __init__(self, test: "Test", wire: bytes, pkt: bytes) -> None:
        self.test, self.wire, self.pkt = test, wire, pkt

    @property
    def at(self) -> int:
        return secured_offset(self.wire)

    @property
    def secured(self) -> bytes:
        """The ESP/EESP/PSP octets (SPI, Base Header or PSP header to ICV)."""
        return self.wire[self.at :]

    def eflip(self, offset: int, mask: int = 0x01) -> bytes:
        """The wire with a bit of the secured part flipped (a negative offset counts from its end)."""
        off = offset if offset >= 0 else len(self.secured) + offset
        return flip(self.wire, self.at + off, mask)

    def eput(self, offset: int, value: bytes) -> bytes:
        return put(self.wire, self.at + offset, value)

    def with_secured(self, secured: bytes) -> bytes:
        in_udp = l4_offset(self.wire)[1] == IPPROTO_UDP
        return fix_ip(self.wire[: self.at] + secured, udp_at=self.at - 8 if in_udp else None)


def udp_encap_mutations(gb: Any, base: SealedPacket, not_ours: str, not_ours_error: str) -> None:
    """The UDP-encapsulation framing tests both ESP-framed families make on a packet in UDP 4500 (RFC 3948):
    another port, a UDP length past the datagram, a NAT keepalive and an IKE message (the non-ESP marker) in
    its place.  ``not_ours``/``not_ours_error``: the family's flag and status for a packet that is not its own."""
    w, at = base.wire, base.at - 8
    gb.invalid("UDP destination port 4501", [not_ours], base, put(w, at + 2, struct.pack(">H", 4501)), not_ours_error)
    gb.invalid("UDP length one more than the datagram", ["IpFraming"], base,
               put(w, at + 4, struct.pack(">H", len(w) - at + 1)), "udp-bad-length")
    gb.invalid("a NAT keepalive (one octet 0xff)", [not_ours], base, base.with_secured(b"\xff"), "nat-keepalive")
    gb.invalid("an IKE message (non-ESP marker: four zero octets)", [not_ours], base,
               base.with_secured(bytes(4) + base.secured[:24]), "ike-non-esp-marker")


def udp_checksum_v6_vectors(gb: Any, s6: SealedPacket) -> None:
    """The receiver's checksum rules on a packet in UDP 4500 over IPv6 (eesp.md D17), for both ESP-framed
    families: checksum 0 (RFC 8200 §8.1, outside RFC 6936's zero-checksum mode) and a wrong one."""
    w, at = s6.wire, s6.at - 8
    gb.invalid("IPv6: UDP checksum 0 (RFC 8200 §8.1: discarded outside RFC 6936's zero-checksum mode)",
               ["UdpEncap", "UdpChecksum"], s6, put(w, at + 6, b"\0\0"), "udp-zero-checksum")
    gb.invalid("IPv6: a wrong non-zero UDP checksum", ["UdpEncap", "UdpChecksum"], s6,
               put(w, at + 6, struct.pack(">H", struct.unpack(">H", w[at + 6 : at + 8])[0] ^ 0x0101)),
               "udp-bad-checksum")


def delivered(pkt: bytes, icv: bytes, next_header: int, pad_length: int) -> Dict[str, Any]:
    """The outputs of a valid ESP/EESP test: what the receiver delivers, and the trailer it read."""
    return {"plaintextPacket": pkt.hex(), "icv": icv.hex(), "nextHeader": next_header, "padLength": pad_length}


def dropped(error: Optional[str], icv_valid: Optional[bool] = None,
            plaintext: Optional[bytes] = None) -> Dict[str, Any]:
    """The outputs of a rejected test: the reason, whether the ICV verified first, and (acceptable tests) what a
    receiver that accepts it delivers."""
    out: Dict[str, Any] = {"error": error}
    if icv_valid is not None:
        out["icvValid"] = icv_valid
    if plaintext is not None:
        out["plaintextPacket"] = plaintext.hex()
    return out


def kept_flags(base: "Test", keep: Sequence[str], flags: Sequence[str]) -> List[str]:
    """A derived test's flags: those of its base that describe the SA or the framing (``keep``), then its own."""
    return list(dict.fromkeys([f for f in base.flags if f in keep] + list(flags)))


class SuiteGroupBuilder:
    """One group of a suite file of an ESP-framed family while it is built: its suite, key size, mode,
    encapsulation and RNG (a family's subclass adds its SA and packets)."""

    #: the outer header's IP protocol in tunnel mode
    ip_protocol = 0

    def __init__(self, fb: "SuiteFileBuilder", group: "Group", key_bits: int) -> None:
        self.fb, self.g = fb, group
        self.suite = SUITES[group.fields["suite"]]
        self.key_bits = key_bits
        self.mode, self.udp = group.fields["mode"], group.fields["udpEncap"]
        self.rng = fb.rng.child("group", len(fb.groups))

    def outer(self, ipv: int) -> bytes:
        return outer_header(self.rng, ipv, self.ip_protocol)


class SuiteFileBuilder:
    """One ``<family>_<suite>_test.json`` of an ESP-framed family: its suite, its RNG, its cleartext packets and
    its groups."""

    def __init__(self, family: str, seed: int, suite: str) -> None:
        self.suite = SUITES[suite]
        self.name = f"{family}_{suite}_test.json"
        self.rng = Rng(seed, family, suite)
        self.inner = Inner(self.rng.child("inner"))
        self.groups: List["Group"] = []

    def key_bits(self, asked: int) -> int:
        """The key size of a group that asks for ``asked`` bits (ChaCha20 has only 256-bit keys)."""
        return asked if asked in self.suite.key_sizes else self.suite.key_sizes[-1]

    def suite_fields(self, key_bits: int) -> Dict[str, Any]:
        su = self.suite
        return {"suite": su.name, "encrId": su.encr_id, "keySize": key_bits, "ivSize": 8 * su.iv,
                "tagSize": 8 * su.icv}


#: Notes whose words are the same for the ESP-framed families (PSP shares ModifiedIcv); a family's NOTES take
#: them from here.
SHARED_NOTES: Dict[str, Dict[str, str]] = {
    "MixedTunnel": {"bugType": "EDGE_CASE", "description": "Tunnel mode with inner and outer packets of different IP "
                    "versions."},
    "ModifiedIcv": {"bugType": "AUTH_BYPASS", "description": "An ICV bit flipped."},
    "ModifiedCiphertext": {"bugType": "AUTH_BYPASS", "description": "An encrypted octet (for AES-GMAC a payload "
                           "octet) flipped."},
    "NoSa": {"bugType": "MISSING_STEP", "description": "No SA for the SPI."},
    "OrderDependent": {"bugType": "FUNCTIONALITY", "description": "In a stateful group: one receiver processes the "
                       "tests in tcId order, so the verdict depends on the tests before it."},
    "IpFraming": {"bugType": "MODIFIED_PARAMETER", "description": "Broken outer IP/UDP framing, or a fragment."},
}


def shared_notes(*names: str) -> Dict[str, Dict[str, str]]:
    return {n: SHARED_NOTES[n] for n in names}
