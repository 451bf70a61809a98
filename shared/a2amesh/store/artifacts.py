"""Artifacts in Redis/Valkey (SPEC §3.5, §4): named, versioned from 0, scoped to ``{context_id}/{task_id}``.

An artifact is written under the scope of the task that saves it, so parallel invocations that choose
the same name never collide, and is readable anywhere else only by its URI::

    artifact://{ns}/{context_id}/{task_id}/{name}?version=N

Each version keeps its MIME type, size, sha256, free-form metadata and, when the request carried an
``A2A-User`` header, the user: a version written for a user is readable only with the same user.
Every save refreshes the TTL of the artifact (``artifact_retention``, which follows execution
retention); :meth:`ArtifactStore.refresh` refreshes a whole context (an execution paused for a human).

Layout (keys built in :mod:`a2amesh.store.keys`): one hash per artifact holding every version
(``d:{v}`` data, ``m:{v}`` meta, ``next``, ``latest``), a set of names per scope, and a set of task ids
per context. Text and JSON are stored as UTF-8 text, other bytes as base64.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import parse_qs, quote, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.config import Settings
from a2amesh.errors import ArtifactError, ArtifactNotFound
from a2amesh.store.keys import Keys
from a2amesh.store.redis import Redis, Scripts, load_script

__all__ = [
    "ARTIFACT_NAME_RE",
    "ArtifactMeta",
    "ArtifactScope",
    "ArtifactStore",
    "StoredArtifact",
    "check_artifact_name",
    "format_artifact_uri",
    "is_json_media_type",
    "parse_artifact_uri",
]

SCHEME = "artifact"
ARTIFACT_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
JSON_MEDIA_TYPE = "application/json"
TEXT_MEDIA_TYPE = "text/plain"
BINARY_MEDIA_TYPE = "application/octet-stream"


class ArtifactScope(NamedTuple):
    """Where an artifact is written: the context and the task that saved it."""

    context_id: str
    task_id: str

    def __str__(self) -> str:
        return f"{self.context_id}/{self.task_id}"


class ArtifactMeta(BaseModel):
    """What is known about one version of an artifact."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: int = Field(ge=0)
    uri: str = Field(description="artifact://{ns}/{context_id}/{task_id}/{name}?version=N")
    media_type: str
    size: int = Field(description="Size of the content in bytes.")
    sha256: str = Field(description="Hex sha256 of the content bytes.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: float = Field(description="Unix time of the save.")
    context_id: str
    task_id: str
    user: str | None = Field(default=None, description="The A2A-User the version was written for, if any.")

    def ref(self) -> dict[str, Any]:
        """The reference a ``workflow_node_result`` carries: ``{uri, name, version, mediaType, size}``."""
        return {
            "uri": self.uri,
            "name": self.name,
            "version": self.version,
            "mediaType": self.media_type,
            "size": self.size,
            "sha256": self.sha256,
        }


@dataclass(frozen=True)
class StoredArtifact:
    """One loaded version: its meta and its content (``str`` for text and JSON, ``bytes`` otherwise)."""

    meta: ArtifactMeta
    content: str | bytes

    @property
    def value(self) -> Any:
        """The content decoded: the JSON value for a JSON media type, else the text or the bytes.

        Raises:
            ArtifactError: a JSON artifact whose content is not valid JSON.
        """
        if isinstance(self.content, str) and is_json_media_type(self.meta.media_type):
            try:
                return json.loads(self.content)
            except json.JSONDecodeError as e:
                raise ArtifactError(
                    f"artifact {self.meta.name!r} version {self.meta.version} is {self.meta.media_type} "
                    f"but not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
                ) from e
        return self.content

    @property
    def text(self) -> str:
        """The content as text (bytes decoded as UTF-8 with replacement)."""
        return self.content if isinstance(self.content, str) else self.content.decode("utf-8", "replace")


def is_json_media_type(media_type: str) -> bool:
    """``application/json`` or any ``+json`` type (parameters ignored)."""
    base = media_type.split(";", 1)[0].strip().lower()
    return base == JSON_MEDIA_TYPE or base.endswith("+json")


def check_artifact_name(name: str) -> str:
    """Return ``name`` if it is a valid artifact name, else raise :class:`ArtifactError` saying why."""
    if not isinstance(name, str) or not ARTIFACT_NAME_RE.match(name):
        raise ArtifactError(
            f"artifact name {name!r} is not valid: use 1-128 characters of letters, digits, '_', '.', '-' "
            "(starting with a letter, digit or '_'), e.g. 'output.json'"
        )
    return name


def format_artifact_uri(namespace: str, scope: ArtifactScope, name: str, version: int | None) -> str:
    """The URI of an artifact (of its latest version when ``version`` is None)."""
    path = "/".join(quote(p, safe="") for p in (scope.context_id, scope.task_id, name))
    query = "" if version is None else f"?version={version}"
    return f"{SCHEME}://{namespace}/{path}{query}"


def parse_artifact_uri(uri: str) -> tuple[str, ArtifactScope, str, int | None]:
    """Split an artifact URI into ``(namespace, scope, name, version)``.

    Raises:
        ArtifactError: not an ``artifact://{ns}/{context_id}/{task_id}/{name}[?version=N]`` URI.
    """
    shape = "artifact://{ns}/{context_id}/{task_id}/{name}?version=N"
    try:
        parts = urlsplit(uri)
    except ValueError as e:
        raise ArtifactError(f"{uri!r} is not an artifact URI ({shape})") from e
    segments = parts.path.split("/")
    if parts.scheme != SCHEME or not parts.netloc or len(segments) != 4 or segments[0] != "":
        raise ArtifactError(f"{uri!r} is not an artifact URI ({shape})")
    context_id, task_id, name = (unquote(s) for s in segments[1:])
    if not context_id or not task_id:
        raise ArtifactError(f"{uri!r} is not an artifact URI ({shape})")
    check_artifact_name(name)
    version: int | None = None
    query = parse_qs(parts.query)
    if "version" in query:
        raw = query["version"][-1]
        if not raw.isdigit():
            raise ArtifactError(f"{uri!r}: version must be a non-negative integer, got {raw!r}")
        version = int(raw)
    return parts.netloc, ArtifactScope(context_id, task_id), name, version


def _encode(content: Any, media_type: str | None) -> tuple[bytes, str, str, str]:
    """``(raw bytes, stored text, encoding, media type)`` of a content value."""
    if isinstance(content, bytes | bytearray):
        raw = bytes(content)
        mt = media_type or BINARY_MEDIA_TYPE
        try:
            return raw, raw.decode("utf-8"), "utf-8", mt
        except UnicodeDecodeError:
            return raw, base64.b64encode(raw).decode("ascii"), "base64", mt
    if isinstance(content, str):
        mt = media_type or TEXT_MEDIA_TYPE
        if is_json_media_type(mt):
            try:
                json.loads(content)
            except json.JSONDecodeError as e:
                raise ArtifactError(
                    f"content given as {mt} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
                ) from e
        return content.encode("utf-8"), content, "utf-8", mt
    try:
        text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"content of type {type(content).__name__} cannot be stored as JSON: {e}") from e
    return text.encode("utf-8"), text, "utf-8", media_type or JSON_MEDIA_TYPE


class ArtifactStore:
    """Artifacts of one namespace in Redis.

    Args:
        redis: the process's Redis client (``decode_responses=True``).
        keys: the namespace's key builder.
        retention: seconds an artifact is kept after its last save (or refresh).
        max_bytes: the largest content one version may have.
    """

    @classmethod
    def for_settings(cls, redis: Redis, settings: Settings) -> ArtifactStore:
        """The namespace's artifacts, kept ``artifact_retention`` seconds, at most ``artifact_max_bytes`` each."""
        return cls(
            redis,
            Keys(settings.namespace),
            retention=settings.artifact_retention,
            max_bytes=settings.artifact_max_bytes,
        )

    def __init__(self, redis: Redis, keys: Keys, *, retention: float, max_bytes: int) -> None:
        self._r = redis
        self._k = keys
        self.namespace = keys.ns
        self._ttl = max(int(retention), 1)
        self._max_bytes = max_bytes
        self._scripts = Scripts(redis, "artifact_save", "artifact_load", durable=True)
        self._delete = redis.register_script(load_script("artifact_delete"))

    def uri(self, scope: ArtifactScope, name: str, version: int | None = None) -> str:
        """The URI of an artifact of this namespace."""
        return format_artifact_uri(self.namespace, scope, name, version)

    async def save(
        self,
        scope: ArtifactScope,
        name: str,
        content: Any,
        *,
        media_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        user: str | None = None,
    ) -> ArtifactMeta:
        """Store ``content`` as the next version of ``name`` in ``scope``.

        ``bytes`` are stored as given (``application/octet-stream`` unless told), ``str`` as text
        (``text/plain``; checked to be JSON when the media type says so), anything else as JSON.

        Raises:
            ArtifactError: a bad name, content that cannot be encoded, or content above ``max_bytes``.
        """
        saved = await self.put(scope, name, content, media_type=media_type, metadata=metadata, user=user)
        return saved.meta

    async def put(
        self,
        scope: ArtifactScope,
        name: str,
        content: Any,
        *,
        media_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        user: str | None = None,
    ) -> StoredArtifact:
        """:meth:`save`, returning the version as :meth:`load` would read it back (one round trip)."""
        check_artifact_name(name)
        raw, stored, encoding, mt = _encode(content, media_type)
        if len(raw) > self._max_bytes:
            raise ArtifactError(
                f"artifact {name!r} is {len(raw)} bytes, "
                f"above the limit of {self._max_bytes} bytes (artifact_max_bytes)"
            )
        meta = {
            "media_type": mt,
            "size": len(raw),
            "sha256": hashlib.sha256(raw).hexdigest(),
            "metadata": metadata or {},
            "created_at": time.time(),
            "encoding": encoding,
            "user": user,
        }
        index = self._k.artifact_scopes(scope.context_id)

        def build(pipe: Any) -> None:
            self._scripts.queue(
                pipe,
                "artifact_save",
                [self._k.artifact(str(scope), name), self._k.artifact_names(str(scope))],
                [name, stored, json.dumps(meta), self._ttl],
            )
            pipe.sadd(index, scope.task_id)
            pipe.expire(index, self._ttl)

        version = int((await self._scripts.run(build))[0])
        return StoredArtifact(self._meta(scope, name, version, meta), raw if encoding == "base64" else stored)

    async def load(
        self, scope: ArtifactScope, name: str, version: int | None = None, *, user: str | None = None
    ) -> StoredArtifact:
        """One version of ``name`` in ``scope`` (the latest when ``version`` is None; 0 is a real version).

        Raises:
            ArtifactNotFound: no such name or version, or it belongs to another user.
            ArtifactError: a bad name.
        """
        check_artifact_name(name)
        got = await self._scripts.call(
            "artifact_load", [self._k.artifact(str(scope), name)], ["" if version is None else version]
        )
        if not got:
            raise ArtifactNotFound(name, version, str(scope))
        v, stored, meta_json = int(got[0]), str(got[1]), json.loads(got[2])
        if not self._readable(meta_json, user):
            raise ArtifactNotFound(name, version, str(scope))
        content: str | bytes = stored
        if meta_json.get("encoding") == "base64":
            try:
                content = base64.b64decode(stored)
            except binascii.Error as e:  # pragma: no cover - written by this module only
                raise ArtifactError(f"artifact {name!r} version {v} holds corrupt base64 data") from e
        return StoredArtifact(self._meta(scope, name, v, meta_json), content)

    async def load_uri(self, uri: str, *, user: str | None = None) -> StoredArtifact:
        """The artifact an ``artifact://`` URI names (the latest version when the URI has none).

        Raises:
            ArtifactError: a malformed URI, or one of another namespace.
            ArtifactNotFound: nothing readable at that URI.
        """
        ns, scope, name, version = parse_artifact_uri(uri)
        if ns != self.namespace:
            raise ArtifactError(f"{uri!r} belongs to namespace {ns!r}, not {self.namespace!r}")
        return await self.load(scope, name, version, user=user)

    async def versions(self, scope: ArtifactScope, name: str, *, user: str | None = None) -> list[int]:
        """The stored versions of ``name`` readable by ``user``, ascending (empty when there are none)."""
        check_artifact_name(name)
        metas = await self._version_metas(scope, name)
        return sorted(v for v, meta in metas.items() if self._readable(meta, user))

    async def list(self, scope: ArtifactScope, *, user: str | None = None) -> list[ArtifactMeta]:
        """The latest version of every artifact in ``scope`` readable by ``user``, by name."""
        names = sorted(str(n) for n in await self._r.smembers(self._k.artifact_names(str(scope))))
        out = []
        for name in names:
            metas = await self._version_metas(scope, name)
            readable = [v for v, meta in metas.items() if self._readable(meta, user)]
            if readable:
                v = max(readable)
                out.append(self._meta(scope, name, v, metas[v]))
        return out

    async def delete(
        self, scope: ArtifactScope, name: str, version: int | None = None, *, user: str | None = None
    ) -> int:
        """Delete one version of ``name`` (every version readable by ``user`` when ``version`` is None).

        Version numbers are never reused: the next save after a delete still gets a new number.

        Returns:
            How many versions were deleted.

        Raises:
            ArtifactNotFound: nothing to delete, or it belongs to another user.
        """
        check_artifact_name(name)
        metas = await self._version_metas(scope, name)
        readable = [v for v, meta in metas.items() if self._readable(meta, user)]
        targets = readable if version is None else [v for v in readable if v == version]
        if not targets:
            raise ArtifactNotFound(name, version, str(scope))
        keys = [self._k.artifact(str(scope), name), self._k.artifact_names(str(scope))]
        if version is None and len(readable) == len(metas):
            return int(await self._delete(keys=keys, args=[name, ""]))
        deleted = 0
        for v in targets:
            deleted += int(await self._delete(keys=keys, args=[name, v]))
        return deleted

    async def _version_metas(self, scope: ArtifactScope, name: str) -> dict[int, dict[str, Any]]:
        key = self._k.artifact(str(scope), name)
        fields = [str(f) for f in await self._r.hkeys(key) if str(f).startswith("m:")]
        if not fields:
            return {}
        values = await self._r.hmget(key, fields)
        return {int(f[2:]): json.loads(v) for f, v in zip(fields, values, strict=True) if v is not None}

    async def refresh(self, context_id: str) -> int:
        """Restart the TTL of every artifact of a context (e.g. while its execution waits for a human).

        Returns:
            How many artifacts were refreshed.
        """
        index = self._k.artifact_scopes(context_id)
        task_ids = sorted(str(t) for t in await self._r.smembers(index))
        count = 0
        for task_id in task_ids:
            scope = str(ArtifactScope(context_id, task_id))
            names = [str(n) for n in await self._r.smembers(self._k.artifact_names(scope))]
            pipe = self._r.pipeline(transaction=False)
            pipe.expire(self._k.artifact_names(scope), self._ttl)
            for name in names:
                pipe.expire(self._k.artifact(scope, name), self._ttl)
            await pipe.execute()
            count += len(names)
        await self._r.expire(index, self._ttl)
        return count

    def _meta(self, scope: ArtifactScope, name: str, version: int, meta: dict[str, Any]) -> ArtifactMeta:
        return ArtifactMeta(
            name=name,
            version=version,
            uri=self.uri(scope, name, version),
            media_type=str(meta["media_type"]),
            size=int(meta["size"]),
            sha256=str(meta["sha256"]),
            metadata=dict(meta.get("metadata") or {}),
            created_at=float(meta.get("created_at") or 0.0),
            context_id=scope.context_id,
            task_id=scope.task_id,
            user=meta.get("user"),
        )

    @staticmethod
    def _readable(meta: dict[str, Any], user: str | None) -> bool:
        owner = meta.get("user")
        return owner is None or owner == user
