"""Compact JSON for the hot paths (request and reply bodies, execution commits), encoded and parsed.

orjson where it can (several times faster than the standard library); the standard encoder for what
orjson refuses (integers beyond 64 bits, non-string keys), so the output is the same JSON either way.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import orjson
from pydantic import BaseModel

__all__ = ["JsonValue", "content_digest", "dumps_bytes", "dumps_text", "fields_json", "loads"]

if TYPE_CHECKING:
    JsonValue: TypeAlias = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None
    """A JSON value: None, bool, int, float, str, or a list or string-keyed dict of JSON values."""
else:
    # pydantic sees Any: these values come from JSON or YAML already parsed, and checking every nested value
    # again would cost on the hot path for nothing; mypy checks the recursive type above
    JsonValue = Any

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
"""Dates and dataclasses go to ``default`` as they do with the standard encoder."""


def dumps_bytes(value: Any, *, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact UTF-8 JSON bytes (``default`` turns what JSON cannot hold into something it can)."""
    try:
        return orjson.dumps(value, default=default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default).encode()


def dumps_text(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """:func:`dumps_bytes` as text."""
    try:
        return orjson.dumps(value, default=default, option=_OPTIONS).decode()  # not through dumps_bytes: hot
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=default)


def fields_json(
    model: BaseModel,
    fields: dict[str, Any],
    exclude: set[str] | None = None,
    *,
    nested: tuple[type[BaseModel], ...] = (),
) -> str:
    """``model.model_dump_json(exclude=exclude)``, written by orjson from ``fields``: the model's field values in
    field order (its ``__dict__``), the excluded ones left out. The same text for models of JSON values (str,
    int, float, bool, None, str enums, lists and dicts of them: orjson and pydantic-core both write a float's
    shortest round-trip form) in a third of the time; pydantic writes what orjson refuses or would write
    differently (datetimes, dataclasses, integers beyond 64 bits, non-string keys, bytes).

    ``nested``: model classes of such plain fields that may appear among the values, written as their fields.
    """
    try:
        return orjson.dumps(fields, default=_fields_of(nested), option=_OPTIONS).decode()
    except TypeError:
        return model.model_dump_json(exclude=exclude)


@functools.cache
def _fields_of(classes: tuple[type[BaseModel], ...]) -> Callable[[Any], Any]:
    def fields(value: Any) -> Any:
        if type(value) in classes:
            return value.__dict__
        raise TypeError(type(value).__name__)

    return fields


def loads(data: bytes | str) -> Any:
    """Parse JSON: orjson, else the standard parser for what orjson refuses (integers beyond 64 bits,
    ``NaN``), which also raises the error for what is not JSON at all (a ``ValueError``)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def content_digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON form of ``value``: sorted keys, compact, UTF-8.

    The standard encoder on purpose: digests are stored (execution records, cards) and must not
    move with orjson's number formatting.
    """
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
