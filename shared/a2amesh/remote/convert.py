"""Between the a2a-sdk's protobuf types and our pydantic models, for the proxy.

Both sides speak ProtoJSON, so a conversion is a JSON round trip. protobuf carries the numbers of ``data`` parts
and ``metadata`` as doubles, and its Python printer writes an integral double as ``2.0``: integral floats up to
2^53 come back as integers (what the remote sent as ``2`` reaches the node as ``2``; JSON does not tell ``2.0``
from ``2``).
"""

from __future__ import annotations

import math
from typing import Any

from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict, ParseDict

from a2amesh.protocol import Message, Part, Task
from a2amesh.protocol.vocabulary import CONTROL_PART_TYPES

__all__ = ["message_to_proto", "part_from_proto", "parts_from_proto", "task_from_proto", "to_json"]

_EXACT = 2**53


def _integral(value: Any) -> Any:
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= _EXACT:
            return int(value)
        return value
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def to_json(message: Any) -> dict[str, Any]:
    """The ProtoJSON form of a protobuf message, integral numbers as integers."""
    result = _integral(MessageToDict(message))
    assert isinstance(result, dict)
    return result


def message_to_proto(message: Message, parts: list[Part]) -> pb.Message:
    """The SDK message to send for ``message`` with ``parts`` (the ids are set by the caller)."""
    data = message.to_json_dict()
    data["parts"] = [p.to_json_dict() for p in parts]
    for key in ("taskId", "contextId", "referenceTaskIds", "extensions"):
        data.pop(key, None)
    return ParseDict(data, pb.Message(), ignore_unknown_fields=True)


def part_from_proto(part: pb.Part) -> Part:
    """One of our parts from an SDK part."""
    return Part.model_validate(to_json(part))


def parts_from_proto(parts: Any) -> list[Part]:
    """Our parts from SDK parts, leaving out what a workflow would read as its own control parts."""
    result = []
    for p in parts:
        part = part_from_proto(p)
        if isinstance(part.data, dict) and part.data.get("type") in CONTROL_PART_TYPES:
            continue
        result.append(part)
    return result


def task_from_proto(task: pb.Task) -> Task:
    """Our task from an SDK task."""
    return Task.model_validate(to_json(task))
