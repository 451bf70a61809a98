"""Forms generated from a JSON Schema (a review's ``edit_schema``), and reading them back into a value.

An object schema whose properties are strings, numbers, integers, booleans or enums becomes one labelled
input per property; anything else is edited as JSON text in one field. What the reviewer sends is validated
against the schema before it goes to the workflow (which validates it again, and whose refusal is shown too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a2amesh.diagnostics import schema_errors

__all__ = ["JSON_FIELD", "Field", "fields_of", "parse", "validate"]

JSON_FIELD = "json"
_PREFIX = "field."
_SIMPLE = ("string", "number", "integer", "boolean")


@dataclass(frozen=True)
class Field:
    """One input: its form name, label, input kind (``text``, ``number``, ``checkbox``, ``select``), choices."""

    name: str
    label: str
    kind: str
    required: bool = False
    choices: tuple[str, ...] = ()
    step: str = "any"
    description: str = ""


def fields_of(schema: Mapping[str, Any] | None) -> list[Field] | None:
    """The inputs of ``schema``, or None when it is edited as JSON text."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return None
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        return None
    required = set(schema.get("required") or [])
    out: list[Field] = []
    for name, prop in props.items():
        if not isinstance(prop, Mapping):
            return None
        kind = prop.get("type")
        label = str(prop.get("title") or name)
        description = str(prop.get("description") or "")
        if isinstance(prop.get("enum"), list) and all(isinstance(v, str) for v in prop["enum"]):
            out.append(
                Field(_PREFIX + name, label, "select", name in required, tuple(prop["enum"]), description=description)
            )
        elif kind not in _SIMPLE:
            return None
        elif kind == "boolean":
            out.append(Field(_PREFIX + name, label, "checkbox", False, description=description))
        elif kind in ("number", "integer"):
            step = "1" if kind == "integer" else "any"
            out.append(Field(_PREFIX + name, label, "number", name in required, step=step, description=description))
        else:
            out.append(Field(_PREFIX + name, label, "text", name in required, description=description))
    return out


def _number(text: str, integer: bool) -> Any:
    try:
        return int(text) if integer else (int(text) if text.lstrip("-").isdigit() else float(text))
    except ValueError:
        return text  # left as typed: the schema check names the field


def parse(schema: Mapping[str, Any] | None, form: Mapping[str, Any]) -> Any:
    """The value a submitted form holds (the JSON text field, or the fields of :func:`fields_of`).

    Raises:
        ValueError: the JSON text is not JSON (the message says where).
    """
    fields = fields_of(schema)
    if fields is None:
        text = str(form.get(JSON_FIELD) or "").strip()
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError as e:
            raise ValueError(f"the JSON is not valid: {e.msg} at line {e.lineno} column {e.colno}") from e
    assert schema is not None
    props = schema["properties"]
    value: dict[str, Any] = {}
    for field in fields:
        name = field.name[len(_PREFIX) :]
        raw = form.get(field.name)
        if field.kind == "checkbox":
            value[name] = raw is not None
            continue
        text = str(raw or "").strip()
        if not text:
            continue
        value[name] = _number(text, props[name].get("type") == "integer") if field.kind == "number" else text
    return value


def validate(schema: Mapping[str, Any], value: Any) -> list[str]:
    """Every way ``value`` breaks ``schema`` (``$.amount: 500 is greater than the maximum of 100``)."""
    return schema_errors(schema, value)
