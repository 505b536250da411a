"""ESP Security Associations over the core (RFC 4303): encrypt and decrypt whole IP packets.

The same shape as :mod:`pyeesp.sa` (README.md, "One shape"): an :class:`SA` sends and, for tests, receives
its own packets; a :class:`Receiver` receives for many SAs at once, looked up by SPI (and destination).
The suites are the IKEv2 ENCR IDs of EESP's table (one table in the core for both protocols).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Union

from pecore import face, ops
from pecore.errors import status_name
from pecore.keys import KeyFile
from pecore.protocol import ESP_SUITES, EespSuite, encr_id, esp_suite, keymat_key_bits
from pecore.util import (Buffer, Key, check_range, check_sa_added, config_error, destination_fields, key_bytes,
                         open_destination, packet_buffer, udp_checksum_mode)
from pyesp.errors import ConfigurationError, EspError, error_class, raise_esp
from pyesp.header import Header

MAX_IP_LEN = ops.MAX_IP_LEN

#: IKEv2 ENCR transform IDs by suite name, from the core's suite table (the same names as EESP's), then ESP's
#: AES-CBC rows (ENCR 12 both: :data:`INTEG` tells them apart).
SUITES = {s.name: s.id for s in ESP_SUITES}
#: IKEv2 INTEG transform IDs by suite name: 0 for the AEADs, 2 (HMAC-SHA1-96) or 12 (HMAC-SHA2-256-128) with AES-CBC.
INTEG = {s.name: s.integ for s in ESP_SUITES}
_MODES = ops.ESP_MODES
_SEQ32_MAX = 0xFFFFFFFF


def suite_id(suite: Union[str, int]) -> int:
    """IKEv2 ENCR ID from a suite name ("aes-gcm-16", "ENCR_AES_GCM_16", "aes-cbc-hmac-sha1-96") or the ID itself."""
    return suite_row(suite).id


def suite_row(suite: Union[str, int]) -> EespSuite:
    """The core's row of an ESP suite (name, IKEv2 name, or a combined-mode suite's ENCR ID)."""
    row = esp_suite(suite) if isinstance(suite, str) else None
    if row is None:
        row = esp_suite(encr_id(suite, "ESP", ConfigurationError))
    assert row is not None
    return row


def _encauth_key_bits(row: EespSuite, k: bytes, key_bits: Optional[int]) -> int:
    """AES-CBC + HMAC: the AES key size of a KEYMAT encryption key || integrity key (RFC 7296 §2.17)."""
    sizes = [8 * n for n in row.key_lens]
    if key_bits is not None and key_bits not in sizes:
        raise ConfigurationError(f"{row.name} takes {' or '.join(map(str, sizes))}-bit keys, not key_bits={key_bits}",
                                 "esp-bad-suite")
    lens = row.key_lens if key_bits is None else (key_bits // 8,)
    if len(k) - row.integ_key_len not in lens:
        raise ConfigurationError(
            f"key must be the AES key || the {row.integ_key_len}-octet integrity key for {row.name}: "
            f"{' or '.join(str(n + row.integ_key_len) for n in lens)} octets, not {len(k)}", "bad-key-length")
    return 8 * (len(k) - row.integ_key_len)


@dataclass(frozen=True)
class Decrypted:
    """A decrypted packet and what its ESP header and trailer said.

    ``packet``: the inner IP packet (tunnel), the packet with its IP header back in front (transport,
    :meth:`Receiver.decrypt`), or the payload (:meth:`Receiver.open`).  ``seq`` is the whole sequence
    number (with ESN the inferred 64 bits, RFC 4303 Appendix A2.2), ``seq_low`` the 32-bit field on the
    wire.  ``iv``: the explicit IV (None for implicit-IV suites, RFC 8750).
    """

    packet: bytes
    spi: int
    seq: int
    seq_low: int
    next_header: int
    pad_len: int
    udp_encap: bool
    iv: Optional[bytes]
    icv_valid: bool
    mode: str
    esn: bool
    #: a receiver in ``check_udp_checksum="note"`` mode: what an endpoint would have refused the packet for
    #: (``udp-zero-checksum``, ``udp-bad-checksum``), else None
    udp_checksum: Optional[str] = None
    #: tunnel mode: octets of TFC padding that followed the inner packet (RFC 4303 §2.7), dropped
    tfc_pad_len: int = 0

    @property
    def header(self) -> Header:
        """The ESP header as it was on the wire."""
        return Header(self.spi, self.seq_low)


def _make_config(spi, suite, key, key_bits, mode, esn, anti_replay, replay_window, replay_top, first_seq,
                 udp_encap, udp_sport, udp_dport, outer_header, dst, tfc_pad, for_receiver):
    """The fields of a pe_esp_sa_config from SA settings (pecore.face.c_struct sets them)."""
    err = ConfigurationError
    if key is None:
        raise err("key= (KEYMAT: key || salt) is required")
    if mode not in _MODES:
        raise err(f"mode must be one of {list(_MODES)}, not {mode!r}")
    row = suite_row(suite)
    c: dict = dict(spi=check_range("spi", spi, 0xFFFFFFFF, err), encr=row.id, integ=row.integ)
    k = key_bytes(key, "key", err)
    c["key_bits"] = (_encauth_key_bits(row, k, key_bits) if row.integ
                     else keymat_key_bits(c["encr"], k, key_bits, "ESP", err))
    c.update(key=k, key_len=len(k), mode=_MODES[mode], esn=bool(esn), anti_replay=bool(anti_replay))
    c["replay_window"] = 0 if replay_window is None else check_range("replay_window", replay_window, 1 << 20, err, 64)
    check_range("first_seq", first_seq, 2**64 - 1, err, bottom=1)
    top = check_range("replay_top", replay_top, 2**64 - 1, err)
    # A receiver resuming an SA at first_seq has seen everything below it (the key file's first-seq rule).
    c["replay_top"] = (top or first_seq - 1) if for_receiver else 0
    c["udp_encap"] = bool(udp_encap)
    c["udp_sport"] = check_range("udp_sport", udp_sport, 0xFFFF, err)
    c["udp_dport"] = check_range("udp_dport", udp_dport, 0xFFFF, err)
    tfc = check_range("tfc_pad", tfc_pad, ops.ESP_MAX_TFC_PAD, err)
    if tfc and mode != "tunnel":
        raise err("tfc_pad needs mode='tunnel' (RFC 4303 §2.7: only there does the payload say its own length)")
    c["tfc_pad_len"] = 0 if for_receiver else tfc
    if outer_header is not None:
        oh = key_bytes(outer_header, "outer_header", err) if isinstance(outer_header, str) else bytes(outer_header)
        c.update(outer_header=oh, outer_header_len=len(oh))
    c.update(destination_fields(dst, err))
    return c


class Receiver:
    """Receives for many SAs at once (looked up by SPI, and destination for SAs bound to one), e.g. every
    ``esp-sa`` line of a key file.  Every SA's receiving state (replay window, ESN top) lives here.

    ``udp_port``: the UDP encapsulation port (RFC 3948).  On that port the SPI of an SA held here is ESP,
    whatever its first octet; ``eesp_on_port`` (default on) passes over what else eesp.md §14 calls EESP (a
    first octet 0x80) as ``eesp-in-udp``; off for a host without EESP (docs/guide-esp.md).

    ``check_udp_checksum`` (UDP encapsulation): True, an endpoint's default, refuses a wrong non-zero checksum
    (``udp-bad-checksum``, RFC 1122 §4.1.3.4) and 0 over IPv6 (``udp-zero-checksum``, RFC 8200 §8.1) unless
    ``udp_zero_checksum_v6`` opts into RFC 6936's zero-checksum mode; ``"note"``, for captures others made,
    decrypts such packets and names the problem in ``Decrypted.udp_checksum``; False does not look.
    """

    def __init__(self, sas: Iterable["SA"], *, udp_port: int = 4500, check_udp_checksum: Union[bool, str] = True,
                 udp_zero_checksum_v6: bool = False, eesp_on_port: bool = True) -> None:
        sas = list(sas)
        rc = dict(udp_port=check_range("udp_port", udp_port, 0xFFFF, ConfigurationError),
                  check_udp_checksum=udp_checksum_mode(check_udp_checksum, ConfigurationError),
                  udp_zero_checksum_v6=bool(udp_zero_checksum_v6), eesp_on_port=bool(eesp_on_port))
        self._core = face.Receiver(ops.ESP, rc, refuse=raise_esp, error_class=error_class, result=Decrypted)
        #: the core's pe_esp_rx, which pecore.protocol.locate_esp asks whether it holds an SPI (eesp.md §14 step 3)
        self._rx = self._core.c
        for sa in sas:
            if not isinstance(sa, SA):
                raise TypeError(f"sas must hold pyesp.SA objects, not {type(sa).__name__}")
            check_sa_added(self._core.call(ops.esp_add_sa, _make_config(**sa._settings, for_receiver=True)),
                           sa._settings["spi"], ConfigurationError)

    @classmethod
    def from_key_file(cls, key_file: KeyFile, **kwargs) -> "Receiver":  # type: ignore[no-untyped-def]
        """A receiver of every ``esp-sa`` line of a parsed key file (:func:`pecore.keys.load_key_file`), as
        ``pyeesp.Receiver.from_key_file`` and ``pypsp.Decryptor.from_key_file``; ``kwargs`` as for the
        constructor (``udp_port``, ``eesp_on_port``, ...)."""
        return cls([SA(**e.settings) for e in key_file.esp_sas], **kwargs)  # type: ignore[arg-type]

    def decrypt(self, packet: Buffer) -> Decrypted:
        """Verify, replay-check and decrypt one outer IP packet (any bytes-like object): ESP over IP
        protocol 50, or in UDP on the receiver's port.

        Raises :class:`~pyesp.ReplayError` for duplicates and too-old packets (checked before decryption;
        only a verified packet moves the window), :class:`~pyesp.NotEspError` for packets that are not ESP.
        """
        return self._core.decap(packet_buffer(packet, "packet"))

    def open(self, esp: Buffer, *, ip_version: int = 4, dst: Optional[str] = None,
             replay: bool = True) -> Decrypted:
        """Open bare ESP octets (from the SPI on: the IP payload, or the UDP 4500 payload).

        ``packet`` is then the inner part: the tunnelled IP packet, or in transport mode the upper-layer
        segment whose protocol is ``next_header``.  ``ip_version`` (4 or 6) and ``dst`` (the outer
        destination) pick the SA as :meth:`decrypt` would.  ``replay=False`` neither checks nor moves the
        replay window (``PE_ESP_OPEN_NO_REPLAY``, for looking at packets again; the ESN inference still
        reads the window).
        """
        buf = packet_buffer(esp, "esp")
        return self._core.open(buf, ip_version, open_destination(ip_version, dst, ConfigurationError), replay)

    def decrypt_batch(self, packets: Iterable[Buffer]) -> List[Union[Decrypted, EspError]]:
        """Decrypt many packets, in order, in one core call (pe_batch_transform); a failed packet's slot holds
        its exception.  Replay windows move as they would packet by packet."""
        return self._core.decap_batch(packets)


class SA:
    """One ESP SA (one direction), in the shape of :class:`pyeesp.SA` and scapy's ``SecurityAssociation``.

    - ``suite``: "aes-gcm-16" (also -8, -12; RFC 4106), "aes-ccm-8/12/16" (RFC 4309), "chacha20-poly1305"
      (RFC 7634), "aes-gmac" (RFC 4543), "aes-gcm-16-iiv", "aes-ccm-8-iiv", "chacha20-poly1305-iiv"
      (RFC 8750), or the IKEv2 ENCR ID (:data:`SUITES`); "aes-cbc-hmac-sha1-96" and "aes-cbc-hmac-sha256-128"
      (AES-CBC, RFC 3602, with HMAC-SHA-1-96, RFC 2404, or HMAC-SHA-256-128, RFC 4868; encrypt-then-MAC).
    - ``key``: the KEYMAT block key ‖ salt (bytes or hex): a 4-octet salt, 3 for CCM, ends it; for AES-CBC
      the AES key ‖ the integrity key (20 octets for SHA-1, 32 for SHA-256; RFC 7296 §2.17).  The AES
      key size follows from its length (or give ``key_bits``).
    - ``mode`` "tunnel" (default, as for EESP and the key file) or "transport"; ``esn``: extended sequence
      numbers (RFC 4303 §2.2.1: the high half is in the AAD, never on the wire).
    - Receiving: ``anti_replay``, ``replay_window`` (packets, 64..2^20; None: the core's 1024),
      ``replay_top`` (the highest number already accepted, to resume an SA: it and every number below it
      count as received; it places the ESN inference),
      ``dst`` (bind the SA to a destination address, so one SPI can serve several).
    - Sending: ``first_seq`` (the first sequence number, to resume an SA; a receiver made from the same SA
      takes ``first_seq - 1`` as its top unless ``replay_top`` is given, as a key file's ``first-seq``
      says), ``udp_encap`` with ``udp_sport``/``udp_dport`` (RFC 3948), ``outer_header`` (tunnel: an IPv4
      header of 20 octets or an IPv6 header; default a copy of the inner packet's), ``tfc_pad`` (tunnel
      mode: octets of Traffic Flow Confidentiality padding, zeros, after each inner packet, RFC 4303 §2.7;
      0..1024).  A receiver takes a tunnelled packet by its own length whatever padding follows it
      (``Decrypted.tfc_pad_len``).

    The IV: every explicit-IV suite sends the 64-bit sequence number as its IV (RFC 4106 §3.1 asks only that
    it never repeat under a key), implicit-IV suites use it without sending it (RFC 8750), so
    :meth:`next_iv` is :meth:`next_seq`.  AES-CBC takes a random IV per packet instead (RFC 3602 §2.3);
    :meth:`set_test_iv` fixes the next one, for reproducible test octets.

    ``encrypt`` and ``decrypt`` may be called on the same object (the same keys serve both, as in tests):
    its own receiver listens on ``udp_dport``.  Calls are serialised, so threads may share it.  Sequence numbers and IVs never repeat.
    """

    def __init__(
        self,
        spi: int,
        suite: Union[str, int] = "aes-gcm-16",
        key: Optional[Key] = None,
        *,
        key_bits: Optional[int] = None,
        mode: str = "tunnel",
        esn: bool = False,
        anti_replay: bool = True,
        replay_window: Optional[int] = None,
        replay_top: int = 0,
        first_seq: int = 1,
        udp_encap: bool = False,
        udp_sport: int = 4500,
        udp_dport: int = 4500,
        outer_header: Optional[bytes] = None,
        dst: Optional[str] = None,
        tfc_pad: int = 0,
    ) -> None:
        settings = dict(locals())
        del settings["self"]
        self._core = face.Sender(ops.ESP, _make_config(**settings, for_receiver=False), refuse=_refused_config,
                                 raise_status=raise_esp, error_class=error_class)
        if first_seq != 1:
            st = self._core.set_next_counter(first_seq)
            if st != ops.OK:
                raise config_error(st, ConfigurationError, f"first_seq {first_seq}: ")
        self._settings = settings
        self.spi, self.mode, self.suite, self.esn = spi, mode, suite, bool(esn)
        # an SA alone reads captures (decrypt_capture) as often as it receives: it decrypts and notes (D17)
        self._receiver = Receiver([self], udp_port=udp_dport, check_udp_checksum="note")

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        return f"<pyesp.SA spi={self.spi:#010x} suite={self.suite} mode={self.mode}{' esn' if self.esn else ''}>"

    def next_seq(self) -> Optional[int]:
        """The sequence number the next packet carries (all 64 bits with ESN); None once exhausted (then
        :meth:`encrypt` raises :class:`~pecore.errors.ExhaustedError`)."""
        return self._core.next_counter()

    def set_next_seq(self, next_seq: int) -> None:
        """Let the sequence numbers continue at ``next_seq``: only forward, and within 32 bits without ESN, so no
        sequence number or IV is ever reused."""
        check_range("next_seq", next_seq, 2**64 - 1, ConfigurationError, bottom=1)
        st = self._core.set_next_counter(next_seq)
        if st != ops.OK:
            raise_esp(st, "sequence numbers only move forward (and stay below 2^32 without ESN)"
                      if status_name(st) == "invalid-argument" else None)

    def next_iv(self) -> Optional[int]:
        """The IV of the next packet: the core's IV is the 64-bit sequence number (sent as the 8-octet
        explicit IV, or the nonce's counter for implicit-IV suites), so this is :meth:`next_seq`.  The same
        call as ``pypsp.Encryptor.next_iv()`` and ``pyeesp.SA.next_iv()``."""
        return self.next_seq()

    def set_next_iv(self, next_iv: int) -> None:
        """Let the counter continue at ``next_iv`` (see :meth:`set_next_seq`), as ``pyeesp.SA.set_next_iv``."""
        self.set_next_seq(next_iv)

    def set_test_iv(self, iv: bytes) -> None:
        """AES-CBC suites: the next packet's 16-octet IV, once, instead of a random one -- for test vectors and
        cross-checks that need reproducible octets; never for traffic (a predictable CBC IV is an attack)."""
        st = self._core.call(ops.esp_set_next_iv, bytes(iv))
        if st != ops.OK:
            raise ConfigurationError("set_test_iv needs an AES-CBC suite and a 16-octet IV", status_name(st))

    def encrypt(self, ip_packet: Buffer) -> bytes:
        """Encapsulate one IPv4/IPv6 packet (any bytes-like object); returns the outer IP packet."""
        return self._core.encap(packet_buffer(ip_packet, "ip_packet"))

    def seal(self, payload: Buffer, next_header: int) -> bytes:
        """The ESP octets alone, from the SPI to the ICV (no IP or UDP header), around ``payload`` -- the
        inner IP packet in tunnel mode, the upper-layer segment in transport mode -- whose protocol number is
        ``next_header``.  Next Header 59 (:data:`pyesp.header.NEXT_HEADER_DUMMY`) makes a dummy packet
        (RFC 4303 §2.6), which a receiver authenticates and discards (:class:`~pyesp.DummyPacketError`).
        :meth:`Receiver.open` is its inverse."""
        check_range("next_header", next_header, 255, ConfigurationError)
        return self._core.seal(packet_buffer(payload, "payload"), next_header)

    def encrypt_batch(self, packets: Iterable[Buffer]) -> List[bytes]:
        """Encrypt many packets in one core call: the core's ESP transform (pe_esp_capture_encap) in its
        batch loop (pe_batch_transform_until_failure), all in C.  Raises on the first packet that fails: the
        packets before it used their sequence numbers and their results are in ``err.results``; it and the
        packets after it used none (``next_seq()`` is the one the failed packet would have had)."""
        return self._core.encap_batch(packets)

    def decrypt(self, packet: Buffer) -> Decrypted:
        """Verify, replay-check and decrypt one outer IP packet (see :meth:`Receiver.decrypt`)."""
        return self._receiver.decrypt(packet)

    def open(self, esp: Buffer, **kwargs) -> Decrypted:  # type: ignore[no-untyped-def]
        """Open bare ESP octets (see :meth:`Receiver.open`)."""
        return self._receiver.open(esp, **kwargs)

    def decrypt_batch(self, packets: Iterable[Buffer]) -> List[Union[Decrypted, EspError]]:
        """Decrypt many packets in order; a failed packet's slot holds its exception."""
        return self._receiver.decrypt_batch(packets)


def _refused_config(st: int) -> None:
    raise config_error(st, ConfigurationError)
