"""The core's ESP receiver (through pyesp) against the independent model (tests/esp_model.py) on random traffic.

Packets sealed by the model -- every suite and key size, both modes, IPv4/IPv6 (transport mode with extension
headers), ESN or not, UDP encapsulation (SPIs with the top bit set too; UDP checksums as eesp.md D17 has them,
now and then 0 over IPv6), TFC padding in tunnel mode, receivers resumed anywhere (replayTop)
with windows that are and are not multiples of 64, sequence numbers around the window and the 2^32 boundaries,
non-default padding -- then, for a fifth of them, one bit flipped or the packet cut short.  Both receivers must
reach the same verdict (the same status name) and deliver the same octets.  The sweep is seeded, so a failure
names a case that replays.  (The vector files hold the edges one by one: tests/esp/test_esp_vectors.py.)
"""
from __future__ import annotations

import random

import pytest

import esp_model as m
from pecore.tools.vectors import Inner, Rng, hopopts, ip_packet, udp_segment

pyesp = pytest.importorskip("pyesp")

NAMES = {v: k for k, v in pyesp.SUITES.items()}
OUTER4 = bytes.fromhex("4500000000004000403200000a0000fe0a0000ff")
OUTER6 = bytes.fromhex("6000000000003240" + "20010db8ffff" + "00" * 9 + "01" + "20010db8eeee" + "00" * 9 + "02")


def _packet(r: random.Random, inner: Inner, mode: str) -> bytes:
    ipv = r.choice((4, 6))
    if ipv == 6 and mode == "transport" and r.random() < 0.4:  # extension headers on either side of ESP
        src, dst = inner.addrs(6)
        seg = udp_segment(inner.port(), inner.port(), inner.payload(r.randrange(0, 24)))
        chain = r.choice(([(0, hopopts)], [(60, hopopts)], [(0, hopopts), (60, hopopts)],
                          [(60, hopopts), (43, None)]))
        ext, nhs = b"", [t for t, _f in chain] + [17]
        for i, (t, _f) in enumerate(chain):
            ext += bytes([nhs[i + 1], 0, 253, 0, 0, 0, 0, 0]) if t == 43 else hopopts(nhs[i + 1])
        return ip_packet(src, dst, 17, seg, ext=ext, ext_nh=chain[0][0])
    return inner.by_kind(r.choice(("udp", "tcp", "icmp")), ipv, r.randrange(0, 40))


def _case(r: random.Random, inner: Inner):
    encr = r.choice(sorted(m.SUITES))
    s = m.SUITES[encr]
    klen = 32 if s.kind == "chacha" else r.choice((16, 24, 32))
    keymat = bytes(r.randrange(256) for _ in range(klen + s.salt_len))
    mode, esn, udp = r.choice(("tunnel", "transport")), r.random() < 0.5, r.random() < 0.3
    anti_replay, window = r.random() < 0.7, r.choice((64, 128, 1024, 100, 65))
    spi = r.randrange(0x100, 0xFFFFFFFF) if r.random() < 0.2 else r.randrange(0x100, 0x7FFFFFFF)
    limit = 2**64 if esn else 2**32
    top = r.choice((0, r.randrange(1, 2**32), 2**32 - 1, 2**32 + r.randrange(0, 200), r.randrange(2**32, 2**40)))
    top %= limit
    seq = top + r.choice((1, 2, -1, -r.randrange(0, 300), r.randrange(0, 2**32), -r.randrange(0, 2**32),
                          2**32 - window, 2**32 - window + 1, -window, -window + 1))
    if not 0 <= seq < limit:
        seq = r.randrange(1, limit)
    pkt = _packet(r, inner, mode)
    pad = None
    if r.random() < 0.15:
        pad = bytes(r.randrange(256) for _ in range(r.randrange(0, 12)))
    elif r.random() < 0.15:
        pad = bytes(range(1, r.randrange(1, 60)))
    # RFC 4303 §2.7: TFC padding (any octets) after a tunnelled packet
    tfc = bytes(r.randrange(256) for _ in range(r.randrange(1, 40))) if mode == "tunnel" and r.random() < 0.2 else b""
    tx = m.SA(spi=spi, encr_id=encr, keymat=keymat, mode=mode, esn=esn, udp_encap=udp)
    wire = m.encap(tx, pkt, seq, outer=r.choice((OUTER4, OUTER6)) if mode == "tunnel" else None, padding=pad, tfc=tfc)
    if udp and wire[0] >> 4 == 6 and r.random() < 0.15:  # a zero UDP checksum over IPv6 (D17)
        at = m._outer(wire)[1]
        wire = wire[: at + 6] + b"\0\0" + wire[at + 8 :]
    x = r.random()
    if x < 0.15:
        b = bytearray(wire)
        b[r.randrange(len(b))] ^= 1 << r.randrange(8)
        wire = bytes(b)
    elif x < 0.2:
        wire = wire[: r.randrange(len(wire))]
    rx = dict(spi=spi, mode=mode, esn=esn, anti_replay=anti_replay, replay_window=window, replay_top=top,
              udp_encap=udp)
    return encr, keymat, rx, wire


@pytest.mark.parametrize("seed", range(4))
def test_same_verdicts_on_random_traffic(seed):
    r = random.Random(seed)
    inner = Inner(Rng(seed, "esp-core-vs-model"))
    verdicts, differ = {}, []
    for i in range(600):
        encr, keymat, rx, wire = _case(r, inner)
        model_sa = m.SA(encr_id=encr, keymat=keymat, **rx)
        try:
            _o, got_m = m.decap({rx["spi"]: model_sa}, wire)
            vm = "ok"
        except m.EspModelError as e:
            vm, got_m = e.code, None
        core = pyesp.Receiver([pyesp.SA(rx.pop("spi"), NAMES[encr], keymat, **rx)])
        try:
            got_c, vc = core.decrypt(wire).packet, "ok"
        except pyesp.EspError as e:
            vc, got_c = e.code, None
        verdicts[vc] = verdicts.get(vc, 0) + 1
        if (vm, got_m) != (vc, got_c):
            differ.append((i, vm, vc, wire.hex()[:80]))
    assert not differ, differ[:5]
    # the sweep reaches the verdicts that matter
    assert {"ok", "authentication-failed", "esp-bad-padding", "udp-zero-checksum"} <= set(verdicts), verdicts
    assert verdicts["ok"] > 150, verdicts
