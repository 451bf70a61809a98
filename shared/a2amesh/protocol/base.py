"""The base of every A2A model: ProtoJSON field names (camelCase), unknown fields rejected."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class A2AModel(BaseModel):
    """An A2A 1.0 ProtoJSON object: camelCase on the wire, snake_case in Python, strict about unknown fields."""

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
        """The ProtoJSON encoding as UTF-8 bytes."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()

    @classmethod
    def from_json_dict(cls, data: Any) -> Self:
        """Validate a decoded ProtoJSON object."""
        return cls.model_validate(data)
