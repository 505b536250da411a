#!/usr/bin/env python3
"""atheris: dissection with the scapy layers pypsp.scapy.PSP and pyeesp.scapy.EESP.

The layers dissect as far as the octets allow and never raise (LenientDissect),
so *no* exception is accepted here: not even the project's typed ones.  Each
input is dissected as PSP, as EESP (with several registered SPI layouts:
no Sequence Number, implicit IV, short ICV, clear PIH), or inside an IPv4
packet (UDP 1000 for PSP; IP protocol 49 and, after bind_udp_encap, UDP 4500
for EESP, ESP, IKE and keepalives).  A dissected packet must show, summarise
and rebuild to exactly the octets it was dissected from.
"""
import importlib
import struct
import sys

import atheris

import _common

importlib.import_module("scapy.all")  # scapy itself is not instrumented: load it before the block below
from scapy.layers.inet import IP  # noqa: E402

with atheris.instrument_imports(include=_common.INSTRUMENT):
    from pypsp.scapy import PSP
    from pyeesp.scapy import EESP, IPsecUDPEncap, bind_udp_encap, register_layout

#: SPI -> layout, for the seeds (make_corpus.py uses the same SPIs).
LAYOUTS = {
    0x00000101: dict(seq=False, iv_len=8, icv_len=16),
    0x00000102: dict(seq=True, iv_len=0, icv_len=16),
    0x00000103: dict(seq=True, iv_len=8, icv_len=8),
    0x00000104: dict(seq=True, iv_len=8, icv_len=16, clear_pih=True),
    0x00000105: dict(seq=True, iv_len=0, icv_len=12),
}
for _spi, _layout in LAYOUTS.items():
    register_layout(_spi, **_layout)
bind_udp_encap()

MODES = ("psp", "eesp", "ip-udp-1000", "ip-proto-49", "ip-udp-4500", "udp-4500-dispatch")


def ipv4(payload: bytes, proto: int) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, min(20 + len(payload), 0xFFFF), 0, 0, 64, proto, 0,
                       bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + payload


def udp(payload: bytes, port: int) -> bytes:
    return struct.pack("!HHHH", port, port, min(8 + len(payload), 0xFFFF), 0) + payload


def check(pkt, raw: bytes) -> None:
    pkt.summary()
    pkt.show(dump=True)
    repr(pkt)
    if not raw:
        return  # scapy reads Layer(b"") as "build one with the defaults", not as a dissection
    rebuilt = bytes(pkt)
    assert rebuilt == raw, (rebuilt.hex(), raw.hex())


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = MODES[fdp.ConsumeIntInRange(0, len(MODES) - 1)]
    raw = fdp.ConsumeBytes(fdp.remaining_bytes())
    if mode == "psp":
        check(PSP(raw), raw)
    elif mode == "eesp":
        check(EESP(raw), raw)
    elif mode == "ip-udp-1000":
        wire = ipv4(udp(raw, 1000), 17)
        check(IP(wire), wire)
    elif mode == "ip-proto-49":
        wire = ipv4(raw, 49)
        check(IP(wire), wire)
    elif mode == "ip-udp-4500":
        wire = ipv4(udp(raw, 4500), 17)
        check(IP(wire), wire)
    else:
        # The classifier alone: what it hands to scapy's own ESP/IKE/keepalive classes is scapy's business.
        cls = IPsecUDPEncap.dispatch_hook(raw)
        if cls is EESP:
            check(cls(raw), raw)
        else:
            assert raw == b"" or cls.__name__ in ("ESP", "NON_ESP", "NAT_KEEPALIVE"), cls


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
