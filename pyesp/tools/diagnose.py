"""``pyesp diagnose``: which known mistake makes a peer's ESP (RFC 4303) packets fail to verify.

For an ESP packet whose ICV does not verify with the SA's keys, the packet is recomputed with the mistakes the ESP
vectors catalogue (vectors/esp_*_test.json, flags KeySplitMistake, NonceMistake, EsnAadMistake, AadMistake)
and the shared search of :mod:`pecore.tools.diagnose` names the fewest that reproduce it exactly:

- key and salt: the salt taken from the front of the KEYMAT block instead of its end (RFC 4106 §8.1);
- the nonce: salt ‖ IV as RFC 4106 §4 says, or for the implicit-IV suites (RFC 8750 §3) salt ‖ the 64-bit
  Sequence Number; the mistakes are RFC 8750's rule on an explicit-IV suite, the 32-bit number in the wrong
  half, and with ESN the high half left out;
- the AAD (RFC 4106 §5): SPI ‖ Seq low, or with ESN SPI ‖ Seq high ‖ Seq low; the mistakes are the high half
  left out and the halves swapped, and for AES-GMAC (RFC 4543 §3.3) the IV left out of the AAD.

With ESN the high half of the Sequence Number is inferred from the SA's ``replay_top`` (else ``first_seq`` - 1)
as a receiver does (RFC 4303 Appendix A2.1).  The recomputations go through ``pecore.primitives`` (the core's
AEAD); the suite's lengths come from the core's table (:mod:`pecore.tools._tables`).
"""
from __future__ import annotations

import argparse
import struct
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from pecore import primitives as prim
from pecore.keys import EspSaEntry
from pecore.protocol import ESP_UDP_PORT, eesp_suite, locate_esp
from pecore.tools._tables import SUITES, SuiteInfo
from pecore.tools.diagnose import (DIAGNOSED, MALFORMED, NO_KEY, UNDIAGNOSED, VERIFIES, Choice, DiagnoseInputError,
                                   Mistake, PacketReport, Report, add_common_arguments, diagnose_all, diagnosis_sas,
                                   new_report, parse_hex, run_ipsec_diagnose, same_addr, search)
from pecore.util import key_bytes
from pyesp.errors import ConfigurationError, EspError
from pyesp.sa import SA, Receiver

SPEC = "RFC 4303"
HEAD_LEN = 8  # SPI, Sequence Number
M32 = 0xFFFFFFFF
#: The core's replay window when an SA names none (pyesp.SA: "None: the core's 1024").
DEFAULT_REPLAY_WINDOW = 1024

SaSpec = Union[SA, EspSaEntry, Mapping[str, object]]


def _m(id: str, field: str, description: str, sent: Optional[str] = None, expected: Optional[str] = None,
       ref: str = SPEC) -> Mistake:
    return Mistake(id, field, description, sent, expected, ref)


def infer_seq(low: int, top: int, window: int) -> int:
    """The 64-bit Sequence Number a receiver at ``top`` with a ``window``-packet window infers from the low half
    (RFC 4303 Appendix A2.1)."""
    tl, th = top & M32, top >> 32
    if tl >= window - 1:  # Case A
        return ((th + 1) << 32 | low) if low < tl - window + 1 else (th << 32 | low)
    if low >= (tl - window + 1) & M32:  # Case B: in the window's part below 2^32
        return ((th - 1) << 32 | low) if th else low
    return th << 32 | low


class _Sa:
    """What the diagnosis needs to know about one SA, from its settings (keyword arguments of :class:`pyesp.SA`)."""

    def __init__(self, settings: Mapping[str, object], dst: Optional[str] = None) -> None:
        s: Dict[str, Any] = dict(settings)
        self.settings = s
        SA(**s)  # the core checks the settings: a bad one is the caller's ConfigurationError, here
        self.spi = int(s["spi"])
        row = eesp_suite(s.get("suite", "aes-gcm-16"))
        if row is None:  # SA() accepted it: one of ESP's AES-CBC + HMAC suites
            raise ConfigurationError(f"diagnose knows the AEAD suites' mistakes, not {s['suite']}'s", "esp-bad-suite")
        self.info: SuiteInfo = SUITES[row.name]
        self.keymat = key_bytes(s["key"], "key", ConfigurationError)
        self.esn = bool(s.get("esn", False))
        # the receiver's top, as pyesp.SA places it: replay_top, else first_seq - 1 (a key file's first-seq)
        self.top = int(s.get("replay_top") or 0) or max(int(s.get("first_seq") or 1) - 1, 0)
        self.window = int(s.get("replay_window") or DEFAULT_REPLAY_WINDOW)
        self.dst = dst


class EspDiagnoser:
    """Diagnoses ESP packets against a set of SAs (``pyesp.SA`` objects, key-file entries or settings mappings)."""

    def __init__(self, sas: Iterable[SaSpec], *, max_mistakes: int = 2, udp_port: int = ESP_UDP_PORT) -> None:
        self.sas: List[_Sa] = diagnosis_sas(sas, SA, EspSaEntry, "pyesp.SA", ConfigurationError, _Sa)
        self.max_mistakes = max_mistakes
        self.udp_port = udp_port
        self.hints: dict = {}

    def locate(self, ip: bytes) -> Optional[bytes]:
        loc, _status = locate_esp(ip, self.udp_port, either_port=True)
        return None if loc is None else ip[loc.offset : loc.offset + loc.length]

    @staticmethod
    def is_part(data: bytes) -> bool:
        return len(data) >= HEAD_LEN

    # ---------------------------------------------------------- the catalogue

    @staticmethod
    def _key_choices(sa: _Sa) -> List[Choice]:
        km, n = sa.keymat, sa.info.salt
        return [Choice("right", (km[:-n], km[-n:])),
                Choice("salt-first", (km[n:], km[:n]), (_m(
                    "key-salt-split", "KEYMAT", "the salt taken from the front of the KEYMAT block",
                    f"salt = the first {n} octets", f"salt = the last {n} octets", "RFC 4106 §8.1"),))]

    @staticmethod
    def _nonce_choices(sa: _Sa, seq: int) -> List[Choice]:
        if sa.info.iiv:
            out = [Choice("right", ("seq", struct.pack(">Q", seq))),
                   Choice("low-first", ("seq", struct.pack(">II", seq & M32, 0)), (_m(
                       "nonce-seq-half", "AEAD nonce", "salt ‖ Seq low ‖ 0: the 32-bit number in the wrong half",
                       "salt ‖ Seq low ‖ 0", "salt ‖ the 64-bit Sequence Number", "RFC 8750 §3"),))]
            if sa.esn:
                out.append(Choice("no-high", ("seq", struct.pack(">II", 0, seq & M32)), (_m(
                    "nonce-esn-high-missing", "AEAD nonce", "the high half of the ESN left out of the implicit IV",
                    "salt ‖ 0 ‖ Seq low", "salt ‖ Seq high ‖ Seq low", "RFC 8750 §3"),)))
            return out
        return [Choice("right", ("iv", b"")),
                Choice("from-seq", ("seq", struct.pack(">Q", seq)), (_m(
                    "nonce-from-seq", "AEAD nonce", "the nonce built from the Sequence Number although the suite "
                    "sends an explicit IV (RFC 8750's rule on an RFC 4106 suite)", "salt ‖ Sequence Number",
                    "salt ‖ IV field", "RFC 4106 §4"),))]

    @staticmethod
    def _aad_choices(sa: _Sa, seq: int) -> List[Choice]:
        spi = struct.pack(">I", sa.spi)
        right = spi + (struct.pack(">II", seq >> 32, seq & M32) if sa.esn else struct.pack(">I", seq & M32))
        out = [Choice("right", (right, True))]
        if sa.esn:
            out.append(Choice("esn-low-only", (spi + struct.pack(">I", seq & M32), True), (_m(
                "esn-aad-high-missing", "AAD", "the ESN's high half left out of the AAD", "SPI ‖ Seq low",
                "SPI ‖ Seq high ‖ Seq low", "RFC 4106 §5"),)))
            out.append(Choice("esn-swapped", (spi + struct.pack(">II", seq & M32, seq >> 32), True), (_m(
                "esn-aad-halves-swapped", "AAD", "the ESN's halves swapped in the AAD", "SPI ‖ Seq low ‖ Seq high",
                "SPI ‖ Seq high ‖ Seq low", "RFC 4106 §5"),)))
        if sa.info.kind == "gmac":
            out.append(Choice("gmac-no-iv", (right, False), (_m(
                "gmac-aad-iv-missing", "AAD", "AES-GMAC with the IV left out of the authenticated data",
                "SPI ‖ Seq ‖ payload", "SPI ‖ Seq ‖ IV ‖ payload", "RFC 4543 §3.3"),)))
        return out

    # ---------------------------------------------------------- computation

    @staticmethod
    def _compute(sa: _Sa, esp: bytes, keysalt: Tuple[bytes, bytes], nonce, aad):
        """(alg, key, nonce, aad parts, ciphertext, tag), or None when the combination cannot apply."""
        key, salt = keysalt
        iv_len, icv = sa.info.iv, sa.info.icv
        data_at = HEAD_LEN + iv_len
        if len(esp) < data_at + icv or 8 * len(key) not in sa.info.key_sizes:
            return None
        src, tail = nonce
        n = salt + (esp[HEAD_LEN:data_at] if src == "iv" else tail)
        aad_octets, iv_in_aad = aad
        body, tag = esp[data_at:-icv], esp[-icv:]
        if sa.info.kind == "gmac":  # all authenticated, nothing encrypted
            parts = (aad_octets, esp[HEAD_LEN:data_at] if iv_in_aad else b"", body)
            return (sa.info.alg, key, n, parts, b"", tag)
        return (sa.info.alg, key, n, (aad_octets,), body, tag)

    @staticmethod
    def _open(desc) -> Optional[bytes]:
        alg, key, nonce, aad, ct, tag = desc
        try:
            return prim.aead_open(alg, key, nonce, list(aad), ct, tag)
        except prim.PrimitiveError:
            return None

    def _core_status(self, sa: _Sa, ip: Optional[bytes]) -> Optional[Any]:
        """The core receiver's error on the IP packet (an EspError), or None."""
        if ip is None:
            return None
        try:
            Receiver([SA(**sa.settings)]).decrypt(ip)  # type: ignore[arg-type]
        except EspError as e:
            return e
        return None

    # ---------------------------------------------------------- diagnosis

    def diagnose_part(self, esp: bytes, *, frame: Optional[int] = None, ip: Optional[bytes] = None) -> PacketReport:
        """Diagnose one ESP packet (SPI .. ICV); ``ip``, the IP packet around it, lets the core say why it fails."""
        rep = new_report("ESP", frame, ip)
        dst = rep.dst
        if len(esp) < HEAD_LEN:
            rep.fields = {"len": len(esp)}
            rep.verdict, rep.reason = MALFORMED, "esp-truncated"
            rep.message = f"{len(esp)} octets: shorter than the SPI and Sequence Number"
            return rep
        spi, low = struct.unpack(">II", esp[:HEAD_LEN])
        rep.fields = {"spi": f"{spi:#010x}", "seq": low, "len": len(esp)}
        sas = [s for s in self.sas if s.spi == spi and (s.dst is None or dst is None or same_addr(s.dst, dst))]
        if not sas:
            rep.verdict, rep.reason = NO_KEY, "esp-no-sa"
            rep.message = f"no SA with SPI {spi:#010x}"
            return rep
        sa = sas[0]
        err = self._core_status(sa, ip)
        if err is not None:
            rep.reason, rep.message = err.code, str(err)
        seq = infer_seq(low, sa.top, sa.window) if sa.esn else low
        if sa.esn:
            rep.fields["seq"] = seq

        def compute(keysalt, nonce, aad):
            return self._compute(sa, esp, keysalt, nonce, aad)

        dims = [self._key_choices(sa), self._nonce_choices(sa, seq), self._aad_choices(sa, seq)]
        match = search(dims, compute, self._open, max_mistakes=self.max_mistakes, hints=self.hints)
        if match is None:
            rep.verdict = UNDIAGNOSED
        elif match.level == 0:
            rep.verdict = VERIFIES if err is None else UNDIAGNOSED
            if err is not None:
                rep.notes.append("the ICV verifies with the correct algorithm; the packet fails after that")
        else:
            rep.verdict = DIAGNOSED
            rep.mistakes = match.explanations[0]
            rep.alternatives = match.explanations[1:]
        return rep

    def diagnose(self, packet: Union[bytes, str]) -> PacketReport:
        """Diagnose one packet: bytes or hex of an IP packet, an Ethernet frame, or the ESP part."""
        if not isinstance(packet, (bytes, bytearray, str)):
            raise DiagnoseInputError(f"a packet is bytes or a hex string, not {type(packet).__name__}")
        return diagnose_all(self, bytes(packet) if isinstance(packet, (bytes, bytearray)) else parse_hex(packet),
                            "ESP").packets[0]

    def diagnose_source(self, source: Union[str, bytes], *, limit: int = 0) -> Report:
        """Diagnose a capture file path, a hex string of one packet ('-': stdin) or bytes."""
        return diagnose_all(self, source, "ESP", limit)


def diagnose(packet: Union[bytes, str], sas: Iterable[SaSpec], *, max_mistakes: int = 2) -> PacketReport:
    """Diagnose one ESP packet (bytes or hex: an IP packet, an Ethernet frame or the ESP part)."""
    return EspDiagnoser(sas, max_mistakes=max_mistakes).diagnose(packet)


# ---------------------------------------------------------------------------- CLI


def cmd_diagnose(args: argparse.Namespace) -> int:
    return run_ipsec_diagnose(args, bool(args.key), "esp-sa", EspDiagnoser)


def register(sub, sa_options, sa_entries) -> None:
    """Add the ``diagnose`` subcommand to the pyesp CLI's subparsers (as pyeesp's: the CLI hands over its SA
    options and how it reads them)."""
    p = sub.add_parser("diagnose", help="explain why ESP packets do not verify (known interop mistakes)",
                       description="Open each ESP packet with the given SAs; when one does not verify, recompute it "
                                   "with the known implementation mistakes (salt split, nonce construction, ESN in "
                                   "the AAD, AES-GMAC's AAD) and name the one that reproduces it exactly. Exit "
                                   "status: 0 when every packet verifies, 1 when some do not, 2 for usage or input "
                                   "errors.")
    add_common_arguments(p, "ESP")
    sa_options(p)
    p.set_defaults(func=cmd_diagnose, sa_entries=sa_entries)
