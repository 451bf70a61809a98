"""What a user is told when their data or definition is wrong: JSON Schema errors with paths, did-you-mean.

One place for these, shared by the agent (node handler and tool calls: :func:`validate`,
:func:`format_issues`) and the workflow engines (:func:`schema_errors`), by every load-time
check that suggests a spelling (:func:`did_you_mean`), and by every reader of pydantic errors
(:func:`field_path`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError

__all__ = [
    "SchemaIssue",
    "did_you_mean",
    "expects_structured",
    "field_path",
    "format_issues",
    "schema_errors",
    "schema_problem",
    "shorten",
    "validate",
]

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


@lru_cache(maxsize=256)
def _plain_validator(schema_json: str) -> Draft202012Validator:
    """A draft 2020-12 validator without format checks, per distinct schema (workflow schemas)."""
    return Draft202012Validator(json.loads(schema_json))


def schema_errors(schema: Mapping[str, Any] | None, value: Any, *, limit: int = 5) -> list[str]:
    """Every way ``value`` breaks a JSON Schema, each with its JSON path (``$.items[0].sku: ...``).

    The workflow engines' form: at most ``limit`` errors ordered by path, no format checks, and an
    invalid schema reported as one error rather than raised.
    """
    if not schema:
        return []
    try:
        validator = _plain_validator(json.dumps(schema, sort_keys=True, default=str))
        found = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.absolute_path)))
    except SchemaError as exc:
        return [f"the schema itself is invalid: {exc.message}"]
    return [f"{error.json_path}: {error.message}" for error in found[:limit]]


def did_you_mean(word: str, candidates: Collection[str], *, cutoff: float = 0.6) -> str:
    """A ``" (did you mean 'x'?)"`` suffix naming the closest candidate, or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""


def field_path(loc: Iterable[int | str], *, key: Callable[[str], str] = str) -> str:
    """A pydantic error location as a field path: ``("nodes", 0, "input")`` → ``nodes[0].input``.

    Args:
        loc: the location's parts.
        key: how a field name is shown (the graph format shows its camelCase spelling).
    """
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{key(part)}" if out else key(part))
    return out


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
        return f"invalid JSON Schema at {where}: {shorten(e.message, _MAX_MESSAGE)}"
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
    issues = [SchemaIssue(e.json_path, shorten(e.message, _MAX_MESSAGE), str(e.validator)) for e in errors]
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


def shorten(text: str, limit: int, *, flat: bool = False) -> str:
    """``text`` cut to ``limit`` characters, ending in "…" when it was longer.

    Args:
        text: what to show.
        limit: the most characters shown, "…" included.
        flat: fold every run of white space (newlines too) to one space first.
    """
    if flat:
        text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
