"""hypothesis strategies for the EESP property tests (model self-tests now, core-vs-model later).

Everything here draws plain values (dicts of keyword arguments, bytes) so the same draws can drive the
model (`eesp_model`) and the core's Python API:

- `sa_configs()`           keyword arguments for `eesp_model.SA(**cfg)` (suite, key bits, keys or SSKDF + root,
                           Sub SA limit, SN on/off, mode, format, AAD variant, alignment, Crypt Offset maximum,
                           strictness, IP protocol number, UDP encapsulation, private option types)
- `session_ids(cfg)`       a Session ID valid for that SA
- `caller_options(...)`    Pad1 / PadN / unknown TLVs as a list of (type, data)
- `outer_templates(ipv)`   an outer IPv4 header (with options) or IPv6 header chain for tunnel mode
- `ipv4_packets()`, `ipv6_packets()`, `ip_packets()`  inner packets (TCP / UDP / other, IPv6 extension headers)
- `encap_params(cfg, pkt)` the per-packet arguments of `eesp_model.encap` valid for that SA and packet
- `seal_params(cfg, payload_len)`  the per-packet arguments of `eesp_model.seal`
- `sa_and_packet()`        all of it at once: (cfg, inner packet, encap params)
"""

from __future__ import annotations

import struct

from hypothesis import assume
from hypothesis import strategies as st

import eesp_model as m

ALL_SUITES = sorted(m.SUITES)
EXT_HEADERS = (0, 43, 44, 60)
# Inner L4 protocols for the "other" case: not TCP/UDP, not an IPv6 extension header the model walks, not
# 4/41, not 59 (a dummy packet is discarded by the receiver) and not the IPv6 "maybe extension" types.
OTHER_PROTOCOLS = [p for p in range(256) if p not in (0, 4, 6, 17, 41, 43, 44, 59, 60, 135, 139, 140)]
# Option types the SA treats as unknown (3-223 unassigned, 224-255 private use).
UNKNOWN_OPTION_TYPES = st.integers(3, 255)


# --------------------------------------------------------------------------------------------------------
# SA configuration
# --------------------------------------------------------------------------------------------------------


@st.composite
def sa_configs(draw, modes=("tunnel", "transport"), suites=ALL_SUITES, sskdf=None, udp_encap=None,
               formats=(None, "full", "optimized")):
    """Keyword arguments for eesp_model.SA. Only consistent combinations (the SA constructor accepts them)."""
    encr_id = draw(st.sampled_from(suites))
    s = m.SUITES[encr_id]
    key_bits = draw(st.sampled_from(s.key_bits))
    mode = draw(st.sampled_from(modes))
    # a forced optimized format only makes sense when the payload is an IP packet (tunnel mode)
    fmt = draw(st.sampled_from([f for f in formats if f != "optimized" or mode == "tunnel"]))
    seq = True if s.iiv else draw(st.booleans())
    aad = "draft" if s.kind == "gmac" else draw(st.sampled_from(["draft", "linux-xfrm"]))
    cfg = dict(
        spi=draw(st.integers(0, 0xFFFFFFFF)),
        encr_id=encr_id,
        key_bits=key_bits,
        seq=seq,
        mode=mode,
        format=fmt,
        aad=aad,
        align_options=draw(st.booleans()),
        max_crypt_offset=draw(st.none() | st.integers(0, 63) | st.just(255)),
        strict=draw(st.booleans()),
        ip_proto=draw(st.sampled_from([49, 49, 49, 253, 254])),
        udp_encap=draw(st.booleans()) if udp_encap is None else udp_encap,
        known_option_types=frozenset(draw(st.lists(st.integers(224, 255), max_size=2))),
    )
    use_sskdf = draw(st.booleans()) if sskdf is None else sskdf
    keymat_len = key_bits // 8 + s.salt_len
    if use_sskdf:
        kdf = draw(st.sampled_from([1, 2, 3]))
        cfg["sskdf"] = kdf
        cfg["root_key"] = draw(st.binary(min_size=m.sskdf_root_len(kdf), max_size=m.sskdf_root_len(kdf)))
        cfg["max_sub_sa_id"] = draw(st.none() | st.integers(0, 7) | st.just(0xFFFF))
    else:
        cfg["keymat"] = draw(st.binary(min_size=keymat_len, max_size=keymat_len))
    return cfg


@st.composite
def session_ids(draw, cfg):
    """A Session ID inside the SA's range (0 without SSKDF, 0..Max with an announcement, any 16-bit else)."""
    if not cfg.get("sskdf"):
        return 0
    top = 0xFFFF if cfg.get("max_sub_sa_id") is None else cfg["max_sub_sa_id"]
    return draw(st.integers(0, min(top, 3)) | st.integers(0, top))


def packet_format(cfg, crypt_offset) -> str:
    """D2 for a strategy-level cfg (same rule as eesp_model.SA.packet_format)."""
    if cfg.get("format"):
        return cfg["format"]
    if crypt_offset is not None:
        return "full"
    return "optimized" if cfg.get("mode", "tunnel") == "tunnel" else "full"


# --------------------------------------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------------------------------------


@st.composite
def caller_options(draw, known_types=(), max_options=3, max_data=12):
    """0..max_options TLVs: Pad1, PadN, unknown types (3..255) and registered private types."""
    kinds = ["pad1", "padn", "unknown"] + (["known"] if known_types else [])
    out = []
    for kind in draw(st.lists(st.sampled_from(kinds), max_size=max_options)):
        if kind == "pad1":
            out.append(m.pad1())
        elif kind == "padn":
            out.append(m.padn(draw(st.integers(2, 2 + max_data))))
        else:
            t = draw(st.sampled_from(sorted(known_types))) if kind == "known" else \
                draw(UNKNOWN_OPTION_TYPES.filter(lambda x: x not in known_types))
            out.append((t, draw(st.binary(max_size=max_data))))
    return out


def options_len(options) -> int:
    return len(m.encode_options(options))


# --------------------------------------------------------------------------------------------------------
# inner packets
# --------------------------------------------------------------------------------------------------------


@st.composite
def l4_segments(draw, max_payload=400):
    """(protocol, L4 octets): TCP or UDP with a real header, or another protocol with opaque octets."""
    kind = draw(st.sampled_from(["tcp", "udp", "other"]))
    payload = draw(st.binary(max_size=max_payload))
    sport, dport = draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 0xFFFF))
    if kind == "tcp":
        doff = draw(st.integers(5, 8))
        rest = draw(st.binary(min_size=doff * 4 - 4, max_size=doff * 4 - 4))
        return 6, struct.pack(">HH", sport, dport) + rest[:8] + bytes([doff << 4]) + rest[9:] + payload
    if kind == "udp":
        return 17, struct.pack(">HHHH", sport, dport, 8 + len(payload), draw(st.integers(0, 0xFFFF))) + payload
    return draw(st.sampled_from(OTHER_PROTOCOLS)), payload


@st.composite
def ipv4_packets(draw, max_payload=400):
    proto, l4 = draw(l4_segments(max_payload))
    ihl = draw(st.sampled_from([5, 5, 5, 6, 15]))
    options = draw(st.binary(min_size=(ihl - 5) * 4, max_size=(ihl - 5) * 4))
    flags = draw(st.sampled_from([0x0000, 0x4000]))  # never a fragment
    src, dst = draw(st.binary(min_size=4, max_size=4)), draw(st.binary(min_size=4, max_size=4))
    hdr = struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, draw(st.integers(0, 255)), ihl * 4 + len(l4),
                      draw(st.integers(0, 0xFFFF)), flags, draw(st.integers(0, 255)), proto, 0, src, dst) + options
    hdr = hdr[:10] + struct.pack(">H", m.ipv4_checksum(hdr)) + hdr[12:]
    return hdr + l4


@st.composite
def ipv6_ext_chain(draw, final_nh, max_headers=4):
    """0..max_headers extension headers (0, 43, 44 atomic, 60) in any order, ending in `final_nh`.

    Returns (first next header, octets). Any order is allowed so that D14 sees Destination Options both
    before and after a Routing header.
    """
    types = draw(st.lists(st.sampled_from(EXT_HEADERS), max_size=max_headers))
    out, nh = b"", final_nh
    for t in reversed(types):
        if t == 44:  # atomic fragment: offset 0, M = 0
            out = struct.pack(">BBHI", nh, 0, 0, draw(st.integers(0, 0xFFFFFFFF))) + out
        else:
            n = draw(st.integers(0, 2))
            out = bytes([nh, n]) + draw(st.binary(min_size=6 + 8 * n, max_size=6 + 8 * n)) + out
        nh = t
    return nh, out


@st.composite
def ipv6_packets(draw, max_payload=400, ext_headers=True):
    proto, l4 = draw(l4_segments(max_payload))
    first_nh, ext = draw(ipv6_ext_chain(proto)) if ext_headers else (proto, b"")
    vtcfl = 0x60000000 | draw(st.integers(0, 0x0FFFFFFF))
    src, dst = draw(st.binary(min_size=16, max_size=16)), draw(st.binary(min_size=16, max_size=16))
    return struct.pack(">IHBB16s16s", vtcfl, len(ext) + len(l4), first_nh, draw(st.integers(0, 255)), src,
                       dst) + ext + l4


def ip_packets(max_payload=400):
    return st.one_of(ipv4_packets(max_payload), ipv6_packets(max_payload))


@st.composite
def outer_templates(draw, ipv=None):
    """A tunnel-mode outer header: IPv4 (IHL 5..7, lengths / protocol / checksum left for the encapsulator)
    or IPv6 with 0..2 extension headers before EESP (the last protocol field is set by the encapsulator)."""
    ipv = ipv or draw(st.sampled_from([4, 6]))
    if ipv == 4:
        ihl = draw(st.sampled_from([5, 5, 6, 7]))
        src, dst = draw(st.binary(min_size=4, max_size=4)), draw(st.binary(min_size=4, max_size=4))
        return struct.pack(">BBHHHBBH4s4s", 0x40 | ihl, draw(st.integers(0, 255)), 0, draw(st.integers(0, 0xFFFF)),
                           draw(st.sampled_from([0, 0x4000])), 64, 0, 0, src, dst) + \
            draw(st.binary(min_size=(ihl - 5) * 4, max_size=(ihl - 5) * 4))
    nh0, ext = draw(ipv6_ext_chain(0xFF, max_headers=2).filter(lambda c: 44 not in _chain_types(c)))
    src, dst = draw(st.binary(min_size=16, max_size=16)), draw(st.binary(min_size=16, max_size=16))
    return struct.pack(">IHBB16s16s", 0x60000000 | draw(st.integers(0, 0xFFFFF)), 0, nh0, 64, src, dst) + ext


def _chain_types(chain) -> list[int]:
    first, octets = chain
    types, nh, off = [], first, 0
    while nh in EXT_HEADERS and off < len(octets):
        types.append(nh)
        elen = 8 if nh == 44 else (octets[off + 1] + 1) * 8
        nh, off = octets[off], off + elen
    return types


# --------------------------------------------------------------------------------------------------------
# per-packet parameters
# --------------------------------------------------------------------------------------------------------


def eesp_payload_len(cfg, pkt: bytes) -> int:
    """What EESP carries for this packet: the whole packet (tunnel) or what follows the insertion point."""
    if cfg.get("mode", "tunnel") == "tunnel":
        return len(pkt)
    at = (pkt[0] & 0xF) * 4 if pkt[0] >> 4 == 4 else m.ipv6_insertion_point(pkt)[0]
    return len(pkt) - at


@st.composite
def seal_params(draw, cfg, payload_len: int, outer_ip_version=None):
    """Per-packet arguments (options, crypt_offset, outer_ip_version, session_id) that the sender accepts.

    A Crypt Offset option is drawn only when the SA allows it; then the header must stay expressible as a
    PayloadOffset (a multiple of 4, at most 252 octets), which without alignment means padding the caller
    options to a multiple of 4 here.
    """
    s = m.SUITES[cfg["encr_id"]]
    ipv = outer_ip_version or draw(st.sampled_from([4, 6]))
    known = cfg.get("known_option_types", frozenset())
    options = draw(caller_options(known))
    crypt_offset = None
    if cfg.get("max_crypt_offset") is not None and draw(st.booleans()):
        fmt = packet_format(cfg, 0)
        room = (4 if fmt == "full" else 0) + payload_len
        crypt_offset = draw(st.integers(0, min(63, cfg["max_crypt_offset"], room // 4)))
        if not cfg.get("align_options", True):
            extra = -(4 + options_len(options)) % 4
            options = options + m.alignment_padding(extra)
        peer = (8 if cfg.get("seq", True) else 0) + s.iv_len
        assume(8 + 4 + options_len(options) + peer + 8 <= 252)  # PayloadOffset <= 63 even after alignment
    return dict(options=options, crypt_offset=crypt_offset, session_id=draw(session_ids(cfg)),
                outer_ip_version=ipv)


@st.composite
def encap_params(draw, cfg, pkt: bytes):
    """Per-packet arguments of eesp_model.encap (and the equivalent core call) for this SA and packet."""
    p = draw(seal_params(cfg, eesp_payload_len(cfg, pkt)))
    ipv = p.pop("outer_ip_version")
    if cfg.get("mode", "tunnel") == "tunnel":
        p["outer"] = draw(outer_templates(ipv))
    if cfg.get("udp_encap"):
        p["udp_sport"] = draw(st.sampled_from([4500, 1024]) | st.integers(1, 0xFFFF))
    return p


@st.composite
def sa_and_packet(draw, max_payload=300, **cfg_kw):
    """(SA kwargs, inner IP packet, encap kwargs without seq/iv)."""
    cfg = draw(sa_configs(**cfg_kw))
    pkt = draw(ip_packets(max_payload))
    return cfg, pkt, draw(encap_params(cfg, pkt))
