"""Sub SA state is bounded (core/include/pe/eesp.h, docs/security.md): `max_live_sub_sas` key contexts per SA.

Through pyeesp: a receiver and a sender capped at a few live Sub SAs meet many more Session IDs with valid
packets.  Evicted Sub SAs are derived again on their next packet (fresh packets decrypt), the sender's sequence
numbers never go back, and a packet replayed after its Sub SA was evicted is still refused as a replay.  The cap
comes from SA(max_live_sub_sas=) and from the key file's `max-live-sub-sas=`.
"""
from __future__ import annotations

import pytest

from pecore.keys import parse_key_file

pyeesp = pytest.importorskip("pyeesp")

ROOT = bytes(range(0x40, 0x60))
INNER = bytes.fromhex("450000300000000040110000c0000201c000020200350035001c0000") + bytes(20)


def pair(**kw):
    sa = pyeesp.SA(0x2000, root_key=ROOT, sskdf="hkdf-sha256", **kw)
    return sa, pyeesp.Receiver([sa])


def test_evicted_sub_sas_come_back_and_replays_stay_refused():
    sa, rx = pair(max_live_sub_sas=4)
    first = {}
    for sid in range(64):
        first[sid] = sa.encrypt(INNER, sub_sa_id=sid)
        assert rx.decrypt(first[sid]).seq == 1
    # Session ID 0 was evicted on both sides long ago.
    assert sa.next_seq(0) == 2
    with pytest.raises(pyeesp.ReplayError) as e:
        rx.decrypt(first[0])
    assert e.value.code == "replay-duplicate"
    fresh = sa.encrypt(INNER, sub_sa_id=0)
    d = rx.decrypt(fresh)
    assert (d.seq, d.sub_sa_id, d.packet) == (2, 0, INNER)
    with pytest.raises(pyeesp.ReplayError):
        rx.decrypt(fresh)


def test_late_packet_of_an_evicted_sub_sa_is_refused_but_live_ones_take_it():
    """The documented price: an evicted Sub SA's window is rebuilt from its top, so a late packet is refused."""
    sa, rx = pair(max_live_sub_sas=2)
    held = {}
    for sid in (1, 2):
        rx.decrypt(sa.encrypt(INNER, sub_sa_id=sid))
        held[sid] = sa.encrypt(INNER, sub_sa_id=sid)  # seq 2, delivered late
        rx.decrypt(sa.encrypt(INNER, sub_sa_id=sid))  # seq 3
    rx.decrypt(sa.encrypt(INNER, sub_sa_id=1))  # 1 used last: 2 is the least recently used
    rx.decrypt(sa.encrypt(INNER, sub_sa_id=3))  # evicts 2
    assert rx.decrypt(held[1]).seq == 2
    with pytest.raises(pyeesp.ReplayError):
        rx.decrypt(held[2])


@pytest.mark.parametrize("bad", [0, 65537, -1])
def test_the_cap_is_checked(bad):
    with pytest.raises(pyeesp.ConfigurationError):
        pyeesp.SA(0x2000, root_key=ROOT, sskdf="hkdf-sha256", max_live_sub_sas=bad)


def test_key_file_field_reaches_the_sa():
    kf = parse_key_file(f"eesp-sa spi=0x2000 suite=aes-gcm-16 root-key={ROOT.hex()} sskdf=hkdf-sha256 "
                        "max-live-sub-sas=2\neesp-sa spi=0x2001 suite=aes-gcm-16 key=" + "22" * 20 + "\n")
    assert kf.eesp_sas[0].settings["max_live_sub_sas"] == 2
    assert kf.eesp_sas[1].settings["max_live_sub_sas"] == 1024
    sa = pyeesp.SA(**kf.eesp_sas[0].settings)
    rx = pyeesp.Receiver([sa])
    held = sa.encrypt(INNER, sub_sa_id=1)
    rx.decrypt(sa.encrypt(INNER, sub_sa_id=1))
    for sid in (2, 3):
        rx.decrypt(sa.encrypt(INNER, sub_sa_id=sid))
    with pytest.raises(pyeesp.ReplayError):  # a cap of 2 evicted Sub SA 1: its late seq 1 is refused
        rx.decrypt(held)


def test_open_without_the_window_does_not_reopen_an_evicted_sub_sas_old_numbers():
    """Brought back by open(replay=False), an evicted Sub SA's window still starts at its evicted top."""
    sa, rx = pair(max_live_sub_sas=2)
    old = [sa.encrypt(INNER, sub_sa_id=1) for _ in range(4)]
    for w in old[:3]:
        rx.decrypt(w)
    for sid in (2, 3):  # 3 evicts 1
        rx.decrypt(sa.encrypt(INNER, sub_sa_id=sid))
    assert rx.open(old[3][20:], replay=False).seq == 4
    for w in old[:3]:
        with pytest.raises(pyeesp.ReplayError) as e:
            rx.decrypt(w)
        assert e.value.code == "replay-duplicate"
    assert rx.decrypt(old[3]).seq == 4  # the unchecked open moved nothing
