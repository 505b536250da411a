"""``pypsp diagnose``: every known mistake, planted with `cryptography` and the independent model
(tests/psp_model.py, never with the diagnose code), is named exactly, with its field; correct
packets verify; garbage gives a clear error.  API and CLI, hex and capture input."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import psp_model as M
import pytest
from cryptography.hazmat.primitives.ciphers import algorithms
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.cmac import CMAC

from pecore import primitives
from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter
from pecore.tools.diagnose import DiagnoseInputError, parse_hex
from pypsp.tools.cli import main
from pypsp.tools.diagnose import PspDiagnoser, diagnose, diagnose_capture

MK0 = bytes.fromhex("34448a064292601b11a0978f56a2d34cf3fc35ede1a6bc04f8db3e5243a2b0ca")
MK1 = bytes.fromhex("563952565d3a78ae773ec1b779f2f2d99f4a7f53a6fbb9b07d5b71f39364d739")
SPI = 0x9A345678  # MSB 1: master key 1
SPI0 = 0x1A345678  # MSB 0: master key 0
IV = 0x1122334455667788
VC = bytes.fromhex("a1a2a3a4a5a6a7a8")
L4 = struct.pack("!HHHH", 1234, 5678, 8 + 45, 0) + bytes((7 * i) & 0xFF for i in range(45))  # a UDP segment
ETH = bytes.fromhex("020000000002020000000001")
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "psp"


# ------------------------------------------------------- planting, with `cryptography` only


def cmac(key: bytes, data: bytes) -> bytes:
    c = CMAC(algorithms.AES(key))
    c.update(data)
    return c.finalize()


def kdf_blocks(mk: bytes, fmt: str, fields) -> bytes:
    return b"".join(cmac(mk, struct.pack(fmt, *f)) for f in fields)


def right_key(v: int, spi: int = SPI) -> bytes:
    return M.derive_key((MK0, MK1)[spi >> 31], spi, v)


def hdr(v: int, co: int = 0, spi: int = SPI, vc: bool = False, **kw) -> bytes:
    return M.build_header(17, spi, IV, version=v, crypt_offset=co, virt=vc, **kw)


def body(vc: bool = False) -> bytes:
    return (VC if vc else b"") + L4


def seal(key: bytes, h16: bytes, p: bytes, *, clear: int = 0, aad: bytes = None, nonce: bytes = None,
         wire_h16: bytes = None) -> bytes:
    """A PSP part, AES-GCM with the given split: P[:clear] in clear, the rest encrypted."""
    aad = h16 + p[:clear] if aad is None else aad
    nonce = h16[4:16] if nonce is None else nonce
    out = AESGCM(key).encrypt(nonce, p[clear:], aad)
    return (wire_h16 or h16) + p[:clear] + out


def right(v: int, co: int = 0, vc: bool = False, spi: int = SPI, **kw) -> bytes:
    """A correct packet, built by the model."""
    return M.seal(right_key(v, spi), hdr(v, co, spi, vc, **kw), body(vc), co, v)


def with_key(key: bytes, v: int, co: int = 0, spi: int = SPI) -> bytes:
    """A packet whose only fault is its key (the model seals it)."""
    return M.seal(key, hdr(v, co, spi), body(), co, v)


LABEL = "KDF label (PRF input octets 4-7)"
NONCE = "AEAD nonce"
CO = "Crypt Offset (octet 2, bits 5-0)"
VCF = "VC (Virtualization Cookie)"
VERSION = "Version (octet 3, bits 5-2)"


def _sd_after():
    clean = hdr(0, 1)
    wire = hdr(0, 1, sample=True, drop=True)
    return seal(right_key(0), clean, body(), clear=4, wire_h16=wire)


def _r_after():
    clean = hdr(1, 1)
    wire = clean[:2] + bytes([clean[2] | 0x80]) + clean[3:]
    return seal(right_key(1), clean, body(), clear=4, wire_h16=wire)


PLANTED = {
    # key derivation
    "kdf-label-pv0": (lambda: with_key(M.derive_key(MK1, SPI, 1, label=0x50763000), 1, 1), LABEL),
    "kdf-label-other-version": (lambda: with_key(M.derive_key(MK1, SPI, 3, label=0x50763100), 3), LABEL),
    "kdf-label-version-octet": (lambda: with_key(M.derive_key(MK1, SPI, 1, label=0x50763001), 1, 1), LABEL),
    "kdf-label-byte-order": (lambda: with_key(M.derive_key(MK1, SPI, 0, label=0x00307650), 0, 1), LABEL),
    "kdf-counter-from-zero": (lambda: with_key(kdf_blocks(MK1, ">IIII", [(i, 0x50763100, SPI, 256) for i in (0, 1)]), 1),
                              "KDF counter (PRF input octets 0-3)"),
    "kdf-counter-after-fixed-data": (lambda: with_key(kdf_blocks(MK1, ">IIII", [(0x50763000, SPI, 128, 1)]), 0, 2),
                                     "KDF counter position"),
    "kdf-counter-width": (lambda: with_key(kdf_blocks(MK1, ">BIII", [(1, 0x50763000, SPI, 128)]), 0),
                          "KDF counter (PRF input octets 0-3)"),
    "kdf-length-in-octets": (lambda: with_key(kdf_blocks(MK1, ">IIII", [(i, 0x50763100, SPI, 32) for i in (1, 2)]), 1),
                             "KDF length L (PRF input octets 12-15)"),
    "kdf-length-per-block": (lambda: with_key(kdf_blocks(MK1, ">IIII", [(i, 0x50763300, SPI, 128) for i in (1, 2)]), 3),
                             "KDF length L (PRF input octets 12-15)"),
    "kdf-context-byte-order": (lambda: with_key(kdf_blocks(MK1, ">IIII", [(1, 0x50763000, 0x7856349A, 128)]), 0),
                               "KDF context (PRF input octets 8-11)"),
    "kdf-context-without-key-phase": (lambda: with_key(M.derive_key(MK1, SPI & 0x7FFFFFFF, 2), 2),
                                      "KDF context (PRF input octets 8-11)"),
    "master-key-wrong-spi-bit": (lambda: with_key(M.derive_key(MK0, SPI, 0), 0, 1), "master key selection (SPI bit 31)"),
    "master-key-used-directly": (lambda: with_key(MK1, 1, 1), "SA key"),
    # nonce
    "nonce-iv-spi-order": (lambda: seal(right_key(0), hdr(0), body(), nonce=hdr(0)[8:16] + hdr(0)[4:8]), NONCE),
    "nonce-iv-only": (lambda: seal(right_key(1), hdr(1), body(), nonce=bytes(4) + hdr(1)[8:16]), NONCE),
    "nonce-iv-only-left-aligned": (lambda: seal(right_key(0), hdr(0), body(), nonce=hdr(0)[8:16] + bytes(4)), NONCE),
    "nonce-iv-byte-order": (lambda: seal(right_key(0), hdr(0), body(), nonce=hdr(0)[4:8] + hdr(0)[8:16][::-1]), NONCE),
    "nonce-spi-byte-order": (lambda: seal(right_key(0), hdr(0), body(), nonce=hdr(0)[4:8][::-1] + hdr(0)[8:16]), NONCE),
    # layout
    "crypt-offset-in-octets": (lambda: seal(right_key(0), hdr(0, 3), body(), clear=3), CO),
    "crypt-offset-excludes-vc": (lambda: seal(right_key(0), hdr(0, 1, vc=True), body(True), clear=12), CO),
    "crypt-offset-from-header-start": (lambda: seal(right_key(1), hdr(1, 6), body(), clear=8), CO),
    "clear-part-outside-aad": (lambda: seal(right_key(0), hdr(0, 2), body(), clear=8, aad=hdr(0, 2)), "AAD"),
    "vc-outside-aad": (lambda: seal(right_key(0), hdr(0, 3, vc=True), body(True), clear=12,
                                    aad=hdr(0, 3, vc=True) + body(True)[8:12]), VCF),
    "vc-inside-aad": (lambda: seal(right_key(0), hdr(0, 0, vc=True), body(True), clear=8), VCF),
    "gmac-as-gcm": (lambda: seal(right_key(2), hdr(2), body()), VERSION),
    "gcm-as-gmac": (lambda: seal(right_key(1), hdr(1, 1), body(), clear=len(body())), VERSION),
    "sealed-as-other-version": (lambda: seal(right_key(0), hdr(2), body()), VERSION),
    "sd-bits-outside-aad": (_sd_after, "S/D bits (octet 3, bits 7-6)"),
    "reserved-bits-outside-aad": (_r_after, "R bits (octet 2, bits 7-6)"),
}


# With crypt offset 0, keeping the VC in clear (scapy) is also counting the offset after the VC.
ALTERNATIVES = {"vc-inside-aad": [["crypt-offset-excludes-vc"]]}


def ip_packet(psp: bytes, v6: bool = False) -> bytes:
    udp = struct.pack("!HHHH", 4321, 1000, 8 + len(psp), 0) + psp
    if v6:
        return struct.pack("!IHBB16s16s", 0x60000000, len(udp), 17, 64, bytes(15) + b"\1", bytes(15) + b"\2") + udp
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return h[:10] + struct.pack("!H", M.ipv4_checksum(h)) + h[12:] + udp


def write_capture(path: Path, packets, fmt: str = "pcap") -> None:
    with CaptureWriter(path, LINKTYPE_ETHERNET, fmt) as w:
        for i, p in enumerate(packets):
            w.write(ETH + (b"\x86\xdd" if p[0] >> 4 == 6 else b"\x08\x00") + p, (1000 + i, 0))


@pytest.fixture(scope="module")
def diag() -> PspDiagnoser:
    return PspDiagnoser(master_keys=(MK0, MK1))


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    p = tmp_path / "keys.txt"
    p.write_text(f"psp-master key0={MK0.hex()} key1={MK1.hex()}\n")
    return p


def run(capsys, *argv):
    rc = main(["diagnose", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


# -------------------------------------------------------------------------------- tests


def test_cmac_primitive_is_aes256_cmac():
    for n in (0, 13, 16, 40):
        data = bytes(range(n))
        assert primitives.cmac_aes256(MK0, data) == cmac(MK0, data)


@pytest.mark.parametrize("case", [
    dict(v=0), dict(v=1, co=1), dict(v=2), dict(v=3), dict(v=0, co=3, vc=True), dict(v=1, co=0, vc=True),
    dict(v=0, co=1, sample=True, drop=True), dict(v=3, spi=SPI0),
], ids=str)
def test_correct_packets_verify(diag, case):
    rep = diag.diagnose_part(right(**case))
    assert rep.verdict == "verifies" and not rep.mistakes and not rep.warnings
    assert "verifies" in rep.format()


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_each_planted_mistake_is_named_with_its_field(diag, mistake):
    build, field = PLANTED[mistake]
    rep = diag.diagnose_part(build())
    assert rep.verdict == "diagnosed", rep.format()
    assert rep.mistake_ids == [mistake], rep.format()
    assert rep.mistakes[0].field == field
    assert rep.mistakes[0].sent and rep.mistakes[0].expected  # what was used, and the right value
    assert [[m.id for m in alt] for alt in rep.alternatives] == ALTERNATIVES.get(mistake, []), rep.format()
    assert rep.reason == "authentication-failed"


def test_two_mistakes_together_are_both_named(diag):
    key = M.derive_key(MK1, SPI, 1, label=0x50763000)
    rep = diag.diagnose_part(seal(key, hdr(1, 2), body(), clear=2))
    assert rep.verdict == "diagnosed"
    assert sorted(rep.mistake_ids) == ["crypt-offset-in-octets", "kdf-label-pv0"]
    assert diag.diagnose_part(seal(key, hdr(1, 2), body(), clear=2)).mistake_ids == rep.mistake_ids  # hints
    single = PspDiagnoser(master_keys=(MK0, MK1), max_mistakes=1)
    assert single.diagnose_part(seal(key, hdr(1, 2), body(), clear=2)).verdict == "undiagnosed"


def test_derived_key_file_mismatch_and_derived_keys_only():
    other = bytes(range(16))
    pkt = right(0, 1)
    rep = diagnose(ip_packet(pkt), master_keys=(MK0, MK1), keys={SPI: other})
    assert rep.mistake_ids == ["psp-key-mismatch"]
    # Only a derived key: the key mistakes cannot be tried, the layout ones still can.
    rep = diagnose(PLANTED["crypt-offset-in-octets"][0](), keys={(SPI, 0): right_key(0)})
    assert rep.mistake_ids == ["crypt-offset-in-octets"]
    rep = diagnose(with_key(M.derive_key(MK1, SPI, 0, label=0x00307650), 0), keys={SPI: right_key(0)})
    assert rep.verdict == "undiagnosed" and "no known mistake reproduces this packet" in rep.format()


def test_missing_master_key_still_finds_the_other_one():
    rep = diagnose(PLANTED["master-key-wrong-spi-bit"][0](), master_keys=(MK0, None))
    assert rep.reason == "no-key" and rep.mistake_ids == ["master-key-wrong-spi-bit"]
    rep = diagnose(right(0), master_keys=(MK0, None))
    assert rep.verdict == "no-key" and "master key 1" in rep.message


def test_unexplained_packet_says_so(diag):
    pkt = bytearray(right(1, 1))
    pkt[-1] ^= 1
    rep = diag.diagnose_part(bytes(pkt))
    assert rep.verdict == "undiagnosed" and rep.mistakes == []
    assert "no known mistake reproduces this packet" in rep.format()


def test_crypt_offset_past_payload_in_octets_is_diagnosed(diag):
    # The field says 63 words (252 octets), more than the payload: the sender meant 63 octets.
    p = L4 * 2
    h16 = hdr(0, 63)
    rep = diag.diagnose_part(seal(right_key(0), h16, p, clear=63))
    assert rep.reason == "psp-crypt-offset-past-payload" and rep.mistake_ids == ["crypt-offset-in-octets"]


def test_warnings_on_verified_packets(diag):
    h16 = hdr(3, 2)
    rep = diag.diagnose_part(M.seal(right_key(3), h16, body(), 0, 3))
    assert rep.verdict == "verifies" and [w.id for w in rep.warnings] == ["gmac-crypt-offset"]


@pytest.mark.parametrize("form", ["ipv4", "ipv6", "part", "frame"])
def test_api_hex_forms(diag, form):
    psp = PLANTED["kdf-label-pv0"][0]()
    data = {"ipv4": ip_packet(psp), "ipv6": ip_packet(psp, True), "part": psp,
            "frame": ETH + b"\x08\x00" + ip_packet(psp)}[form]
    rep = diag.diagnose(data.hex())
    assert rep.mistake_ids == ["kdf-label-pv0"]
    assert rep.src == (None if form == "part" else ("::1" if form == "ipv6" else "10.0.0.1"))


def test_cli_every_mistake_from_a_capture_json(capsys, tmp_path, keyfile):
    cap = tmp_path / "planted.pcapng"
    good = [right(0, 1), right(3)]
    write_capture(cap, [ip_packet(b()) for b, _ in PLANTED.values()] + [ip_packet(p) for p in good]
                  + [bytes.fromhex("4500001c000100004001f98e0a0000010a000002") + bytes(8)], fmt="pcapng")
    rc, out, err = run(capsys, cap, "--key-file", keyfile, "--json")
    assert rc == 1, err
    doc = json.loads(out)
    verdicts = [p["verdict"] for p in doc["packets"]]
    assert verdicts == ["diagnosed"] * len(PLANTED) + ["verifies"] * 2
    for (mistake, (_b, field)), p in zip(PLANTED.items(), doc["packets"]):
        assert [m["id"] for m in p["mistakes"]] == [mistake]
        assert p["mistakes"][0]["field"] == field
    assert doc["skipped_frames"] == 1 and doc["counts"]["diagnosed"] == len(PLANTED)
    assert doc["packets"][0]["frame"] == 1 and doc["packets"][0]["src"] == "10.0.0.1"


@pytest.mark.parametrize("form", ["ip", "part"])
def test_cli_hex_text_output(capsys, form):
    psp = PLANTED["master-key-wrong-spi-bit"][0]()
    text = ip_packet(psp).hex() if form == "ip" else " ".join(f"{b:02x}" for b in psp)
    rc, out, _ = run(capsys, text, "--master-key0", MK0.hex(), "--master-key1", MK1.hex())
    assert rc == 1
    assert "master key selection (SPI bit 31)" in out and "[master-key-wrong-spi-bit]" in out
    assert "1 PSP packet: 1 diagnosed" in out


def test_cli_verifies_exit_0_and_derived_key_option(capsys):
    # psp.md §11: the scapy example, key already derived.
    psp = bytes.fromhex("0401050111223344010203040506070845000025000100004011"
                        "7cc57f0000017f0000018e3e2b1345c76bf95cdac39b861762a0cf"
                        "dffbbebbc6313a2b9de064759cdd71c9")
    rc, out, _ = run(capsys, psp.hex(), "--key", "11223344:ffeeddccbbaa99887766554433221100")
    assert rc == 0 and "verifies" in out and "1 PSP packet: 1 verifies" in out
    rc, out, _ = run(capsys, psp.hex(), "--key", "11223344:ffeeddccbbaa99887766554433221100", "--json")
    assert rc == 0 and json.loads(out)["packets"][0]["verdict"] == "verifies"


def test_cli_stdin(capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(PLANTED["gcm-as-gmac"][0]().hex() + "\n"))
    rc, out, _ = run(capsys, "-", "--master-key1", MK1.hex(), "--json")
    assert rc == 1 and json.loads(out)["packets"][0]["mistakes"][0]["id"] == "gcm-as-gmac"


@pytest.mark.parametrize("text,needle", [
    ("zz-not-hex", "neither a capture file nor the hex"),
    ("abc", "odd number of hex digits"),
    ("", "empty hex input"),
    ("4500001c000100004001f98e0a0000010a0000020000000000000000", "neither an IP packet"),
    ("./missing.pcap", "no such capture file"),
])
def test_cli_bad_input_is_a_clear_error(capsys, text, needle):
    rc, out, err = run(capsys, text, "--master-key0", MK0.hex())
    assert rc == 2 and out == ""
    assert err.startswith("pypsp: error:") and needle in err and "Traceback" not in err


@pytest.mark.parametrize("content", [b"", b"not a capture", b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00" + bytes(16) + b"\x01"])
def test_cli_garbage_capture_file(capsys, tmp_path, keyfile, content):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(content)
    rc, _, err = run(capsys, bad, "-k", keyfile)
    assert rc == 2 and "pypsp: error:" in err and "capture" in err


def test_cli_no_keys_and_no_psp_packets(capsys, tmp_path, keyfile):
    rc, _, err = run(capsys, right(0).hex())
    assert rc == 2 and "no keys" in err
    cap = tmp_path / "none.pcap"
    write_capture(cap, [bytes.fromhex("4500001c000100004001f98e0a0000010a000002") + bytes(8)])
    rc, _, err = run(capsys, cap, "-k", keyfile)
    assert rc == 2 and "no PSP packets" in err


@pytest.mark.parametrize("n", [0, 1, 5, 15, 16, 31])
def test_truncated_and_random_packets_never_raise(diag, capsys, n):
    import random

    rnd = random.Random(n)
    for data in (right(1, 1)[:n], bytes(rnd.randrange(256) for _ in range(n)), bytes(rnd.randrange(256) for _ in range(n + 40))):
        rep = diag.diagnose_part(data)
        assert rep.verdict in ("malformed", "undiagnosed", "no-key"), rep.format()
        assert rep.format() and json.dumps(rep.to_dict())
    rc, out, err = run(capsys, right(1, 1)[: max(n, 1)].hex(), "--master-key1", MK1.hex())
    assert rc == 1 and "malformed" in out and "Traceback" not in err


def test_api_errors():
    with pytest.raises(DiagnoseInputError):
        diagnose("not hex", master_keys=(MK0, MK1))
    with pytest.raises(DiagnoseInputError):
        diagnose_capture("/nonexistent.pcap", master_keys=(MK0, MK1))
    assert parse_hex("0x45:00 00-1c") == bytes.fromhex("4500001c")


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
def test_reference_captures_verify_and_err_cases_are_the_r_bit(capsys):
    """google/psp's `-e` flips a reserved bit after sealing: the diagnosis names exactly that."""
    cfg = REFERENCE / "cfg" / "decrypt.cfg"
    for cap in sorted((REFERENCE / "encrypted").glob("*.pcap")):
        rep = diagnose_capture(str(cap), master_keys=(MK0, MK1))
        assert len(rep.packets) == 1
        if cap.name.endswith("_err.enc.pcap"):
            assert rep.packets[0].mistake_ids == ["reserved-bits-outside-aad"], cap.name
        else:
            assert rep.packets[0].verdict == "verifies", cap.name
    rc, out, _ = run(capsys, REFERENCE / "encrypted" / "v6_tunnel_crypt_off_256_err.enc.pcap", "--ref-config", cfg)
    assert rc == 1 and "[reserved-bits-outside-aad]" in out


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="../shared/reference/psp not present")
def test_scapy_vc_packet_is_diagnosed(capsys):
    """psp.md §9.3: scapy keeps the whole VC in the AAD when the crypt offset is below 2; its ICV for
    v4_transport_no_crypt_off_128_vc is 19619bd2...  Rebuild that packet and diagnose it."""
    from pcaputil import read_frames

    frame = read_frames(REFERENCE / "encrypted" / "v4_transport_no_crypt_off_128_vc.enc.pcap")[0]
    h, _ = M.decap_frame(frame, master_keys=(MK0, MK1))
    psp = frame[14 + 28 :]
    p = M.unseal(M.derive_key(MK1, h.spi, 0), psp)[1]
    scapy = seal(M.derive_key(MK1, h.spi, 0), psp[:16], p, clear=8)
    assert scapy[-16:].hex() == "19619bd2da0957797429861b68f725db"
    rep = diagnose(scapy, master_keys=(MK0, MK1))
    assert rep.mistake_ids == ["vc-inside-aad"]
