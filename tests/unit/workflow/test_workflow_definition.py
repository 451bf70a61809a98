"""The definition models (SPEC §5.1): spellings, node types, durations, helpers, digest, schema, Mermaid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from a2amesh.durations import DurationError, format_duration, parse_duration
from a2amesh.errors import DefinitionError
from a2amesh.workflow.dag.definition import ExitHandlers, WorkflowDefinition, parse_definition
from a2amesh.workflow.dag.nodes import (
    NODE_TYPES,
    AgentNode,
    Backoff,
    ConditionalNode,
    ForkBranch,
    ForkNode,
    HumanReviewNode,
    JoinNode,
    LoopNode,
    MapNode,
    RetryStrategy,
    Skill,
    SwitchCase,
    SwitchNode,
    WorkflowNode,
)
from a2amesh.workflow.dag.spellings import DefinitionModel, camel_case
from a2amesh.workflow.mermaid import to_mermaid
from a2amesh.workflow.schema_export import render_schema
from a2amesh.workflow.templates import TemplateError, resolve

REPO = Path(__file__).resolve().parents[3]


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (30, 30.0),
        (0, 0.0),
        (1.5, 1.5),
        ("45", 45.0),
        ("2.5", 2.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("1.5h", 5400.0),
        (".5m", 30.0),
        ("250ms", 0.25),
        ("1h30m", 5400.0),
        (" 10 S ", 10.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    """Seconds or number-with-unit text, decimals allowed."""
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("5x", "unknown unit 'x'"),
        ("", "empty"),
        ("-5s", "must not be negative"),
        (-1, "must not be negative"),
        ("s", "expected seconds"),
        ("1.2.3s", "expected seconds"),
        (True, "boolean"),
        ([1], "list is not a duration"),
        (float("inf"), "finite"),
    ],
)
def test_bad_durations(value: object, problem: str) -> None:
    """Bad durations get a precise message quoting the value."""
    with pytest.raises(DurationError) as caught:
        parse_duration(value)
    assert problem in str(caught.value)
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize("seconds", [0.25, 1, 30, 90, 300, 5400, 86400, 100000, 0.001, 12.5])
def test_format_duration_round_trips(seconds: float) -> None:
    """format_duration writes text that parses back to the same seconds."""
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


# --- spellings -------------------------------------------------------------------------------


def test_snake_camel_and_argo_spellings_mean_the_same() -> None:
    """snake_case, camelCase and Argo/SAM aliases build equal definitions with equal digests."""
    snake = {
        "name": "w",
        "fail_fast": False,
        "max_call_depth": 3,
        "retry_strategy": {"limit": 2, "retry_policy": "OnError", "backoff": {"duration": "1s", "max_duration": "1m"}},
        "nodes": [
            {"id": "a", "type": "agent", "agent_name": "A", "input_schema_override": {"type": "object"}, "timeout": 30},
            {"id": "s", "type": "switch", "depends_on": ["a"], "cases": [{"condition": "true", "node": "b"}]},
            {"id": "b", "type": "agent", "agent_name": "B", "depends_on": ["s"]},
            {"id": "m", "type": "map", "with_items": [1], "node": "i", "max_items": 5, "concurrency_limit": 2},
            {"id": "i", "type": "human_review", "prompt": "ok?", "edit_schema": {}, "on_timeout": "approve"},
            {"id": "j", "type": "join", "wait_for": ["a", "b"], "strategy": "n_of_m", "n": 1},
        ],
        "on_exit": {"on_failure": "b"},
        "output_mapping": {"x": "{{a.output}}"},
    }
    camel = {
        "name": "w",
        "failFast": False,
        "maxCallDepth": 3,
        "retryStrategy": {"limit": "2", "retryPolicy": "OnError", "backoff": {"duration": 1, "maxDuration": 60}},
        "nodes": [
            {"id": "a", "type": "agent", "agentName": "A", "inputSchemaOverride": {"type": "object"}, "timeout": "30s"},
            {"id": "s", "type": "switch", "dependencies": ["a"], "cases": [{"when": "true", "then": "b"}]},
            {"id": "b", "type": "agent", "agent_persona": "B", "dependencies": "s"},
            {"id": "m", "type": "map", "withItems": [1], "node": "i", "maxItems": 5, "concurrencyLimit": 2},
            {"id": "i", "type": "humanReview", "prompt": "ok?", "editSchema": {}, "onTimeout": "approve"},
            {"id": "j", "type": "join", "waitFor": ["a", "b"], "strategy": "n_of_m", "n": 1},
        ],
        "onExit": {"onFailure": "b"},
        "outputMapping": {"x": "{{a.output}}"},
    }
    first, second = parse_definition(snake), parse_definition(camel)
    assert first == second
    assert first.digest() == second.digest()
    assert len(first.digest()) == 64


def test_digest_changes_with_content() -> None:
    """A different definition has a different digest."""
    base = {"name": "w", "nodes": [{"id": "a", "type": "agent", "agent_name": "A"}]}
    other = {"name": "w", "nodes": [{"id": "a", "type": "agent", "agent_name": "B"}]}
    assert parse_definition(base).digest() != parse_definition(other).digest()


def test_every_field_has_a_camel_case_spelling_and_a_description() -> None:
    """Each model accepts camelCase for every field and documents every field."""
    models: list[type[DefinitionModel]] = [
        WorkflowDefinition,
        RetryStrategy,
        Backoff,
        ExitHandlers,
        SwitchCase,
        ForkBranch,
        Skill,
        *NODE_TYPES.values(),
    ]
    for model in models:
        spellings = model.spellings()
        for name, info in model.model_fields.items():
            assert spellings[camel_case(name)] == name
            assert info.description, f"{model.__name__}.{name} has no description"


def test_same_field_twice_is_refused() -> None:
    """Giving a field under two spellings is ambiguous."""
    data = {"nodes": [{"id": "a", "type": "agent", "agent_name": "A", "agentName": "B"}]}
    with pytest.raises(DefinitionError, match=r"nodes\[a\]\.agent_name: given twice, as 'agent_name' and 'agentName'"):
        parse_definition(data)


@pytest.mark.parametrize(
    ("node", "field", "problem"),
    [
        ({"id": "a", "type": "agnet"}, "nodes[a].type", "unknown node type 'agnet' (did you mean 'agent'?)"),
        ({"id": "a"}, "nodes[a].type", "missing node type"),
        ({"id": "a", "type": "agent", "agentNmae": "x"}, "nodes[a].agentNmae", "did you mean 'agentName'?"),
        ({"id": "a", "type": "agent"}, "nodes[a].agent_name", "is required"),
        ({"id": "a", "type": "agent", "agent_name": "x", "timeout": "soon"}, "nodes[a].timeout", "invalid duration"),
        ({"id": "a", "type": "map", "node": "b"}, "nodes[a].items", "exactly one of items, with_items, with_param"),
        ({"id": "a", "type": "map", "node": "b", "items": "{{x}}", "withItems": []}, "nodes[a].items", "found items"),
        ({"id": "a", "type": "join", "wait_for": ["b"], "strategy": "n_of_m"}, "nodes[a].n", "needs n"),
        ({"id": "a", "type": "join", "wait_for": ["b"], "strategy": "n_of_m", "n": 2}, "nodes[a].n", "lists 1 node"),
        ({"id": "a", "type": "join", "wait_for": ["b"], "n": 1}, "nodes[a].n", "only used with strategy n_of_m"),
        ({"id": "a", "type": "switch", "cases": []}, "nodes[a].cases", "at least 1"),
        (
            {"id": "a", "type": "loop", "node": "b", "condition": "x", "max_iterations": 0},
            "nodes[a].max_iterations",
            "greater than or equal to 1",
        ),
        (
            {"id": "a", "type": "agent", "agent_name": "x", "retryStrategy": {"retryPolicy": "Sometimes"}},
            "nodes[a].retry_strategy.retry_policy",
            "'OnFailure', 'OnError' or 'Always'",
        ),
        ("just text", "nodes[#0].type", "a node must be a mapping"),
    ],
)
def test_structural_errors_name_node_and_field(node: Any, field: str, problem: str) -> None:
    """Structural mistakes raise DefinitionError naming the node and field."""
    with pytest.raises(DefinitionError) as caught:
        parse_definition({"name": "w", "nodes": [node]}, source="flow.yaml")
    message = str(caught.value)
    assert message.startswith(f"flow.yaml: {field}: "), message
    assert problem in message


def test_top_level_errors() -> None:
    """Workflow-level fields are located without a node."""
    with pytest.raises(DefinitionError, match=r"^<definition>: nodes: "):
        parse_definition({"name": "w", "nodes": []})
    with pytest.raises(DefinitionError, match=r"^<definition>: failfast: unknown field \(did you mean 'fail_fast'\?\)"):
        parse_definition({"failfast": True, "nodes": [{"id": "a", "type": "agent", "agent_name": "A"}]})
    with pytest.raises(DefinitionError, match="is a mapping"):
        parse_definition(["not", "a", "mapping"])


def test_pydantic_errors_are_readable_directly() -> None:
    """Using the models directly still gives pydantic errors that mention the unknown field."""
    with pytest.raises(ValidationError, match="agnt_name"):
        AgentNode.model_validate({"id": "a", "agent_name": "A", "agnt_name": "B"})


# --- nodes and helpers -----------------------------------------------------------------------

DEFINITION = parse_definition(
    {
        "name": "orders",
        "version": 1.2,
        "timeout": "10m",
        "retryStrategy": {"limit": 4, "backoff": {"duration": "2s", "factor": 3, "maxDuration": "10s"}},
        "nodes": [
            {"id": "validate", "type": "agent", "agent_name": "Validator"},
            {
                "id": "gather",
                "type": "fork",
                "depends_on": "validate",
                "branches": [
                    {"id": "c", "agent_name": "Customers"},
                    {"id": "o", "agent_name": "Orders", "output_key": "orders"},
                ],
            },
            {
                "id": "items",
                "type": "map",
                "depends_on": ["gather"],
                "items": "{{workflow.input.items}}",
                "node": "one",
            },
            {"id": "one", "type": "workflow", "workflow_name": "PerItem", "retryStrategy": {"limit": 0}},
            {"id": "poll", "type": "loop", "depends_on": ["validate"], "node": "check", "condition": "true"},
            {"id": "check", "type": "agent", "agent_name": "Checker"},
            {
                "id": "both",
                "type": "join",
                "depends_on": ["validate"],
                "wait_for": ["items", "poll"],
                "strategy": "any",
            },
            {
                "id": "route",
                "type": "switch",
                "depends_on": ["both"],
                "cases": [{"when": "true", "then": "approve"}],
                "default": "review",
            },
            {"id": "approve", "type": "agent", "agent_name": "Approver", "depends_on": ["route"]},
            {"id": "review", "type": "human_review", "depends_on": ["route"], "prompt": "ok?", "on_reject": "reject"},
            {"id": "reject", "type": "agent", "agent_name": "Rejector", "depends_on": ["review"]},
            {
                "id": "is_big",
                "type": "conditional",
                "depends_on": ["approve"],
                "condition": "true",
                "true_branch": "approve_big",
            },
            {"id": "approve_big", "type": "agent", "agent_name": "Approver", "depends_on": ["is_big"]},
            {"id": "alert", "type": "agent", "agent_name": "Alerter"},
            {"id": "cleanup", "type": "agent", "agent_name": "Cleaner"},
        ],
        "onExit": {"on_failure": "alert", "always": "cleanup"},
    }
)


def test_node_types_are_discriminated() -> None:
    """Each node becomes the model of its type."""
    kinds = {node.id: type(node) for node in DEFINITION.nodes}
    assert kinds["validate"] is AgentNode
    assert kinds["gather"] is ForkNode
    assert kinds["items"] is MapNode
    assert kinds["one"] is WorkflowNode
    assert kinds["poll"] is LoopNode
    assert kinds["both"] is JoinNode
    assert kinds["route"] is SwitchNode
    assert kinds["review"] is HumanReviewNode
    assert kinds["is_big"] is ConditionalNode
    assert DEFINITION.version == "1.2"
    assert DEFINITION.timeout == 600.0


def test_engine_helpers() -> None:
    """Lookups the engine relies on: nodes, inner nodes, exit handlers, DAG order, routing."""
    d = DEFINITION
    assert d.node("gather").dependencies == ("validate",)
    assert d.node("both").dependencies == ("validate", "items", "poll")
    both = d.node("both")
    assert isinstance(both, JoinNode)
    assert both.quorum == 1
    assert d.inner_node_ids() == {"one", "check"}
    assert d.container_of("one") is d.node("items")
    assert d.container_of("validate") is None
    assert d.exit_handler_ids() == {"alert", "cleanup"}
    assert d.exit_handlers.handlers_for("failure") == ["alert", "cleanup"]
    assert d.exit_handlers.handlers_for("success") == ["cleanup"]
    assert "one" not in d.dag_node_ids()
    assert "alert" not in d.dag_node_ids()
    order = d.topological_order()
    assert order.index("validate") < order.index("gather") < order.index("items") < order.index("both")
    assert order.index("route") < order.index("review") < order.index("reject")
    assert d.routers_of("review") == ("route",)
    assert d.routers_of("reject") == ("review",)
    assert d.node("route").branch_targets() == [("cases[0].node", "approve"), ("default", "review")]
    assert d.node("is_big").branch_targets() == [("true_branch", "approve_big")]
    assert d.dependents_of("route") == ("approve", "review")
    assert [b.key for b in d.node("gather").branches] == ["c", "orders"]  # type: ignore[union-attr]
    with pytest.raises(KeyError, match="no node 'ghost'"):
        d.node("ghost")
    assert not d.has_node("ghost")


def test_scope_knows_every_node() -> None:
    """definition.scope() gives a TemplateScope that tells unknown nodes from nodes not run yet."""
    scope = DEFINITION.scope({"items": [1]}, {"validate": {"ok": True}})
    assert resolve("{{validate.output.ok}} {{approve.output.x}}", scope) == "true "
    assert resolve("{{workflow.input.items}}", scope) == [1]
    with pytest.raises(TemplateError, match="unknown node 'ghost'"):
        resolve("{{ghost.output}}", scope)


def test_retry_strategy_precedence_and_backoff() -> None:
    """Node-level retry strategy wins over the workflow's; backoff grows by factor up to the cap."""
    assert DEFINITION.retry_strategy_for("one") == RetryStrategy(limit=0)
    workflow_level = DEFINITION.retry_strategy_for("validate")
    assert workflow_level is DEFINITION.retry_strategy
    assert workflow_level is not None
    assert [workflow_level.delay(n) for n in (1, 2, 3)] == [2.0, 6.0, 10.0]
    assert RetryStrategy().delay(1) == 0.0
    assert RetryStrategy(retry_policy="OnFailure").retries_on("failure")
    assert not RetryStrategy(retry_policy="OnFailure").retries_on("error")
    assert RetryStrategy(retry_policy="OnError").retries_on("error")
    assert RetryStrategy(retry_policy="Always").retries_on("failure")


def test_templated_and_condition_fields() -> None:
    """Nodes list where their templates and conditions are, for validation and the engine."""
    fields = {(node_id, path) for node_id, path, _ in DEFINITION.templated_fields()}
    assert ("items", "items") in fields
    assert ("review", "prompt") in fields
    assert ("gather", "branches[1].input") in fields
    assert DEFINITION.node("route").condition_fields() == [("cases[0].condition", "true")]
    assert DEFINITION.node("poll").condition_fields() == [("condition", "true")]


def test_on_exit_single_node_means_always() -> None:
    """on_exit: <id> is the handler for every outcome."""
    d = parse_definition({"nodes": [{"id": "a", "type": "agent", "agent_name": "A"}], "on_exit": "a"})
    assert d.exit_handlers == ExitHandlers(always="a")
    assert d.exit_handlers.handlers_for("cancel") == ["a"]


def test_defaults() -> None:
    """Defaults from SPEC: fail_fast true, max_call_depth 10, join strategy all."""
    d = parse_definition(
        {"nodes": [{"id": "j", "type": "join", "wait_for": "a"}, {"id": "a", "type": "agent", "agent_name": "A"}]}
    )
    assert d.fail_fast is True
    assert d.max_call_depth == 10
    assert d.node("j").strategy == "all"  # type: ignore[union-attr]
    assert d.node("j").wait_for == ["a"]  # type: ignore[union-attr]
    nodes = d.to_data()["nodes"]
    assert isinstance(nodes, list)
    assert nodes[1] == {"id": "a", "type": "agent", "agent_name": "A", "depends_on": []}


def test_models_are_immutable() -> None:
    """Definitions are values: the engine can share them between executions."""
    with pytest.raises(ValidationError):
        DEFINITION.name = "other"  # type: ignore[misc]


# --- JSON Schema and Mermaid -----------------------------------------------------------------


def test_checked_in_schema_is_current() -> None:
    """docs/workflow-schema.json is exactly what the models generate (regenerate with schema_export)."""
    checked_in = (REPO / "docs" / "workflow-schema.json").read_text(encoding="utf-8")
    assert checked_in == render_schema(), "run: python -m a2amesh.workflow.schema_export docs/workflow-schema.json"


def test_schema_accepts_aliases_and_shorthands() -> None:
    """The JSON Schema accepts what the loader accepts: camelCase, Argo aliases, one-string depends_on."""
    jsonschema = pytest.importorskip("jsonschema")
    import json

    validator = jsonschema.Draft202012Validator(json.loads(render_schema()))
    data = {
        "nodes": [
            {
                "id": "a",
                "type": "agent",
                "agentName": "A",
                "dependencies": "b",
                "retryStrategy": {"retryPolicy": "Always"},
            },
            {"id": "s", "type": "switch", "cases": [{"when": "true", "then": "a"}]},
        ],
        "onExit": "a",
        "version": 2,
    }
    assert list(validator.iter_errors(data)) == []
    assert list(validator.iter_errors({"nodes": [{"id": "a", "type": "agent", "agent_name": "A", "bogus": 1}]}))


def test_mermaid() -> None:
    """The Mermaid graph has one shape per node, labelled branch edges and dotted inner/exit edges."""
    text = to_mermaid(DEFINITION)
    assert text.startswith("flowchart TD\n")
    assert 'n_validate["validate<br/>agent: Validator"]' in text
    assert 'n_one[["one<br/>workflow: PerItem"]]' in text
    assert 'n_route{"route<br/>switch"}' in text
    assert 'n_items[/"items<br/>map"/]' in text
    assert 'n_gather[\\"gather<br/>fork: c, o"\\]' in text
    assert 'n_both(("both<br/>join any"))' in text
    assert 'n_poll{{"poll<br/>loop ≤ 100"}}' in text
    assert 'n_review>"review<br/>human review"]' in text
    assert 'n_route -- "true" --> n_approve' in text
    assert 'n_route -- "default" --> n_review' in text
    assert 'n_review -- "rejected" --> n_reject' in text
    assert "n_route --> n_approve" not in text
    assert "n_validate --> n_gather" in text
    assert 'n_items -. "each item" .-> n_one' in text
    assert 'wf_end -. "on_failure" .-> n_alert' in text


def test_mermaid_escapes_labels_and_ids() -> None:
    """Quotes and brackets in conditions, and odd ids, cannot break the Mermaid syntax."""
    d = parse_definition(
        {
            "nodes": [
                {"id": "end", "type": "agent", "agent_name": "A"},
                {
                    "id": "my-node",
                    "type": "switch",
                    "depends_on": ["end"],
                    "cases": [{"when": "'{{end.output.x}}' == \"a<b\"", "then": "my_node"}],
                },
                {"id": "my_node", "type": "agent", "agent_name": "B", "depends_on": ["my-node"]},
            ]
        }
    )
    text = to_mermaid(d)
    assert "n_my_node -- \"'{{end.output.x}}' == #quot;a#lt;b#quot;\" --> n_my_node_2\n" in text
    assert "n_end -->" in text
