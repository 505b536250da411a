"""The ``pyesp`` command line: encrypt, decrypt, show (and keys import|export).

Exit status: 0 on success, 1 when some packets failed, 2 for usage, key-file
or file errors, 3 for an input capture that ends inside a record (README.md
has the whole table).  ``-`` as a capture argument is standard input or
output.  SAs come from the key file's ``esp-sa`` lines (docs/keys.md) or from
command-line options for a single SA.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence

from pecore.capture import CaptureError, read_capture
from pecore.keys import EspSaEntry, load_key_file
from pecore.protocol import ESP_UDP_PORT, locate_esp
from pecore.tools.cli import (JsonLines, UsageError, add_capture_args, add_version, addresses, check_stdio, count_arg,
                              iv_arg, port_arg, run_capture, run_main, spi_arg, tooling_wanted, truncated)
from pyesp.capture import decrypt_capture, encrypt_capture
from pyesp.errors import EspError
from pyesp.header import Header
from pyesp.sa import SA, SUITES, Receiver


def _sa_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SAs")
    g.add_argument("-k", "--key-file", help="key file with esp-sa lines (docs/keys.md)")
    g.add_argument("--spi", type=spi_arg, help="pick this SA from the key file, or define one with the options below")
    g.add_argument("--dst", help="with --spi: pick the key file's SA for this destination")
    g.add_argument("--suite", default=None, help=f"AEAD suite: {', '.join(SUITES)} (default aes-gcm-16)")
    g.add_argument("--key-bits", type=int, default=None, choices=(128, 192, 256),
                   help="AES key size (default: what the --key's length says)")
    g.add_argument("--key", metavar="HEX", help="key || salt (the KEYMAT of this direction)")
    g.add_argument("--mode", default="tunnel", choices=("tunnel", "transport"))
    g.add_argument("--esn", action="store_true", help="extended (64-bit) sequence numbers")
    g.add_argument("--first-seq", type=iv_arg, default=1,
                   help="the sender's first sequence number; a receiver has seen everything below it")
    g.add_argument("--udp-encap", action="store_true", help="UDP 4500 encapsulation (RFC 3948)")
    g.add_argument("--no-eesp", dest="eesp_on_port", action="store_false",
                   help="receive: a host without EESP, so every SPI on UDP 4500 is ESP (default: a first octet "
                        "with its top bit set is EESP and passed over)")


def _inline_sa(args: argparse.Namespace) -> Optional[EspSaEntry]:
    if args.key is None:
        return None
    if args.spi is None:
        raise UsageError("an SA given on the command line needs --spi")
    settings = dict(spi=args.spi, suite=args.suite or "aes-gcm-16", key=args.key, key_bits=args.key_bits,
                    mode=args.mode, esn=args.esn, first_seq=args.first_seq, udp_encap=args.udp_encap)
    return EspSaEntry(spi=args.spi, settings=settings, src=None, dst=None, line=0)


def _entries(args: argparse.Namespace) -> List[EspSaEntry]:
    inline = _inline_sa(args)
    if inline is not None:
        return [inline]
    if not args.key_file:
        raise UsageError("no SA: give --key-file, or --spi with --key")
    entries = load_key_file(args.key_file).esp_sas
    if not entries:
        raise UsageError(f"{args.key_file}: no esp-sa lines")
    return entries


def _one_entry(args: argparse.Namespace) -> EspSaEntry:
    entries = _entries(args)
    chosen = [e for e in entries if (args.spi is None or e.spi == args.spi) and (args.dst is None or e.dst == args.dst)]
    if len(chosen) != 1:
        if not chosen:
            raise UsageError(f"no esp-sa line for SPI {args.spi:#010x}" + (f" and dst {args.dst}" if args.dst else "")
                             if args.spi is not None else "no esp-sa line matches --dst")
        raise UsageError("several esp-sa lines match: pick one with --spi" + (" and --dst" if args.spi is not None else ""))
    return chosen[0]


def _receiver(args: argparse.Namespace) -> Receiver:
    return Receiver([SA(**e.settings) for e in _entries(args)], eesp_on_port=args.eesp_on_port)  # type: ignore[arg-type]


def cmd_encrypt(args: argparse.Namespace) -> int:
    sa = SA(**_one_entry(args).settings)  # type: ignore[arg-type]
    return run_capture(args, "encrypt ", "encrypted", lambda bar: encrypt_capture(
        sa, args.input, args.output, drop_failed=args.drop_failed, progress=bar, fmt=args.output_format,
        jobs=args.jobs))


def cmd_decrypt(args: argparse.Namespace) -> int:
    rx = _receiver(args)
    return run_capture(args, "decrypt ", "decrypted", lambda bar: decrypt_capture(
        rx, args.input, args.output, drop_failed=args.drop_failed, progress=bar, fmt=args.output_format,
        jobs=args.jobs))


def cmd_show(args: argparse.Namespace) -> int:
    rx = _receiver(args) if (args.key_file or args.key) else None
    check_stdio(args)
    lines = JsonLines() if args.json else None
    try:
        return _show(args, rx, lines)
    except CaptureError as e:
        if e.code != "capture-truncated":
            raise
        sys.stdout.flush()
        return truncated(args, e)


def _show(args: argparse.Namespace, rx: Optional[Receiver], lines: Optional[JsonLines]) -> int:
    shown = bad = 0
    for index, rec in enumerate(read_capture(args.input), start=1):
        ip = rec.ip_packet()
        loc, _why = locate_esp(ip, ESP_UDP_PORT, either_port=True, eesp_on_port=args.eesp_on_port) if ip else (None, "")
        if loc is None:
            continue
        esp = ip[loc.offset : loc.offset + loc.length]
        src, dst = addresses(ip)
        info: dict = {"frame": index, "time": f"{rec.ts_sec}.{rec.ts_nsec:09d}", "src": src, "dst": dst,
                      "udp_encap": loc.udp_encap, "esp_len": len(esp)}
        h, status = Header.parse_lenient(esp)
        if h is not None:
            info.update(spi=f"{h.spi:#010x}", seq_low=h.seq)
        info["status"] = status
        if rx is not None and status == "ok":
            try:
                d = rx.decrypt(ip)
                info.update(decrypt="ok", seq=d.seq, next_header=d.next_header, pad_len=d.pad_len, mode=d.mode,
                            iv=d.iv.hex() if d.iv is not None else None, inner_len=len(d.packet))
            except EspError as e:
                info["decrypt"] = e.code
        bad += info["status"] != "ok" or info.get("decrypt", "ok") != "ok"
        shown += 1
        if lines is not None:
            lines.write(info)
        else:
            print(_format(info))
        if args.limit and shown >= args.limit:
            break
    return 1 if bad else 0


def _format(info: dict) -> str:
    head = f"#{info['frame']} {info['time']} {info['src']} -> {info['dst']}{' udp/4500' if info['udp_encap'] else ''}"
    if info["status"] != "ok":
        return f"{head} ESP [{info['status']}] ({info['esp_len']} octets)"
    text = f"{head} ESP spi={info['spi']} seq={info['seq_low']} ({info['esp_len']} octets)"
    if info.get("decrypt") == "ok":
        text += (f" {info['mode']} seq64={info['seq']} nh={info['next_header']} pad={info['pad_len']}"
                 f" [decrypted: {info['inner_len']} octets]")
    elif "decrypt" in info:
        text += f" [decrypt failed: {info['decrypt']}]"
    return text


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyesp", description="IPsec ESP (RFC 4303): capture encryption and decryption.")
    from pyesp import __version__

    add_version(p, __version__)
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("encrypt", help="encrypt every IP packet of a pcap/pcapng file")
    add_capture_args(e)
    _sa_options(e)
    e.add_argument("--drop-failed", action="store_true")
    e.add_argument("-q", "--quiet", action="store_true")
    e.set_defaults(func=cmd_encrypt)

    x = sub.add_parser("decrypt", help="decrypt every ESP packet of a pcap/pcapng file")
    add_capture_args(x)
    _sa_options(x)
    x.add_argument("--drop-failed", action="store_true")
    x.add_argument("-q", "--quiet", action="store_true")
    x.set_defaults(func=cmd_decrypt)

    s = sub.add_parser("show", help="print the ESP headers of a capture (and decrypt status with keys)")
    add_capture_args(s, output=False)
    _sa_options(s)
    s.add_argument("--json", action="store_true", help="JSON Lines: one object per ESP packet, written as it is read")
    s.add_argument("--limit", type=count_arg, default=0)
    s.set_defaults(func=cmd_show)

    if tooling_wanted(sub, argv):  # imported only when asked for: they are most of the CLI's start-up time
        from pecore.tools.keyimport import register as register_keys  # keys import|export
        from pyesp.tools.vectors import register as register_vectors  # vectors generate|check

        register_keys(sub)
        register_vectors(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_main(build_parser(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
