"""``pyeesp diagnose``: every known mistake, planted with `cryptography` and the independent model
(tests/eesp_model.py, never with the diagnose code), is named exactly, with its field; correct
packets (the §19 vectors and model-built packets of every suite) verify; garbage gives a clear
error.  API and CLI, hex and capture input."""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import eesp_model as E
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESCCM, AESGCM, ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter
from pecore.tools.diagnose import DiagnoseInputError
from pecore.keys import parse_key_file
from pyeesp.tools.cli import main
from pyeesp.tools.diagnose import EespDiagnoser, diagnose, diagnose_capture

from cliutil import cli_runner, write_keyfile

KAT = json.loads((Path(__file__).parents[1] / "data" / "eesp_kat.json").read_text())
VEC = {v["name"]: v for v in KAT["vectors"]}
ROOT = bytes(range(32))
KEY0 = bytes.fromhex("472a557f71f01e8d125da03ec21f6b770f62b36f")  # §19: Session ID 0 key || salt
INNER = bytes.fromhex(KAT["common"]["innerIpv4Udp"])  # 32 octets: no padding in either format
L4 = bytes.fromhex("04d2162e000d0000") + b"hello"  # 13 octets: 3 octets of padding after a PIH
ETH = bytes.fromhex("020000000002020000000001")
SEQ = 7
IVV = 0x0102030405060708  # explicit IV != sequence number

# name: (SPI, key-file fields, model SA keywords)
SAS = {
    "gcm": (0x1000, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R", dict(encr_id=20)),
    "xfrm": (0x1001, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R aad=linux-xfrm", dict(encr_id=20, aad="linux-xfrm")),
    "ccm": (0x1002, "suite=aes-ccm-16 sskdf=hkdf-sha256 root-key=R", dict(encr_id=16)),
    "iiv": (0x1003, "suite=aes-gcm-16-iiv sskdf=hkdf-sha256 root-key=R", dict(encr_id=30)),
    "noseq": (0x1004, f"suite=aes-gcm-16 key={KEY0.hex()} seq=0", dict(encr_id=20, seq=False)),
    "gmac": (0x1005, "suite=aes-gmac sskdf=hkdf-sha256 root-key=R", dict(encr_id=21)),
    "full": (0x1006, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R format=full", dict(encr_id=20, format="full")),
    "transport": (0x1007, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R mode=transport align=0",
                  dict(encr_id=20, mode="transport", align_options=False)),
    "co": (0x1008, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R max-crypt-offset=16",
           dict(encr_id=20, max_crypt_offset=16)),
    "nosub": (0x1009, f"suite=aes-gcm-16 key={KEY0.hex()}", dict(encr_id=20)),
    "maxsub": (0x100A, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R max-sub-sa-id=3", dict(encr_id=20, max_sub_sa_id=3)),
    "chacha": (0x100B, "suite=chacha20-poly1305 sskdf=hkdf-sha256 root-key=R", dict(encr_id=28, key_bits=256)),
    "tco": (0x100C, "suite=aes-gcm-16 sskdf=hkdf-sha256 root-key=R mode=transport align=0 max-crypt-offset=16",
            dict(encr_id=20, mode="transport", align_options=False, max_crypt_offset=16)),
}
KEY_FILE = "".join(f"eesp-sa spi={spi:#x} {fields.replace('root-key=R', 'root-key=' + ROOT.hex())}\n"
                   for spi, fields, _ in SAS.values())


def model_sa(name: str, **kw) -> E.SA:
    spi, _fields, args = SAS[name]
    args = {**args, **kw}
    if "seq=0" in _fields or "key=" in _fields.replace("root-key", ""):
        return E.SA(spi=spi, keymat=KEY0, **args)
    return E.SA(spi=spi, sskdf="hkdf-sha256", root_key=ROOT, **args)


# ---------------------------------------------------------- planting, with `cryptography` only

HASH = {"sha256": hashes.SHA256, "sha384": hashes.SHA384}


def keymat(sid: int = 1, length: int = 20, info: bytes = None, h: str = "sha256") -> bytes:
    return HKDFExpand(HASH[h](), length, struct.pack(">H", sid) if info is None else info).derive(ROOT)


def seal_raw(kind: str, key: bytes, nonce: bytes, aad: bytes, pt: bytes, icv: int = 16) -> bytes:
    if kind == "ccm":
        return AESCCM(key, tag_length=icv).encrypt(nonce, pt, aad)
    if kind == "chacha":
        return ChaCha20Poly1305(key).encrypt(nonce, pt, aad)
    out = AESGCM(key).encrypt(nonce, pt, aad)
    return out[: len(pt) + icv]


def plant(name: str, body: bytes, *, sid: int = 1, spi: int = None, seq=SEQ, iv=IVV, opts: bytes = b"",
          key: bytes = None, salt: bytes = None, clear: int = 0, aad=None, nonce: bytes = None, icv: int = 16,
          kind: str = "gcm", gmac: bool = False) -> bytes:
    """An EESP packet with every part given: Base ‖ Options ‖ [Seq] ‖ [IV] ‖ body (first `clear` octets in clear)."""
    if key is None:
        km = keymat(sid)
        key, salt = km[:16], km[16:]
    spi = SAS[name][0] if spi is None else spi
    head = E.build_base_header(len(opts), sid, spi) + opts
    head += b"" if seq is None else struct.pack(">Q", seq)
    ivb = b"" if iv is None else struct.pack(">Q", iv)
    head += ivb
    if gmac:
        clear = len(body)
    aad = head + body[:clear] if aad is None else aad(head, body)
    nonce = salt + ivb if nonce is None else nonce
    return head + body[:clear] + seal_raw(kind, key, nonce, aad, body[clear:], icv)


def pih(nh: int, pad: int) -> bytes:
    return E.build_pih(nh, pad)


def co_opt(crypt_offset: int, payload_offset: int = 7) -> bytes:
    return E.crypt_offset_option(payload_offset, crypt_offset)


def _esp_trailer():
    # transport, full format: payload ‖ 01 ‖ Pad Length 1 ‖ Next Header 17, no PIH
    return plant("transport", L4 + bytes([1, 1, 17]))


def _iiv_with_iv():
    km = keymat()
    return plant("iiv", INNER, key=km[:16], salt=km[16:])


def _implicit_iv():
    km = keymat()
    return plant("gcm", INNER, iv=None, nonce=km[16:] + struct.pack(">Q", SEQ))


def _nonce_from_seq():
    km = keymat()
    return plant("gcm", INNER, nonce=km[16:] + struct.pack(">Q", SEQ))


def _no_seq_field():
    # On an SA with the draft AAD, Base ‖ IV with nonce salt ‖ IV is also Base ‖ Seq with an implicit IV
    # (see ALTERNATIVES); with the Linux XFRM AAD (IV left out) the two differ.
    return plant("xfrm", INNER, seq=None, aad=lambda h, b: h[:8])


def _seq_field_on_noseq_sa():
    return plant("noseq", INNER, sid=0, key=KEY0[:16], salt=KEY0[16:])


def _ccm_salt_length():
    km = keymat(1, 20)
    return plant("ccm", INNER, key=km[:16], salt=km[17:20], kind="ccm")


def _gcm_as_gmac():
    return plant("gcm", INNER, gmac=True)


def _gmac_encrypted():
    return plant("gmac", INNER)


PLANTED = {
    # AAD (D1 variants and others)
    "aad-iv-excluded": (lambda: bytes.fromhex(VEC["E1"]["variants"]["linux-xfrm"]["wire"]), "gcm", "AAD (D1 variant)"),
    "aad-iv-included": (lambda: plant("xfrm", INNER), "xfrm", "AAD (D1 variant)"),
    "aad-options-excluded": (lambda: plant("gcm", INNER, opts=bytes.fromhex("01020000"),
                                           aad=lambda h, b: h[:8] + h[12:]), "gcm", "AAD"),
    "aad-esp-style": (lambda: plant("gcm", INNER, aad=lambda h, b: h[4:8] + struct.pack(">Q", SEQ)), "gcm", "AAD"),
    "clear-part-outside-aad": (lambda: plant("co", pih(4, 0) + INNER, opts=co_opt(8), clear=32,
                                             aad=lambda h, b: h), "co", "AAD"),
    "crypt-offset-in-octets": (lambda: plant("co", pih(4, 0) + INNER, opts=co_opt(8), clear=8), "co",
                               "Crypt Offset option (CryptOffset)"),
    "crypt-offset-from-base-header": (lambda: plant("co", pih(4, 0) + INNER, opts=co_opt(8), clear=4), "co",
                                      "Crypt Offset option (CryptOffset)"),
    "gcm-as-gmac": (_gcm_as_gmac, "gcm", "AEAD (suite)"),
    "gmac-payload-encrypted": (_gmac_encrypted, "gmac", "AEAD (suite)"),
    # SSKDF and key / salt
    "sskdf-session-id-byte-order": (lambda: plant("gcm", INNER, key=keymat(info=b"\x01\x00")[:16],
                                                  salt=keymat(info=b"\x01\x00")[16:]), "gcm",
                                    "SSKDF info (Session ID encoding)"),
    "sskdf-session-id-length": (lambda: plant("gcm", INNER, key=keymat(info=bytes(3) + b"\x01")[:16],
                                              salt=keymat(info=bytes(3) + b"\x01")[16:]), "gcm",
                                "SSKDF info (Session ID encoding)"),
    "sskdf-session-id-missing": (lambda: plant("gcm", INNER, key=keymat(info=b"")[:16], salt=keymat(info=b"")[16:]),
                                 "gcm", "SSKDF info (Session ID encoding)"),
    "salt-from-front": (lambda: plant("gcm", INNER, key=keymat()[4:], salt=keymat()[:4]), "gcm", "salt (KEYMAT split)"),
    "salt-length": (_ccm_salt_length, "ccm", "salt length (SSKDF L)"),
    "sskdf-length": (lambda: plant("gcm", INNER, key=keymat(1, 36)[:16], salt=keymat(1, 36)[32:]), "gcm",
                     "SSKDF output length L"),
    "sskdf-hash": (lambda: plant("gcm", INNER, key=keymat(h="sha384")[:16], salt=keymat(h="sha384")[16:]), "gcm",
                   "SSKDF hash"),
    "sskdf-not-applied": (lambda: plant("gcm", INNER, key=ROOT[:16], salt=ROOT[16:20]), "gcm", "Sub SA key"),
    "wrong-sub-sa": (lambda: plant("gcm", INNER, key=keymat(2)[:16], salt=keymat(2)[16:]), "gcm",
                     "Sub SA key (Session ID)"),
    "session-id-byte-order": (lambda: plant("gcm", INNER, sid=0x0100, key=keymat(1)[:16], salt=keymat(1)[16:]), "gcm",
                              "Session ID (Base Header octets 2-3)"),
    # structure and nonce
    "implicit-iv": (_implicit_iv, "gcm", "IV"),
    "explicit-iv": (_iiv_with_iv, "iiv", "IV"),
    "nonce-from-sequence": (_nonce_from_seq, "gcm", "AEAD nonce"),
    "sequence-number-absent": (_no_seq_field, "xfrm", "Sequence Number"),
    "sequence-number-present": (_seq_field_on_noseq_sa, "noseq", "Sequence Number"),
    "icv-length": (lambda: plant("gcm", INNER, icv=8), "gcm", "ICV length"),
    "nonce-iv-byte-order": (lambda: plant("gcm", INNER, nonce=keymat()[16:] + struct.pack("<Q", IVV)), "gcm",
                            "AEAD nonce"),
    "nonce-salt-order": (lambda: plant("gcm", INNER, nonce=struct.pack(">Q", IVV) + keymat()[16:]), "gcm",
                         "AEAD nonce"),
    # content: the ICV verifies, the decrypted packet is wrong
    "format-full-instead-of-optimized": (lambda: plant("gcm", pih(4, 0) + INNER), "gcm", "format (Payload Info Header)"),
    "format-optimized-instead-of-full": (lambda: plant("full", INNER), "full", "format (Payload Info Header)"),
    "pad-length-includes-pih": (lambda: plant("full", pih(4, 4) + INNER), "full", "Pad Length (PIH octet 3)"),
    "pad-length-field": (lambda: plant("full", pih(4, 200) + INNER), "full", "Pad Length (PIH octet 3)"),
    "esp-trailer-instead-of-pih": (_esp_trailer, "transport", "Payload Info Header"),
    "pih-next-header": (lambda: plant("full", pih(17, 0) + INNER), "full", "Next Header (PIH octet 2)"),
    "crypt-offset-into-padding": (lambda: plant("tco", pih(17, 3) + L4 + bytes(3), opts=co_opt(5, 7), clear=20), "tco",
                                  "Crypt Offset option (CryptOffset)"),
    # header fields of a packet whose ICV verifies
    "sequence-number-zero": (lambda: plant("gcm", INNER, seq=0), "gcm", "Sequence Number"),
    "session-id-without-sub-sas": (lambda: plant("nosub", INNER, sid=3, key=KEY0[:16], salt=KEY0[16:]), "nosub",
                                   "Session ID (Base Header octets 2-3)"),
    "session-id-out-of-range": (lambda: plant("maxsub", INNER, sid=5, key=keymat(5)[:16], salt=keymat(5)[16:]),
                                "maxsub", "Session ID (Base Header octets 2-3)"),
    "payload-offset": (lambda: plant("co", pih(4, 0) + INNER, opts=co_opt(8, payload_offset=5), clear=32), "co",
                       "Crypt Offset option (PayloadOffset)"),
    "crypt-offset-option-length": (lambda: plant("co", pih(4, 0) + INNER, opts=bytes.fromhex("02041c8000000000")),
                                   "co", "Crypt Offset option (Opt Data Len)"),
    "crypt-offset-not-allowed": (lambda: plant("gcm", pih(4, 0) + INNER, opts=co_opt(8), clear=32), "gcm",
                                 "Crypt Offset option"),
    "spi-byte-order": (lambda: plant("gcm", INNER, spi=0x00100000), "gcm", "SPI (Base Header octets 4-7)"),
    "spi-mismatch": (lambda: plant("gcm", INNER, spi=0x2222), "gcm", "SPI (Base Header octets 4-7)"),
}

# Explanations that reproduce the very same computation, so the packet cannot tell them apart.
ALTERNATIVES = {
    "sskdf-session-id-byte-order": [["session-id-byte-order"]],
    "session-id-byte-order": [["sskdf-session-id-byte-order"]],
    "implicit-iv": [["sequence-number-absent"]],
}

WARNINGS = {
    "padding-esp-style": (lambda: plant("transport", pih(17, 3) + L4 + bytes([1, 2, 3])), "Padding"),
    "padding-longer-than-needed": (lambda: plant("transport", pih(17, 7) + L4 + bytes(7)), "Pad Length"),
    "padding-not-zero": (lambda: plant("transport", pih(17, 3) + L4 + b"\xff\xee\xdd"), "Padding"),
    "pih-reserved-bits": (lambda: plant("transport", E.build_pih(17, 3, reserved=0x0123) + L4 + bytes(3)),
                          "PIH Reserved (octets 0-1)"),
    "esp-trailer-instead-of-pih": (lambda: plant("gcm", INNER + bytes([1, 2, 2, 4])), "Padding"),
}


def ipv4(payload: bytes, proto: int = 49) -> bytes:
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0, bytes([10, 0, 0, 1]),
                    bytes([10, 0, 0, 2]))
    return h[:10] + struct.pack("!H", E.ipv4_checksum(h)) + h[12:] + payload


def udp4500(eesp: bytes) -> bytes:
    return ipv4(struct.pack("!HHHH", 4500, 4500, 8 + len(eesp), 0) + eesp, 17)


def write_capture(path: Path, packets, fmt: str = "pcap") -> None:
    with CaptureWriter(path, LINKTYPE_ETHERNET, fmt) as w:
        for i, p in enumerate(packets):
            w.write(ETH + (b"\x86\xdd" if p[0] >> 4 == 6 else b"\x08\x00") + p, (1000 + i, 0))


@pytest.fixture(scope="module")
def entries():
    return parse_key_file(KEY_FILE).eesp_sas


@pytest.fixture(scope="module")
def diag(entries) -> EespDiagnoser:
    return EespDiagnoser(entries)


@pytest.fixture
def keyfile(tmp_path: Path) -> Path:
    return write_keyfile(tmp_path, KEY_FILE)


run = cli_runner(main, "diagnose")


# -------------------------------------------------------------------------------- tests


def _vectors():
    v = VEC
    yield "E1", bytes.fromhex(v["E1"]["variants"]["draft"]["wire"]), {}
    yield "E1-xfrm", bytes.fromhex(v["E1"]["variants"]["linux-xfrm"]["wire"]), dict(aad="linux-xfrm")
    yield "E2", bytes.fromhex(v["E2"]["wire"]), dict(mode="transport")
    yield "E3", bytes.fromhex(v["E3"]["wire"]), dict(max_crypt_offset=8)
    yield "E4", bytes.fromhex(v["E4"]["wire"]), dict(suite="aes-gcm-16-iiv")
    yield "E5", bytes.fromhex(v["E5"]["wire"]), dict(mode="transport")


@pytest.mark.parametrize("name,wire,settings", list(_vectors()), ids=lambda x: x if isinstance(x, str) else "")
def test_spec_vectors_verify(name, wire, settings):
    sa = {**dict(spi=0x1000, suite="aes-gcm-16", root_key=ROOT, sskdf="hkdf-sha256", mode="tunnel"), **settings}
    rep = diagnose(wire, [sa])
    assert rep.verdict == "verifies" and not rep.mistakes and not rep.warnings, rep.format()


MODEL_CASES = [
    ("gcm", {}), ("xfrm", {}), ("ccm", {}), ("iiv", {}), ("noseq", dict(sid=0)), ("gmac", {}), ("full", {}),
    ("chacha", {}), ("nosub", dict(sid=0)), ("maxsub", dict(sid=3)), ("co", dict(crypt_offset=8)),
]


@pytest.mark.parametrize("name,kw", MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def test_model_packets_verify(diag, name, kw):
    sa = model_sa(name)
    sid = kw.pop("sid", 1)
    outer = ipv4(b"")[:20]
    pkt = E.encap(sa, INNER, seq=None if not sa.seq else 9, iv=11, session_id=sid, outer=outer, **kw)
    rep = diag.diagnose(pkt)
    assert rep.verdict == "verifies" and not rep.warnings, rep.format()
    assert rep.src == "10.0.0.1" and rep.fields["spi"] == f"{sa.spi:#010x}"


def test_transport_and_udp_encapsulation_verify(diag):
    sa = model_sa("transport")
    pkt = E.encap(sa, ipv4(L4, 17), seq=3, session_id=2)
    assert diag.diagnose(pkt).verdict == "verifies"
    eesp = pkt[20:]
    assert diag.diagnose(udp4500(eesp)).verdict == "verifies"
    assert diag.diagnose(ETH + b"\x08\x00" + udp4500(eesp)).verdict == "verifies"


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_each_planted_mistake_is_named_with_its_field(diag, mistake):
    build, _sa, field = PLANTED[mistake]
    rep = diag.diagnose_part(build())
    assert rep.verdict == "diagnosed", rep.format()
    assert rep.mistake_ids == [mistake], rep.format()
    assert rep.mistakes[0].field == field
    assert rep.mistakes[0].sent and rep.mistakes[0].expected
    assert [[m.id for m in alt] for alt in rep.alternatives] == ALTERNATIVES.get(mistake, []), rep.format()


@pytest.mark.parametrize("warning", list(WARNINGS))
def test_deviations_verify_with_a_warning(diag, warning):
    build, field = WARNINGS[warning]
    rep = diag.diagnose_part(build())
    assert rep.verdict == "verifies" and not rep.mistakes, rep.format()
    assert warning in [w.id for w in rep.warnings], rep.format()
    assert next(w for w in rep.warnings if w.id == warning).field == field
    assert "warning:" in rep.format()


def test_two_mistakes_together(diag):
    km = keymat(info=b"\x01\x00")
    pkt = plant("gcm", INNER, key=km[:16], salt=km[16:], aad=lambda h, b: h[:16])  # + the IV left out of the AAD
    rep = diag.diagnose_part(pkt)
    assert sorted(rep.mistake_ids) == ["aad-iv-excluded", "sskdf-session-id-byte-order"]
    one = EespDiagnoser(parse_key_file(KEY_FILE).eesp_sas, max_mistakes=1)
    assert one.diagnose_part(pkt).verdict == "undiagnosed"


def test_unexplained_packet_says_so(diag):
    pkt = bytearray(plant("gcm", INNER))
    pkt[-3] ^= 0x10
    rep = diag.diagnose_part(bytes(pkt))
    assert rep.verdict == "undiagnosed" and "no known mistake reproduces this packet" in rep.format()


def test_no_sa_at_all(diag):
    rep = diag.diagnose_part(plant("gcm", INNER, spi=0x7777, key=bytes(16), salt=bytes(4)))
    assert rep.verdict == "no-key" and rep.reason == "eesp-no-sa"
    assert "no known mistake reproduces this packet" in rep.format()


def test_api_with_pyeesp_sa_objects():
    import pyeesp

    sa = pyeesp.SA(0x1000, "aes-gcm-16", root_key=ROOT, sskdf="hkdf-sha256")
    wire = sa.encrypt(INNER, sub_sa_id=1)
    assert diagnose(wire, [sa]).verdict == "verifies"
    assert diagnose(wire.hex(), [sa]).verdict == "verifies"
    rep = diagnose(PLANTED["aad-iv-excluded"][0](), [sa])
    assert rep.mistake_ids == ["aad-iv-excluded"]


def test_cli_every_mistake_from_a_capture_json(capsys, tmp_path, keyfile):
    cap = tmp_path / "planted.pcapng"
    parts = [b() for b, _s, _f in PLANTED.values()]
    good = E.encap(model_sa("gcm"), INNER, seq=1, session_id=1, outer=ipv4(b"")[:20])
    frames = [ipv4(p) if i % 2 else udp4500(p) for i, p in enumerate(parts)] + [good, ipv4(b"x" * 12, 6)]
    write_capture(cap, frames, fmt="pcapng")
    rc, out, err = run(capsys, cap, "-k", keyfile, "--json")
    assert rc == 1, err
    doc = json.loads(out)
    assert [p["verdict"] for p in doc["packets"]] == ["diagnosed"] * len(PLANTED) + ["verifies"]
    for (mistake, (_b, _s, field)), p in zip(PLANTED.items(), doc["packets"]):
        assert [m["id"] for m in p["mistakes"]] == [mistake]
        assert p["mistakes"][0]["field"] == field
    assert doc["skipped_frames"] == 1 and doc["exit_status"] == 1


def test_cli_hex_text_output_and_inline_sa(capsys):
    wire = PLANTED["aad-iv-excluded"][0]()
    rc, out, _ = run(capsys, ipv4(wire).hex(), "--spi", "0x1000", "--root-key", ROOT.hex())
    assert rc == 1
    assert "AAD (D1 variant)" in out and "[aad-iv-excluded]" in out and "1 EESP packet: 1 diagnosed" in out
    rc, out, _ = run(capsys, wire.hex(), "--spi", "0x1000", "--root-key", ROOT.hex(), "--aad", "linux-xfrm")
    assert rc == 0 and "verifies" in out


def test_cli_warning_only_exits_0(capsys, keyfile):
    rc, out, _ = run(capsys, WARNINGS["padding-esp-style"][0]().hex(), "-k", keyfile)
    assert rc == 0 and "verifies" in out and "[padding-esp-style]" in out


@pytest.mark.parametrize("text,needle", [
    ("not-hex-at-all", "neither a capture file nor the hex"),
    ("80f", "odd number of hex digits"),
    (ipv4(b"\x00" * 16, 6).hex(), "neither an IP packet"),
    ("4500", "neither an IP packet"),
    ("missing/capture.pcap", "no such capture file"),
])
def test_cli_bad_input_is_a_clear_error(capsys, keyfile, text, needle):
    rc, out, err = run(capsys, text, "-k", keyfile)
    assert rc == 2 and out == ""
    assert err.startswith("pyeesp: error:") and needle in err and "Traceback" not in err


def test_cli_usage_errors(capsys, tmp_path, keyfile):
    rc, _, err = run(capsys, "80")
    assert rc == 2 and "no SA" in err
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x0a\x0d\x0d\x0a garbage")
    rc, _, err = run(capsys, bad, "-k", keyfile)
    assert rc == 2 and "capture" in err


@pytest.mark.parametrize("n", [1, 7, 8, 12, 23, 24, 40])
def test_truncated_and_random_packets_never_raise(diag, capsys, keyfile, n):
    rnd = random.Random(n)
    good = plant("gcm", INNER)
    for data in (good[:n], bytes([0x80]) + bytes(rnd.randrange(256) for _ in range(n)),
                 good[:8] + bytes(rnd.randrange(256) for _ in range(n))):
        rep = diag.diagnose_part(data)
        assert rep.verdict in ("malformed", "undiagnosed", "no-key"), rep.format()
        assert rep.format() and json.dumps(rep.to_dict())
    rc, out, err = run(capsys, good[:n].hex(), "-k", keyfile)
    assert rc == 1 and "Traceback" not in err


def test_api_errors(entries):
    with pytest.raises(DiagnoseInputError):
        diagnose("xyz", entries)
    with pytest.raises(DiagnoseInputError):
        diagnose_capture("/nonexistent.pcap", entries)
