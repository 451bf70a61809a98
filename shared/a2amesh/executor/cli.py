"""Workflow verbs of the ``a2amesh`` command line: executor, run, resume, cancel, retry, runs, show, schedules,
validate, graph.

Registered by :func:`add_verbs` from :func:`a2amesh.cli.build_parser`. Exit codes follow the CLI's:
0 ok, 1 the run failed (or a definition has errors), 2 a usage or input error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_verbs"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_verbs(sub: Any) -> None:
    """Add the workflow verbs to the CLI's subparsers."""
    s = sub.add_parser("executor", help="run the workflow executor over a folder of definitions (hot reload)")
    s.add_argument("folder", help="folder of workflow definitions (YAML / JSON)")
    s.add_argument("--reload-interval", type=float, default=1.0, help="seconds between scans of the folder")
    s.set_defaults(func=cmd_executor)

    s = sub.add_parser("run", help="run a workflow, showing live node progress, then its output")
    s.add_argument("workflow")
    s.add_argument("--input", default="{}", help="the workflow input as JSON (default {})")
    s.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the result")
    s.add_argument("--json", action="store_true", help="print the result as one JSON object")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("cancel", help="cancel a running execution (and every callee, recursively)")
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    s.set_defaults(func=cmd_cancel)

    s = sub.add_parser(
        "resume",
        help="answer a paused execution's human review: --approve, --reject [--reason], or --edit JSON",
    )
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    decision = s.add_mutually_exclusive_group(required=True)
    decision.add_argument("--approve", action="store_true", help="approve the data under review")
    decision.add_argument("--reject", action="store_true", help="reject it (on_reject decides what follows)")
    decision.add_argument("--edit", metavar="JSON", help="replace the data under review (checked by edit_schema)")
    s.add_argument("--reason", help="why (kept with the decision; a rejection's error names it)")
    s.add_argument("--path", help="the review to answer when several wait (default: the first)")
    s.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the next outcome")
    s.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    s.set_defaults(func=cmd_resume)

    s = sub.add_parser("retry", help="start a new execution reusing the outputs of an earlier one")
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    s.add_argument("--from", dest="from_node", help="re-run this node and everything after it")
    s.add_argument("--timeout", type=float, default=3600.0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_retry)

    s = sub.add_parser("runs", help="list executions")
    s.add_argument("--workflow", help="only this workflow")
    s.add_argument("--status", choices=["running", "paused", "completed", "failed", "canceled"])
    s.add_argument("--limit", type=int, default=50)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("show", help="show one execution: status, output and the node timeline")
    s.add_argument("run", help="execution id (a unique prefix is enough)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)

    s = sub.add_parser(
        "schedules",
        help="list schedules and their next fire; pause or resume one",
        description="a2amesh schedules [--json] [--workflow W] | schedules pause NAME[/BRANCH] | "
        "schedules resume NAME[/BRANCH]. NAME alone means every schedule of the workflow; the "
        "workflow's own graph is NAME/main.",
    )
    s.add_argument("action", nargs="?", default="list", choices=["list", "pause", "resume"])
    s.add_argument("target", nargs="?", metavar="NAME[/BRANCH]", help="the schedule to pause or resume")
    s.add_argument("--workflow", help="list only this workflow's schedules")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_schedules)

    s = sub.add_parser("validate", help="check workflow definition files; print errors and warnings")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("graph", help="print a workflow definition as a Mermaid flowchart")
    s.add_argument("file")
    s.add_argument("--name", help="the workflow to draw when the file holds several")
    s.add_argument("--direction", default="TD", choices=["TD", "LR", "BT", "RL"])
    s.set_defaults(func=cmd_graph)


def _cli() -> Any:
    from a2amesh import cli

    return cli


# --- executor --------------------------------------------------------------------------------


async def cmd_executor(args: argparse.Namespace) -> int:
    from a2amesh import logs
    from a2amesh.executor.service import executor_service

    cli = _cli()
    settings = cli._settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    folder = Path(args.folder)
    if not await asyncio.to_thread(folder.is_dir):
        raise cli.UsageError(f"{folder}: the workflows folder does not exist")
    service = executor_service(folder, settings, reload_interval=args.reload_interval)
    await cli._serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


# --- run / retry -----------------------------------------------------------------------------


def _parse_input(text: str) -> Any:
    from a2amesh.client import parse_json_arg

    try:
        return parse_json_arg(text)
    except ValueError as e:
        raise _cli().UsageError(f"--input: {e}") from e


async def cmd_run(args: argparse.Namespace) -> int:
    from a2amesh.client import make_message

    message = make_message(data=_parse_input(args.input))
    return await _run(args, args.workflow, message)


async def _run(args: argparse.Namespace, workflow: str, message: Any, *, verb: str = "run") -> int:
    from a2amesh.client import connect
    from a2amesh.protocol import TaskState

    settings = _cli()._settings(args)
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


def _review_request(task: Any) -> dict[str, Any] | None:
    """The ``review_request`` DataPart of a task paused for a human, or None."""
    message = task.status.message
    for part in message.parts if message is not None else []:
        if isinstance(part.data, dict) and part.data.get("type") == "review_request":
            return dict(part.data)
    return None


def _progress_line(metadata: dict[str, Any], started: float) -> str | None:
    event = metadata.get("workflow_event")
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
    from a2amesh.protocol import Part

    async with _store(args) as store:
        execution_id = await _resolve(store, args.run)
        record = await store.record(execution_id) or {}
    workflow = record.get("workflow", "")
    control = {"type": "workflow_retry", "execution_id": execution_id, "from_node": args.from_node}
    message = make_message(data=json.loads(record.get("input") or "{}"), parts=[Part.of_data(control)])
    return await _run(args, workflow, message)


# --- resume ----------------------------------------------------------------------------------


async def cmd_resume(args: argparse.Namespace) -> int:
    """Send the human's decision to a paused execution's task, then follow it like ``run``."""
    from a2amesh.client import make_message, parse_json_arg
    from a2amesh.errors import RpcError
    from a2amesh.protocol import codes

    cli = _cli()
    body: dict[str, Any] = {"decision": "approve" if args.approve else "reject" if args.reject else "edit"}
    if args.edit is not None:
        try:
            body["data"] = parse_json_arg(args.edit)
        except ValueError as e:
            raise cli.UsageError(f"--edit: {e}") from e
    if args.reason:
        body["reason"] = args.reason
    if args.path:
        body["path"] = args.path
    async with _store(args) as store:
        execution_id = await _resolve(store, args.run)
        record = await store.record(execution_id) or {}
    status = record.get("status", "")
    if status != "paused":
        raise cli.UsageError(f"run {execution_id} is {status or 'unknown'}, not paused for a review")
    workflow = record.get("workflow", "")
    message = make_message(
        data=body, task_id=record.get("task_id") or execution_id, context_id=record.get("context_id") or None
    )
    try:
        return await _run(args, workflow, message, verb=f"resume ({body['decision']})")
    except RpcError as e:
        if e.code == codes.INVALID_PARAMS:  # an edit refused by edit_schema, a path that waits for no review
            raise cli.UsageError(str(e)) from e
        raise


# --- cancel ----------------------------------------------------------------------------------


async def cmd_cancel(args: argparse.Namespace) -> int:
    from a2amesh.client import connect

    async with _store(args) as store:
        execution_id = await _resolve(store, args.run)
        record = await store.record(execution_id) or {}
    settings = _cli()._settings(args)
    async with connect(settings, name="a2amesh-cli") as client:
        task = await client.cancel_task(record.get("workflow", ""), execution_id, timeout=15)
    print(f"{execution_id}: {task.status.state.value}")
    return EXIT_OK


# --- runs / show -----------------------------------------------------------------------------


class _store:
    """``async with _store(args) as store``: an ExecutionStore on a fresh Redis connection."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.redis: Any = None

    async def __aenter__(self) -> Any:
        from a2amesh.store.executions import ExecutionStore
        from a2amesh.store.keys import Keys
        from a2amesh.store.redis import connect_redis

        settings = _cli()._settings(self.args)
        self.redis = await connect_redis(settings, check=False)
        return ExecutionStore(
            self.redis, Keys(settings.namespace), retention=settings.task_retention, lease_ttl=settings.lease_ttl
        )

    async def __aexit__(self, *exc: object) -> None:
        if self.redis is not None:
            await self.redis.aclose()


async def _resolve(store: Any, prefix: str) -> str:
    matches = await store.resolve_id(prefix)
    if not matches:
        raise _cli().UsageError(f"no execution {prefix!r} (see `a2amesh runs`)")
    if len(matches) > 1:
        raise _cli().UsageError(f"{prefix!r} matches {len(matches)} executions; give more of the id")
    return str(matches[0])


def _ms(value: str | None) -> float | None:
    return int(value) / 1000 if value and value.isdigit() else None


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "-"


def _duration(start: float | None, end: float | None) -> str:
    if start is None:
        return "-"
    seconds = (end or time.time()) - start
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"


async def cmd_runs(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        records = await store.list(workflow=args.workflow, status=args.status, limit=args.limit)
    rows = []
    for r in records:
        created, finished = _ms(r.get("created")), _ms(r.get("finished"))
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
                _when(row["started"]),
                _duration(row["started"], row["finished"]),
                (row["error"] or "")[:60],
            )
        )
    _cli()._print_table(table)
    if not rows:
        print("(no executions)")
    return EXIT_OK


async def cmd_show(args: argparse.Namespace) -> int:
    async with _store(args) as store:
        execution_id = await _resolve(store, args.run)
        record = await store.record(execution_id) or {}
        nodes = await store.nodes(execution_id)
    ordered = sorted(nodes.values(), key=lambda n: (n.get("started_at") or float("inf"), n.get("path", "")))
    created, finished = _ms(record.get("created")), _ms(record.get("finished"))
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
    print(f"status    {record.get('status', '')}  started {_when(created)}  took {_duration(created, finished)}")
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
                _duration(start, n.get("finished_at")) if start else "-",
                str(detail)[:70],
            )
        )
    print()
    _cli()._print_table(table)
    if output is not None:
        print("\noutput")
        print(json.dumps(output, indent=2, default=str))
    return EXIT_OK if record.get("status") != "failed" else EXIT_FAILED


# --- schedules -------------------------------------------------------------------------------


async def cmd_schedules(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from a2amesh.store.schedules import ScheduleStore, split_schedule_id

    cli = _cli()
    if args.action != "list" and not args.target:
        raise cli.UsageError(f"schedules {args.action} needs NAME or NAME/BRANCH (see `a2amesh schedules`)")
    if args.action == "list" and args.target:
        raise cli.UsageError(f"unknown schedules action {args.target!r}; expected pause or resume")
    async with _store(args) as store:
        schedules = ScheduleStore(store.redis, store.keys)
        found = [(s.id, s.state) for s in await schedules.all() if s.state is not None]
        if args.action == "list":
            rows = [_schedule_row(i, st) for i, st in found if not args.workflow or st.workflow == args.workflow]
            return _print_schedules(rows, args.json)
        workflow, branch = split_schedule_id(args.target)
        chosen = [i for i, st in found if st.workflow == workflow and branch in (None, st.branch)]
        if not chosen:
            raise cli.UsageError(f"no schedule {args.target!r} (see `a2amesh schedules`)")
        rows = []
        for schedule in chosen:
            if args.action == "pause":
                state = await schedules.pause(schedule)
            else:
                state = await schedules.resume(schedule, datetime.now(UTC))
            if state is not None:
                rows.append(_schedule_row(schedule, state))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            when = f", next fire {row['next_fire']}" if row["next_fire"] else ""
            print(f"{row['id']}: {'paused' if row['paused'] else 'resumed'}{when}")
    return EXIT_OK


def _schedule_row(schedule: str, state: Any) -> dict[str, Any]:
    return {"id": schedule, **state.row(), "running": state.running}


def _print_schedules(rows: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = [("SCHEDULE", "MODE", "WHEN", "TZ", "STATE", "LAST FIRE", "NEXT FIRE")]
    for row in rows:
        status = "paused" if row["paused"] else "running" if row["running"] else "active"
        upcoming = row["next_fire"] or ("after the run in flight" if row["running"] else "-")
        table.append(
            (row["id"], row["mode"], row["describe"], row["timezone"], status, row["last_fire"] or "-", upcoming)
        )
    _cli()._print_table(table)
    if not rows:
        print("(no schedules)")
    return EXIT_OK


# --- validate / graph ------------------------------------------------------------------------


async def cmd_validate(args: argparse.Namespace) -> int:
    from a2amesh.errors import ConfigError
    from a2amesh.workflow.loader import check_file

    results: list[dict[str, Any]] = []
    errors = 0
    for file in args.files:
        try:
            found = check_file(file)
        except ConfigError as e:
            errors += 1
            results.append({"file": file, "workflow": None, "ok": False, "errors": [str(e)], "warnings": []})
            continue
        for checked in found:
            report = checked.report
            errors += len(report.errors)
            results.append(
                {
                    "file": file,
                    "workflow": checked.name,
                    "ok": report.ok,
                    "errors": [str(i) for i in report.errors],
                    "warnings": [str(i) for i in report.warnings],
                }
            )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            mark = "ok" if r["ok"] else "invalid"
            print(f"{r['file']}: {r['workflow']}: {mark}" if r["workflow"] else f"{r['file']}: {mark}")
            for line in [*r["errors"], *r["warnings"]]:
                print(f"  {line}")
    return EXIT_FAILED if errors else EXIT_OK


async def cmd_graph(args: argparse.Namespace) -> int:
    from a2amesh.workflow.loader import LoadedWorkflow, load_file
    from a2amesh.workflow.mermaid import to_mermaid

    loaded = [w for w in load_file(args.file, name=args.name) if isinstance(w, LoadedWorkflow)]
    if not loaded:
        raise _cli().UsageError(f"{args.file}: no DAG workflow to draw")
    if len(loaded) > 1:
        names = ", ".join(w.name for w in loaded)
        raise _cli().UsageError(f"{args.file} holds {len(loaded)} workflows ({names}); pick one with --name")
    print(to_mermaid(loaded[0].definition, direction=args.direction))
    return EXIT_OK
