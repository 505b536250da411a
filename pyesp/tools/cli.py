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

from pecore.keys import EspSaEntry
from pecore.protocol import ESP_UDP_PORT, locate_esp
from pecore.tools._tables import KEY_SIZES
from pecore.tools.cli import (UsageError, add_capture_command, add_show_command, add_version, decrypt_info, iv_arg,
                              key_file_sas, one_sa, record_head, record_info, run_main, show_capture, spi_arg,
                              tooling_wanted, transform_capture)
from pecore.tools.tunnel import register as register_tunnel
from pyesp.capture import decrypt_capture, encrypt_capture
from pyesp.errors import EspError, error_class
from pyesp.header import Header
from pyesp.sa import SA, SUITES, Receiver


def _sa_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SAs")
    g.add_argument("-k", "--key-file", help="key file with esp-sa lines (docs/keys.md)")
    g.add_argument("--spi", type=spi_arg, help="pick this SA from the key file, or define one with the options below")
    g.add_argument("--dst", help="with --spi: pick the key file's SA for this destination")
    g.add_argument("--suite", default=None, help=f"suite: {', '.join(SUITES)} (default aes-gcm-16)")
    g.add_argument("--key-bits", type=int, default=None, choices=KEY_SIZES,
                   help="AES key size (default: what the --key's length says)")
    g.add_argument("--key", metavar="HEX", help="key || salt, or AES key || integrity key with AES-CBC (the KEYMAT "
                   "of this direction)")
    g.add_argument("--mode", default="tunnel", choices=("tunnel", "transport"))
    g.add_argument("--esn", action="store_true", help="extended (64-bit) sequence numbers")
    g.add_argument("--first-seq", type=iv_arg, default=1,
                   help="the sender's first sequence number; a receiver has seen everything below it")
    g.add_argument("--udp-encap", action="store_true", help="UDP 4500 encapsulation (RFC 3948)")
    g.add_argument("--tfc-pad", type=int, default=0, metavar="N",
                   help="send, tunnel mode: N zero octets of TFC padding after each inner packet (RFC 4303 §2.7; "
                        "0..1024; a receiver needs no setting)")
    g.add_argument("--no-eesp", dest="eesp_on_port", action="store_false",
                   help="receive: a host without EESP, so every SPI on UDP 4500 is ESP (default: an SPI of no SA "
                        "given whose first octet is 0x80 is EESP and passed over, eesp.md §14)")


def _inline_sa(args: argparse.Namespace) -> Optional[EspSaEntry]:
    if args.key is None:
        return None
    if args.spi is None:
        raise UsageError("an SA given on the command line needs --spi")
    settings = dict(spi=args.spi, suite=args.suite or "aes-gcm-16", key=args.key, key_bits=args.key_bits,
                    mode=args.mode, esn=args.esn, first_seq=args.first_seq, udp_encap=args.udp_encap,
                    tfc_pad=args.tfc_pad)
    return EspSaEntry(spi=args.spi, settings=settings, src=None, dst=None, line=0)


def _entries(args: argparse.Namespace) -> List[EspSaEntry]:
    return key_file_sas(args, _inline_sa(args), "esp-sa", "--key")


def _receiver(args: argparse.Namespace) -> Receiver:
    return Receiver([SA(**e.settings) for e in _entries(args)], eesp_on_port=args.eesp_on_port)  # type: ignore[arg-type]


def cmd_encrypt(args: argparse.Namespace) -> int:
    sa = SA(**one_sa(_entries(args), args, "esp-sa").settings)  # type: ignore[arg-type]
    return transform_capture(args, "encrypt", encrypt_capture, sa)


def cmd_decrypt(args: argparse.Namespace) -> int:
    rx = _receiver(args)
    return transform_capture(args, "decrypt", decrypt_capture, rx)


def cmd_show(args: argparse.Namespace) -> int:
    rx = _receiver(args) if (args.key_file or args.key) else None
    return show_capture(args, lambda index, rec: _describe(args, rx, index, rec), _format)


def _describe(args: argparse.Namespace, rx: Optional[Receiver], index: int, rec) -> Optional[dict]:  # type: ignore[no-untyped-def]
    ip = rec.ip_packet()
    loc, _why = locate_esp(ip, ESP_UDP_PORT, either_port=True, eesp_on_port=args.eesp_on_port,
                           receiver=rx._rx if rx else None) if ip else (None, "")
    if loc is None:
        return None
    esp = ip[loc.offset : loc.offset + loc.length]
    info = record_info(index, rec, ip)
    info.update(udp_encap=loc.udp_encap, esp_len=len(esp))
    h, status = Header.parse_lenient(esp)
    if h is not None:
        info.update(spi=f"{h.spi:#010x}", seq_low=h.seq)
    info["status"] = status
    decrypt_info(info, rx, ip, lambda d: dict(seq=d.seq, next_header=d.next_header, pad_len=d.pad_len, mode=d.mode,
                                              iv=d.iv.hex() if d.iv is not None else None, inner_len=len(d.packet)),
                 EspError)
    return info


def _format(info: dict) -> str:
    head = record_head(info)
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
    add_capture_command(sub, "encrypt", "encrypt every IP packet of a pcap/pcapng file", cmd_encrypt, _sa_options)
    add_capture_command(sub, "decrypt", "decrypt every ESP packet of a pcap/pcapng file", cmd_decrypt, _sa_options)
    add_show_command(sub, "ESP", cmd_show, _sa_options)

    register_tunnel(sub, "esp", error_class)  # tunnel: the live endpoint
    if tooling_wanted(sub, argv):  # imported only when asked for: they are most of the CLI's start-up time
        from pecore.tools.keyimport import register as register_keys  # keys import|export
        from pyesp.tools.diagnose import register as register_diagnose
        from pyesp.tools.vectors import register as register_vectors  # vectors generate|check

        register_keys(sub)
        register_diagnose(sub, _sa_options, _entries)
        register_vectors(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_main(build_parser(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
