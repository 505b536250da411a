"""The protocols' records for :mod:`pecore.face` (:data:`PSP`, :data:`EESP`, :data:`ESP`) and the rest of what the
faces read from or hand to the core: constants, key derivations, headers, the per-packet results.

Each record names the core's calls for its protocol in the one calling convention of :class:`pecore.face.Ops`;
the other functions here turn C structs into the plain values (dicts, bytes, ints) a face builds its own
objects from, and return the core's status for the face to raise as its own exception.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from pecore.binding import ffi, lib
from pecore.capture import POOL_EESP, POOL_ESP, POOL_PSP
from pecore.face import Ops, c_struct, receiver_batch
from pecore.protocol import parse_lenient
from pecore.util import TRANSFORM_FN, decap_error, failed_verdict, run_batch, udp_checksum_note

MAX_IP_LEN = 65535
OK = int(lib.PE_OK)

# --------------------------------------------------------------------------------------------------- PSP

PSP_MODES = {"transport": lib.PE_PSP_TRANSPORT, "tunnel": lib.PE_PSP_TUNNEL}
PSP_SPORT_XOR, PSP_SPORT_FIXED, PSP_SPORT_CALLBACK = (lib.PE_PSP_SPORT_XOR, lib.PE_PSP_SPORT_FIXED,
                                                       lib.PE_PSP_SPORT_CALLBACK)
PSP_HDR_LEN = int(lib.PE_PSP_HDR_LEN)


def psp_kdf_label(version: int) -> int:
    return lib.pe_psp_kdf_label(version)


def psp_derive_key(master_key: bytes, spi: int, version: int, label: int) -> Tuple[int, bytes]:
    """(status, the SA key of the version's length) of psp.md §5's derivation."""
    n = lib.pe_psp_key_len(version)
    out = ffi.new("uint8_t[]", n)
    st = lib.pe_psp_derive_key(master_key, spi, version, label, out, n)
    return st, bytes(out)


def psp_sport_callback(fn: Callable[[bytes], int]):  # type: ignore[no-untyped-def]
    """A ``pe_psp_sport_fn`` calling ``fn(inner packet)``; the sender must hold it as long as it lives."""

    @ffi.callback("uint16_t(void *, const uint8_t *, size_t)", onerror=lambda *a: 1000)
    def sport_cb(_ctx, inner, n):  # type: ignore[no-untyped-def]
        return int(fn(bytes(ffi.buffer(inner, n)))) & 0xFFFF

    return sport_cb


def psp_add_key(rx, spi: int, version: Optional[int], key: bytes) -> int:  # type: ignore[no-untyped-def]
    return lib.pe_psp_rx_add_key(rx, spi, -1 if version is None else version, key, len(key))


def psp_header_fields(h) -> Dict[str, Any]:  # type: ignore[no-untyped-def]
    """A ``pe_psp_hdr``'s fields as pypsp's Header has them."""
    return dict(
        next_header=h.next_header,
        hdr_ext_len=h.hdr_ext_len,
        reserved=h.reserved,
        crypt_offset=h.crypt_offset,
        sample=bool(h.sample),
        drop=bool(h.drop),
        version=h.version,
        virt=bool(h.virt),
        always_one=bool(h.always_one),
        spi=h.spi,
        iv=h.iv,
        extension=bytes(ffi.buffer(h.ext, h.ext_len)) if h.ext_len else b"",
    )


def _header_parsers(ctype: str, parse: Any, lenient: Any, min_len: int, fields: Callable[[Any], Dict[str, Any]]):
    """A protocol's header parse, (status, fields) of the header at the start of a
    :func:`pecore.util.packet_buffer` view, and its lenient parse for display, (fields or None, status name)."""
    def strict(buf) -> Tuple[int, Dict[str, Any]]:  # type: ignore[no-untyped-def]
        h = ffi.new(ctype + " *")
        st = parse(buf, len(buf), h)
        return st, (fields(h) if st == OK else {})

    def for_display(data) -> Tuple[Optional[Dict[str, Any]], str]:  # type: ignore[no-untyped-def]
        h, status = parse_lenient(ctype, lenient, data, min_len)
        return (None if h is None else fields(h)), status

    return strict, for_display


psp_header_parse, psp_header_parse_lenient = _header_parsers("pe_psp_hdr", lib.pe_psp_hdr_parse, lib.pe_psp_hdr_parse,
                                                             PSP_HDR_LEN, psp_header_fields)


def psp_header_build(fields: Mapping[str, Any], extension: bytes, header_len: int) -> Tuple[int, bytes]:
    """(status, wire octets) of a PSP header: ``fields`` named as ``pe_psp_hdr``'s."""
    h = ffi.new("pe_psp_hdr *")
    for name, value in fields.items():
        setattr(h, name, value)
    ext = ffi.from_buffer(extension)
    h.ext = ext
    h.ext_len = len(extension)
    out = ffi.new("uint8_t[]", header_len)
    st = lib.pe_psp_hdr_build(h, out, header_len)
    return st, bytes(out)


def _psp_decrypt_batch(rx, _hdr, pkts: Sequence[Any], result, error_class) -> list:  # type: ignore[no-untyped-def]
    hdrs = ffi.new("pe_psp_hdr[]", max(len(pkts), 1))
    # Extension areas decrypted in the receiver's work buffer are copied here (each fits its packet).
    try:
        size = max(sum(memoryview(p).nbytes for p in pkts), 1)
    except TypeError:
        size = 1  # run_batch names the packet that is not bytes-like
    store = ffi.new("uint8_t[]", size)
    ctx = ffi.new("pe_psp_batch_ctx *", {"rx": rx, "hdrs": hdrs, "ext_store": store, "ext_store_cap": size})
    out: list = []
    inputs: list = []  # the joined input, which the headers' extension pointers reference
    for i, (st, data) in enumerate(run_batch(lib.pe_psp_batch_decap, ctx, pkts, 0, keep=inputs)):
        if st != OK:
            out.append(decap_error(st, error_class))
            continue
        out.append(result(packet=data, header=psp_header_fields(hdrs[i])))
    return out


def _psp_next_iv(tx, _extra) -> Optional[int]:  # type: ignore[no-untyped-def]
    exhausted = ffi.new("int *")
    iv = lib.pe_psp_tx_next_iv(tx, exhausted)
    return None if exhausted[0] else iv


PSP = Ops(
    name="psp",
    tx_type="pe_psp_tx", tx_config="pe_psp_tx_config", tx_config_init=lib.pe_psp_tx_config_init,
    tx_new=lib.pe_psp_tx_new, tx_free=lib.pe_psp_tx_free,
    rx_type="pe_psp_rx", rx_config="pe_psp_rx_config", rx_config_init=lib.pe_psp_rx_config_init,
    rx_new=lib.pe_psp_rx_new, rx_free=lib.pe_psp_rx_free,
    info_type="pe_psp_hdr",
    out_len=MAX_IP_LEN + 256,
    max_overhead=int(lib.PE_PSP_MAX_OVERHEAD),
    encap=lambda tx, p, n, _extra, out, cap, out_len: lib.pe_psp_encap(tx, p, n, out, cap, out_len),
    seal=lambda tx, p, n, nh, _extra, out, cap, out_len: lib.pe_psp_seal(tx, p, n, nh, out, cap, out_len),
    decap=lib.pe_psp_decap,
    open=lambda rx, p, n, _extra, out, cap, out_len, hdr: lib.pe_psp_open(rx, p, n, out, cap, out_len, hdr),
    fields=lambda hdr: {"header": psp_header_fields(hdr)},
    icv_valid=lambda _hdr: False,  # PSP has no policy drop after the ICV check
    next_counter=_psp_next_iv,
    set_next_counter=lambda tx, value, _extra: lib.pe_psp_tx_set_next_iv(tx, value),
    batch_encap=lambda tx, _extra: (lib.pe_psp_capture_encap, tx),
    decrypt_batch=_psp_decrypt_batch,
    capture_encap=lib.pe_psp_capture_encap,
    capture_decap=lib.pe_psp_capture_decap,
    pool=POOL_PSP,
)

# --------------------------------------------------------------------------------------------------- IPsec


def _ipsec(name: str, *, fields: Callable[[Any], Dict[str, Any]], **own: Any) -> Ops:
    """EESP's or ESP's record: the two receive alike (eesp.md §14 and RFC 4303 share the steps), so their core
    calls differ by the protocol's name only: one SA config for both directions, a per-packet info with the
    ICV verdict of a policy drop, an ``open`` that takes the outer destination and may leave the replay window
    alone.  ``own``: the sending calls, whose arguments differ (EESP's Sub SA)."""
    def c(call: str):  # type: ignore[no-untyped-def]
        return getattr(lib, f"pe_{name}_{call}")

    no_replay = getattr(lib, f"PE_{name.upper()}_OPEN_NO_REPLAY")
    open_ = c("open")

    def open_bare(rx, p, n, extra, out, cap, out_len, info) -> int:  # type: ignore[no-untyped-def]
        ip_version, daddr, replay = extra
        return open_(rx, p, n, ip_version, daddr, 0 if replay else no_replay, out, cap, out_len, info)

    return Ops(
        name=name,
        tx_type=f"pe_{name}_tx", tx_config=f"pe_{name}_sa_config", tx_config_init=c("sa_config_init"),
        tx_new=c("tx_new"), tx_free=c("tx_free"),
        rx_type=f"pe_{name}_rx", rx_config=f"pe_{name}_rx_config", rx_config_init=c("rx_config_init"),
        rx_new=c("rx_new"), rx_free=c("rx_free"),
        info_type=f"pe_{name}_info",
        out_len=MAX_IP_LEN + 512,
        max_overhead=int(getattr(lib, f"PE_{name.upper()}_MAX_OVERHEAD")),
        decap=c("decap"),
        open=open_bare,
        fields=fields,
        icv_valid=lambda info: bool(info.icv_valid),
        # The core's capture transforms pass no info out (PSP has pe_psp_batch_ctx): decap_batch calls the
        # decap per packet inside the core's batch loop.
        decrypt_batch=receiver_batch(c("decap"), fields),
        capture_encap=c("capture_encap"),
        capture_decap=c("capture_decap"),
        **own,
    )


# --------------------------------------------------------------------------------------------------- EESP

EESP_MODES = {"transport": lib.PE_EESP_TRANSPORT, "tunnel": lib.PE_EESP_TUNNEL}
EESP_FORMATS = {"auto": lib.PE_EESP_FORMAT_AUTO, "full": lib.PE_EESP_FORMAT_FULL,
                "optimized": lib.PE_EESP_FORMAT_OPTIMIZED}
EESP_AADS = {"draft": lib.PE_EESP_AAD_DRAFT, "linux-xfrm": lib.PE_EESP_AAD_LINUX_XFRM}
EESP_NO_LIMIT = int(lib.PE_EESP_NO_LIMIT)
EESP_BASE_LEN = int(lib.PE_EESP_BASE_LEN)


def eesp_derive_sub_sa_key(sskdf: int, root: bytes, sub_sa_id: int, length: int) -> Tuple[int, bytes]:
    """(status, KEYMAT) of eesp.md §12's derivation."""
    out = ffi.new("uint8_t[]", length)
    st = lib.pe_eesp_derive_sub_sa_key(sskdf, root, len(root), sub_sa_id, out, length)
    return st, bytes(out)


def eesp_packet_opts(iv: Optional[bytes], pad_len: Optional[int]):  # type: ignore[no-untyped-def]
    """A ``pe_eesp_packet_opts`` for an explicit IV (8 octets) and/or a Pad Length (checked by the face)."""
    opts = ffi.new("pe_eesp_packet_opts *")
    lib.pe_eesp_packet_opts_init(opts)
    if iv is not None:
        opts.explicit_iv = 1
        opts.iv = list(iv)
    if pad_len is not None:
        opts.pad_len = pad_len
    return opts


def eesp_header_fields(h) -> Dict[str, Any]:  # type: ignore[no-untyped-def]
    """A ``pe_eesp_hdr``'s fields as pyeesp's Header has them; ``options`` as (type, data) pairs."""
    opts = []
    for i in range(h.n_options):
        o = h.option[i]
        opts.append((o.type, bytes(ffi.buffer(o.data, o.data_len)) if o.data_len else b""))
    return dict(spi=h.spi, session_id=h.session_id, options=opts, version=h.version, reserved=h.reserved,
                esp_compat=bool(h.esp_compat))


eesp_header_parse, eesp_header_parse_lenient = _header_parsers(
    "pe_eesp_hdr", lib.pe_eesp_hdr_parse, lib.pe_eesp_hdr_parse_lenient, EESP_BASE_LEN, eesp_header_fields)


def eesp_header_build(fields: Mapping[str, Any], options: Sequence[Tuple[int, bytes]]) -> Tuple[int, bytes]:
    """(status, wire octets) of a Base Header (``fields`` named as ``pe_eesp_hdr``'s) and its options."""
    h = ffi.new("pe_eesp_hdr *")
    for name, value in fields.items():
        setattr(h, name, value)
    keep = []
    for i, (otype, data) in enumerate(options):
        h.option[i].type = otype
        h.option[i].data_len = len(data)
        if data:
            buf = ffi.from_buffer(data)
            keep.append(buf)
            h.option[i].data = buf
    h.n_options = len(options)
    out = ffi.new("uint8_t[]", 8 + 255)
    n = ffi.new("size_t *")
    st = lib.pe_eesp_hdr_build(h, out, 8 + 255, n)
    return st, (bytes(ffi.buffer(out, n[0])) if st == OK else b"")


def eesp_info_fields(info) -> Dict[str, Any]:  # type: ignore[no-untyped-def]
    """What a pe_eesp_info says about a decrypted packet (``header``: :func:`eesp_header_fields`)."""
    return dict(
        header=eesp_header_fields(info.hdr),
        seq=info.seq if info.seq else None,
        next_header=info.next_header,
        pad_len=info.pad_len,
        full_format=bool(info.full_format),
        iv=bytes(ffi.buffer(info.iv, info.iv_len)) if info.iv != ffi.NULL else None,
        udp_encap=bool(info.udp_encap),
        udp_checksum=udp_checksum_note(info),
    )


def eesp_add_sa(rx, fields: Mapping[str, Any]) -> int:  # type: ignore[no-untyped-def]
    keep: list = []
    return lib.pe_eesp_rx_add_sa(rx, c_struct("pe_eesp_sa_config", lib.pe_eesp_sa_config_init, fields, keep))


def eesp_add_esp_spi(rx, spi: int) -> int:  # type: ignore[no-untyped-def]
    return lib.pe_eesp_rx_add_esp_spi(rx, spi)


def eesp_set_capture_sub_sas(tx, n: int) -> int:  # type: ignore[no-untyped-def]
    return lib.pe_eesp_tx_set_capture_sub_sas(tx, n)


def _eesp_encap(tx, p, n, extra, out, cap, out_len) -> int:  # type: ignore[no-untyped-def]
    sub_sa_id, opts = extra
    if opts is None:
        return lib.pe_eesp_encap(tx, p, n, sub_sa_id, out, cap, out_len)
    return lib.pe_eesp_encap_with(tx, p, n, sub_sa_id, opts, out, cap, out_len)


def _eesp_seal(tx, p, n, nh, extra, out, cap, out_len) -> int:  # type: ignore[no-untyped-def]
    ip_version, sub_sa_id, opts = extra
    return lib.pe_eesp_seal(tx, p, n, nh, ip_version, sub_sa_id, ffi.NULL if opts is None else opts, out, cap,
                            out_len)


def _eesp_batch_encap(tx, extra):  # type: ignore[no-untyped-def]
    (sub_sa_id,) = extra

    # The core's EESP transform (pe_eesp_capture_encap) spreads flows over the capture Sub SAs, so with one
    # of them it sends everything on Sub SA 0, all in C.  For another Sub SA (the core has no transform
    # with a fixed one) a thin callback calls pe_eesp_encap inside the core's batch loop.
    @ffi.callback(TRANSFORM_FN, onerror=failed_verdict)
    def encap(_ctx, ip, n, out, cap, out_len, why):  # type: ignore[no-untyped-def]
        why[0] = lib.pe_eesp_encap(tx, ip, n, sub_sa_id, out, cap, out_len)
        return lib.PE_VERDICT_TRANSFORMED if why[0] == lib.PE_OK else lib.PE_VERDICT_FAILED

    if sub_sa_id == 0 and lib.pe_eesp_tx_set_capture_sub_sas(tx, 1) == lib.PE_OK:
        return lib.pe_eesp_capture_encap, tx
    return encap, ffi.NULL


EESP = _ipsec(
    "eesp",
    encap=_eesp_encap,
    seal=_eesp_seal,
    fields=eesp_info_fields,
    next_counter=lambda tx, extra: lib.pe_eesp_tx_next_seq(tx, extra[0]) or None,
    set_next_counter=lambda tx, value, extra: lib.pe_eesp_tx_set_next_seq(tx, extra[0], value),
    batch_encap=_eesp_batch_encap,
    pool=POOL_EESP,
)

# --------------------------------------------------------------------------------------------------- ESP

ESP_MODES = {"transport": lib.PE_ESP_TRANSPORT, "tunnel": lib.PE_ESP_TUNNEL}
_ESP_MODE_NAMES = {v: k for k, v in ESP_MODES.items()}
ESP_MAX_TFC_PAD = int(lib.PE_ESP_MAX_TFC_PAD)
ESP_NH_NO_NEXT = int(lib.PE_ESP_NH_NO_NEXT)


def esp_info_fields(info) -> Dict[str, Any]:  # type: ignore[no-untyped-def]
    """What a pe_esp_info says about a decrypted packet, as pyesp's Decrypted's fields (all but the packet)."""
    return dict(
        spi=info.spi,
        seq=info.seq,
        seq_low=info.seq_low,
        next_header=info.next_header,
        pad_len=info.pad_len,
        udp_encap=bool(info.udp_encap),
        iv=bytes(ffi.buffer(info.iv, info.iv_len)) if info.iv != ffi.NULL and info.iv_len else None,
        icv_valid=bool(info.icv_valid),
        mode=_ESP_MODE_NAMES.get(info.mode, str(info.mode)),
        esn=bool(info.esn),
        udp_checksum=udp_checksum_note(info),
        tfc_pad_len=info.tfc_pad_len,
    )


def esp_add_sa(rx, fields: Mapping[str, Any]) -> int:  # type: ignore[no-untyped-def]
    keep: list = []
    return lib.pe_esp_rx_add_sa(rx, c_struct("pe_esp_sa_config", lib.pe_esp_sa_config_init, fields, keep))


def esp_set_next_iv(tx, iv: bytes) -> int:  # type: ignore[no-untyped-def]
    """AES-CBC: the IV of the next packet, once (pe_esp_tx_set_next_iv: for reproducible test octets)."""
    return lib.pe_esp_tx_set_next_iv(tx, iv, len(iv))


ESP = _ipsec(
    "esp",
    encap=lambda tx, p, n, _extra, out, cap, out_len: lib.pe_esp_encap(tx, p, n, out, cap, out_len),
    seal=lambda tx, p, n, nh, _extra, out, cap, out_len: lib.pe_esp_seal(tx, nh, p, n, out, cap, out_len),
    fields=esp_info_fields,
    next_counter=lambda tx, _extra: lib.pe_esp_tx_next_seq(tx) or None,
    set_next_counter=lambda tx, value, _extra: lib.pe_esp_tx_set_next_seq(tx, value),
    # ESP's encrypt_batch is the core's own transform, no Python per packet
    batch_encap=lambda tx, _extra: (lib.pe_esp_capture_encap, tx),
    bursts=lambda tx: lib.pe_esp_capture_encap_burst if lib.pe_esp_tx_bursts(tx) else None,
    rx_bursts=lambda rx: bool(lib.pe_esp_rx_bursts(rx)),
    pool=POOL_ESP,
)

# --------------------------------------------------------------------------------------------------- shared


def ipsec_suite_lengths(encr: int, key_bits: int) -> Tuple[int, Tuple[int, int, int, bool, int]]:
    """(status, (salt_len, iv_len, icv_len, integrity_only, key_len)) of a suite at a key size (0: its only one)."""
    s = ffi.new("pe_ipsec_suite *")
    st = lib.pe_ipsec_suite_get(encr, key_bits, s)
    return st, (s.salt_len, s.iv_len, s.icv_len, bool(s.integrity_only), s.key_len)


#: What the core's UDP 4500 rule (pe_ipsec_udp_classify) makes of a payload, by name.
UDP4500_KINDS = {lib.PE_UDP4500_KEEPALIVE: "keepalive", lib.PE_UDP4500_IKE: "ike", lib.PE_UDP4500_EESP: "eesp",
                 lib.PE_UDP4500_ESP: "esp"}


def udp4500_kind(payload: bytes) -> str:
    """"keepalive", "ike", "eesp" or "esp": a UDP 4500 payload as a host that holds no ESP SAs sees it."""
    return UDP4500_KINDS[lib.pe_ipsec_udp_classify(payload, len(payload), ffi.NULL, ffi.NULL)]


def octets(buf, n: int) -> bytes:  # type: ignore[no-untyped-def]
    """The first ``n`` octets of a :func:`pecore.util.packet_buffer` view."""
    return ffi.buffer(buf, n)[:]


__all__ = [
    "EESP", "EESP_AADS", "EESP_BASE_LEN", "EESP_FORMATS", "EESP_MODES", "EESP_NO_LIMIT", "ESP", "ESP_MAX_TFC_PAD",
    "ESP_MODES", "ESP_NH_NO_NEXT", "MAX_IP_LEN", "OK", "PSP", "PSP_HDR_LEN", "PSP_MODES", "PSP_SPORT_CALLBACK",
    "PSP_SPORT_FIXED", "PSP_SPORT_XOR", "UDP4500_KINDS", "eesp_add_esp_spi", "eesp_add_sa", "eesp_derive_sub_sa_key",
    "eesp_header_build", "eesp_header_fields", "eesp_header_parse", "eesp_header_parse_lenient", "eesp_info_fields",
    "eesp_packet_opts", "eesp_set_capture_sub_sas", "esp_add_sa", "esp_info_fields", "esp_set_next_iv", "ipsec_suite_lengths", "octets",
    "psp_add_key", "psp_derive_key", "psp_header_build", "psp_header_fields", "psp_header_parse",
    "psp_header_parse_lenient", "psp_kdf_label", "psp_sport_callback", "udp4500_kind",
]
