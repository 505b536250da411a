"""EESP Security Associations over the core: encrypt and decrypt whole IP packets.

Naming rule (both faces, scapy layers included): ``session_id`` is the 16-bit Base Header field, a value read
from or written into a header (``Header.session_id``, the scapy ``EESP`` layer's field, ``Decrypted.header``);
``sub_sa_id`` is the Sub SA a call selects or addresses on an SA (``encrypt(..., sub_sa_id=)``,
``next_iv(sub_sa_id)``, ``derive_sub_sa_key(root, sub_sa_id, ...)``, ``max_sub_sa_id``).  The numbers are the
same (eesp.md §2: the Session ID here is the Sub SA ID); the name says whether you read a packet or choose SA
state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Union

from pecore import face, ops
from pecore.errors import status_message, status_name, status_names
from pecore.keys import KeyFile
from pecore.protocol import EESP_SUITES, encr_id, keymat_key_bits
from pecore.util import (Buffer, Key, check_range, check_sa_added, config_error, destination_fields, key_bytes,
                         open_destination, packet_buffer, udp_checksum_mode)
from pyeesp.errors import ConfigurationError, EespError, error_class, raise_eesp
from pyeesp.header import Header

MAX_IP_LEN = ops.MAX_IP_LEN

#: IKEv2 ENCR transform IDs by suite name (eesp.md §10), from the core's suite table.
SUITES = {s.name: s.id for s in EESP_SUITES}
SSKDFS = {None: 0, "none": 0, "hkdf-sha256": 1, "hkdf-sha384": 2, "hkdf-sha512": 3, "aes256-cmac": 4}
_MODES, _FORMATS, _AADS = ops.EESP_MODES, ops.EESP_FORMATS, ops.EESP_AADS
_SSKDF_UNDEFINED = status_names().index("sskdf-undefined")


def suite_id(suite: Union[str, int]) -> int:
    """IKEv2 ENCR ID from a suite name ("aes-gcm-16", "ENCR_AES_GCM_16") or the ID itself."""
    return encr_id(suite, "EESP", ConfigurationError)


def _sskdf_id(sskdf: Optional[str]) -> int:
    key = sskdf.lower().replace("_", "-") if isinstance(sskdf, str) else sskdf
    key = {"sha256": "hkdf-sha256", "sha384": "hkdf-sha384", "sha512": "hkdf-sha512",
           "sskdf-hkdf-sha2-256": "hkdf-sha256", "sskdf-hkdf-sha2-384": "hkdf-sha384",
           "sskdf-hkdf-sha2-512": "hkdf-sha512", "sskdf-aes256-cmac": "aes256-cmac"}.get(key, key)
    if key not in SSKDFS:
        raise ConfigurationError(f"unknown SSKDF {sskdf!r}; one of hkdf-sha256, hkdf-sha384, hkdf-sha512")
    if SSKDFS[key] == 4:
        raise ConfigurationError(status_message(_SSKDF_UNDEFINED), "sskdf-undefined")
    return SSKDFS[key]


def derive_sub_sa_key(root_key: Key, sub_sa_id: int, length: int, sskdf: str = "hkdf-sha256") -> bytes:
    """KEYMAT for one Sub SA (eesp.md §12): HKDF-Expand(root, the Sub SA ID as 2 octets big-endian, length).

    ``length`` is key + salt of the suite (20 for AES-128-GCM, 36 for AES-256-GCM or ChaCha20-Poly1305, …).
    """
    root = key_bytes(root_key, "root key", ConfigurationError)
    check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
    kdf = _sskdf_id(sskdf)
    if kdf == 0:
        raise ConfigurationError("derive_sub_sa_key needs an SSKDF: hkdf-sha256, hkdf-sha384 or hkdf-sha512")
    # HKDF-Expand yields at most 255 hash lengths (RFC 5869).
    check_range("length", length, 255 * {1: 32, 2: 48, 3: 64}[kdf], ConfigurationError, bottom=1)
    st, keymat = ops.eesp_derive_sub_sa_key(kdf, root, sub_sa_id, length)
    if st != ops.OK:
        raise_eesp(st)
    return keymat


@dataclass(frozen=True)
class Decrypted:
    """A decrypted packet and what its EESP headers said."""

    header: Header
    packet: bytes
    seq: Optional[int]
    next_header: int
    pad_len: int
    full_format: bool
    iv: Optional[bytes]
    udp_encap: bool
    #: a receiver in ``check_udp_checksum="note"`` mode: what an endpoint would have refused the packet for
    #: (``udp-zero-checksum``, ``udp-bad-checksum``), else None
    udp_checksum: Optional[str] = None

    @property
    def sub_sa_id(self) -> int:
        return self.header.session_id


def _make_config(
    spi, suite, key, root_key, sskdf, key_bits, mode, format, seq, aad, anti_replay, replay_window,
    max_sub_sa_id, max_crypt_offset, crypt_offset, align_options, strict, options, ip_protocol, udp_encap,
    udp_sport, udp_dport, tunnel_header, dst, max_live_sub_sas=1024,
):
    """The fields of a pe_eesp_sa_config from SA settings (pecore.face.c_struct sets them)."""
    err = ConfigurationError
    if (key is None) == (root_key is None):
        raise err("give exactly one of key= (key || salt) or root_key= (with sskdf=)")
    if key is not None and sskdf not in (None, "none"):
        raise err("sskdf= derives Sub SA keys from root_key=; with key= there are no Sub SAs")
    if root_key is not None and sskdf is None:
        sskdf = "hkdf-sha256"
    if mode not in _MODES or format not in _FORMATS or aad not in _AADS:
        raise err(f"mode must be one of {list(_MODES)}, format one of {list(_FORMATS)}, aad one of {list(_AADS)}")
    c: dict = dict(spi=check_range("spi", spi, 0xFFFFFFFF, err), encr=suite_id(suite))
    c["sskdf"] = _sskdf_id(sskdf) if key is None else 0
    k = None if key is None else key_bytes(key, "key", err)
    # As pyesp.SA: the AES key size from the KEYMAT's length unless given (with root_key= the Sub SA keys are
    # derived: the size is key_bits, 128 by default).
    c["key_bits"] = keymat_key_bits(c["encr"], k, key_bits, "EESP", err)
    if k is not None:
        c.update(key=k, key_len=len(k))
    else:
        r = key_bytes(root_key, "root key", err)
        c.update(root_key=r, root_key_len=len(r))
    c.update(mode=_MODES[mode], format=_FORMATS[format], aad=_AADS[aad], seq_present=bool(seq),
             anti_replay=bool(anti_replay))
    c["replay_window"] = check_range("replay_window", replay_window, 1 << 20, err, bottom=64)
    c["max_sub_sa_id"] = ops.EESP_NO_LIMIT if max_sub_sa_id is None else check_range("max_sub_sa_id", max_sub_sa_id, 0xFFFF, err)
    c["max_crypt_offset"] = (ops.EESP_NO_LIMIT if max_crypt_offset is None
                             else check_range("max_crypt_offset", max_crypt_offset, 255, err))
    c["crypt_offset"] = -1 if crypt_offset is None else check_range("crypt_offset", crypt_offset, 63, err)
    c.update(align_options=bool(align_options), strict=bool(strict))
    opts = bytes(options)
    c.update(extra_options=opts or None, extra_options_len=len(opts))
    c["ip_protocol"] = check_range("ip_protocol", ip_protocol, 255, err)
    c["udp_encap"] = bool(udp_encap)
    c["max_live_sub_sas"] = check_range("max_live_sub_sas", max_live_sub_sas, 65536, err, bottom=1)
    c["udp_sport"] = check_range("udp_sport", udp_sport, 0xFFFF, err)
    c["udp_dport"] = check_range("udp_dport", udp_dport, 0xFFFF, err)
    if tunnel_header is not None:
        th = bytes(tunnel_header)
        c.update(outer_header=th, outer_header_len=len(th))
    c.update(destination_fields(dst, err))
    return c


class Receiver:
    """Receives for many SAs at once (looked up by SPI), e.g. everything a key file lists.

    Every SA's receiving state (Sub SA keys, replay windows) lives here.  ``esp_spis``: the SPIs of the ESP
    SAs received on the same UDP port (a key file's ``esp-sa`` lines); a UDP payload that starts with one is
    ESP (``esp-in-udp``) whatever its first octet (eesp.md §14 step 3).  ``check_udp_checksum`` and
    ``udp_zero_checksum_v6``: as :class:`pyesp.Receiver`'s (RFC 8200 §8.1, RFC 6936; docs/spec/eesp.md D17).
    """

    def __init__(self, sas: Iterable["SA"], *, ip_protocol: Optional[int] = None, udp_port: int = 4500,
                 check_udp_checksum: Union[bool, str] = True, udp_zero_checksum_v6: bool = False,
                 esp_spis: Iterable[int] = ()) -> None:
        sas = list(sas)
        protocol = ip_protocol if ip_protocol is not None else (sas[0]._settings["ip_protocol"] if sas else 49)
        rc = dict(ip_protocol=check_range("ip_protocol", protocol, 255, ConfigurationError),
                  udp_port=check_range("udp_port", udp_port, 0xFFFF, ConfigurationError),
                  check_udp_checksum=udp_checksum_mode(check_udp_checksum, ConfigurationError),
                  udp_zero_checksum_v6=bool(udp_zero_checksum_v6))
        self._core = face.Receiver(ops.EESP, rc, refuse=raise_eesp, error_class=error_class, result=_decrypted)
        for sa in sas:
            check_sa_added(self._core.call(ops.eesp_add_sa, _make_config(**sa._settings)), sa._settings["spi"],
                           ConfigurationError)
        for spi in esp_spis:
            st = self._core.call(ops.eesp_add_esp_spi, check_range("esp_spis", spi, 0xFFFFFFFF, ConfigurationError))
            if st != ops.OK:
                raise_eesp(st)

    @classmethod
    def from_key_file(cls, key_file: KeyFile, **kwargs) -> "Receiver":  # type: ignore[no-untyped-def]
        """A receiver of every ``eesp-sa`` line of a parsed key file (:func:`pecore.keys.load_key_file`), with
        its ``esp-sa`` lines' SPIs as ``esp_spis``, as ``pyesp.Receiver.from_key_file`` and
        ``pypsp.Decryptor.from_key_file``; ``kwargs`` as for the constructor (``udp_port``, ...)."""
        protocols = {e.settings["ip_protocol"] for e in key_file.eesp_sas}
        if len(protocols) > 1:
            raise ConfigurationError("eesp-sa lines disagree on ip-protocol; decrypt them separately")
        # A Crypt Offset only shapes what an SA sends; receiving needs none (and sending one needs the peer's
        # maximum).  The key file's ESP SAs share UDP 4500: their SPIs are ESP whatever their first octet.
        sas = [SA(**{**e.settings, "crypt_offset": None}) for e in key_file.eesp_sas]  # type: ignore[arg-type]
        kwargs.setdefault("ip_protocol", protocols.pop() if protocols else None)
        kwargs.setdefault("esp_spis", [e.spi for e in key_file.esp_sas])
        return cls(sas, **kwargs)

    def decrypt(self, packet: Buffer) -> Decrypted:
        """Verify, replay-check and decrypt one outer IP packet (any bytes-like object).

        Raises :class:`~pyeesp.ReplayError` for duplicates and too-old packets
        (checked before decryption; only a verified packet moves the window).
        """
        return self._core.decap(packet_buffer(packet, "packet"))

    def open(self, eesp: Buffer, *, ip_version: int = 4, dst: Optional[str] = None,
             replay: bool = True) -> Decrypted:
        """Open bare EESP octets (from the Base Header on: what follows the IP headers, or a UDP 4500 payload).

        ``packet`` is then the inner part: the tunnelled IP packet, or in transport mode the upper-layer
        segment whose protocol is ``next_header``.  ``ip_version`` (4 or 6) and ``dst`` (the outer
        destination) pick the SA as :meth:`decrypt` would.  ``replay=False`` neither checks nor moves the
        replay window (for looking at packets again).
        """
        buf = packet_buffer(eesp, "eesp")
        return self._core.open(buf, ip_version, open_destination(ip_version, dst, ConfigurationError), replay)

    def decrypt_batch(self, packets: Iterable[Buffer]) -> List[Union[Decrypted, EespError]]:
        """Decrypt many packets, in order, in one core call (pe_batch_transform); a failed packet's slot holds
        its exception.  Replay windows move as they would packet by packet."""
        return self._core.decap_batch(packets)


class SA:
    """One EESP SA (one direction), in the shape of scapy's ``SecurityAssociation``.

    ``suite`` names the AEAD ("aes-gcm-16", "aes-ccm-8", "aes-gmac",
    "chacha20-poly1305", "aes-gcm-16-iiv", …, or the IKEv2 ENCR ID) and
    ``key_bits`` the AES key size (default: what the length of ``key`` says,
    as for ``pyesp.SA``; 128 with ``root_key``).  Keys: ``key`` is the KEYMAT block
    key ‖ salt (no Sub SAs), or ``root_key`` with ``sskdf``
    ("hkdf-sha256/384/512") derives each Sub SA's key ‖ salt on first use.
    ``mode`` "tunnel" or "transport"; ``format`` "auto" (D2), "full" or
    "optimized"; ``seq=False`` omits the Sequence Number (and anti-replay);
    ``aad`` "draft" or "linux-xfrm" (explicit IV left out of the AAD);
    ``crypt_offset`` (4-octet units) adds a Crypt Offset option on send,
    ``max_crypt_offset`` allows it on receive; ``options`` are extra option
    TLVs (bytes) sent after it; ``udp_encap`` sends in UDP 4500, else IP
    protocol ``ip_protocol`` (49, provisional).  ``tunnel_header`` is an outer
    IPv4/IPv6 header template (default: a copy of the inner header).

    ``dst`` binds the SA to a destination address on receive, so one SPI can
    serve several destinations.  ``max_live_sub_sas`` (1..65536) caps the Sub
    SA key contexts kept at once, on send and on receive; the least recently
    used one is evicted and derived again later, keeping its sequence number
    and window top (docs/security.md).

    ``encrypt`` and ``decrypt`` may be called on the same object (the same
    keys serve both, as in tests); calls are serialised, so threads may share
    it.  Sequence numbers and IVs never repeat within a Sub SA.
    """

    def __init__(
        self,
        spi: int,
        suite: Union[str, int] = "aes-gcm-16",
        *,
        key: Optional[Key] = None,
        root_key: Optional[Key] = None,
        sskdf: Optional[str] = None,
        key_bits: Optional[int] = None,
        mode: str = "tunnel",
        format: str = "auto",
        seq: bool = True,
        aad: str = "draft",
        anti_replay: bool = True,
        replay_window: int = 1024,
        max_sub_sa_id: Optional[int] = None,
        max_crypt_offset: Optional[int] = None,
        crypt_offset: Optional[int] = None,
        align_options: bool = True,
        strict: bool = False,
        options: bytes = b"",
        ip_protocol: int = 49,
        udp_encap: bool = False,
        udp_sport: int = 4500,
        udp_dport: int = 4500,
        tunnel_header: Optional[bytes] = None,
        dst: Optional[str] = None,
        max_live_sub_sas: int = 1024,
    ) -> None:
        settings = dict(locals())
        del settings["self"]
        self._core = face.Sender(ops.EESP, _make_config(**settings), refuse=_refused_config, raise_status=raise_eesp,
                                 error_class=error_class)
        self._settings = settings
        # its own packets arrive on udp_dport; an SA alone reads captures too: it decrypts and notes (D17)
        self._receiver = Receiver([self], udp_port=udp_dport, check_udp_checksum="note")
        self.spi, self.mode, self.suite = spi, mode, suite

    def next_iv(self, sub_sa_id: int = 0) -> Optional[int]:
        """The IV counter of a Sub SA: what the next packet carries as its sequence number and (unless
        ``encrypt(iv=)`` says otherwise) its IV, eesp.md §10; None once exhausted (then :meth:`encrypt` raises
        :class:`~pecore.errors.ExhaustedError`).  The same call as ``pypsp.Encryptor.next_iv()``."""
        return self.next_seq(sub_sa_id)

    def set_next_iv(self, next_iv: int, sub_sa_id: int = 0) -> None:
        """Let a Sub SA's counter continue at ``next_iv`` (see :meth:`set_next_seq`), as ``pypsp.Encryptor``."""
        self.set_next_seq(next_iv, sub_sa_id)

    def next_seq(self, sub_sa_id: int = 0) -> Optional[int]:
        """The sequence number (IV counter without SN) the next packet of a Sub SA carries; None once exhausted."""
        check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
        # under the SA's lock: an encrypt() in another thread may grow the Sub SA table
        return self._core.next_counter(sub_sa_id)

    def set_next_seq(self, next_seq: int, sub_sa_id: int = 0) -> None:
        """Let a Sub SA continue at ``next_seq``; only forward, so no sequence number or IV is ever reused."""
        check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
        check_range("next_seq", next_seq, 2**64 - 1, ConfigurationError, bottom=1)
        st = self._core.set_next_counter(next_seq, sub_sa_id)
        if st != ops.OK:
            raise_eesp(st, "sequence numbers only move forward" if status_name(st) == "invalid-argument" else None)

    def encrypt(self, ip_packet: Buffer, sub_sa_id: int = 0, *, iv: Union[int, bytes, None] = None,
                pad_len: Optional[int] = None) -> bytes:
        """Encapsulate one IPv4/IPv6 packet (any bytes-like object) on a Sub SA; returns the outer IP packet.

        For test packets and for rebuilding foreign ones: ``iv`` (an int or 8 octets) is sent as the explicit
        IV instead of the sequence number (suites with an explicit IV only; the caller then owns its
        uniqueness), ``pad_len`` (0..255) pads with that many zero octets instead of the D11 minimum.
        """
        check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
        buf = packet_buffer(ip_packet, "ip_packet")
        return self._core.encap(buf, sub_sa_id, _packet_opts(iv, pad_len))

    def seal(self, payload: Buffer, next_header: int, sub_sa_id: int = 0, *, ip_version: int = 4,
             iv: Union[int, bytes, None] = None, pad_len: Optional[int] = None) -> bytes:
        """Seal bare EESP octets, from the Base Header on (no IP or UDP header), around ``payload`` -- the
        inner IP packet in tunnel mode, the upper-layer segment in transport mode -- whose protocol number is
        ``next_header``.  ``ip_version`` is the carrier's (it picks the option alignment, §7); ``iv`` and
        ``pad_len`` as in :meth:`encrypt`.  :meth:`Receiver.open` is its inverse."""
        check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
        check_range("next_header", next_header, 255, ConfigurationError)
        if ip_version not in (4, 6):
            raise ConfigurationError(f"ip_version must be 4 or 6, not {ip_version!r}")
        buf = packet_buffer(payload, "payload")
        return self._core.seal(buf, next_header, ip_version, sub_sa_id, _packet_opts(iv, pad_len))

    def encrypt_batch(self, packets: Iterable[Buffer], sub_sa_id: int = 0) -> List[bytes]:
        """Encrypt many packets on one Sub SA in one core call (pe_batch_transform_until_failure), as
        ``pypsp.Encryptor.encrypt_batch``.  Raises on the first packet that fails: the packets before it used
        their sequence numbers and their results are in ``err.results``; it and the packets after it used
        none (``next_iv(sub_sa_id)`` is the one the failed packet would have had)."""
        check_range("sub_sa_id", sub_sa_id, 0xFFFF, ConfigurationError)
        # Sub SA 0 runs the core's own transform, another Sub SA a thin callback in the core's batch loop
        # (pecore.ops); encrypt_capture, which sets its own number of capture Sub SAs, takes the same lock.
        return self._core.encap_batch(packets, sub_sa_id)

    def decrypt(self, packet: bytes) -> Decrypted:
        """Verify, replay-check and decrypt one outer IP packet (see :meth:`Receiver.decrypt`)."""
        return self._receiver.decrypt(packet)

    def open(self, eesp: Buffer, **kwargs) -> Decrypted:
        """Open bare EESP octets (see :meth:`Receiver.open`)."""
        return self._receiver.open(eesp, **kwargs)

    def decrypt_batch(self, packets: Iterable[Buffer]) -> List[Union[Decrypted, EespError]]:
        """Decrypt many packets in order; a failed packet's slot holds its exception."""
        return self._receiver.decrypt_batch(packets)


def _decrypted(packet: bytes, header: dict, **fields) -> Decrypted:  # type: ignore[no-untyped-def]
    """A Decrypted of the fields pecore.ops.eesp_info_fields read."""
    return Decrypted(header=Header._from_fields(header), packet=packet, **fields)


def _refused_config(st: int) -> None:
    raise config_error(st, ConfigurationError)


def _packet_opts(iv: Union[int, bytes, None], pad_len: Optional[int]):  # type: ignore[no-untyped-def]
    """A pe_eesp_packet_opts for encrypt(iv=, pad_len=), or None when neither is given."""
    if iv is None and pad_len is None:
        return None
    raw = None
    if iv is not None:
        if isinstance(iv, int) and not isinstance(iv, bool):
            raw = check_range("iv", iv, 2**64 - 1, ConfigurationError).to_bytes(8, "big")
        else:
            raw = key_bytes(iv, "iv", ConfigurationError)
            if len(raw) != 8:
                raise ConfigurationError(f"iv must be 8 octets, not {len(raw)}")
    if pad_len is not None:
        check_range("pad_len", pad_len, 255, ConfigurationError)
    return ops.eesp_packet_opts(raw, pad_len)
