"""The ``pyeesp`` command line: derive-key, encrypt, decrypt, show.

Exit status: 0 on success, 1 when some packets failed, 2 for usage, key-file
or file errors, 3 for an input capture that ends inside a record (README.md
has the whole table).  ``-`` as a capture argument is standard input or
output.  SAs come from the key file's ``eesp-sa`` lines
(docs/keys.md) or from command-line options for a single SA.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional, Sequence

from pecore.keys import EespSaEntry
from pecore.protocol import eesp_suite, locate_eesp
from pecore.tools._tables import KEY_SIZES
from pecore.tools.cli import (UsageError, add_capture_command, add_show_command, add_version, decrypt_info, int_arg,
                              key_file_sas, one_sa, protocol_arg, record_head, record_info, run_main, show_capture,
                              spi_arg, tooling_wanted, transform_capture)
from pecore.tools.tunnel import register as register_tunnel
from pyeesp.capture import decrypt_capture, encrypt_capture
from pyeesp.errors import EespError, error_class
from pyeesp.header import Header
from pyeesp.sa import SA, SUITES, Receiver, derive_sub_sa_key, suite_id


def _sa_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SAs")
    g.add_argument("-k", "--key-file", help="key file with eesp-sa lines (docs/keys.md)")
    g.add_argument("--spi", type=spi_arg, help="pick this SA from the key file, or define one with the options below")
    g.add_argument("--dst", help="with --spi: pick the key file's SA for this destination")
    g.add_argument("--suite", default=None, help=f"AEAD suite: {', '.join(SUITES)} (default aes-gcm-16)")
    g.add_argument("--key-bits", type=int, default=None, choices=KEY_SIZES,
                   help="AES key size (default: what the --key's length says; 128 with --root-key)")
    g.add_argument("--key", metavar="HEX", help="key || salt (no Sub SAs)")
    g.add_argument("--root-key", metavar="HEX", help="root key for Sub SA keys (with --sskdf)")
    g.add_argument("--sskdf", default="hkdf-sha256", choices=("hkdf-sha256", "hkdf-sha384", "hkdf-sha512"))
    g.add_argument("--mode", default="tunnel", choices=("tunnel", "transport"))
    g.add_argument("--format", default="auto", choices=("auto", "full", "optimized"))
    g.add_argument("--aad", default="draft", choices=("draft", "linux-xfrm"))
    g.add_argument("--no-seq", action="store_true", help="SN = None: no Sequence Number, no anti-replay")
    g.add_argument("--crypt-offset", type=int, help="send a Crypt Offset option (4-octet units)")
    g.add_argument("--max-crypt-offset", type=int, help="accept Crypt Offset options up to this value")
    g.add_argument("--max-sub-sa-id", type=int)
    g.add_argument("--udp-encap", action="store_true", help="UDP 4500 encapsulation")
    g.add_argument("--ip-protocol", type=protocol_arg, default=49, help="EESP's IP protocol number (default 49, provisional)")


def _inline_sa(args: argparse.Namespace) -> Optional[EespSaEntry]:
    if args.key is None and args.root_key is None:
        return None
    if args.spi is None:
        raise UsageError("an SA given on the command line needs --spi")
    settings = dict(spi=args.spi, suite=args.suite or "aes-gcm-16", key_bits=args.key_bits, mode=args.mode,
                    format=args.format, aad=args.aad, seq=not args.no_seq, crypt_offset=args.crypt_offset,
                    max_crypt_offset=args.max_crypt_offset, max_sub_sa_id=args.max_sub_sa_id,
                    udp_encap=args.udp_encap, ip_protocol=args.ip_protocol)
    if args.key is not None:
        settings["key"] = args.key
    else:
        settings.update(root_key=args.root_key, sskdf=args.sskdf)
    return EespSaEntry(spi=args.spi, settings=settings, src=None, dst=None, sub_sas=1, line=0)


def _entries(args: argparse.Namespace) -> List[EespSaEntry]:
    return key_file_sas(args, _inline_sa(args), "eesp-sa", "--key or --root-key")


def _one_entry(args: argparse.Namespace) -> EespSaEntry:
    return one_sa(_entries(args), args, "eesp-sa")


def _receiver(args: argparse.Namespace) -> Receiver:
    entries = _entries(args)
    protocols = {e.settings["ip_protocol"] for e in entries}
    if len(protocols) > 1:
        raise UsageError("eesp-sa lines disagree on ip-protocol; decrypt them separately")
    # A Crypt Offset only shapes what an SA sends; receiving needs none (and sending one needs the peer's maximum).
    # The key file's ESP SAs share UDP 4500: their SPIs are ESP whatever their first octet (eesp.md §14 step 3).
    return Receiver([SA(**{**e.settings, "crypt_offset": None}) for e in entries], ip_protocol=protocols.pop(),
                    esp_spis=_esp_spis(args))


def _esp_spis(args: argparse.Namespace) -> List[int]:
    if not args.key_file:
        return []
    from pecore.keys import load_key_file

    return [e.spi for e in load_key_file(args.key_file).esp_sas]


def cmd_derive_key(args: argparse.Namespace) -> int:
    if args.root_key is None:
        entry = _one_entry(args)
        if "root_key" not in entry.settings:
            raise UsageError(f"SA {entry.spi:#010x} has no root key (no SSKDF): nothing to derive")
        root, sskdf = entry.settings["root_key"], entry.settings["sskdf"]
        suite, key_bits = entry.settings["suite"], entry.settings["key_bits"]
    else:
        root, sskdf, suite, key_bits = args.root_key, args.sskdf, args.suite or "aes-gcm-16", args.key_bits
    length = args.length
    salt = 0
    if length is None:
        row = eesp_suite(suite_id(suite))
        assert row is not None  # suite_id() accepted it
        salt = row.salt_len
        length = (row.key_lens[0] if len(row.key_lens) == 1 else (key_bits or 128) // 8) + salt
    keymat = derive_sub_sa_key(root, args.sub_sa_id, length, sskdf)
    print(f"{keymat.hex()}  (key {keymat[:-salt].hex()} salt {keymat[-salt:].hex()})" if args.length is None
          else keymat.hex())
    return 0


def cmd_encrypt(args: argparse.Namespace) -> int:
    entry = _one_entry(args)
    sa = SA(**entry.settings)
    return transform_capture(args, "encrypt", encrypt_capture, sa, sub_sas=args.sub_sas or entry.sub_sas)


def cmd_decrypt(args: argparse.Namespace) -> int:
    rx = _receiver(args)
    return transform_capture(args, "decrypt", decrypt_capture, rx)


def _eesp_part(ip: bytes, protocol: int, port: int) -> Optional[tuple]:
    """(EESP octets, UDP-encapsulated?) of an IP packet, or None when it carries no EESP."""
    loc, _ = locate_eesp(ip, protocol, port, either_port=True)
    if loc is None:
        return None
    return ip[loc.offset : loc.offset + loc.length], loc.udp_encap


def cmd_show(args: argparse.Namespace) -> int:
    rx = _receiver(args) if (args.key_file or args.key or args.root_key) else None
    return show_capture(args, lambda index, rec: _describe(args, rx, index, rec), _format)


def _describe(args: argparse.Namespace, rx: Optional[Receiver], index: int, rec) -> Optional[dict]:  # type: ignore[no-untyped-def]
    ip = rec.ip_packet()
    found = _eesp_part(ip, args.ip_protocol, 4500) if ip else None
    if found is None:
        return None
    eesp, udp = found
    info = record_info(index, rec, ip)
    info.update(udp_encap=udp, eesp_len=len(eesp))
    try:
        h = Header.parse(eesp)
        info.update(spi=f"{h.spi:#010x}", session_id=h.session_id, version=h.version, opt_len=h.opt_len,
                    options=[{"type": o.type, "name": o.name, "data": o.data.hex()} for o in h.options],
                    status="ok")
    except EespError as e:
        info["status"] = e.code
    decrypt_info(info, rx, ip, lambda d: dict(seq=d.seq, next_header=d.next_header, pad_len=d.pad_len,
                                              format="full" if d.full_format else "optimized", inner_len=len(d.packet)),
                 EespError)
    return info


def _format(info: dict) -> str:
    head = record_head(info)
    if info["status"] != "ok":
        return f"{head} EESP [{info['status']}] ({info['eesp_len']} octets)"
    opts = ",".join(o["name"] + (f"({o['data']})" if o["data"] and o["name"] != "PadN" else "") for o in info["options"])
    text = f"{head} EESP spi={info['spi']} sub_sa={info['session_id']} v{info['version']} optlen={info['opt_len']}"
    if opts:
        text += f" options={opts}"
    if info.get("decrypt") == "ok":
        text += (f" seq={info['seq']} nh={info['next_header']} pad={info['pad_len']} {info['format']}"
                 f" [decrypted: {info['inner_len']} octets]")
    elif "decrypt" in info:
        text += f" [decrypt failed: {info['decrypt']}]"
    return text


def _encrypt_options(p: argparse.ArgumentParser) -> None:
    _sa_options(p)
    p.add_argument("--sub-sas", type=int, help="spread flows over Sub SAs 0..N-1 (default: the key file's sub-sas, or 1)")


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyeesp", description="IPsec Enhanced ESP: Sub SA keys, capture encryption and decryption.")
    from pyeesp import __version__

    add_version(p, __version__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("derive-key", help="derive a Sub SA's key || salt (HKDF-Expand over the Session ID)")
    _sa_options(d)
    d.add_argument("--sub-sa-id", dest="sub_sa_id", type=int_arg, required=True, help="the Sub SA ID (0..65535)")
    d.add_argument("--length", type=int, help="octets to derive (default: key + salt of the suite)")
    d.set_defaults(func=cmd_derive_key)

    add_capture_command(sub, "encrypt", "encrypt every IP packet of a pcap/pcapng file", cmd_encrypt, _encrypt_options)
    add_capture_command(sub, "decrypt", "decrypt every EESP packet of a pcap/pcapng file", cmd_decrypt, _sa_options)
    add_show_command(sub, "EESP", cmd_show, _sa_options)

    register_tunnel(sub, "eesp", error_class)  # tunnel: the live endpoint
    if tooling_wanted(sub, argv):  # imported only when asked for: they are most of the CLI's start-up time
        from pecore.tools.keyimport import register as register_keys  # keys import|export
        from pyeesp.tools.diagnose import register as register_diagnose
        from pyeesp.tools.vectors import register as register_vectors

        register_keys(sub)
        register_diagnose(sub, _sa_options, _entries)
        register_vectors(sub)  # vectors generate|check
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_main(build_parser(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
