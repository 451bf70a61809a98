"""How a DAG execution is checkpointed: the split state write and the node records of ``a2amesh show``.

Pure functions over :class:`~a2amesh.workflow.dag.state.ExecutionState` (the executor does the
writing, :class:`~a2amesh.store.executions.ExecutionStore` the Redis layout). A state is written
split: the state without its ``nodes`` and ``outputs`` (both ``null``), the node instances changed since
the last write, each with its place in ``nodes``, and the outputs changed since then, each with its place in
``outputs``; the first write of a runner (or after a failed one) writes every instance and every output, and
a step that did more than append to or replace in either writes all of that one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import orjson
from pydantic import TypeAdapter

from a2amesh.jsontext import fields_json
from a2amesh.workflow.dag.state import ExecutionState, NodeRun
from a2amesh.workflow.engine_protocol import StateWrite

__all__ = ["initial_records", "node_record", "node_records", "state_json", "state_write"]

_RECORD_EXCLUDE = {
    "items",
    "children",
    "last_output",
    "launched",
    "timer",
    "open_children",
    "completed_children",
    "failed_children",
}


_HEAD_EXCLUDE = {"nodes", "outputs"}

_OUTPUT: TypeAdapter[Any] = TypeAdapter(Any)
"""Serialises one output as the state's ``outputs`` field does."""

_SPLIT_HEAD_TAIL = ',"nodes":null,"outputs":null}'
"""How the state of a split checkpoint ends (the store reads it back with the two hashes)."""


def node_record(run: NodeRun) -> str:
    """The JSON record of a node instance kept for ``a2amesh show`` (container bookkeeping left out)."""
    fields = run.__dict__.copy()
    # _RECORD_EXCLUDE (spelt out: a del statement of literal keys is the fastest way to drop them)
    del (
        fields["items"],
        fields["children"],
        fields["last_output"],
        fields["launched"],
        fields["timer"],
        fields["open_children"],
        fields["completed_children"],
        fields["failed_children"],
    )
    return fields_json(run, fields, _RECORD_EXCLUDE)


def _instance_json(run: NodeRun) -> str:
    """The whole instance as JSON."""
    return fields_json(run, run.__dict__)


def state_json(state: ExecutionState) -> str:
    """The whole state as JSON (``model_dump_json``)."""
    return fields_json(state, state.__dict__, nested=(NodeRun,))


def initial_records(state: ExecutionState) -> dict[str, str]:
    """The node records of a new execution: every instance."""
    return {path: node_record(run) for path, run in state.nodes.items()}


def node_records(old: ExecutionState, new: ExecutionState, touched: Iterable[str] | None) -> dict[str, str]:
    """The node records a step changed (path → JSON), among the paths it ``touched`` (None: all of them)."""
    if touched is None:
        return {path: node_record(run) for path, run in new.nodes.items() if _changed(old.nodes.get(path), run)}
    records: dict[str, str] = {}
    for path in touched:
        run = dict.get(new.nodes, path)  # read without copying (the engine's nodes copy on write)
        if run is not None and _changed(dict.get(old.nodes, path), run):
            records[path] = node_record(run)
    return records


def _changed(before: NodeRun | None, run: NodeRun) -> bool:
    # the same object is unchanged (copy on write). Else the fields compared as dicts: pydantic's __eq__
    # takes a slow path for models that differ (2.4 us against 0.3); NodeRun has no extras nor private attributes
    return before is not run and (before is None or before.__dict__ != run.__dict__)


def state_write(
    old: ExecutionState,
    new: ExecutionState,
    touched: Iterable[str] | None,
    positions: dict[str, int] | None,
) -> StateWrite:
    """The split write of ``new`` after ``old``: the changed instances and outputs, every instance's ordinal,
    whether all are written.

    ``positions``: the ordinals of the last write (None: write every instance and output); updated in place
    when the step only appended instances.
    """
    outputs, outputs_reset = _output_entries(old.outputs, new.outputs, positions is None)
    nodes = new.nodes
    if positions is not None and len(nodes) < len(positions):
        positions = None
    reset = positions is None
    fresh: list[str] = []
    if positions is not None:
        fresh = list(itertools.islice(reversed(nodes), len(nodes) - len(positions)))
        fresh.reverse()
        if any(path in positions for path in fresh):
            positions = None  # not an append-only change: write everything
    if positions is None:
        positions = {path: index for index, path in enumerate(nodes)}
        paths: Iterable[str] = nodes
        reset = True
    else:
        for path in fresh:
            positions[path] = len(positions)
        if touched is None:
            paths = [path for path, run in nodes.items() if dict.get(old.nodes, path) is not run]
        else:
            paths = {*touched, *fresh}
    entries = {
        path: f"{positions[path]} {_instance_json(dict.__getitem__(nodes, path))}" for path in paths if path in nodes
    }
    fields = dict(new.__dict__)
    del fields["nodes"], fields["outputs"]
    head = fields_json(new, fields, _HEAD_EXCLUDE)
    return StateWrite(head[:-1] + _SPLIT_HEAD_TAIL, entries, positions, reset, outputs, outputs_reset)


def _output_entries(old: dict[str, Any], new: dict[str, Any], reset: bool) -> tuple[dict[str, str], bool]:
    """The ``outputs`` entries to write (node id → ``"ordinal JSON"``), and whether they are all of them.

    Only the outputs appended or replaced since ``old``, unless ``reset`` or ``new`` is not ``old`` with
    outputs appended or replaced (one was removed, or the order changed). A step copies ``outputs`` and only
    assigns in it, so the outputs it kept are the same objects: the comparisons run in C, by identity first.
    """
    keys, values = list(new), list(new.values())
    kept = len(old)
    if reset or kept > len(keys) or keys[:kept] != list(old):
        return {key: f"{i} {_output_json(values[i])}" for i, key in enumerate(keys)}, True
    entries: dict[str, str] = {}
    before = list(old.values())
    if values[:kept] != before:  # an output replaced (a loop's target's, each iteration)
        for i in range(kept):
            if before[i] is not values[i] and before[i] != values[i]:
                entries[keys[i]] = f"{i} {_output_json(values[i])}"
    for i in range(kept, len(keys)):
        entries[keys[i]] = f"{i} {_output_json(values[i])}"
    return entries, False


def _output_json(value: Any) -> str:
    """One output as JSON (orjson where it can, as the store's reads do; pydantic for anything else)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return _OUTPUT.dump_json(value).decode()
