"""OTLP/HTTP export of this library's spans, encoded directly (``opentelemetry/proto/trace/v1/trace.proto``): a
third of the SDK encoder's cost per span. Other spans (the a2a-sdk's) go through the SDK's exporter as they are.
Used by :func:`a2amesh.tracing.configure` only when traces are exported; imports nothing of the SDK at import."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

__all__ = ["encode_resource", "encode_spans", "otlp_exporter"]


def otlp_exporter(inner: Any, resource: Resource) -> Any:
    """An OTLP/HTTP exporter that encodes this library's spans itself (:func:`encode_spans`: a third of the
    SDK encoder's cost per span) and posts them through ``inner``'s HTTP client (its endpoint, headers,
    compression, timeout and retries, from the standard variables); other spans (the a2a-sdk's) go to
    ``inner`` as they are. An SDK without that client gets every span, read as a ``ReadableSpan``."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    prefix = encode_resource(dict(resource.attributes))
    client = getattr(inner, "_client", None)
    post = getattr(client, "export", None)

    class _Exporter(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            ours = [s for s in spans if getattr(s, "a2amesh", False)]
            if post is None or not ours:
                return inner.export(spans)  # type: ignore[no-any-return]
            result = SpanExportResult.SUCCESS
            if len(ours) < len(spans):
                result = inner.export([s for s in spans if not getattr(s, "a2amesh", False)])
            try:
                sent = post(encode_spans(prefix, ours)).success
            except Exception:  # as the SDK's exporter does: an export failure is not the caller's
                sent = False
            return result if sent else SpanExportResult.FAILURE

        def shutdown(self) -> None:
            inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return bool(inner.force_flush(timeout_millis))

    return _Exporter()


# --- OTLP protobuf, written directly (opentelemetry/proto/trace/v1/trace.proto; checked against the SDK's
# encoder by tests/unit/test_tracing.py)

_SMALL = [bytes((i,)) for i in range(128)]
_PACK_Q = struct.Struct("<Q").pack
_PACK_D = struct.Struct("<d").pack
_PACK_IDS = struct.Struct(">2sQQ2sQ").pack  # trace_id (16 bytes, big-endian) and span_id (8)
_PACK_IDS_PARENT = struct.Struct(">2sQQ2sQ2sQ").pack  # … and parent_span_id
_PACK_TIMES = struct.Struct("<cQcQ").pack  # start and end time (fixed64)
_M64 = (1 << 64) - 1
_KEYS: dict[str, bytes] = {}
_FIELDS: dict[tuple[str, Any], bytes] = {}
"""A span attribute's whole field by its ``(key, value)`` item, for the string values of a key that has had few
(an agent's name, a state; not a task id) and small ints: most of a span's attributes are the same from span to
span."""
_PAIRS: dict[str, int | None] = {}
"""String values kept per key so far (None: a key of many values, whose fields are not kept)."""
_PAIRS_PER_KEY = 64
_LAST: dict[str, tuple[str, bytes]] = {}
"""For a key of many values (an id), the last value's field: a task's id is on both of its spans, one after the
other in a batch (the handler's, then the task's)."""


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    if n < 16384:  # a span's length, most attributes'
        return bytes(((n & 127) | 128, n >> 7))
    out = bytearray()
    while n > 127:
        out.append((n & 127) | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


_SPAN_LEN = [b"\x12" + _varint(n) for n in range(1024)]
"""A span's field tag and length, for each length under 1,024 (most spans'), made once."""


def _field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field."""
    return tag + _varint(len(data)) + data


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _PACK_D(value)
    if isinstance(value, (list, tuple)):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(v)) for v in value))
    return _field(b"\x0a", str(value).encode())


def _key(key: str) -> bytes:
    head = _KEYS.get(key)
    if head is None:
        head = _field(b"\x0a", key.encode())
        if len(_KEYS) < 1000:  # our names, and a few of the handlers'
            _KEYS[key] = head
    return head


def _attributes(tag: bytes, attributes: Mapping[str, Any]) -> list[bytes]:
    return [_field(tag, _key(key) + _field(b"\x12", _any_value(value))) for key, value in attributes.items()]


def _attribute_field(item: tuple[str, Any]) -> bytes:
    """An attribute's field, kept in :data:`_FIELDS` when its key has had few string values (an agent's name, a
    state; not a task id) or it is a small int; for a key of many values, the last value's field is kept
    (a task's id is on both of its spans, one after the other in a batch)."""
    key, value = item
    if type(value) is str:
        seen = _PAIRS.get(key, 0)
        if seen is not None and len(_FIELDS) < 10_000:
            pair = _field(b"\x4a", _key(key) + _field(b"\x12", _any_value(value)))
            if seen < _PAIRS_PER_KEY:
                _FIELDS[item] = pair
                _PAIRS[key] = seen + 1
            else:
                _PAIRS[key] = None  # a key of many values (an id): its fields are not kept from now on
            return pair
        last = _LAST.get(key)
        if last is not None and last[0] == value:
            return last[1]
        head = _key(key)
        data = value.encode()
        n = len(data)
        if len(head) + n < 124:  # every length a byte: one join (a task's id, a node's path)
            pair = b"".join(
                (b"\x4a", _SMALL[len(head) + n + 4], head, b"\x12", _SMALL[n + 2], b"\x0a", _SMALL[n], data)
            )
        else:
            pair = _field(b"\x4a", head + _field(b"\x12", _field(b"\x0a", data)))
        if seen is None:  # (a key counted: bounded)
            _LAST[key] = (value, pair)
        return pair
    pair = _field(b"\x4a", _key(key) + _field(b"\x12", _any_value(value)))
    if type(value) is int and 0 <= value < 128 and len(_FIELDS) < 10_000:  # (str and int items only: hashable)
        _FIELDS[item] = pair
    return pair


def encode_resource(attributes: Mapping[str, Any]) -> bytes:
    """A ResourceSpans' resource and the start of its ScopeSpans' scope (``a2amesh``)."""
    return _field(b"\x0a", b"".join(_attributes(b"\x0a", attributes)))


_SCOPE = _field(b"\x0a", _field(b"\x0a", b"a2amesh"))
_FLAGS_LOCAL = b"\x85\x01" + (0x100).to_bytes(4, "little")  # field 16 (fixed32): the parent is known local
_FLAGS_REMOTE = b"\x85\x01" + (0x300).to_bytes(4, "little")  # … and remote
_KINDS = [b"\x30" + _SMALL[kind + 1] for kind in range(5)]
_STATUS_UNSET = b"\x7a\x00"  # an empty status, as the SDK's encoder writes it
_TAIL_LOCAL = _STATUS_UNSET + _FLAGS_LOCAL  # a span's last fields when its status is unset (most spans)
_TAIL_REMOTE = _STATUS_UNSET + _FLAGS_REMOTE
_HEADS: dict[tuple[str, int], bytes] = {}


def _head(name: str, kind: int) -> bytes:
    """A span's name and kind fields (kept for the names a process uses: ``task echo``, ``node n1``)."""
    head = _HEADS.get((name, kind))
    if head is None:
        head = _field(b"\x2a", name.encode()) + _KINDS[kind]
        if len(_HEADS) < 1000:
            _HEADS[(name, kind)] = head
    return head


def _encode_span(span: Any) -> bytes:
    """One Span message, its length-delimited field in ScopeSpans included."""
    ctx = span._ctx
    trace_id = ctx[0]
    parent = span.parent
    if parent is None:
        ids = _PACK_IDS(b"\x0a\x10", trace_id >> 64, trace_id & _M64, b"\x12\x08", ctx[1])
    else:
        ids = _PACK_IDS_PARENT(
            b"\x0a\x10", trace_id >> 64, trace_id & _M64, b"\x12\x08", ctx[1], b"\x22\x08", parent[1]
        )
    kind = span.kind._value_  # the API's INTERNAL..CONSUMER are 0..4, OTLP's 1..5 (an enum's .value is a call)
    parts = [ids, _head(span.name, kind), _PACK_TIMES(b"\x39", span.start_time, b"\x41", span.end_time)]
    append = parts.append
    get = _FIELDS.get
    # its attributes (field 9): a field made before is looked up by the attribute's (key, value) item as it is
    # (a str or an int value: 1 == 1.0 == True, so a hit of another type is made anew)
    for item in span.attributes.items():
        try:
            pair = get(item)
        except TypeError:  # an unhashable value (a list)
            pair = None
        if pair is None or (type(item[1]) is not str and type(item[1]) is not int):
            pair = _attribute_field(item)
        append(pair)
    for event in span.events:
        body = [b"\x09", _PACK_Q(event.timestamp), _field(b"\x12", event.name.encode())]
        body += _attributes(b"\x1a", event.attributes or {})
        parts.append(_field(b"\x5a", b"".join(body)))
    status = span.status
    remote = parent is not None and parent[2]  # (a SpanContext is a tuple: its is_remote is a property call)
    if status is not span.unset and status.status_code._value_:
        code = status.status_code._value_
        description = status.description
        body = (_field(b"\x12", description.encode()) if description else b"") + b"\x18" + _SMALL[code]
        parts.append(_field(b"\x7a", body))
        parts.append(_FLAGS_REMOTE if remote else _FLAGS_LOCAL)
    else:
        parts.append(_TAIL_REMOTE if remote else _TAIL_LOCAL)
    data = b"".join(parts)
    n = len(data)
    return (_SPAN_LEN[n] if n < 1024 else b"\x12" + _varint(n)) + data


def encode_spans(resource: bytes, spans: Sequence[Any]) -> bytes:
    """An ExportTraceServiceRequest of ``spans`` (this library's) under one resource (:func:`encode_resource`)."""
    scope_spans = _field(b"\x12", _SCOPE + b"".join([_encode_span(s) for s in spans]))
    return _field(b"\x0a", resource + scope_spans)
