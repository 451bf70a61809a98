"""Execution verbs of the ``a2amesh`` command line: run, retry, resume, cancel, runs, show.

Exit codes follow :mod:`a2amesh.cli.exits`: 0 ok, 1 the run failed, 2 a usage or input error. The client
and the store are imported inside the verbs (nats and redis: what ``a2amesh --help`` must not load).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from a2amesh.cli.exits import EXIT_FAILED, EXIT_OK
from a2amesh.cli.output import duration, print_table, seconds_of_ms, when
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import RpcError, UsageError
from a2amesh.protocol import Message, Part, Task, TaskState, codes
from a2amesh.protocol.vocabulary import RETRY_REQUEST, REVIEW_REQUEST, WORKFLOW_EVENT_KEY

if TYPE_CHECKING:
    from a2amesh.store.executions import ExecutionStore

__all__ = ["cmd_cancel", "cmd_resume", "cmd_retry", "cmd_run", "cmd_runs", "cmd_show"]


# --- run / retry -----------------------------------------------------------------------------


def _parse_input(text: str) -> Any:
    from a2amesh.client import parse_json_arg

    try:
        return parse_json_arg(text)
    except ValueError as e:
        raise UsageError(f"--input: {e}") from e


async def cmd_run(args: argparse.Namespace) -> int:
    from a2amesh.client import make_message

    message = make_message(data=_parse_input(args.input))
    return await _run(args, args.workflow, message)


async def _run(args: argparse.Namespace, workflow: str, message: Message, *, verb: str = "run") -> int:
    from a2amesh.client import connect

    settings = verb_settings(args)
    started = time.monotonic()
    async with connect(settings, name="a2amesh-cli") as client:
        call = await client.dispatch(workflow, message, stream=True, timeout=args.timeout)
        if not args.json:
            print(f"→ {verb} {call.task_id} ({workflow})", file=sys.stderr)
        async for event in call.events():
            if args.json or event.status_update is None:
                continue
            line = _progress_line(event.status_update.metadata or {}, started)
            if line:
                print(line, file=sys.stderr)
        task = call.task
    assert task is not None
    state = task.status.state
    text = task.status.message.text() if task.status.message else ""
    review = _review_request(task)
    ok = state == TaskState.COMPLETED
    if args.json:
        result = {
            "execution_id": task.id,
            "workflow": workflow,
            "status": state.value,
            "output": task.output(),
            "error": None if ok or review is not None else text,
        }
        if review is not None:
            result["review"] = review
        print(json.dumps(result, indent=2, default=str))
    elif state == TaskState.INPUT_REQUIRED and review is not None:
        elapsed = time.monotonic() - started
        print(f"⏸ paused for a review at {review.get('path')} after {elapsed:.2f}s: {text}", file=sys.stderr)
        print(json.dumps(review.get("data"), indent=2, default=str))
        print(
            f"resume with: a2amesh resume {task.id} --approve | --reject [--reason TEXT] | --edit JSON",
            file=sys.stderr,
        )
        return EXIT_OK
    else:
        elapsed = time.monotonic() - started
        print(f"← {state.value} in {elapsed:.2f}s" + ("" if ok else f": {text}"), file=sys.stderr)
        if ok:
            output = task.output()
            print(output if isinstance(output, str) else json.dumps(output, indent=2, default=str))
    return EXIT_OK if ok else EXIT_FAILED


def _review_request(task: Task) -> dict[str, Any] | None:
    """The ``review_request`` DataPart of a task paused for a human, or None."""
    message = task.status.message
    for part in message.parts if message is not None else []:
        if isinstance(part.data, dict) and part.data.get("type") == REVIEW_REQUEST:
            return dict(part.data)
    return None


def _progress_line(metadata: dict[str, Any], started: float) -> str | None:
    event = metadata.get(WORKFLOW_EVENT_KEY)
    if not isinstance(event, dict):
        return None
    kind = str(event.get("event", ""))
    path = event.get("path") or ""
    t = f"{time.monotonic() - started:6.2f}s"
    if kind == "node.started":
        attempt = event.get("attempt")
        agent = f" → {event['agent']}" if event.get("agent") else ""
        again = f" (attempt {attempt})" if attempt and attempt > 1 else ""
        return f"{t} ▶ {path}{agent}{again}"
    if kind == "node.completed":
        ms = event.get("duration_ms")
        return f"{t} ✓ {path}" + (f" ({ms} ms)" if ms is not None else "")
    if kind == "node.failed":
        return f"{t} ✗ {path}: {event.get('error', '')}"
    if kind == "node.skipped":
        return f"{t} ↷ {path} skipped ({event.get('reason', '')})"
    if kind == "node.canceled":
        return f"{t} ■ {path} canceled ({event.get('reason', '')})"
    if kind == "node.retrying":
        return f"{t} ↻ {path} failed ({event.get('error', '')}); retrying in {event.get('delay_s', 0):g}s"
    if kind == "map.progress":
        return f"{t} … {path}: {event.get('completed', 0)}/{event.get('total', 0)} items done"
    return None


async def cmd_retry(args: argparse.Namespace) -> int:
    from a2amesh.client import make_message

    execution_id, record = await _find(args, args.run)
    workflow = record.get("workflow", "")
    control = {"type": RETRY_REQUEST, "execution_id": execution_id, "from_node": args.from_node}
    message = make_message(data=json.loads(record.get("input") or "{}"), parts=[Part.of_data(control)])
    return await _run(args, workflow, message)


# --- resume ----------------------------------------------------------------------------------


async def cmd_resume(args: argparse.Namespace) -> int:
    """Send the human's decision to a paused execution's task, then follow it like ``run``."""
    from a2amesh.client import make_message, parse_json_arg

    body: dict[str, Any] = {"decision": "approve" if args.approve else "reject" if args.reject else "edit"}
    if args.edit is not None:
        try:
            body["data"] = parse_json_arg(args.edit)
        except ValueError as e:
            raise UsageError(f"--edit: {e}") from e
    if args.reason:
        body["reason"] = args.reason
    if args.path:
        body["path"] = args.path
    execution_id, record = await _find(args, args.run)
    status = record.get("status", "")
    if status != "paused":
        raise UsageError(f"run {execution_id} is {status or 'unknown'}, not paused for a review")
    workflow = record.get("workflow", "")
    message = make_message(
        data=body, task_id=record.get("task_id") or execution_id, context_id=record.get("context_id") or None
    )
    try:
        return await _run(args, workflow, message, verb=f"resume ({body['decision']})")
    except RpcError as e:
        if e.code == codes.INVALID_PARAMS:  # an edit refused by edit_schema, a path that waits for no review
            raise UsageError(str(e)) from e
        raise


# --- cancel ----------------------------------------------------------------------------------


async def cmd_cancel(args: argparse.Namespace) -> int:
    from a2amesh.client import connect

    execution_id, record = await _find(args, args.run)
    settings = verb_settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        task = await client.cancel_task(record.get("workflow", ""), execution_id, timeout=15)
    print(f"{execution_id}: {task.status.state.value}")
    return EXIT_OK


# --- runs / show -----------------------------------------------------------------------------


async def _find(args: argparse.Namespace, prefix: str) -> tuple[str, dict[str, str]]:
    """The execution id that ``prefix`` names, and its record (``{}`` if it just expired)."""
    from a2amesh.store.session import open_store

    async with open_store(verb_settings(args)) as stores:
        execution_id = await _resolve(stores.executions, prefix)
        return execution_id, await stores.executions.record(execution_id) or {}


async def _resolve(store: ExecutionStore, prefix: str) -> str:
    matches = await store.resolve_id(prefix)
    if not matches:
        raise UsageError(f"no execution {prefix!r} (see `a2amesh runs`)")
    if len(matches) > 1:
        raise UsageError(f"{prefix!r} matches {len(matches)} executions; give more of the id")
    return str(matches[0])


async def cmd_runs(args: argparse.Namespace) -> int:
    from a2amesh.store.session import open_store

    async with open_store(verb_settings(args)) as stores:
        records = await stores.executions.list(workflow=args.workflow, status=args.status, limit=args.limit)
    rows: list[dict[str, Any]] = []
    for r in records:
        created, finished = seconds_of_ms(r.get("created")), seconds_of_ms(r.get("finished"))
        rows.append(
            {
                "execution_id": r["execution_id"],
                "workflow": r.get("workflow", ""),
                "status": r.get("status", ""),
                "started": created,
                "finished": finished,
                "error": r.get("error") or None,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = [("RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "ERROR")]
    for row in rows:
        table.append(
            (
                row["execution_id"],
                row["workflow"],
                row["status"],
                when(row["started"]),
                duration(row["started"], row["finished"]),
                (row["error"] or "")[:60],
            )
        )
    print_table(table)
    if not rows:
        print("(no executions)")
    return EXIT_OK


async def cmd_show(args: argparse.Namespace) -> int:
    from a2amesh.store.session import open_store

    async with open_store(verb_settings(args)) as stores:
        execution_id = await _resolve(stores.executions, args.run)
        record = await stores.executions.record(execution_id) or {}
        nodes = await stores.executions.nodes(execution_id)
    ordered = sorted(nodes.values(), key=lambda n: (n.get("started_at") or float("inf"), n.get("path", "")))
    created, finished = seconds_of_ms(record.get("created")), seconds_of_ms(record.get("finished"))
    output = json.loads(record["output"]) if record.get("output") else None
    if args.json:
        print(
            json.dumps(
                {
                    "execution_id": execution_id,
                    "workflow": record.get("workflow"),
                    "digest": record.get("digest"),
                    "status": record.get("status"),
                    "started": created,
                    "finished": finished,
                    "input": json.loads(record.get("input") or "null"),
                    "output": output,
                    "error": record.get("error") or None,
                    "usage": json.loads(record.get("usage") or "{}"),
                    "reused_from": record.get("reused_from") or None,
                    "nodes": ordered,
                },
                indent=2,
                default=str,
            )
        )
        return EXIT_OK
    print(f"run       {execution_id}")
    print(f"workflow  {record.get('workflow', '')} (definition {record.get('digest', '')[:12]})")
    print(f"status    {record.get('status', '')}  started {when(created)}  took {duration(created, finished)}")
    if record.get("error"):
        print(f"error     {record['error']}")
    table = [("NODE", "TYPE", "STATUS", "ATTEMPTS", "START", "DURATION", "DETAIL")]
    for n in ordered:
        start = n.get("started_at")
        offset = f"+{max(start - created, 0) * 1000:.0f}ms" if start and created else "-"
        detail = n.get("error") or n.get("reason") or (f"→ {n['agent']}" if n.get("agent") else "")
        table.append(
            (
                n.get("path", ""),
                n.get("type", ""),
                n.get("status", ""),
                str(n.get("attempt") or "-"),
                offset,
                duration(start, n.get("finished_at")) if start else "-",
                str(detail)[:70],
            )
        )
    print()
    print_table(table)
    if output is not None:
        print("\noutput")
        print(json.dumps(output, indent=2, default=str))
    return EXIT_OK if record.get("status") != "failed" else EXIT_FAILED
