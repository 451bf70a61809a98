"""Schedules of DAG and graph definitions: the definition fields, the scheduled graphs, timers and ids."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from a2amesh.errors import DefinitionError
from a2amesh.executor.scheduler import scheduled_graphs
from a2amesh.schedules import Continuous, Daily, Every, ScheduleState
from a2amesh.store.schedules import schedule_id, split_schedule_id, timer_ms
from a2amesh.workflow.dag.definition import WorkflowDefinition
from a2amesh.workflow.dag.validation import validate_data
from a2amesh.workflow.loader import load_workflow

NODES: list[dict[str, Any]] = [{"id": "a", "type": "agent", "agent_name": "b"}]


def dag(**fields: Any) -> WorkflowDefinition:
    return WorkflowDefinition.parse({"name": "w", "nodes": NODES, **fields}, source="w.yaml")


def test_dag_schedule_fields_are_normalised() -> None:
    """executionMode/schedule on a DAG accept camelCase, numbers and aliases, stored canonically."""
    definition = dag(executionMode="Interval", schedule=60, scheduleInput={"x": 1})
    assert (definition.execution_mode, definition.schedule, definition.schedule_input) == ("interval", "60", {"x": 1})
    assert dag(schedule="daily@9:05").execution_mode == "interval"
    assert dag(schedule="daily@9:05").schedule == "daily@09:05"
    assert dag(execution_mode="continuous").schedule == "5"
    assert dag().execution_mode == "one_time"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"schedule": "daily@25:00"}, "w.yaml: schedule: 'daily@25:00': hour 25 in '25:00' is not 0–23"),
        ({"execution_mode": "sometimes"}, "w.yaml: execution_mode: 'sometimes': unknown execution mode"),
        ({"execution_mode": "interval"}, "w.yaml: schedule: None: interval mode needs a schedule"),
        ({"execution_mode": "continuous", "schedule": "weekly@1"}, "continuous mode takes a delay in seconds"),
    ],
)
def test_dag_schedule_errors_name_the_field(fields: dict[str, Any], message: str) -> None:
    """A bad mode or schedule on a DAG is one DefinitionError naming the field and the value."""
    with pytest.raises(DefinitionError) as caught:
        dag(**fields)
    assert message in str(caught.value)


def test_one_time_schedule_is_a_warning() -> None:
    """A schedule on a one_time DAG is kept but warned about (it never fires)."""
    definition, report = validate_data({"name": "w", "nodes": NODES, "execution_mode": "one_time", "schedule": 60})
    assert definition is not None
    assert report.ok
    assert [str(w) for w in report.warnings if w.field == "schedule"]
    assert scheduled_graphs([_Loaded("w", definition)]) == {}


class _Loaded:
    def __init__(self, name: str, definition: Any) -> None:
        self.name = name
        self.definition = definition


def test_scheduled_graphs_of_dag_and_graph_workflows() -> None:
    """DAG workflows and every non-one_time graph branch become schedules with their own ids and inputs."""
    graph = load_workflow(
        {
            "name": "multi",
            "nodes": [{"id": "m", "type": "agent", "config": {"agentId": "x"}}],
            "edges": [],
            "branches": [
                {
                    "id": "hourly",
                    "nodes": [{"id": "h", "type": "agent", "config": {"agentId": "x"}}],
                    "edges": [],
                    "executionMode": "interval",
                    "schedule": "3600",
                },
                {
                    "id": "loop",
                    "nodes": [{"id": "l", "type": "agent", "config": {"agentId": "x"}}],
                    "edges": [],
                    "executionMode": "continuous",
                },
                {"id": "once", "nodes": [{"id": "o", "type": "agent", "config": {"agentId": "x"}}], "edges": []},
            ],
        }
    )
    graphs = scheduled_graphs([graph, _Loaded("w", dag(schedule="daily@07:00", schedule_input={"k": 1}))])
    assert sorted(graphs) == ["multi/hourly", "multi/loop", "w/main"]
    assert graphs["multi/hourly"].spec == Every(3600)
    assert graphs["multi/loop"].spec == Continuous(5.0)
    assert graphs["multi/loop"].branch == "loop"
    assert graphs["w/main"].spec.text == "daily@07:00"
    assert isinstance(graphs["w/main"].spec, Daily)
    assert graphs["w/main"].input == {"k": 1}
    assert graphs["multi/hourly"].input == {}


def test_schedule_ids_and_timers() -> None:
    """Ids are workflow/branch; the timer is the next fire, the run's fire while in flight, none when paused."""
    assert schedule_id("w", None) == "w/main"
    assert split_schedule_id("w/b") == ("w", "b")
    assert split_schedule_id("w") == ("w", None)
    now = datetime(2030, 1, 1, 12, 0, 0, 300000, tzinfo=UTC)
    state = ScheduleState.new("w", Every(10), now=now)
    assert timer_ms(state) == int(datetime(2030, 1, 1, 12, 0, 10, tzinfo=UTC).timestamp() * 1000)
    assert timer_ms(state.pause()) is None
    looping = ScheduleState.new("w", Continuous(2), now=now)
    fire = now + timedelta(seconds=2)
    running = looping.fired(fire)
    assert running.running
    assert timer_ms(running) == int(fire.timestamp() * 1000)
    ended = running.ended(fire + timedelta(seconds=1))
    assert timer_ms(ended) == int((fire + timedelta(seconds=3)).timestamp() * 1000)
