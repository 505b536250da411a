"""Tiny pure-Python capture reader, used only by the tests.

It reads classic pcap (both byte orders, microsecond and nanosecond magic) and pcapng (Section Header,
Interface Description, Enhanced Packet and Simple Packet blocks; every other block is skipped). It shares no
code with the core's capture reader on purpose, so the tests can check the core against it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", False),  # little-endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", False),  # big-endian, microseconds
    b"\x4d\x3c\xb2\xa1": ("<", True),  # little-endian, nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", True),  # big-endian, nanoseconds
}
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_IDB = 0x00000001
PCAPNG_SPB = 0x00000003
PCAPNG_EPB = 0x00000006


class CaptureFormatError(ValueError):
    """The file is not a capture this reader understands."""


@dataclass
class Frame:
    data: bytes
    linktype: int
    orig_len: int
    ts_sec: int = 0
    ts_frac: int = 0  # microseconds or nanoseconds (classic pcap); raw units (pcapng)


@dataclass
class Capture:
    format: str  # "pcap" or "pcapng"
    frames: list[Frame]
    byte_order: str = "<"
    version: tuple[int, int] = (0, 0)
    snaplen: int = 0
    linktype: int = 0  # classic pcap: the file's link type; pcapng: the first interface's
    nanosecond: bool = False


def _read_pcap(buf: bytes) -> Capture:
    if len(buf) < 24:
        raise CaptureFormatError("pcap file header truncated")
    bo, nano = PCAP_MAGICS[buf[:4]]
    vmaj, vmin, _zone, _sigfigs, snaplen, linktype = struct.unpack(bo + "HHiIII", buf[4:24])
    frames = []
    off = 24
    while off < len(buf):
        if off + 16 > len(buf):
            raise CaptureFormatError(f"record header truncated at offset {off}")
        ts_sec, ts_frac, incl, orig = struct.unpack(bo + "IIII", buf[off : off + 16])
        off += 16
        if off + incl > len(buf):
            raise CaptureFormatError(f"record data truncated at offset {off}")
        frames.append(Frame(buf[off : off + incl], linktype & 0x0FFFFFFF, orig, ts_sec, ts_frac))
        off += incl
    return Capture("pcap", frames, bo, (vmaj, vmin), snaplen, linktype & 0x0FFFFFFF, nano)


def _read_pcapng(buf: bytes) -> Capture:
    frames: list[Frame] = []
    interfaces: list[tuple[int, int]] = []  # (linktype, snaplen) per interface of the current section
    bo = "<"
    off = 0
    first_linktype = None
    while off < len(buf):
        if off + 12 > len(buf):
            raise CaptureFormatError(f"block header truncated at offset {off}")
        if struct.unpack("<I", buf[off : off + 4])[0] == PCAPNG_SHB:
            bom = buf[off + 8 : off + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                bo = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                bo = ">"
            else:
                raise CaptureFormatError("bad pcapng byte-order magic")
            interfaces = []
        btype, blen = struct.unpack(bo + "II", buf[off : off + 8])
        if blen < 12 or blen % 4 or off + blen > len(buf):
            raise CaptureFormatError(f"bad block length {blen} at offset {off}")
        body = buf[off + 8 : off + blen - 4]
        if struct.unpack(bo + "I", buf[off + blen - 4 : off + blen])[0] != blen:
            raise CaptureFormatError(f"block trailer length mismatch at offset {off}")
        if btype == PCAPNG_IDB:
            linktype, _res, snaplen = struct.unpack(bo + "HHI", body[:8])
            interfaces.append((linktype, snaplen))
            if first_linktype is None:
                first_linktype = linktype
        elif btype == PCAPNG_EPB:
            ifid, ts_hi, ts_lo, cap, orig = struct.unpack(bo + "IIIII", body[:20])
            if ifid >= len(interfaces) or 20 + cap > len(body):
                raise CaptureFormatError(f"bad enhanced packet block at offset {off}")
            ts = (ts_hi << 32) | ts_lo
            frames.append(Frame(body[20 : 20 + cap], interfaces[ifid][0], orig, ts >> 32, ts & 0xFFFFFFFF))
        elif btype == PCAPNG_SPB:
            if not interfaces:
                raise CaptureFormatError("simple packet block before any interface")
            (orig,) = struct.unpack(bo + "I", body[:4])
            linktype, snaplen = interfaces[0]
            cap = min(orig, snaplen) if snaplen else orig
            frames.append(Frame(body[4 : 4 + cap], linktype, orig))
        off += blen
    return Capture("pcapng", frames, bo, (1, 0), 0, first_linktype or 0, False)


def read_capture(source: bytes | str | Path) -> Capture:
    """Parse a classic pcap or pcapng capture given as bytes or a path."""
    buf = source if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
    buf = bytes(buf)
    if buf[:4] in PCAP_MAGICS:
        return _read_pcap(buf)
    if len(buf) >= 4 and struct.unpack("<I", buf[:4])[0] == PCAPNG_SHB:
        return _read_pcapng(buf)
    raise CaptureFormatError("not a pcap or pcapng file")


def read_frames(source: bytes | str | Path) -> list[bytes]:
    """Just the frame octets of every packet, in file order."""
    return [f.data for f in read_capture(source).frames]


def write_pcap(frames: list[bytes], linktype: int = 1, snaplen: int = 65535) -> bytes:
    """Classic little-endian microsecond pcap, zero timestamps (handy for writing test fixtures)."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)]
    for f in frames:
        out.append(struct.pack("<IIII", 0, 0, len(f), len(f)))
        out.append(bytes(f))
    return b"".join(out)
