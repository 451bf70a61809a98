"""Execution verbs of the ``a2amesh`` command line: run, retry, resume, cancel, runs, show.

Exit codes follow :mod:`a2amesh.cli.exits`: 0 ok, 1 the run failed, 2 a usage or input error. The client
and the store are imported inside the verbs (nats and redis: what ``a2amesh --help`` must not load).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from a2amesh.cli.exits import EXIT_OK, exit_of_state
from a2amesh.cli.output import duration, print_table, task_summary, when
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import RpcError, UsageError
from a2amesh.protocol import Message, codes
from a2amesh.protocol.states import parse_state, rfc3339, state_word
from a2amesh.protocol.vocabulary import WORKFLOW_EVENT_KEY

if TYPE_CHECKING:
    from a2amesh.manage.runs import Runs

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
    summary = task_summary(task)
    status = summary["status"]
    text = task.status.message.text() if task.status.message else ""
    review = summary.get("review")
    if args.json:
        result = {"execution_id": task.id, "workflow": workflow, **{k: v for k, v in summary.items() if k != "task_id"}}
        print(json.dumps(result, indent=2, default=str))
    elif status == "paused":
        elapsed = time.monotonic() - started
        where = f" for a review at {review.get('path')}" if review else ""
        print(f"⏸ paused{where} after {elapsed:.2f}s: {text}", file=sys.stderr)
        print(json.dumps(review.get("data") if review else summary.get("question"), indent=2, default=str))
        print(f"resume with: {resume_command(task.id, review)}", file=sys.stderr)
    else:
        elapsed = time.monotonic() - started
        print(f"← {status} in {elapsed:.2f}s" + ("" if status == "completed" else f": {text}"), file=sys.stderr)
        if status == "completed":
            output = task.output()
            print(output if isinstance(output, str) else json.dumps(output, indent=2, default=str))
    return exit_of_state(status)


def resume_command(execution_id: str, review: dict[str, Any] | None) -> str:
    """The exact command that answers the review ``execution_id`` waits for."""
    edit = " | --edit JSON" if review is None or review.get("edit_schema") or review.get("data") is not None else ""
    return f"a2amesh resume {execution_id} --approve | --reject [--reason TEXT]{edit}"


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
        return f"{t} ■ {path} cancelled ({event.get('reason', '')})"
    if kind == "node.retrying":
        return f"{t} ↻ {path} failed ({event.get('error', '')}); retrying in {event.get('delay_s', 0):g}s"
    if kind == "map.progress":
        return f"{t} … {path}: {event.get('completed', 0)}/{event.get('total', 0)} items done"
    return None


async def cmd_retry(args: argparse.Namespace) -> int:
    from a2amesh.manage.runs import RetryRequest

    async with _runs(args) as runs:
        execution_id = await runs.executions.resolve(args.run)
        workflow, message = await runs.retry_message(execution_id, RetryRequest(from_node=args.from_node))
    return await _run(args, workflow, message)


@contextlib.asynccontextmanager
async def _runs(args: argparse.Namespace) -> AsyncIterator[Runs]:
    """The management library's :class:`Runs` over a client and a store of this command's own."""
    from a2amesh.client import connect
    from a2amesh.manage.executions import Executions
    from a2amesh.manage.runs import Runs
    from a2amesh.store.session import open_store

    settings = verb_settings(args)
    async with open_store(settings) as stores, connect(settings, name="a2amesh-cli") as client:
        yield Runs(client, Executions(stores.executions))


# --- resume ----------------------------------------------------------------------------------


async def cmd_resume(args: argparse.Namespace) -> int:
    """Send the human's decision to a paused execution's task, then follow it like ``run``."""
    from a2amesh.client import parse_json_arg
    from a2amesh.manage.runs import ResumeRequest

    data = None
    if args.edit is not None:
        try:
            data = parse_json_arg(args.edit)
        except ValueError as e:
            raise UsageError(f"--edit: {e}") from e
    decision = "approve" if args.approve else "reject" if args.reject else "edit"
    request = ResumeRequest(decision=decision, data=data, reason=args.reason or None, path=args.path or None)
    async with _runs(args) as runs:
        execution_id = await runs.executions.resolve(args.run)
        workflow, message = await runs.resume_message(execution_id, request)
    try:
        return await _run(args, workflow, message, verb=f"resume ({decision})")
    except RpcError as e:
        if e.code == codes.INVALID_PARAMS:  # an edit refused by edit_schema, a path that waits for no review
            raise UsageError(str(e)) from e
        raise


# --- cancel ----------------------------------------------------------------------------------


async def cmd_cancel(args: argparse.Namespace) -> int:
    async with _runs(args) as runs:
        execution_id = await runs.executions.resolve(args.run)
        task = await runs.cancel_task(execution_id)
    print(f"{execution_id}: {state_word(task.status.state)}")
    return EXIT_OK


# --- runs / show -----------------------------------------------------------------------------


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


async def cmd_runs(args: argparse.Namespace) -> int:
    from a2amesh.manage.executions import ExecutionQuery, Executions
    from a2amesh.store.session import open_store

    try:
        status = None if args.status is None else parse_state(args.status)
    except ValueError as e:
        raise UsageError(f"--status: {e}") from e
    query = ExecutionQuery(
        workflow=args.workflow, status=status, parent=args.parent, limit=args.limit, cursor=args.cursor
    )
    async with open_store(verb_settings(args)) as stores:
        page = await Executions(stores.executions).list(query)
    rows: list[dict[str, Any]] = [
        {
            "execution_id": e.id,
            "workflow": e.workflow,
            "status": e.status,
            "started_at": rfc3339(e.started_at),
            "finished_at": rfc3339(e.finished_at),
            "error": e.error,
        }
        for e in page.items
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        table = [("RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "ERROR")]
        for item, row in zip(page.items, rows, strict=True):
            table.append(
                (
                    row["execution_id"],
                    row["workflow"],
                    row["status"],
                    when(_seconds(item.started_at)),
                    duration(_seconds(item.started_at), _seconds(item.finished_at)),
                    (row["error"] or "")[:60],
                )
            )
        print_table(table)
        if not rows:
            print("(no executions)")
    if page.next_cursor:
        print(f"more: a2amesh runs --cursor {page.next_cursor}", file=sys.stderr)
    return EXIT_OK


async def cmd_show(args: argparse.Namespace) -> int:
    from a2amesh.manage.executions import Executions
    from a2amesh.store.session import open_store

    async with open_store(verb_settings(args)) as stores:
        executions = Executions(stores.executions)
        execution_id = await executions.resolve(args.run)
        detail = await executions.get(execution_id)
        nodes = (await executions.nodes(execution_id)).items
    created, finished = _seconds(detail.started_at), _seconds(detail.finished_at)
    if args.json:
        shown = detail.model_dump(mode="json", exclude={"trail", "id"})
        body = {"execution_id": execution_id, **shown}
        body["nodes"] = [n.model_dump(mode="json") for n in nodes]
        print(json.dumps(body, indent=2, default=str))
        return EXIT_OK
    print(f"run       {execution_id}")
    print(f"workflow  {detail.workflow} (definition {(detail.digest or '')[:12]})")
    print(f"status    {detail.status}  started {when(created)}  took {duration(created, finished)}")
    if detail.error:
        print(f"error     {detail.error}")
    table = [("NODE", "TYPE", "STATUS", "ATTEMPTS", "START", "DURATION", "DETAIL")]
    for n in nodes:
        start = _seconds(n.started_at)
        offset = f"+{max(start - created, 0) * 1000:.0f}ms" if start and created else "-"
        detail_text = n.error or n.reason or (f"→ {n.agent}" if n.agent else "")
        table.append(
            (
                n.path,
                n.type,
                n.status,
                str(n.attempt or "-"),
                offset,
                duration(start, _seconds(n.finished_at)) if start else "-",
                str(detail_text)[:70],
            )
        )
    print()
    print_table(table)
    if detail.output is not None:
        print("\noutput")
        print(json.dumps(detail.output, indent=2, default=str))
    if detail.status == "paused":
        _print_review(execution_id, detail.review)
    return EXIT_OK


def _print_review(execution_id: str, review: dict[str, Any] | None) -> None:
    """What a paused run waits for, and the command that answers it."""
    print("\npaused for a review" + (f" at {review.get('path')}" if review and review.get("path") else ""))
    if review:
        if review.get("prompt"):
            print(f"question  {review['prompt']}")
        if review.get("data") is not None:
            print("data")
            print(json.dumps(review["data"], indent=2, default=str))
        if review.get("edit_schema"):
            print("edit schema")
            print(json.dumps(review["edit_schema"], indent=2, default=str))
    print(f"answer    {resume_command(execution_id, review)}")
