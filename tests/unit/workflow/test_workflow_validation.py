"""Load-time validation (SPEC §5.4): every error kind names its node and field; warnings do not block."""

from __future__ import annotations

from typing import Any

import pytest

from a2amesh.errors import DefinitionError
from a2amesh.workflow.dag.validation import InvalidDefinition, Issue, validate_data
from a2amesh.workflow.loader import load_data


def agent(node_id: str, *deps: str, **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "agent", "agent_name": "Worker", "depends_on": list(deps), **fields}


def wf(*nodes: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "w", "nodes": list(nodes), **top}


def issues(data: dict[str, Any], known_agents: set[str] | None = None) -> tuple[list[Issue], list[Issue]]:
    _, report = validate_data(data, known_agents=known_agents)
    return list(report.errors), list(report.warnings)


def only_error(data: dict[str, Any]) -> Issue:
    errors, _ = issues(data)
    assert len(errors) == 1, [str(e) for e in errors]
    return errors[0]


def assert_names(issue: Issue, node_id: str, field: str, *words: str) -> None:
    text = str(issue)
    assert issue.node_id == node_id, text
    assert issue.field == field, text
    assert f"nodes[{node_id}]" in text if node_id else True
    assert field in text, text
    for word in words:
        assert word in text, text


# --- one test per error kind -----------------------------------------------------------------


def test_unknown_dependency() -> None:
    """A dependency on a node that does not exist names the node, the field and the closest id."""
    issue = only_error(wf(agent("fetch"), agent("parse", "fetc")))
    assert_names(issue, "parse", "depends_on", "unknown node 'fetc'", "did you mean 'fetch'")


def test_unknown_wait_for() -> None:
    """Join inputs are dependencies too."""
    issue = only_error(wf(agent("a"), {"id": "j", "type": "join", "wait_for": ["a", "b"]}))
    assert_names(issue, "j", "wait_for", "unknown node 'b'")


def test_cycle_is_named() -> None:
    """A dependency cycle is reported once, naming the nodes in order."""
    issue = only_error(wf(agent("start"), agent("a", "start", "c"), agent("b", "a"), agent("c", "b")))
    assert_names(issue, "a", "depends_on", "dependency cycle: a → c → b → a")


def test_self_dependency() -> None:
    """A node depending on itself is a cycle of one."""
    issue = only_error(wf(agent("a", "a")))
    assert_names(issue, "a", "depends_on", "cannot depend on itself")


def test_duplicate_id() -> None:
    """Two nodes with one id are refused."""
    issue = only_error(wf(agent("a"), agent("b", "a"), agent("a")))
    assert_names(issue, "a", "id", "duplicate node id", "#0", "#2")


@pytest.mark.parametrize("bad_id", ["has.dot", "9lives", "with space"])
def test_malformed_id(bad_id: str) -> None:
    """Node ids must be usable in templates."""
    issue = only_error(wf(agent(bad_id)))
    assert_names(issue, bad_id, "id", "letters, digits")


def test_reserved_id() -> None:
    """A node named like a template root would be unreachable."""
    assert_names(only_error(wf(agent("workflow"))), "workflow", "id", "reserved")


def test_switch_target_does_not_exist() -> None:
    """A switch case pointing nowhere names the case."""
    data = wf(
        agent("a"),
        {
            "id": "route",
            "type": "switch",
            "depends_on": ["a"],
            "cases": [{"when": "{{a.output.x}} > 1", "then": "hgih"}],
        },
        agent("high", "route"),
    )
    assert_names(only_error(data), "route", "cases[0].node", "unknown node 'hgih'", "did you mean 'high'")


def test_switch_target_must_depend_on_router() -> None:
    """A switch target that does not list the switch in depends_on would run whatever the switch picks."""
    data = wf(
        agent("a"),
        {
            "id": "route",
            "type": "switch",
            "depends_on": ["a"],
            "cases": [{"condition": "{{a.output.x}} > 1", "node": "b"}],
            "default": "c",
        },
        agent("b", "route"),
        agent("c", "a"),
    )
    assert_names(only_error(data), "route", "default", "target 'c' does not depend on 'route'")


def test_conditional_branches_must_depend_on_router() -> None:
    """Both branches of a conditional are checked."""
    data = wf(
        agent("a"),
        {
            "id": "check",
            "type": "conditional",
            "depends_on": ["a"],
            "condition": "{{a.output.ok}}",
            "true_branch": "yes",
            "false_branch": "no",
        },
        agent("yes", "check"),
        agent("no", "a"),
    )
    assert_names(only_error(data), "check", "false_branch", "target 'no' does not depend on 'check'")


def test_review_on_reject_must_depend_on_review() -> None:
    """on_reject routes like a branch."""
    data = wf(
        agent("a"),
        {"id": "review", "type": "human_review", "depends_on": ["a"], "prompt": "OK?", "on_reject": "fix"},
        agent("fix", "a"),
    )
    assert_names(only_error(data), "review", "on_reject", "does not depend on 'review'")


def test_map_target_does_not_exist() -> None:
    """A map whose node is missing names the map and its node field."""
    data = wf({"id": "m", "type": "map", "items": "{{workflow.input.xs}}", "node": "each"})
    assert_names(only_error(data), "m", "node", "unknown node 'each'")


def test_map_target_with_depends_on_is_misplaced() -> None:
    """The node a map runs is an inner node: it cannot also be scheduled by the DAG."""
    data = wf(
        agent("a"), {"id": "m", "type": "map", "items": "{{workflow.input.xs}}", "node": "each"}, agent("each", "a")
    )
    assert_names(only_error(data), "each", "depends_on", "runs inside map 'm'")


def test_depending_on_an_inner_node_is_misplaced() -> None:
    """Other nodes wait for the loop, not for the node it runs."""
    data = wf(
        {"id": "poll", "type": "loop", "node": "check", "condition": "{{check.output.ready}} == false"},
        agent("check"),
        agent("after", "check"),
    )
    assert_names(only_error(data), "after", "depends_on", "'check' runs inside 'poll'", "depend on 'poll'")


def test_loop_target_cannot_be_a_router() -> None:
    """A loop must run a node that produces a result."""
    data = wf(
        agent("a"),
        {"id": "loop", "type": "loop", "node": "sw", "condition": "true"},
        {"id": "sw", "type": "switch", "cases": [{"condition": "true", "node": "a"}]},
    )
    errors, _ = issues(data)
    assert any(e.node_id == "loop" and e.field == "node" and "switch node" in e.problem for e in errors)


def test_exit_handler_unknown_and_misplaced() -> None:
    """on_exit must name existing nodes that do not take part in the DAG."""
    issue = only_error(wf(agent("a"), on_exit={"on_failure": "alrt"}))
    assert_names(issue, "", "on_exit.on_failure", "unknown node 'alrt'")
    issue = only_error(wf(agent("a"), agent("cleanup", "a"), on_exit="cleanup"))
    assert_names(issue, "cleanup", "depends_on", "exit handler")


def test_bad_template_syntax() -> None:
    """A malformed template names the node and the exact field path."""
    issue = only_error(wf(agent("a", input={"v": "{{workflow.input.x"})))
    assert_names(issue, "a", "input.v", "bad template", "never closed")


def test_template_with_unknown_node() -> None:
    """A template reading a node that does not exist is a load-time error."""
    issue = only_error(wf(agent("fetch"), agent("b", "fetch", input={"items": ["{{fetsh.output.x}}"]})))
    assert_names(issue, "b", "input.items[0]", "unknown node 'fetsh'", "did you mean 'fetch'")


def test_output_mapping_template() -> None:
    """output_mapping is checked like node fields, located on the workflow."""
    issue = only_error(wf(agent("a"), output_mapping={"r": {"coalesce": ["{{b.output.r}}", "{{a.output.r}}"]}}))
    assert_names(issue, "", "output_mapping.r.coalesce[0]", "unknown node 'b'")


def test_map_item_outside_a_map() -> None:
    """{{_map_item}} only exists in the node a map runs."""
    issue = only_error(wf(agent("a", input={"x": "{{_map_item.id}}"})))
    assert_names(issue, "a", "input.x", "only defined in the node a map runs")


def test_bad_condition() -> None:
    """A condition that does not compile names the node and the case."""
    data = wf(
        agent("a"),
        {
            "id": "route",
            "type": "switch",
            "depends_on": ["a"],
            "cases": [
                {"condition": "'{{a.output.x}}' == 'ok'", "node": "b"},
                {"condition": "{{a.output.x}} == ok", "node": "b"},
            ],
        },
        agent("b", "route"),
    )
    assert_names(only_error(data), "route", "cases[1].condition", "bad condition", "unknown name 'ok'")


def test_bad_when() -> None:
    """when is a condition too."""
    issue = only_error(wf(agent("a"), agent("b", "a", when="{{a.output.n}}.bit_length() > 1")))
    assert_names(issue, "b", "when", "attribute access")


def test_unknown_node_type() -> None:
    """An unknown node type names the node and suggests the closest type."""
    issue = only_error(wf(agent("a"), {"id": "b", "type": "agnet", "agent_name": "X"}))
    assert_names(issue, "b", "type", "unknown node type 'agnet'", "did you mean 'agent'")


def test_unknown_field_with_did_you_mean() -> None:
    """An unknown field names node and field and suggests the closest one."""
    issue = only_error(wf(agent("a"), {"id": "b", "type": "agent", "agent_name": "X", "depend_on": ["a"]}))
    assert_names(issue, "b", "depend_on", "unknown field", "did you mean 'depends_on'")
    issue = only_error(wf(agent("a"), output_mapings={}))
    assert_names(issue, "", "output_mapings", "did you mean 'output_mapping'")
    issue = only_error(wf(agent("a", retry_strategy={"limit": 2, "backof": {}})))
    assert_names(issue, "a", "retry_strategy.backof", "did you mean 'backoff'")


def test_several_problems_are_all_reported() -> None:
    """Validation keeps going: every problem is listed, and loading raises one DefinitionError naming the first."""
    data = wf(agent("a", "nope"), agent("b", "a", input={"x": "{{zz.output}}"}), agent("b"))
    errors, _ = issues(data)
    assert len(errors) == 3
    with pytest.raises(DefinitionError) as caught:
        load_data(data, source="flow.yaml")
    assert isinstance(caught.value, InvalidDefinition)
    assert len(caught.value.issues) == 3
    assert str(caught.value).startswith("flow.yaml: nodes[")
    assert "(and 2 more error(s))" in str(caught.value)


def test_recursion_into_itself() -> None:
    """A workflow node calling its own workflow is refused."""
    issue = only_error(wf({"id": "again", "type": "workflow", "workflow_name": "w"}))
    assert_names(issue, "again", "workflow_name", "calls itself")


def test_fork_branch_ids_and_keys() -> None:
    """Fork branches need distinct ids and output keys."""
    data = wf(
        {
            "id": "f",
            "type": "fork",
            "branches": [
                {"id": "x", "agent_name": "A", "output_key": "same"},
                {"id": "y", "agent_name": "B", "output_key": "same"},
            ],
        }
    )
    assert_names(only_error(data), "f", "branches[1].output_key", "'same'")


def test_static_items_above_max_items() -> None:
    """A literal list longer than max_items can never run."""
    data = wf({"id": "m", "type": "map", "withItems": [1, 2, 3], "node": "each", "max_items": 2}, agent("each"))
    assert_names(only_error(data), "m", "max_items", "3 items")


# --- warnings --------------------------------------------------------------------------------


def test_unknown_agents_are_warnings() -> None:
    """Agents may start later: unknown ones are warned about, not refused."""
    data = wf(agent("a"), {"id": "sub", "type": "workflow", "workflow_name": "Other", "depends_on": ["a"]})
    errors, warnings = issues(data, known_agents={"Workr"})
    assert errors == []
    assert [(w.node_id, w.field) for w in warnings] == [("a", "agent_name"), ("sub", "workflow_name")]
    assert "did you mean 'Workr'" in warnings[0].problem
    assert issues(data, known_agents={"Worker", "Other"}) == ([], [])


def test_reference_to_a_node_not_upstream_is_a_warning() -> None:
    """Reading a sibling branch may give null: a warning, since coalesce over branches is normal."""
    data = wf(agent("a"), agent("b"), agent("c", "a", input={"x": "{{b.output.v}}"}))
    errors, warnings = issues(data)
    assert errors == []
    assert len(warnings) == 1
    assert (warnings[0].node_id, warnings[0].field) == ("c", "input.x")
    assert "not upstream" in warnings[0].problem


def test_quoted_number_is_a_warning() -> None:
    """SAM-style quoted numbers compare as numbers, and load time says so."""
    data = wf(agent("a"), agent("b", "a", when="'{{a.output.score}}' > 75"))
    errors, warnings = issues(data)
    assert errors == []
    assert [(w.node_id, w.field) for w in warnings] == [("b", "when")]


def test_valid_definition_with_every_node_type() -> None:
    """A definition using every node type validates cleanly."""
    data = wf(
        agent("start", input={"q": "{{workflow.input.q}}"}),
        {
            "id": "gather",
            "type": "fork",
            "depends_on": ["start"],
            "branches": [
                {
                    "id": "c",
                    "agent_name": "Customers",
                    "input": {"id": "{{start.output.id}}"},
                    "output_key": "customer",
                },
                {"id": "o", "agent_name": "Orders", "input": {"id": "{{start.output.id}}"}},
            ],
        },
        {
            "id": "each",
            "type": "map",
            "depends_on": ["gather"],
            "items": "{{gather.output.o.items}}",
            "node": "item",
            "concurrency_limit": 2,
        },
        agent("item", input={"item": "{{_map_item}}", "index": "{{_map_index}}"}),
        {
            "id": "poll",
            "type": "loop",
            "depends_on": ["start"],
            "node": "check",
            "condition": "{{check.output.ready}} == false and {{_loop_iteration}} < 3",
            "delay": "2s",
        },
        agent("check", input={"n": "{{_loop_iteration}}"}),
        {"id": "both", "type": "join", "wait_for": ["each", "poll"], "strategy": "any"},
        {
            "id": "decide",
            "type": "conditional",
            "depends_on": ["both"],
            "condition": "{{both.output.completed}} != []",
            "true_branch": "review",
            "false_branch": "skip",
        },
        {
            "id": "review",
            "type": "human_review",
            "depends_on": ["decide"],
            "prompt": "Approve {{start.output.id}}?",
            "data": "{{each.output.results}}",
            "on_reject": "redo",
            "timeout": "1d",
            "on_timeout": "reject",
        },
        agent("redo", "review"),
        agent("skip", "decide"),
        {"id": "sub", "type": "workflow", "workflow_name": "Other", "depends_on": ["review", "skip"]},
        agent("notify", input={"status": "{{workflow.status}}", "error": "{{workflow.error}}"}),
        on_exit={"always": "notify"},
        output_mapping={"result": {"coalesce": ["{{sub.output}}", "{{redo.output}}"]}, "check": "{{check.output}}"},
    )
    errors, warnings = issues(data)
    assert errors == []
    assert warnings == []
