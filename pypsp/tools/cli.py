"""The ``pypsp`` command line: derive-key, encrypt, decrypt, show.

Exit status: 0 on success, 1 when some packets failed (encrypt/decrypt) or a
packet is malformed (show with keys), 2 for usage, key-file, config or file
errors, 3 for an input capture that ends inside a record (README.md has the
whole table).  ``-`` as a capture argument is standard input or output.  Keys come from the project's key file (docs/keys.md) or, unchanged,
from the google/psp reference tools' config files (--ref-config).
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, Optional, Sequence, Tuple

from pecore.keys import KeyFile, load_key_file, load_psp_ref_config
from pecore.protocol import locate_psp
from pecore.tools._tables import PSP_KEY_LEN, PSP_VERSION_NUMBERS
from pecore.tools.cli import (UsageError, add_capture_command, add_show_command, add_version, addresses, decrypt_info,
                              int_arg, iv_arg, port_arg, record_head, record_info, run_main, show_capture, spi_arg,
                              tooling_wanted, transform_capture, words_arg)
from pecore.tools.tunnel import register as register_tunnel
from pypsp.capture import decrypt_capture, encrypt_capture
from pypsp.crypto import Decryptor, Encryptor, _key_bytes, derive_key
from pypsp.errors import PspError, error_class
from pypsp.header import Header


_int = int_arg
_spi = spi_arg


# ----------------------------------------------------------------- key sources


class Keys:
    """Master keys, derived keys and sending SAs gathered from the key options."""

    def __init__(self) -> None:
        self.master: Tuple[Optional[bytes], Optional[bytes]] = (None, None)
        self.derived: Dict[Tuple[int, Optional[int]], bytes] = {}
        self.sas: list = []
        self.ref = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Keys":
        keys = cls()
        if getattr(args, "key_file", None):
            kf: KeyFile = load_key_file(args.key_file)
            keys.master = kf.psp_master_keys
            keys.derived = dict(kf.psp_keys)
            keys.sas = list(kf.psp_sas)
        if getattr(args, "ref_config", None):
            keys.ref = load_psp_ref_config(args.ref_config)
            keys.master = keys.ref.master_keys
        mk0 = getattr(args, "master_key0", None)
        mk1 = getattr(args, "master_key1", None)
        if mk0 or mk1:
            keys.master = (
                _key_bytes(mk0, "master key 0") if mk0 else keys.master[0],
                _key_bytes(mk1, "master key 1") if mk1 else keys.master[1],
            )
        for n, spec in enumerate(getattr(args, "key", None) or [], start=1):
            # Never echo the argument: it is (or holds) a key.
            spi_text, _, hex_key = spec.partition(":")
            if not hex_key:
                raise UsageError(f"--key number {n} is not SPI:HEXKEY (no ':' after the SPI)")
            try:
                spi = _spi(spi_text)
            except argparse.ArgumentTypeError:
                raise UsageError(f"--key number {n}: the part before ':' is not a hex SPI (up to 8 digits)") from None
            keys.derived[(spi, None)] = _key_bytes(hex_key)
        return keys

    def has_master(self) -> bool:
        return any(k is not None for k in self.master)

    def decryptor(self, args: argparse.Namespace) -> Decryptor:
        if not self.has_master() and not self.derived:
            raise UsageError("no keys: give --key-file, --ref-config, --master-key0/1 or --key")
        return Decryptor(
            master_keys=self.master if self.has_master() else None,
            keys=self.derived or None,
            udp_dport=args.port,
            check_udp_checksum=getattr(args, "check_udp_checksum", False),
        )

    def derived_for(self, spi: int, version: int) -> Optional[bytes]:
        key = self.derived.get((spi, version))
        if key is None:
            key = self.derived.get((spi, None))
            if key is not None and len(key) != PSP_KEY_LEN.get(version):
                key = None
        return key


def _add_key_options(p: argparse.ArgumentParser, derived: bool = True) -> None:
    g = p.add_argument_group("keys")
    g.add_argument("-k", "--key-file", help="key file (docs/keys.md)")
    g.add_argument("--ref-config", help="a google/psp reference-tool config file, read unchanged")
    g.add_argument("--master-key0", metavar="HEX", help="master key 0 (SPIs with MSB 0)")
    g.add_argument("--master-key1", metavar="HEX", help="master key 1 (SPIs with MSB 1)")
    if derived:
        g.add_argument("--key", action="append", metavar="SPI:HEX", help="a derived key for one SPI (repeatable)")


# -------------------------------------------------------------------- commands


def cmd_derive_key(args: argparse.Namespace) -> int:
    keys = Keys.from_args(args)
    if args.master_key:
        mk = _key_bytes(args.master_key, "master key")
    else:
        mk = keys.master[args.spi >> 31]
        if mk is None:
            raise UsageError(f"no master key {args.spi >> 31} (selected by the SPI's MSB); give --master-key or a key file")
    print(derive_key(mk, args.spi, args.version, label=args.label).hex())
    return 0


def _sa_settings(args: argparse.Namespace, keys: Keys) -> dict:
    """Sending-SA parameters: the key file's psp-sa line or the reference config, then command-line overrides."""
    s: dict = {}
    if keys.ref is not None and keys.ref.spi is not None:
        r = keys.ref
        s = dict(spi=r.spi, version=r.version, mode=r.mode, crypt_offset=r.crypt_offset,
                 crypt_offset_ipv4=r.crypt_offset_ipv4, crypt_offset_ipv6=r.crypt_offset_ipv6,
                 vc=bytes(8) if r.vc else None)
    elif keys.sas:
        chosen = [sa for sa in keys.sas if args.spi is None or sa.spi == args.spi]
        if len(chosen) != 1:
            raise UsageError("the key file has several psp-sa lines: pick one with --spi" if chosen
                             else f"no psp-sa line for SPI {args.spi:#010x} in the key file")
        sa = chosen[0]
        s = dict(spi=sa.spi, version=sa.version, mode=sa.mode, crypt_offset=sa.crypt_offset,
                 crypt_offset_ipv4=sa.crypt_offset_ipv4, crypt_offset_ipv6=sa.crypt_offset_ipv6,
                 vc=sa.vc, sample=sa.sample, drop=sa.drop)
        if sa.first_iv is not None:
            s["first_iv"] = sa.first_iv
    for name in ("spi", "version", "mode", "crypt_offset", "crypt_offset_ipv4", "crypt_offset_ipv6", "first_iv"):
        value = getattr(args, name)
        if value is not None:
            s[name] = value
    if args.vc is not None:
        s["vc"] = _key_bytes(args.vc, "vc")
    if args.sample:
        s["sample"] = True
    if args.drop:
        s["drop"] = True
    if "spi" not in s:
        raise UsageError("no sending SA: give --spi (and --version/--mode), a psp-sa line, or an encrypt --ref-config")
    s.setdefault("version", 0)
    s.setdefault("mode", "transport")
    if args.udp_sport is not None:
        s["udp_sport"] = "xor" if args.udp_sport == "xor" else _int(args.udp_sport)
    return s


def cmd_encrypt(args: argparse.Namespace) -> int:
    keys = Keys.from_args(args)
    s = _sa_settings(args, keys)
    key = keys.derived_for(s["spi"], s["version"])
    if key is not None:
        enc = Encryptor(key=key, **s)
    elif keys.has_master():
        enc = Encryptor(master_keys=keys.master, **s)
    else:
        raise UsageError(f"no key for SPI {s['spi']:#010x}: give a master key or a derived key")
    return transform_capture(args, "encrypt", encrypt_capture, enc)


def cmd_decrypt(args: argparse.Namespace) -> int:
    dec = Keys.from_args(args).decryptor(args)
    return transform_capture(args, "decrypt", decrypt_capture, dec)


_addresses = addresses


def _describe_inner(hdr: Header, inner: bytes) -> dict:
    """What the decrypted packet carries, for display."""
    out: dict = {"inner_len": len(inner)}
    if hdr.tunnel:
        out["inner_src"], out["inner_dst"] = _addresses(inner)
    return out


def _packet_info(index: int, rec, port: int, dec: Optional[Decryptor]) -> Optional[dict]:
    ip = rec.ip_packet()
    if ip is None:
        return None
    loc, _ = locate_psp(ip, port)
    if loc is None:
        return None
    psp = ip[loc.offset : loc.offset + loc.length]
    hdr, status = Header.parse_lenient(psp)
    info = record_info(index, rec, ip)
    info.update(udp_sport=loc.udp_sport, psp_len=len(psp), status=status)
    if hdr is not None:
        info.update(
            spi=f"{hdr.spi:#010x}", key_phase=hdr.key_phase, version=hdr.version, cipher=hdr.version_name,
            next_header=hdr.next_header, mode="tunnel" if hdr.tunnel else "transport", hdr_ext_len=hdr.hdr_ext_len,
            crypt_offset=hdr.crypt_offset, reserved=hdr.reserved, sample=int(hdr.sample), drop=int(hdr.drop),
            virt=int(hdr.virt), always_one=int(hdr.always_one), iv=f"{hdr.iv:#018x}",
            vc=hdr.vc.hex() if hdr.vc is not None else None,
            icv=psp[-16:].hex() if len(psp) >= 32 else None,
        )
    decrypt_info(info, dec, ip, lambda result: _describe_inner(result.header, result.packet), PspError)
    return info


def _format_info(info: dict) -> str:
    head = record_head(info)
    if "spi" not in info:
        return f"{head} PSP {info['status']} ({info['psp_len']} octets)"
    text = (f"{head} PSP spi={info['spi']} (master key {info['key_phase']}) v{info['version']} {info['cipher']}"
            f" nh={info['next_header']} {info['mode']} hdrextlen={info['hdr_ext_len']} co={info['crypt_offset']}"
            f" S={info['sample']} D={info['drop']} V={info['virt']} iv={info['iv']}")
    if info["vc"] is not None:
        text += f" vc={info['vc']}"
    if info["reserved"]:
        text += f" R={info['reserved']}"
    if info["status"] != "ok":
        text += f" [{info['status']}]"
    if "decrypt" in info:
        text += " [decrypted" + (f": {info['inner_len']} octets" if info["decrypt"] == "ok" else f" failed: {info['decrypt']}") + "]"
    return text


def cmd_show(args: argparse.Namespace) -> int:
    keys = Keys.from_args(args)
    dec = keys.decryptor(args) if (keys.has_master() or keys.derived) else None
    return show_capture(args, lambda index, rec: _packet_info(index, rec, args.port, dec), _format_info)


# ---------------------------------------------------------------------- parser


def _encrypt_options(e: argparse.ArgumentParser) -> None:
    _add_key_options(e)
    sa = e.add_argument_group("sending SA (overrides the key file / reference config)")
    sa.add_argument("--spi", type=_spi)
    sa.add_argument("--version", type=int, choices=PSP_VERSION_NUMBERS)
    sa.add_argument("--mode", choices=("transport", "tunnel"))
    sa.add_argument("--crypt-offset", type=words_arg, metavar="WORDS")
    sa.add_argument("--crypt-offset-ipv4", type=words_arg, metavar="WORDS", help="tunnel mode, inner IPv4")
    sa.add_argument("--crypt-offset-ipv6", type=words_arg, metavar="WORDS", help="tunnel mode, inner IPv6")
    sa.add_argument("--vc", metavar="HEX", help="add an 8-octet Virtualization Cookie")
    sa.add_argument("--sample", action="store_true", help="set the S bit")
    sa.add_argument("--drop", action="store_true", help="set the D bit")
    sa.add_argument("--first-iv", type=iv_arg)
    sa.add_argument("--udp-sport", metavar="xor|PORT")


def _decrypt_options(x: argparse.ArgumentParser) -> None:
    _add_key_options(x)
    x.add_argument("--port", type=port_arg, default=1000, help="PSP UDP port (default 1000)")
    x.add_argument("--check-udp-checksum", action="store_true", help="verify non-zero UDP checksums")


def _show_options(s: argparse.ArgumentParser) -> None:
    _add_key_options(s)
    s.add_argument("--port", type=port_arg, default=1000)


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pypsp", description="PSP Security Protocol: keys, capture encryption and decryption.")
    from pypsp import __version__

    add_version(p, __version__)
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("derive-key", help="derive an SA key from a master key (SP 800-108 / AES-256-CMAC)")
    d.add_argument("--master-key", metavar="HEX", help="the 32-octet master key (default: from the key options by the SPI's MSB)")
    _add_key_options(d, derived=False)
    d.add_argument("--spi", type=_spi, required=True)
    d.add_argument("--version", type=int, choices=PSP_VERSION_NUMBERS, required=True)
    d.add_argument("--label", type=_int, help="override the KDF label (default 0x50763000 | version << 8)")
    d.set_defaults(func=cmd_derive_key)

    add_capture_command(sub, "encrypt", "encrypt every IP packet of a pcap/pcapng file", cmd_encrypt,
                        _encrypt_options, drop_help="leave out packets that cannot be encrypted")
    add_capture_command(sub, "decrypt", "decrypt every PSP packet of a pcap/pcapng file", cmd_decrypt,
                        _decrypt_options, drop_help="leave out packets that fail to decrypt")
    add_show_command(sub, "PSP", cmd_show, _show_options, limit_help="stop after N PSP packets (0: all)")

    register_tunnel(sub, "psp", error_class)  # tunnel: the live endpoint
    if tooling_wanted(sub, argv):  # imported only when asked for: they are most of the CLI's start-up time
        from pecore.tools.keyimport import register as register_keys  # keys import|export
        from pypsp.tools.diagnose import register as register_diagnose
        from pypsp.tools.vectors import register as register_vectors

        register_keys(sub)
        register_diagnose(sub, _add_key_options, Keys.from_args)
        register_vectors(sub)  # vectors generate|check
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    return run_main(build_parser(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
