"""Our models → protobuf by the compiled plan: the message protobuf's ``ParseDict`` gives, for every part kind."""

from __future__ import annotations

from typing import Any, cast

import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf.descriptor import Descriptor
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message as ProtoMessage

from a2amesh.gateway import conversion
from a2amesh.protocol import ListTasksResponse, Message, StreamResponse, Task
from a2amesh.protocol.parts import Part
from a2amesh.protocol.task import Artifact, TaskState, TaskStatus

PARTS = [
    Part(text="hello", metadata={"k": [1, 2.5, None, True, {"x": "y"}]}),
    Part(data={"n": 1, "nested": {"list": [1, "a", None, False]}, "big": 2**40}),
    Part(data=[1, 2, 3]),
    Part(data="a string"),
    Part(url="artifact://x/y", media_type="image/png", filename="y.png"),
    Part(raw="AP8gYmluYXJ5IP4=", media_type="application/octet-stream"),
]


def _task(state: str = "TASK_STATE_COMPLETED") -> Task:
    agent = Message(message_id="m2", role="ROLE_AGENT", parts=PARTS[:2], context_id="c", task_id="t")
    user = Message(
        message_id="m1",
        role="ROLE_USER",
        parts=PARTS,
        context_id="c",
        task_id="t",
        metadata={"a": 1},
        extensions=["urn:x"],
        reference_task_ids=["t0"],
    )
    return Task(
        id="t",
        context_id="c",
        status=TaskStatus(state=TaskState(state), message=agent, timestamp="2026-11-25T14:12:00.123456Z"),
        artifacts=[Artifact(artifact_id="a1", name="out", description="d", parts=PARTS, metadata={"m": "v"})],
        history=[user, agent],
        metadata={"workflow": {"run": "r1"}},
    )


def _reference(data: Any, proto: type[ProtoMessage]) -> ProtoMessage:
    out = proto()
    ParseDict(data, out, ignore_unknown_fields=True)
    return out


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


@pytest.mark.parametrize("state", ["TASK_STATE_COMPLETED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"])
def test_task_as_parse_dict(state: str) -> None:
    task = _task(state)
    built = conversion.task_to_proto(task)
    assert built == _reference(_dump(task), pb.Task)
    by_plan = conversion._build(_dump(task), cast(Descriptor, pb.Task.DESCRIPTOR))
    assert by_plan == built  # by the plan, not the fallback
    assert built.status.state == pb.TaskState.Value(state)
    assert built.history[0].parts[5].raw == b"\x00\xff binary \xfe"


def test_minimal_task_and_events_as_parse_dict() -> None:
    minimal = Task(id="t", status=TaskStatus(state=TaskState("TASK_STATE_SUBMITTED")))
    assert conversion.task_to_proto(minimal) == _reference(_dump(minimal), pb.Task)
    task = _task()
    for event in (
        {"task": _dump(task)},
        {"message": _dump(task.history[0]) if task.history else {}},
        {"statusUpdate": {"taskId": "t", "contextId": "c", "status": _dump(task.status), "metadata": {"x": 1}}},
        {
            "artifactUpdate": {
                "taskId": "t",
                "contextId": "c",
                "artifact": _dump(task.artifacts[0]) if task.artifacts else {},
                "append": True,
                "lastChunk": False,
            }
        },
    ):
        response = StreamResponse.model_validate(event)
        key = next(iter(event))
        reference = _reference(_dump(response), pb.StreamResponse)
        assert conversion.event_to_proto(response) == getattr(reference, reference.WhichOneof("payload") or key)


def test_list_response_as_parse_dict() -> None:
    response = ListTasksResponse.model_validate(
        {"tasks": [_dump(_task())], "nextPageToken": "p2", "pageSize": 1, "totalSize": 7}
    )
    assert conversion.list_response_to_proto(response) == _reference(_dump(response), pb.ListTasksResponse)


def test_a_type_without_a_plan_goes_to_parse_dict() -> None:
    """Cards hold maps (security schemes, OAuth scopes): no plan; ParseDict converts them, the same as before."""
    with pytest.raises(conversion._NoPlan):
        conversion._compile(cast(Descriptor, pb.AgentCard.DESCRIPTOR))
