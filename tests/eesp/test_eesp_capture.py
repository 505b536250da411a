"""Whole capture files through pyeesp.encrypt_capture / decrypt_capture.

Captures are written with pecore.capture.CaptureWriter (pcap, pcap-nsec,
pcapng; Ethernet and raw-IP link types) and read back with
pecore.capture.read_capture.  A round trip must give back every IP packet byte
for byte with its timestamp; ESP-in-UDP, IKE, NAT keepalives and other traffic
on the way back must pass untouched and be counted under their reasons (§14);
every packet is counted once in the summary.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import pyeesp
from pecore.capture import LINKTYPE_ETHERNET, LINKTYPE_RAW, CaptureWriter, read_capture
from pyeesp import SA, CaptureError, ConfigurationError, EespError, Header, Receiver, SubSaError
from pecore.protocol import checksum

ROOT = bytes(range(32))
KEY = bytes.fromhex("00112233445566778899aabbccddeeff" "01020304")
KEY_CCM = bytes.fromhex("0f0e0d0c0b0a09080706050403020100" "aabbcc")

V4 = [bytes([192, 168, 1, i]) for i in range(1, 9)]
V6 = [bytes.fromhex("20010db8" + "00" * 11) + bytes([i]) for i in range(1, 9)]
MAC_DST, MAC_SRC = bytes.fromhex("008899aabb00"), bytes.fromhex("002233445500")


def _csum(data: bytes) -> int:
    """The one's-complement sum folded to 16 bits (not complemented), from the core's checksum."""
    return 0xFFFF ^ checksum(data)


def ipv4(proto: int, payload: bytes, src: bytes = V4[0], dst: bytes = V4[1], ident: int = 0, flags: int = 0x4000) -> bytes:
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, flags, 64, proto, 0, src, dst))
    h[10:12] = struct.pack("!H", 0xFFFF ^ _csum(bytes(h)))
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes, src: bytes = V6[0], dst: bytes = V6[1]) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60012345, len(payload), nh, 64, src, dst) + payload


def udp(sport: int, dport: int, data: bytes) -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def tcp(sport: int, dport: int, data: bytes, seq: int = 1) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 0x50, 0x18, 1024, 0, 0) + data


def payload(i: int, n: int) -> bytes:
    return bytes((i + k) & 0xFF for k in range(n))


def ip_packet(i: int) -> bytes:
    """The i-th packet of a mix: IPv4/IPv6 x TCP/UDP, several hosts and ports, sizes 18..1400."""
    n = 18 + (i * 97) % 1380
    a, b = i % 5, (i * 3 + 1) % 7
    kind = i % 4
    if kind == 0:
        return ipv4(17, udp(5000 + i % 13, 53, payload(i, n)), V4[a], V4[b], ident=i & 0xFFFF)
    if kind == 1:
        return ipv4(6, tcp(443, 40000 + i % 11, payload(i, n), seq=i), V4[b], V4[a])
    if kind == 2:
        return ipv6(17, udp(5353 + i % 3, 5353, payload(i, n)), V6[a], V6[b])
    return ipv6(6, tcp(50000 + i % 9, 22, payload(i, n), seq=i), V6[b], V6[a])


def ether(ethertype: int, body: bytes) -> bytes:
    return MAC_DST + MAC_SRC + struct.pack("!H", ethertype) + body


def ether_ip(pkt: bytes) -> bytes:
    return ether(0x0800 if pkt[0] >> 4 == 4 else 0x86DD, pkt)


def arp(i: int) -> bytes:
    body = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, MAC_SRC, V4[0], bytes(6), bytes([192, 168, 1, i & 0xFF]))
    return ether(0x0806, body + bytes(18))


def frame(pkt: bytes, linktype: int) -> bytes:
    return pkt if linktype == LINKTYPE_RAW else ether_ip(pkt)


def timestamp(i: int, fmt: str):
    nsec = (i * 123_456_789) % 1_000_000_000
    if fmt == "pcap":
        nsec -= nsec % 1000  # microsecond resolution survives exactly
    return (1_700_000_000 + i * 3, nsec)


def write(path: Path, frames, fmt: str = "pcap", linktype: int = LINKTYPE_ETHERNET, stamps=None) -> None:
    with CaptureWriter(path, linktype=linktype, fmt=fmt) as w:
        for i, f in enumerate(frames):
            w.write(f, stamps[i] if stamps else timestamp(i, fmt))


def records(path):
    return list(read_capture(path))


def eesp_of(ip: bytes):
    """(EESP octets, UDP-encapsulated?) of an outer IP packet without extension headers, or None."""
    ih = (ip[0] & 15) * 4 if ip[0] >> 4 == 4 else 40
    proto = ip[9] if ip[0] >> 4 == 4 else ip[6]
    if proto == 49:
        return ip[ih:], False
    if proto == 17 and struct.unpack("!H", ip[ih + 2 : ih + 4])[0] == 4500 and ip[ih + 8] & 0x80:
        return ip[ih + 8 :], True
    return None


FORMATS = ["pcap", "pcap-nsec", "pcapng"]
LINKTYPES = [LINKTYPE_ETHERNET, LINKTYPE_RAW]

SA_KINDS = {
    "tunnel-sub-sas": dict(spi=0x1000, root_key=ROOT, max_sub_sa_id=15),
    "transport-udp": dict(spi=0x2000, key=KEY, mode="transport", udp_encap=True),
    "ccm-iiv-tunnel-full": dict(spi=0x3000, suite="aes-ccm-8-iiv", key=KEY_CCM, format="full"),
    "gmac-noseq-transport": dict(spi=0x4000, suite="aes-gmac", key=KEY, mode="transport", seq=False),
}


def make(kind: str, **extra) -> SA:
    kw = dict(SA_KINDS[kind])
    kw.update(extra)
    return SA(kw.pop("spi"), kw.pop("suite", "aes-gcm-16"), **kw)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("linktype", LINKTYPES)
@pytest.mark.parametrize("kind", list(SA_KINDS))
def test_round_trip(tmp_path, fmt, linktype, kind):
    transport = "transport" in kind
    frag = ipv4(6, tcp(80, 8080, payload(9, 64)), ident=0x4242, flags=0x2000)  # MF
    frames, kinds = [], []
    for i in range(36):
        frames.append(frame(ip_packet(i), linktype))
        kinds.append("ip")
        if i % 8 == 3:
            frames.append(arp(i) if linktype == LINKTYPE_ETHERNET else b"\x00\x01\x02\x03" + bytes(30))
            kinds.append("non-ip")
        if i == 5:
            frames.append(frame(frag, linktype))
            kinds.append("fragment")
    src, mid, out = tmp_path / "in", tmp_path / "enc", tmp_path / "dec"
    write(src, frames, fmt, linktype)
    original = records(src)
    assert [r.data for r in original] == frames

    sa = make(kind)
    n_ip, n_non, n_frag = kinds.count("ip"), kinds.count("non-ip"), kinds.count("fragment")
    s = pyeesp.encrypt_capture(sa, src, mid)
    assert s.packets == len(frames) == s.transformed + s.passed + s.failed
    if transport:  # transport mode refuses fragments; tunnel mode carries them whole
        assert (s.transformed, s.passed, s.failed) == (n_ip, n_non, n_frag)
        assert s.failed_by_reason == {"ip-fragment": n_frag}
    else:
        assert (s.transformed, s.passed, s.failed) == (n_ip + n_frag, n_non, 0)
        assert s.failed_by_reason == {}
    assert s.passed_by_reason == {"not-ip": n_non}
    assert sa.next_seq() == 1 + s.transformed  # all on Sub SA 0; the refused fragment spent nothing

    # the same SA, packet by packet, gives the same octets
    ref = make(kind)
    encrypted = records(mid)
    assert len(encrypted) == len(frames)
    for r, o, k in zip(encrypted, original, kinds):
        assert (r.ts_sec, r.ts_nsec, r.linktype) == (o.ts_sec, o.ts_nsec, o.linktype)
        if k == "non-ip" or (k == "fragment" and transport):
            assert r.data == o.data
            continue
        assert r.ip_packet() == ref.encrypt(o.ip_packet())
        assert r.l2_header() == o.l2_header()
        e = eesp_of(r.ip_packet())
        assert e is not None and e[1] == ("udp" in kind)

    s = pyeesp.decrypt_capture(make(kind), mid, out)
    assert s.packets == len(frames) and s.failed == 0 and s.failed_by_reason == {}
    if transport:
        assert (s.transformed, s.passed) == (n_ip, n_non + n_frag)
        assert s.passed_by_reason == {"not-ip": n_non, "not-eesp": n_frag}
    else:
        assert (s.transformed, s.passed) == (n_ip + n_frag, n_non)
        assert s.passed_by_reason == {"not-ip": n_non}
    restored = records(out)
    assert len(restored) == len(original)
    for i, (r, o) in enumerate(zip(restored, original)):
        assert r.data == o.data, f"frame {i} ({kinds[i]}) differs"
        assert (r.ts_sec, r.ts_nsec, r.linktype, r.origlen) == (o.ts_sec, o.ts_nsec, o.linktype, o.origlen)


def test_tunnel_header_template_changes_and_restores_the_ethertype(tmp_path):
    tmpl = ipv6(0, b"", V6[6], V6[7])
    sa = SA(0x55, key=KEY, tunnel_header=tmpl)
    frames = [ether_ip(ip_packet(i)) for i in range(12)]
    src, mid, out = tmp_path / "in", tmp_path / "enc", tmp_path / "dec"
    write(src, frames, "pcapng")
    assert pyeesp.encrypt_capture(sa, src, mid).transformed == 12
    for r in records(mid):
        assert r.l2_header()[-2:] == b"\x86\xdd" and r.ip_packet()[8:40] == tmpl[8:40]
    assert pyeesp.decrypt_capture(SA(0x55, key=KEY), mid, out).transformed == 12
    assert [r.data for r in records(out)] == frames


# --------------------------------------------------------------------------- mixed traffic


def _esp_in_udp(i: int, v6: bool = False) -> bytes:
    esp = struct.pack("!II", 0x00001234 + i, i + 1) + payload(i, 40)  # SPI with MSB 0
    return (ipv6 if v6 else ipv4)(17, udp(4500, 4500, esp))


def _ike(i: int, v6: bool = False) -> bytes:
    ike = b"\0\0\0\0" + bytes.fromhex("0123456789abcdef" "0000000000000000" "21202208") + struct.pack("!II", i, 36)
    return (ipv6 if v6 else ipv4)(17, udp(4500, 4500, ike))


def _keepalive(v6: bool = False) -> bytes:
    return (ipv6 if v6 else ipv4)(17, udp(4500, 4500, b"\xff"))


@pytest.mark.parametrize("fmt,linktype", [("pcap", LINKTYPE_ETHERNET), ("pcapng", LINKTYPE_ETHERNET),
                                          ("pcap-nsec", LINKTYPE_RAW)])
def test_mixed_traffic(tmp_path, fmt, linktype):
    a = make("tunnel-sub-sas")  # EESP in IP protocol 49
    b = make("transport-udp")  # EESP in UDP 4500
    clear_a = [ip_packet(i) for i in range(20)]
    clear_b = [ip_packet(100 + i) for i in range(20)]
    enc_a = [a.encrypt(p, i % 3) for i, p in enumerate(clear_a)]
    enc_b = [b.encrypt(p) for p in clear_b]

    # (frame as captured, expected frame after decryption, category)
    items = []
    for i in range(20):
        items.append((enc_a[i], clear_a[i], "eesp"))
        items.append((enc_b[i], clear_b[i], "eesp"))
        if i % 4 == 0:
            items.append((_esp_in_udp(i, v6=i % 8 == 0), None, "esp-in-udp"))
        if i % 5 == 1:
            items.append((_ike(i, v6=i % 10 == 1), None, "ike-non-esp-marker"))
        if i % 6 == 2:
            items.append((_keepalive(v6=i % 12 == 2), None, "nat-keepalive"))
        if i % 3 == 0:
            items.append((ip_packet(200 + i), None, "not-eesp"))  # ordinary clear traffic
        if i % 7 == 0:
            items.append((ipv4(50, struct.pack("!II", 0x99, i + 1) + bytes(32)), None, "not-eesp"))  # ESP proper
        if i % 9 == 4:
            items.append((ipv4(17, udp(4500, 500, b"\0\0\0\0isakmp")), None, "not-eesp"))  # to another port
        if i in (6, 13, 19):  # replays of earlier EESP packets: counted, kept as captured
            items.append((enc_a[i - 3], None, "replay-duplicate"))
            items.append((enc_b[i - 5], None, "replay-duplicate"))
    if linktype == LINKTYPE_ETHERNET:
        items.insert(7, (None, None, "not-ip"))

    frames = [arp(1) if f is None else frame(f, linktype) for f, _, _ in items]
    stamps = [timestamp(i, fmt) for i in range(len(frames))]
    src, out, dropped = tmp_path / "mixed", tmp_path / "out", tmp_path / "dropped"
    write(src, frames, fmt, linktype, stamps)

    rx = Receiver([make("tunnel-sub-sas"), make("transport-udp")])
    s = pyeesp.decrypt_capture(rx, src, out)
    cats = [c for _, _, c in items]
    want_passed = {c: cats.count(c) for c in ("esp-in-udp", "ike-non-esp-marker", "nat-keepalive", "not-eesp", "not-ip")
                   if cats.count(c)}
    assert s.packets == len(frames)
    assert s.transformed == cats.count("eesp") == 40
    assert s.passed_by_reason == want_passed
    assert s.failed_by_reason == {"replay-duplicate": 6}
    assert (s.passed, s.failed) == (sum(want_passed.values()), 6)
    assert "replay-duplicate: 6" in s.format("decrypted")

    got = records(out)
    assert len(got) == len(frames)
    for i, (r, (f, clear, cat)) in enumerate(zip(got, items)):
        assert (r.ts_sec, r.ts_nsec) == stamps[i]
        if cat == "eesp":
            assert r.data == frame(clear, linktype), i
        else:  # untouched, including the replays
            assert r.data == frames[i], (i, cat)

    # drop_failed leaves the replays out, and only them; a fresh receiver has fresh windows
    rx2 = Receiver([make("tunnel-sub-sas"), make("transport-udp")])
    s2 = pyeesp.decrypt_capture(rx2, src, dropped, drop_failed=True)
    assert (s2.transformed, s2.passed, s2.failed) == (s.transformed, s.passed, s.failed)
    kept = [r.data for r in records(dropped)]
    assert kept == [r.data for r, (_, _, c) in zip(got, items) if c != "replay-duplicate"]

    # the windows persist in the receiver: the same file again is all replays
    s3 = pyeesp.decrypt_capture(rx, src, tmp_path / "again")
    assert s3.transformed == 0 and s3.failed_by_reason == {"replay-duplicate": 46}
    assert s3.passed_by_reason == want_passed


def test_udp_4500_classification_over_ipv6_and_ipv4(tmp_path):
    sa = make("transport-udp")
    frames = [_esp_in_udp(1), _esp_in_udp(2, v6=True), _ike(3), _ike(4, v6=True), _keepalive(), _keepalive(True),
              sa.encrypt(ip_packet(2)), sa.encrypt(ip_packet(3))]
    src = tmp_path / "in"
    write(src, frames, "pcapng", LINKTYPE_RAW)
    s = pyeesp.decrypt_capture(make("transport-udp"), src, tmp_path / "out")
    assert s.passed_by_reason == {"esp-in-udp": 2, "ike-non-esp-marker": 2, "nat-keepalive": 2}
    assert s.transformed == 2 and s.failed == 0
    assert [r.data for r in records(tmp_path / "out")] == frames[:6] + [ip_packet(2), ip_packet(3)]


# --------------------------------------------------------------------------- Sub SAs


def test_sub_sas_spread_flows(tmp_path):
    sa = SA(0x1000, root_key=ROOT, max_sub_sa_id=7)
    pkts = [ip_packet(i) for i in range(160)]
    src, mid, out = tmp_path / "in.pcapng", tmp_path / "enc.pcapng", tmp_path / "dec.pcapng"
    write(src, [ether_ip(p) for p in pkts], "pcapng")
    s = pyeesp.encrypt_capture(sa, src, mid, sub_sas=4)
    assert s.transformed == 160 and s.failed == 0

    by_flow: dict = {}
    seqs: dict = {}
    for r, p in zip(records(mid), pkts):
        e, _ = eesp_of(r.ip_packet())
        h = Header.parse(e)
        assert h.spi == 0x1000 and 0 <= h.session_id < 4
        seq = struct.unpack("!Q", e[8 + h.opt_len : 16 + h.opt_len])[0]
        seqs.setdefault(h.session_id, []).append(seq)
        ih = 20 if p[0] >> 4 == 4 else 40
        flow = (p[12:20] if ih == 20 else p[8:40], p[9] if ih == 20 else p[6], p[ih : ih + 4])
        by_flow.setdefault(flow, set()).add(h.session_id)
    assert len(seqs) >= 3, sorted(seqs)  # several Session IDs occur
    for sid, ss in seqs.items():
        assert ss == list(range(1, len(ss) + 1)), sid  # each Sub SA counts 1, 2, 3, ... in file order
        assert sa.next_seq(sid) == len(ss) + 1
    assert all(len(sids) == 1 for sids in by_flow.values())  # one flow stays on one Sub SA
    assert len(by_flow) > 8

    s = pyeesp.decrypt_capture(SA(0x1000, root_key=ROOT, max_sub_sa_id=7), mid, out)
    assert s.transformed == 160 and s.failed == 0
    assert [r.ip_packet() for r in records(out)] == pkts
    # a receiver that announced fewer Sub SAs drops the rest, by reason
    s = pyeesp.decrypt_capture(SA(0x1000, root_key=ROOT, max_sub_sa_id=1), mid, tmp_path / "few")
    n_high = sum(len(v) for k, v in seqs.items() if k > 1)
    assert s.failed_by_reason == ({"eesp-sub-sa-out-of-range": n_high} if n_high else {})
    assert s.transformed == 160 - n_high


def test_sub_sas_setting_is_validated(tmp_path):
    src = tmp_path / "in"
    write(src, [ether_ip(ip_packet(i)) for i in range(4)])
    for sa, n, cls in [
        (SA(1, root_key=ROOT, max_sub_sa_id=7), 9, SubSaError),  # above max + 1
        (SA(1, key=KEY), 2, SubSaError),  # no SSKDF: Sub SA 0 only
        (SA(1, root_key=ROOT), 0, ConfigurationError),
        (SA(1, root_key=ROOT), 65537, ConfigurationError),
        (SA(1, root_key=ROOT), "4", ConfigurationError),
    ]:
        with pytest.raises(cls) as ei:
            pyeesp.encrypt_capture(sa, src, tmp_path / "out", sub_sas=n)
        assert isinstance(ei.value, EespError) and str(ei.value)
        assert sa.next_seq() == 1
    sa = SA(1, root_key=ROOT, max_sub_sa_id=7)
    assert pyeesp.encrypt_capture(sa, src, tmp_path / "out", sub_sas=8).transformed == 4
    assert pyeesp.encrypt_capture(SA(1, root_key=ROOT), src, tmp_path / "out", sub_sas=65536).transformed == 4


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_key_keeps_or_drops_the_failed_packets(tmp_path, fmt):
    sa = make("tunnel-sub-sas")
    frames = []
    for i in range(30):
        frames.append(ether_ip(ip_packet(i)))
        if i % 7 == 0:
            frames.append(arp(i))
    src, mid = tmp_path / "in", tmp_path / "enc"
    write(src, frames, fmt)
    n_ip = 30
    pyeesp.encrypt_capture(sa, src, mid, sub_sas=3)
    encrypted = records(mid)

    wrong = SA(0x1000, root_key=bytes(32))
    s = pyeesp.decrypt_capture(wrong, mid, tmp_path / "kept")
    assert (s.packets, s.transformed, s.failed, s.passed) == (len(frames), 0, n_ip, len(frames) - n_ip)
    assert s.failed_by_reason == {"authentication-failed": n_ip}
    kept = records(tmp_path / "kept")
    assert [(r.data, r.ts_sec, r.ts_nsec) for r in kept] == [(r.data, r.ts_sec, r.ts_nsec) for r in encrypted]

    s = pyeesp.decrypt_capture(SA(0x1000, root_key=bytes(32)), mid, tmp_path / "dropped", drop_failed=True)
    assert s.failed_by_reason == {"authentication-failed": n_ip}
    dropped = records(tmp_path / "dropped")
    assert [r.data for r in dropped] == [r.data for r in encrypted if r.data[12:14] == b"\x08\x06"]

    s = pyeesp.decrypt_capture(SA(0x1001, key=KEY), mid, tmp_path / "nosa")
    assert s.failed_by_reason == {"eesp-no-sa": n_ip}


def test_mixed_failure_reasons_are_counted_by_name(tmp_path):
    sa = SA(0x1000, root_key=ROOT, max_sub_sa_id=3)
    good = [sa.encrypt(ip_packet(i), i % 2) for i in range(6)]
    tampered = bytearray(good[1])
    tampered[-1] ^= 1
    v3 = bytearray(good[2])
    ih = (v3[0] & 15) * 4 if v3[0] >> 4 == 4 else 40
    v3[ih] = 0x98
    other_spi = SA(0x1001, key=KEY).encrypt(ip_packet(7))
    high = SA(0x1000, root_key=ROOT).encrypt(ip_packet(8), 9)
    frames = [good[0], bytes(tampered), bytes(v3), other_spi, good[3], ip_packet(9), high, good[0]]
    src = tmp_path / "in"
    write(src, frames, "pcapng", LINKTYPE_RAW)
    s = pyeesp.decrypt_capture(SA(0x1000, root_key=ROOT, max_sub_sa_id=3), src, tmp_path / "out")
    assert (s.packets, s.transformed, s.passed, s.failed) == (8, 2, 1, 5)
    assert s.failed_by_reason == {"authentication-failed": 1, "eesp-unsupported-version": 1, "eesp-no-sa": 1,
                                  "eesp-sub-sa-out-of-range": 1, "replay-duplicate": 1}
    assert s.passed_by_reason == {"not-eesp": 1}
    out = [r.data for r in records(tmp_path / "out")]
    assert out == [ip_packet(0), bytes(tampered), bytes(v3), other_spi, ip_packet(3), ip_packet(9), high, good[0]]
    text = s.format("decrypted")
    for reason in s.failed_by_reason:
        assert f"{reason}: 1" in text


def test_dummy_packets_pass_as_captured(tmp_path):
    # a transport SA carries an IPv4 packet of protocol 59 as a dummy packet (§6): the receiver
    # authenticates it and discards it by design, so a capture keeps it as it was
    sa = SA(0x77, key=KEY, mode="transport")
    dummy = ipv4(59, b"\0" * 12)
    src, mid, out = tmp_path / "in", tmp_path / "enc", tmp_path / "dec"
    write(src, [ether_ip(ip_packet(0)), ether_ip(dummy), ether_ip(ip_packet(1))])
    assert pyeesp.encrypt_capture(sa, src, mid).transformed == 3
    s = pyeesp.decrypt_capture(SA(0x77, key=KEY, mode="transport"), mid, out)
    assert (s.transformed, s.passed, s.failed) == (2, 1, 0)
    assert s.passed_by_reason == {"eesp-dummy-packet": 1}
    enc, dec = records(mid), records(out)
    assert dec[1].data == enc[1].data
    assert [dec[0].data, dec[2].data] == [ether_ip(ip_packet(0)), ether_ip(ip_packet(1))]


def test_snaplen_cut_and_unsupported_link_types(tmp_path):
    sa = make("transport-udp")
    src = tmp_path / "in"
    with CaptureWriter(src, snaplen=200) as w:
        w.write(ether_ip(ip_packet(40)), (1, 0))  # cut by the snap length
        w.write(ether_ip(ip_packet(4))[:150], (2, 0))  # an IP packet cut short
    s = pyeesp.encrypt_capture(sa, src, tmp_path / "out")
    assert s.failed == 2 and s.transformed == 0 and s.failed_by_reason.get("capture-packet-cut") == 1
    assert [r.data for r in records(tmp_path / "out")] == [r.data for r in records(src)]
    assert sa.next_seq() == 1
    wifi = tmp_path / "wifi"
    with CaptureWriter(wifi, linktype=105) as w:
        for i in range(3):
            w.write(bytes(40) + ip_packet(i), (i, 0))
    s = pyeesp.decrypt_capture(sa, wifi, tmp_path / "out2")
    assert s.failed_by_reason == {"capture-unsupported-linktype": 3}


# --------------------------------------------------------------------------- progress


def test_progress_is_called_and_can_abort(tmp_path):
    sa = make("tunnel-sub-sas")
    src = tmp_path / "in"
    n = 9000
    with CaptureWriter(src, fmt="pcapng") as w:
        for i in range(n):
            w.write(ether_ip(ip_packet(i % 50)) if i % 1000 else arp(i), timestamp(i, "pcapng"))
    calls = []
    s = pyeesp.encrypt_capture(sa, src, tmp_path / "enc", sub_sas=4, progress=lambda d, t, p: calls.append((d, t, p)))
    size = os.path.getsize(src)
    assert s.packets == n and calls and calls[-1] == (size, size, n)
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and [c[2] for c in calls] == sorted(c[2] for c in calls)
    assert all(c[1] == size for c in calls)

    with pytest.raises(CaptureError) as ei:
        pyeesp.decrypt_capture(make("tunnel-sub-sas"), tmp_path / "enc", tmp_path / "aborted",
                               progress=lambda d, t, p: False)
    err = ei.value
    assert err.code == "capture-aborted" and isinstance(err, EespError) and str(err)
    assert err.summary is not None and err.summary.packets <= n
    with pytest.raises(ZeroDivisionError) as zi:  # the callback's own exception comes out as itself
        pyeesp.decrypt_capture(make("tunnel-sub-sas"), tmp_path / "enc", tmp_path / "aborted",
                               progress=lambda d, t, p: 1 / 0)
    assert zi.value.summary.packets <= n and not (tmp_path / "aborted").exists()
    for ok in (lambda d, t, p: None, lambda d, t, p: True):
        s = pyeesp.decrypt_capture(make("tunnel-sub-sas"), tmp_path / "enc", tmp_path / "ok", progress=ok)
        assert s.transformed == n - n // 1000


# --------------------------------------------------------------------------- bad files


@pytest.mark.parametrize("fmt", FORMATS)
def test_garbage_truncated_and_missing_files(tmp_path, fmt):
    sa = make("transport-udp")
    good = tmp_path / "good"
    write(good, [ether_ip(ip_packet(i)) for i in range(6)], fmt)
    data = good.read_bytes()

    def fails(path, code, fn=pyeesp.encrypt_capture, ctx=sa):
        with pytest.raises(CaptureError) as ei:
            fn(ctx, path, tmp_path / "out")
        err = ei.value
        assert err.code == code, (path, err.code)
        assert isinstance(err, EespError) and isinstance(err, OSError)
        assert str(err) and os.fspath(path) in str(err)
        return err

    (tmp_path / "empty").write_bytes(b"")
    fails(tmp_path / "empty", "capture-bad-format")
    (tmp_path / "garbage").write_bytes(bytes((i * 37 + 11) & 0xFF for i in range(500)))
    fails(tmp_path / "garbage", "capture-bad-format", pyeesp.decrypt_capture, Receiver([make("transport-udp")]))
    fails(tmp_path / "does-not-exist", "capture-io")
    (tmp_path / "cut").write_bytes(data[:-7])
    err = fails(tmp_path / "cut", "capture-truncated", pyeesp.decrypt_capture, make("transport-udp"))
    assert err.summary.packets == 5
    with pytest.raises(CaptureError) as ei:
        pyeesp.encrypt_capture(sa, good, tmp_path / "no-such-dir" / "out")
    assert ei.value.code == "capture-write-failed" and "no-such-dir/out" in str(ei.value)
    before = good.read_bytes()
    with pytest.raises(CaptureError) as ei:
        pyeesp.encrypt_capture(sa, good, good)  # in place: refused, the input is left intact
    assert ei.value.code and str(ei.value)
    assert good.read_bytes() == before
