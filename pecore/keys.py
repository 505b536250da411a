"""The project's key file (docs/keys.md), parsed by the core so that the CLIs,
the libraries and the Wireshark plugin read it identically."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from pecore.binding import ffi, lib
from pecore.errors import CoreError, status_name


class KeyFileError(CoreError, ValueError):
    """A key file or reference config could not be parsed; the message names the line."""

    category = "configuration"


@dataclass(frozen=True)
class PspSaEntry:
    """A ``psp-sa`` line: the parameters of a sending SA."""

    spi: int
    version: int
    mode: str
    crypt_offset: int
    crypt_offset_ipv4: Optional[int]
    crypt_offset_ipv6: Optional[int]
    vc: Optional[bytes]
    sample: bool
    drop: bool
    first_iv: Optional[int]
    line: int


#: Settings of an eesp-sa line that hold key material: never shown by a repr (docs/security.md).
SECRET_SETTINGS = ("key", "root_key")


@dataclass(frozen=True)
class EespSaEntry:
    """An ``eesp-sa`` line.  ``settings`` are keyword arguments for :class:`pyeesp.SA`."""

    spi: int
    settings: Dict[str, object]
    src: Optional[str]
    dst: Optional[str]
    sub_sas: int
    line: int

    def __repr__(self) -> str:  # the keys stay out of logs and tracebacks
        shown = {k: ("<secret>" if k in SECRET_SETTINGS else v) for k, v in self.settings.items()}
        return (f"EespSaEntry(spi={self.spi!r}, settings={shown!r}, src={self.src!r}, dst={self.dst!r}, "
                f"sub_sas={self.sub_sas!r}, line={self.line!r})")


@dataclass(frozen=True)
class EspSaEntry:
    """An ``esp-sa`` line (RFC 4303).  ``settings`` holds the line's values with every default filled in:
    keyword arguments for :class:`pyesp.SA`."""

    spi: int
    settings: Dict[str, object]
    src: Optional[str]
    dst: Optional[str]
    line: int

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        shown = {k: ("<secret>" if k in SECRET_SETTINGS else v) for k, v in self.settings.items()}
        return f"EspSaEntry(spi={self.spi!r}, settings={shown!r}, src={self.src!r}, dst={self.dst!r}, line={self.line!r})"


@dataclass(frozen=True)
class KeyLine:
    """Any line, as kind and name=value pairs (kinds of other protocols included)."""

    kind: str
    pairs: Tuple[Tuple[str, str], ...]
    line: int

    def __repr__(self) -> str:  # values may be keys: show the names only
        names = tuple(name for name, _value in self.pairs)
        return f"KeyLine(kind={self.kind!r}, names={names!r}, line={self.line!r})"


@dataclass
class KeyFile:
    """Everything a key file holds."""

    psp_master_keys: Tuple[Optional[bytes], Optional[bytes]] = field(default=(None, None), repr=False)
    psp_keys: Dict[Tuple[int, Optional[int]], bytes] = field(default_factory=dict, repr=False)
    psp_sas: List[PspSaEntry] = field(default_factory=list)
    eesp_sas: List[EespSaEntry] = field(default_factory=list)
    esp_sas: List[EspSaEntry] = field(default_factory=list)
    lines: List[KeyLine] = field(default_factory=list)
    path: Optional[str] = None


def _fail(st: int, err, source: str) -> None:
    message = ffi.string(err.message).decode(errors="replace")
    where = f"{source}:{err.line}" if err.line else source
    raise KeyFileError(f"{where}: {message}", status_name(st))


def _opt(value: int) -> Optional[int]:
    return None if value < 0 else value


def _suite_name(encr: int, integ: int = 0):  # type: ignore[no-untyped-def]
    """The suite table's name of an ENCR ID and, for ESP, INTEG ID (pe_ipsec_esp_suite_by_ids), or the number
    where the core has no row."""
    row = lib.pe_ipsec_esp_suite_by_ids(encr, integ)
    return encr if row == ffi.NULL else ffi.string(row.name).decode()


def _address(family: int, raw) -> Optional[str]:
    import ipaddress

    if family == 4:
        return str(ipaddress.IPv4Address(bytes(raw)[:4]))
    if family == 6:
        return str(ipaddress.IPv6Address(bytes(raw)))
    return None


def _eesp_entry(e) -> EespSaEntry:
    settings: Dict[str, object] = dict(
        spi=e.spi,
        suite=_suite_name(e.encr),
        key_bits=e.key_bits,
        mode=("transport", "tunnel")[e.mode],
        format=("auto", "full", "optimized")[e.format],
        seq=bool(e.seq_present),
        aad=("draft", "linux-xfrm")[e.aad],
        anti_replay=bool(e.anti_replay),
        replay_window=e.replay_window,
        max_sub_sa_id=_opt(e.max_sub_sa_id),
        max_crypt_offset=_opt(e.max_crypt_offset),
        crypt_offset=_opt(e.crypt_offset),
        align_options=bool(e.align_options),
        strict=bool(e.strict),
        ip_protocol=e.ip_protocol,
        udp_encap=bool(e.udp_encap),
        max_live_sub_sas=e.max_live_sub_sas,
    )
    if e.sskdf:
        settings["root_key"] = bytes(e.root_key[0 : e.root_key_len])
        settings["sskdf"] = {1: "hkdf-sha256", 2: "hkdf-sha384", 3: "hkdf-sha512"}[e.sskdf]
    else:
        settings["key"] = bytes(e.key[0 : e.key_len])
    if e.has_dst:
        settings["dst"] = _address(e.dst_family, e.dst)
    return EespSaEntry(
        spi=e.spi,
        settings=settings,
        src=_address(e.src_family, e.src) if e.has_src else None,
        dst=_address(e.dst_family, e.dst) if e.has_dst else None,
        sub_sas=e.sub_sas,
        line=e.line,
    )


def _esp_entry(e) -> EspSaEntry:
    settings: Dict[str, object] = dict(
        spi=e.spi,
        suite=_suite_name(e.encr, e.integ),
        key_bits=e.key_bits,
        key=bytes(e.key[0 : e.key_len]),
        mode=("transport", "tunnel")[e.mode],
        esn=bool(e.esn),
        anti_replay=bool(e.anti_replay),
        replay_window=e.replay_window,
        first_seq=e.first_seq,
        udp_encap=bool(e.udp_encap),
        udp_sport=e.udp_sport,
        udp_dport=e.udp_dport,
    )
    if e.tfc_pad_len:  # a sender's setting; SA(**settings) refuses it in transport mode, as the line would
        settings["tfc_pad"] = e.tfc_pad_len
    if e.has_dst:  # as for eesp-sa: the receiver binds the SA to it, so SA(**settings) is the line's SA
        settings["dst"] = _address(e.dst_family, e.dst)
    return EspSaEntry(
        spi=e.spi,
        settings=settings,
        src=_address(e.src_family, e.src) if e.has_src else None,
        dst=_address(e.dst_family, e.dst) if e.has_dst else None,
        line=e.line,
    )


def parse_key_file(text: "str | bytes", source: str = "<key file>") -> KeyFile:
    """Parse key-file text; bytes go to the core unchanged (the grammar is the core's, on octets)."""
    data = text if isinstance(text, (bytes, bytearray, memoryview)) else text.encode()
    kf = ffi.new("pe_keyfile *")
    err = ffi.new("pe_keyfile_error *")
    st = lib.pe_keyfile_parse(data, len(data), kf, err)
    if st != lib.PE_OK:
        _fail(st, err, source)
    return _from_c(kf)


def _from_c(kf) -> KeyFile:  # type: ignore[no-untyped-def]
    """The parsed file as Python values; the core's copy is wiped and freed."""
    try:
        out = KeyFile()
        if kf.n_psp_master:
            m = kf.psp_master
            out.psp_master_keys = (
                bytes(m.key0) if m.has_key0 else None,
                bytes(m.key1) if m.has_key1 else None,
            )
        for i in range(kf.n_psp_keys):
            k = kf.psp_keys[i]
            out.psp_keys[(k.spi, _opt(k.version))] = bytes(k.key[0 : k.key_len])
        for i in range(kf.n_psp_sas):
            s = kf.psp_sas[i]
            out.psp_sas.append(
                PspSaEntry(
                    spi=s.spi,
                    version=s.version,
                    mode="tunnel" if s.tunnel else "transport",
                    crypt_offset=max(s.crypt_offset, 0),
                    crypt_offset_ipv4=_opt(s.crypt_offset_ipv4),
                    crypt_offset_ipv6=_opt(s.crypt_offset_ipv6),
                    vc=bytes(s.vc) if s.has_vc else None,
                    sample=bool(s.sample),
                    drop=bool(s.drop),
                    first_iv=s.first_iv if s.has_first_iv else None,
                    line=s.line,
                )
            )
        for i in range(kf.n_eesp_sas):
            out.eesp_sas.append(_eesp_entry(kf.eesp_sas[i]))
        for i in range(kf.n_esp_sas):
            out.esp_sas.append(_esp_entry(kf.esp_sas[i]))
        for i in range(kf.n_lines):
            ln = kf.lines[i]
            pairs = tuple(
                (ffi.string(ln.names[j]).decode(), ffi.string(ln.values[j]).decode()) for j in range(ln.n_pairs)
            )
            out.lines.append(KeyLine(ffi.string(ln.kind).decode(), pairs, ln.line))
        return out
    finally:
        lib.pe_keyfile_free(kf)


def load_key_file(path: "os.PathLike[str] | str") -> KeyFile:
    """Read and parse a key file."""
    # The core reads the file (its raw octets, no decoding or newline translation, its size cap), exactly as
    # the Wireshark plugin and pelua do: one reader, one grammar.
    kf = ffi.new("pe_keyfile *")
    err = ffi.new("pe_keyfile_error *")
    st = lib.pe_keyfile_load(os.fsencode(path), kf, err)
    if st != lib.PE_OK:
        _fail(st, err, str(path))
    out = _from_c(kf)
    out.path = str(path)
    return out


@dataclass(frozen=True)
class PspRefConfig:
    """A google/psp reference-tool config (psp_encrypt / psp_decrypt)."""

    master_keys: Tuple[bytes, bytes] = field(repr=False)
    spi: Optional[int] = None
    mode: Optional[str] = None
    version: Optional[int] = None
    crypt_offset: Optional[int] = None
    crypt_offset_ipv4: Optional[int] = None
    crypt_offset_ipv6: Optional[int] = None
    vc: Optional[bool] = None


def load_psp_ref_config(path: "os.PathLike[str] | str") -> PspRefConfig:
    """Read a reference-tool config file unchanged."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise KeyFileError(f"{path}: cannot read config: {e}", "keyfile-syntax") from None
    cfg = ffi.new("pe_psp_refcfg *")
    err = ffi.new("pe_keyfile_error *")
    st = lib.pe_psp_refcfg_parse(data, len(data), cfg, err)
    if st != lib.PE_OK:
        _fail(st, err, str(path))
    keys = (bytes(cfg.key0), bytes(cfg.key1))
    if not cfg.has_sa:
        return PspRefConfig(master_keys=keys)
    return PspRefConfig(
        master_keys=keys,
        spi=cfg.spi,
        mode="tunnel" if cfg.tunnel else "transport",
        version=cfg.version,
        crypt_offset=cfg.crypt_offset,
        crypt_offset_ipv4=cfg.crypt_offset_ipv4,
        crypt_offset_ipv6=cfg.crypt_offset_ipv6,
        vc=bool(cfg.vc),
    )
