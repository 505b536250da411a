"""scapy layers for IPsec Enhanced ESP (draft-ietf-ipsecme-eesp-04), backed by the project's C core.

Importing this module binds :class:`EESP` to IP protocol / IPv6 next header
49 (provisional and test-only, eesp.md D7; change it with
:func:`set_ip_protocol`).  UDP port 4500 stays scapy's (ESP, IKE's non-ESP
marker, NAT keepalives) until :func:`bind_udp_encap` is called: it replaces
the ESP binding by a dispatcher that picks ``NAT_KEEPALIVE``, ``NON_ESP``,
:class:`EESP` (first octet's MSB set) or ``ESP``, in that order (eesp.md
§14), so ESP-in-UDP, IKE and keepalives dissect exactly as before.

The wire does not say whether an SA sends a Sequence Number or an explicit
IV, nor how long its ICV is.  The layer reads that layout from a table by
SPI: every :class:`EESPSecurityAssociation` registers its own, and
:func:`register_layout` adds others; unknown SPIs use the default layout
(Seq, 8-octet IV, 16-octet ICV: the default AES-GCM-16 SA), which
:func:`set_default_layout` changes.

Encryption and decryption go through :class:`pyeesp.SA` /
:class:`pyeesp.Receiver` (:class:`EESPSecurityAssociation`, in the shape of
scapy's ``SecurityAssociation``).  Never modifies scapy's own classes.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Union

from pecore.util import require_extra

require_extra("scapy", "scapy", "pyeesp.scapy")

from scapy.compat import raw
from scapy.data import IP_PROTOS
from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    ConditionalField,
    FieldLenField,
    LongField,
    PacketListField,
    ShortField,
    StrLenField,
    XBitField,
    XIntField,
    XLongField,
    XStrField,
    XStrLenField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting
from scapy.layers.ipsec import ESP, NAT_KEEPALIVE, NON_ESP
from scapy.packet import (
    Packet,
    bind_bottom_up,
    bind_top_down,
    split_bottom_up,
)

from pecore import ops
from pecore.protocol import CRYPT_OFFSET_FIELD_BITS, eesp_suite
from pecore.util import Key, check_range
from pyeesp.errors import ConfigurationError, NoSaError, raise_eesp
from pyeesp.sa import SA, SUITES, Receiver, suite_id
from pecore._scapy import LenientDissect, UpToTrailerField, header_template, ip_bytes, ip_packet

__all__ = [
    "EESP",
    "EESPOption",
    "EESPOptPad1",
    "EESPOptPadN",
    "EESPOptCryptOffset",
    "EESPOptUnknown",
    "EESPLayout",
    "EESPSecurityAssociation",
    "IPsecUDPEncap",
    "register_layout",
    "unregister_layout",
    "layout_for",
    "set_default_layout",
    "bind_udp_encap",
    "unbind_udp_encap",
    "set_ip_protocol",
    "ip_protocol",
]

DEFAULT_IP_PROTOCOL = 49  # provisional, test-only (eesp.md D7)
UDP_ENCAP_PORT = 4500
OPTION_TYPES = {0: "Pad1", 1: "PadN", 2: "CryptOffset"}


# --------------------------------------------------------------------------- layouts


class EESPLayout(NamedTuple):
    """What an SA puts between the options and the encrypted part, and its ICV length.

    ``clear_pih``: the Payload Info Header travels in clear (AES-GMAC in the
    full format).  A Crypt Offset option of at least 1 word exposes it too.
    """

    seq: bool = True
    iv_len: int = 8
    icv_len: int = 16
    clear_pih: bool = False


_LAYOUTS: Dict[int, EESPLayout] = {}
_default_layout = EESPLayout()


def _checked_layout(seq: bool, iv_len: int, icv_len: int, clear_pih: bool) -> EESPLayout:
    if iv_len not in (0, 8):
        raise ConfigurationError(f"iv_len must be 0 (implicit IV) or 8, not {iv_len!r}")
    check_range("icv_len", icv_len, 64, ConfigurationError)
    return EESPLayout(bool(seq), iv_len, icv_len, bool(clear_pih))


def register_layout(spi: int, seq: bool = True, iv_len: int = 8, icv_len: int = 16, clear_pih: bool = False) -> EESPLayout:
    """Dissect packets with this SPI with the given layout (the SA's SN, IV and ICV sizes)."""
    layout = _checked_layout(seq, iv_len, icv_len, clear_pih)
    _LAYOUTS[check_range("spi", spi, 0xFFFFFFFF, ConfigurationError)] = layout
    return layout


def unregister_layout(spi: int) -> None:
    """Forget the layout registered for ``spi`` (it falls back to the default)."""
    _LAYOUTS.pop(spi, None)


def layout_for(spi: Optional[int]) -> EESPLayout:
    """The layout used to dissect packets of ``spi``."""
    return _LAYOUTS.get(spi, _default_layout) if spi is not None else _default_layout


def set_default_layout(seq: bool = True, iv_len: int = 8, icv_len: int = 16, clear_pih: bool = False) -> EESPLayout:
    """Change the layout used for SPIs without a registered one; returns the previous default."""
    global _default_layout
    previous, _default_layout = _default_layout, _checked_layout(seq, iv_len, icv_len, clear_pih)
    return previous


def _layout(pkt) -> EESPLayout:  # type: ignore[no-untyped-def]
    return layout_for(pkt.spi)


def _pih_clear(pkt) -> bool:  # type: ignore[no-untyped-def]
    if _layout(pkt).clear_pih:
        return True
    return any(isinstance(o, EESPOptCryptOffset) and (o.crypt_offset or 0) >= 1 for o in pkt.options or ())


# --------------------------------------------------------------------------- options


class EESPOption(Packet):
    """Base of the option TLVs (eesp.md §4); dissecting with it picks the class by type.

    Unknown types (and a Crypt Offset of a length other than 2, D3) are kept
    as :class:`EESPOptUnknown` raw TLVs, so the octets survive a rebuild.
    """

    name = "EESP Option"
    fields_desc = [ByteEnumField("otype", 0, OPTION_TYPES)]

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):  # type: ignore[no-untyped-def]
        if cls is not EESPOption or not _pkt:
            return cls
        t = _pkt[0]
        if t == 0:
            return EESPOptPad1
        if t == 1:
            return EESPOptPadN
        if t == 2 and len(_pkt) >= 2 and _pkt[1] == 2:
            return EESPOptCryptOffset
        return EESPOptUnknown

    def extract_padding(self, s):  # type: ignore[no-untyped-def]
        return b"", s


class EESPOptPad1(EESPOption):
    """Pad1: one zero octet, no length or data."""

    name = "EESP Option Pad1"
    fields_desc = [ByteEnumField("otype", 0, OPTION_TYPES)]


class EESPOptPadN(EESPOption):
    """PadN: type 1, length, that many zero octets (covers N = 2 + len(optdata) octets)."""

    name = "EESP Option PadN"
    fields_desc = [
        ByteEnumField("otype", 1, OPTION_TYPES),
        FieldLenField("optlen", None, length_of="optdata", fmt="B"),
        StrLenField("optdata", b"", length_from=lambda p: p.optlen),
    ]


class EESPOptCryptOffset(EESPOption):
    """Crypt Offset (D3): PayloadOffset(6) | CryptOffset(6) | R(4), in 4-octet units.

    PayloadOffset counts from the Base Header to the PIH (or the payload);
    CryptOffset from there to the first encrypted octet.
    """

    name = "EESP Option Crypt Offset"
    fields_desc = [
        ByteEnumField("otype", 2, OPTION_TYPES),
        ByteField("optlen", 2),
        BitField("payload_offset", 0, CRYPT_OFFSET_FIELD_BITS[0]),
        BitField("crypt_offset", 0, CRYPT_OFFSET_FIELD_BITS[1]),
        BitField("reserved", 0, CRYPT_OFFSET_FIELD_BITS[2]),
    ]


class EESPOptUnknown(EESPOption):
    """Any other option, kept as a raw TLV (types 3-223 unassigned, 224-255 private use)."""

    name = "EESP Option (unknown)"
    fields_desc = [
        ByteEnumField("otype", 224, OPTION_TYPES),
        FieldLenField("optlen", None, length_of="optdata", fmt="B"),
        XStrLenField("optdata", b"", length_from=lambda p: p.optlen),
    ]


# --------------------------------------------------------------------------- the layer


class EESP(LenientDissect, Packet):
    """Enhanced ESP: Base Header, options, Peer Header (Seq, IV), PIH when in clear,
    the encrypted part and the ICV.

    ``data`` is everything between the Peer Header (or a clear PIH) and the
    ICV: ciphertext, plus whatever a Crypt Offset exposes, or the clear
    payload with AES-GMAC.  Seq, IV and ICV follow the SPI's layout
    (:func:`register_layout`).  ``optlen`` is filled in on build.
    """

    name = "EESP"
    fields_desc = [
        BitField("esp_compat", 1, 1),
        BitField("version", 0, 4),
        BitField("reserved", 0, 3),
        FieldLenField("optlen", None, length_of="options", fmt="B"),
        ShortField("session_id", 0),
        XIntField("spi", 0x1),
        PacketListField("options", [], EESPOption, length_from=lambda p: p.optlen),
        ConditionalField(LongField("seq", 1), lambda p: _layout(p).seq),
        ConditionalField(XLongField("iv", 1), lambda p: _layout(p).iv_len == 8),
        ConditionalField(BitField("pih_zero", 0, 4), _pih_clear),
        ConditionalField(XBitField("pih_reserved", 0, 12), _pih_clear),
        ConditionalField(ByteEnumField("nh", 0, IP_PROTOS), _pih_clear),
        ConditionalField(ByteField("padlen", 0), _pih_clear),
        UpToTrailerField("data", b"", lambda p: _layout(p).icv_len),
        XStrField("icv", b""),
    ]
    overload_fields = {
        IP: {"proto": DEFAULT_IP_PROTOCOL},
        IPv6: {"nh": DEFAULT_IP_PROTOCOL},
        IPv6ExtHdrHopByHop: {"nh": DEFAULT_IP_PROTOCOL},
        IPv6ExtHdrDestOpt: {"nh": DEFAULT_IP_PROTOCOL},
        IPv6ExtHdrRouting: {"nh": DEFAULT_IP_PROTOCOL},
        UDP: {"sport": UDP_ENCAP_PORT, "dport": UDP_ENCAP_PORT},
    }

    def mysummary(self):  # type: ignore[no-untyped-def]
        s = self.sprintf("EESP spi=%EESP.spi% session=%EESP.session_id%")
        if "seq" in self.fields:
            s += self.sprintf(" seq=%EESP.seq%")
        return s + (f" (truncated before {self.stopped_at})" if self.stopped_at else "")

    @property
    def crypt_offset_option(self) -> Optional["EESPOptCryptOffset"]:
        """The Crypt Offset option, if any."""
        return next((o for o in self.options if isinstance(o, EESPOptCryptOffset)), None)


class IPsecUDPEncap(Packet):
    """UDP 4500 dispatcher (RFC 3948 with EESP, eesp.md §14); never appears in a dissection:
    a single 0xFF is ``NAT_KEEPALIVE``, four zero octets ``NON_ESP`` (IKE), a first
    octet 0x80 (the only one a version-0 Base Header has) :class:`EESP`, anything else ``ESP``.  The
    core's classifier decides."""

    name = "IPsec UDP encapsulation"
    fields_desc = []  # type: ignore[var-annotated]

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):  # type: ignore[no-untyped-def]
        if not _pkt:
            return cls
        kind = ops.udp4500_kind(_pkt)  # it holds no ESP SAs
        return {"keepalive": NAT_KEEPALIVE, "ike": NON_ESP, "eesp": EESP}.get(kind, ESP)


# --------------------------------------------------------------------------- bindings

_ip_protocol = DEFAULT_IP_PROTOCOL
_V6_EXT = (IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting)


def _bind_ip(proto: int) -> None:
    bind_bottom_up(IP, EESP, proto=proto)
    bind_bottom_up(IPv6, EESP, nh=proto)
    for ext in _V6_EXT:
        bind_bottom_up(ext, EESP, nh=proto)
    ov = dict(EESP._overload_fields)
    ov[IP] = {"proto": proto}
    for lower in (IPv6,) + _V6_EXT:
        ov[lower] = {"nh": proto}
    EESP._overload_fields = ov  # type: ignore[misc]


def _split_ip(proto: int) -> None:
    split_bottom_up(IP, EESP, proto=proto)
    split_bottom_up(IPv6, EESP, nh=proto)
    for ext in _V6_EXT:
        split_bottom_up(ext, EESP, nh=proto)


def ip_protocol() -> int:
    """The IP protocol number EESP is bound to (default 49, provisional)."""
    return _ip_protocol


def set_ip_protocol(proto: int) -> int:
    """Bind EESP to another IP protocol / IPv6 next header number; returns the previous one.

    New :class:`EESPSecurityAssociation` objects use it by default."""
    global _ip_protocol
    check_range("ip_protocol", proto, 255, ConfigurationError)
    previous = _ip_protocol
    _split_ip(previous)
    _bind_ip(proto)
    _ip_protocol = proto
    return previous


_bind_ip(DEFAULT_IP_PROTOCOL)
bind_top_down(UDP, EESP, sport=UDP_ENCAP_PORT, dport=UDP_ENCAP_PORT)

_udp_ports: list = []


def bind_udp_encap(port: int = UDP_ENCAP_PORT) -> None:
    """Opt in to EESP in UDP ``port`` (4500): replace scapy's ESP binding on that port by
    :class:`IPsecUDPEncap`, which still hands ESP, IKE and keepalives to scapy's classes.

    Not done at import: it changes how scapy dissects port 4500 for everyone."""
    check_range("port", port, 0xFFFF, ConfigurationError)
    if port in _udp_ports:
        return
    split_bottom_up(UDP, ESP, dport=port)
    split_bottom_up(UDP, ESP, sport=port)
    bind_bottom_up(UDP, IPsecUDPEncap, dport=port)
    bind_bottom_up(UDP, IPsecUDPEncap, sport=port)
    _udp_ports.append(port)


def unbind_udp_encap(port: int = UDP_ENCAP_PORT) -> None:
    """Undo :func:`bind_udp_encap`: ``port`` goes back to scapy's ESP binding."""
    if port not in _udp_ports:
        return
    split_bottom_up(UDP, IPsecUDPEncap, dport=port)
    split_bottom_up(UDP, IPsecUDPEncap, sport=port)
    bind_bottom_up(UDP, ESP, dport=port)
    bind_bottom_up(UDP, ESP, sport=port)
    _udp_ports.remove(port)


# --------------------------------------------------------------------------- Security Association

_ALIASES = {
    "aes-null-gmac": "aes-gmac",  # scapy's CRYPT_ALGOS name
    "null-auth-aes-gmac": "aes-gmac",
    "aes-gmac-16": "aes-gmac",
}
_FAMILIES = ("aes-gcm", "aes-ccm", "chacha20-poly1305")


def suite_info(suite: Union[str, int], key_bits: int = 128):  # type: ignore[no-untyped-def]
    """The core's description of a suite: (name, salt_len, iv_len, icv_len, integrity_only, key_len)."""
    row = eesp_suite(suite_id(suite))
    assert row is not None  # suite_id() accepted it
    st, lengths = ops.ipsec_suite_lengths(row.id, 0 if len(row.key_lens) == 1 else key_bits)
    if st != ops.OK:
        raise_eesp(st, f"suite {suite!r} with {key_bits}-bit keys")
    return (row.name, *lengths)


def _resolve_suite(suite: Union[str, int], iv_len: Optional[int], icv_len: Optional[int]) -> str:
    """A suite name from a name, an IKEv2 ID, or a family ("aes-gcm") plus explicit IV/ICV lengths;
    explicit lengths that contradict the suite are refused, never ignored."""
    if isinstance(suite, str):
        name = suite.strip().lower().replace("_", "-").removeprefix("encr-")
        name = _ALIASES.get(name, name)
        if name in _FAMILIES:
            if name == "chacha20-poly1305":
                name += "-iiv" if iv_len == 0 else ""
            else:
                name = f"{name}-{16 if icv_len is None else icv_len}" + ("-iiv" if iv_len == 0 else "")
            if name not in SUITES:
                raise ConfigurationError(f"no EESP suite {name!r} (IV length {iv_len}, ICV length {icv_len})",
                                         "eesp-bad-suite")
        suite = name
    name, _salt, s_iv, s_icv, _io, _kl = suite_info(suite)
    if iv_len is not None and iv_len != s_iv:
        raise ConfigurationError(f"suite {name} has a {s_iv}-octet IV, not {iv_len}", "eesp-bad-suite")
    if icv_len is not None and icv_len != s_icv:
        raise ConfigurationError(f"suite {name} has a {s_icv}-octet ICV, not {icv_len}", "eesp-bad-suite")
    return name


def _options_bytes(options) -> bytes:  # type: ignore[no-untyped-def]
    if options is None:
        return b""
    if isinstance(options, (bytes, bytearray)):
        return bytes(options)
    if isinstance(options, Packet):
        options = [options]
    return b"".join(raw(o) for o in options)


class EESPSecurityAssociation:
    """An EESP SA in the shape of scapy's ``SecurityAssociation``: ``encrypt(pkt)`` and
    ``decrypt(pkt)`` take and return whole IP/IPv6 packets; the core does the work
    (:class:`pyeesp.SA`, :class:`pyeesp.Receiver`).

    - ``suite``: "aes-gcm-16", "aes-ccm-8", "aes-gmac", "chacha20-poly1305",
      "aes-gcm-16-iiv", … or the IKEv2 ENCR ID; or a family ("aes-gcm",
      "aes-ccm", "chacha20-poly1305", scapy's "AES-GCM"…) completed by
      ``icv_len`` and ``iv_len`` (0: implicit IV).  Explicit ``iv_len`` /
      ``icv_len`` that contradict the suite raise, they are never ignored.
    - Keys (bytes or hex strings): ``crypt_key`` (alias ``key``) is the KEYMAT
      block key ‖ salt, as in scapy (the last 4 octets, 3 for CCM, are the
      salt; the AES key size follows from its length); or ``root_key`` with
      ``sskdf`` ("hkdf-sha256/384/512") and ``key_bits`` derives each Sub
      SA's key ‖ salt.
    - ``sub_sa_id``: the Sub SA that :meth:`encrypt` uses by default (the
      header field keeps the name ``session_id``, see :mod:`pyeesp.sa`);
      ``seq_num`` its first sequence number.  ``seq_present=False`` sends no
      Sequence Number (and has no anti-replay).
    - ``mode`` "tunnel"/"transport", ``format`` "auto"/"full"/"optimized",
      ``aad`` "draft"/"linux-xfrm", ``strict``, ``crypt_offset``,
      ``max_crypt_offset``, ``max_sub_sa_id``, ``options`` (option packets or
      TLV bytes sent after the Crypt Offset), ``align_options``,
      ``anti_replay``, ``replay_window``: as in :class:`pyeesp.SA`.
    - ``tunnel_header``: an ``IP``/``IPv6`` instance (tunnel mode);
      ``nat_t_header``: a ``UDP`` instance, whose ports are used for UDP
      encapsulation; ``ip_protocol`` defaults to :func:`ip_protocol`.
    - ``register_layout``: make the :class:`EESP` layer dissect this SPI with
      this SA's Seq/IV/ICV layout (default on).
    """

    def __init__(
        self,
        spi: int,
        suite: Union[str, int] = "aes-gcm-16",
        crypt_key: Optional[Key] = None,
        *,
        key: Optional[Key] = None,
        root_key: Optional[Key] = None,
        sskdf: Optional[str] = None,
        key_bits: Optional[int] = None,
        sub_sa_id: int = 0,
        seq_num: int = 1,
        seq_present: bool = True,
        iv_len: Optional[int] = None,
        icv_len: Optional[int] = None,
        mode: str = "tunnel",
        format: str = "auto",
        aad: str = "draft",
        strict: bool = False,
        crypt_offset: Optional[int] = None,
        max_crypt_offset: Optional[int] = None,
        max_sub_sa_id: Optional[int] = None,
        options=None,  # type: ignore[no-untyped-def]
        align_options: bool = True,
        anti_replay: bool = True,
        replay_window: int = 1024,
        tunnel_header=None,  # type: ignore[no-untyped-def]
        nat_t_header=None,  # type: ignore[no-untyped-def]
        ip_protocol: Optional[int] = None,
        dst: Optional[str] = None,
        register_layout: bool = True,
    ) -> None:
        if crypt_key is not None and key is not None:
            raise ConfigurationError("give crypt_key= or its alias key=, not both")
        crypt_key = crypt_key if crypt_key is not None else key
        name = _resolve_suite(suite, iv_len, icv_len)
        _n, salt_len, s_iv, s_icv, integrity_only, _kl = suite_info(name)
        udp_encap = nat_t_header is not None
        if udp_encap and not isinstance(nat_t_header, UDP):
            raise TypeError("nat_t_header must be a UDP instance")
        sport = nat_t_header.sport if udp_encap else UDP_ENCAP_PORT
        dport = nat_t_header.dport if udp_encap else UDP_ENCAP_PORT
        proto = _ip_protocol if ip_protocol is None else ip_protocol
        self._sa = SA(
            spi,
            name,
            key=crypt_key,
            root_key=root_key,
            sskdf=sskdf,
            key_bits=key_bits,
            mode=mode,
            format=format,
            seq=seq_present,
            aad=aad,
            anti_replay=anti_replay,
            replay_window=replay_window,
            max_sub_sa_id=max_sub_sa_id,
            max_crypt_offset=max_crypt_offset,
            crypt_offset=crypt_offset,
            align_options=align_options,
            strict=strict,
            options=_options_bytes(options),
            ip_protocol=proto,
            udp_encap=udp_encap,
            udp_sport=sport,
            udp_dport=dport,
            tunnel_header=header_template(tunnel_header),
            dst=dst,
        )
        self._rx = Receiver([self._sa], ip_protocol=proto, udp_port=dport)
        self.spi, self.suite, self.mode = spi, name, mode
        self.sub_sa_id = check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
        self.seq_present = seq_present
        self.iv_len, self.icv_len, self.salt_len = s_iv, s_icv, salt_len
        self.tunnel_header, self.nat_t_header = tunnel_header, nat_t_header
        full = format == "full" or (format == "auto" and (mode == "transport" or crypt_offset is not None))
        self.layout = _checked_layout(seq_present, s_iv, s_icv, integrity_only and full)
        if register_layout:
            _LAYOUTS[spi] = self.layout
        if seq_num != 1:
            self._sa.set_next_seq(seq_num, self.sub_sa_id)

    def next_iv(self, sub_sa_id: Optional[int] = None) -> Optional[int]:
        """The counter the next packet of a Sub SA (default: the SA's) carries as sequence number and IV; None
        once exhausted (:meth:`pyeesp.SA.next_iv`, as ``PSPSecurityAssociation.next_iv()``)."""
        return self._sa.next_iv(self.sub_sa_id if sub_sa_id is None else sub_sa_id)

    def next_seq(self, sub_sa_id: Optional[int] = None) -> Optional[int]:
        """The sequence number the next packet of a Sub SA carries (None once exhausted)."""
        return self._sa.next_seq(self.sub_sa_id if sub_sa_id is None else sub_sa_id)

    def encrypt(self, pkt, seq_num: Optional[int] = None, sub_sa_id: Optional[int] = None):  # type: ignore[no-untyped-def]
        """Encapsulate an ``IP``/``IPv6`` packet on Sub SA ``sub_sa_id`` (default: the SA's);
        returns the outer packet.  ``seq_num`` moves that Sub SA's counter forward to
        the value (never back: sequence numbers and IVs never repeat; the IV is the
        sequence number, eesp.md §10)."""
        sub = self.sub_sa_id if sub_sa_id is None else sub_sa_id
        data = ip_bytes(pkt)
        if seq_num is not None:
            if seq_num != self._sa.next_seq(sub):
                self._sa.set_next_seq(seq_num, sub)
        return ip_packet(self._sa.encrypt(data, sub))

    def decrypt(self, pkt, verify: bool = True):  # type: ignore[no-untyped-def]
        """Verify, replay-check and decrypt an IP/IPv6 packet carrying EESP (in IP or in UDP);
        returns the inner packet (tunnel) or the original one (transport).

        Raises the typed exceptions of :mod:`pyeesp.errors`
        (:class:`~pyeesp.AuthenticationError`, :class:`~pyeesp.ReplayError`,
        :class:`~pyeesp.NoSaError` for another SPI, …).  The ICV is always
        verified (``verify=False`` is refused).
        """
        if not verify:
            raise ConfigurationError("the core always verifies the ICV")
        data = ip_bytes(pkt)
        if isinstance(pkt, Packet) and pkt.haslayer(EESP) and pkt[EESP].spi != self.spi:
            raise NoSaError(f"packet SPI {pkt[EESP].spi:#010x} does not match the SA SPI {self.spi:#010x}", "eesp-no-sa")
        self.last_decrypted = self._rx.decrypt(data)
        return ip_packet(self.last_decrypted.packet)

    def __repr__(self) -> str:
        return f"<EESPSecurityAssociation spi={self.spi:#010x} suite={self.suite} mode={self.mode}>"

