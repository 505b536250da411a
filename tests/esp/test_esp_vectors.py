"""The ESP vector files (vectors/esp_<suite>_test.json) against three implementations that share no code.

- the project's core, through pyesp (`pecore.tools.vectors.check_files`, also run by tests/vectors/test_vectors.py):
  the receiver on every vector, and for valid vectors without DecryptOnly the sender, which must write the same
  octets from the plaintext and the sequence number;
- the independent model tests/esp_model.py (pyca/cryptography, written from the RFCs), through code in this module
  that reads the JSON itself: the same verdicts, the same delivered packets and the same sender octets;
- scapy's SecurityAssociation (scapy.layers.ipsec) for the suites it has: it decrypts every valid vector to its
  plaintext, writes the vector's ESP octets given the same IV, and refuses every packet whose ICV was broken or
  that was sealed with a known mistake;
- tshark's own ESP dissector (Wireshark 4.0, 4.4 and 4.6; keys through the esp_sa table that `pyesp keys export`
  writes for the running release) for the AES-GCM and AES-CBC + HMAC files: every valid 32-bit vector verifies
  and decrypts to its payload, every ICV/ciphertext/AAD mutation is marked bad; 4.0 has no ESN, so on the ESN
  vectors it decrypts and marks the ICV bad (asserted as such), 4.4 and 4.6 verify them.  The chroots of
  scripts/wireshark-chroot.sh run these two tests (marked tshark) against 4.4 and 4.6.

Where they part ways the tests say so (each an explicit assertion, never a skip):
- scapy 2.8 always writes and expects a 16-octet AES-GCM ICV (tests/esp/test_esp_interop.py): for AES-GCM-8/12 it
  writes the vector's octets followed by the rest of the tag, and refuses the vectors' 8/12-octet ICVs;
- scapy has no implicit-IV suite (RFC 8750): those three files are checked by the core and the model only;
- scapy puts ESP after a Destination Options header that no Routing header follows (RFC 4303 §3.1.1 allows
  both): on those vectors its ESP octets differ, and it still decrypts the vector;
- scapy takes the ESN high half from its SA, it does not infer it: it is given the high half of each vector's
  sequence number;
- draft-mcgrew-gcm-test-01 case 4 has SPI 0, which RFC 4303 §2.1 reserves (the vector is `acceptable`, flag
  SpiZero): scapy dissects it as the non-ESP marker and cannot decrypt it (asserted);
- draft-mcgrew-gcm-test-01 case 12 carries an empty payload under Next Header 1: scapy's decrypted packet, built
  again from its layers, gains a default 8-octet ICMP header (asserted);
- scapy's SecurityAssociation.encrypt takes ``seq_num or self.seq_num``: asked for the ESN low half 0 (sequence
  number 2^32) it sends the SA's own counter instead (asserted); its SA's counter set to 0 sends the vector.
Also: the files regenerate byte for byte, the published vectors in them are the published bytes, and the core and
the model reach the same verdict on every `acceptable` test.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Tuple

import pytest

import esp_model as m
from vector_files import VECTORS, group_tests, load
from test_esp_model import MCGREW, MCGREW_GMAC, RFC7634_ESP, RFC7634_INNER

pv = pytest.importorskip("pecore.tools.vectors")
import pyesp.tools.vectors as ev  # noqa: E402  (registers the family)

ESP_FILES = sorted(VECTORS.glob("esp_*_test.json"))
#: The AEAD suites' files (the model's) and the AES-CBC + HMAC ones (pyesp.tools.vectors_cbc: core and scapy).
CBC_FILES = [p for p in ESP_FILES if load(p)["schema"] == ev.vectors_cbc.CBC_SCHEMA]
AEAD_FILES = [p for p in ESP_FILES if p not in CBC_FILES]
ESP_DECODER_CODES = {
    "authentication-failed", "esp-truncated", "esp-no-sa", "esp-sequence-zero", "replay-duplicate",
    "replay-too-old", "esp-bad-pad-length", "esp-bad-padding", "esp-bad-next-header", "esp-bad-inner-packet",
    "esp-dummy-packet", "not-esp", "nat-keepalive", "ike-non-esp-marker", "eesp-in-udp", "udp-bad-length",
    "udp-bad-checksum", "udp-zero-checksum", "ip-fragment", "ip-bad-length",
}


def test_one_file_per_suite_of_the_core():
    assert [p.name for p in AEAD_FILES] == sorted(f"esp_{s}_test.json" for s in ev.SUITES)
    assert [p.name for p in CBC_FILES] == sorted(f"esp_{s}_test.json" for s in ev.vectors_cbc.CBC_ROWS)
    from pecore.binding import lib

    for s in ev.SUITES.values():  # every suite the core has, and no other (the core's own table says so)
        for bits in ((256,) if s.kind == "chacha" else (128, 192, 256)):
            suite = pytest.importorskip("pecore.binding").ffi.new("pe_ipsec_suite *")
            assert lib.pe_ipsec_suite_get(s.encr_id, 0 if s.kind == "chacha" else bits, suite) == lib.PE_OK
            assert (suite.icv_len, suite.salt_len, suite.iv_len) == (s.icv, s.salt, s.iv)


# ------------------------------------------------------------------ regeneration


def test_generate_is_byte_identical(tmp_path, capsys):
    """`pyesp vectors generate` writes exactly the committed ESP files, schema, pcaps and key files, and its
    check of them against the core passes."""
    from pyesp.tools.cli import main

    assert main(["vectors", "generate", "--out", str(tmp_path)]) == 0
    assert f"core check: all {sum(load(p)['numberOfTests'] for p in ESP_FILES)} tests pass" in capsys.readouterr().out
    again = {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    ours = {str(p.relative_to(VECTORS)): p.read_bytes() for p in sorted(VECTORS.rglob("*"))
            if p.is_file() and (p.name.startswith("esp_") or p.parent.name == "pcap" and p.name.startswith("esp_"))}
    assert sorted(again) == sorted(ours), set(again) ^ set(ours)
    assert [k for k in ours if ours[k] != again[k]] == []
    assert {str(p.relative_to(VECTORS)) for p in VECTORS.rglob("esp_*")} == set(ours)


def test_seed_changes_the_bytes():
    a = ev.packet_file(2, "aes-gcm-16").doc
    assert pv.dumps(a) != (VECTORS / "esp_aes-gcm-16_test.json").read_text(encoding="utf-8")
    assert pv.dumps(a) == pv.dumps(ev.packet_file(2, "aes-gcm-16").doc)


# ------------------------------------------------------------------ the independent model


def model_sa(g: dict, inp: dict, *, receiver: bool = True) -> m.SA:
    return m.SA(spi=int(inp["spi"], 16), encr_id=g["encrId"], keymat=bytes.fromhex(inp["key"] + inp["salt"]),
                mode=g["mode"], esn=g["esn"], anti_replay=g["antiReplay"] and receiver,
                replay_window=g["replayWindow"], replay_top=int(inp.get("replayTop", "0"), 16) if receiver else 0,
                udp_encap=g["udpEncap"])


def model_verdicts(doc: dict):
    """(failures, {tcId: model verdict}) -- the model judged by this module's reading of the file."""
    fails, verdicts = [], {}
    for g in doc["testGroups"]:
        shared = None
        for t in g["tests"]:
            inp, out, res = t["inputs"], t["outputs"], t["result"]
            if g["stateful"]:
                shared = shared or {int(inp["spi"], 16): model_sa(g, inp)}
                sas = shared
            else:
                sas = {int(inp["spi"], 16): model_sa(g, inp)}
            wire = bytes.fromhex(inp["ciphertextPacket"])
            got = delivered = icv_valid = None
            try:
                opened, delivered = m.decap(sas, wire)
            except m.EspModelError as e:
                got, icv_valid = e.code, e.icv_valid
            verdicts[t["tcId"]] = "accepted" if got is None else got
            same = got is None and delivered.hex() == out.get("plaintextPacket", delivered.hex())
            if res == "valid":
                ok = same and (opened.next_header, opened.pad_len, opened.seq) == \
                    (out["nextHeader"], out["padLength"], int(inp["seq"], 16))
                if ok and "DecryptOnly" not in t["flags"]:
                    kw = {}
                    if g["mode"] == "tunnel":
                        kw["outer"] = wire[:20] if wire[0] >> 4 == 4 else wire[:40]
                    if g["udpEncap"]:
                        at = pv.secured_offset(wire) - 8
                        kw["udp_sport"], kw["udp_dport"] = struct.unpack(">HH", wire[at : at + 4])
                    sent = m.encap(model_sa(g, inp, receiver=False), bytes.fromhex(out["plaintextPacket"]),
                                   int(inp["seq"], 16), tfc=bytes(inp.get("tfcPad", 0)), **kw)
                    ok = sent == wire
            elif res == "invalid":
                ok = got == out["error"] and ("icvValid" not in out or bool(icv_valid) == out["icvValid"])
            else:
                ok = same or got == out["error"]
            if not ok:
                fails.append((t["tcId"], res, out.get("error"), verdicts[t["tcId"]], t["comment"]))
    return fails, verdicts


@pytest.mark.parametrize("path", AEAD_FILES, ids=lambda p: p.name)
def test_model_passes_every_vector(path):
    fails, _ = model_verdicts(load(path))
    assert not fails, fails[:10]


@pytest.mark.parametrize("path", AEAD_FILES, ids=lambda p: p.name)
def test_acceptable_verdicts_core_and_model_agree(path):
    """The RFCs leave these open; the project's two implementations make the same choice on each."""
    doc = load(path)
    _fails, model = model_verdicts(doc)
    (rep,) = pv.check_files([str(path)])
    assert not rep.failed, [(o.tcId, o.reason) for o in rep.failed[:10]]
    core = {o.tcId: ("accepted" if o.got == "ok" else o.got) for o in rep.outcomes}
    acceptable = [t["tcId"] for _g, t in group_tests(doc) if t["result"] == "acceptable"]
    assert acceptable
    assert {tc: core[tc] for tc in acceptable} == {tc: model[tc] for tc in acceptable}


def test_model_can_fail():
    """The model check is not vacuous: a vector with a changed expectation fails it."""
    doc = load(VECTORS / "esp_aes-gcm-16_test.json")
    bad = json.loads(json.dumps(doc))
    for _g, t in group_tests(bad):
        if t["result"] == "valid" and "DecryptOnly" not in t["flags"]:
            t["outputs"]["padLength"] ^= 1
            break
    for _g, t in group_tests(bad):
        if t["result"] == "invalid":
            t["outputs"]["error"] = "esp-no-sa" if t["outputs"]["error"] != "esp-no-sa" else "esp-truncated"
            break
    assert len(model_verdicts(bad)[0]) == 2


# ------------------------------------------------------------------ coverage and the published vectors


def test_every_decoder_rejection_and_edge_is_covered():
    errors, flags, seen = set(), set(), set()
    for p in AEAD_FILES:
        for g, t in group_tests(load(p)):
            errors.add(t["outputs"].get("error"))
            flags.update(t["flags"])
            if t["result"] == "valid":
                w, pl = bytes.fromhex(t["inputs"]["ciphertextPacket"]), bytes.fromhex(t["outputs"]["plaintextPacket"])
                seen.add((g["mode"], w[0] >> 4, pl[0] >> 4, g["esn"], g["udpEncap"]))
    assert ESP_DECODER_CODES <= errors, ESP_DECODER_CODES - errors
    assert {"EsnInference", "EsnSubspaceZero", "EsnBeyondWindow", "EsnAadMistake", "MaxSeq", "Padding",
            "ExtraPadding", "BadPadding", "BadPadLength", "DummyPacket", "MixedTunnel", "Ipv6ExtensionHeaders",
            "ReplayedSeq", "ReplayTooOld", "OrderDependent", "UdpEncap", "IvNotSeq", "SpecKat", "KeySplitMistake",
            "NonceMistake", "AadMistake", "ImplicitIv", "IntegrityOnly"} <= flags
    for want in [("tunnel", 4, 4, False, False), ("tunnel", 6, 6, False, False), ("tunnel", 4, 6, False, False),
                 ("tunnel", 6, 4, False, False), ("transport", 4, 4, False, False), ("transport", 6, 6, False, False),
                 ("tunnel", 4, 4, True, False), ("tunnel", 4, 4, False, True), ("tunnel", 6, 6, False, True)]:
        assert want in seen, want


def test_published_vectors_are_the_published_bytes():
    """The SpecKat tests carry draft-mcgrew-gcm-test-01's and RFC 7634's octets, as tests/esp/test_esp_model.py
    (which checks them against the model) holds them."""
    got = {}
    for name in ("aes-gcm-16", "aes-gmac", "chacha20-poly1305"):
        for _g, t in group_tests(load(VECTORS / f"esp_{name}_test.json")):
            if "SpecKat" in t["flags"]:
                w = bytes.fromhex(t["inputs"]["ciphertextPacket"])
                got[t["comment"].split(": SPI 0")[0]] = (w[20:], t)
    for i, (key, nonce, pt, aad, ct, tag) in enumerate(MCGREW, 1):
        esp, t = got.pop(f"draft-mcgrew-gcm-test-01 §4 test case {i}")
        a = bytes.fromhex(aad)
        assert esp == a[:4] + a[-4:] + bytes.fromhex(nonce[8:] + ct + tag), i
        assert t["inputs"]["key"] + t["inputs"]["salt"] == key + nonce[:8]
        body = bytes.fromhex(pt)
        assert bytes.fromhex(t["outputs"]["plaintextPacket"])[20:] == body[: len(body) - 2 - body[-2]]
    esp, t = got.pop("draft-mcgrew-gcm-test-01 §4, AES-GMAC")
    assert esp == struct.pack(">II", 0x4321, 7) + bytes(8) + bytes.fromhex(MCGREW_GMAC[1] + MCGREW_GMAC[2])
    esp, t = got.pop("RFC 7634 Appendix A")
    assert esp == bytes.fromhex(RFC7634_ESP) and t["outputs"]["plaintextPacket"] == RFC7634_INNER
    assert not got


def test_key_files_describe_the_groups():
    from pecore.keys import parse_key_file

    n = 0
    for path in ESP_FILES:
        doc = load(path)
        second = "integKey" if path in CBC_FILES else "salt"  # the KEYMAT's second part
        stem = path.name.removesuffix("_test.json")
        for gi, g in enumerate(doc["testGroups"], 1):
            sas = {sa.spi: sa.settings for sa in
                   parse_key_file((VECTORS / "pcap" / f"{stem}_g{gi:02d}.keys").read_text()).esp_sas}
            want = {int(t["inputs"]["spi"], 16): t["inputs"]["key"] + t["inputs"][second] for t in g["tests"]}
            assert {spi: s["key"].hex() for spi, s in sas.items()} == want
            for s in sas.values():
                assert (s["mode"], s["esn"], s["udp_encap"], s["suite"], s["replay_window"]) == \
                    (g["mode"], g["esn"], g["udpEncap"], g["suite"], g["replayWindow"])
            n += 1
    assert n == sum(len(load(p)["testGroups"]) for p in ESP_FILES)


# ------------------------------------------------------------------ scapy

scapy_ipsec = pytest.importorskip("scapy.layers.ipsec")
from scapy.all import ICMP, IP, UDP, IPv6, raw  # noqa: E402

SCAPY_ALGO = {"aes-gcm-8": "AES-GCM", "aes-gcm-12": "AES-GCM", "aes-gcm-16": "AES-GCM", "aes-ccm-8": "AES-CCM",
              "aes-ccm-12": "AES-CCM", "aes-ccm-16": "AES-CCM", "chacha20-poly1305": "CHACHA20-POLY1305",
              "aes-gmac": "AES-NULL-GMAC"}
#: scapy 2.8 writes and expects the whole 16-octet GCM tag (its crypt_icv_size is ignored for AES-GCM)
SCAPY_FULL_GCM_TAG = {"aes-gcm-8", "aes-gcm-12"}
#: the tests whose packet was broken or mis-sealed so that any receiver's ICV check fails
AUTH_MUTATIONS = {"ModifiedIcv", "ModifiedCiphertext", "ModifiedAad", "KeySplitMistake", "NonceMistake",
                  "AadMistake", "EsnAadMistake"}


def test_scapy_has_no_implicit_iv_suite():
    """RFC 8750 is not in scapy: the -iiv files are checked by the core and the model only (said here, not
    skipped silently)."""
    algos = set(scapy_ipsec.CRYPT_ALGOS)
    assert not [a for a in algos if "IIV" in a.upper() or "8750" in a]
    assert {f"esp_{s}_test.json" for s in ev.SUITES if s not in SCAPY_ALGO} == \
        {"esp_aes-ccm-8-iiv_test.json", "esp_aes-gcm-16-iiv_test.json", "esp_chacha20-poly1305-iiv_test.json"}
    assert set(SCAPY_ALGO.values()) <= algos


def _scapy_sa(g: dict, inp: dict, wire: bytes):
    seq = int(inp["seq"], 16)
    tunnel = None
    if g["mode"] == "tunnel":
        tunnel = IP(wire[:20]) if wire[0] >> 4 == 4 else IPv6(wire[:40])
    nat = None
    if g["udpEncap"]:
        at = pv.secured_offset(wire) - 8
        sport, dport = struct.unpack(">HH", wire[at : at + 4])
        nat = UDP(sport=sport, dport=dport)
    return scapy_ipsec.SecurityAssociation(
        scapy_ipsec.ESP, spi=int(inp["spi"], 16), crypt_algo=SCAPY_ALGO[g["suite"]],
        crypt_key=bytes.fromhex(inp["key"] + inp["salt"]), crypt_icv_size=g["tagSize"] // 8, tunnel_header=tunnel,
        nat_t_header=nat, esn_en=g["esn"], esn=seq >> 32)


def _ip(b: bytes):
    return IPv6(b) if b[0] >> 4 == 6 else IP(b)


def _dstopts_inside(plain: bytes) -> bool:
    """An IPv6 packet whose Destination Options header no Routing header follows: scapy keeps it in front."""
    if plain[0] >> 4 != 6:
        return False
    nh, off, chain = plain[6], 40, []
    while nh in (0, 43, 44, 60):
        chain.append(nh)
        nh, off = plain[off], off + (8 if nh == 44 else (plain[off + 1] + 1) * 8)
    return 60 in chain and 43 not in chain[chain.index(60):]


SCAPY_FILES = [p for p in ESP_FILES if p.name[4:-10] in SCAPY_ALGO]


@pytest.mark.parametrize("path", SCAPY_FILES, ids=lambda p: p.name)
def test_scapy_on_every_vector(path):
    doc = load(path)
    suite = doc["testGroups"][0]["suite"]
    full_tag = suite in SCAPY_FULL_GCM_TAG
    counts = dict(tfc=0, decrypted=0, same_octets=0, refused=0, placement=0, full_tag=0, low_zero=0, spi_zero=0, empty_icmp=0)
    for g, t in group_tests(doc):
        inp, out = t["inputs"], t["outputs"]
        wire = bytes.fromhex(inp["ciphertextPacket"])
        flags = set(t["flags"])
        if "SpiZero" in flags:  # scapy dissects SPI 0 as the non-ESP marker (RFC 3948), even over protocol 50
            assert _ip(wire).haslayer(scapy_ipsec.NON_ESP)
            with pytest.raises(TypeError):
                _scapy_sa(g, inp, wire).decrypt(_ip(wire))
            counts["spi_zero"] += 1
        elif t["result"] == "valid" and "UdpChecksum" not in flags:
            sa = _scapy_sa(g, inp, wire)
            plain = bytes.fromhex(out["plaintextPacket"])
            if full_tag:  # scapy takes the last 16 octets as the tag: the vector's short ICV never verifies
                with pytest.raises(scapy_ipsec.IPSecIntegrityError):
                    sa.decrypt(_ip(wire))
                counts["full_tag"] += 1
            else:
                got = raw(sa.decrypt(_ip(wire)))
                if "TfcPadding" in flags:
                    # RFC 4303 §2.7: scapy keeps the TFC padding as Padding after the packet its own length ends
                    assert got[: len(plain)] == plain and len(got) > len(plain), t["tcId"]
                    counts["tfc"] += 1
                elif got != plain and len(plain) == 20 and plain[9] == 1:
                    # an empty payload under protocol 1: scapy re-serialises a default ICMP header into it
                    assert got[:20] == plain and got[20:] == raw(ICMP()), t["tcId"]  # (its Total Length still 20)
                    counts["empty_icmp"] += 1
                else:
                    assert got == plain, t["tcId"]
                counts["decrypted"] += 1
            if "DecryptOnly" in flags or "TfcPadding" in flags:  # scapy's sender has no TFC padding setting
                continue
            seq = int(inp["seq"], 16)
            if seq & 0xFFFFFFFF == 0:  # scapy's encrypt takes `seq_num or self.seq_num`: 0 means "the SA's own"
                quirk = raw(sa.encrypt(_ip(plain), seq_num=0, iv=struct.pack(">Q", seq)))
                assert quirk[pv.secured_offset(quirk) + 4 : pv.secured_offset(quirk) + 8] == b"\0\0\0\1"
                sa = _scapy_sa(g, inp, wire)
                sa.seq_num = 0
                counts["low_zero"] += 1
            sent = raw(sa.encrypt(_ip(plain), seq_num=seq & 0xFFFFFFFF, iv=struct.pack(">Q", seq)))
            mine, theirs = wire[pv.secured_offset(wire) :], sent[pv.secured_offset(sent) :]
            if _dstopts_inside(plain):  # RFC 4303 §3.1.1 allows both placements; scapy's is Linux's
                assert mine != theirs and raw(_scapy_sa(g, inp, wire).decrypt(_ip(sent))) == plain
                counts["placement"] += 1
            elif full_tag:  # RFC 4106 §6 sends the tag's first 8/12 octets; scapy all 16
                extra = 16 - g["tagSize"] // 8
                assert theirs[:-extra] == mine, t["tcId"]
            else:
                assert theirs == mine, t["tcId"]
                counts["same_octets"] += 1
        elif t["result"] == "invalid" and flags & AUTH_MUTATIONS and not full_tag:
            with pytest.raises(scapy_ipsec.IPSecIntegrityError):
                _scapy_sa(g, inp, wire).decrypt(_ip(wire))
            counts["refused"] += 1
        elif t["result"] == "acceptable" and "BadPadding" in flags and not full_tag:
            # RFC 4303 §2.4 SHOULD: scapy may drop the packet or deliver what the file says
            try:
                got = raw(_scapy_sa(g, inp, wire).decrypt(_ip(wire)))
            except Exception:  # noqa: BLE001 - any refusal is a drop
                continue
            assert got == bytes.fromhex(out["plaintextPacket"]), t["tcId"]
    if full_tag:
        assert counts["full_tag"] > 30 and counts["decrypted"] == 0
    else:
        assert counts["decrypted"] > 30 and counts["same_octets"] > 20 and counts["refused"] >= 20, counts
        assert counts["tfc"] == 4, counts
    assert counts["low_zero"] == 3 and counts["placement"] == 1, counts
    if suite == "aes-gcm-16":
        assert (counts["spi_zero"], counts["empty_icmp"]) == (1, 1), counts


# ------------------------------------------------------------------ tshark (Wireshark's own ESP dissector)

import wireshark  # noqa: E402
from pecore.tools import keyimport  # noqa: E402

WS_FIELDS = ["frame.time_epoch", "esp.icv_good", "esp.contained_data", "_ws.malformed"]
GCM_FILES = [VECTORS / f"esp_aes-gcm-{n}_test.json" for n in (8, 12, 16)]
WS_VERSION = wireshark.versions()[0] if Path(wireshark.TSHARK).exists() else None
#: Whether the esp_sa UAT of this Wireshark has ESN: the 10-column layout of `keys export` (4.4 and later), with
#: "Sequence Number length" and "ESN High Bits"; 4.0's 8 columns cannot say ESN.
WS_ESN = WS_VERSION is not None and keyimport.WIRESHARK_LAYOUTS[keyimport.layout_for(WS_VERSION)][0] == 10
#: The mutations that break the ICV (or what it covers); EsnIcvMistake: an AES-CBC ICV over SPI || Seq low only.
WS_MUTATIONS = AUTH_MUTATIONS | {"EsnIcvMistake"}


def _tshark_rows(stem: str, high: int = 0) -> dict:
    """tcId -> (icv_good, contained data, _ws.malformed) from tshark over a group's pcap, keys from
    `pyesp keys export` for the running Wireshark.  ``high``: the ESN high half that the esp_sa rows of the ESN
    SAs carry (4.4 and later)."""
    from pyesp.tools.cli import main

    profile = wireshark.shared_dir("pe-esp-vectors-")
    (profile / "c.pcap").write_bytes((VECTORS / "pcap" / f"{stem}.pcap").read_bytes())
    keys = (VECTORS / "pcap" / f"{stem}.keys").read_text()
    if not WS_ESN:
        # Wireshark 4.0's table has no ESN column, so `keys export` refuses ESN lines for it: the same SAs without
        # ESN are what 4.0 can be told (and what it then does with ESN packets is asserted below).
        keys = keys.replace(" esn=1 ", " esn=0 ")
    else:
        # The "ESN High Bits" that `keys export` writes is the high half of the SA's first-seq.
        def esn_at(line: str) -> str:
            words = line.split()
            if words[:1] != ["esp-sa"] or "esn=1" not in words:
                return line
            kept = [w for w in words if not w.startswith("first-seq=")]
            return " ".join(kept + [f"first-seq=0x{(high << 32) | 1:x}"])

        keys = "".join(esn_at(line) + "\n" for line in keys.splitlines())
    (profile / "keys").write_text(keys)
    assert main(["keys", "export", "--to", "esp_sa", str(profile / "keys"), "-o", str(profile / "esp_sa"),
                 "--wireshark-version", wireshark.ws_version()]) == 0
    for p in profile.iterdir():
        p.chmod(0o666)
    proc = wireshark.run(["-r", str(profile / "c.pcap"), "-o", "esp.enable_encryption_decode:TRUE",
                          "-o", "esp.enable_authentication_check:TRUE", "-T", "fields", "-E", "separator=|",
                          *(a for f in WS_FIELDS for a in ("-e", f))], plugin=None, profile=profile)
    assert "esp_sa" not in proc.stderr, proc.stderr  # the UAT loaded
    rows = {}
    for line in proc.stdout.splitlines():
        t, good, data, malformed = line.split("|")
        rows[int(float(t))] = (wireshark.bool_text(good) if good else "", bytes.fromhex(data.replace(":", "")),
                               malformed)
    return rows


def _group_rows(stem: str, g: dict) -> Tuple[dict, dict]:
    """({tcId: tshark row}, the rows under ESN High Bits 0).  Wireshark 4.4+ starts an ESN SA at the high half of
    its esp_sa row and follows it from packet to packet of that SPI.  A stateful group is one SA's packets in
    order: it is read under the key file's own export.  The other ESN groups put vectors of unrelated receiver
    states one after the other under one SPI: each of those is read from a run whose rows carry its own high half."""
    base = _tshark_rows(stem)
    if not (WS_ESN and g["esn"]) or g["stateful"]:
        return base, base
    by_high = {0: base}
    rows = {}
    for t in g["tests"]:
        high = int(t["inputs"]["seq"], 16) >> 32
        if high not in by_high:
            by_high[high] = _tshark_rows(stem, high)
        if t["tcId"] in by_high[high]:
            rows[t["tcId"]] = by_high[high][t["tcId"]]
    return rows, base


def _sealed_without_high_half(t: dict) -> bool:
    """An ESN vector whose ICV leaves the high half of the sequence number out (pyesp.tools.vectors: the AAD
    SPI || Seq low; pyesp.tools.vectors_cbc: EsnIcvMistake): what a receiver without ESN computes."""
    flags = set(t["flags"])
    return "EsnIcvMistake" in flags or ("EsnAadMistake" in flags and "the high half left out" in t["comment"])


def _check_group(g: dict, rows: dict, base: dict, seen: dict) -> None:
    """The assertions both files share, per test of one group; what was checked is counted in ``seen``."""
    for t in g["tests"]:
        good, data, malformed = rows[t["tcId"]]
        flags = set(t["flags"])
        if t["result"] == "valid":
            want = _esp_payload(g, bytes.fromhex(t["outputs"]["plaintextPacket"]))
            if "TfcPadding" in flags:  # tshark's ESP data runs to the ESP padding: TFC padding included
                assert data[: len(want)] == want and len(data) > len(want), t["tcId"]
                seen["tfc"] += 1
            else:
                assert data == want, t["tcId"]
            if "[Malformed Packet" in malformed:
                # The dissector of the decrypted payload threw (4.4+ takes a UDP payload of one ESN vector for
                # DTLS): ESP adds its ICV verdict after the payload, so none is shown.
                assert good == "", t["tcId"]
                seen["icv_hidden"] += 1
            elif not g["esn"]:
                assert good == "1", t["tcId"]
                seen["good"] += 1
            elif not WS_ESN:
                assert good == "0", t["tcId"]
                seen["esn_bad"] += 1
            else:
                assert good == "1", t["tcId"]
                seen["esn_good"] += 1
            if WS_ESN and g["esn"] and int(t["inputs"]["seq"], 16) >> 32:
                if g["stateful"]:  # across 2^32 under the key file's first-seq (high half 0): followed
                    seen["esn_wrap_followed"] += good == "1"
                else:  # under ESN High Bits 0 a vector above 2^32 of an unrelated state is not good
                    assert base[t["tcId"]][0] in ("0", ""), t["tcId"]
                    seen["esn_high_0_bad"] += 1
        elif t["result"] == "invalid" and flags & WS_MUTATIONS:
            if g["esn"] and not WS_ESN and _sealed_without_high_half(t):
                assert good == "1", t["tcId"]
                seen["esn_mistake_good"] += 1
            else:
                assert good in ("0", ""), t["tcId"]
                seen["mutation_bad"] += 1


def _tshark_seen(path: Path) -> dict:
    """Every group of a vector file through tshark and _check_group: what was checked, counted."""
    doc = load(path)
    stem = path.name.removesuffix("_test.json")
    seen = dict(good=0, esn_bad=0, esn_good=0, esn_high_0_bad=0, esn_wrap_followed=0, esn_mistake_good=0,
                mutation_bad=0, tfc=0, icv_hidden=0)
    for gi, g in enumerate(doc["testGroups"], 1):
        _check_group(g, *_group_rows(f"{stem}_g{gi:02d}", g), seen)
    return seen


def _esp_payload(g: dict, plain: bytes) -> bytes:
    return plain if g["mode"] == "tunnel" else plain[ev.transport_split(plain)[0] :]


@pytest.mark.tshark
@pytest.mark.skipif(WS_VERSION is None, reason="tshark is not installed")
@pytest.mark.parametrize("path", GCM_FILES, ids=lambda p: p.name)
def test_tshark_on_the_gcm_vectors(path):
    """Wireshark's own ESP dissector has AES-GCM (8/12/16-octet ICV) in 4.0, 4.4 and 4.6: it verifies and decrypts
    every valid 32-bit vector to its payload and marks every ICV/ciphertext/AAD mutation bad.  On the ESN vectors:

    - 4.0 has no ESN: it still decrypts them (the keystream does not depend on the AAD) and marks the ICV bad (its
      AAD lacks the high half); the vectors sealed with the AAD SPI || Seq low it marks good, the other ESN
      mutations bad;
    - 4.4 and 4.6 have ESN: every valid ESN vector verifies and decrypts and every mutation (the AAD without the
      high half included) is marked bad, each vector read under its own high half (_group_rows); under ESN High
      Bits 0 those above 2^32 of unrelated receiver states are not good, while the stateful group that crosses
      2^32 verifies throughout under the key file's own export (the high half is followed across the wrap).

    Where the dissector of a decrypted payload throws, ESP shows no ICV verdict: 4.4 and 4.6 take the UDP payload
    of one AES-GCM-8 ESN vector for DTLS (a Malformed Packet), 4.0 does not (its count is in ``icv_hidden``)."""
    seen = _tshark_seen(path)
    assert seen["good"] > 40 and seen["mutation_bad"] >= 15 and seen["tfc"] == 4, seen
    if WS_ESN:
        assert seen["esn_good"] > 10 and seen["esn_high_0_bad"] > 5 and seen["esn_wrap_followed"] >= 5, seen
        assert seen["mutation_bad"] >= 20 and seen["esn_bad"] == seen["esn_mistake_good"] == 0, seen
    else:
        assert seen["esn_bad"] > 10 and seen["esn_mistake_good"] == 1, seen
        assert seen["esn_good"] == seen["esn_high_0_bad"] == seen["esn_wrap_followed"] == 0, seen


# ------------------------------------------------------------------ the AES-CBC + HMAC files

#: the core's AES-CBC suites -> scapy's auth_algo
SCAPY_AUTH = {"aes-cbc-hmac-sha1-96": "HMAC-SHA1-96", "aes-cbc-hmac-sha256-128": "SHA2-256-128"}


def _scapy_cbc_sa(g: dict, inp: dict, wire: bytes):
    seq = int(inp["seq"], 16)
    tunnel = (IP(wire[:20]) if wire[0] >> 4 == 4 else IPv6(wire[:40])) if g["mode"] == "tunnel" else None
    nat = None
    if g["udpEncap"]:
        at = pv.secured_offset(wire) - 8
        nat = UDP(sport=struct.unpack(">H", wire[at : at + 2])[0], dport=struct.unpack(">H", wire[at + 2 : at + 4])[0])
    return scapy_ipsec.SecurityAssociation(
        scapy_ipsec.ESP, spi=int(inp["spi"], 16), crypt_algo="AES-CBC", crypt_key=bytes.fromhex(inp["key"]),
        auth_algo=SCAPY_AUTH[g["suite"]], auth_key=bytes.fromhex(inp["integKey"]), tunnel_header=tunnel,
        nat_t_header=nat, esn_en=g["esn"], esn=seq >> 32)


@pytest.mark.parametrize("path", CBC_FILES, ids=lambda p: p.name)
def test_scapy_on_every_cbc_vector(path):
    """scapy (pyca/cryptography) decrypts every valid AES-CBC vector to its plaintext, writes the vector's ESP
    octets given its sequence number and IV, and refuses every packet whose ICV was broken or mis-sealed."""
    doc = load(path)
    counts = dict(decrypted=0, same_octets=0, refused=0)
    for g, t in group_tests(doc):
        inp, out = t["inputs"], t["outputs"]
        wire, flags = bytes.fromhex(inp["ciphertextPacket"]), set(t["flags"])
        if t["result"] == "valid" and "TrailingOctets" not in flags:
            plain = bytes.fromhex(out["plaintextPacket"])
            assert raw(_scapy_cbc_sa(g, inp, wire).decrypt(_ip(wire))) == plain, t["tcId"]
            counts["decrypted"] += 1
            if "DecryptOnly" in flags:
                continue
            seq = int(inp["seq"], 16)
            sent = raw(_scapy_cbc_sa(g, inp, wire).encrypt(_ip(plain), seq_num=seq & 0xFFFFFFFF,
                                                           iv=bytes.fromhex(inp["iv"])))
            assert sent[pv.secured_offset(sent) :] == wire[pv.secured_offset(wire) :], t["tcId"]
            counts["same_octets"] += 1
        elif t["result"] == "invalid" and flags & (AUTH_MUTATIONS | {"EsnIcvMistake"}):
            with pytest.raises(scapy_ipsec.IPSecIntegrityError):
                _scapy_cbc_sa(g, inp, wire).decrypt(_ip(wire))
            counts["refused"] += 1
    assert counts["decrypted"] >= 20 and counts["same_octets"] >= 20 and counts["refused"] >= 15, counts


@pytest.mark.parametrize("path", CBC_FILES, ids=lambda p: p.name)
def test_core_on_every_cbc_vector(path):
    """The core's receiver on every test and its sender (given the IV) on the valid ones; the rejections the
    files are for, each met."""
    (rep,) = pv.check_files([str(path)])
    assert not rep.failed, [(o.tcId, o.reason) for o in rep.failed[:10]]
    errors = {t["outputs"].get("error") for _g, t in group_tests(load(path))}
    assert {"authentication-failed", "esp-bad-block-length", "esp-truncated", "esp-no-sa", "esp-bad-padding",
            "esp-bad-pad-length", "esp-dummy-packet", "not-esp", "nat-keepalive", "ike-non-esp-marker"} <= errors


@pytest.mark.tshark
@pytest.mark.skipif(WS_VERSION is None, reason="tshark is not installed")
@pytest.mark.parametrize("path", CBC_FILES, ids=lambda p: p.name)
def test_tshark_on_the_cbc_vectors(path):
    """Wireshark's own ESP dissector, keys through `pyesp keys export` (AES-CBC [RFC3602] with HMAC-SHA-1-96
    [RFC2404] / HMAC-SHA-256-128 [RFC4868], in 4.0, 4.4 and 4.6): every valid 32-bit vector verifies and decrypts
    to its payload, every ICV/ciphertext/IV/header mutation is marked bad.  On the ESN vectors:

    - 4.0 has no ESN: they decrypt (CBC does not depend on the ICV) and their ICV is marked bad (the high half is
      missing from it); the one whose ICV leaves the high half out (EsnIcvMistake) it marks good;
    - 4.4 and 4.6 have ESN: under the ESN High Bits of each vector's sequence number they verify and decrypt, the
      EsnIcvMistake vector is marked bad, and under ESN High Bits 0 they are not good (_group_rows)."""
    seen = _tshark_seen(path)
    assert seen["good"] >= 20 and seen["mutation_bad"] >= 14 and seen["tfc"] == 0, seen
    if WS_ESN:
        assert seen["esn_good"] >= 2 and seen["esn_high_0_bad"] >= 2 and seen["mutation_bad"] >= 15, seen
        assert seen["esn_bad"] == seen["esn_mistake_good"] == 0, seen
    else:
        assert seen["esn_bad"] >= 2 and seen["esn_mistake_good"] == 1, seen
        assert seen["esn_good"] == seen["esn_high_0_bad"] == 0, seen
    assert seen["esn_wrap_followed"] == seen["icv_hidden"] == 0, seen  # no stateful ESN group; no exception
