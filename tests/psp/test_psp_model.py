"""Known-answer and property tests of the independent PSP model (tests/psp_model.py). No core needed.

Data: tests/data/psp_kat.json (typed from docs/spec/psp.md). Tests marked needs_shared also compare
with the google/psp reference captures in <repo>/../shared/reference/psp and skip when it is absent.
"""

from __future__ import annotations

import csv
import hashlib
import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pcaputil
import psp_model as m
import psp_strategies as ps

KAT = json.loads((Path(__file__).parents[1] / "data" / "psp_kat.json").read_text())
MK = {name: bytes.fromhex(v) for name, v in KAT["masterKeys"].items()}
MASTER_KEYS = (MK["mk0"], MK["mk1"])
CASES = KAT["referenceCases"]["cases"]
REF_IV = KAT["referenceCases"]["iv"]


def unhex(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


# --------------------------------------------------------------------------------------------------------
# helpers: a reference case as model parameters
# --------------------------------------------------------------------------------------------------------


def case_params(case: dict) -> dict:
    name = case["case"]
    ipv = 4 if name.startswith("v4_") else 6
    mode = "tunnel" if "_tunnel_" in name else "transport"
    offsets = case["cryptOffsets"]
    co = offsets[0] if mode == "transport" else (offsets[1] if ipv == 4 else offsets[2])
    return dict(ipv=ipv, mode=mode, empty=name.endswith("_empty"), spi=int(case["spi"], 16),
                version=case["version"], crypt_offset=co, vc=bytes(8) if case["vc"] else None)


def case_key(case: dict) -> bytes:
    p = case_params(case)
    return m.derive_key(m.master_key_for_spi(MASTER_KEYS, p["spi"]), p["spi"], p["version"])


def model_case_frame(case: dict) -> tuple[bytes, bytes]:
    """(cleartext frame, encrypted frame as the model builds it, corruption included)."""
    p = case_params(case)
    clear = m.make_cleartext_frame(0, p["ipv"], p["empty"])
    enc = m.encap_frame(clear, p["mode"], key=case_key(case), spi=p["spi"], iv=REF_IV, version=p["version"],
                        crypt_offset=p["crypt_offset"], vc=p["vc"])
    if case["kind"] == "corrupt-after-seal":
        at = case["corruptFrameOctet"]
        enc = enc[:at] + bytes([enc[at] | 0x80]) + enc[at + 1 :]
    return clear, enc


def ref_frame(reference_dir: Path, sub: str, name: str) -> bytes:
    frames = pcaputil.read_frames(reference_dir / sub / name)
    assert len(frames) == 1
    return frames[0]


# --------------------------------------------------------------------------------------------------------
# §5 KDF
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", KAT["kdf"]["tests"], ids=lambda r: f"v{r['version']}-{r['spi']}")
def test_kdf_table(row):
    spi = int(row["spi"], 16)
    assert m.master_key_for_spi(MASTER_KEYS, spi) == MK[row["masterKey"]]
    assert m.derive_key(MK[row["masterKey"]], spi, row["version"]).hex() == row["derivedKey"]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kdf_labels_and_lengths(version):
    assert f"{m.kdf_label(version):08x}" == KAT["kdf"]["labels"][str(version)]
    key = m.derive_key(MK["mk0"], 0x1A345678, version)
    assert len(key) == m.KEY_LEN[version]
    # the label is overridable; with the v0/v1 label the v2/v3 key equals the v0/v1 key of the same size
    assert m.derive_key(MK["mk0"], 0x1A345678, version, label=m.kdf_label(version & 1)) == \
        m.derive_key(MK["mk0"], 0x1A345678, version & 1)
    # the first block of a 256-bit key is not the 128-bit key (L differs in the block)
    if version & 1:
        assert key[:16] != m.derive_key(MK["mk0"], 0x1A345678, version - 1)


def test_kdf_block_layout():
    assert m.kdf_block(2, m.kdf_label(1), 0x9A345678, 256).hex() == "00000002507631009a34567800000100"


# --------------------------------------------------------------------------------------------------------
# §11 scapy AEAD example and §9.3 scapy divergence
# --------------------------------------------------------------------------------------------------------


def test_scapy_example():
    ex = KAT["scapyExample"]
    key, inner = unhex(ex["key"]), unhex(ex["innerPacket"])
    assert len(inner) == 37
    hdr16 = m.build_header(ex["nextHeader"], int(ex["spi"], 16), int(ex["iv"], 16), version=ex["version"],
                           crypt_offset=ex["cryptOffset"])
    plain = unhex(ex["plaintextPsp"])
    assert hdr16 + inner == plain
    psp = m.seal(key, hdr16, inner, ex["cryptOffset"], ex["version"])
    n = ex["clearPartLen"]
    assert psp[:n] == plain[:n]
    assert psp[n:-16].hex() == ex["ciphertext"]
    assert psp[-16:].hex() == ex["icv"]
    hdr, p = m.open(key, psp)
    assert p == inner and hdr.next_header == 4 and hdr.crypt_offset == 5
    # the same via the dict form of the header
    assert m.seal(key, dict(next_header=4, spi=0x11223344, iv=0x0102030405060708, crypt_offset=5), inner, 5, 0) == psp


def test_scapy_divergence_vc_with_small_crypt_offset():
    """§9.3: scapy keeps the whole VC in the AAD when V = 1 and Crypt Offset < 2; the reference does not."""
    div = KAT["scapyDivergence"]
    case = next(c for c in CASES if c["case"] == div["case"])
    p = case_params(case)
    assert p["crypt_offset"] == 0 and p["vc"] is not None
    clear = m.make_cleartext_frame(0, p["ipv"], p["empty"])
    l4 = clear[14 + 20 :]
    hdr16 = m.build_header(m.IPPROTO_UDP, p["spi"], REF_IV, version=p["version"], crypt_offset=0, virt=True)
    body = p["vc"] + l4
    reference = m.seal(case_key(case), hdr16, body, 0, p["version"])
    scapy_like = m.seal(case_key(case), hdr16, body, 2, p["version"])  # split after the VC, header still says 0
    assert reference[-16:].hex() == div["referenceIcv"] == case["icv"]
    assert scapy_like[-16:].hex() == div["scapyIcv"]
    # the model (like the reference) rejects the scapy-style packet
    with pytest.raises(m.PspModelError) as e:
        m.open(case_key(case), scapy_like)
    assert e.value.code == "authentication-failed"


# --------------------------------------------------------------------------------------------------------
# §10.3 cleartext frames and §10.4 reference matrix
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ipv,empty", [(4, False), (4, True), (6, False), (6, True)])
def test_cleartext_frame_recipe(ipv, empty):
    cf = KAT["cleartextFrames"]
    f = m.make_cleartext_frame(0, ipv, empty)
    assert len(f) == cf["frameLen"][f"{ipv}_empty" if empty else str(ipv)]
    assert f[:6].hex() == cf["ethDst"] and f[6:12].hex() == cf["ethSrc"]
    assert f[12:14].hex() == cf[f"ipv{ipv}"]["ethertype"]
    ip = f[14:]
    info = m.parse_ip(ip)
    assert info.length == len(ip) and info.protocol == 17
    udp = ip[info.hdr_len :]
    src, dst = (ip[12:16], ip[16:20]) if ipv == 4 else (ip[8:24], ip[24:40])
    assert struct.unpack(">HHH", udp[:6]) == (11111, 22222, len(udp))
    assert struct.unpack(">H", udp[6:8])[0] == m.udp_checksum(src, dst, udp)
    if ipv == 4:
        assert m.ipv4_checksum(ip[:20]) == struct.unpack(">H", ip[10:12])[0]
    payload = udp[8:]
    assert len(payload) == (0 if empty else cf["payloadLen"][str(ipv)])
    # frame i of a run: octet k = (i + k) mod 256
    f5 = m.make_cleartext_frame(5, ipv, empty)
    assert f5[len(f5) - len(payload) :] == bytes((5 + k) & 0xFF for k in range(len(payload)))


@pytest.mark.needs_shared
@pytest.mark.parametrize("fname", sorted(KAT["cleartextFrames"]["files"]))
def test_cleartext_frames_match_reference(reference_dir, fname):
    info = KAT["cleartextFrames"]["files"][fname]
    raw = (reference_dir / "clear" / fname).read_bytes()
    assert hashlib.sha256(raw).hexdigest().startswith(info["sha256Prefix"])
    cap = pcaputil.read_capture(raw)
    pc = KAT["cleartextFrames"]["pcap"]
    assert raw[:4].hex() == pc["magic"] and list(cap.version) == pc["version"]
    assert cap.snaplen == pc["snaplen"] and cap.linktype == pc["linktype"]
    assert [f.data for f in cap.frames] == [m.make_cleartext_frame(0, info["ipv"], info["empty"])]


@pytest.mark.needs_shared
def test_manifest_and_cfgs_match_kat(reference_dir):
    """The typed JSON agrees with the reference manifest and the cfg files."""
    with (reference_dir / "manifest.csv").open() as fh:
        rows = {r["case"]: r for r in csv.DictReader(fh)}
    assert sorted(rows) == sorted(c["case"] for c in CASES)
    for c in CASES:
        r = rows[c["case"]]
        assert r["kind"] == c["kind"]
        p = case_params(c)
        assert r["cleartext"] == f"v{p['ipv']}_cleartext{'_empty' if p['empty'] else ''}.pcap"
        tok = (reference_dir / "cfg" / r["encrypt_cfg"]).read_text().split()
        assert bytes(int(t, 16) for t in tok[:32]) == MK["mk0"]
        assert bytes(int(t, 16) for t in tok[32:64]) == MK["mk1"]
        assert int(tok[64], 16) == p["spi"]
        assert tok[65] == p["mode"]
        assert tok[66] == ("aes-gcm-128" if c["version"] == 0 else "aes-gcm-256")
        assert [int(t) for t in tok[67:70]] == c["cryptOffsets"]
        assert tok[70] == ("vc" if c["vc"] else "no-vc")
    dec = (reference_dir / "cfg" / "decrypt.cfg").read_text().split()
    assert bytes(int(t, 16) for t in dec[:64]) == MK["mk0"] + MK["mk1"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["case"])
def test_reference_case_icv_and_length(case):
    clear, enc = model_case_frame(case)
    assert len(enc) == case["frameLen"]
    assert enc[-16:].hex() == case["icv"]
    if case["kind"] == "corrupt-after-seal":
        with pytest.raises(m.PspModelError) as e:
            m.decap_frame(enc, master_keys=MASTER_KEYS)
        assert e.value.code == "authentication-failed"
    else:
        hdr, back = m.decap_frame(enc, master_keys=MASTER_KEYS)
        assert back == clear
        assert hdr.iv == REF_IV and hdr.spi == int(case["spi"], 16)


@pytest.mark.needs_shared
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["case"])
def test_reference_case_matches_capture(reference_dir, case):
    clear, enc = model_case_frame(case)
    ref = ref_frame(reference_dir, "encrypted", f"{case['case']}.enc.pcap")
    assert enc == ref
    if case["kind"] == "corrupt-after-seal":
        with pytest.raises(m.PspModelError) as e:
            m.decap_frame(ref, master_keys=MASTER_KEYS)
        assert e.value.code == "authentication-failed"
    else:
        # the reference cleartext capture, not just the rebuilt frame
        p = case_params(case)
        ref_clear = ref_frame(reference_dir, "clear", f"v{p['ipv']}_cleartext{'_empty' if p['empty'] else ''}.pcap")
        assert m.decap_frame(ref, master_keys=MASTER_KEYS)[1] == ref_clear == clear


def test_reference_first_octets():
    fo = KAT["referenceCases"]["firstOctets"]
    case = next(c for c in CASES if c["case"] == fo["case"])
    want = unhex(fo["hex"])
    assert model_case_frame(case)[1][: len(want)] == want


@pytest.mark.parametrize("case", [c for c in CASES if c["case"].endswith("_empty")], ids=lambda c: c["case"])
def test_empty_case_every_bit_flip_fails(case):
    """§9.1: the empty-ciphertext cases still verify the ICV. Every bit of the PSP part (ICV included)."""
    clear, enc = model_case_frame(case)
    p = case_params(case)
    psp_start = 14 + (20 if p["ipv"] == 4 else 40) + 8
    psp = enc[psp_start:]
    n = 4 * p["crypt_offset"]
    assert len(psp) == 16 + n + 16  # nothing encrypted
    key = case_key(case)
    assert m.open(key, psp)[1] == psp[16:-16]
    for bit in range(len(psp) * 8):
        bad = bytearray(enc)
        bad[psp_start + bit // 8] ^= 0x80 >> (bit % 8)
        with pytest.raises(m.PspModelError) as e:
            m.decap_frame(bytes(bad), master_keys=MASTER_KEYS)
        if bit >= (len(psp) - 16) * 8:  # the ICV itself
            assert e.value.code == "authentication-failed"


# --------------------------------------------------------------------------------------------------------
# §7 receiver checks (error codes and their order)
# --------------------------------------------------------------------------------------------------------

_K16 = bytes(range(16))


def _psp(octet0=17, hel=1, octet2=0, octet3=0x01, body_len=8, vc=b""):
    hdr = bytes([octet0, hel, octet2, octet3]) + struct.pack(">IQ", 0x01020304, 7)
    return hdr + vc + bytes(body_len) + bytes(16)


@pytest.mark.parametrize(
    "psp,code",
    [
        (bytes(31), "psp-truncated"),
        (_psp(octet3=0x00), "psp-always-one-bit-clear"),
        (_psp(octet3=0x00 | (4 << 2)), "psp-always-one-bit-clear"),  # check 3 before check 4
        (_psp(octet3=0x01 | (4 << 2)), "psp-unsupported-version"),
        (_psp(octet3=0x01 | (15 << 2)), "psp-unsupported-version"),
        (_psp(hel=0), "psp-bad-hdr-ext-len"),
        (_psp(hel=0, octet3=0x03), "psp-bad-hdr-ext-len"),
        (_psp(hel=2, body_len=7), "psp-bad-hdr-ext-len"),  # hlen 24 + 16 > 39
        (_psp(hel=1, octet3=0x03, body_len=8), "psp-vc-without-room"),
        (_psp(octet2=3, body_len=8), "psp-crypt-offset-past-payload"),
        (_psp(octet2=2, body_len=8), "authentication-failed"),  # offset exactly at the end: still verified
        (_psp(octet2=0xC0, body_len=8), "authentication-failed"),  # R bits are not rejected, only authenticated
        (_psp(octet3=0xC1, body_len=8), "authentication-failed"),  # S/D never rejected
        (_psp(octet3=0x09, octet2=3, body_len=8), "psp-crypt-offset-past-payload"),  # GMAC too (our reading)
    ],
)
def test_receiver_check_codes(psp, code):
    with pytest.raises(m.PspModelError) as e:
        m.open(_K16, psp)
    assert e.value.code == code


def test_gmac_sends_payload_in_clear():
    body = bytes(range(40))
    for version, key in ((2, _K16), (3, bytes(32))):
        psp = m.seal(key, dict(next_header=6, spi=1, iv=2, version=version), body, 0, version)
        assert psp[16:-16] == body
        # ICV = GCM tag with AAD = H16 || P and empty plaintext
        assert psp[-16:] == m.gcm_seal(key, psp[4:16], psp[:16] + body, b"")[1]
        # a non-zero crypt offset on receive does not change what is authenticated (§4.2 reading)
        assert m.open(key, psp)[1] == body


# --------------------------------------------------------------------------------------------------------
# model self-consistency properties
# --------------------------------------------------------------------------------------------------------


def _key_for(params, master_keys=MASTER_KEYS):
    return m.derive_key(m.master_key_for_spi(master_keys, params["spi"]), params["spi"], params["version"])


@given(data=st.data())
def test_model_encap_decap_roundtrip(data):
    pkt = data.draw(ps.ip_packets())
    p = data.draw(ps.sa_params(pkt))
    out = m.encap(pkt, key=_key_for(p), **p)
    hdr, back = m.decap(out, master_keys=MASTER_KEYS)
    assert back == pkt
    vlen = 8 if p["vc"] else 0
    overhead = 40 + vlen + (0 if p["mode"] == "transport" else (20 if pkt[0] >> 4 == 4 else 40))
    assert len(out) == len(pkt) + overhead
    assert (hdr.version, hdr.spi, hdr.iv, hdr.crypt_offset, hdr.vc, hdr.sample, hdr.drop) == (
        p["version"], p["spi"], p["iv"], p["crypt_offset"], p["vc"], p["sample"], p["drop"])
    assert hdr.hdr_ext_len == (2 if p["vc"] else 1) and hdr.reserved == 0 and hdr.always_one == 1
    # outer headers: UDP 1000, checksum 0, lengths, IPv4 header checksum
    info = m.parse_ip(out)
    assert info.protocol == 17 and info.length == len(out)
    sport, dport, ulen, csum = struct.unpack(">HHHH", out[info.hdr_len : info.hdr_len + 8])
    assert (dport, ulen, csum) == (1000, len(out) - info.hdr_len, 0)
    if out[0] >> 4 == 4:
        assert m.ipv4_checksum(out[: info.hdr_len]) == struct.unpack(">H", out[10:12])[0]
    assert sport == m.udp_sport_xor(pkt)
    # the derived-key path and the keys-dict path agree
    assert m.decap(out, keys={p["spi"]: _key_for(p)}) == (hdr, back)


@given(data=st.data())
def test_model_random_bit_flip_in_psp_part_rejected(data):
    pkt = data.draw(ps.ip_packets(max_payload=300))
    p = data.draw(ps.sa_params(pkt))
    out = m.encap(pkt, key=_key_for(p), **p)
    start = m.parse_ip(out).hdr_len + 8
    bit = data.draw(st.integers(start * 8, len(out) * 8 - 1))
    bad = bytearray(out)
    bad[bit // 8] ^= 0x80 >> (bit % 8)
    with pytest.raises(m.PspModelError):
        m.decap(bytes(bad), master_keys=MASTER_KEYS)


@given(data=st.data())
def test_model_truncation_is_a_clean_error(data):
    pkt = data.draw(ps.ip_packets(max_payload=200))
    p = data.draw(ps.sa_params(pkt))
    out = m.encap(pkt, key=_key_for(p), **p)
    cut = data.draw(st.integers(0, len(out) - 1))
    with pytest.raises(m.PspModelError):
        m.decap(out[:cut], master_keys=MASTER_KEYS)


@given(
    nh=st.integers(0, 255), hel=st.integers(1, 255), reserved=st.integers(0, 3), co=st.integers(0, 63),
    s=st.booleans(), d=st.booleans(), version=st.integers(0, 15), virt=st.booleans(),
    spi=st.integers(0, 2**32 - 1), iv=st.integers(0, 2**64 - 1), area=st.binary(min_size=2040, max_size=2040),
)
def test_model_header_parse_build(nh, hel, reserved, co, s, d, version, virt, spi, iv, area):
    hlen = (hel + 1) * 8
    hdr16 = m.build_header(nh, spi, iv, version=version, crypt_offset=co, virt=virt, sample=s, drop=d,
                           reserved=reserved, hdr_ext_len=hel)
    raw = hdr16 + area[: hlen - 16]
    h = m.parse_header(raw)
    assert (h.next_header, h.hdr_ext_len, h.reserved, h.crypt_offset, h.sample, h.drop, h.version, h.virt,
            h.always_one, h.spi, h.iv) == (nh, hel, reserved, co, s, d, version, virt, 1, spi, iv)
    assert h.build() == raw
    assert (h.vc or b"") + h.extension == raw[16:]
