"""The built-in ``image`` agent: images from an OpenAI-compatible images endpoint, each saved as an artifact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.agent.context import TaskContext
from a2amesh.agent.llm_client import ChatModel
from a2amesh.builtins.conversation import parse_input

__all__ = ["ImageAgent", "media_type_of"]


class ImageRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1)
    model: str | None = None
    size: str | None = None
    quality: str | None = None
    style: str | None = None
    n: int = Field(1, ge=1, le=4)
    stream: bool = False


def media_type_of(data: bytes) -> tuple[str, str]:
    """``(media type, file extension)`` of image bytes, from their signature."""
    if data.startswith(b"\x89PNG"):
        return "image/png", "png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg", "jpg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", "webp"
    return "application/octet-stream", "bin"


class ImageAgent:
    """The work of ``builtin-image``."""

    def __init__(self, chat: Callable[[], ChatModel], *, model: str | None) -> None:
        self._chat = chat
        self.model = model

    async def generate(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """Generate and save. Output: ``{images: [{uri, name, version, media_type, size}], revised_prompt}``."""
        request = parse_input(ImageRequest, data)
        images = await self._chat().images(
            request.prompt,
            model=request.model or self.model,
            n=request.n,
            size=request.size,
            quality=request.quality,
            style=request.style,
        )
        saved = []
        for index, image in enumerate(images):
            media_type, extension = media_type_of(image.data)
            meta = await ctx.save_artifact(
                f"image-{index}.{extension}", image.data, media_type=media_type, metadata={"prompt": request.prompt}
            )
            saved.append(
                {
                    "uri": meta.uri,
                    "name": meta.name,
                    "version": meta.version,
                    "media_type": meta.media_type,
                    "size": meta.size,
                }
            )
        return {"images": saved, "revised_prompt": images[0].revised_prompt}
