"""A2A parts and messages."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from a2amesh.enums import ValueEnum
from a2amesh.protocol.base import A2AModel, Base64


class Role(ValueEnum):
    """Who sent a message."""

    UNSPECIFIED = "ROLE_UNSPECIFIED"
    USER = "ROLE_USER"
    AGENT = "ROLE_AGENT"


class Part(A2AModel):
    """One part of a message or artifact: exactly one of ``text``, ``data``, ``url``, ``raw``."""

    text: str | None = Field(default=None, description="Plain text content.")
    data: Any = Field(default=None, description="Structured JSON content.")
    url: str | None = Field(default=None, description="A reference to content, e.g. an artifact:// URI.")
    raw: Base64 | None = Field(default=None, description="Inline bytes, base64-encoded.")
    media_type: str | None = Field(default=None, description="The MIME type of the content.")
    filename: str | None = Field(default=None, description="A file name for the content, if it has one.")
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one_content(self) -> Part:
        held = (self.text is not None) + (self.data is not None) + (self.url is not None) + (self.raw is not None)
        if held != 1:
            present = [k for k in ("text", "data", "url", "raw") if getattr(self, k) is not None]
            raise ValueError(
                "a part must hold exactly one of text, data, url, raw"
                + (f" (it holds {', '.join(present)})" if present else " (it holds none)")
            )
        return self

    @classmethod
    def of_text(cls, text: str) -> Part:
        """A text part."""
        if not isinstance(text, str):
            return cls(text=text)  # validated: the precise error for what is not text
        return cls.built(text=text)  # valid by construction (built on every message)

    @classmethod
    def of_data(cls, data: Any) -> Part:
        """A JSON data part."""
        if data is None:
            return cls(data=data, media_type="application/json")  # validated: a part must hold something
        return cls.built(data=data, media_type="application/json")


class Message(A2AModel):
    """One message of a conversation."""

    message_id: str
    role: Role
    parts: list[Part]
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None

    def text(self) -> str:
        """All text parts joined with newlines."""
        return "\n".join(p.text for p in self.parts if p.text is not None)
