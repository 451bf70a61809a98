"""The node handler (SPEC §4): wraps every agent runtime so that any agent can run as a workflow node.

A request whose message holds a ``workflow_node_request`` DataPart (in any position) is a node call:

1. the input (a DataPart, or an ``artifact://`` URL part that is loaded) is validated against the
   effective input schema (request > agent > none); failure answers at once, the agent never runs;
2. an LLM agent gets workflow instructions in its system prompt for this invocation only, saves its
   output with ``save_artifact`` and ends with a result embed; the handler loads the named artifact
   (latest version unless the embed names one) and validates it against the effective output schema;
   a missing or malformed embed, a missing artifact or an invalid output re-prompts the model in the
   same conversation with the errors quoted (``max_retries``: request > agent > 2);
3. a Python agent's return value is the output, validated the same way; raising
   :class:`~a2amesh.errors.RetryWithFeedback` calls it again with ``ctx.feedback`` set;
4. the task finishes with the output as ``artifacts[0]`` (an artifact URL above the inline threshold)
   and a ``workflow_node_result`` DataPart in the final status message.

Without the control part the agent answers as a plain A2A agent: the input is resolved and validated
against the agent's own schema, and an LLM agent's answer text (without embeds) is the output.

Every piece of state lives in one :class:`_Invocation` per call, so concurrent invocations on one
process never see each other's schemas, instructions or artifacts.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from a2amesh.agent.context import TaskContext, TaskOutcome
from a2amesh.agent.definition import AgentDefinition
from a2amesh.agent.embeds import (
    EmbedError,
    format_failure_embed,
    format_success_embed,
    parse_result_embed,
    strip_result_embeds,
)
from a2amesh.agent.python_agent import AgentRuntime, PythonAgent
from a2amesh.diagnostics import SchemaIssue, expects_structured, format_issues, schema_problem, validate
from a2amesh.errors import (
    ArtifactError,
    ArtifactNotFound,
    InputRequired,
    LlmError,
    RequestRejected,
    RetryWithFeedback,
    StateConflict,
    StoreUnavailable,
)
from a2amesh.logs import get_logger
from a2amesh.protocol import AgentCard, Part, TaskState, codes
from a2amesh.protocol.vocabulary import CONTROL_PART_TYPES, GRAPH_NODE_REQUEST, NODE_REQUEST, NODE_RESULT
from a2amesh.store.artifacts import ARTIFACT_NAME_RE, ArtifactMeta, StoredArtifact
from a2amesh.worker.decode import control_part
from a2amesh.worker.results import RESULT_ARTIFACT, encoded_size, spill_large_file, url_part

__all__ = [
    "DEFAULT_OUTPUT_NAME",
    "NODE_REQUEST",
    "NODE_RESULT",
    "ModelSession",
    "NodeHandler",
    "NodeRequest",
    "SessionRuntime",
    "node_instructions",
    "retry_feedback",
]

log = get_logger("node")

DEFAULT_OUTPUT_NAME = "output.json"


class NodeRequest(BaseModel):
    """The ``workflow_node_request`` control part (snake_case or camelCase keys; unknown keys ignored)."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True, frozen=True)

    type: Literal["workflow_node_request"]
    execution_id: str | None = None
    node_id: str | None = None
    workflow_name: str | None = None
    input_schema: dict[str, Any] | None = Field(default=None, description="Overrides the agent's input schema.")
    output_schema: dict[str, Any] | None = Field(default=None, description="Overrides the agent's output schema.")
    instruction: str | None = Field(default=None, description="What this node asks of the agent.")
    max_retries: int | None = Field(default=None, ge=0, description="Overrides the agent's max_retries.")
    suggested_output_name: str | None = Field(default=None, description="Artifact name the agent should save.")


class ModelSession(Protocol):
    """One conversation with a model, held open across the retries of one invocation."""

    turn: int
    """Turns started so far: 0 for a fresh session, k when restored from a checkpoint taken in turn k."""

    async def answer(self, feedback: str | None) -> str:
        """Start the next turn (with ``feedback`` as a new user message, if given) and return the final text."""
        ...

    async def resume(self) -> str:
        """Finish the turn a checkpoint was taken in and return the final text."""
        ...


@runtime_checkable
class SessionRuntime(Protocol):
    """A runtime driven through model sessions (the LLM agent), so the handler can retry in one conversation."""

    definition: AgentDefinition

    def card(self, namespace: str) -> AgentCard:
        """The card to publish."""
        ...

    async def run(self, ctx: TaskContext) -> TaskOutcome:
        """Do one task's work without the node handler."""
        ...

    def session(self, ctx: TaskContext, *, instructions: str | None) -> AbstractAsyncContextManager[ModelSession]:
        """Open the conversation of one invocation; ``instructions`` are appended to the system prompt."""
        ...


@dataclass
class _Invocation:
    """The state of one call: never shared with another call."""

    ctx: TaskContext
    node: NodeRequest | None
    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any] | None
    max_retries: int
    output_name: str
    attempts: int = 0
    issues: list[SchemaIssue] = field(default_factory=list)


@dataclass
class _Verdict:
    """What one answer of the model came to."""

    value: Any = None
    meta: ArtifactMeta | None = None
    ok: bool = False
    final_error: str | None = None
    errors: list[str] = field(default_factory=list)
    issues: list[SchemaIssue] = field(default_factory=list)


class NodeHandler:
    """Wraps a runtime: detects node calls, validates input and output, retries, builds the node result.

    It is itself an :class:`~a2amesh.agent.python_agent.AgentRuntime` (``definition``, ``card()``, ``run()``),
    so the host runs it like any runtime.
    """

    def __init__(self, runtime: AgentRuntime) -> None:
        self.runtime = runtime
        self.definition = runtime.definition

    def card(self, namespace: str) -> AgentCard:
        """The wrapped runtime's card."""
        return self.runtime.card(namespace)

    async def aclose(self) -> None:
        """Release what the wrapped runtime holds (an LLM agent's HTTP connections)."""
        close = getattr(self.runtime, "aclose", None)
        if close is not None:
            await close()

    async def run(self, ctx: TaskContext) -> TaskOutcome:
        """Do one task's work: a node call when the message holds ``workflow_node_request``, else a plain call.
        A graph workflow's ``graph_node_request`` goes to a runtime that answers those itself (an LLM agent)."""
        graph_node = getattr(self.runtime, "graph_node", None)
        graph = control_part(ctx.message, GRAPH_NODE_REQUEST) if graph_node is not None else None
        if graph is not None:
            assert graph_node is not None
            answered: TaskOutcome = await graph_node(ctx, graph)
            if ctx.usage:
                answered.metadata = {**(answered.metadata or {}), codes.EXT_USAGE: ctx.usage.to_json()}
            return answered
        raw = control_part(ctx.message, NODE_REQUEST)
        node: NodeRequest | None = None
        if raw is not None:
            try:
                node = NodeRequest.model_validate(raw)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(p) for p in err["loc"]) or "(top level)"
                inv = self._invocation(ctx, None)
                return self._failure(inv, f"invalid workflow_node_request: {where}: {err['msg']}", node_call=True)
        inv = self._invocation(ctx, node)
        outcome = await self._run(inv)
        if ctx.usage:
            outcome.metadata = {**(outcome.metadata or {}), codes.EXT_USAGE: ctx.usage.to_json()}
        return outcome

    def _invocation(self, ctx: TaskContext, node: NodeRequest | None) -> _Invocation:
        d = self.definition
        name = DEFAULT_OUTPUT_NAME
        if node is not None:
            for candidate in (node.suggested_output_name, f"{node.node_id}.json" if node.node_id else None):
                if candidate and ARTIFACT_NAME_RE.match(candidate):
                    name = candidate
                    break
        return _Invocation(
            ctx=ctx,
            node=node,
            input_schema=node.input_schema if node is not None and node.input_schema is not None else d.input_schema,
            output_schema=(
                node.output_schema if node is not None and node.output_schema is not None else d.output_schema
            ),
            max_retries=node.max_retries if node is not None and node.max_retries is not None else d.max_retries,
            output_name=name,
        )

    async def _run(self, inv: _Invocation) -> TaskOutcome:
        for what, schema in (("input_schema", inv.input_schema), ("output_schema", inv.output_schema)):
            problem = None if schema is None else schema_problem(schema)
            if problem:
                return self._failure(inv, f"{what}: {problem}")
        try:
            value = await _resolve_input(inv.ctx)
        except ArtifactError as e:
            return self._failure(inv, f"cannot load the input artifact: {e}")
        inv.ctx.set_input(value)
        issues = validate(value, inv.input_schema)
        if issues:
            inv.issues = issues
            return self._failure(inv, "the input does not match the input schema:\n" + format_issues(issues))
        runtime = self.runtime
        if isinstance(runtime, PythonAgent):  # a class check first: isinstance of a Protocol is slow
            return await self._run_python(inv, runtime)
        if isinstance(runtime, SessionRuntime):
            if inv.node is not None:
                return await self._run_model_node(inv, runtime)
            return await self._run_model_plain(inv, runtime)
        return await self._run_generic(inv, runtime)

    # Python agents and other runtimes
    async def _run_python(self, inv: _Invocation, runtime: PythonAgent) -> TaskOutcome:
        ctx = inv.ctx
        while True:
            inv.attempts += 1
            ctx.handler_try = inv.attempts
            try:
                output = await runtime.call(ctx)
            except RetryWithFeedback as e:
                if inv.attempts > inv.max_retries:
                    return self._failure(inv, f"gave up after {inv.attempts} attempt(s); last feedback: {e.feedback}")
                log.info("node.retry", attempt=inv.attempts, feedback=e.feedback)
                ctx.feedback = e.feedback
                continue
            except InputRequired as e:
                return TaskOutcome(TaskState.INPUT_REQUIRED, output=e.data, message=e.prompt)
            except RequestRejected as e:
                return self._rejected(inv, e.answer)
            except (asyncio.CancelledError, StoreUnavailable):
                raise  # Redis away (the handler's fence, an artifact): the task is handed back, not failed
            except Exception as e:
                return self._failure(inv, f"{type(e).__name__}: {e}")
            return await self._accept(inv, output, None)

    async def _run_generic(self, inv: _Invocation, runtime: AgentRuntime) -> TaskOutcome:
        inv.attempts = 1
        outcome = await runtime.run(inv.ctx)
        if outcome.state == TaskState.COMPLETED:
            return await self._accept(inv, outcome.output, None)
        if outcome.state == TaskState.FAILED and inv.node is not None:
            return self._failure(inv, outcome.message or "the agent failed")
        return outcome

    # LLM agents
    async def _run_model_plain(self, inv: _Invocation, runtime: SessionRuntime) -> TaskOutcome:
        ctx = inv.ctx
        try:
            async with runtime.session(ctx, instructions=None) as session:
                inv.attempts = max(session.turn, 1)
                text = await (session.resume() if session.turn else session.answer(None))
        except RequestRejected as e:
            return self._rejected(inv, e.answer)
        except (LlmError, StateConflict) as e:
            return self._failure(inv, str(e))
        try:
            embed = parse_result_embed(text)
        except EmbedError:
            embed = None
        if embed is not None and embed.ok and embed.artifact:
            try:
                art = await ctx.load_artifact(embed.artifact, version=embed.version)
                return TaskOutcome(TaskState.COMPLETED, output=art.value)
            except ArtifactError:
                pass  # a plain answer that names a missing artifact: its text is the answer
        return TaskOutcome(TaskState.COMPLETED, output=strip_result_embeds(text) or text)

    async def _run_model_node(self, inv: _Invocation, runtime: SessionRuntime) -> TaskOutcome:
        try:
            async with runtime.session(inv.ctx, instructions=node_instructions(inv)) as session:
                resumed = session.turn > 0
                inv.attempts = max(session.turn, 1)
                text = await (session.resume() if resumed else session.answer(None))
                while True:
                    verdict = await self._check_answer(inv, text)
                    if verdict.ok:
                        return await self._accept(inv, verdict.value, verdict.meta)
                    if verdict.final_error is not None:
                        return self._failure(inv, verdict.final_error)
                    if inv.attempts > inv.max_retries:
                        inv.issues = verdict.issues
                        errors = "\n".join(f"- {e}" for e in verdict.errors)
                        return self._failure(inv, f"no valid result after {inv.attempts} attempt(s):\n{errors}")
                    log.info("node.retry", attempt=inv.attempts, errors=verdict.errors)
                    feedback = retry_feedback(verdict.errors, inv.attempts, inv.max_retries + 1, inv.output_name)
                    inv.attempts += 1
                    text = await session.answer(feedback)
        except RequestRejected as e:
            return self._rejected(inv, e.answer)
        except (LlmError, StateConflict) as e:
            return self._failure(inv, str(e))

    async def _check_answer(self, inv: _Invocation, text: str) -> _Verdict:
        try:
            embed = parse_result_embed(text)
        except EmbedError as e:
            return _Verdict(errors=[str(e)])
        if not embed.ok:
            return _Verdict(final_error=embed.message or "the agent reported failure without a message")
        assert embed.artifact is not None
        try:
            art = await inv.ctx.load_artifact(embed.artifact, version=embed.version)
        except ArtifactNotFound:
            return _Verdict(errors=[await _missing_artifact(inv.ctx, embed.artifact, embed.version)])
        except ArtifactError as e:
            return _Verdict(errors=[str(e)])
        value, problem = _decode_output(art, inv.output_schema)
        if problem is not None:
            return _Verdict(errors=[problem])
        issues = validate(value, inv.output_schema)
        if issues:
            where = f"artifact {art.meta.name!r} version {art.meta.version}"
            return _Verdict(
                errors=[f"{where} does not match the output schema: {i}" for i in issues[:20]], issues=issues
            )
        return _Verdict(value=value, meta=art.meta, ok=True)

    # results
    async def _accept(self, inv: _Invocation, output: Any, meta: ArtifactMeta | None) -> TaskOutcome:
        """Validate an output against the effective output schema and finish with it."""
        if isinstance(output, Part):
            if output.raw is not None or output.url is not None:
                return await self._accept_file(inv, output)
            output = output.text if output.text is not None else output.data
        if meta is None and isinstance(output, str) and expects_structured(inv.output_schema):
            try:
                output = json.loads(output)
            except json.JSONDecodeError as e:
                return self._failure(
                    inv,
                    f"the output is text that is not JSON ({e.msg} at line {e.lineno} column {e.colno}), "
                    f"but the output schema expects {_kind(inv.output_schema)}",
                )
        issues = validate(output, inv.output_schema)
        if issues:
            inv.issues = issues
            return self._failure(inv, "the output does not match the output schema:\n" + format_issues(issues))
        if inv.node is None:
            return TaskOutcome(TaskState.COMPLETED, output=output)
        ctx = inv.ctx
        result_part: Part | None = None
        inline = encoded_size(output) <= ctx.inline_threshold
        if not inline:
            if meta is None:
                meta = await ctx.save_artifact(RESULT_ARTIFACT, output)
            result_part = url_part(meta)
        data = self._node_result(inv, "success", artifact=meta)
        if inline:
            data["output"] = output
        return TaskOutcome(
            TaskState.COMPLETED, output=output, status_parts=[Part.of_data(data)], result_part=result_part
        )

    async def _accept_file(self, inv: _Invocation, part: Part) -> TaskOutcome:
        """A file result (a :class:`Part` holding ``raw`` bytes or a ``url``) is ``artifacts[0]``'s part as given;
        bytes above the inline threshold are stored as the ``result`` artifact and the part points at it. The
        output value (schema checks, a node's result) is the part's JSON form."""
        ctx = inv.ctx

        async def save(content: bytes, media_type: str) -> ArtifactMeta:
            return await ctx.save_artifact(RESULT_ARTIFACT, content, media_type=media_type)

        part, meta = await spill_large_file(part, threshold=ctx.inline_threshold, save=save)
        output = part.to_json_dict()
        issues = validate(output, inv.output_schema)
        if issues:
            inv.issues = issues
            return self._failure(inv, "the output does not match the output schema:\n" + format_issues(issues))
        if inv.node is None:
            return TaskOutcome(TaskState.COMPLETED, output=output, result_part=part)
        data = self._node_result(inv, "success", artifact=meta)
        data["output"] = output
        return TaskOutcome(TaskState.COMPLETED, output=output, status_parts=[Part.of_data(data)], result_part=part)

    def _failure(self, inv: _Invocation, error: str, *, node_call: bool = False) -> TaskOutcome:
        log.info("node.failed", attempts=inv.attempts, error=error.splitlines()[0])
        if inv.node is None and not node_call:
            return TaskOutcome(TaskState.FAILED, message=error)
        data = self._node_result(inv, "failure", error=error)
        return TaskOutcome(TaskState.FAILED, message=error, status_parts=[Part.of_data(data)])

    def _rejected(self, inv: _Invocation, answer: str) -> TaskOutcome:
        if inv.node is None:
            return TaskOutcome(TaskState.REJECTED, message=answer)
        data = self._node_result(inv, "failure", error=answer)
        return TaskOutcome(TaskState.REJECTED, message=answer, status_parts=[Part.of_data(data)])

    def _node_result(
        self, inv: _Invocation, status: str, *, artifact: ArtifactMeta | None = None, error: str | None = None
    ) -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": NODE_RESULT,
            "status": status,
            "execution_id": inv.node.execution_id if inv.node else inv.ctx.execution_id,
            "node_id": inv.node.node_id if inv.node else inv.ctx.node_id,
            "attempts": inv.attempts,
            "validation_errors": [i.to_json() for i in inv.issues],
            "usage": inv.ctx.usage.to_json(),
        }
        if artifact is not None:
            data["artifact"] = artifact.ref()
        if error is not None:
            data["error"] = error
        return data


async def _resolve_input(ctx: TaskContext) -> Any:
    """The input contract of SPEC §3.5, with an ``artifact://`` URL input loaded from the artifact store."""
    for p in ctx.message.parts:
        if p.data is not None and not (isinstance(p.data, dict) and p.data.get("type") in CONTROL_PART_TYPES):
            return p.data
    for p in ctx.message.parts:
        if p.url is not None and p.url.startswith("artifact://"):
            art = await ctx.load_artifact(p.url)
            value = art.value
            return art.text if isinstance(value, bytes) else value
    return ctx.input


def _decode_output(art: StoredArtifact, schema: dict[str, Any] | None) -> tuple[Any, str | None]:
    """The artifact's value as the output, or the problem to report to the model."""
    where = f"artifact {art.meta.name!r} version {art.meta.version} ({art.meta.media_type})"
    try:
        value = art.value
    except ArtifactError as e:
        return None, str(e)
    if isinstance(value, bytes):
        if expects_structured(schema):
            return None, f"{where} is binary, but the output schema expects {_kind(schema)}"
        return art.text, None
    if isinstance(value, str) and expects_structured(schema):
        try:
            return json.loads(value), None
        except json.JSONDecodeError as e:
            return None, (
                f"{where} holds text that is not JSON ({e.msg} at line {e.lineno} column {e.colno}), but the "
                f"output schema expects {_kind(schema)}: save the output as a JSON value, not as prose"
            )
    return value, None


def _kind(schema: dict[str, Any] | None) -> str:
    kind = (schema or {}).get("type")
    if isinstance(kind, str):
        return f"a JSON {kind}"
    if isinstance(kind, list):
        return "JSON of type " + " or ".join(str(k) for k in kind)
    return "structured JSON"


async def _missing_artifact(ctx: TaskContext, name: str, version: int | None) -> str:
    which = f"{name!r}" if version is None else f"{name!r} version {version}"
    try:
        saved = [f"{m.name} (latest version {m.version})" for m in await ctx.list_artifacts()]
    except ArtifactError:
        saved = []
    listing = ", ".join(saved) if saved else "none"
    return (
        f"the result embed names artifact {which}, but this task has no such artifact (saved artifacts: {listing}); "
        "save the output with save_artifact before ending with the result embed"
    )


def node_instructions(inv: _Invocation) -> str:
    """The system-prompt section that tells a model how to act as this workflow node."""
    node = inv.node
    assert node is not None
    name = inv.output_name
    lines = ["## Workflow node", ""]
    who = f'node "{node.node_id}"' if node.node_id else "a node"
    of = f' of the workflow "{node.workflow_name}"' if node.workflow_name else " of a workflow"
    lines.append(f"You are running as {who}{of}. Do the task below with your tools, then report the result.")
    if node.instruction:
        lines += ["", "Task:", node.instruction.strip()]
    lines += ["", "The user message holds the node's input."]
    if inv.input_schema is not None:
        lines += ["It matches this JSON Schema:", "```json", json.dumps(inv.input_schema, indent=2), "```"]
    if inv.output_schema is not None:
        lines += [
            "",
            "Your output must be a JSON value that matches this JSON Schema exactly:",
            "```json",
            json.dumps(inv.output_schema, indent=2),
            "```",
        ]
    lines += [
        "",
        "To finish:",
        f'1. Save the output with the tool `save_artifact`, name "{name}", content = the output itself '
        "(an object or array as a JSON value, not a string that contains JSON).",
        "2. End your answer with exactly this result embed, as the last thing you write:",
        format_success_embed(name),
        "",
        "If you cannot produce a valid output, do not invent one; end your answer with:",
        format_failure_embed("why, in one sentence"),
    ]
    return "\n".join(lines)


def retry_feedback(errors: list[str], attempt: int, total: int, output_name: str) -> str:
    """The user message that asks the model to fix its previous answer, quoting every error."""
    listed = "\n".join(f"- {e}" for e in errors)
    return (
        f"Your previous answer was not accepted (attempt {attempt} of {total}):\n{listed}\n\n"
        f'Fix these problems: save the corrected output with `save_artifact` (name "{output_name}") and end your '
        f"answer with {format_success_embed(output_name)}, or with {format_failure_embed('why')} if you cannot."
    )
