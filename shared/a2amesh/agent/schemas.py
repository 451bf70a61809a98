"""JSON Schema validation for the node handler and tool calls: every error with its JSON path."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError

__all__ = ["SchemaIssue", "expects_structured", "format_issues", "schema_problem", "validate"]

_MAX_MESSAGE = 300


@dataclass(frozen=True)
class SchemaIssue:
    """One validation error.

    Attributes:
        path: JSON path of the failing value, ``$`` for the value itself (``$.items[0].quantity``).
        message: what is wrong, as jsonschema says it.
        keyword: the schema keyword that failed (``type``, ``required`` …).
    """

    path: str
    message: str
    keyword: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def to_json(self) -> dict[str, str]:
        """The entry of ``workflow_node_result.validation_errors``."""
        return {"path": self.path, "message": self.message, "keyword": self.keyword}


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = validators.validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _key(schema: dict[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a usable JSON Schema, or None when it is."""
    if not isinstance(schema, dict | bool):
        return f"a JSON Schema must be an object, got {type(schema).__name__}"
    if isinstance(schema, bool):
        return None
    cls = validators.validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(top level)"
        return f"invalid JSON Schema at {where}: {_short(e.message)}"
    return None


def validate(value: Any, schema: dict[str, Any] | bool | None) -> list[SchemaIssue]:
    """Every way ``value`` fails ``schema``, ordered by path; empty when it is valid (or there is no schema).

    The schema must be valid (see :func:`schema_problem`).
    """
    if schema is None or schema is True:
        return []
    if schema is False:
        return [SchemaIssue("$", "no value is allowed here (the schema is false)", "false")]
    errors = _validator(_key(schema)).iter_errors(value)
    issues = [SchemaIssue(e.json_path, _short(e.message), str(e.validator)) for e in errors]
    return sorted(issues, key=lambda i: (i.path, i.message))


def format_issues(issues: list[SchemaIssue], *, limit: int = 20) -> str:
    """The issues as lines ``- $.path: message`` (at most ``limit``, then a count of the rest)."""
    lines = [f"- {i}" for i in issues[:limit]]
    if len(issues) > limit:
        lines.append(f"- … and {len(issues) - limit} more")
    return "\n".join(lines)


def expects_structured(schema: dict[str, Any] | bool | None) -> bool:
    """Whether a schema rejects plain strings at the top level (so text output must be parsed as JSON)."""
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind != "string"
    if isinstance(kind, list):
        return "string" not in kind
    return any(k in schema for k in ("properties", "required", "items", "additionalProperties"))


def _short(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"
