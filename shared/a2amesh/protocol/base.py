"""The base of every A2A model: ProtoJSON field names (camelCase), unknown fields rejected."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Annotated, Any, Self

from pydantic import AfterValidator, ConfigDict
from pydantic.alias_generators import to_camel

from a2amesh.trusted import TrustedModel

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def _check_timestamp(value: str) -> str:
    """Accept what ``google.protobuf.Timestamp`` accepts in ProtoJSON: RFC 3339 with a zone, <= 9 digits of fraction."""
    if not _RFC3339.fullmatch(value):
        raise ValueError(f"{value!r} is not an RFC 3339 timestamp such as 2025-01-31T12:00:00Z")
    try:
        dt.datetime.fromisoformat(value[:19])
    except ValueError as e:
        raise ValueError(f"{value!r} is not a valid date and time: {e}") from e
    return value


def _check_base64(value: str) -> str:
    """Accept what ProtoJSON accepts for ``bytes``: standard or URL-safe base64, padding optional."""
    padded = value.endswith("=")
    if not _BASE64.fullmatch(value) or (padded and len(value) % 4) or (not padded and len(value) % 4 == 1):
        raise ValueError("not valid base64 (standard or URL-safe alphabet, padding optional)")
    return value


_second_text: list[Any] = [None, ""]  # the last whole second formatted, and its text


def utc_timestamp(at: float | None = None) -> str:
    """The canonical ProtoJSON timestamp (RFC 3339, UTC, milliseconds, ``Z``) of ``at`` (epoch seconds; now
    when None)."""
    t = time.time() if at is None else at
    second = int(t)
    if _second_text[0] != second:  # strftime costs more than the rest: once per second, not per call
        _second_text[0], _second_text[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second_text[1]}.{int(t * 1000) % 1000:03d}Z"


Timestamp = Annotated[str, AfterValidator(_check_timestamp)]
"""An RFC 3339 timestamp string (``google.protobuf.Timestamp`` in ProtoJSON)."""

Base64 = Annotated[str, AfterValidator(_check_base64)]
"""Base64-encoded bytes (``bytes`` in ProtoJSON)."""


class A2AModel(TrustedModel):
    """An A2A 1.0 ProtoJSON object: camelCase on the wire, snake_case in Python, strict about unknown fields (built
    without validation from values this process made valid: :class:`~a2amesh.trusted.TrustedModel`)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
    )

    def to_json_dict(self) -> dict[str, Any]:
        """The ProtoJSON object: camelCase keys, unset and null fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_json_bytes(self) -> bytes:
        """The ProtoJSON encoding as UTF-8 bytes (:meth:`to_json_dict` encoded, written by pydantic-core at once)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_none=True)

    @classmethod
    def from_json_dict(cls, data: Any) -> Self:
        """Validate a decoded ProtoJSON object."""
        return cls.model_validate(data)
