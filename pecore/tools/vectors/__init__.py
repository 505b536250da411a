"""Interop test vectors: what the PSP, EESP and ESP vector families share.

The families themselves live in :mod:`pypsp.tools.vectors`, :mod:`pyeesp.tools.vectors` and
:mod:`pyesp.tools.vectors`, which register themselves here (:func:`register_family`, and the
``psp_eesp.vectors`` entry points for a process that imported none): this shared floor never imports the
packages above it.  It holds what they need once, a module per concern:

- :mod:`.rng`: :class:`Rng`, a deterministic byte stream from a seed and a path of labels (SHA-256 in counter
  mode), so that a vector depends only on the seed and on its own labels, never on how many vectors were drawn
  before it;
- :mod:`.packets`: small IP/UDP/TCP builders for the cleartext packets (documentation address ranges, correct
  checksums) and the wire surgery of the mutations;
- :mod:`.esp_framed`: for the two ESP-framed families (ESP and EESP): the AEAD suite table of the IKEv2 ENCR
  transforms (the core's, :mod:`pecore.tools._tables`), the outer headers, the sealed-packet surgery of the
  mutations, the group and file builders and the notes whose words are the same for both;
- :mod:`.documents`: document assembly in the Wycheproof layout (tcIds, ``numberOfTests``, only the notes of the
  flags used) and canonical key order, so that regenerating gives byte-identical files;
- :mod:`.output`: file writing (vector files, schemas, and a pcap + key file per test group);
- :mod:`.schema`: the schemas' building blocks, among them the schema of what a receiver delivers, and JSON
  Schema validation (``jsonschema``, draft 2020-12) of any vector file;
- :mod:`.families`: the registry of families;
- :mod:`.check`: the per-tcId check report shared by ``pypsp``, ``pyeesp`` and ``pyesp vectors check`` (text or
  ``--json``), the comparisons of a delivered packet and of a key-derivation answer that their checkers make
  alike, and the packet checker (:class:`PacketDocChecker`) around each ESP-framed family's receiver and sender;
- :mod:`.counts`: the counts table of ``vectors/README.md`` (``python -m pecore.tools.vectors counts``);
- :mod:`.cli`: the ``vectors`` subcommand of the CLIs and ``python -m pecore.tools.vectors``.

Files are never left half written: each is written to a temporary file beside it and renamed into place, and
``vectors generate`` renames its files only once every one of them is complete, so an exception or Ctrl-C
leaves the previous files as they were.

The names below are the families' and the tests' one import point.
"""
from pecore.tools._tables import SUITES, SuiteInfo
from pecore.tools.vectors.check import (Checker, FileReport, GroupReceivers, Outcome, PacketDocChecker, check_doc,
                                        check_files, check_kat_doc, checker_for, delivery_problems, first_diff,
                                        format_reports, outer_template, reports_json)
from pecore.tools.vectors.cli import cmd_check, cmd_generate, main, register
from pecore.tools.vectors.counts import (COUNTS_BEGIN, COUNTS_END, count_rows, counts_markdown, readme_with_counts,
                                         update_readme)
from pecore.tools.vectors.documents import (KEY_ORDER, Group, Test, VectorFile, assemble, canonical, dumps,
                                            key_file_head, load_doc, mark_self_computed)
from pecore.tools.vectors.esp_framed import (SHARED_NOTES, SealedPacket, SuiteFileBuilder, SuiteGroupBuilder,
                                             delivered, dropped, kept_flags, outer_header, secured_offset,
                                             shared_notes, udp_checksum_v6_vectors, udp_encap_mutations)
from pecore.tools.vectors.families import ENTRY_POINT_GROUP, Family, all_schemas, families, register_family
from pecore.tools.vectors.output import Staged, dumps_schema, temp_beside, write_pcap, write_text, write_vector_files
from pecore.tools.vectors.packets import (IPPROTO_DSTOPTS, IPPROTO_HOPOPTS, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_IPV4,
                                          IPPROTO_IPV6, IPPROTO_TCP, IPPROTO_UDP, Inner, fix_ip, flip, hopopts,
                                          inet_sum, ip_packet, ip_version, ipv4_header, ipv4_recheck, ipv6_header,
                                          l4_checksum, l4_offset, put, tcp_segment, udp_segment)
from pecore.tools.vectors.rng import DEFAULT_SEED, Rng
from pecore.tools.vectors.schema import (DELIVERY_OUTPUTS, DELIVERY_RULES, ERROR, HEX, KEYMAT_INPUTS,
                                         NEEDS_JSONSCHEMA, SUITE_GROUP_FIELDS, MissingExtra, hex_of, hex_of_any,
                                         require_jsonschema, test_object, top_schema, validate, when_result)

__all__ = [
    "SUITES", "SuiteInfo",
    "Checker", "FileReport", "GroupReceivers", "Outcome", "PacketDocChecker", "check_doc", "check_files",
    "check_kat_doc", "checker_for", "delivery_problems", "first_diff", "format_reports", "outer_template",
    "reports_json",
    "cmd_check", "cmd_generate", "main", "register",
    "COUNTS_BEGIN", "COUNTS_END", "count_rows", "counts_markdown", "readme_with_counts", "update_readme",
    "KEY_ORDER", "Group", "Test", "VectorFile", "assemble", "canonical", "dumps", "key_file_head", "load_doc",
    "mark_self_computed",
    "SHARED_NOTES", "SealedPacket", "SuiteFileBuilder", "SuiteGroupBuilder", "delivered", "dropped", "kept_flags",
    "outer_header", "secured_offset", "shared_notes", "udp_checksum_v6_vectors", "udp_encap_mutations",
    "ENTRY_POINT_GROUP", "Family", "all_schemas", "families", "register_family",
    "Staged", "dumps_schema", "temp_beside", "write_pcap", "write_text", "write_vector_files",
    "IPPROTO_DSTOPTS", "IPPROTO_HOPOPTS", "IPPROTO_ICMP", "IPPROTO_ICMPV6", "IPPROTO_IPV4", "IPPROTO_IPV6",
    "IPPROTO_TCP", "IPPROTO_UDP", "Inner", "fix_ip", "flip", "hopopts", "inet_sum", "ip_packet", "ip_version",
    "ipv4_header", "ipv4_recheck", "ipv6_header", "l4_checksum", "l4_offset", "put", "tcp_segment", "udp_segment",
    "DEFAULT_SEED", "Rng",
    "DELIVERY_OUTPUTS", "DELIVERY_RULES", "ERROR", "HEX", "KEYMAT_INPUTS", "NEEDS_JSONSCHEMA", "SUITE_GROUP_FIELDS",
    "MissingExtra", "hex_of", "hex_of_any", "require_jsonschema", "test_object", "top_schema", "validate",
    "when_result",
]
