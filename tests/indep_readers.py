"""Three capture readers that share no code with the core, for the tests at the capture boundary (issue 21).

- libpcap, through ctypes on libpcap.so (Debian's libpcap0.8; scripts/install.sh), opened with nanosecond
  precision, so a microsecond pcap reads as whole microseconds in nanoseconds;
- tshark (Wireshark's wiretap), one process per file, with Ethernet FCS checking on;
- scapy's pcap and pcapng readers (RawPcapReader / RawPcapNgReader).

Each gives a list of :class:`Rec` (captured and original length, timestamp in nanoseconds, octets where the
reader hands them out), or raises :class:`Unreadable` with the reader's own words.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional


class Unreadable(Exception):
    """The reader refused the file."""


@dataclass
class Rec:
    caplen: int
    origlen: int
    ts_ns: Optional[int]
    data: Optional[bytes] = None
    fcs_good: Optional[bool] = None  # tshark: None when no FCS is declared for the frame


# ---- libpcap ----------------------------------------------------------------------------------------------


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _PktHdr(ctypes.Structure):
    _fields_ = [("ts", _Timeval), ("caplen", ctypes.c_uint32), ("len", ctypes.c_uint32)]


PCAP_TSTAMP_PRECISION_NANO = 1


@functools.lru_cache(maxsize=None)
def _libpcap():
    name = ctypes.util.find_library("pcap") or "libpcap.so.0.8"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.pcap_open_offline_with_tstamp_precision.restype = ctypes.c_void_p
    lib.pcap_open_offline_with_tstamp_precision.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_char_p]
    lib.pcap_next_ex.restype = ctypes.c_int
    lib.pcap_next_ex.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(_PktHdr)),
                                 ctypes.POINTER(ctypes.POINTER(ctypes.c_ubyte))]
    lib.pcap_geterr.restype = ctypes.c_char_p
    lib.pcap_geterr.argtypes = [ctypes.c_void_p]
    lib.pcap_close.argtypes = [ctypes.c_void_p]
    lib.pcap_lib_version.restype = ctypes.c_char_p
    return lib


def libpcap_version() -> Optional[str]:
    lib = _libpcap()
    return lib.pcap_lib_version().decode() if lib else None


def libpcap(path: Path) -> List[Rec]:
    lib = _libpcap()
    err = ctypes.create_string_buffer(256)
    p = lib.pcap_open_offline_with_tstamp_precision(os.fsencode(path), PCAP_TSTAMP_PRECISION_NANO, err)
    if not p:
        raise Unreadable(err.value.decode(errors="replace"))
    out = []
    try:
        hdr = ctypes.POINTER(_PktHdr)()
        data = ctypes.POINTER(ctypes.c_ubyte)()
        while True:
            rc = lib.pcap_next_ex(p, ctypes.byref(hdr), ctypes.byref(data))
            if rc == -2:
                return out
            if rc != 1:
                raise Unreadable(lib.pcap_geterr(p).decode(errors="replace"))
            h = hdr.contents
            out.append(Rec(h.caplen, h.len, h.ts.tv_sec * 1_000_000_000 + h.ts.tv_usec,
                           ctypes.string_at(data, h.caplen)))
    finally:
        lib.pcap_close(p)


# ---- tshark -------------------------------------------------------------------------------------------------

TSHARK = shutil.which("tshark")


def tshark(path: Path) -> List[Rec]:
    """Lengths, time and FCS status of every frame; stderr of a damaged file is the error."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8", "HOME": "/nonexistent"}
    p = subprocess.run([TSHARK, "-n", "-r", str(path), "-o", "eth.check_fcs:TRUE", "-T", "fields",
                        "-E", "separator=|", "-e", "frame.cap_len", "-e", "frame.len", "-e", "frame.time_epoch",
                        "-e", "eth.fcs.status", "-e", "frame.encap_type"], capture_output=True, text=True, env=env, timeout=120)
    err = "\n".join(line for line in p.stderr.splitlines() if "Running as user" not in line)
    if p.returncode != 0 or err.strip():
        raise Unreadable(err.strip() or f"tshark exit status {p.returncode}")
    out = []
    for line in p.stdout.splitlines():
        cap, orig, epoch, fcs, encap = line.split("|")
        if encap == "":  # Wireshark shows a pcapng custom block as a record, not as a packet
            continue
        sec, _, frac = epoch.partition(".")
        ts_ns = int(sec) * 1_000_000_000 + int((frac + "000000000")[:9]) if epoch else None  # SPB: no time
        out.append(Rec(int(cap), int(orig), ts_ns,
                       fcs_good=None if fcs == "" else fcs == "1"))
    return out


# ---- scapy --------------------------------------------------------------------------------------------------


def scapy(path: Path) -> List[Rec]:
    from scapy.utils import RawPcapNgReader, RawPcapReader

    with open(path, "rb") as f:
        ng = f.read(4) == b"\x0a\x0d\x0d\x0a"
    out = []
    try:
        reader = (RawPcapNgReader if ng else RawPcapReader)(str(path))
    except Exception as e:  # scapy raises Scapy_Exception and plain ones alike
        raise Unreadable(f"{type(e).__name__}: {e}") from None
    with reader:
        try:
            for data, meta in reader:
                if ng:
                    # PacketMetadataNg: tshigh/tslow in units of the interface's tsresol; an SPB has none
                    ts_ns = None
                    if meta.tshigh is not None:
                        ts_ns = ((meta.tshigh << 32) | meta.tslow) * 1_000_000_000 // meta.tsresol
                    out.append(Rec(len(data), meta.wirelen, ts_ns, data))
                else:
                    sub = 1_000_000_000 if reader.nano else 1_000_000
                    ts_ns = meta.sec * 1_000_000_000 + meta.usec * (1_000_000_000 // sub)
                    out.append(Rec(meta.caplen, meta.wirelen, ts_ns, data))
        except Exception as e:
            raise Unreadable(f"{type(e).__name__}: {e}") from None
    return out
