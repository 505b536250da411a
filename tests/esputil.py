"""What the ESP tests against scapy share (test_esp_scapy, test_esp_interop): the matrix of modes, address
families, ESN and UDP encapsulation they walk, and scapy's view of an IP packet."""
from __future__ import annotations

MATRIX = [(m, v6, esn, udp) for m in ("tunnel", "transport") for v6 in (False, True) for esn in (False, True)
          for udp in (False, True)]
MATRIX_IDS = [f"{m}-{'v6' if v6 else 'v4'}{'-esn' if esn else ''}{'-udp' if udp else ''}" for m, v6, esn, udp in MATRIX]


def scapy_pkt(b: bytes):  # type: ignore[no-untyped-def]
    """An IPv4 or IPv6 packet as scapy's layer (scapy imported here: the test files skip without it)."""
    from scapy.all import IP, IPv6

    return IPv6(b) if b[0] >> 4 == 6 else IP(b)
