"""Shortcuts of the agent's per-task path give the same results as the general code they stand in for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg as NatsMsg
from nats.errors import BadHeaderError, NotJSMessageError

from a2amesh.agent.runs import Bounded as _Bounded
from a2amesh.agent.runs import Run as _Run
from a2amesh.agent.runs import Target as _Target
from a2amesh.bus.nats import _delivery_and_stream_seq
from a2amesh.bus.nats_client import _Client, client_class
from a2amesh.protocol import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from a2amesh.rpc import encode_task_result
from a2amesh.store.tasks import task_record_json
from a2amesh.worker.results import encoded_size

HEADER_BLOCKS = [
    b"A2A-Reply-To: ns.a2a.v1.reply.i.c.x\r\nNats-Msg-Id:abc\r\nA2A-Call-Depth:\t2\r\n\r\n",
    b"Bad Name: 1\r\nX\x1cY: 2\r\nTab\tName: 3\r\n\xffbad: 4\r\nok: \xc3\xa9\xff \r\nno colon\r\n\r\n",
    b"  Spaced  :  value with : colon  \r\n: empty name\r\nEmpty:\r\n\r\n",
    b"",
]


@pytest.mark.parametrize("raw", HEADER_BLOCKS, ids=repr)
def test_headers_parsed_as_nats_py_parses_them(raw: bytes) -> None:
    assert _Client._parse_header_lines(raw) == NatsClient._parse_header_lines(raw)


PUBLISHED_HEADERS: list[dict[str, Any] | None] = [
    None,
    {},
    {"A2A-Reply-To": "ns.a2a.v1.reply.i.c.x", "Nats-Msg-Id": "t:1:1", "A2A-Attempt": "1", "A2A-Final": "true"},
    {"  Spaced ": "  value\r\nwith newlines\n ", "": "skipped", "   ": "also skipped", "Utf": "é ✓"},
]


async def _published(client: NatsClient, subject: str, reply: str, payload: bytes, headers: Any) -> bytes:
    sent: list[bytes] = []

    async def capture(command: bytes, priority: bool = False) -> None:
        sent.append(command)

    client._send_command = capture  # type: ignore[method-assign,assignment]
    client._flush_queue = None
    await client._send_publish(subject, reply, payload, len(payload), headers)
    (command,) = sent
    return command


@pytest.mark.parametrize("headers", PUBLISHED_HEADERS, ids=repr)
@pytest.mark.parametrize("reply", ["", "_INBOX.x.1"])
async def test_publish_written_as_nats_py_writes_it(headers: dict[str, Any] | None, reply: str) -> None:
    payload = b'{"a":"\xc3\xa9"}'
    ours = await _published(_Client(), "ns.subject", reply, payload, headers)
    assert ours == await _published(NatsClient(), "ns.subject", reply, payload, headers)


@pytest.mark.parametrize("bad", ["Bad Name", "X:Y", "Ä"])
async def test_a_bad_header_name_is_refused_as_nats_py_refuses_it(bad: str) -> None:
    for client in (_Client(), NatsClient()):
        with pytest.raises(BadHeaderError):
            await _published(client, "s", "", b"", {bad: "v"})


def _msg(reply: str) -> NatsMsg:
    return NatsMsg(None, subject="s", reply=reply, data=b"")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.tasks.agent-echo.3.12345.678.1732730000000000000.9",
        "$JS.ACK._.HASH.tasks.agent-echo.2.12345.678.1732730000000000000.9.token",
        "$JS.ACK.dom.HASH.tasks.agent-echo.1.7.8.1732730000000000000.0",
    ],
)
def test_delivery_and_stream_seq_as_in_the_metadata(reply: str) -> None:
    meta = _msg(reply).metadata
    assert _delivery_and_stream_seq(_msg(reply)) == (meta.num_delivered, meta.sequence.stream)


@pytest.mark.parametrize("reply", ["", "_INBOX.abc", "$JS.ACK.too.few"])
def test_a_message_not_from_jetstream_is_refused(reply: str) -> None:
    with pytest.raises(NotJSMessageError):
        _delivery_and_stream_seq(_msg(reply))


def _final(history: int) -> Task:
    messages = [
        Message(message_id=f"m{i}", role=Role.USER, parts=[Part.of_data({"i": i, "t": "é"})]) for i in range(history)
    ]
    return Task(
        id="t",
        context_id="c",
        status=TaskStatus(
            state=TaskState.COMPLETED,
            timestamp="2026-11-27T17:00:00.000Z",
            message=Message(message_id="s", role=Role.AGENT, parts=[Part.of_data({"output": 1})]),
        ),
        artifacts=[Artifact(artifact_id="a", name="result", parts=[Part.of_data({"v": [1, None]})])],
        history=messages or None,
        metadata={"k": "v"},
    )


@pytest.mark.parametrize("history", [0, 1, 3])
@pytest.mark.parametrize("history_length", [None, 0, 1, 2, 5])
def test_task_json_with_history_as_the_copy(history: int, history_length: int | None) -> None:
    task = _final(history)
    assert task.json_with_history(history_length) == task.with_history(history_length).to_json_bytes()


def _run(task: Task) -> _Run:
    run = _Run.__new__(_Run)  # no running loop here for the default futures: only what answers need
    run.task, run.targets, run.encoded = task, [_Target("s", primary=True)], None
    return run


@pytest.mark.parametrize("encoded", [False, True])
@pytest.mark.parametrize("history_length", [None, 0, 1, 5])
@pytest.mark.parametrize("request_id", ["r", 7, None])
def test_task_answers_as_encode_task_result(encoded: bool, history_length: int | None, request_id: Any) -> None:
    task = _final(3)
    run = _run(task)
    if encoded:
        record = task.to_json_bytes()
        assert record == task_record_json(task).encode()  # the stored record: byte for byte
        run.encoded = (task, record)
    assert run.task_result(request_id, history_length) == encode_task_result(
        request_id, task.with_history(history_length)
    )
    assert run.task_result(request_id) == encode_task_result(request_id, task)


@pytest.mark.parametrize(
    "output",
    [{"a": [1, 2.5, None, True, "é\u2028"]}, "text é", [1, {"b": "c"}], 2**70, {"1": None}, 12.0],
    ids=repr,
)
def test_encoded_size_is_the_compact_json_size(output: Any) -> None:
    import json

    expected = len(
        output.encode()
        if isinstance(output, str)
        else json.dumps(output, ensure_ascii=False, separators=(",", ":")).encode()
    )
    assert encoded_size(output) == expected


def test_final_task_as_validated() -> None:
    from a2amesh.agent.context import TaskOutcome
    from a2amesh.agent.host import AgentHost

    host = AgentHost.__new__(AgentHost)
    task = _final(1).model_copy(update={"status": TaskStatus(state=TaskState.WORKING), "artifacts": None})
    outcome = TaskOutcome(TaskState.COMPLETED, output={"x": 1}, message="done", status_parts=[Part.of_data({"a": 1})])
    final = host._final_task(task, outcome)
    again = Task.model_validate_json(final.to_json_bytes())
    assert again == final
    assert again.to_json_bytes() == final.to_json_bytes()


async def test_a_shutdown_lets_a_worker_storing_its_final_finish() -> None:
    import asyncio
    from types import SimpleNamespace

    from a2amesh.agent.host import AgentHost

    host = AgentHost.__new__(AgentHost)
    host.settings = SimpleNamespace(shutdown_grace=0.01)  # type: ignore[assignment]
    host.log = SimpleNamespace(info=lambda *a, **k: None)
    host._workers, host._finishing = set(), set()
    stored = asyncio.Event()

    async def finishing() -> None:
        host._finishing.add(asyncio.current_task())  # type: ignore[arg-type]
        await asyncio.sleep(0.1)  # the final's write and publish, past the grace
        stored.set()

    async def working() -> None:
        await asyncio.sleep(10)

    final, work = asyncio.create_task(finishing()), asyncio.create_task(working())
    host._workers = {final, work}
    await host._drain_workers()
    assert stored.is_set()
    assert not final.cancelled()
    assert work.cancelled()  # an ordinary worker is cancelled (its message handed back)


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (TaskStatus, {"state": TaskState.WORKING, "timestamp": "2026-11-27T20:00:00.123Z"}),
        (TaskStatus, {"state": TaskState.COMPLETED, "message": Message(message_id="m", role=Role.AGENT, parts=[])}),
        (Artifact, {"artifact_id": "a", "name": "result", "parts": [Part.of_data({"x": [1, "é"]})]}),
        (
            Task,
            {
                "id": "t",
                "context_id": "c",
                "status": TaskStatus(state=TaskState.WORKING),
                "history": [Message(message_id="m", role=Role.USER, parts=[Part.of_text("hi")])],
            },
        ),
        (Task, {"status": TaskStatus(state=TaskState.FAILED), "id": "t", "metadata": {"k": 1}}),
    ],
)
def test_a_built_model_is_the_validated_one(model: Any, values: dict[str, Any]) -> None:
    built, validated = model.built(**values), model(**values)
    assert built == validated
    assert built.model_fields_set == validated.model_fields_set
    assert built.to_json_bytes() == validated.to_json_bytes()
    assert list(built.__dict__) == list(validated.__dict__)


def test_an_updated_model_is_its_model_copy() -> None:
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.WORKING), history=[])
    update: dict[str, Any] = {"status": TaskStatus(state=TaskState.COMPLETED), "artifacts": None, "metadata": {"k": 1}}
    updated, copied = task.updated(**update), task.model_copy(update=update)
    assert updated == copied
    assert updated.model_fields_set == copied.model_fields_set
    assert updated.to_json_bytes() == copied.to_json_bytes()
    assert task.status.state == TaskState.WORKING
    assert task.metadata is None


async def test_a_bounded_wait_times_out_as_asyncio_timeout_does() -> None:
    waits = _Bounded(0.01)
    async with waits.bounded(5):
        await asyncio.sleep(0)  # within its bound: nothing raised
    with pytest.raises(TimeoutError):
        async with waits.bounded(0.02):
            await asyncio.sleep(5)
    assert not waits._waiting
    assert not waits._expired

    async def cancelled_from_outside() -> None:
        async with waits.bounded(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(cancelled_from_outside())
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # a cancel that was not the bound's stays a cancel
    assert not waits._waiting


def test_the_client_overrides_only_the_nats_py_they_were_written_for() -> None:
    """Another nats-py release keeps its own publish and header parsing (its private methods may differ)."""
    assert client_class("2.16.0") is _Client
    assert client_class("2.17.0") is NatsClient
    assert client_class("") is NatsClient
