"""Result parts shared by agents and workflows (SPEC §3.5): outputs above the inline threshold travel as artifact
URLs, files as bytes or URLs."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from a2amesh.jsontext import dumps_bytes
from a2amesh.protocol import Part
from a2amesh.store.artifacts import ArtifactMeta

__all__ = [
    "RESULT_ARTIFACT",
    "encoded_size",
    "file_part",
    "is_file_part",
    "spill_large_file",
    "url_part",
]

RESULT_ARTIFACT = "result"
"""The name under which the host stores an output too large to send inline."""


def encoded_size(output: Any) -> int:
    """Bytes the output takes inline: UTF-8 text for a string, compact JSON otherwise."""
    if isinstance(output, str):
        return len(output.encode("utf-8"))
    return len(dumps_bytes(output, default=str))


def url_part(meta: ArtifactMeta) -> Part:
    """The URL part that stands for an artifact in a result: its URI, with ``metadata: {size, sha256}``."""
    return Part(
        url=meta.uri,
        media_type=meta.media_type,
        filename=meta.name,
        metadata={"size": meta.size, "sha256": meta.sha256},
    )


def is_file_part(part: Part) -> bool:
    """Whether a result part is a file: bytes, a URL outside the mesh, or a stored artifact that is neither JSON
    nor text (a spilled large output is JSON or text: it stands for a value, not a file)."""
    if part.raw is not None:
        return True
    if part.url is None:
        return False
    if not part.url.startswith("artifact://"):
        return True
    media = part.media_type or ""
    return bool(media) and not (media.startswith("text/") or media == "application/json" or media.endswith("+json"))


def file_part(value: Any) -> Part | None:
    """The file part whose JSON form (``{"raw" | "url", "filename", "mediaType", …}``) ``value`` is, if it is one."""
    if not isinstance(value, dict) or not ("raw" in value or "url" in value):
        return None
    try:
        part = Part.from_json_dict(value)
    except ValidationError:
        return None
    return part if is_file_part(part) else None


async def spill_large_file(
    part: Part, *, threshold: int, save: Callable[[bytes, str], Awaitable[ArtifactMeta]]
) -> tuple[Part, ArtifactMeta | None]:
    """A file whose bytes are above ``threshold`` saved (``save(content, media_type)``, as :data:`RESULT_ARTIFACT`)
    and replaced by its URL part, name and media type kept; any other part returned as it is (with no meta)."""
    if part.raw is None or len(part.raw) * 3 // 4 <= threshold:
        return part, None
    meta = await save(base64.b64decode(part.raw), part.media_type or "application/octet-stream")
    return url_part(meta).model_copy(update={"filename": part.filename or meta.name}), meta
