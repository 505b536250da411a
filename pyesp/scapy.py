"""scapy interop for ESP (RFC 4303): scapy's own ``ESP`` layer and ``SecurityAssociation`` (scapy.layers.ipsec)
beside :class:`pyesp.SA`.  No new layer: scapy has ESP, and this module binds nothing and changes none of scapy's
classes.

- :func:`to_scapy` turns a :class:`pyesp.SA` into scapy's ``SecurityAssociation`` with the same keys, mode,
  UDP encapsulation, ESN and next sequence number; :func:`from_scapy` does the reverse.
- :class:`ESPSecurityAssociation` takes scapy's ``SecurityAssociation`` arguments (``spi``, ``seq_num``,
  ``crypt_algo``, ``crypt_key``, ``crypt_icv_size``, ``tunnel_header``, ``nat_t_header``, ``esn_en``,
  ``esn``) and encrypts and decrypts scapy packets through the core: a drop-in for tests that want the
  core's octets (the IV is the 64-bit sequence number, docs/guide-esp.md).

Suites (scapy's ``crypt_algo`` with ``crypt_icv_size``): "AES-GCM" 8/12/16 (RFC 4106), "AES-CCM" 8/12/16
(RFC 4309), "CHACHA20-POLY1305" (RFC 7634), "AES-NULL-GMAC" (RFC 4543); and "AES-CBC" with ``auth_algo``
"HMAC-SHA1-96" or "SHA2-256-128" (RFC 3602 with RFC 2404 / 4868: the core's aes-cbc-hmac-sha1-96 and
aes-cbc-hmac-sha256-128, KEYMAT ``crypt_key`` ‖ ``auth_key``).  scapy has no implicit-IV suites (RFC 8750);
those are refused.  scapy 2.8 writes and
expects a 16-octet AES-GCM ICV whatever ``crypt_icv_size`` says (RFC 4106 §6 sends 8 or 12 octets for
GCM-8/12): :func:`to_scapy` still passes the RFC's size, so an SA from it interoperates with the core for
GCM-16 and the other suites only (tests/esp/test_esp_interop.py asserts that difference).
"""
from __future__ import annotations

from typing import Optional, Union

from pecore.util import require_extra

require_extra("scapy", "scapy", "pyesp.scapy")

from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.ipsec import CRYPT_ALGOS, ESP, SecurityAssociation  # noqa: E402
from scapy.packet import Packet  # noqa: E402

from pecore._scapy import header_template, ip_bytes, ip_packet  # noqa: E402
from pecore.protocol import esp_suite  # noqa: E402
from pecore.util import Key, key_bytes  # noqa: E402
from pyesp.errors import ConfigurationError, NoSaError  # noqa: E402
from pyesp.header import UDP_PORT  # noqa: E402
from pyesp.sa import SA, suite_row  # noqa: E402

#: The core's suite name -> scapy's (crypt_algo, crypt_icv_size).
SCAPY_SUITES = {
    "aes-gcm-8": ("AES-GCM", 8), "aes-gcm-12": ("AES-GCM", 12), "aes-gcm-16": ("AES-GCM", 16),
    "aes-ccm-8": ("AES-CCM", 8), "aes-ccm-12": ("AES-CCM", 12), "aes-ccm-16": ("AES-CCM", 16),
    "chacha20-poly1305": ("CHACHA20-POLY1305", 16), "aes-gmac": ("AES-NULL-GMAC", 16),
}
_FROM_SCAPY = {v: k for k, v in SCAPY_SUITES.items()}
#: The core's AES-CBC suites -> scapy's ``auth_algo`` beside ``crypt_algo`` "AES-CBC".
SCAPY_ENCAUTH = {"aes-cbc-hmac-sha1-96": "HMAC-SHA1-96", "aes-cbc-hmac-sha256-128": "SHA2-256-128"}
_ENCAUTH_FROM_SCAPY = {v: k for k, v in SCAPY_ENCAUTH.items()}


def scapy_suite(crypt_algo: str, icv_size: Optional[int] = None) -> str:
    """The core's suite name for scapy's ``crypt_algo`` (a CRYPT_ALGOS name) and ICV size (default: scapy's)."""
    algo = CRYPT_ALGOS.get(crypt_algo)
    if algo is None:
        raise ConfigurationError(f"scapy has no crypt_algo {crypt_algo!r}", "esp-bad-suite")
    name = _FROM_SCAPY.get((crypt_algo, icv_size if icv_size is not None else algo.icv_size))
    if name is None:
        raise ConfigurationError(f"{crypt_algo} with a {icv_size}-octet ICV is no combined-mode suite of the core; "
                                 f"one of {sorted(set(a for a, _ in SCAPY_SUITES.values()))}", "esp-bad-suite")
    return name


def _suite_name(suite: Union[str, int]) -> str:
    return suite_row(suite).name


def to_scapy(sa: SA, *, tunnel_header=None) -> SecurityAssociation:  # type: ignore[no-untyped-def]
    """scapy's ``SecurityAssociation`` for the same SA: keys, suite, mode, UDP encapsulation, ESN, and the
    next sequence number (``seq_num`` its low 32 bits, ``esn`` the high ones).

    scapy's tunnel mode needs an outer header: the SA's ``outer_header``, or ``tunnel_header`` (an ``IP`` /
    ``IPv6`` instance) here; the core's default (a copy of each inner packet's header) has no scapy equivalent.
    Nor has TFC padding (``tfc_pad``): such an SA is refused.  scapy's UDP encapsulation writes checksum 0 over
    IPv6 too, which an endpoint refuses unless in RFC 6936 mode (docs/spec/eesp.md D17).
    """
    if not isinstance(sa, SA):
        raise TypeError(f"sa must be a pyesp.SA, not {type(sa).__name__}")
    s = sa._settings
    name = _suite_name(s["suite"])  # type: ignore[arg-type]
    if name not in SCAPY_SUITES and name not in SCAPY_ENCAUTH:
        raise ConfigurationError(f"scapy has no {name} (implicit IV, RFC 8750)", "esp-bad-suite")
    key = key_bytes(s["key"], "key", ConfigurationError)  # type: ignore[arg-type]
    auth: dict = {}
    if name in SCAPY_ENCAUTH:  # KEYMAT: the AES key, then the integrity key (RFC 7296 §2.17)
        n = len(key) - esp_suite(name).integ_key_len  # type: ignore[union-attr]
        algo, icv, key, auth = "AES-CBC", None, key[:n], dict(auth_algo=SCAPY_ENCAUTH[name], auth_key=key[n:])
    else:
        algo, icv = SCAPY_SUITES[name]
    if s["tfc_pad"]:
        raise ConfigurationError("scapy's SecurityAssociation has no TFC padding (RFC 4303 §2.7): an SA with "
                                 "tfc_pad would send other packets there", "esp-bad-config")
    th = None
    if s["mode"] == "tunnel":
        if tunnel_header is not None:
            if not isinstance(tunnel_header, (IP, IPv6)):
                raise TypeError("tunnel_header must be an IP or IPv6 instance")
            th = tunnel_header
        elif s["outer_header"] is not None:
            th = ip_packet(bytes(s["outer_header"]))  # type: ignore[arg-type]
        else:
            raise ConfigurationError("scapy's tunnel mode needs an outer header: give the SA an outer_header, or "
                                     "tunnel_header= here")
    nxt = sa.next_seq()
    if nxt is None:
        raise ConfigurationError("the SA has sent its last sequence number", "sequence-exhausted")
    return SecurityAssociation(
        ESP, spi=sa.spi, seq_num=nxt & 0xFFFFFFFF, crypt_algo=algo, crypt_key=key, crypt_icv_size=icv, **auth,
        tunnel_header=th,
        nat_t_header=UDP(sport=s["udp_sport"], dport=s["udp_dport"]) if s["udp_encap"] else None,
        esn_en=bool(s["esn"]), esn=nxt >> 32)


def from_scapy(ssa: SecurityAssociation, *, anti_replay: bool = True, replay_window: Optional[int] = None,
               dst: Optional[str] = None) -> SA:
    """A :class:`pyesp.SA` from scapy's ``SecurityAssociation`` (ESP, a combined-mode ``crypt_algo``, no
    ``auth_algo``): tunnel mode with its ``tunnel_header`` as the outer header, else transport; UDP
    encapsulation from ``nat_t_header``; ESN from ``esn_en`` / ``esn``.  The SA sends next what scapy would
    (``esn << 32 | seq_num``), and its receiver has seen everything below that."""
    if not isinstance(ssa, SecurityAssociation):
        raise TypeError(f"ssa must be scapy's SecurityAssociation, not {type(ssa).__name__}")
    if ssa.proto is not ESP:
        raise ConfigurationError("only ESP SAs (scapy's AH is no ESP)")
    auth_key = b""
    if ssa.crypt_algo.name == "AES-CBC":
        name = _ENCAUTH_FROM_SCAPY.get(ssa.auth_algo.name, "")
        if not name:
            raise ConfigurationError(f"AES-CBC with auth_algo {ssa.auth_algo.name}: the core has HMAC-SHA1-96 and "
                                     "SHA2-256-128", "esp-bad-suite")
        auth_key = bytes(ssa.auth_key or b"")
    elif ssa.auth_algo.name != "NULL":
        raise ConfigurationError(f"auth_algo {ssa.auth_algo.name}: the core has it with AES-CBC only")
    else:
        name = scapy_suite(ssa.crypt_algo.name, ssa.crypt_icv_size)
    if ssa.crypt_key is None:
        raise ConfigurationError("the scapy SA has no crypt_key")
    esn = bool(ssa.esn_en)
    first = ((ssa.esn or 0) << 32 if esn else 0) | ssa.seq_num
    udp = ssa.nat_t_header
    return SA(ssa.spi, name, bytes(ssa.crypt_key) + bytes(ssa.crypt_salt or b"") + auth_key,
              mode="tunnel" if ssa.tunnel_header is not None else "transport", esn=esn,
              first_seq=max(first, 1), anti_replay=anti_replay, replay_window=replay_window,
              udp_encap=udp is not None, udp_sport=udp.sport if udp is not None else UDP_PORT,
              udp_dport=udp.dport if udp is not None else UDP_PORT,
              outer_header=header_template(ssa.tunnel_header), dst=dst)


class ESPSecurityAssociation:
    """An ESP SA in the shape of scapy's ``SecurityAssociation`` (the same arguments, ``proto`` left out:
    always ESP), whose ``encrypt`` and ``decrypt`` go through the core (:class:`pyesp.SA` and its own receiver) and take and return whole ``IP``/``IPv6`` packets.

    ``crypt_key`` (alias ``key``) is the KEYMAT key ‖ salt, as in scapy; ``crypt_algo`` a scapy name
    ("AES-GCM", "AES-CCM", "CHACHA20-POLY1305", "AES-NULL-GMAC") or a core suite ("aes-gcm-16-iiv", …).
    ``seq_num`` (with ``esn`` the high half, ``esn_en`` on) is the first sequence number.
    """

    def __init__(self, spi: int, seq_num: int = 1, crypt_algo: str = "AES-GCM", crypt_key: Optional[Key] = None,
                 crypt_icv_size: Optional[int] = None, tunnel_header=None, nat_t_header=None,  # type: ignore
                 esn_en: bool = False, esn: int = 0, *, key: Optional[Key] = None, anti_replay: bool = True,
                 replay_window: Optional[int] = None, dst: Optional[str] = None) -> None:
        if crypt_key is not None and key is not None:
            raise ConfigurationError("give crypt_key= or its alias key=, not both")
        crypt_key = crypt_key if crypt_key is not None else key
        name = scapy_suite(crypt_algo, crypt_icv_size) if crypt_algo in CRYPT_ALGOS else _suite_name(crypt_algo)
        if nat_t_header is not None and not isinstance(nat_t_header, UDP):
            raise TypeError("nat_t_header must be a UDP instance")
        first = (esn << 32 if esn_en else 0) | seq_num
        self._sa = SA(spi, name, crypt_key, mode="tunnel" if tunnel_header is not None else "transport",
                      esn=esn_en, first_seq=max(first, 1), anti_replay=anti_replay, replay_window=replay_window,
                      udp_encap=nat_t_header is not None,
                      udp_sport=nat_t_header.sport if nat_t_header is not None else UDP_PORT,
                      udp_dport=nat_t_header.dport if nat_t_header is not None else UDP_PORT,
                      outer_header=header_template(tunnel_header), dst=dst)
        self.spi, self.suite, self.esn_en = spi, name, esn_en
        self.tunnel_header, self.nat_t_header = tunnel_header, nat_t_header
        self.last_decrypted = None

    @property
    def sa(self) -> SA:
        """The :class:`pyesp.SA` behind it."""
        return self._sa

    def next_seq(self) -> Optional[int]:
        """The sequence number the next packet carries (64 bits with ESN); None once exhausted."""
        return self._sa.next_seq()

    def next_iv(self) -> Optional[int]:
        """The IV of the next packet: the core's IV is the sequence number (:meth:`pyesp.SA.next_iv`)."""
        return self._sa.next_iv()

    def encrypt(self, pkt, seq_num: Optional[int] = None):  # type: ignore[no-untyped-def]
        """Encapsulate an ``IP``/``IPv6`` packet; returns the outer packet.  ``seq_num`` moves the counter
        forward to the value (the low 32 bits, the high half kept; never back: sequence numbers and IVs never
        repeat)."""
        data = ip_bytes(pkt)
        if seq_num is not None:
            nxt = self._sa.next_seq() or 0
            want = (nxt >> 32 << 32) | seq_num if self.esn_en else seq_num
            if want != nxt:
                self._sa.set_next_seq(want)
        return ip_packet(self._sa.encrypt(data))

    def decrypt(self, pkt, verify: bool = True):  # type: ignore[no-untyped-def]
        """Verify, replay-check and decrypt an IP/IPv6 packet carrying ESP (in IP or UDP); returns the inner
        packet (tunnel) or the original one (transport).  Raises the typed exceptions of :mod:`pyesp.errors`.
        The ICV is always verified (``verify=False`` is refused)."""
        if not verify:
            raise ConfigurationError("the core always verifies the ICV")
        data = ip_bytes(pkt)
        if isinstance(pkt, Packet) and pkt.haslayer(ESP) and pkt[ESP].spi != self.spi:
            raise NoSaError(f"packet SPI {pkt[ESP].spi:#010x} does not match the SA SPI {self.spi:#010x}",
                            "esp-no-sa")
        self.last_decrypted = self._sa.decrypt(data)
        return ip_packet(self.last_decrypted.packet)

    def __repr__(self) -> str:
        return f"<ESPSecurityAssociation spi={self.spi:#010x} suite={self.suite}>"


__all__ = ["ESPSecurityAssociation", "SCAPY_ENCAUTH", "SCAPY_SUITES", "from_scapy", "scapy_suite", "to_scapy"]
