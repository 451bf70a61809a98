"""Artifacts as MCP resources: results and artifacts stored as ``artifact://`` URIs become resource links in tool
results, readable through ``resources/read`` (with the caller's ``A2A-User``, as the artifact store scopes them).

``resources/list`` lists the links this server handed out recently (artifacts are found by their URIs, not
browsed).
"""

from __future__ import annotations

import base64
from collections import OrderedDict

import mcp_types as types

from a2amesh.errors import ArtifactError
from a2amesh.logs import get_logger
from a2amesh.protocol import Task
from a2amesh.store.artifacts import SCHEME, ArtifactStore, is_json_media_type

log = get_logger("mcp")

RECENT_LINKS = 200
"""How many resource links ``resources/list`` remembers."""

STRUCTURED_LIMIT = 4 * 1024 * 1024
"""Largest artifact loaded back into a result's structured content (bytes); larger ones are links only."""


class ResourceError(Exception):
    """A resource cannot be read: the message says which URI and why."""


class ResourceReader:
    """Turns artifact references into resource links, and reads them back.

    Args:
        artifacts: the namespace's artifact store, or None (then artifacts are links that cannot be read).
    """

    def __init__(self, artifacts: ArtifactStore | None) -> None:
        self.artifacts = artifacts
        self._recent: OrderedDict[str, types.Resource] = OrderedDict()

    @staticmethod
    def is_artifact(url: str) -> bool:
        """Whether ``url`` is an ``artifact://`` URI."""
        return url.startswith(f"{SCHEME}://")

    async def links(self, task: Task) -> list[types.ContentBlock]:
        """A resource link for every artifact reference among the task's artifacts."""
        out: list[types.ContentBlock] = []
        for artifact in task.artifacts or []:
            for part in artifact.parts:
                if part.url is None or not self.is_artifact(part.url):
                    continue
                size = (part.metadata or {}).get("size")
                link = types.ResourceLink(
                    uri=part.url,
                    name=part.filename or artifact.name or artifact.artifact_id,
                    description=artifact.description,
                    mime_type=part.media_type,
                    size=size if isinstance(size, int) else None,
                )
                self._remember(link)
                out.append(link)
        return out

    def _remember(self, link: types.ResourceLink) -> None:
        self._recent[link.uri] = types.Resource(
            uri=link.uri, name=link.name, description=link.description, mime_type=link.mime_type, size=link.size
        )
        self._recent.move_to_end(link.uri)
        while len(self._recent) > RECENT_LINKS:
            self._recent.popitem(last=False)

    def recent(self) -> list[types.Resource]:
        """The resources linked lately, newest last."""
        return list(self._recent.values())

    async def value(self, uri: str, *, user: str | None = None) -> object | None:
        """The decoded value of a JSON artifact (for structured content), or None when it is not one or too big."""
        if self.artifacts is None:
            return None
        try:
            stored = await self.artifacts.load_uri(uri, user=user)
        except ArtifactError as e:
            log.warning("mcp.artifact_unreadable", uri=uri, error=str(e))
            return None
        if not is_json_media_type(stored.meta.media_type) or stored.meta.size > STRUCTURED_LIMIT:
            return None
        value: object = stored.value
        return value

    async def read(self, uri: str, *, user: str | None = None) -> types.ReadResourceResult:
        """The contents of an ``artifact://`` resource.

        Raises:
            ResourceError: not an artifact URI, no store, or nothing readable there (says which and why).
        """
        if not self.is_artifact(uri):
            raise ResourceError(f"unknown resource {uri!r}: this server serves {SCHEME}:// URIs only")
        if self.artifacts is None:
            raise ResourceError(f"cannot read {uri!r}: this server has no artifact store")
        try:
            stored = await self.artifacts.load_uri(uri, user=user)
        except ArtifactError as e:
            raise ResourceError(f"cannot read {uri!r}: {e}") from e
        media = stored.meta.media_type
        contents: types.TextResourceContents | types.BlobResourceContents
        if isinstance(stored.content, str):
            contents = types.TextResourceContents(uri=uri, mime_type=media, text=stored.content)
        else:
            blob = base64.b64encode(stored.content).decode("ascii")
            contents = types.BlobResourceContents(uri=uri, mime_type=media, blob=blob)
        return types.ReadResourceResult(contents=[contents])
