"""The core's suite tables as the tools read them: the one place in the tooling that knows where their rows come
from.

ESP and EESP share one table of AEAD suites (core/include/pe/ipsec.h, ``pe_ipsec_suite_*``), which the runtime
exposes as :data:`pecore.protocol.EESP_SUITES`; PSP's versions are the core's version table
(:data:`pecore.protocol.PSP_VERSIONS`).  The vector generators, key import, the key-file line writer, the CLIs'
choices and diagnose take every name, ID and length from here; nothing in the tools lists a suite by hand, so a
suite added to the core reaches them without an edit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from pecore import primitives
from pecore.protocol import EESP_SUITES, PSP_VERSIONS, EespSuite, psp_version

#: The construction behind a suite, as the tools branch on it: "gcm", "ccm", "gmac" (AES-GCM with the payload
#: in clear, RFC 4543) or "chacha"; an AEAD not named here is its own kind (its pecore.primitives name).
KINDS = {primitives.AES_GCM: "gcm", primitives.AES_CCM: "ccm", primitives.CHACHA20_POLY1305: "chacha"}


def kind_of(s: EespSuite) -> str:
    return "gmac" if s.integrity_only else KINDS.get(s.aead, s.aead)


@dataclass(frozen=True)
class SuiteInfo:
    """An AEAD suite as ESP and EESP negotiate it (IKEv2 ENCR transform ID): its KEYMAT split and wire sizes,
    read from the core's row."""

    name: str
    encr_id: int
    alg: str  # the AEAD, as pecore.primitives names it
    kind: str  # gcm, ccm, gmac, chacha
    salt: int
    iv: int  # explicit IV octets on the wire (0: RFC 8750 implicit IV)
    icv: int
    key_sizes: Tuple[int, ...]  # bits, without salt

    @property
    def iiv(self) -> bool:
        return self.iv == 0

    @property
    def nonce_len(self) -> int:
        """Salt || the 8-octet IV (explicit, or the Sequence Number): 11 for CCM, 12 otherwise."""
        return self.salt + 8

    @property
    def file_flags(self) -> List[str]:
        """The flags every test of this suite's vector file carries."""
        return (["ImplicitIv"] if self.iiv else []) + (["IntegrityOnly"] if self.kind == "gmac" else [])


def _info(s: EespSuite) -> SuiteInfo:
    return SuiteInfo(s.name, s.id, s.aead, kind_of(s), s.salt_len, s.iv_len, s.icv_len, s.key_bits)


# The vector files, their schemas' suite enum and `vectors generate`'s output list the suites in the order they
# were first published: the explicit-IV suites AES-GCM, AES-CCM, AES-GMAC, ChaCha20-Poly1305 (each by ICV
# length), then the implicit-IV ones in ENCR ID order.  Kept, so that the files stay byte-identical; a suite of
# a construction not named here follows those of its IV kind.
_PUBLISHED_KIND_ORDER = ("gcm", "ccm", "gmac", "chacha")


def _published_order(s: SuiteInfo) -> Tuple[int, int, int]:
    if s.iiv:
        return (1, 0, s.encr_id)
    rank = _PUBLISHED_KIND_ORDER.index(s.kind) if s.kind in _PUBLISHED_KIND_ORDER else len(_PUBLISHED_KIND_ORDER)
    return (0, rank, s.encr_id)


#: Every suite by the project's name, in the published order above.
SUITES: Dict[str, SuiteInfo] = {s.name: s for s in sorted((_info(r) for r in EESP_SUITES), key=_published_order)}


def _union(values) -> Tuple[int, ...]:
    return tuple(sorted(set(values)))


#: What any suite of the table takes, for the vector schemas: key sizes (bits), salt, and ICV lengths (octets).
KEY_SIZES = _union(b for s in SUITES.values() for b in s.key_sizes)
SALT_LENS = _union(s.salt for s in SUITES.values())
ICV_LENS = _union(s.icv for s in SUITES.values())


#: PSP's versions (psp.md §3), as the core's version table has them: their numbers, in order, and the derived
#: key octets of each.
PSP_VERSION_NUMBERS: Tuple[int, ...] = tuple(v.version for v in PSP_VERSIONS)
PSP_KEY_LEN: Dict[int, int] = {v.version: v.key_len for v in PSP_VERSIONS}


def psp_gmac(version: int) -> bool:
    """Whether a PSP version is AES-GMAC (payload in clear, crypt offset 0), by the core's table."""
    row = psp_version(version)
    if row is None:
        raise ValueError(f"PSP version {version} is reserved")
    return row.gmac
