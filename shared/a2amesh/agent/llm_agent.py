"""LLM agents (SPEC §8): a router/executor tool loop over any OpenAI-compatible endpoint (seed 002).

One task is one :class:`LlmSession`: an optional guardrail decides whether the request is in scope,
then the model is called with the tools (Python functions, the artifact tools, and every peer the
``peers:`` filter allows); the tools it asks for run in parallel and their results go back, until the
model answers without tool calls or ``max_iterations`` rounds have passed. Each round is checkpointed
in the task record, so a redelivered task resumes from its last round instead of running tools again.

The node handler drives the session: it opens it with the workflow instructions of a node call and
asks for further turns in the same conversation when an answer's result is not acceptable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.agent.definition import AgentDefinition, LlmSpec
from a2amesh.agent.llm_client import ChatModel, Completion, ToolCallRequest
from a2amesh.agent.python_agent import import_object
from a2amesh.agent.tools import Tool, ToolOutcome, artifact_tools, invoke_tool, peer_tools, tool_from_function
from a2amesh.agent.usage import Usage
from a2amesh.config import Settings
from a2amesh.errors import ConfigError, LlmError, RequestRejected, StateConflict
from a2amesh.logs import get_logger
from a2amesh.protocol import AgentCard
from a2amesh.protocol.vocabulary import TOOL_END, TOOL_START

__all__ = ["CHECKPOINT_VERSION", "GUARD_PROTOCOL", "LlmAgent", "LlmSession"]

log = get_logger("llm_agent")

CHECKPOINT_VERSION = 1
GUARD_PROTOCOL = (
    "Decide whether the user's latest request is in scope for this assistant, following the policy above. "
    "Answer with exactly one word: IN_SCOPE or OUT_OF_SCOPE."
)
_GUARD_HISTORY = 6
_NO_KEY = "not-needed"


class LlmAgent:
    """An agent whose work is done by a model with tools.

    Args:
        definition: the agent's definition (with an ``llm:`` block).
        model: the chat model to call.
        tools: the agent's own tools (its Python tools and the artifact tools); peers are added per task.
        context_lock_ttl: seconds the per-context lock of a ``history: true`` agent lives between renewals.
    """

    def __init__(
        self, definition: AgentDefinition, *, model: ChatModel, tools: list[Tool], context_lock_ttl: float = 30.0
    ) -> None:
        assert definition.llm is not None, "an LLM agent needs an llm: block"
        self.definition = definition
        self.spec: LlmSpec = definition.llm
        self.model = model
        self.tools = {t.name: t for t in tools}
        self.context_lock_ttl = context_lock_ttl

    @classmethod
    def from_definition(
        cls,
        definition: AgentDefinition,
        *,
        settings: Settings,
        base_dir: Path | None,
        source: str,
        environ: Mapping[str, str] | None = None,
    ) -> LlmAgent:
        """Build the agent: endpoint, key and model from the YAML or the settings, and its Python tools.

        Args:
            definition: the validated definition.
            settings: the process settings (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``A2AMESH_LLM_MODEL``).
            base_dir: the folder of the YAML file (tool modules are found there first).
            source: the file name, for error messages.
            environ: where ``llm.api_key_env`` is looked up (``os.environ`` when None).

        Raises:
            ConfigError: no endpoint or model is configured, the key variable is unset, or a tool cannot be loaded.
        """
        spec = definition.llm
        if spec is None:
            raise ConfigError(source, "llm", "an LLM agent needs an llm: block")
        base_url = spec.base_url or settings.llm_base_url
        if not base_url:
            raise ConfigError(
                source,
                "llm.base_url",
                "no OpenAI-compatible endpoint is configured: set OPENAI_BASE_URL (or llm.base_url in the agent file)",
            )
        model = spec.model or settings.llm_model
        if not model:
            raise ConfigError(source, "llm.model", "no model is configured: set llm.model or A2AMESH_LLM_MODEL")
        if spec.api_key_env:
            env = os.environ if environ is None else environ
            api_key = env.get(spec.api_key_env, "")
            if not api_key:
                raise ConfigError(source, "llm.api_key_env", f"the environment variable {spec.api_key_env} is not set")
        else:
            api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else _NO_KEY
        tools = artifact_tools()
        taken = {t.name for t in tools}
        for ref in spec.tools:
            fn = import_object(ref, base_dir=base_dir, source=source, field="llm.tools")
            if not callable(fn):
                raise ConfigError(source, "llm.tools", f"{ref!r} is not a function")
            tool = tool_from_function(fn, source=source)
            if tool.name in taken:
                raise ConfigError(source, "llm.tools", f"two tools are named {tool.name!r}")
            taken.add(tool.name)
            tools.append(tool)
        chat = ChatModel(
            base_url=base_url,
            api_key=api_key,
            model=model,
            timeout=spec.timeout,
            max_retries=spec.max_http_retries,
            temperature=spec.temperature,
            stream=spec.stream,
        )
        return cls(definition, model=chat, tools=tools, context_lock_ttl=max(settings.ack_wait, 1.0))

    def card(self, namespace: str) -> AgentCard:
        """The agent's card."""
        return self.definition.card(namespace)

    async def run(self, ctx: TaskContext) -> TaskOutcome:
        """Do one task's work (through the node handler, which drives the session)."""
        from a2amesh.agent.node_handler import NodeHandler

        return await NodeHandler(self).run(ctx)

    async def graph_node(self, ctx: TaskContext, request: dict[str, Any]) -> TaskOutcome:
        """Answer as an AGENT node of a graph workflow, in one model call (:mod:`a2amesh.agent.graph_node`)."""
        from a2amesh.agent.graph_node import graph_turn

        return await graph_turn(self, ctx, request)

    async def aclose(self) -> None:
        """Close the HTTP client of the running event loop."""
        await self.model.aclose()

    def tools_for(self, ctx: TaskContext) -> dict[str, Tool]:
        """This agent's tools plus a tool per peer currently in the mesh that ``peers:`` allows."""
        tools = dict(self.tools)
        if self.definition.peers:
            cards = ctx.client.cards()
            for tool in peer_tools(cards, self.definition.peers, self_name=ctx.agent, taken=set(tools)):
                tools[tool.name] = tool
        return tools

    @contextlib.asynccontextmanager
    async def session(self, ctx: TaskContext, *, instructions: str | None) -> AsyncIterator[LlmSession]:
        """The conversation of one invocation (with the context's history and lock when ``history: true``)."""
        store = ctx.conversations
        if not self.spec.history or store is None:
            s = LlmSession(self, ctx, instructions, [])
            await s.open()
            yield s
            return
        wait = ctx.remaining if ctx.remaining is not None else 300.0
        async with store.lock(self.definition.name, ctx.context_id, ttl=self.context_lock_ttl, timeout=wait) as lock:
            s = LlmSession(self, ctx, instructions, await store.load(self.definition.name, ctx.context_id))
            await s.open()
            yield s
            if s.final_text is not None:
                try:
                    await store.append(lock, s.turn_record())
                except StateConflict as e:
                    log.warning("llm.history_not_saved", error=str(e))


class LlmSession:
    """The state of one invocation's conversation: messages, rounds, turns. Never shared between tasks."""

    def __init__(
        self, agent: LlmAgent, ctx: TaskContext, instructions: str | None, history: list[dict[str, Any]]
    ) -> None:
        self.agent = agent
        self.ctx = ctx
        self.instructions = instructions
        self.history = history
        self.tools = agent.tools_for(ctx)
        self.messages: list[dict[str, Any]] = []
        self.turn = 0
        self.rounds = 0
        self.final_text: str | None = None
        self._user_text = ""

    # setup
    async def open(self) -> None:
        """Restore the last checkpoint of a redelivered task, or start the conversation."""
        self._user_text = render_input(self.ctx.input)
        if self.ctx.attempt > 1 and await self._restore():
            log.info("llm.resumed", turn=self.turn, rounds=self.rounds, messages=len(self.messages))
            return
        self.messages = [
            {"role": "system", "content": self._system_prompt()},
            *self.history,
            {"role": "user", "content": self._user_text},
        ]

    def _system_prompt(self) -> str:
        d = self.agent.definition
        base = self.agent.spec.system_prompt.strip() or f"You are {d.name}. {d.description}".strip()
        return base if not self.instructions else f"{base}\n\n{self.instructions}"

    async def _restore(self) -> bool:
        data = await self.ctx.load_checkpoint()
        if not data or data.get("v") != CHECKPOINT_VERSION or data.get("message_id") != self.ctx.message.message_id:
            return False
        self.messages = list(data["messages"])
        self.turn = int(data["turn"])
        self.rounds = int(data["rounds"])
        self.ctx.usage.restore(Usage.from_json(data.get("usage")))
        return True

    async def _checkpoint(self) -> None:
        await self.ctx.save_checkpoint(
            {
                "v": CHECKPOINT_VERSION,
                "message_id": self.ctx.message.message_id,
                "turn": self.turn,
                "rounds": self.rounds,
                "messages": self.messages,
                "usage": self.ctx.usage.to_json(),
            }
        )

    def turn_record(self) -> list[dict[str, Any]]:
        """What the conversation history keeps of this task: the request and the final answer."""
        return [
            {"role": "user", "content": self._user_text},
            {"role": "assistant", "content": self.final_text or ""},
        ]

    # turns
    async def answer(self, feedback: str | None) -> str:
        """Start the next turn and return the model's final text.

        Raises:
            RequestRejected: the guardrail found the request out of scope (first turn only).
            LlmError: the endpoint failed, or ``max_iterations`` rounds passed without a final answer.
        """
        if self.turn == 0:
            await self._guard()
        if feedback:
            self.messages.append({"role": "user", "content": feedback})
        self.turn += 1
        self.rounds = 0
        if feedback:
            await self._checkpoint()
        return await self._loop()

    async def resume(self) -> str:
        """Finish the turn the restored checkpoint was taken in."""
        return await self._loop()

    async def _guard(self) -> None:
        guard = self.agent.spec.guardrail
        if guard is None:
            return
        messages = [
            {"role": "system", "content": f"{guard.prompt.strip()}\n\n{GUARD_PROTOCOL}"},
            *self.history[-_GUARD_HISTORY:],
            {"role": "user", "content": self._user_text},
        ]
        c = await self.agent.model.complete(messages, stream=False)
        self._record(c, "guardrail")
        verdict = (c.content or "").upper()
        if "OUT_OF_SCOPE" in verdict or "IN_SCOPE" not in verdict:
            log.info("llm.guardrail_rejected", verdict=(c.content or "")[:80])
            raise RequestRejected(guard.reject_message)

    async def _loop(self) -> str:
        limit = self.agent.spec.max_iterations
        specs = [t.spec() for t in self.tools.values()]
        on_delta = self.ctx.emit_delta if self.ctx.delta is not None else None
        last_tools: list[str] = []
        while self.rounds < limit:
            c = await self.agent.model.complete(self.messages, tools=specs or None, on_delta=on_delta)
            self._record(c, "chat")
            self.rounds += 1
            self.messages.append(c.message())
            if not c.tool_calls:
                self.final_text = c.content or ""
                return self.final_text
            last_tools = [call.name for call in c.tool_calls]
            if len(c.tool_calls) == 1:  # the usual round: no task and gathering future for one call
                outcomes = [await self._run_tool(c.tool_calls[0])]
            else:
                outcomes = await asyncio.gather(*(self._run_tool(call) for call in c.tool_calls))
            for call, outcome in zip(c.tool_calls, outcomes, strict=True):
                self.messages.append({"role": "tool", "tool_call_id": call.id, "content": outcome.content})
            # stored before the next model call: a task redelivered after a crash from here on resumes
            # with these tool results instead of running the tools again
            await self._checkpoint()
        raise LlmError(
            f"the model gave no final answer within max_iterations={limit} rounds of tool calls"
            + (f" (last tools: {', '.join(last_tools)})" if last_tools else "")
        )

    def _record(self, c: Completion, purpose: str) -> None:
        self.ctx.usage.add(
            model=c.model,
            purpose=purpose,
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            total_tokens=c.total_tokens,
        )

    async def _run_tool(self, call: ToolCallRequest) -> ToolOutcome:
        await self._status({"type": TOOL_START, "tool": call.name, "call_id": call.id})
        tool = self.tools.get(call.name)
        if tool is None:
            outcome = ToolOutcome(
                f"error: there is no tool named {call.name!r}; the tools are: {', '.join(sorted(self.tools))}", False
            )
        else:
            outcome = await invoke_tool(tool, call.arguments, self.ctx, call_id=call.id)
        # a failed tool call is news; a successful one is routine (the task's own log line follows)
        (log.debug if outcome.ok else log.info)("llm.tool", tool=call.name, ok=outcome.ok)
        await self._status({"type": TOOL_END, "tool": call.name, "call_id": call.id, "ok": outcome.ok})
        return outcome

    async def _status(self, data: dict[str, Any]) -> None:
        try:
            await self.ctx.emit_status(data=data)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # progress is best effort; the work goes on
            log.debug("llm.status_dropped", error=str(e) or type(e).__name__)


def render_input(value: Any) -> str:
    """The user message for an input: its text, or the JSON in a fenced block."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"text"} and isinstance(value["text"], str):
        return value["text"]
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n```"
