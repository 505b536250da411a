"""ESP with AES-CBC + HMAC-SHA1-96 / HMAC-SHA-256-128 (RFC 3602, 2404, 4868) against scapy's own
SecurityAssociation (scapy.layers.ipsec on pyca/cryptography), both ways, on both crypto backends: the core's
packets decrypt in scapy, scapy's decrypt in the core, and with the same IV (the core's one-packet test hook,
scapy's ``iv=``) the two send the same octets.  Tunnel and transport, IPv4 and IPv6, ESN, UDP encapsulation."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("scapy")

from scapy.all import UDP, raw  # noqa: E402
from scapy.layers.ipsec import ESP, SecurityAssociation  # noqa: E402

import pyesp  # noqa: E402
from pecore.binding import lib  # noqa: E402
from pyesp.errors import AuthenticationError, EspError  # noqa: E402

from esputil import MATRIX, MATRIX_IDS, scapy_pkt  # noqa: E402
from test_esp_scapy import inner, outer  # noqa: E402  (the same packets as the AEAD suites' cross-checks)

#: the core's suite -> scapy's auth_algo and the integrity key's octets
SUITES = {"aes-cbc-hmac-sha1-96": ("HMAC-SHA1-96", 20), "aes-cbc-hmac-sha256-128": ("SHA2-256-128", 32)}
BACKENDS = [b for b in (lib.PE_BACKEND_OPENSSL, lib.PE_BACKEND_IPSEC_MB) if lib.pe_backend_available(b)]


@pytest.fixture(params=BACKENDS, ids=lambda b: "ipsec-mb" if b == lib.PE_BACKEND_IPSEC_MB else "openssl")
def on_backend(request):
    """New keys on this backend (pe_backend_set: the SAs made in the test take it)."""
    was = lib.pe_backend_current()
    assert lib.pe_backend_set(request.param) == lib.PE_OK
    yield request.param
    lib.pe_backend_set(was)


def keys(suite: str, bits: int):
    enc = bytes((0x3 * i + 7) & 0xFF for i in range(bits // 8))
    auth = bytes((0x11 * i + 5) & 0xFF for i in range(SUITES[suite][1]))
    return enc, auth


def pair(suite, bits, mode, v6, esn, udp, first):
    enc, auth = keys(suite, bits)
    sa = pyesp.SA(0x4004, suite, enc + auth, mode=mode, esn=esn, udp_encap=udp, first_seq=first,
                  outer_header=outer(v6) if mode == "tunnel" else None)
    ssa = SecurityAssociation(ESP, spi=0x4004, seq_num=first & 0xFFFFFFFF, crypt_algo="AES-CBC", crypt_key=enc,
                              auth_algo=SUITES[suite][0], auth_key=auth,
                              tunnel_header=scapy_pkt(outer(v6)) if mode == "tunnel" else None,
                              nat_t_header=UDP(sport=4500, dport=4500) if udp else None,
                              esn_en=esn, esn=first >> 32 if esn else 0)
    return sa, ssa


@pytest.mark.parametrize("mode,v6,esn,udp", MATRIX, ids=MATRIX_IDS)
@pytest.mark.parametrize("bits", [128, 256])
@pytest.mark.parametrize("suite", list(SUITES))
def test_both_ways(on_backend, suite, bits, mode, v6, esn, udp):
    first = (5 << 32) + 0x20 if esn else 0x20
    sa, ssa = pair(suite, bits, mode, v6, esn, udp, first)
    for i, n in enumerate((0, 1, 13, 14, 15, 16, 50, 301)):
        p = inner(v6, n)
        wire = sa.encrypt(p)
        got = ssa.decrypt(scapy_pkt(wire))  # ours in scapy's SecurityAssociation
        assert raw(got) == p
        # scapy's packet with the same sequence number and IV: the same octets
        iv = os.urandom(16)
        sa.set_test_iv(iv)
        ours = sa.encrypt(p)
        theirs = raw(ssa.encrypt(scapy_pkt(p), seq_num=(first + 2 * i + 1) & 0xFFFFFFFF, iv=iv))
        if udp and v6:
            # scapy writes UDP checksum 0 over IPv6, the core computes it (RFC 8200 §8.1): compare past it
            assert ours[:46] == theirs[:46] and ours[48:] == theirs[48:]
        else:
            assert ours == theirs
        # scapy's in ours, on a receiver of its own (the sender's SA holds the next number)
        rx = pyesp.Receiver([pyesp.SA(0x4004, suite, b"".join(keys(suite, bits)), mode=mode, esn=esn,
                                      replay_top=first - 1)], check_udp_checksum="note")
        d = rx.decrypt(theirs)
        assert d.packet == p and d.iv == iv and d.seq == first + 2 * i + 1


@pytest.mark.parametrize("suite", list(SUITES))
def test_forged_refused(on_backend, suite):
    sa, ssa = pair(suite, 128, "tunnel", False, True, False, (1 << 32) + 3)
    wire = bytearray(raw(ssa.encrypt(scapy_pkt(inner(False, 40)))))
    rx = pyesp.Receiver([pyesp.SA(0x4004, suite, b"".join(keys(suite, 128)), esn=True, replay_top=(1 << 32) + 2)])
    for at in (20 + 8, 20 + 30, len(wire) - 1):  # the IV, the ciphertext, the ICV
        bad = bytearray(wire)
        bad[at] ^= 0x80
        with pytest.raises(AuthenticationError):
            rx.decrypt(bytes(bad))
    # ESN's high half is authenticated though never sent: a receiver a subspace off fails the ICV
    off = pyesp.Receiver([pyesp.SA(0x4004, suite, b"".join(keys(suite, 128)), esn=True, replay_top=2)])
    with pytest.raises(EspError):
        off.decrypt(bytes(wire))
    assert rx.decrypt(bytes(wire)).packet == inner(False, 40)


def test_random_ivs_differ():
    sa, _ = pair("aes-cbc-hmac-sha1-96", 128, "transport", False, False, False, 1)
    ivs = {sa.encrypt(inner(False, 10))[28:44] for _ in range(64)}
    assert len(ivs) == 64


def test_eesp_refuses_cbc():
    import pyeesp
    from pyeesp.errors import ConfigurationError as EespConfigurationError

    with pytest.raises(EespConfigurationError):
        pyeesp.SA(0x10, "aes-cbc-hmac-sha1-96", key=bytes(36))
    with pytest.raises(EespConfigurationError):
        pyeesp.SA(0x10, 12, key=bytes(36))


@pytest.mark.parametrize("suite,bits", [(s, b) for s in SUITES for b in (128, 256)])
def test_key_file_line(tmp_path, suite, bits):
    """docs/keys.md: esp-sa with an AES-CBC suite takes the AES key || the integrity key (RFC 7296 §2.17); the
    line's SA is the same as pyesp.SA's (a packet of one opens on the other)."""
    from pecore.errors import CoreError
    from pecore.keys import load_key_file

    enc, auth = keys(suite, bits)
    f = tmp_path / "k.txt"
    f.write_text(f"esp-sa spi=4004 suite={suite} key-bits={bits} key={(enc + auth).hex()} mode=transport esn=1\n")
    (e,) = load_key_file(f).esp_sas
    assert e.settings["suite"] == suite and e.settings["key_bits"] == bits
    sa = pyesp.SA(**e.settings)
    ref = pyesp.SA(0x4004, suite, enc + auth, mode="transport", esn=True)
    p = inner(False, 21)
    assert ref.decrypt(sa.encrypt(p)).packet == p
    for bad in (f"key={(enc + auth)[:-1].hex()}", "key-bits=192 key=" + (bytes(24) + auth).hex()):
        f.write_text(f"esp-sa spi=4004 suite={suite} {bad}\n")
        with pytest.raises(CoreError):
            load_key_file(f)
    # EESP takes no AES-CBC suite
    f.write_text(f"eesp-sa spi=4004 suite={suite} key={(enc + auth).hex()}\n")
    with pytest.raises(CoreError):
        load_key_file(f)


@pytest.mark.parametrize("suite", list(SUITES))
def test_to_and_from_scapy(suite):
    """pyesp.scapy's converters split and join the KEYMAT as RFC 7296 §2.17 orders it."""
    from pyesp.scapy import from_scapy, to_scapy

    sa, _ = pair(suite, 256, "transport", True, True, False, (3 << 32) + 9)
    ssa = to_scapy(sa)
    enc, auth = keys(suite, 256)
    assert (ssa.crypt_algo.name, ssa.auth_algo.name, bytes(ssa.crypt_key), bytes(ssa.auth_key)) == \
        ("AES-CBC", SUITES[suite][0], enc, auth)
    p = inner(True, 30)
    assert raw(ssa.decrypt(scapy_pkt(sa.encrypt(p)))) == p
    back = from_scapy(ssa)
    assert back.suite == suite and back._settings["key"] == enc + auth
    assert raw(ssa.decrypt(scapy_pkt(back.encrypt(p)))) == p


# The burst paths (pe_batch_burst, the pool's work_burst): their packets checked by scapy, not by the core.


@pytest.mark.parametrize("suite", list(SUITES))
def test_batches_decrypt_in_scapy(on_backend, suite):
    sa, ssa = pair(suite, 256, "tunnel", True, False, True, 1)
    pkts = [inner(i % 2 == 1, (i * 37) % 700) for i in range(150)]  # past two bursts of 64
    wires = sa.encrypt_batch(pkts)
    assert len(wires) == len(pkts) and sa.next_seq() == len(pkts) + 1
    assert [raw(ssa.decrypt(scapy_pkt(w))) for w in wires] == pkts
    # IPv6 (40) + UDP (8) + SPI: the sequence numbers in order, as single calls give them
    assert [int.from_bytes(w[52:56], "big") for w in wires] == list(range(1, len(pkts) + 1))


@pytest.mark.parametrize("suite", list(SUITES))
def test_batch_stops_where_a_packet_is_refused(on_backend, suite):
    sa, ssa = pair(suite, 128, "transport", False, False, False, 1)
    pkts = [inner(False, i) for i in range(100)]
    pkts[70] = b"\x45" + bytes(10)  # in the second burst: the packets after it must spend nothing
    with pytest.raises(EspError) as ei:
        sa.encrypt_batch(pkts)
    assert str(ei.value).startswith("packet 70:") and len(ei.value.results) == 70 and sa.next_seq() == 71
    assert [raw(ssa.decrypt(scapy_pkt(w))) for w in ei.value.results] == pkts[:70]


@pytest.mark.parametrize("jobs", [1, 2])
def test_captures_decrypt_in_scapy(on_backend, tmp_path, jobs):
    from scapy.all import Ether, rdpcap, wrpcap

    suite = "aes-cbc-hmac-sha256-128"
    sa, ssa = pair(suite, 128, "tunnel", False, False, False, 1)
    pkts = [inner(i % 3 == 0, (i * 53) % 1400) for i in range(300)]
    # Addresses given: an Ether() without them would have scapy resolve, and send for, a MAC address
    macs = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}
    wrpcap(str(tmp_path / "plain.pcap"), [Ether(**macs) / scapy_pkt(p) for p in pkts])
    summary = pyesp.encrypt_capture(sa, tmp_path / "plain.pcap", tmp_path / "enc.pcap", jobs=jobs)
    assert summary.transformed == len(pkts) and sa.next_seq() == len(pkts) + 1
    frames = list(rdpcap(str(tmp_path / "enc.pcap")))
    got = [raw(ssa.decrypt(scapy_pkt(raw(f.payload)))) for f in frames]
    assert got == pkts
    # and back through the receiving bursts, one forged packet among them refused
    forged = bytearray(raw(frames[17]))
    forged[-1] ^= 1  # the ICV's last octet
    frames[17] = Ether(bytes(forged))
    wrpcap(str(tmp_path / "forged.pcap"), frames)
    rx = pyesp.Receiver([pyesp.SA(0x4004, suite, b"".join(keys(suite, 128)))])
    summary = pyesp.decrypt_capture(rx, tmp_path / "forged.pcap", tmp_path / "dec.pcap", jobs=jobs)
    assert (summary.transformed, summary.failed, summary.failed_by_reason) == (len(pkts) - 1, 1, {"authentication-failed": 1})
    back = [raw(f.payload) for f in rdpcap(str(tmp_path / "dec.pcap"))]
    assert back[:17] + back[18:] == pkts[:17] + pkts[18:] and back[17] == raw(frames[17].payload)
