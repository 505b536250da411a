"""What the command-line tests of the three faces share (test_psp_cli, test_eesp_cli, test_esp_cli,
test_eesp_diagnose): test packets, captures made of them, key files, and in-process CLI runs."""
from __future__ import annotations

import json
import signal
import struct
from pathlib import Path
from typing import Callable, Sequence, Tuple

from pecore.capture import LINKTYPE_ETHERNET, CaptureWriter
from pecore.protocol import checksum

ETH = bytes.fromhex("020000000002020000000001")


def default_sigint() -> None:
    """A ``preexec_fn`` for a CLI that a test interrupts: SIGINT back to its default in the child.

    A process started in the background by a shell without job control inherits SIGINT ignored, and Python
    then installs no KeyboardInterrupt handler; the test would measure how it was launched, not the CLI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ipv4(proto: int, payload: bytes, src: bytes = bytes([10, 0, 0, 1]), dst: bytes = bytes([10, 0, 0, 2])) -> bytes:
    """An IPv4 packet with a valid header checksum (transport-mode decap recomputes it)."""
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, 64, proto, 0, src, dst))
    h[10:12] = struct.pack("!H", checksum(bytes(h)))
    return bytes(h) + payload


def ipv6(nh: int, payload: bytes) -> bytes:
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64, bytes(15) + b"\1", bytes(15) + b"\2") + payload


def write_frames(path: Path, pkts, linktype: int = LINKTYPE_ETHERNET, fmt: str = "pcap",
                 ts: Callable[[int], Tuple[int, int]] = lambda i: (1000 + i, (500 + i) * 1000)) -> None:
    """A capture of IP packets: in Ethernet frames, or bare (another ``linktype``); ``ts(i)`` stamps packet i."""
    with CaptureWriter(path, linktype, fmt) as w:
        for i, p in enumerate(pkts):
            frame = ETH + (b"\x08\x00" if p[0] >> 4 == 4 else b"\x86\xdd") + p if linktype == LINKTYPE_ETHERNET else p
            w.write(frame, ts(i))


def write_keyfile(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "keys.txt"
    p.write_text(text)
    return p


def cli_runner(main: Callable[..., int], *prefix: str) -> Callable[..., Tuple[int, str, str]]:
    """``run(capsys, *argv)``: the CLI's ``main`` in-process (after ``prefix``, e.g. a subcommand), giving
    (exit status, standard output, standard error)."""
    def run(capsys, *argv) -> Tuple[int, str, str]:  # type: ignore[no-untyped-def]
        rc = main([*prefix, *(str(a) for a in argv)])
        out = capsys.readouterr()
        return rc, out.out, out.err
    return run


def json_lines(out: str) -> list:
    """show --json writes JSON Lines: one object per packet."""
    return [json.loads(line) for line in out.splitlines()]


def show_json_runner(run: Callable[..., Tuple[int, str, str]]) -> Callable[..., Tuple[int, list]]:
    """``show_json(capsys, *argv)``: ``show ... --json`` through ``run``, giving (exit status, objects)."""
    def show_json(capsys, *argv) -> Tuple[int, list]:  # type: ignore[no-untyped-def]
        rc, out, _err = run(capsys, "show", *argv, "--json")
        return rc, json_lines(out)
    return show_json


def round_trip(run: Callable[..., Tuple[int, str, str]], capsys, tmp_path: Path, pkts, linktype: int, fmt: str,
               encrypt_args: Sequence, decrypt_args: Sequence) -> Tuple[Path, Path, Path]:  # type: ignore[no-untyped-def]
    """encrypt then decrypt a capture of ``pkts`` through the CLI, each with exit status 0 and every packet
    counted; the clear, encrypted and decrypted captures, for the caller's own checks."""
    clear, enc, dec = tmp_path / "c", tmp_path / "e", tmp_path / "d"
    write_frames(clear, pkts, linktype, fmt)
    rc, out, _ = run(capsys, "encrypt", clear, enc, *encrypt_args)
    assert rc == 0 and f"encrypted:       {len(pkts)}" in out and "failed:          0" in out
    rc, out, _ = run(capsys, "decrypt", enc, dec, *decrypt_args)
    assert rc == 0 and f"decrypted:       {len(pkts)}" in out
    return clear, enc, dec
