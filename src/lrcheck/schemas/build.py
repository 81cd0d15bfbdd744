"""The pieces the schemas are built from: JSON Schema (draft 2020-12) fragments as plain dicts,
an object whose keys are listed as required or optional, and a dataclass's fields read from
its type hints, so that a field added to a spec is in its schema without a second list.

An object is closed (``additionalProperties: false``): a key a writer adds beside the others
fails validation until it is listed here too (docs/contributing.md, "Schemas").
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Iterable, Mapping

# A JSON Schema fragment.
Schema = dict[str, object]

DRAFT = "https://json-schema.org/draft/2020-12/schema"
STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
NULL: Schema = {"type": "null"}
# A field typed ``object``: any JSON value (give it an override to say more).
ANY: Schema = {}
# A float lrcheck measured: the writer turns a non-finite one (a run that diverged) into null
# (``reports.files.to_json``).
MEASURED: Schema = {"type": ["number", "null"],
                    "description": "null where the value was not finite (NaN or infinite)"}


def ref(name: str) -> Schema:
    """The definition ``name`` of the same document (``$defs``)."""
    return {"$ref": f"#/$defs/{name}"}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null."""
    kind = schema.get("type")
    if isinstance(kind, str) and set(schema) <= {"type", "description"}:
        return {**schema, "type": [kind, "null"]}
    if "enum" in schema and isinstance(schema["enum"], list):  # its type lets null in too
        return {**schema, "type": [schema.get("type", "string"), "null"],
                "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, NULL]}


def array(items: Schema, **more: object) -> Schema:
    return {"type": "array", "items": items, **more}


def mapping(values: Schema, description: str | None = None) -> Schema:
    """An object of free keys (names chosen at run time), each value ``values``."""
    return {"type": "object", "additionalProperties": values,
            **({} if description is None else {"description": description})}


def words(choices: type[enum.Enum] | Iterable[str], description: str | None = None) -> Schema:
    """One of the words of a ``Word``/``Choice`` enum, or of a registry's names."""
    values = ([m.value for m in choices] if isinstance(choices, type) else list(choices))
    return {"type": "string", "enum": values,
            **({} if description is None else {"description": description})}


def closed(required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None,
           description: str | None = None) -> Schema:
    """An object with the keys ``required`` (always written) and ``optional`` (written by
    some runs only), and no other."""
    return {"type": "object",
            **({} if description is None else {"description": description}),
            "properties": {**required, **(optional or {})},
            "required": list(required), "additionalProperties": False}


def const(value: object) -> Schema:
    return {"const": value}


def field_schema(hint: object, defs: Mapping[type, str]) -> Schema:
    """The schema of one type hint: a plain type, an enum (its words), ``X | None``, a tuple
    or list of X, a ``dict[str, X]``, or a dataclass with a definition in ``defs``."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return nullable(field_schema(_present(hint), defs))
    if origin in (tuple, list):
        return array(field_schema(args[0], defs))
    if origin is dict:
        return mapping(field_schema(args[1], defs))
    if isinstance(hint, type) and hint in defs:
        return ref(defs[hint])
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return words(hint)
    plain: dict[object, Schema] = {bool: BOOLEAN, int: INTEGER, float: NUMBER, str: STRING,
                                   object: ANY}
    if hint in plain:
        return plain[hint]
    raise TypeError(f"no schema for the type {hint!r}")


def fields_of(cls: type, *, defs: Mapping[type, str] | None = None,
              overrides: Mapping[str, Schema] | None = None,
              leave_out: Iterable[str] = (), none_left_out: bool = False) -> dict[str, Schema]:
    """The schema of each field of dataclass ``cls`` from its type hints, in field order;
    ``overrides`` for the fields whose values are narrower than their type (a registry's
    names), ``leave_out`` for fields its ``to_dict`` does not write, ``none_left_out`` where
    it leaves out a field that is None rather than writing null."""
    hints = typing.get_type_hints(cls)
    skip = set(leave_out)
    return {f.name: (overrides or {}).get(f.name)
            or field_schema(_present(hints[f.name]) if none_left_out else hints[f.name],
                            defs or {})
            for f in dataclasses.fields(cls) if f.name not in skip}


def _present(hint: object) -> object:
    """``X`` for ``X | None``; any other hint but a union as it is."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return hint
    rest = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(rest) != 1:
        raise TypeError(f"no schema for the union {hint!r}: give the field an override")
    return rest[0]


def document(title: str, description: str, body: Schema, defs: Mapping[str, Schema]) -> Schema:
    """A whole schema: draft 2020-12, its title, and the definitions the body refers to."""
    return {"$schema": DRAFT, "title": title, "description": description, **body,
            "$defs": dict(sorted(defs.items()))}
