"""Vector documents in the Wycheproof layout: tests and groups while they are built, their assembly (tcIds,
``numberOfTests``, only the notes of the flags used) and the exact file text (canonical key order, trailing
newline), so that regenerating gives byte-identical files."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple


#: Canonical order of keys in vector files; others follow alphabetically.
KEY_ORDER = [
    "algorithm", "schema", "numberOfTests", "header", "notes", "testGroups",
    "bugType", "description", "effect", "links",
    "type", "source", "name", "version",
    "mode", "vc", "suite", "encrId", "keySize", "ivSize", "tagSize", "esn", "antiReplay", "format", "aad", "seqPresent", "sskdf",
    "alignOptions", "maxSubSaId", "maxCryptOffset", "strict", "ipProtocol", "udpEncap", "stateful",
    "replayWindow", "tcId", "comment", "tests", "flags", "inputs", "outputs", "result",
    "masterKey", "masterKey0", "masterKey1", "derivedKey", "rootKey", "key", "salt", "label", "spi", "sessionId",
    "length", "seq", "iv", "replayTop", "tfcPad", "cryptOffset", "vcValue", "sample", "drop", "options", "acceptedVersions",
    "ciphertextPacket", "plaintextPacket", "keymat", "icv", "nextHeader", "padLength", "icvValid", "error",
]
_RANK = {k: i for i, k in enumerate(KEY_ORDER)}


def canonical(obj: Any) -> Any:
    """Dicts with keys in KEY_ORDER (unknown keys after, sorted): stable output whatever the build order."""
    if isinstance(obj, dict):
        keys = sorted(obj, key=lambda k: (_RANK.get(k, len(_RANK)), k))
        return {k: canonical(obj[k]) for k in keys}
    if isinstance(obj, list):
        return [canonical(x) for x in obj]
    return obj


def _pretty(obj: Any, indent: int) -> str:
    pad = "  " * indent
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f'{pad}  {json.dumps(k)}: {_pretty(v, indent + 1)}' for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and (any(isinstance(x, (dict, list)) for x in obj)
                                  or len(json.dumps(obj, ensure_ascii=False)) > 100):
        items = [f"{pad}  {_pretty(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)  # scalars, and short lists of scalars (flags) on one line


def dumps(doc: Any) -> str:
    """The exact file text: canonical key order, 2-space indent (short lists of scalars such as flags on one
    line), UTF-8, trailing newline."""
    return _pretty(canonical(doc), 0) + "\n"


@dataclass
class Test:
    """One test while it is being built; tcIds are assigned when the document is assembled."""

    comment: str
    flags: List[str]
    inputs: Dict[str, Any]
    outputs: Dict[str, Any]
    result: str
    wire: Optional[bytes] = None  # the packet to put into the group's pcap (None: none)


@dataclass
class Group:
    fields: Dict[str, Any]  # everything but "tests"
    tests: List[Test] = field(default_factory=list)
    keys: str = ""  # key-file text for the group's pcap ("" for groups without packets)
    pcap: bool = True

    def add(self, test: Test) -> Test:
        self.tests.append(test)
        return test


@dataclass
class VectorFile:
    """A generated vector file: its name, document and per-group pcaps."""

    name: str
    doc: Dict[str, Any]
    pcaps: List[Tuple[str, List[Tuple[int, bytes]], str]]  # (stem, [(tcId, packet)], key-file text)


def assemble(name: str, algorithm: str, schema: str, header: List[str], notes: Dict[str, Dict[str, str]],
             groups: List[Group], common_flags: Sequence[str] = ()) -> VectorFile:
    """Number the tests, keep the notes of the flags used, and list the pcaps."""
    tc = 0
    out_groups = []
    used = set()
    pcaps = []
    for gi, g in enumerate(groups, 1):
        tests = []
        packets = []
        for t in g.tests:
            tc += 1
            flags = list(dict.fromkeys(list(t.flags) + list(common_flags)))
            unknown = [f for f in flags if f not in notes]
            if unknown:
                raise ValueError(f"{name}: flags without a note: {unknown}")
            used.update(flags)
            tests.append({"tcId": tc, "comment": t.comment, "flags": flags, "inputs": t.inputs,
                          "outputs": t.outputs, "result": t.result})
            if t.wire is not None:
                packets.append((tc, t.wire))
        out_groups.append(dict(g.fields, tests=tests))
        if g.pcap and packets:
            pcaps.append((f"{name.removesuffix('_test.json')}_g{gi:02d}", packets, g.keys))
    doc = {
        "algorithm": algorithm,
        "schema": schema,
        "numberOfTests": tc,
        "header": header,
        "notes": {k: notes[k] for k in sorted(used)},
        "testGroups": out_groups,
    }
    return VectorFile(name, doc, pcaps)


def mark_self_computed(vf: VectorFile, note: Dict[str, str], published: Sequence[str] = (),
                       only_source: Optional[str] = None) -> None:
    """Flag SelfComputed every test of the file that is not a published or spec answer (a flag in
    ``published``; with ``only_source``, only in the groups of that source), and keep the notes sorted."""
    for g in vf.doc["testGroups"]:
        if only_source is not None and g["source"]["name"] != only_source:
            continue
        for t in g["tests"]:
            if "SelfComputed" not in t["flags"] and not any(f in t["flags"] for f in published):
                t["flags"].append("SelfComputed")
    vf.doc["notes"]["SelfComputed"] = note
    vf.doc["notes"] = {k: vf.doc["notes"][k] for k in sorted(vf.doc["notes"])}


def key_file_head(what: str, file: str, group: int) -> str:
    """The comment lines that open a group's key file (``what``: "ESP test SA", "PSP test keys", ...)."""
    return (f"# {what} of {file} group {group} (vectors/README.md).\n"
            "# Public test values: never use them for real traffic.\n")


def load_doc(path: "os.PathLike[str] | str") -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
