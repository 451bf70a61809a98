"""The peer figure of the gateway bench: the stock a2a-sdk server with an in-memory echo ``AgentExecutor``.

No durability, no bus: ``DefaultRequestHandler`` over ``InMemoryTaskStore``, JSON-RPC at ``/``, served by
uvicorn like the gateway. ``python bench/sdk_echo_server.py PORT``.
"""

from __future__ import annotations

import sys

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette


class Echo(AgentExecutor):
    """Completes every task at once with its message's parts as the ``result`` artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        assert context.message is not None
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        task = pb.Task(id=context.task_id, context_id=context.context_id, history=[context.message])
        task.status.state = pb.TASK_STATE_SUBMITTED
        await event_queue.enqueue_event(task)
        await updater.add_artifact(list(context.message.parts), name="result")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def app(port: int) -> Starlette:
    card = pb.AgentCard(
        name="echo",
        description="in-memory echo",
        version="1.0",
        supported_interfaces=[pb.AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC")],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[pb.AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    return Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, rpc_url="/")])


if __name__ == "__main__":
    port = int(sys.argv[1])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning", access_log=False)
