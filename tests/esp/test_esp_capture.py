"""Whole capture files through pyesp.encrypt_capture / decrypt_capture (pe_esp_capture_encap/decap in the core's
capture loop).

A round trip gives back every IP packet byte for byte with its timestamp, in every format; EESP, IKE, NAT
keepalives, dummy packets and other traffic pass untouched and are counted under their reasons (RFC 3948 §2,
eesp.md §14); failed packets are counted by reason and kept or dropped; every packet is counted once.
"""
from __future__ import annotations

import struct

import pytest

import pyesp
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, CaptureWriter, read_capture
from pecore.keys import parse_key_file
from pecore.protocol import checksum
from pyesp import SA, CaptureError, ConfigurationError, Receiver

KEY = bytes.fromhex("00112233445566778899aabbccddeeff" "01020304")
V4 = [bytes([192, 168, 1, i]) for i in range(1, 9)]
V6 = [bytes.fromhex("20010db8" + "00" * 11) + bytes([i]) for i in range(1, 9)]


def ipv4(proto: int, payload: bytes, src: bytes = V4[0], dst: bytes = V4[1], ident: int = 0) -> bytes:
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, 0x4000, 64, proto, 0, src, dst))
    h[10:12] = struct.pack("!H", checksum(bytes(h)))
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes, src: bytes = V6[0], dst: bytes = V6[1]) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60012345, len(payload), nh, 64, src, dst) + payload


def udp(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def ip_packet(i: int) -> bytes:
    n = 18 + (i * 97) % 1380
    data = bytes((i + k) & 0xFF for k in range(n))
    if i % 2:
        return ipv6(17, udp(5353 + i % 3, 5353, data), V6[i % 5], V6[(i * 3 + 1) % 7])
    return ipv4(17, udp(5000 + i % 13, 53, data), V4[i % 5], V4[(i * 3 + 1) % 7], ident=i)


def ether(pkt: bytes) -> bytes:
    return bytes.fromhex("008899aabb00002233445500") + struct.pack("!H", 0x0800 if pkt[0] >> 4 == 4 else 0x86DD) + pkt


def write(path, frames, linktype=LINKTYPE_RAW, fmt="pcap", ts0=1_700_000_000):
    with CaptureWriter(str(path), linktype, fmt=fmt) as w:
        for i, f in enumerate(frames):
            w.write(f, (ts0 + i, i * 1000))


@pytest.mark.parametrize("fmt", ["pcap", "pcap-nsec", "pcapng"])
@pytest.mark.parametrize("mode,esn,udp_encap", [("tunnel", False, False), ("transport", True, True),
                                                ("tunnel", True, True), ("transport", False, False)])
def test_round_trip_is_byte_identical(tmp_path, fmt, mode, esn, udp_encap):
    pkts = [ip_packet(i) for i in range(60)]
    src, enc, dec = tmp_path / "in.cap", tmp_path / "enc.cap", tmp_path / "dec.cap"
    write(src, [ether(p) for p in pkts], LINKTYPE_ETHERNET, fmt)
    first = 0xFFFF_FFF0 if esn else 1  # ESN: the run crosses 2^32
    sa = SA(0x77, "aes-gcm-16", KEY, mode=mode, esn=esn, udp_encap=udp_encap, first_seq=first)
    s = pyesp.encrypt_capture(sa, src, enc)
    assert (s.packets, s.transformed, s.failed) == (60, 60, 0)
    assert sa.next_seq() == first + 60
    s = pyesp.decrypt_capture(SA(0x77, "aes-gcm-16", KEY, mode=mode, esn=esn, first_seq=first), enc, dec)
    assert (s.packets, s.transformed, s.failed) == (60, 60, 0)
    assert dec.read_bytes() == src.read_bytes()
    recs = list(read_capture(enc))
    assert all(r.ip_packet()[9 if r.ip_packet()[0] >> 4 == 4 else 6] == (17 if udp_encap else 50) for r in recs)


def test_passes_what_is_not_esp_and_counts_failures(tmp_path):
    sa = SA(0x77, "aes-gcm-16", KEY)
    good = [sa.encrypt(ip_packet(i)) for i in range(4)]
    bad = bytearray(good[1])
    bad[-1] ^= 1
    dummy = ipv4(50, sa.seal(b"x" * 9, 59))
    other = [ip_packet(9), ipv4(17, udp(4500, 4500, b"\xff")),  # NAT keepalive
             ipv4(17, udp(4500, 4500, b"\0\0\0\0" + b"ike")),  # IKE's non-ESP marker
             ipv4(17, udp(4500, 4500, b"\x80" + bytes(30)))]   # EESP (top bit set)
    frames = [good[0], bytes(bad), good[1], good[1], dummy, *other, good[2], SA(0x99, "aes-gcm-16", KEY).encrypt(
        ip_packet(1))]
    src = tmp_path / "in.pcap"
    write(src, frames)
    rx = Receiver([SA(0x77, "aes-gcm-16", KEY)])
    s = pyesp.decrypt_capture(rx, src, tmp_path / "out.pcap")
    assert s.packets == len(frames) == s.transformed + s.passed + s.failed
    assert s.transformed == 3 and s.failed == 3
    assert s.failed_by_reason == {"authentication-failed": 1, "replay-duplicate": 1, "esp-no-sa": 1}
    assert s.passed_by_reason == {"not-esp": 1, "nat-keepalive": 1, "ike-non-esp-marker": 1, "eesp-in-udp": 1,
                                  "esp-dummy-packet": 1}
    out = [r.data for r in read_capture(tmp_path / "out.pcap")]
    assert out[1] == bytes(bad) and out[4] == dummy and out[5:9] == other  # kept as captured
    s = pyesp.decrypt_capture(Receiver([SA(0x77, "aes-gcm-16", KEY)]), src, tmp_path / "drop.pcap", drop_failed=True)
    assert len(list(read_capture(tmp_path / "drop.pcap"))) == len(frames) - 3


def test_key_file_receiver_and_options(tmp_path):
    kf = parse_key_file(f"esp-sa spi=0x77 suite=aes-gcm-16 key={KEY.hex()} mode=transport esn=1 first-seq=0x100000000\n")
    (e,) = kf.esp_sas
    sa = SA(**e.settings)
    assert sa.next_seq() == 2**32
    src, enc = tmp_path / "in.pcapng", tmp_path / "enc.pcap"
    write(src, [ip_packet(i) for i in range(5)], fmt="pcapng")
    pyesp.encrypt_capture(sa, src, enc, fmt="pcap", jobs=4)
    assert next(iter(read_capture(enc))) is not None and enc.read_bytes()[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1")
    s = pyesp.decrypt_capture(kf, enc, tmp_path / "dec.pcapng", fmt="pcapng")
    assert s.transformed == 5
    assert [r.data for r in read_capture(tmp_path / "dec.pcapng")] == [ip_packet(i) for i in range(5)]
    seen = []
    pyesp.decrypt_capture(SA(**e.settings), enc, tmp_path / "p.pcap", progress=lambda *a: seen.append(a))
    with pytest.raises(ConfigurationError):
        pyesp.encrypt_capture(sa, src, tmp_path / "x.pcap", jobs=0)
    with pytest.raises(TypeError):
        pyesp.decrypt_capture("keys.txt", src, tmp_path / "x.pcap")
    with pytest.raises(CaptureError) as ei:
        pyesp.encrypt_capture(sa, tmp_path / "missing.pcap", tmp_path / "x.pcap")
    assert isinstance(ei.value, pyesp.EspError) and ei.value.code == "capture-io"


@pytest.mark.parametrize("jobs", [1, 3])
def test_capture_decrypts_udp_checksum_problems_and_notes_them(tmp_path, jobs):
    """D17: a capture someone else made is decrypted whatever its UDP checksums, even with an endpoint's
    Receiver (which refuses these packets), and the summary counts what an endpoint would have refused."""
    sa = SA(0x77, "aes-gcm-16", KEY, mode="tunnel", udp_encap=True)
    pkts = [ipv6(17, udp(5353, 53, bytes(40 + i))) for i in range(6)]
    wire = [bytearray(sa.encrypt(p)) for p in pkts]
    assert all(w[6] == 17 and w[46:48] != b"\0\0" for w in wire)  # IPv6: the sender computes it
    wire[1][46:48] = b"\0\0"
    wire[2][46:48] = b"\0\0"
    wire[4][46] ^= 0x10
    src, out = tmp_path / "in.pcap", tmp_path / "out.pcap"
    write(src, [bytes(w) for w in wire])
    endpoint = Receiver([SA(0x77, "aes-gcm-16", KEY, mode="tunnel")])
    for i, code in ((1, "udp-zero-checksum"), (4, "udp-bad-checksum")):
        with pytest.raises(pyesp.MalformedPacketError) as ei:
            Receiver([SA(0x77, "aes-gcm-16", KEY, mode="tunnel")]).decrypt(bytes(wire[i]))
        assert ei.value.code == code
    s = pyesp.decrypt_capture(endpoint, src, out, jobs=jobs)
    assert (s.packets, s.transformed, s.failed) == (6, 6, 0)
    assert s.noted_by_reason == {"udp-zero-checksum": 2, "udp-bad-checksum": 1}
    assert "udp-zero-checksum: 2" in s.format("decrypted")
    assert [r.data for r in read_capture(out)] == pkts


@pytest.mark.parametrize("jobs", [1, 3])
def test_tfc_padding_through_captures(tmp_path, jobs):
    """TFC padding (RFC 4303 §2.7) from a key file's tfc-pad= through encrypt and decrypt, on one thread and
    several: every packet grows by it, and decrypts back to what went in."""
    kf = parse_key_file(f"esp-sa spi=0x77 suite=aes-gcm-16 key={KEY.hex()} tfc-pad=1024\n")
    (e,) = kf.esp_sas
    pkts = [ip_packet(i) for i in range(12)]
    src, enc, dec = tmp_path / "in.pcap", tmp_path / "enc.pcap", tmp_path / "dec.pcap"
    write(src, pkts)
    s = pyesp.encrypt_capture(SA(**e.settings), src, enc, jobs=jobs)
    assert (s.packets, s.transformed, s.failed) == (12, 12, 0), s.failed_by_reason
    plain = [SA(0x77, "aes-gcm-16", KEY).encrypt(p) for p in pkts]
    assert [len(r.data) for r in read_capture(enc)] == [len(p) + 1024 for p in plain]
    s = pyesp.decrypt_capture(kf, enc, dec, jobs=jobs)
    assert (s.packets, s.transformed, s.failed) == (12, 12, 0)
    assert [r.data for r in read_capture(dec)] == pkts
