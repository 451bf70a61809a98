"""The ``a2amesh builtins`` process: the built-in agents served side by side, each an ordinary agent host."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from a2amesh.agent.context import TaskContext
from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.host import AgentHost
from a2amesh.agent.node_handler import NodeHandler
from a2amesh.agent.python_agent import PythonAgent
from a2amesh.builtins.agents import BuiltinAgents, ModelSettings
from a2amesh.builtins.image import ImageAgent
from a2amesh.builtins.memory import MemoryAgents
from a2amesh.builtins.rag import RagAgent
from a2amesh.bus.nats import Bus
from a2amesh.config import Settings
from a2amesh.lifecycle import Worker
from a2amesh.service import ProcessService
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore
from a2amesh.store.redis import Redis
from a2amesh.workflow.dag.nodes import BUILTIN_AGENTS

__all__ = ["BuiltinsWorker", "builtin_runtimes", "builtins_service"]

_DESCRIPTIONS = {
    "embed": "Built-in: embeds a text or a list of texts (embed workflow nodes).",
    "memory_read": "Built-in: semantic memory per agent and user: writes entries and finds the closest ones.",
    "rag": "Built-in: retrieves the chunks of a vector store closest to a query, and optionally answers from them.",
    "image": "Built-in: generates images through an OpenAI-compatible images endpoint, saved as artifacts.",
    "llm": "Built-in: one model call of an llm workflow node (messages, system prompt, tools, structured output).",
    "tools": "Built-in: runs the tool calls of an llm workflow node, arguments checked against each tool's schema.",
    "tool_loop": "Built-in: the model ↔ tools loop of a tool_loop workflow node, checkpointed every round.",
}


def builtin_runtimes(
    agents: BuiltinAgents, memory: MemoryAgents, rag: RagAgent, image: ImageAgent
) -> list[NodeHandler]:
    """One runtime per built-in agent, each wrapped in the node handler like any agent."""
    work: dict[str, Callable[[Any, TaskContext], Any]] = {
        "llm": agents.llm,
        "tools": agents.tools,
        "tool_loop": agents.tool_loop,
        "embed": memory.embed,
        "memory_read": memory.memory,
        "rag": rag.retrieve,
        "image": image.generate,
    }
    runtimes = []
    for node_type, agent_name in BUILTIN_AGENTS.items():
        if node_type not in work:
            continue  # served by the agent of another node type (memory_write: builtin-memory)
        definition = AgentDefinition(
            name=agent_name,
            description=_DESCRIPTIONS[node_type],
            handler=f"a2amesh.builtins.agents:{node_type}",
            max_retries=0,
        )
        runtimes.append(NodeHandler(PythonAgent(definition, work[node_type])))
    return runtimes


class BuiltinsWorker(Worker):
    """Serves every built-in agent from one process (one agent host each, sharing the connections)."""

    def __init__(self, agents: BuiltinAgents, *, bus: Bus, redis: Redis, settings: Settings) -> None:
        super().__init__()
        self.agents = agents
        self.memory = memory = MemoryAgents(
            MemoryStore(redis, Keys(settings.namespace)),
            agents.embedder,
            embedding_model=agents.models.default_embedding_model,
            bus=bus,
        )
        rag = RagAgent(memory, agents)
        image = ImageAgent(agents.chat, model=agents.models.image_model)
        runtimes = builtin_runtimes(agents, memory, rag, image)
        self.hosts = [AgentHost(r, bus=bus, redis=redis, settings=settings) for r in runtimes]

    async def run(self) -> None:
        """Serve until asked to stop; ``ready`` once every host serves."""
        runs: list[asyncio.Task[None]] = []
        try:
            await self.memory.store.index()  # where memory is searched: the server's vector index, or here
            started = await asyncio.gather(*(host.start(self._stop) for host in self.hosts), return_exceptions=True)
            runs = [task for task in started if isinstance(task, asyncio.Task)]
            failed = next((error for error in started if isinstance(error, BaseException)), None)
            if failed is not None:
                raise failed  # one that cannot serve stops the others (finally)
            self.ready.set()
            await asyncio.gather(*runs)
        finally:
            self._stop.set()
            await asyncio.gather(*runs, return_exceptions=True)
            await self.agents.aclose()
            self._stopped.set()


def builtins_service(settings: Settings, models: ModelSettings | None = None) -> ProcessService:
    """The process of ``a2amesh builtins``."""
    agents = BuiltinAgents(models or ModelSettings.from_settings(settings))
    return ProcessService(
        settings,
        name="builtins",
        build=lambda bus, redis: BuiltinsWorker(agents, bus=bus, redis=redis, settings=settings),
    )
