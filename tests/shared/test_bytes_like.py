"""Every Python call that takes packet octets accepts any bytes-like object, and names the parameter otherwise.

Issue: bytearray and memoryview were refused with cffi's own TypeError about C types, and str or None gave
raw cffi errors.  Now bytes, bytearray, memoryview (also of a wider item type, and read-only) and array
give the same result as bytes; str, None, int and non-contiguous views raise a TypeError naming the
parameter.
"""
from __future__ import annotations

import array
import struct

import pytest

import pyeesp
import pyesp
import pypsp
from pecore.capture import LINKTYPE_RAW, CaptureWriter, read_capture
from pecore.protocol import checksum


def udp4(n: int = 40) -> bytes:
    seg = struct.pack("!HHHH", 1111, 2222, 8 + n, 0) + bytes(range(n))
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), 0, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:] + seg


PKT = udp4(40)  # 68 octets: a multiple of 4, so array('I') can hold it


def views(data: bytes):
    yield "bytes", data
    yield "bytearray", bytearray(data)
    yield "memoryview", memoryview(data)
    yield "memoryview of bytearray", memoryview(bytearray(data))
    yield "memoryview slice", memoryview(b"xx" + data + b"yy")[2:-2]
    yield "array('B')", array.array("B", data)
    yield "array('I')", array.array("I", data)


BAD = [("str", "45000044"), ("None", None), ("int", 7), ("list", [0x45, 0])]


def psp_pair():
    key = bytes(range(16))
    return pypsp.Encryptor(spi=0x11, key=key, crypt_offset=1), pypsp.Decryptor(keys={0x11: key})


@pytest.mark.parametrize("kind", [k for k, _ in views(PKT)])
def test_psp_accepts_every_bytes_like(kind):
    data = dict(views(PKT))[kind]
    enc, dec = psp_pair()
    ref_enc, _ = psp_pair()
    wire = enc.encrypt(data)
    assert wire == ref_enc.encrypt(PKT)
    assert enc.encrypt_batch([data, data]) == ref_enc.encrypt_batch([PKT, PKT])
    wire_view = dict(views(wire))[kind] if len(wire) % 4 == 0 or kind != "array('I')" else wire
    assert dec.decrypt(wire_view).packet == PKT
    assert dec.open(bytearray(wire[28:])).packet == PKT[20:]
    assert [r.packet for r in dec.decrypt_batch([wire_view, bytearray(wire)])] == [PKT, PKT]
    assert pypsp.Header.parse(memoryview(wire)[28:]).spi == 0x11
    assert pypsp.Header.parse_lenient(bytearray(wire[28:]))[1] == "ok"


@pytest.mark.parametrize("kind", [k for k, _ in views(PKT)])
def test_eesp_accepts_every_bytes_like(kind):
    data = dict(views(PKT))[kind]
    sa = pyeesp.SA(0x2000, key=bytes(range(20)), mode="tunnel")
    ref = pyeesp.SA(0x2000, key=bytes(range(20)), mode="tunnel")
    wire = sa.encrypt(data, 0)
    assert wire == ref.encrypt(PKT, 0)
    assert sa.encrypt_batch([data]) == ref.encrypt_batch([PKT])
    rx = pyeesp.Receiver([pyeesp.SA(0x2000, key=bytes(range(20)), mode="tunnel")])
    assert rx.decrypt(bytearray(wire)).packet == PKT
    assert [r.packet for r in rx.decrypt_batch([memoryview(ref.encrypt(PKT, 0))])] == [PKT]
    assert pyeesp.Header.parse(memoryview(wire)[20:]).spi == 0x2000


@pytest.mark.parametrize("kind", [k for k, _ in views(PKT)])
def test_esp_accepts_every_bytes_like(kind):
    data = dict(views(PKT))[kind]
    sa = pyesp.SA(0x2000, "aes-gcm-16", bytes(range(20)), mode="tunnel")
    ref = pyesp.SA(0x2000, "aes-gcm-16", bytes(range(20)), mode="tunnel")
    wire = sa.encrypt(data)
    assert wire == ref.encrypt(PKT)
    assert sa.encrypt_batch([data]) == ref.encrypt_batch([PKT])
    assert sa.seal(data, 4) == ref.seal(PKT, 4)
    rx = pyesp.Receiver([pyesp.SA(0x2000, "aes-gcm-16", bytes(range(20)), mode="tunnel")])
    assert rx.decrypt(bytearray(wire)).packet == PKT
    assert [r.packet for r in rx.decrypt_batch([memoryview(ref.encrypt(PKT))])] == [PKT]
    assert rx.open(memoryview(ref.seal(PKT, 4))).packet == PKT
    assert pyesp.Header.parse(memoryview(wire)[20:]).spi == 0x2000


@pytest.mark.parametrize("name,bad", BAD)
def test_other_types_raise_a_type_error_naming_the_parameter(name, bad):
    enc, dec = psp_pair()
    sa = pyeesp.SA(0x2000, key=bytes(range(20)), mode="tunnel")
    esa = pyesp.SA(0x2000, "aes-gcm-16", bytes(range(20)), mode="tunnel")
    calls = [
        (enc.encrypt, "ip_packet"), (dec.decrypt, "packet"), (dec.open, "psp"),
        (pypsp.Header.parse, "data"), (pypsp.Header.parse_lenient, "data"),
        (lambda b: sa.encrypt(b, 0), "ip_packet"), (sa.decrypt, "packet"), (pyeesp.Header.parse, "data"),
        (lambda b: enc.encrypt_batch([PKT, b]), "packets[1]"), (lambda b: dec.decrypt_batch([b]), "packets[0]"),
        (esa.encrypt, "ip_packet"), (esa.decrypt, "packet"), (esa.open, "esp"), (lambda b: esa.seal(b, 4), "payload"),
        (pyesp.Header.parse, "data"), (lambda b: esa.encrypt_batch([PKT, b]), "packets[1]"),
        (lambda b: esa.decrypt_batch([b]), "packets[0]"),
    ]
    for call, param in calls:
        with pytest.raises(TypeError) as ei:
            call(bad)
        msg = str(ei.value)
        assert param in msg and "bytes-like" in msg, msg
        assert "cdata" not in msg and "initializer" not in msg, msg


def test_non_contiguous_views_are_refused_by_name():
    strided = memoryview(PKT * 2)[::2]
    enc, _ = psp_pair()
    with pytest.raises(TypeError, match="ip_packet"):
        enc.encrypt(strided)


def test_capture_writer_takes_bytes_like(tmp_path):
    path = tmp_path / "c.pcap"
    with CaptureWriter(str(path), linktype=LINKTYPE_RAW) as w:
        for _, v in views(PKT):
            w.write(v)
        with pytest.raises(TypeError, match="data"):
            w.write("45")  # type: ignore[arg-type]
    assert [r.data for r in read_capture(path)] == [PKT] * len(list(views(PKT)))
