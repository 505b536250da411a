"""Independent pure-Python model of IPsec ESP (RFC 4303) with the combined-mode AEAD suites, for the tests.

A second implementation written from the RFCs alone: RFC 4303 (ESP, Appendix A2.2 for the ESN inference),
RFC 4106 (AES-GCM), RFC 4309 (AES-CCM), RFC 4543 (AES-GMAC, with draft-mcgrew-gcm-test-01's reading that the
IV is authenticated), RFC 7634 (ChaCha20-Poly1305), RFC 8750 (implicit IV) and RFC 3948 (UDP encapsulation).
It shares no code with the C core or with pecore: only the standard library, pyca/cryptography and what the
three models share (tests/model_common.py: the error type, the IP checksum). It favours
being obviously right over being fast. tests/esp/test_esp_model.py anchors it on published vectors.

One ESP packet, as this model names its parts::

    SPI(4) | Seq low(4) | IV(8, or 0 with RFC 8750) | payload | padding | Pad Length(1) | Next Header(1) | ICV
                                                      \\____________ "body": encrypted (GMAC: in clear) ______/

    nonce = salt || IV, or salt || 64-bit sequence number (implicit IV); salt = the last 4 (CCM: 3) octets
    AAD   = SPI || Seq low, or with ESN SPI || Seq high || Seq low; GMAC: AAD || IV || body, nothing encrypted

Where the RFCs leave room this model takes the readings the project documents in docs/guide-esp.md (a
receiver under test may choose otherwise; the vector files flag those tests `acceptable`):
- default padding 1, 2, 3, ... up to a 4-octet boundary of body; on receive the padding octets are checked
  (RFC 4303 §2.4 "SHOULD"): esp-bad-padding, after the ICV;
- ESN inference exactly per Appendix A2.2; in Case B with Seq high 0 there is no subspace below: high half 0;
- the replay window covers [top - W + 1, top] and moves only after the ICV verified (RFC 4303 §3.4.3); W is
  rounded up to a multiple of 64 (the project's windows are whole words);
- tunnel mode delivers one whole IPv4/IPv6 packet whose version matches Next Header 4/41;
- Next Header 59 is a dummy packet (RFC 4303 §2.6): authenticated, then discarded;
- on UDP 4500 (RFC 3948 §2.2) one 0xff octet is a NAT keepalive, four zero octets the non-ESP marker, and (for
  a host that also runs EESP, the project's default) a first octet with its top bit set is EESP, not ESP.

Every failure raises EspModelError whose `code` is the core's status name for the same reason.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305

from model_common import ModelError, inet_checksum, udp_checksum_verdict, udp_encap_header

UDP_ENCAP_PORT = 4500
IPPROTO_ESP = 50
IPPROTO_UDP = 17
IPPROTO_IPV4, IPPROTO_IPV6 = 4, 41
NH_NO_NEXT = 59
IPV6_HBH, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_DSTOPTS = 0, 43, 44, 60
IPV6_EXT = (IPV6_HBH, IPV6_ROUTING, IPV6_FRAGMENT, IPV6_DSTOPTS)


class EspModelError(ModelError):
    """`code`: the reason (the core's status name); `icv_valid`: set when the drop came after the ICV check."""


@dataclass(frozen=True)
class Suite:
    encr_id: int
    kind: str  # gcm, ccm, gmac, chacha
    icv_len: int
    iiv: bool

    @property
    def salt_len(self) -> int:
        return 3 if self.kind == "ccm" else 4  # RFC 4309 §7.1: 3; RFC 4106 §8.1, 4543 §3.2, 7634 §2: 4

    @property
    def iv_len(self) -> int:
        return 0 if self.iiv else 8


SUITES = {s.encr_id: s for s in (
    Suite(14, "ccm", 8, False), Suite(15, "ccm", 12, False), Suite(16, "ccm", 16, False),
    Suite(18, "gcm", 8, False), Suite(19, "gcm", 12, False), Suite(20, "gcm", 16, False),
    Suite(21, "gmac", 16, False), Suite(28, "chacha", 16, False),
    Suite(29, "ccm", 8, True), Suite(30, "gcm", 16, True), Suite(31, "chacha", 16, True),
)}


@dataclass
class SA:
    """One direction of an ESP SA.  `keymat` = key || salt."""

    spi: int
    encr_id: int
    keymat: bytes
    mode: str = "tunnel"
    esn: bool = False
    anti_replay: bool = True
    replay_window: int = 1024
    replay_top: int = 0  # receiver resuming an SA: it and every number below it count as already accepted
    udp_encap: bool = False
    # receiver state
    top: int = field(default=0, init=False)
    accepted: set = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.suite = SUITES[self.encr_id]
        n = len(self.keymat) - self.suite.salt_len
        ok = (32,) if self.suite.kind == "chacha" else (16, 24, 32)
        if n not in ok:
            raise EspModelError("bad-key-length", f"{len(self.keymat)} octets of KEYMAT")
        self.key, self.salt = self.keymat[:n], self.keymat[n:]
        self.top = self.replay_top
        # The window W a receiver keeps: the project's windows are whole 64-bit words (core/include/pe/replay.h
        # rounds the size up), and that W is also the one the ESN inference uses; without anti-replay there is
        # no bitmap and W is the number configured.
        self.window = -(-self.replay_window // 64) * 64 if self.anti_replay else self.replay_window


# ----------------------------------------------------------------------------------------------- AEAD


def _nonce(sa: SA, iv_field: bytes, seq: int) -> bytes:
    return sa.salt + (struct.pack(">Q", seq) if sa.suite.iiv else iv_field)  # RFC 8750 §3 / RFC 4106 §4


def _aad(sa: SA, spi: int, seq: int) -> bytes:
    if sa.esn:  # RFC 4106 §5, RFC 4309 §5, RFC 7634 §2.1: SPI, then the high half, then the low half
        return struct.pack(">III", spi, seq >> 32, seq & 0xFFFFFFFF)
    return struct.pack(">II", spi, seq & 0xFFFFFFFF)


def _seal(sa: SA, nonce: bytes, aad: bytes, pt: bytes) -> tuple[bytes, bytes]:
    s = sa.suite
    if s.kind in ("gcm", "gmac"):
        out = AESGCM(sa.key).encrypt(nonce, pt, aad)
        return out[: len(pt)], out[len(pt) : len(pt) + s.icv_len]  # RFC 4106 §6: the tag's first octets
    if s.kind == "ccm":
        out = AESCCM(sa.key, tag_length=s.icv_len).encrypt(nonce, pt, aad)
    else:
        out = ChaCha20Poly1305(sa.key).encrypt(nonce, pt, aad)
    return out[: len(pt)], out[len(pt) :]


def _open(sa: SA, nonce: bytes, aad: bytes, ct: bytes, icv: bytes) -> bytes | None:
    s = sa.suite
    try:
        if s.kind in ("gcm", "gmac"):
            d = Cipher(algorithms.AES(sa.key), modes.GCM(nonce, icv, min_tag_length=len(icv))).decryptor()
            d.authenticate_additional_data(aad)
            return d.update(ct) + d.finalize()
        if s.kind == "ccm":
            return AESCCM(sa.key, tag_length=s.icv_len).decrypt(nonce, ct + icv, aad)
        return ChaCha20Poly1305(sa.key).decrypt(nonce, ct + icv, aad)
    except InvalidTag:
        return None


# ----------------------------------------------------------------------------------------------- ESP octets


def default_padding(payload_len: int) -> bytes:
    """RFC 4303 §2.4: payload || padding || Pad Length || Next Header ends on a 4-octet boundary; octets 1, 2, 3."""
    n = -(payload_len + 2) % 4
    return bytes(range(1, n + 1))


def seal(sa: SA, payload: bytes, next_header: int, seq: int, *, iv: bytes | None = None,
         padding: bytes | None = None) -> bytes:
    """The ESP octets (SPI to ICV) of one packet.  `iv` defaults to the 64-bit sequence number (explicit-IV
    suites); `padding` to the default padding."""
    s = sa.suite
    if padding is None:
        padding = default_padding(len(payload))
    if s.iiv:
        iv_field = b""
    else:
        iv_field = struct.pack(">Q", seq) if iv is None else iv
    body = payload + padding + bytes([len(padding), next_header])
    head = struct.pack(">II", sa.spi, seq & 0xFFFFFFFF) + iv_field
    nonce = _nonce(sa, iv_field, seq)
    aad = _aad(sa, sa.spi, seq)
    if s.kind == "gmac":  # RFC 4543 §3.3: everything authenticated, nothing encrypted
        _ct, icv = _seal(sa, nonce, aad + iv_field + body, b"")
        return head + body + icv
    ct, icv = _seal(sa, nonce, aad, body)
    return head + ct + icv


def infer_seq(top: int, window: int, seq_low: int) -> int:
    """RFC 4303 Appendix A2.2: the 64-bit number a received low half stands for."""
    tl, th = top & 0xFFFFFFFF, top >> 32
    bl = (tl - window + 1) % 2**32
    if tl >= window - 1:  # Case A
        sh = th if seq_low >= bl else th + 1
    else:  # Case B (with no subspace below subspace 0)
        sh = th - 1 if seq_low >= bl and th > 0 else th
    return (sh << 32) | seq_low


def replay_verdict(sa: SA, seq: int) -> str | None:
    if seq > sa.top:
        return None
    if seq <= sa.top - sa.window:
        return "replay-too-old"
    return "replay-duplicate" if seq in sa.accepted or seq <= sa.replay_top else None


@dataclass
class Opened:
    spi: int
    seq: int
    payload: bytes
    next_header: int
    pad_len: int
    tfc_pad_len: int = 0


def open(sas, esp: bytes, *, replay: bool = True) -> Opened:  # noqa: A001 - the RFC's word
    """RFC 4303 §3.4 on the ESP octets; `sas` maps SPI -> SA (state kept in the SA)."""
    if len(esp) < 8:
        raise EspModelError("esp-truncated", f"{len(esp)} octets")
    spi, seq_low = struct.unpack(">II", esp[:8])
    sa = sas.get(spi)
    if sa is None:
        raise EspModelError("esp-no-sa", f"SPI {spi:#010x}")
    s = sa.suite
    if len(esp) < 8 + s.iv_len + 2 + s.icv_len:
        raise EspModelError("esp-truncated", f"{len(esp)} octets")
    seq = infer_seq(sa.top, sa.window, seq_low) if sa.esn else seq_low
    if seq == 0:
        raise EspModelError("esp-sequence-zero")
    check = replay and sa.anti_replay
    if check:
        v = replay_verdict(sa, seq)
        if v:
            raise EspModelError(v, f"{seq:#x}")
    iv_field = esp[8 : 8 + s.iv_len]
    region, icv = esp[8 + s.iv_len : len(esp) - s.icv_len], esp[len(esp) - s.icv_len :]
    nonce, aad = _nonce(sa, iv_field, seq), _aad(sa, spi, seq)
    if s.kind == "gmac":
        body = region if _open(sa, nonce, aad + iv_field + region, b"", icv) is not None else None
    else:
        body = _open(sa, nonce, aad, region, icv)
    if body is None:
        raise EspModelError("authentication-failed", icv_valid=False)
    if check:  # RFC 4303 §3.4.3: the window moves only for authenticated packets
        sa.accepted.add(seq)
    if replay and seq > sa.top:
        sa.top = seq
    pad_len, nh = body[-2], body[-1]
    if pad_len + 2 > len(body):
        raise EspModelError("esp-bad-pad-length", f"{pad_len}", icv_valid=True)
    payload, padding = body[: len(body) - 2 - pad_len], body[len(body) - 2 - pad_len : -2]
    if padding != bytes(range(1, pad_len + 1)):
        raise EspModelError("esp-bad-padding", padding.hex(), icv_valid=True)
    if nh == NH_NO_NEXT:
        raise EspModelError("esp-dummy-packet", icv_valid=True)
    if sa.mode == "tunnel":
        if nh not in (IPPROTO_IPV4, IPPROTO_IPV6):
            raise EspModelError("esp-bad-next-header", f"{nh}", icv_valid=True)
        # RFC 4303 §2.7: TFC padding may follow the tunnelled packet; its own length says where it ends
        own = _own_length(payload, 4 if nh == IPPROTO_IPV4 else 6)
        if own is None:
            raise EspModelError("esp-bad-inner-packet", icv_valid=True)
        return Opened(spi, seq, payload[:own], nh, pad_len, len(payload) - own)
    return Opened(spi, seq, payload, nh, pad_len)


# ----------------------------------------------------------------------------------------------- IP framing



def _own_length(pkt: bytes, version: int) -> int | None:
    """The length an IP packet's header gives it (RFC 791 Total Length, RFC 8200 40 + Payload Length), if the
    header is whole and that length fits in pkt; else None."""
    if not pkt or pkt[0] >> 4 != version:
        return None
    if version == 4:
        if len(pkt) < 20 or (pkt[0] & 0xF) * 4 < 20:
            return None
        own = struct.unpack(">H", pkt[2:4])[0]
        return own if (pkt[0] & 0xF) * 4 <= own <= len(pkt) else None
    if len(pkt) < 40:
        return None
    own = 40 + struct.unpack(">H", pkt[4:6])[0]
    return own if own <= len(pkt) else None


def _whole_ip(pkt: bytes, version: int) -> bool:
    if not pkt or pkt[0] >> 4 != version:
        return False
    if version == 4:
        ihl = (pkt[0] & 0xF) * 4
        return len(pkt) >= 20 and ihl >= 20 and len(pkt) >= ihl and struct.unpack(">H", pkt[2:4])[0] == len(pkt)
    return len(pkt) >= 40 and 40 + struct.unpack(">H", pkt[4:6])[0] == len(pkt)


def _with_length(head: bytearray, total: int) -> bytes:
    if head[0] >> 4 == 4:
        ihl = (head[0] & 0xF) * 4
        head[2:4] = struct.pack(">H", total)
        head[10:12] = b"\0\0"
        head[10:12] = struct.pack(">H", inet_checksum(bytes(head[:ihl])))
    else:
        head[4:6] = struct.pack(">H", total - 40)
    return bytes(head)


def _ipv6_chain(pkt: bytes):
    """(type, offset, length) of the IPv6 extension headers 0/43/44/60 in front of the upper layer."""
    out, nh, off = [], pkt[6], 40
    while nh in IPV6_EXT:
        if off + 8 > len(pkt):
            raise EspModelError("ip-bad-extension-header")
        n = 8 if nh == IPV6_FRAGMENT else (pkt[off + 1] + 1) * 8
        out.append((nh, off, n))
        nh, off = pkt[off], off + n
    return out


def transport_split(pkt: bytes) -> tuple[int, int]:
    """(octets kept in front of ESP, offset of the protocol octet that will say 50).

    RFC 4303 §3.1.1: ESP follows IPv4's header, or IPv6's Hop-by-Hop, Routing and Fragment headers; a
    Destination Options header may go either side: in front only when a Routing header follows it (the
    placement of eesp.md D14 that the core uses too)."""
    if pkt[0] >> 4 == 4:
        return (pkt[0] & 0xF) * 4, 9
    chain = _ipv6_chain(pkt)
    keep, field_at = 40, 6
    for i, (t, off, n) in enumerate(chain):
        if t in (IPV6_HBH, IPV6_ROUTING, IPV6_FRAGMENT) or \
                (t == IPV6_DSTOPTS and any(c[0] == IPV6_ROUTING for c in chain[i + 1 :])):
            keep, field_at = off + n, off
        else:
            break
    return keep, field_at


def encap(sa: SA, pkt: bytes, seq: int, *, iv: bytes | None = None, outer: bytes | None = None,
          udp_sport: int = UDP_ENCAP_PORT, udp_dport: int = UDP_ENCAP_PORT, padding: bytes | None = None,
          tfc: bytes = b"") -> bytes:
    """One whole IP packet -> the wire.  Tunnel mode needs the outer header (IPv4 of 20 octets or IPv6 of 40);
    `tfc`: TFC padding after the inner packet (RFC 4303 §2.7, tunnel mode)."""
    if sa.mode == "tunnel":
        head, field_at = bytearray(outer), 9 if outer[0] >> 4 == 4 else 6
        payload, nh = pkt + tfc, IPPROTO_IPV4 if pkt[0] >> 4 == 4 else IPPROTO_IPV6
    else:
        keep, field_at = transport_split(pkt)
        head, payload, nh = bytearray(pkt[:keep]), pkt[keep:], pkt[field_at]
    esp = seal(sa, payload, nh, seq, iv=iv, padding=padding)
    if sa.udp_encap:  # RFC 3948 §2.1: checksum 0 over IPv4; RFC 8200 §8.1: computed over IPv6
        esp = udp_encap_header(head, udp_sport, udp_dport, esp) + esp
        head[field_at] = IPPROTO_UDP
    else:
        head[field_at] = IPPROTO_ESP
    return _with_length(head, len(head) + len(esp)) + esp


def classify_udp(payload: bytes, eesp_on_port: bool = True, held_spis=()) -> str | None:  # type: ignore[no-untyped-def]
    """RFC 3948 §2.2 and eesp.md §14 on UDP 4500: None for ESP, else the reason this is not ESP.

    An SPI in ``held_spis`` (the receiver's SAs) is ESP; so is a first octet other than 0x80 (EESP's
    ESP-compatibility bit, Version 0 and R 0: the only Base Header of a supported version)."""
    if payload == b"\xff":
        return "nat-keepalive"
    if len(payload) >= 4 and payload[:4] == bytes(4):
        return "ike-non-esp-marker"
    if len(payload) >= 4 and struct.unpack(">I", payload[:4])[0] in held_spis:
        return None
    if eesp_on_port and payload[:1] == b"\x80":
        return "eesp-in-udp"
    return None


def _outer(wire: bytes) -> tuple[bytes, int, int, bool]:
    """(the datagram, offset of what follows the IP header chain, offset of the octet naming it, fragment?).

    RFC 791 / RFC 8200: the length field ends the datagram (octets after it are link-layer padding); IPv6
    extension headers (RFC 7045's list) are walked up to the upper layer, or to a fragment header of a real
    fragment (offset or M set; an atomic fragment, RFC 6946, is a whole packet)."""
    if not wire:
        raise EspModelError("ip-truncated")
    if wire[0] >> 4 == 4:
        if len(wire) < 20:
            raise EspModelError("ip-truncated")
        ihl, total = (wire[0] & 0xF) * 4, struct.unpack(">H", wire[2:4])[0]
        if ihl < 20:
            raise EspModelError("ip-bad-header-length")
        if ihl > len(wire):
            raise EspModelError("ip-truncated")
        if not ihl <= total <= len(wire):
            raise EspModelError("ip-bad-length")
        return wire[:total], ihl, 9, bool(struct.unpack(">H", wire[6:8])[0] & 0x3FFF)
    if wire[0] >> 4 != 6:
        raise EspModelError("ip-bad-version")
    if len(wire) < 40:
        raise EspModelError("ip-truncated")
    total = 40 + struct.unpack(">H", wire[4:6])[0]
    if total > len(wire):
        raise EspModelError("ip-bad-length")
    pkt, nh, at, field_at = wire[:total], wire[6], 40, 6
    while nh in (0, 43, 44, 60, 135, 139, 140):
        if at + 8 > total:
            raise EspModelError("ip-bad-extension-header")
        n = 8 if nh == IPV6_FRAGMENT else (pkt[at + 1] + 1) * 8
        if at + n > total:
            raise EspModelError("ip-bad-extension-header")
        real_fragment = nh == IPV6_FRAGMENT and struct.unpack(">H", pkt[at + 2 : at + 4])[0] & 0xFFF9
        nh, field_at, at = pkt[at], at, at + n
        if real_fragment:
            return pkt, at, field_at, True
    return pkt, at, field_at, False


def decap(sas, wire: bytes, *, replay: bool = True, udp_port: int = UDP_ENCAP_PORT, check_udp_checksum: bool = True,
          zero_ok_v6: bool = False) -> tuple[Opened, bytes]:
    """One IP packet from the wire -> (Opened, the delivered packet).  `check_udp_checksum` as an endpoint
    (eesp.md D17); off for a reader of captures."""
    wire, at, field_at, fragment = _outer(wire)
    proto, rest = wire[field_at], wire[at:]
    if proto == IPPROTO_ESP:
        if fragment:
            raise EspModelError("ip-fragment")
        esp = rest
    elif proto == IPPROTO_UDP and len(rest) >= 8 and struct.unpack(">H", rest[2:4])[0] == udp_port:
        if fragment:  # only a first fragment shows the port; a later one's "header" is data
            first = struct.unpack(">H", wire[6:8])[0] & 0x1FFF == 0 if wire[0] >> 4 == 4 else \
                struct.unpack(">H", wire[field_at + 2 : field_at + 4])[0] & 0xFFF8 == 0
            raise EspModelError("ip-fragment" if first else "not-esp")
        if struct.unpack(">H", rest[4:6])[0] != len(rest):
            raise EspModelError("udp-bad-length")
        why = udp_checksum_verdict(wire, at, zero_ok_v6) if check_udp_checksum else None
        if why:
            raise EspModelError(why)
        esp = rest[8:]
        why = classify_udp(esp, held_spis=sas)
        if why:
            raise EspModelError(why)
    else:
        raise EspModelError("not-esp", f"protocol {proto}")
    opened = open(sas, esp, replay=replay)
    if sas[opened.spi].mode == "tunnel":
        return opened, opened.payload
    head = bytearray(wire[:at])
    head[field_at] = opened.next_header  # the UDP header, if any, goes with ESP
    return opened, _with_length(head, len(head) + len(opened.payload)) + opened.payload
