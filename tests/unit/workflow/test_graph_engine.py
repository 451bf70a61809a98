"""The pure graph engine (SPEC §6): routing, tools, END, guards, handoff, conversations."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from a2amesh.errors import ConfigError, InvalidTransition
from a2amesh.ids import node_message_id, task_id_for
from a2amesh.workflow.events import (
    CancelCall,
    CancelRequested,
    ClearTimer,
    EmitEvent,
    Finish,
    NodeFailed,
    NodeSucceeded,
    RequestReview,
    ReviewAnswered,
    SetTimer,
    TimerFired,
)
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.graph.engine import GRAPH_TIMEOUT, GraphEngine
from a2amesh.workflow.graph.state import (
    DispatchGraphNode,
    GraphCommand,
    GraphEvent,
    GraphState,
    RunTools,
    ToolResult,
    ToolsCompleted,
    parse_event,
)
from a2amesh.workflow.graph.validation import parse_graph

ROOT = Path(__file__).resolve().parents[3]
CommandT = TypeVar("CommandT")
Agent = Callable[[Any, dict[str, Any]], Any]
Tool = Callable[[dict[str, Any]], Any]


def graph(data: dict[str, Any] | str, name: str = "g") -> GraphDefinition:
    raw = json.loads((ROOT / "workflows" / data).read_text()) if isinstance(data, str) else data
    definition, _ = parse_graph({**raw, "name": name})
    return definition


@dataclass
class Driver:
    """Drives one graph with scripted agents and tools, answering every command at once."""

    definition: GraphDefinition
    agents: dict[str, Agent] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    now: float = 1000.0
    latency: float = 1.0
    state: GraphState | None = None
    commands: list[GraphCommand] = field(default_factory=list)
    queue: list[GraphEvent] = field(default_factory=list)

    @property
    def engine(self) -> GraphEngine:
        return GraphEngine(self.definition)

    def start(self, input: Any, previous: GraphState | None = None, **kwargs: Any) -> GraphState:
        self.state, commands = self.engine.start(
            execution_id=f"exec-{self.now:g}", input=input, now=self.now, previous=previous, **kwargs
        )
        self.carry(commands)
        return self.drive()

    def feed(self, event: GraphEvent) -> GraphState:
        assert self.state is not None
        self.now += self.latency
        self.state, commands = self.engine.step(self.state, event, self.now)
        self.carry(commands)
        return self.state

    def carry(self, commands: list[GraphCommand]) -> None:
        self.commands.extend(commands)
        for command in commands:
            if isinstance(command, DispatchGraphNode):
                answer = self.agents[command.agent](command.input, command.control)
                if isinstance(answer, Exception):
                    self.queue.append(NodeFailed(path=command.path, attempt=command.attempt, error=str(answer)))
                elif answer is not HANG:
                    self.queue.append(NodeSucceeded(path=command.path, attempt=command.attempt, output=answer))
            elif isinstance(command, RunTools):
                results = [
                    ToolResult(id=c.id, name=c.name, output=self.tools[c.name](c.arguments)) for c in command.calls
                ]
                self.queue.append(ToolsCompleted(path=command.path, results=results))

    def drive(self) -> GraphState:
        assert self.state is not None
        while self.queue and not self.state.finished:
            self.feed(self.queue.pop(0))
        return self.state

    def of(self, kind: type[CommandT]) -> list[CommandT]:
        return [c for c in self.commands if isinstance(c, kind)]

    def visited(self) -> list[str]:
        return [e.node_id for e in self.of(EmitEvent) if e.event == "node.started" and e.node_id]

    def finish(self) -> Finish:
        (only,) = self.of(Finish)
        return only


HANG = object()


def script(*answers: Any) -> Agent:
    """An agent that gives these answers in turn (the last one repeats)."""
    given = list(answers)

    def agent(_input: Any, _control: dict[str, Any]) -> Any:
        return given.pop(0) if len(given) > 1 else given[0]

    return agent


# --- 2nChat ------------------------------------------------------------------------------------


def test_2nchat_visits_router_workers_and_both_tool_routes_then_ends() -> None:
    """Router → RC2 → tools (ALWAYS back to Router) → search caller → tools (per-tool edge back) → DM2 → END."""
    seen: list[dict[str, Any]] = []

    def router(inp: Any, control: dict[str, Any]) -> Any:
        seen.append(control)
        return [{"next": "RC2", "message": "asking RC2"}, {"next": "externalSearchCaller"}, {"next": "DM2"}][
            sum(1 for c in seen if c["node_id"] == "node-uuid-1") - 1
        ]

    search = script(
        {"next": "tool_executor", "tool_calls": [{"id": "s1", "name": "external_research", "arguments": {"q": "x"}}]},
        {"next": "Router", "message": "found x"},
    )
    d = Driver(
        graph("2nchat_with_search.json"),
        agents={
            "agent-uuid-router": router,
            "agent-uuid-rc2": script({"next": "tool_executor", "tool_calls": [{"name": "lookup"}]}),
            "agent-uuid-external-search": search,
            "agent-uuid-dm2": script({"next": "END", "message": "the answer"}),
        },
        tools={"lookup": lambda a: {"rows": 1}, "external_research": lambda a: {"hits": [a["q"]]}},
    )
    state = d.start("hello")
    assert state.status == "completed", state.error
    assert state.output == "the answer"
    assert d.finish().output == "the answer"
    assert d.visited() == [
        "node-uuid-1", "node-uuid-2", "node-uuid-5", "node-uuid-1", "node-uuid-6", "node-uuid-5", "node-uuid-6",
        "node-uuid-1", "node-uuid-3",
    ]  # fmt: skip
    assert state.rounds == 2
    assert state.steps == 9
    assert state.last_agent == "node-uuid-3"
    assert [r.name for r in state.tool_results] == ["external_research"]
    roles = [(m.role, m.name) for m in state.messages]
    assert roles[0] == ("user", None)
    assert ("tool", "lookup") in roles
    assert ("tool", "external_research") in roles
    control = seen[0]
    assert control["type"] == "graph_node_request"
    assert control["execute_tools"] is False
    assert control["allowed_next"] == ["RC2", "DM2", "2N", "tool_executor", "END", "externalSearchCaller"]
    assert control["route_kinds"]["tool_executor"] == "TOOL_EXECUTOR"
    assert control["route_kinds"]["END"] == "END"
    assert control["route_kinds"]["externalSearchCaller"] == "AGENT"
    assert [t["name"] for t in control["tools"]] == ["end"]  # conversational: the end tool


def test_dispatch_carries_conversation_control_and_deterministic_ids() -> None:
    """An AGENT dispatch has the conversation as input, the control part, and ids from (execution, node, n)."""
    d = Driver(graph("2nchat_with_search.json"), agents={"agent-uuid-router": lambda i, c: HANG})
    d.start({"text": "hi"})
    (call,) = d.of(DispatchGraphNode)
    assert call.input == {"messages": [{"role": "user", "content": "hi"}]}
    assert call.message_id == node_message_id("exec-1000", "node-uuid-1", 1, 1)
    assert call.task_id == task_id_for("agent-uuid-router", call.message_id)
    assert call.deadline == 1000 + 90
    assert call.call_chain == ["g"]
    assert d.of(SetTimer) == [SetTimer(timer_id=GRAPH_TIMEOUT, due=1090)]
    assert d.state is not None
    assert d.engine.in_flight(d.state) == call  # a takeover re-sends the very same call


def test_seed_file_fails_at_run_time_naming_the_undefined_edge() -> None:
    """The seed's own 2nChat loads, and taking edge 15 (to the undefined node-uuid-6) fails naming the edge."""
    d = Driver(graph("2nchat.json"), agents={"agent-uuid-router": script({"next": "externalSearchCaller"})})
    state = d.start("search please")
    assert state.status == "failed"
    assert state.failure is not None
    assert state.failure.reason == "UNDEFINED_TARGET"
    assert state.failure.edge_id == "edge-uuid-15"
    assert "edge-uuid-15" in (state.error or "")
    assert "node-uuid-6" in (state.error or "")


def test_unknown_next_fails_naming_node_and_value() -> None:
    """A next that is not among the node's conditionValues fails the node, naming node and value."""
    d = Driver(graph("2nchat.json"), agents={"agent-uuid-router": script({"next": "Nobody", "message": "?"})})
    state = d.start("x")
    assert state.status == "failed"
    assert state.failure is not None
    assert state.failure.reason == "UNKNOWN_NEXT"
    assert state.failure.node_id == "node-uuid-1"
    assert "'node-uuid-1'" in (state.error or "")
    assert "'Nobody'" in (state.error or "")
    assert [e.event for e in d.of(EmitEvent)][-2:] == ["node.failed", "execution.failed"]


def test_agent_failure_and_malformed_answer_fail_the_node() -> None:
    """A failed call or a malformed tool_calls list fails the execution naming the node."""
    d = Driver(graph("2nchat.json"), agents={"agent-uuid-router": lambda i, c: RuntimeError("model down")})
    state = d.start("x")
    assert state.failure is not None
    assert state.failure.reason == "AGENT_FAILED"
    assert "model down" in (state.error or "")
    d = Driver(graph("2nchat.json"), agents={"agent-uuid-router": script({"next": "END", "tool_calls": "nope"})})
    state = d.start("x")
    assert state.failure is not None
    assert state.failure.reason == "BAD_OUTPUT"
    assert "node-uuid-1" in (state.error or "")


# --- tool executor ---------------------------------------------------------------------------


def tool_graph(**extra: Any) -> dict[str, Any]:
    return {
        "entrypointNodeId": "a",
        "nodes": [
            {"id": "a", "nodeType": "AGENT", "agentId": "asker", "tools": ["calc"]},
            {"id": "b", "nodeType": "AGENT", "agentId": "interpreter"},
            {"id": "t", "nodeType": "TOOL_EXECUTOR"},
        ],
        "edges": [
            {"id": "e1", "sourceNodeId": "a", "targetNodeId": "t", "conditionValue": "tools"},
            {"id": "e2", "sourceNodeId": "a", "targetNodeId": None, "conditionValue": "END"},
            {"id": "e3", "sourceNodeId": "b", "targetNodeId": None, "conditionValue": "END"},
            *extra.pop("edges", []),
        ],
        "tools": {"calc": {"description": "adds", "parameters": {"type": "object"}}},
        **extra,
    }


def test_tool_executor_returns_to_the_caller_without_edges() -> None:
    """With no per-tool and no ALWAYS edge, the tool executor routes back to the agent that called it."""
    asker = script({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}]},
                   {"next": "END", "message": "done"})  # fmt: skip
    d = Driver(graph(tool_graph()), agents={"asker": asker}, tools={"calc": lambda a: 3})
    state = d.start("1+2")
    assert state.status == "completed"
    assert state.output == "done"
    assert d.visited() == ["a", "t", "a"]
    (run,) = d.of(RunTools)
    assert run.caller == "a"
    assert run.tools == {"calc": {"description": "adds", "parameters": {"type": "object"}}}
    dispatch = d.of(DispatchGraphNode)[0]
    assert dispatch.control["tools"] == [{"name": "calc", "description": "adds", "parameters": {"type": "object"}}]


def test_first_executed_tool_with_an_edge_wins() -> None:
    """The per-tool edge of the first tool in call order that has one is taken, over the ALWAYS edge."""
    edges = [
        {"id": "e4", "sourceNodeId": "t", "targetNodeId": "b", "conditionValue": "second"},
        {"id": "e5", "sourceNodeId": "t", "targetNodeId": "a", "conditionType": "ALWAYS"},
    ]
    calls = [{"id": "1", "name": "first"}, {"id": "2", "name": "second"}]
    d = Driver(
        graph(tool_graph(edges=edges)),
        agents={"asker": script({"next": "tools", "tool_calls": calls}), "interpreter": script({"next": "END"})},
        tools={"first": lambda a: 1, "second": lambda a: 2},
    )
    state = d.start("go")
    assert d.visited() == ["a", "t", "b"]
    assert state.status == "completed"
    assert state.output == 2  # the interpreter gave no message: the last message is the tool's


def test_routing_to_the_tool_executor_without_calls_fails() -> None:
    """Choosing the tool executor without tool calls fails clearly instead of looping."""
    d = Driver(graph(tool_graph()), agents={"asker": script({"next": "tools"})})
    state = d.start("go")
    assert state.failure is not None
    assert state.failure.reason == "NO_TOOL_CALLS"
    assert "'t'" in (state.error or "")


# --- guards and handoff ----------------------------------------------------------------------


def ping_pong(**extra: Any) -> dict[str, Any]:
    return {
        "entrypointNodeId": "a",
        "nodes": [{"id": "a", "nodeType": "AGENT", "agentId": "A"}, {"id": "b", "nodeType": "AGENT", "agentId": "B"}],
        "edges": [
            {"id": "ab", "sourceNodeId": "a", "targetNodeId": "b", "conditionValue": "B"},
            {"id": "ba", "sourceNodeId": "b", "targetNodeId": "a", "conditionValue": "A"},
            {"id": "a-end", "sourceNodeId": "a", "targetNodeId": None, "conditionValue": "END"},
            *extra.pop("edges", []),
        ],
        **extra,
    }


FOREVER = {"A": script({"next": "B", "message": "to b"}), "B": script({"next": "A", "message": "to a"})}


def test_step_limit_fails_naming_the_guard() -> None:
    """A loop that never ends stops at stepLimit (default 15) and fails naming the guard."""
    d = Driver(graph(ping_pong()), agents=FOREVER)
    state = d.start("go")
    assert state.status == "failed"
    assert state.failure is not None
    assert state.failure.reason == "GUARD"
    assert state.failure.guard == "stepLimit"
    assert "stepLimit 15" in (state.error or "")
    assert state.steps == 15
    assert len(d.of(DispatchGraphNode)) == 15


def test_max_rounds_counts_returns_to_the_entry_node() -> None:
    """maxRounds N stops at the N-th return to the entry node."""
    d = Driver(graph(ping_pong(maxRounds=3, stepLimit=100)), agents=FOREVER)
    state = d.start("go")
    assert state.failure is not None
    assert state.failure.guard == "maxRounds"
    assert "maxRounds 3" in (state.error or "")
    assert d.visited() == ["a", "b", "a", "b", "a", "b"]
    assert state.rounds == 3


def test_max_rounds_ends_a_simple_loop_successfully() -> None:
    """Seed 003: a simple-format loop stops after maxRounds full cycles, each agent fed the previous output."""
    d = graph(
        {
            "nodes": [
                {"id": "a1", "type": "agent", "config": {"agentId": "<agent-1-id>"}},
                {"id": "a2", "type": "agent", "config": {"agentId": "<agent-2-id>"}},
            ],
            "edges": [{"id": "e1", "from": "a1", "to": "a2"}, {"id": "e2", "from": "a2", "to": "a1"}],
            "maxRounds": 10,
        }
    )
    inputs: list[Any] = []

    def talk(inp: Any, control: dict[str, Any]) -> Any:
        inputs.append(inp)
        return {"count": (inp.get("count", 0) if isinstance(inp, dict) else 0) + 1}

    driver = Driver(d, agents={"_agent-1-id_": talk, "_agent-2-id_": talk})
    state = driver.start({"count": 0})
    assert state.status == "completed", state.error
    assert state.output == {"count": 20}
    assert len(inputs) == 20
    assert inputs[:2] == [{"count": 0}, {"count": 1}]
    assert d.effective_step_limit == 20


def test_timeout_routes_to_human_handoff_and_resume_carries_on() -> None:
    """A timeout with a HUMAN_HANDOFF node pauses with a review_request; approving restarts the guards."""
    data = ping_pong(
        timeout=30,
        nodes=[
            {"id": "a", "nodeType": "AGENT", "agentId": "A"},
            {"id": "b", "nodeType": "AGENT", "agentId": "B"},
            {"id": "h", "nodeType": "HUMAN_HANDOFF", "prompt": "Please look", "editSchema": {"type": "string"}},
        ],
        edges=[{"id": "h-a", "sourceNodeId": "h", "targetNodeId": "a", "conditionType": "ALWAYS"}],
    )
    d = Driver(graph(data), agents={"A": script({"next": "B", "message": "thinking"}), "B": lambda i, c: HANG})
    d.start("go")
    assert d.state is not None
    assert d.state.status == "running"
    state = d.feed(TimerFired(timer_id=GRAPH_TIMEOUT))  # 30 s have not passed yet: nothing happens
    assert state.status == "running"
    assert not d.of(RequestReview)
    d.now = 1031
    state = d.feed(TimerFired(timer_id=GRAPH_TIMEOUT))
    assert state.status == "paused"
    assert state.limit == "timeout"
    (review,) = d.of(RequestReview)
    assert d.engine.in_flight(state) == review
    assert review.guard == "timeout"
    assert review.node_id == "h"
    assert review.review["type"] == "review_request"
    assert review.review["prompt"] == "Please look"
    assert review.review["edit_schema"] == {"type": "string"}
    assert review.review["path"] == review.path
    assert isinstance(review.review["data"], dict)
    assert review.review["data"]["last_message"] == "thinking"
    cancelled = d.of(CancelCall)
    assert len(cancelled) == 1
    assert cancelled[0].agent == "B"
    assert not state.timers
    assert ClearTimer(timer_id=GRAPH_TIMEOUT) not in d.commands
    with pytest.raises(InvalidTransition, match="editSchema"):
        d.engine.step(state, ReviewAnswered(decision="edit", data={"not": "a string"}), d.now)
    d.agents["B"] = script({"next": "A", "message": "later"})
    d.agents["A"] = script({"next": "END", "message": "bye"})
    state = d.feed(parse_event({"decision": "edit", "data": "try again"}))
    state = d.drive()
    assert state.status == "completed"
    assert state.output == "bye"
    assert any(m.name == "human" and m.content == "try again" for m in state.messages)
    assert state.steps == 1
    assert state.limit is None


def test_handoff_reject_fails_and_resume_needs_a_pause() -> None:
    """Rejecting at a handoff without a reject edge fails; a resume of a running execution is refused."""
    data = ping_pong(
        nodes=[
            {"id": "a", "nodeType": "AGENT", "agentId": "A"},
            {"id": "b", "nodeType": "AGENT", "agentId": "B"},
            {"id": "h", "nodeType": "HUMAN_HANDOFF"},
        ],
        stepLimit=4,
    )
    d = Driver(graph(data), agents=FOREVER)
    state = d.start("go")
    assert state.status == "paused"
    assert state.limit == "stepLimit"
    state = d.feed(ReviewAnswered(decision="reject", reason="enough"))
    assert state.status == "failed"
    assert state.failure is not None
    assert state.failure.reason == "REJECTED"
    assert "enough" in (state.error or "")
    with pytest.raises(InvalidTransition, match="failed"):
        d.engine.step(state, ReviewAnswered(decision="approve"), d.now)
    running = Driver(graph(ping_pong()), agents={"A": lambda i, c: HANG})
    running.start("go")
    assert running.state is not None
    with pytest.raises(InvalidTransition, match="not paused"):
        running.engine.step(running.state, ReviewAnswered(decision="approve"), running.now)


def test_paused_time_does_not_count_towards_the_timeout() -> None:
    """A handoff reached by an edge pauses the timeout; resuming re-arms it with the time left."""
    data = ping_pong(
        timeout=60,
        nodes=[
            {"id": "a", "nodeType": "AGENT", "agentId": "A"},
            {"id": "b", "nodeType": "AGENT", "agentId": "B"},
            {"id": "h", "nodeType": "HUMAN_HANDOFF"},
        ],
        edges=[{"id": "a-h", "sourceNodeId": "a", "targetNodeId": "h", "conditionValue": "human"}],
    )
    d = Driver(graph(data), agents={"A": script({"next": "human", "message": "need help"})})
    state = d.start("go")
    assert state.status == "paused"
    assert state.limit is None
    assert state.timers == {}
    assert state.active_seconds == 1
    d.now += 3600  # an hour with the reviewer
    state = d.feed(ReviewAnswered(decision="approve"))
    resumed_at = d.now
    assert state.status == "completed"
    assert state.output == "need help"
    sets = [c for c in d.of(SetTimer) if c.timer_id == GRAPH_TIMEOUT]
    assert sets[-1].due == pytest.approx(resumed_at + 59)  # the 59 s left (1 s was used before the pause)


def test_caller_deadline_and_cancel() -> None:
    """The caller's deadline fails the run and cancels the callee; CancelRequested cancels once."""
    d = Driver(graph(ping_pong()), agents={"A": lambda i, c: HANG})
    d.start("go", deadline=1010.0)
    d.now = 1010
    state = d.feed(TimerFired(timer_id="caller_deadline"))
    assert state.status == "failed"
    assert state.failure is not None
    assert state.failure.reason == "DEADLINE"
    assert len(d.of(CancelCall)) == 1
    d = Driver(graph(ping_pong()), agents={"A": lambda i, c: HANG})
    d.start("go")
    state = d.feed(CancelRequested(reason="user"))
    assert state.status == "canceled"
    assert d.finish().status == "canceled"
    assert len(d.of(CancelCall)) == 1
    assert d.feed(CancelRequested()) == state  # after the finish nothing changes


def test_stale_results_are_ignored() -> None:
    """A result for a call the execution no longer waits for changes nothing."""
    d = Driver(graph(ping_pong()), agents={"A": lambda i, c: HANG})
    state = d.start("go")
    after, commands = d.engine.step(state, NodeSucceeded(path="a#99", attempt=1, output={"next": "END"}), 2000)
    assert after == state
    assert commands == []


# --- conversations ---------------------------------------------------------------------------


def test_three_turns_of_a_conversation_share_the_state() -> None:
    """Each turn starts at the entry node with the previous turns' messages; the end tool ends a turn."""
    replies = iter(["hi!", "it is 3", "bye"])

    def router(inp: Any, control: dict[str, Any]) -> Any:
        assert control["conversational"] is True
        assert "end" in control["instruction"]
        return {"message": next(replies), "tool_calls": [{"name": "end"}]}

    d = Driver(graph("2nchat.json"), agents={"agent-uuid-router": router})
    first = d.start("hello")
    assert first.status == "completed"
    assert first.output == "hi!"
    assert first.turn == 1
    assert first.next == "END"
    second = d.start("what is 1+2?", previous=first)
    third = d.start({"text": "thanks"}, previous=second)
    assert third.turn == 3
    assert third.output == "bye"
    assert [m.content for m in third.messages] == ["hello", "hi!", "what is 1+2?", "it is 3", "thanks", "bye"]
    last_input = d.of(DispatchGraphNode)[-1].input
    assert isinstance(last_input, dict)
    assert isinstance(last_input["messages"], list)
    assert len(last_input["messages"]) == 5
    assert third.steps == 1
    assert third.calls == 3


def test_a_new_turn_on_an_unfinished_turn_is_refused() -> None:
    """Starting a turn while the previous one is still running raises InvalidTransition."""
    d = Driver(graph("2nchat.json"), agents={"agent-uuid-router": lambda i, c: HANG})
    running = d.start("hello")
    with pytest.raises(InvalidTransition, match="turn 1"):
        d.engine.start(execution_id="x", input="again", now=1, previous=running)


def test_branches_run_alone_and_a_graph_of_branches_only_needs_one() -> None:
    """A workflow of branches runs one branch at a time; its own empty graph cannot run."""
    d = graph(
        {
            "branches": [
                {"id": "b1", "nodes": [{"id": "x", "type": "agent", "config": {"agentId": "X"}}], "edges": []},
            ]
        }
    )
    with pytest.raises(ConfigError, match="branches: b1"):
        GraphEngine(d)
    state, commands = GraphEngine(d, branch="b1").start(execution_id="e", input={"v": 1}, now=0)
    (call,) = [c for c in commands if isinstance(c, DispatchGraphNode)]
    assert call.agent == "X"
    assert call.input == {"v": 1}
    assert state.branch == "b1"
    state, commands = GraphEngine(d, branch="b1").step(state, NodeSucceeded(path=call.path, attempt=1, output=7), 1)
    assert state.status == "completed"
    assert state.output == 7
