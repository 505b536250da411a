"""The vector files' JSON Schemas (draft 2020-12): their building blocks, and validation (``jsonschema``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Optional, Sequence

from pecore.tools._tables import ICV_LENS, KEY_SIZES, SALT_LENS, SUITES
from pecore.tools.vectors.documents import load_doc
from pecore.tools.vectors.families import all_schemas


HEX = {"type": "string", "pattern": "^([0-9a-f]{2})*$"}


def hex_of(n: int) -> dict:
    return {"type": "string", "pattern": f"^[0-9a-f]{{{2 * n}}}$"}


def hex_of_any(*ns: int) -> dict:
    return {"type": "string", "pattern": "^(" + "|".join(f"[0-9a-f]{{{2 * n}}}" for n in ns) + ")$"}


def top_schema(schema_id: str, title: str, description: str, algorithm: Sequence[str], group: dict,
               defs: Optional[dict] = None) -> dict:
    """A Wycheproof-style top level around one group schema (`$defs/group`)."""
    all_defs = {
        "note": {
            "type": "object",
            "required": ["bugType", "description"],
            "additionalProperties": False,
            "properties": {
                "bugType": {"enum": ["BASIC", "AUTH_BYPASS", "MODIFIED_PARAMETER", "MALLEABILITY", "EDGE_CASE",
                                     "FUNCTIONALITY", "KNOWN_BUG", "LEGACY", "MISSING_STEP", "WRONG_PRIMITIVE",
                                     "CAN_OF_WORMS", "CONFIDENTIALITY"]},
                "description": {"type": "string"},
                "effect": {"type": "string"},
                "links": {"type": "array", "items": {"type": "string"}},
            },
        },
        "source": {
            "type": "object",
            "required": ["name", "version"],
            "additionalProperties": False,
            "properties": {
                "name": {"enum": ["google/psp", "psp-spec", "scapy", "linux-xfrm-eesp", "self"]},
                "version": {"type": "string"},
            },
        },
        "testCommon": {
            "tcId": {"type": "integer", "minimum": 1},
            "comment": {"type": "string"},
            "flags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "result": {"enum": ["valid", "invalid", "acceptable"]},
        },
        "group": group,
    }
    all_defs.update(defs or {})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": title,
        "description": description,
        "type": "object",
        "required": ["algorithm", "schema", "numberOfTests", "header", "notes", "testGroups"],
        "additionalProperties": False,
        "properties": {
            "algorithm": {"enum": list(algorithm)},
            "schema": {"const": schema_id},
            "numberOfTests": {"type": "integer", "minimum": 0},
            "header": {"type": "array", "items": {"type": "string"}},
            "notes": {"type": "object", "additionalProperties": {"$ref": "#/$defs/note"}},
            "testGroups": {"type": "array", "items": {"$ref": "#/$defs/group"}},
        },
        "$defs": all_defs,
    }


def test_object(inputs: dict, outputs: dict, result_rules: Sequence[dict] = ()) -> dict:
    """A test object: tcId, comment, flags, inputs, outputs, result; no other keys."""
    return {
        "type": "object",
        "required": ["tcId", "comment", "flags", "inputs", "outputs", "result"],
        "additionalProperties": False,
        "properties": {
            "tcId": {"$ref": "#/$defs/testCommon/tcId"},
            "comment": {"$ref": "#/$defs/testCommon/comment"},
            "flags": {"$ref": "#/$defs/testCommon/flags"},
            "inputs": inputs,
            "outputs": outputs,
            "result": {"$ref": "#/$defs/testCommon/result"},
        },
        **({"allOf": list(result_rules)} if result_rules else {}),
    }


def when_result(result: str, outputs_required: Sequence[str]) -> dict:
    return {"if": {"properties": {"result": {"const": result}}},
            "then": {"properties": {"outputs": {"required": list(outputs_required)}}}}


#: The core's reason for a drop, in every family's outputs.
ERROR = {"type": "string", "minLength": 1,
         "description": "the reason, as the project's core names it (pe_status_name, e.g. authentication-failed)"}

#: A group's suite fields of an ESP-framed family (ESP, EESP), in schema order.
SUITE_GROUP_FIELDS = {
    "suite": {"enum": list(SUITES)},
    "encrId": {"type": "integer", "description": "IKEv2 ENCR transform ID"},
    "keySize": {"enum": list(KEY_SIZES), "description": "bits"},
}
#: The KEYMAT inputs of an ESP-framed packet test: key and salt.
KEYMAT_INPUTS = {
    "key": hex_of_any(*(b // 8 for b in KEY_SIZES)),
    "salt": hex_of_any(*SALT_LENS),
}

#: The outputs of an ESP-framed packet test (ESP, EESP), and which of them each result requires.
DELIVERY_OUTPUTS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "plaintextPacket": HEX,
        "icv": hex_of_any(*ICV_LENS),
        "nextHeader": {"type": "integer", "minimum": 0, "maximum": 255},
        "padLength": {"type": "integer", "minimum": 0, "maximum": 255},
        "error": ERROR,
        "icvValid": {"type": "boolean"},
    },
}
DELIVERY_RULES = [when_result("valid", ["plaintextPacket", "icv", "nextHeader", "padLength"]),
                  when_result("invalid", ["error"]), when_result("acceptable", ["error"])]


NEEDS_JSONSCHEMA = ("the vector tools validate against JSON Schema and need jsonschema, which is not installed: "
                    "pip install 'psp-eesp[vectors]' (or pip install jsonschema)")


class MissingExtra(RuntimeError):
    """An optional dependency (a package extra) is not installed; the message says which extra to install."""


def require_jsonschema() -> None:
    try:
        import jsonschema  # noqa: F401
    except ImportError:
        raise MissingExtra(NEEDS_JSONSCHEMA) from None


def validate(doc: Any, schema: Optional[dict] = None, *, path: "os.PathLike[str] | str | None" = None) -> List[str]:
    """Schema errors of a vector document (empty when valid).  The schema is picked by ``doc["schema"]``: a
    registered family's, else the file of that name in ``schema/`` beside ``path`` (where generate writes it)."""
    require_jsonschema()
    import jsonschema
    if schema is None:
        name = doc.get("schema") if isinstance(doc, dict) else None
        schema = all_schemas().get(name)  # type: ignore[arg-type]
        beside = Path(path).parent / "schema" / name if path is not None and isinstance(name, str) else None
        if schema is None and beside is not None and beside.name == name and beside.is_file():
            schema = load_doc(beside)
        if schema is None:
            return [f"unknown schema {name!r}; known: {', '.join(sorted(all_schemas()))}"]
    v = jsonschema.Draft202012Validator(schema)
    errors = []
    for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = "/".join(str(p) for p in e.absolute_path) or "(top)"
        errors.append(f"{where}: {e.message}")
    return errors
