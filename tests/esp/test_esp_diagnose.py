"""pyesp diagnose: ESP packets sealed with a known mistake by `cryptography` (not the core) are named exactly.

Each packet is transport-mode ESP (RFC 4303) over IPv4 protocol 50: SPI ‖ Seq ‖ IV ‖ AEAD(payload ‖ padding ‖
Pad Length ‖ Next Header) ‖ ICV, built here from the RFCs (RFC 4106, 4309, 4543, 7634, 8750) with the mistake
put in; the diagnoser must say which one, and must find nothing wrong with the right packet.
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

pytest.importorskip("pyesp")
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305  # noqa: E402

from conftest import REPO_ROOT  # noqa: E402
from pyesp.tools.diagnose import EspDiagnoser, infer_seq  # noqa: E402

M32 = 0xFFFFFFFF
SPI = 0x0A0B0C0D
KEY = bytes(range(0x20, 0x30))  # AES-128
SALT4, SALT3 = b"\xca\xfe\xba\xbe", b"\xca\xfe\xba"
PAYLOAD = struct.pack(">HHHH", 1024, 53, 40, 0) + bytes(range(32)) + b"\x01\x02"  # a UDP datagram ‖ padding 1, 2
TRAILER = PAYLOAD + bytes([2, 17])  # Pad Length 2, Next Header UDP


def ipv4(esp: bytes) -> bytes:
    h = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(esp), 1, 0x4000, 64, 50, 0, bytes([192, 0, 2, 1]),
                    bytes([198, 51, 100, 2]))
    s = sum(struct.unpack(">10H", h))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return h[:10] + struct.pack(">H", ~s & 0xFFFF) + h[12:] + esp


def seal(alg, key: bytes, nonce: bytes, aad: bytes, head: bytes, icv: int = 16, gmac: bool = False) -> bytes:
    if gmac:  # RFC 4543: everything authenticated, nothing encrypted
        tag = AESGCM(key).encrypt(nonce, b"", aad + TRAILER)
        return head + TRAILER + tag
    if alg is AESCCM:
        return head + AESCCM(key, tag_length=icv).encrypt(nonce, TRAILER, aad)
    sealed = alg(key).encrypt(nonce, TRAILER, aad)  # AES-GCM or ChaCha20-Poly1305: ciphertext ‖ 16-octet tag
    return head + sealed[: len(TRAILER)] + sealed[len(TRAILER) :][:icv]


def sa(suite: str, keymat: bytes, **kw) -> dict:
    return dict(spi=SPI, suite=suite, key=keymat, mode="transport", **kw)


def diagnose(settings: dict, esp: bytes):
    return EspDiagnoser([settings]).diagnose(ipv4(esp))


def test_the_right_packet_verifies() -> None:
    seq, iv = 7, bytes(range(8))
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, KEY, SALT4 + iv, struct.pack(">II", SPI, seq), head)
    rep = diagnose(sa("aes-gcm-16", KEY + SALT4), esp)
    assert rep.verdict == "verifies" and not rep.mistakes, rep.format()


def test_salt_from_the_front_of_the_keymat() -> None:
    seq, iv = 3, b"\x11" * 8
    km = KEY + SALT4
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, km[4:], km[:4] + iv, struct.pack(">II", SPI, seq), head)
    rep = diagnose(sa("aes-gcm-16", km), esp)
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["key-salt-split"], rep.format()
    assert rep.reason == "authentication-failed"  # the core's word, from the IP packet


def test_a_pyesp_sa_object_serves_as_the_sa() -> None:
    import pyesp

    seq, iv = 3, b"\x11" * 8
    km = KEY + SALT4
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, km[4:], km[:4] + iv, struct.pack(">II", SPI, seq), head)
    rep = EspDiagnoser([pyesp.SA(SPI, "aes-gcm-16", km, mode="transport")]).diagnose(ipv4(esp))
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["key-salt-split"], rep.format()


def test_ccm_salt_split_uses_the_three_octet_salt() -> None:
    seq, iv = 9, b"\x22" * 8
    km = KEY + SALT3
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESCCM, km[3:], km[:3] + iv, struct.pack(">II", SPI, seq), head, icv=12)
    rep = diagnose(sa("aes-ccm-12", km, key_bits=128), esp)
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["key-salt-split"], rep.format()


def test_nonce_from_the_sequence_number_on_an_explicit_iv_suite() -> None:
    seq, iv = 0x42, b"\x5a" * 8  # the IV field says one thing, the nonce used another
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(ChaCha20Poly1305, bytes(32), SALT4 + struct.pack(">Q", seq), struct.pack(">II", SPI, seq), head)
    rep = diagnose(sa("chacha20-poly1305", bytes(32) + SALT4), esp)
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["nonce-from-seq"], rep.format()


def test_implicit_iv_with_the_number_in_the_wrong_half() -> None:
    seq = 0x1234
    head = struct.pack(">II", SPI, seq)
    esp = seal(AESGCM, KEY, SALT4 + struct.pack(">II", seq, 0), struct.pack(">II", SPI, seq), head)
    rep = diagnose(sa("aes-gcm-16-iiv", KEY + SALT4), esp)
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["nonce-seq-half"], rep.format()


@pytest.mark.parametrize("aad_of, mistake", [
    (lambda seq: struct.pack(">II", SPI, seq & M32), "esn-aad-high-missing"),
    (lambda seq: struct.pack(">III", SPI, seq & M32, seq >> 32), "esn-aad-halves-swapped"),
])
def test_esn_aad_mistakes(aad_of, mistake: str) -> None:
    top = 0x3_0000_0010
    seq = top + 5  # the receiver infers the high half 3 from its window
    iv = b"\x77" * 8
    head = struct.pack(">II", SPI, seq & M32) + iv
    esp = seal(AESGCM, KEY, SALT4 + iv, aad_of(seq), head)
    rep = diagnose(sa("aes-gcm-16", KEY + SALT4, esn=True, replay_top=top), esp)
    assert rep.verdict == "diagnosed" and rep.mistake_ids == [mistake], rep.format()
    assert rep.fields["seq"] == seq


def test_esn_high_half_from_a_key_files_first_seq(tmp_path) -> None:
    """A key file's first-seq places the receiver (first-seq - 1 is its top), so the ESN's high half is found."""
    from pecore.keys import load_key_file

    seq = 0x2_0000_0009
    km = KEY + SALT4
    keys = tmp_path / "k.txt"
    keys.write_text(f"esp-sa spi=0x{SPI:08x} suite=aes-gcm-16-iiv key-bits=128 key={km.hex()} mode=transport esn=1 "
                    f"first-seq=0x{seq - 4:x}\n")
    head = struct.pack(">II", SPI, seq & M32)
    esp = seal(AESGCM, KEY, SALT4 + struct.pack(">II", 0, seq & M32), struct.pack(">III", SPI, seq >> 32, seq & M32),
               head)
    rep = EspDiagnoser(load_key_file(str(keys)).esp_sas).diagnose(ipv4(esp))
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["nonce-esn-high-missing"], rep.format()


def test_gmac_with_the_iv_left_out_of_the_aad() -> None:
    seq, iv = 5, b"\x99" * 8
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, KEY, SALT4 + iv, struct.pack(">II", SPI, seq), head, gmac=True)  # aad = SPI ‖ Seq only
    rep = diagnose(sa("aes-gmac", KEY + SALT4, key_bits=128), esp)
    assert rep.verdict == "diagnosed" and rep.mistake_ids == ["gmac-aad-iv-missing"], rep.format()


def test_two_mistakes_together() -> None:
    seq, iv = 11, b"\x33" * 8
    km = KEY + SALT4
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, km[4:], km[:4] + struct.pack(">Q", seq), struct.pack(">II", SPI, seq), head)
    rep = diagnose(sa("aes-gcm-16", km), esp)
    assert rep.verdict == "diagnosed" and sorted(rep.mistake_ids) == ["key-salt-split", "nonce-from-seq"], rep.format()


def test_unknown_mistake_is_undiagnosed_and_no_sa_is_no_key() -> None:
    seq, iv = 1, bytes(8)
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, bytes(16), SALT4 + iv, struct.pack(">II", SPI, seq), head)  # another key altogether
    assert diagnose(sa("aes-gcm-16", KEY + SALT4), esp).verdict == "undiagnosed"
    other = dict(sa("aes-gcm-16", KEY + SALT4), spi=SPI + 1)
    assert diagnose(other, esp).verdict == "no-key"


def test_infer_seq_follows_rfc4303_appendix_a() -> None:
    assert infer_seq(0x20, 0x1_0000_0010, 64) == 0x1_0000_0020  # Case B, above the window's wrap
    assert infer_seq(0xFFFF_FFF0, 0x1_0000_0010, 64) == 0xFFFF_FFF0  # Case B, below 2^32 in the window
    assert infer_seq(0x100, 0x2_0000_1000, 64) == 0x3_0000_0100  # Case A, below the window: the next epoch
    assert infer_seq(0x1000, 0x2_0000_1000, 64) == 0x2_0000_1000


def test_cli(tmp_path) -> None:
    seq, iv = 3, b"\x11" * 8
    km = KEY + SALT4
    head = struct.pack(">II", SPI, seq) + iv
    esp = seal(AESGCM, km[4:], km[:4] + iv, struct.pack(">II", SPI, seq), head)
    keys = tmp_path / "k.txt"
    keys.write_text(f"esp-sa spi=0x{SPI:08x} suite=aes-gcm-16 key-bits=128 key={km.hex()} mode=transport\n")
    p = subprocess.run([sys.executable, "-m", "pyesp", "diagnose", "-k", str(keys), "--json", ipv4(esp).hex()],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert [m["id"] for m in out["packets"][0]["mistakes"]] == ["key-salt-split"]


def test_every_mistake_the_esp_vectors_catalogue_is_named() -> None:
    """vectors/esp_*: each crafted mistake (KeySplitMistake, NonceMistake, EsnAadMistake, AadMistake) is
    diagnosed as its mistake, and every valid test of a stateless group verifies."""
    from pyesp.tools.vectors import sa_settings

    flag_ids = {"KeySplitMistake": "key-salt-split", "NonceMistake": "nonce-", "EsnAadMistake": "esn-aad-",
                "AadMistake": "gmac-aad-"}
    named = {f: 0 for f in flag_ids}
    for path in sorted((REPO_ROOT / "vectors").glob("esp_*_test.json")):
        doc = json.loads(path.read_text())
        if doc["schema"] != "esp_packet_test_schema_v1.json":  # the AEAD files: diagnose knows their mistakes
            continue
        for g in doc["testGroups"]:
            for t in g["tests"]:
                flags = [f for f in t["flags"] if f in flag_ids]
                if not flags and (t["result"] != "valid" or g["stateful"]):
                    continue
                wire = bytes.fromhex(t["inputs"]["ciphertextPacket"])
                rep = EspDiagnoser([sa_settings(g, t["inputs"])]).diagnose(wire)
                if not flags:
                    assert rep.verdict == "verifies", (path.name, t["tcId"], rep.format())
                    continue
                assert rep.verdict == "diagnosed", (path.name, t["tcId"], rep.format())
                assert any(m.id.startswith(flag_ids[flags[0]]) for m in rep.mistakes), (path.name, t["tcId"])
                named[flags[0]] += 1
    assert all(named.values()), named
