"""SubscribeToTask (0.3: resubscribe) of a finished task through the gateway, with the official a2a-sdk clients.

A2A (1.0 §3.1.6, and 0.3's tasks/resubscribe) has nothing to stream for a task in a terminal state: the answer
is UnsupportedOperationError, before any event, in the 1.0 and 0.3 forms over JSON-RPC and HTTP+JSON. Before
issue 35 (item 5) the 0.3 HTTP+JSON route answered 200 text/event-stream and then cut the connection.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.client import Client as SdkClient
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import UnsupportedOperationError

from tests.support.waiting import within


async def echo(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"got": input}


@contextlib.asynccontextmanager
async def versioned_client(url: str, binding: str, version: str) -> AsyncIterator[SdkClient]:
    """An official client of the gateway's card, made to speak ``version`` (its 0.3 transports are the SDK's
    compat layer): the card's interfaces (the gateway serves both versions at the same URLs) say ``version``."""
    async with httpx.AsyncClient(timeout=30) as http:
        factory = ClientFactory(ClientConfig(streaming=True, httpx_client=http, supported_protocol_bindings=[binding]))
        card = await A2ACardResolver(http, url).get_agent_card(http_kwargs={"headers": {"A2A-Version": "1.0"}})
        for interface in card.supported_interfaces:
            interface.protocol_version = version
        client = factory.create(card)
        try:
            yield client
        finally:
            await client.close()


@pytest.mark.parametrize("version", ["1.0", "0.3"])
@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_subscribe_to_finished_task_is_unsupported_operation(
    agent_host: Any, gateway: Any, version: str, binding: str
) -> None:
    await agent_host("echo", echo)
    url = await gateway()
    async with versioned_client(f"{url}/agents/echo", binding, version) as c:
        msg = pb.Message(message_id=uuid.uuid4().hex, role=pb.ROLE_USER)
        msg.parts.add().data.struct_value.update({"v": 1})
        events = [e async for e in c.send_message(pb.SendMessageRequest(message=msg))]
        task_id = events[-1].task.id or events[-1].status_update.task_id
        assert task_id, events

        async def subscribe() -> list[pb.StreamResponse]:
            return [e async for e in c.subscribe(pb.SubscribeToTaskRequest(id=task_id))]

        with pytest.raises((UnsupportedOperationError, A2AClientError)) as raised:
            await within(subscribe(), 15, "the answer to SubscribeToTask of a finished task")
        error = raised.value  # a cut stream was A2AClientError "peer closed connection ..."
        assert isinstance(error, UnsupportedOperationError), repr(error)
        assert "TASK_STATE_COMPLETED" in str(error), repr(error)
        # the gateway keeps serving: the finished task is still there
        task = await c.get_task(pb.GetTaskRequest(id=task_id))
        assert task.status.state == pb.TASK_STATE_COMPLETED
