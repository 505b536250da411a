"""scapy layer for PSP, backed by the project's C core.

Importing this module binds :class:`PSP` to UDP port 1000 (both directions,
as scapy's own ``scapy.contrib.psp`` does); docs/scapy.md has runnable examples::

    from scapy.all import IP, UDP, Raw
    from pypsp.scapy import PSP, PSPSecurityAssociation
    sa = PSPSecurityAssociation(0x9A345678, master_keys=(mk0, mk1), crypt_offset=1)
    wire = sa.encrypt(IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2) / Raw(b"hi"))
    wire[PSP].show()
    sa.decrypt(wire)

:class:`PSP` is a compatible superset of scapy's contrib layer: the same field
names and defaults (``nexthdr``, ``hdrextlen``, ``reserved``, ``cryptoffset``,
``sample``, ``drop``, ``version``, ``is_virt``, ``one_bit``, ``spi``, ``iv``,
``virtkey``, ``sectoken``, ``data``) and the same in-place ``encrypt(key)`` /
``decrypt(key)`` methods taking the derived key, plus:

- every version 0-3 (AES-GCM and AES-GMAC), all crypto done by the core;
- ``hdrextlen`` defaults to None and is filled in on build (2 with a VC);
- the VC sub-fields in google/psp ``psp.lua`` order: ``sectoken`` is VC octets
  0-3 and ``virtkey`` octets 4-7 (scapy's contrib layer has the reverse
  order, so a VC dissected by the two shows the halves swapped);
- ``ext``: extension octets after the VC (Hdr Ext Len beyond the VC);
- ``icv``: the 16-octet trailer, split off ``data`` on dissection (scapy's
  contrib layer keeps it at the end of ``data``);
- a VC with a crypt offset below 2 is partly encrypted, as in the reference
  implementation (scapy's contrib layer always keeps the VC in clear and
  cannot open such packets: docs/spec/psp.md §9.3).

Never modifies scapy's own classes.  When both layers are loaded, this one
takes UDP port 1000 for dissection.
"""
from __future__ import annotations

import struct
from typing import Callable, Optional, Sequence, Union

from pecore.util import require_extra

require_extra("scapy", "scapy", "pypsp.scapy")

from scapy.compat import raw
from scapy.data import IP_PROTOS
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    ConditionalField,
    StrFixedLenField,
    XIntField,
    XStrField,
    XStrLenField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_bottom_up, bind_top_down, split_bottom_up, split_top_down
from scapy.volatile import RandBin, VolatileValue

from pecore._scapy import LenientDissect, UpToTrailerField, header_template, ip_bytes, ip_packet
from pecore.util import key_bytes
from pypsp.crypto import MAX_IP_LEN, Decryptor, Encryptor
from pypsp.errors import ConfigurationError, NoKeyError, PacketTooLargeError
from pypsp.header import VERSION_NAMES

__all__ = [
    "PSP",
    "PSPSecurityAssociation",
    "bind_psp_port",
    "unbind_psp_port",
    "PSP_PORT",
    "ICV_LEN",
]

PSP_PORT = 1000
ICV_LEN = 16
_MODES = ("transport", "tunnel")


# --------------------------------------------------------------------------- dissection helpers


class _IVField(StrFixedLenField):
    """The 8-octet IV as bytes (scapy's contrib type); also accepts an integer."""

    def any2i(self, pkt, x):  # type: ignore[no-untyped-def]
        if isinstance(x, int) and not isinstance(x, bool):
            x = x.to_bytes(8, "big")
        return super().any2i(pkt, x)

    def getfield(self, pkt, s):  # type: ignore[no-untyped-def]
        if len(s) < 8:  # truncated: stop here rather than show a short IV
            raise ValueError("IV truncated")
        return super().getfield(pkt, s)

    def i2repr(self, pkt, x):  # type: ignore[no-untyped-def]
        if isinstance(x, VolatileValue):
            return repr(x)
        return "0x" + bytes(x).hex() if x is not None else repr(x)


def _vc_room(pkt) -> int:  # type: ignore[no-untyped-def]
    return 8 if pkt.is_virt else 0


def _ext_len(pkt) -> int:  # type: ignore[no-untyped-def]
    if pkt.hdrextlen is None:
        return 0
    return max((pkt.hdrextlen + 1) * 8 - 16 - _vc_room(pkt), 0)


# --------------------------------------------------------------------------- the layer



class PSP(LenientDissect, Packet):
    """PSP Security Protocol (psp.md §2): header, optional VC, extension, payload, ICV.

    ``data`` is what follows the header (and extension) up to the ICV: the
    clear part and the ciphertext on the wire, or the plaintext before
    :meth:`encrypt` / after :meth:`decrypt`.  ``icv`` is empty on a plaintext
    packet.
    """

    name = "PSP"
    fields_desc = [
        ByteEnumField("nexthdr", 0, IP_PROTOS),
        ByteField("hdrextlen", None),
        BitField("reserved", 0, 2),
        BitField("cryptoffset", 0, 6),
        BitField("sample", 0, 1),
        BitField("drop", 0, 1),
        BitEnumField("version", 0, 4, VERSION_NAMES),
        BitField("is_virt", 0, 1),
        BitField("one_bit", 1, 1),
        XIntField("spi", 0x00),
        _IVField("iv", RandBin(8), 8),
        ConditionalField(XIntField("sectoken", 0x00), lambda pkt: pkt.is_virt == 1),
        ConditionalField(XIntField("virtkey", 0x00), lambda pkt: pkt.is_virt == 1),
        XStrLenField("ext", b"", length_from=_ext_len),
        UpToTrailerField("data", None, lambda pkt: ICV_LEN),
        XStrField("icv", b""),
    ]

    def post_build(self, p, pay):  # type: ignore[no-untyped-def]
        if self.hdrextlen is None and len(p) >= 2:
            ext = len(self.ext or b"")
            hel = max(1 + (_vc_room(self) + ext + 7) // 8, 2 if self.is_virt else 1)
            p = p[:1] + struct.pack("B", hel) + p[2:]
        return p + pay

    def mysummary(self):  # type: ignore[no-untyped-def]
        s = self.sprintf("PSP spi=%PSP.spi% %PSP.version% iv=%PSP.iv%")
        return s + (f" (truncated before {self.stopped_at})" if self.stopped_at else "")

    @property
    def vc(self) -> Optional[bytes]:
        """The 8 VC octets (``sectoken`` ‖ ``virtkey``) as on the wire, or None without V."""
        if not self.is_virt:
            return None
        return struct.pack("!II", self.sectoken or 0, self.virtkey or 0)

    # -- scapy contrib compatibility: in-place encryption with the derived key, through the core

    def _check_sealable(self) -> None:
        problems = []
        if self.version > 3:
            problems.append(f"version {self.version} is reserved")
        if self.reserved:
            problems.append("R bits are set")
        if not self.one_bit:
            problems.append("the always-1 bit is clear")
        if self.ext:
            problems.append("extension octets beyond the VC")
        canonical = 2 if self.is_virt else 1
        if self.hdrextlen is not None and self.hdrextlen != canonical:
            problems.append(f"Hdr Ext Len {self.hdrextlen} (the core builds {canonical})")
        if self.icv:
            problems.append("the packet already carries an ICV")
        if problems:
            raise ConfigurationError("the core cannot seal this header: " + "; ".join(problems))

    def encrypt(self, key) -> None:  # type: ignore[no-untyped-def]
        """Encrypt in place with the derived ``key`` (bytes or hex), as scapy's contrib layer does.

        ``data`` is the plaintext after the header (the L4 segment or the inner
        IP packet); afterwards it holds the clear part and the ciphertext, and
        ``icv`` the ICV.  Versions 0-3; a VC with a crypt offset below 2 is
        encrypted as the reference does.  Raises :class:`pypsp.ConfigurationError`
        for headers the core does not send (R bits, extension octets, …).
        """
        self._check_sealable()
        iv = bytes(self.iv)
        if len(iv) != 8:
            raise ConfigurationError(f"iv must be 8 octets, not {len(iv)}")
        data = bytes(self.data or b"")
        if 20 + len(data) > MAX_IP_LEN:  # the synthetic IPv4 packet below; the core checks the result
            raise PacketTooLargeError(f"{len(data)} octets of data do not fit one PSP packet in IPv4", "ip-too-long")
        vc = self.vc
        enc = Encryptor(
            key=key,
            spi=self.spi,
            version=self.version,
            mode="transport",
            crypt_offset=self.cryptoffset,
            vc=vc,
            sample=bool(self.sample),
            drop=bool(self.drop),
            first_iv=int.from_bytes(iv, "big"),
            udp_sport=PSP_PORT,
        )
        sealed = PSP(enc.seal(data, self.nexthdr))
        for name in ("hdrextlen", "sectoken", "virtkey", "data", "icv"):
            if name in sealed.fields:
                self.setfieldval(name, sealed.fields[name])
        self.iv = iv

    def decrypt(self, key) -> None:  # type: ignore[no-untyped-def]
        """Verify and decrypt in place with the derived ``key``, as scapy's contrib layer does.

        Afterwards ``data`` is the plaintext (the L4 segment or inner IP packet),
        ``icv`` is empty and a VC that travelled encrypted shows its clear
        value.  Raises :class:`pypsp.AuthenticationError` (the typed exceptions
        of :mod:`pypsp.errors`) and changes nothing on failure.
        """
        k = key_bytes(key, "key", ConfigurationError)
        dec = Decryptor(keys={self.spi: k})
        result = dec.open(raw(self))
        ext = result.header.extension  # as sent: decrypted where the crypt offset left it encrypted
        if self.is_virt and len(ext) >= 8:
            self.sectoken, self.virtkey = struct.unpack("!II", ext[:8])
            ext = ext[8:]
        if self.ext or ext:
            self.ext = ext
        self.data = result.packet
        self.icv = b""


# --------------------------------------------------------------------------- bindings


def _bind_first(lower, upper, **fval) -> None:  # type: ignore[no-untyped-def]
    """bind_bottom_up, then move the new entry to the front: the first matching binding wins,
    so this layer takes the port even when scapy.contrib.psp was loaded before."""
    bind_bottom_up(lower, upper, **fval)
    entry = lower.payload_guess.pop()
    lower.payload_guess = [entry] + lower.payload_guess


def bind_psp_port(port: int = PSP_PORT, build: bool = False) -> None:
    """Dissect UDP ``port`` (either direction) as :class:`PSP`.  With ``build``, UDP()/PSP()
    also gets that port (one port at a time; 1000 by default)."""
    _bind_first(UDP, PSP, dport=port)
    _bind_first(UDP, PSP, sport=port)
    if build:
        bind_top_down(UDP, PSP, dport=port, sport=port)


def unbind_psp_port(port: int = PSP_PORT) -> None:
    """Undo :func:`bind_psp_port` (building falls back to port 1000 if it used ``port``)."""
    split_bottom_up(UDP, PSP, dport=port)
    split_bottom_up(UDP, PSP, sport=port)
    if PSP._overload_fields.get(UDP) == {"dport": port, "sport": port}:
        split_top_down(UDP, PSP, dport=port, sport=port)
        if port != PSP_PORT:
            bind_top_down(UDP, PSP, dport=PSP_PORT, sport=PSP_PORT)


bind_psp_port(PSP_PORT, build=True)


# --------------------------------------------------------------------------- Security Association


def _vc_bytes(vc) -> Optional[bytes]:  # type: ignore[no-untyped-def]
    if vc is None:
        return None
    if isinstance(vc, int) and not isinstance(vc, bool):
        if not 0 <= vc < 2**64:
            raise ConfigurationError("vc must fit in 64 bits")
        return vc.to_bytes(8, "big")
    return key_bytes(vc, "vc", ConfigurationError)


class PSPSecurityAssociation:
    """A PSP SA in the shape of scapy's ``SecurityAssociation``: ``encrypt(pkt)`` and
    ``decrypt(pkt)`` take and return whole IP/IPv6 packets; the core does the work
    (:class:`pypsp.Encryptor` / :class:`pypsp.Decryptor`).

    Keys (bytes or hex strings): ``key``, the derived SA key (16 octets for
    versions 0/2, 32 for 1/3), or ``master_keys`` (key0, key1), from which the
    key for ``spi`` and ``version`` is derived (the SPI's MSB picks one).
    ``iv`` is the first IV (a counter; IVs never repeat within the SA).
    ``vc`` (8 octets, hex or an int) adds a Virtualization Cookie;
    ``tunnel_header`` is an ``IP``/``IPv6`` instance for tunnel mode (default:
    a copy of the inner header).  The other settings are those of
    :class:`pypsp.Encryptor`.
    """

    def __init__(
        self,
        spi: int,
        key=None,  # type: ignore[no-untyped-def]
        *,
        master_keys: Optional[Sequence] = None,
        version: int = 0,
        mode: str = "transport",
        crypt_offset: int = 0,
        crypt_offset_ipv4: Optional[int] = None,
        crypt_offset_ipv6: Optional[int] = None,
        vc=None,  # type: ignore[no-untyped-def]
        sample: bool = False,
        drop: bool = False,
        iv: int = 1,
        udp_sport: Union[str, int, Callable[[bytes], int]] = "xor",
        udp_dport: int = PSP_PORT,
        tunnel_header=None,  # type: ignore[no-untyped-def]
        kdf_label: Optional[int] = None,
    ) -> None:
        if mode not in _MODES:
            raise ConfigurationError(f"mode must be 'transport' or 'tunnel', not {mode!r}")
        self._settings = dict(
            spi=spi,
            key=key,
            master_keys=master_keys,
            version=version,
            mode=mode,
            crypt_offset=crypt_offset,
            crypt_offset_ipv4=crypt_offset_ipv4,
            crypt_offset_ipv6=crypt_offset_ipv6,
            vc=_vc_bytes(vc),
            sample=sample,
            drop=drop,
            udp_sport=udp_sport,
            udp_dport=udp_dport,
            tunnel_header=header_template(tunnel_header),
            kdf_label=kdf_label,
        )
        self._enc = Encryptor(first_iv=iv, **self._settings)
        if key is not None:
            self._dec = Decryptor(keys={(spi, version): key}, versions=(version,), udp_dport=udp_dport)
        else:
            labels = {version: kdf_label} if kdf_label else None
            self._dec = Decryptor(master_keys=master_keys, versions=(version,), udp_dport=udp_dport, kdf_labels=labels)
        self.spi, self.version, self.mode = spi, version, mode
        self.tunnel_header = tunnel_header

    def next_iv(self) -> Optional[int]:
        """The IV the next packet will carry, or None once exhausted (see :meth:`pypsp.Encryptor.next_iv`)."""
        return self._enc.next_iv()

    def encrypt(self, pkt, iv: Optional[int] = None):  # type: ignore[no-untyped-def]
        """Encapsulate an ``IP``/``IPv6`` packet; returns the outer packet (IP/UDP/PSP).

        ``iv`` jumps the IV counter forward to that value (never back: an IV
        below :meth:`next_iv` would repeat one and raises
        :class:`pypsp.ConfigurationError`).
        """
        data = ip_bytes(pkt)
        if iv is not None:
            if isinstance(iv, (bytes, bytearray)):
                iv = int.from_bytes(iv, "big")
            self._enc.set_next_iv(iv)  # forward only: raises ConfigurationError below next_iv
        return ip_packet(self._enc.encrypt(data))

    def decrypt(self, pkt, verify: bool = True):  # type: ignore[no-untyped-def]
        """Verify and decrypt an IP/IPv6 packet carrying PSP; returns the original IP packet
        (transport mode) or the inner one (tunnel mode).

        Raises the typed exceptions of :mod:`pypsp.errors`
        (:class:`~pypsp.AuthenticationError`, :class:`~pypsp.NotPspError`, …);
        a packet for another SPI raises :class:`~pypsp.NoKeyError`.  The ICV
        is always verified (``verify=False`` is refused).
        """
        if not verify:
            raise ConfigurationError("the core always verifies the ICV")
        data = ip_bytes(pkt)
        if isinstance(pkt, Packet) and pkt.haslayer(PSP) and pkt[PSP].spi != self.spi:
            raise NoKeyError(f"packet SPI {pkt[PSP].spi:#010x} does not match the SA SPI {self.spi:#010x}", "no-key")
        result = self._dec.decrypt(data)
        if result.header.spi != self.spi:
            raise NoKeyError(f"packet SPI {result.header.spi:#010x} does not match the SA SPI {self.spi:#010x}", "no-key")
        return ip_packet(result.packet)

    def __repr__(self) -> str:
        return f"<PSPSecurityAssociation spi={self.spi:#010x} version={self.version} mode={self.mode}>"
