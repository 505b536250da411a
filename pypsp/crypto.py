"""PSP encryption and decryption of whole IP packets through the core."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from pecore import face, ops
from pecore.capture import Summary
from pecore.keys import KeyFile
from pypsp.errors import CaptureError, ConfigurationError, PspError, error_class, raise_psp
from pypsp.header import Header
from pecore.errors import status_message, status_name
from pecore.util import Buffer, Key, check_range, key_bytes, packet_buffer

MAX_IP_LEN = ops.MAX_IP_LEN
_MODES = ops.PSP_MODES
#: what a capture run raises: the CaptureError for the files, the ConfigurationError for ``jobs``
_CAPTURE_ERRORS = (CaptureError, ConfigurationError)


def _key_bytes(key: Key, what: str = "key") -> bytes:
    return key_bytes(key, what, ConfigurationError)


def _check_range(name: str, value: int, top: int) -> int:
    return check_range(name, value, top, ConfigurationError)


def kdf_label(version: int) -> int:
    """The default KDF label of a version (psp.md §5): "Pv<version>", 0x50763000 | version << 8."""
    return ops.psp_kdf_label(_check_range("version", version, 3))


def derive_key(master_key: Key, spi: int, version: int, *, label: Optional[int] = None) -> bytes:
    """Derive an SA key (psp.md §5): SP 800-108 counter mode, AES-256-CMAC.

    ``master_key`` is the 32-octet master key the SPI's MSB selects; the result
    is 16 octets for versions 0/2 and 32 for 1/3.  ``label`` overrides the
    default "Pv<version>" label (0x50763000 | version << 8).
    """
    mk = _key_bytes(master_key, "master key")
    if len(mk) != 32:
        raise ConfigurationError(f"master key must be 32 octets, not {len(mk)}", "bad-key-length")
    _check_range("spi", spi, 0xFFFFFFFF)
    _check_range("version", version, 3)
    st, key = ops.psp_derive_key(mk, spi, version, _check_range("label", label or 0, 0xFFFFFFFF))
    if st != ops.OK:
        raise_psp(st)
    return key


@dataclass(frozen=True)
class Decrypted:
    """A decrypted packet: the PSP header it arrived with and the recovered IP packet."""

    header: Header
    packet: bytes


def _decrypted(packet: bytes, header: dict) -> Decrypted:
    return Decrypted(Header._from_fields(header), packet)


def _master_pair(master_keys: Optional[Sequence[Optional[Key]]]) -> Tuple[Optional[bytes], Optional[bytes]]:
    if master_keys is None:
        return None, None
    if len(master_keys) != 2:
        raise ConfigurationError("master_keys is a pair (key0, key1); either may be None")
    pair = tuple(None if k is None else _key_bytes(k, f"master key {i}") for i, k in enumerate(master_keys))
    for i, k in enumerate(pair):
        if k is not None and len(k) != 32:
            raise ConfigurationError(f"master key {i} must be 32 octets, not {len(k)}", "bad-key-length")
    return pair  # type: ignore[return-value]


class Encryptor:
    """A sending PSP SA: encrypts whole IPv4/IPv6 packets.

    Give either ``key`` (the derived SA key: 16 octets for versions 0/2, 32 for
    1/3) or ``master_keys`` (key0, key1), from which the key for ``spi`` and
    ``version`` is derived.  ``mode`` is "transport" or "tunnel".  The crypt
    offset is in 4-octet words (0..63); in tunnel mode ``crypt_offset_ipv4`` /
    ``crypt_offset_ipv6`` override it by the inner IP version, as the
    reference tool's configs do.  ``vc`` (8 octets) adds a Virtualization
    Cookie.  IVs count up from ``first_iv`` and are never reused: after IV
    2**64-1 the SA refuses to send.  ``udp_sport`` is "xor" (inner ports
    XORed, the reference rule), a fixed port, or a callable taking the inner
    packet.  ``tunnel_header`` is an IPv4 (20-octet) or IPv6 (40-octet) header
    template for tunnel mode; by default the inner header is copied.

    An Encryptor is safe to share between threads (calls are serialised).
    """

    def __init__(
        self,
        *,
        spi: int,
        key: Optional[Key] = None,
        master_keys: Optional[Sequence[Optional[Key]]] = None,
        version: int = 0,
        mode: str = "transport",
        crypt_offset: int = 0,
        crypt_offset_ipv4: Optional[int] = None,
        crypt_offset_ipv6: Optional[int] = None,
        vc: Optional[Key] = None,
        sample: bool = False,
        drop: bool = False,
        first_iv: int = 1,
        udp_sport: Union[str, int, Callable[[bytes], int]] = "xor",
        udp_dport: int = 1000,
        tunnel_header: Optional[bytes] = None,
        kdf_label: Optional[int] = None,
    ) -> None:
        if (key is None) == (master_keys is None):
            raise ConfigurationError("give exactly one of key= (derived key) or master_keys=")
        if mode not in _MODES:
            raise ConfigurationError(f"mode must be 'transport' or 'tunnel', not {mode!r}")
        cfg: dict = dict(
            spi=_check_range("spi", spi, 0xFFFFFFFF),
            version=_check_range("version", version, 3),
            mode=_MODES[mode],
            crypt_offset=_check_range("crypt_offset", crypt_offset, 63),
            crypt_offset_ipv4=-1 if crypt_offset_ipv4 is None else _check_range("crypt_offset_ipv4", crypt_offset_ipv4, 63),
            crypt_offset_ipv6=-1 if crypt_offset_ipv6 is None else _check_range("crypt_offset_ipv6", crypt_offset_ipv6, 63),
            sample=bool(sample),
            drop=bool(drop),
            first_iv=_check_range("first_iv", first_iv, 0xFFFFFFFFFFFFFFFF),
            udp_dport=_check_range("udp_dport", udp_dport, 0xFFFF),
            kdf_label=_check_range("kdf_label", kdf_label or 0, 0xFFFFFFFF),
        )
        if vc is not None:
            vcb = _key_bytes(vc, "vc")
            if len(vcb) != 8:
                raise ConfigurationError(f"vc must be 8 octets, not {len(vcb)}")
            cfg.update(vc_present=1, vc=list(vcb))
        if key is not None:
            k = _key_bytes(key)
            cfg.update(key=k, key_len=len(k))
        else:
            mk0, mk1 = _master_pair(master_keys)
            cfg.update(master_key0=mk0, master_key1=mk1)
        hold = ()
        if udp_sport == "xor":
            cfg["sport_policy"] = ops.PSP_SPORT_XOR
        elif isinstance(udp_sport, int) and not isinstance(udp_sport, bool):
            cfg.update(sport_policy=ops.PSP_SPORT_FIXED, sport=_check_range("udp_sport", udp_sport, 0xFFFF))
        elif callable(udp_sport):
            hold = (ops.psp_sport_callback(udp_sport),)
            cfg.update(sport_policy=ops.PSP_SPORT_CALLBACK, sport_fn=hold[0])
        else:
            raise ConfigurationError("udp_sport must be 'xor', a port number or a callable")
        if tunnel_header is not None:
            th = bytes(tunnel_header)
            cfg.update(outer_header=th, outer_header_len=len(th))
        # a Python udp_sport sees the packets in order: captures run on one thread
        self._core = face.Sender(ops.PSP, cfg, refuse=raise_psp, raise_status=raise_psp, error_class=error_class,
                                 hold=hold, serial=bool(hold))
        self.spi = spi
        self.version = version
        self.mode = mode

    def next_iv(self) -> Optional[int]:
        """The IV the next packet will carry, or None once the SA used its last IV (then :meth:`encrypt` raises
        :class:`~pecore.errors.ExhaustedError`), as ``pyeesp.SA.next_iv()``."""
        return self._core.next_counter()

    def set_next_iv(self, next_iv: int) -> None:
        """Let the IVs continue at ``next_iv``; only forward, so no IV is ever reused under this key."""
        _check_range("next_iv", next_iv, 0xFFFFFFFFFFFFFFFF)
        st = self._core.set_next_counter(next_iv)
        if st != ops.OK:
            now = self.next_iv()
            raise ConfigurationError(
                f"next_iv {next_iv:#x} is below the next unused IV "
                f"{'(none: exhausted)' if now is None else f'{now:#x}'}: IVs only move forward",
                status_name(st))

    def encrypt(self, ip_packet: Buffer) -> bytes:
        """Encapsulate one IPv4/IPv6 packet (any bytes-like object); returns the outer IP packet."""
        return self._core.encap(packet_buffer(ip_packet, "ip_packet"))

    def seal(self, payload: Buffer, next_header: int) -> bytes:
        """Seal a bare PSP packet (header, VC, sealed payload and ICV; no IP or UDP header) around ``payload``
        -- the L4 segment in transport mode, the inner IP packet in tunnel mode -- whose protocol number is
        ``next_header``.  Spends one IV; :meth:`Decryptor.open` is its inverse."""
        buf = packet_buffer(payload, "payload")
        return self._core.seal(buf, _check_range("next_header", next_header, 255))

    def encrypt_batch(self, packets: Iterable[Buffer]) -> List[bytes]:
        """Encrypt many packets in one core call.  Raises on the first packet that fails: the
        packets before it have used their IVs and their results are in ``err.results``; it and
        the packets after it used none (``next_iv()`` is the IV the failed packet would have had)."""
        return self._core.encap_batch(packets)

    def encrypt_capture(self, in_path: str, out_path: str, **kwargs) -> Summary:
        """Encrypt every IP packet of a pcap/pcapng file at C speed (see :func:`pypsp.capture.encrypt_capture`)."""
        return face.encrypt_capture(self._core, in_path, out_path, errors=_CAPTURE_ERRORS, **kwargs)


class Decryptor:
    """A receiving PSP endpoint: verifies and decrypts PSP packets.

    Keys come from ``master_keys`` (key0, key1; the SPI's MSB selects one and
    keys are derived once per (SPI, version) and cached) and/or ``keys``, a
    table of SPI → derived key (or (SPI, version) → key), which is consulted
    first.  ``versions`` limits the accepted crypto versions.
    """

    def __init__(
        self,
        *,
        master_keys: Optional[Sequence[Optional[Key]]] = None,
        keys: Optional[Mapping[Union[int, Tuple[int, Optional[int]]], Key]] = None,
        versions: Iterable[int] = (0, 1, 2, 3),
        udp_dport: int = 1000,
        check_udp_checksum: bool = False,
        kdf_labels: Optional[Mapping[int, int]] = None,
    ) -> None:
        if master_keys is None and not keys:
            raise ConfigurationError("give master_keys= and/or keys=")
        mk0, mk1 = _master_pair(master_keys)
        mask = 0
        for v in versions:
            mask |= 1 << _check_range("version", v, 3)
        cfg = dict(master_key0=mk0, master_key1=mk1, versions=mask, udp_dport=_check_range("udp_dport", udp_dport, 0xFFFF),
                   check_udp_checksum=bool(check_udp_checksum))
        cfg["kdf_labels"] = {_check_range("version", v, 3): _check_range("label", label, 0xFFFFFFFF)
                             for v, label in (kdf_labels or {}).items()}
        self._core = face.Receiver(ops.PSP, cfg, refuse=raise_psp, error_class=error_class, result=_decrypted)
        for spec, key in (keys or {}).items():
            spi, version = spec if isinstance(spec, tuple) else (spec, None)
            k = _key_bytes(key)
            st = self._core.call(ops.psp_add_key, _check_range("spi", spi, 0xFFFFFFFF), version, k)
            if st != ops.OK:
                what = "duplicate key" if status_name(st) == "invalid-argument" else status_message(st)
                raise ConfigurationError(f"key for SPI {spi:#010x}: {what}", status_name(st))

    def decrypt(self, packet: Buffer) -> Decrypted:
        """Decapsulate one outer IP packet (IPv4/IPv6 + UDP + PSP; any bytes-like object).

        Returns the header and the recovered packet: in transport mode the
        original IP packet, in tunnel mode the inner IP packet.
        """
        return self._core.decap(packet_buffer(packet, "packet"))

    def open(self, psp: Buffer) -> Decrypted:
        """Open a bare PSP packet (a UDP payload).  ``packet`` is then the inner part:
        the L4 segment in transport mode, the inner IP packet in tunnel mode."""
        return self._core.open(packet_buffer(psp, "psp"))

    def decrypt_batch(self, packets: Iterable[Buffer]) -> List[Union[Decrypted, PspError]]:
        """Decrypt many packets in one core call; a failed packet's slot holds its exception."""
        return self._core.decap_batch(packets)

    def decrypt_capture(self, in_path: str, out_path: str, **kwargs) -> Summary:
        """Decrypt every PSP packet of a pcap/pcapng file at C speed (see :func:`pypsp.capture.decrypt_capture`)."""
        return face.decrypt_capture(self._core, in_path, out_path, errors=_CAPTURE_ERRORS, **kwargs)

    @classmethod
    def from_key_file(cls, key_file: KeyFile, **kwargs) -> "Decryptor":  # type: ignore[no-untyped-def]
        """A receiver of a parsed key file's PSP keys (:func:`pecore.keys.load_key_file`: its ``psp-master``
        and ``psp-key`` lines), as ``pyeesp.Receiver.from_key_file`` and ``pyesp.Receiver.from_key_file``;
        ``kwargs`` as for the constructor (``udp_dport``, ``versions``, ...)."""
        master = key_file.psp_master_keys
        return cls(master_keys=master if any(k is not None for k in master) else None,
                   keys=dict(key_file.psp_keys) or None, **kwargs)
