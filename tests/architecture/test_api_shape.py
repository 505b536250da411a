"""One shape for the Python faces (README.md, "One shape for PSP, EESP and ESP"): the same verbs, the same way
to report a spent counter, EESP and ESP batches through the core's batch loop, the EESP test-packet knobs (explicit IV,
Pad Length), bare seal/open on both, and no old names left."""
from __future__ import annotations

import re
import warnings

import pytest
from pathlib import Path

import pecore.errors
import pyeesp
import pyesp
import pypsp
from conftest import REPO_ROOT
from pyeesp.header import Header as EespHeader
from pypsp.header import Header as PspHeader

MK = (bytes(range(32)), bytes(range(32, 64)))
SPI = 0x9A345678
ROOT = bytes(range(32))
INNER = bytes.fromhex("4500002000000000401166cb0a0000010a00000204d2162e000c0000deadbeef")  # eesp.md §19


def udp4(payload: bytes = b"x" * 16) -> bytes:
    n = 28 + len(payload)
    return bytes.fromhex(f"4500{n:04x}000000004011000" + "0c0a80001c0a80002") + bytes.fromhex(
        f"04d2162e{8 + len(payload):04x}0000") + payload


def eesp_sa(**kw) -> pyeesp.SA:
    return pyeesp.SA(0x1000, "aes-gcm-16", **({"root_key": ROOT, "sskdf": "hkdf-sha256"} | kw))


class _Strict:
    """A block in which any DeprecationWarning is an error (the new names must not warn)."""

    def __enter__(self):
        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error", DeprecationWarning)

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


# ------------------------------------------------------------------------------------------- the verb table


def readme_table() -> list:
    """(verb, PSP call, EESP call, ESP call) rows of the README's side-by-side table."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("| Verb | PSP (`pypsp`) | EESP (`pyeesp`) | ESP (`pyesp`) |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_readme_table_names_calls_that_exist():
    """Every call the README's table names exists on the class or module it names."""
    objs = {"enc": pypsp.Encryptor, "dec": pypsp.Decryptor, "pypsp": pypsp, "sa": pyeesp.SA, "rx": pyeesp.Receiver,
            "pyeesp": pyeesp, "esp_sa": pyesp.SA, "esp_rx": pyesp.Receiver, "pyesp": pyesp,
            "pecore.errors": pecore.errors}
    rows = readme_table()
    assert len(rows) >= 10 and all(len(r) == 4 for r in rows)
    named = 0
    for verb, *calls in rows:
        for cell in calls:
            for owner, name in re.findall(r"`(enc|dec|pypsp|sa|rx|pyeesp|esp_sa|esp_rx|pyesp|pecore\.errors)\.(\w+)",
                                          cell):
                named += owner in ("esp_sa", "esp_rx", "pyesp")
                assert hasattr(objs[owner], name), f"README row {verb!r}: {owner}.{name} does not exist"


    assert named >= 11  # the ESP column names real calls too


def test_the_same_verbs_on_every_face():
    for verb in ("encrypt", "encrypt_batch", "seal", "next_iv", "set_next_iv"):
        assert callable(getattr(pypsp.Encryptor, verb, None)) or isinstance(getattr(pypsp.Encryptor, verb), property)
        assert callable(getattr(pyeesp.SA, verb)) and callable(getattr(pyesp.SA, verb))
    for verb in ("decrypt", "decrypt_batch", "open"):
        assert callable(getattr(pypsp.Decryptor, verb))
        assert callable(getattr(pyeesp.Receiver, verb)) and callable(getattr(pyeesp.SA, verb))
        assert callable(getattr(pyesp.Receiver, verb)) and callable(getattr(pyesp.SA, verb))
    for face in (pypsp, pyeesp, pyesp):
        assert callable(face.encrypt_capture) and callable(face.decrypt_capture)
    for name in ("AuthenticationError", "MalformedPacketError", "TruncatedPacketError", "ConfigurationError",
                 "CaptureError", "KeyFileError"):
        assert issubclass(getattr(pyesp, name), pyesp.EspError) and hasattr(pyeesp, name), name


def test_every_decrypt_capture_takes_a_key_file(tmp_path):
    """Each face's decrypt_capture takes a parsed key file as well as its receiver (``from_key_file``), and
    decrypts as the receiver of that file's lines for its protocol would."""
    from pecore.capture import LINKTYPE_RAW, CaptureWriter, read_capture
    from pecore.keys import parse_key_file

    kf = parse_key_file(f"psp-master key0={MK[0].hex()} key1={MK[1].hex()}\n"
                        f"eesp-sa spi=0x1000 suite=aes-gcm-16 root-key={ROOT.hex()} sskdf=hkdf-sha256 mode=tunnel\n"
                        f"esp-sa spi=0x2001 suite=aes-gcm-16 key={bytes(20).hex()} mode=tunnel\n")
    from pecore.protocol import checksum

    pkts = []
    for i in range(1, 20):  # with their IP checksums: a transport-mode receiver writes the header anew
        p = bytearray(udp4(bytes([i]) * i))
        p[10:12] = checksum(bytes(p[:20])).to_bytes(2, "big")
        pkts.append(bytes(p))
    plain = tmp_path / "plain.pcap"
    with CaptureWriter(str(plain), LINKTYPE_RAW) as w:
        for p in pkts:
            w.write(p)
    senders = [(pypsp, pypsp.Encryptor(spi=SPI, master_keys=MK), pypsp.Decryptor),
               (pyeesp, eesp_sa(mode="tunnel"), pyeesp.Receiver), (pyesp, pyesp.SA(0x2001, "aes-gcm-16", bytes(20)),
                                                                  pyesp.Receiver)]
    for face, sender, receiver in senders:
        wire, out = tmp_path / f"{face.__name__}.pcap", tmp_path / f"{face.__name__}.out.pcap"
        face.encrypt_capture(sender, plain, wire)
        summary = face.decrypt_capture(kf, wire, out)
        assert (summary.transformed, summary.failed) == (len(pkts), 0), face.__name__
        assert [r.data for r in read_capture(out)] == pkts
        rx = receiver.from_key_file(kf)
        assert [rx.decrypt(r.data).packet for r in read_capture(wire)] == pkts
    with pytest.raises(pypsp.ConfigurationError):  # a key file without PSP keys makes no decryptor
        pypsp.decrypt_capture(parse_key_file("# none\n"), plain, tmp_path / "none.pcap")


# ------------------------------------------------------------------------------------------- exhaustion


def test_one_exception_and_one_query_for_a_spent_counter():
    enc = pypsp.Encryptor(spi=SPI, master_keys=MK, first_iv=2**64 - 1)
    sa = eesp_sa(key=bytes(20), root_key=None, sskdf=None)
    sa.set_next_iv(2**64 - 1)
    esp = pyesp.SA(0x1000, "aes-gcm-16", bytes(20), esn=True)
    esp.set_next_iv(2**64 - 1)
    with _Strict():
        assert enc.next_iv() == 2**64 - 1 and sa.next_iv() == 2**64 - 1 and esp.next_iv() == 2**64 - 1
        enc.encrypt(udp4())
        sa.encrypt(INNER)
        esp.encrypt(INNER)
        assert enc.next_iv() is None and sa.next_iv() is None and esp.next_iv() is None
    for sender, call in ((enc, lambda: enc.encrypt(udp4())), (sa, lambda: sa.encrypt(INNER)),
                         (enc, lambda: enc.encrypt_batch([udp4()])), (sa, lambda: sa.encrypt_batch([INNER])),
                         (esp, lambda: esp.encrypt(INNER)), (esp, lambda: esp.encrypt_batch([INNER]))):
        with pytest.raises(pecore.errors.ExhaustedError) as ei:
            call()
        assert ei.value.category == "limit"
    assert pypsp.ExhaustedError is pyeesp.ExhaustedError is pyesp.ExhaustedError is pecore.errors.ExhaustedError
    assert issubclass(pypsp.IvExhaustedError, pypsp.PspError) and issubclass(pyeesp.SequenceExhaustedError,
                                                                              pyeesp.EespError)
    assert issubclass(pyesp.SequenceExhaustedError, pyesp.EspError)


# ------------------------------------------------------------------------------------------- EESP batches


@pytest.mark.parametrize("sub", [0, 3])  # Sub SA 0 runs the core's own transform, others a callback in its loop
def test_eesp_encrypt_batch_is_the_single_calls(sub, tmp_path):
    pkts = [udp4(bytes([i]) * i) for i in range(1, 40)]
    a, b = eesp_sa(), eesp_sa()
    from pecore.capture import LINKTYPE_RAW, CaptureWriter

    cap = tmp_path / "in.pcap"
    with CaptureWriter(str(cap), LINKTYPE_RAW) as w:
        for p in pkts:
            w.write(p)
    pyeesp.encrypt_capture(a, cap, tmp_path / "out.pcap", sub_sas=4)  # a capture spread over 4 Sub SAs before
    pyeesp.encrypt_capture(b, cap, tmp_path / "out2.pcap", sub_sas=4)
    a.set_next_iv(77, sub)
    b.set_next_iv(77, sub)
    assert a.encrypt_batch(pkts, sub_sa_id=sub) == [b.encrypt(p, sub) for p in pkts]
    assert a.next_iv(sub) == b.next_iv(sub) == 77 + len(pkts)
    assert all(a.next_iv(k) == b.next_iv(k) for k in range(5))
    assert a.encrypt_batch([], sub) == []


def test_eesp_encrypt_batch_stops_at_the_first_failure():
    sa = eesp_sa(max_sub_sa_id=7)
    pkts = [udp4(), udp4(), b"\x45" + bytes(10), udp4()]
    with pytest.raises(pyeesp.EespError) as ei:
        sa.encrypt_batch(pkts, 2)
    assert ei.value.code.startswith("ip-") and str(ei.value).startswith("packet 2:")
    assert len(ei.value.results) == 2 and sa.next_iv(2) == 3  # the failed packet and the one after spent nothing
    assert [sa.decrypt(w).packet for w in ei.value.results] == pkts[:2]


def test_eesp_decrypt_batch_is_the_single_calls():
    sender = eesp_sa(mode="tunnel")
    wires = [sender.encrypt(INNER, sid) for sid in (0, 1, 2, 1)]
    bad = bytearray(wires[1])
    bad[-1] ^= 1
    batch = [wires[0], bytes(bad), wires[1], wires[1], wires[3], b"\x45\x00"]
    one, many = eesp_sa(mode="tunnel"), eesp_sa(mode="tunnel")
    singles = []
    for p in batch:
        try:
            singles.append(one.decrypt(p))
        except pyeesp.EespError as e:
            singles.append(e)
    got = many.decrypt_batch(batch)
    assert len(got) == len(singles)
    for g, s in zip(got, singles):
        assert type(g) is type(s)
        if isinstance(s, pyeesp.EespError):
            assert g.code == s.code
        else:
            assert g == s
    assert [type(g).__name__ for g in got] == ["Decrypted", "AuthenticationError", "Decrypted", "ReplayError",
                                               "Decrypted", "TruncatedPacketError"]
    assert got[4].header.session_id == 1 and got[4].seq == 2


def test_eesp_decrypt_batch_keeps_the_policy_verdict():
    """A drop for policy after the ICV check says whether the ICV verified, in a batch as alone."""
    sender = eesp_sa(mode="tunnel", crypt_offset=2, max_crypt_offset=2)
    wire = sender.encrypt(INNER)
    bad = bytearray(wire)
    bad[-1] ^= 1
    for pkt, valid in ((wire, True), (bytes(bad), False)):
        alone = pytest.raises(pyeesp.PolicyError)
        with alone:
            eesp_sa(mode="tunnel").decrypt(pkt)
        (got,) = eesp_sa(mode="tunnel").decrypt_batch([pkt])
        assert isinstance(got, pyeesp.PolicyError) and got.code == alone.excinfo.value.code
        assert got.icv_valid is alone.excinfo.value.icv_valid is valid


@pytest.mark.parametrize("package", ["pyeesp", "pyesp"])
def test_batches_go_through_the_core_batch_loop(package):
    """Not a Python loop over the single calls: the batch methods hand all packets to pe_batch_transform*
    through the one face machinery (pecore/face.py), whose batches are one run_batch each."""
    src = (REPO_ROOT / package / "sa.py").read_text(encoding="utf-8")
    for method, call in (("encrypt_batch", "self._core.encap_batch("), ("decrypt_batch", "self._core.decap_batch(")):
        body = re.search(rf"    def {method}\(.*?(?=\n    def |\nclass |\ndef )", src, re.S).group(0)
        if "self._receiver.decrypt_batch" in body:
            continue
        assert call in body, method
        assert "self.encrypt(" not in body and "self.decrypt(" not in body, method
    machinery = (REPO_ROOT / "pecore" / "face.py").read_text(encoding="utf-8")
    body = re.search(r"    def encap_batch\(.*?(?=\n    def |\nclass |\ndef )", machinery, re.S).group(0)
    assert "run_batch(fn, ctx, " in body and "self.encap(" not in body
    body = re.search(r"    def decap_batch\(.*?(?=\n    def |\nclass |\ndef )", machinery, re.S).group(0)
    assert "self.ops.decrypt_batch(" in body and "self.decap(" not in body
    from pecore import ops
    from pecore.binding import ffi, lib

    if package == "pyesp":  # ESP's encrypt_batch is the core's own transform, no Python per packet
        tx = ffi.new("int *")
        assert ops.ESP.batch_encap(tx, ()) == (lib.pe_esp_capture_encap, tx)
    # decap_batch, the receivers' shared batch (pecore/util.py), is one run_batch over a callback into C
    util = (REPO_ROOT / "pecore" / "util.py").read_text(encoding="utf-8")
    body = re.search(r"\ndef decap_batch\(.*?(?=\ndef )", util, re.S).group(0)
    assert "run_batch(one, " in body and "decrypt(" not in body
    shared = (REPO_ROOT / "pecore" / "face.py").read_text(encoding="utf-8")
    body = re.search(r"\ndef receiver_batch\(.*?(?=\ndef )", shared, re.S).group(0)
    assert "decap_batch(decap, " in body
    assert getattr(ops, package[2:].upper()).decrypt_batch.__qualname__.startswith("receiver_batch")


# ------------------------------------------------------------------------------------------- test packets


def test_eesp_explicit_iv_and_pad_length():
    sa = eesp_sa(mode="tunnel", format="full")
    wire = sa.encrypt(INNER, 1, iv=0x1122334455667788, pad_len=12)
    h = EespHeader.parse(wire[20:])
    assert h.session_id == 1
    rx = eesp_sa(mode="tunnel", format="full")
    d = rx.decrypt(wire)
    assert d.seq == 1 and d.iv == bytes.fromhex("1122334455667788") and d.pad_len == 12 and d.packet == INNER
    assert sa.next_iv(1) == 2  # the sequence number still counts
    assert rx.decrypt(sa.encrypt(INNER, 1, iv=bytes(8))).iv == bytes(8)
    with pytest.raises(pyeesp.EespError) as ei:
        sa.encrypt(INNER, 1, pad_len=256)
    assert isinstance(ei.value, pyeesp.ConfigurationError)
    with pytest.raises(pyeesp.ConfigurationError):
        sa.encrypt(INNER, 1, iv=b"short")
    iiv = pyeesp.SA(0x2000, "aes-gcm-16-iiv", key=bytes(20))
    with pytest.raises(pyeesp.EespError) as ei:
        iiv.encrypt(INNER, iv=5)
    assert "implicit" in ei.value.code


def test_bare_seal_and_open_on_both_faces():
    a, b = eesp_sa(mode="tunnel"), eesp_sa(mode="tunnel")
    bare = a.seal(INNER, 4, 2)
    assert bare == b.encrypt(INNER, 2)[20:]  # the EESP part of the IPv4 packet encrypt builds
    d = eesp_sa(mode="tunnel").open(bare)
    assert d.packet == INNER and d.header.session_id == 2 and d.seq == 1
    rx = pyeesp.Receiver([eesp_sa(mode="tunnel")])
    rx.open(bare)
    with pytest.raises(pyeesp.ReplayError):
        rx.open(bare)
    assert rx.open(bare, replay=False).packet == INNER
    enc = pypsp.Encryptor(spi=SPI, master_keys=MK, mode="tunnel")
    psp = enc.seal(INNER, 4)
    got = pypsp.Decryptor(master_keys=MK).open(psp)
    assert got.packet == INNER and got.header.iv == 1 and enc.next_iv() == 2
    assert PspHeader.parse(psp).spi == SPI


# ------------------------------------------------------------------------------------------- the names


def test_the_names_do_not_warn_and_the_old_ones_are_gone():
    """The package was never released: the old names (the property ``next_iv``, ``session_id=`` for the Sub SA,
    the modules ``pypsp.diagnose``, ``pyeesp.diagnose``, ``pecore.vectors``) went without a deprecation cycle."""
    enc = pypsp.Encryptor(spi=SPI, master_keys=MK, first_iv=5)
    with _Strict():
        assert enc.next_iv() == 5 and type(enc.next_iv()) is int
        new = pyeesp.derive_sub_sa_key(ROOT, sub_sa_id=1, length=20)
        assert pyeesp.derive_sub_sa_key(ROOT, 1, 20) == new
    with pytest.raises(TypeError):
        pyeesp.derive_sub_sa_key(ROOT, session_id=1, length=20)
    # (by path: an editable install of another checkout may still serve them to this interpreter)
    for old in ("pypsp/diagnose", "pyeesp/diagnose", "pecore/vectors", "pecore/_moved.py", "pecore/_compat.py"):
        assert not (REPO_ROOT / old).exists(), old
        assert old.removesuffix(".py").replace("/", ".") not in (REPO_ROOT / "pyproject.toml").read_text()


def test_the_scapy_names_do_not_warn_and_the_old_ones_are_gone():
    pytest.importorskip("scapy")
    from scapy.layers.inet import IP

    from pyeesp.scapy import EESP, EESPSecurityAssociation
    from pypsp.scapy import PSPSecurityAssociation

    with _Strict():
        sa = EESPSecurityAssociation(0x1000, "aes-gcm-16", root_key=ROOT, sskdf="hkdf-sha256", sub_sa_id=1)
        assert sa.sub_sa_id == 1
        w = sa.encrypt(IP(INNER), sub_sa_id=2)
        assert w[EESP].session_id == 2
        assert sa.next_iv(2) == 2 and sa.next_seq(sub_sa_id=2) == 2 and sa.next_seq(sub_sa_id=1) == 1
        psa = PSPSecurityAssociation(SPI, master_keys=MK, iv=9)
        assert psa.next_iv() == 9
    with pytest.raises(TypeError):
        EESPSecurityAssociation(0x1000, "aes-gcm-16", root_key=ROOT, sskdf="hkdf-sha256", session_id=1)
    with pytest.raises(TypeError):
        sa.next_seq(session_id=2)
    with pytest.raises(TypeError):
        sa.encrypt(IP(INNER), session_id=2)
    assert not hasattr(sa, "session_id")


@pytest.mark.parametrize("face", ["pypsp", "pyeesp", "pyesp"])
def test_exception_classes_are_bound_by_name_in_the_source(face):
    """pecore.faceerrors builds the classes, but each face binds every one to its own name in its source (and
    imports them by name in __init__), so that type checkers, IDEs and readers see them: no globals() updates."""
    import ast
    import importlib

    root = Path(__file__).resolve().parents[2] / face
    errors = importlib.import_module(f"{face}.errors")
    tree = ast.parse((root / "errors.py").read_text())
    bound = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) for tgt in node.targets
             for t in ast.walk(tgt) if isinstance(t, ast.Name)}
    classes = set(errors._ERRORS.classes)
    assert classes <= bound, sorted(classes - bound)
    assert "globals()" not in (root / "errors.py").read_text()
    init = ast.parse((root / "__init__.py").read_text())
    imported = {a.asname or a.name for node in ast.walk(init) if isinstance(node, ast.ImportFrom)
                and node.module == f"{face}.errors" for a in node.names}
    assert classes <= imported, sorted(classes - imported)
