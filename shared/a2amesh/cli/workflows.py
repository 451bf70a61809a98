"""Workflow-definition verbs of the ``a2amesh`` command line: executor, validate, graph, and ``workflows
list|get|apply|delete|versions|restore|diff|enable|disable`` over the definitions store.

The ``workflows`` verbs call :class:`~a2amesh.manage.definitions.DefinitionService`, the code the management
API runs, on a Redis and NATS connection of their own. The executor service, the store and the workflow
loader are imported inside the verb that uses them (nats, redis and jsonschema; 0.5–1 s that
``a2amesh --help`` must not pay).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from a2amesh import logs
from a2amesh.cli.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from a2amesh.cli.output import print_table
from a2amesh.cli.serve import METRICS_HELP, serve_metrics, serve_until_signal
from a2amesh.cli.settings import verb_settings
from a2amesh.config import Settings
from a2amesh.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from a2amesh.manage.definitions import Applied, DefinitionIssue, DefinitionService

__all__ = ["cmd_executor", "cmd_graph", "cmd_llm_host", "cmd_validate", "cmd_workflows"]


async def cmd_executor(args: argparse.Namespace) -> int:
    """``a2amesh executor FOLDER``: run the workflow executor over a folder of definitions until a signal."""
    from a2amesh.executor.service import executor_service

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    serve_metrics(settings)
    folder = Path(args.folder)
    if not await asyncio.to_thread(folder.is_dir):
        raise UsageError(f"{folder}: the workflows folder does not exist")
    on_change = None
    if not args.no_apply:
        await _apply_folder(settings, folder)

        async def on_change() -> None:
            await _apply_folder(settings, folder)

    service = executor_service(
        folder,
        settings,
        reload_interval=args.reload_interval,
        on_folder_change=on_change,
        serve_folder=args.no_apply,
    )
    await serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


async def _apply_folder(settings: Settings, folder: Path) -> None:
    """Apply a folder's definitions into the store (the executor then serves them from there)."""
    from a2amesh.logs import get_logger

    log = get_logger("executor.apply")
    try:
        async with definition_service(settings, init=True) as service:
            for item in await service.apply_path(folder, author=_author()):
                if isinstance(item, tuple):
                    log.error("workflow.apply_failed", file=item[0], error=item[1])
                elif item.outcome != "unchanged":
                    log.info("workflow.applied", workflow=item.id, outcome=item.outcome, version=item.result.version)
    except Exception as e:  # the folder is still served from the files themselves
        log.error("workflow.apply_failed", folder=str(folder), error=str(e) or type(e).__name__)


async def cmd_validate(args: argparse.Namespace) -> int:
    """``a2amesh validate FILE|FOLDER…``: check definition files (a folder: its YAML and JSON files); 1 when any
    has an error."""
    from a2amesh.workflow.loader import check_file, definition_files

    results: list[dict[str, Any]] = []
    errors = 0
    files: list[str] = []
    for given in args.files:
        try:
            found_files = definition_files(given)
        except ConfigError as e:
            raise UsageError(str(e)) from e
        if not found_files:
            raise UsageError(f"{given}: no workflow definitions (*.yaml, *.yml, *.json) in this folder")
        files.extend(str(f) for f in found_files)
    for file in files:
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
    """``a2amesh graph FILE``: print a workflow (DAG or graph format) as a Mermaid flowchart."""
    from a2amesh.workflow.loader import load_file
    from a2amesh.workflow.mermaid import to_mermaid

    loaded = load_file(args.file, name=args.name)
    if not loaded:
        raise UsageError(f"{args.file}: no workflow to draw")
    if len(loaded) > 1:
        names = ", ".join(w.name for w in loaded)
        raise UsageError(f"{args.file} holds {len(loaded)} workflows ({names}); pick one with --name")
    print(to_mermaid(loaded[0].definition, direction=args.direction))
    return EXIT_OK


# --- a2amesh workflows ---------------------------------------------------------------------------


def _author() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (OSError, KeyError):
        return "cli"


@asynccontextmanager
async def definition_service(
    settings: Settings, *, init: bool = False, llm_agents: bool = False
) -> AsyncIterator[DefinitionService]:
    """The definitions service on connections of its own (closed on exit), announcing changes on NATS.

    Args:
        init: create the namespace's streams and buckets first (``a2amesh executor`` on a new namespace).
        llm_agents: the service of stored LLM agents instead of workflows.
    """
    from a2amesh.bus.nats import Bus
    from a2amesh.bus.setup import init_mesh
    from a2amesh.client import Client
    from a2amesh.manage.definitions import WORKFLOW_DEFINITIONS, DefinitionService
    from a2amesh.manage.llm_agents import LLM_AGENT_DEFINITIONS
    from a2amesh.store.definitions import DefinitionStore
    from a2amesh.store.keys import Keys
    from a2amesh.store.redis import connect_redis

    bus = await Bus.connect(settings, name="a2amesh-cli")
    try:
        if init:
            await init_mesh(bus, settings)
        async with Client(bus, settings) as client:
            redis = await connect_redis(settings, check=False)
            try:
                registry = client.registry
                kind = LLM_AGENT_DEFINITIONS if llm_agents else WORKFLOW_DEFINITIONS
                yield DefinitionService(
                    DefinitionStore(redis, Keys(settings.namespace), kind=kind.store_kind),
                    bus=bus,
                    known_agents=lambda: [card.name for card in registry.cards()],
                    kind=kind,
                )
            finally:
                await redis.aclose()
    finally:
        await bus.close()


def _issue_line(issue: DefinitionIssue) -> str:
    hint = f" (did you mean {issue.suggestion!r}?)" if issue.suggestion else ""
    return f"{issue.path}: {issue.message}{hint}" if issue.path else f"{issue.message}{hint}"


def _dump(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


async def cmd_workflows(args: argparse.Namespace) -> int:
    """``a2amesh workflows|llm-agents ACTION …``: manage the stored workflows or LLM agents."""
    from a2amesh.manage.definitions import InvalidWorkflow, StaleWorkflow, WorkflowExists, WorkflowNotFound

    settings = verb_settings(args)
    try:
        async with definition_service(settings, llm_agents=args.verb == "llm-agents") as service:
            return int(await _ACTIONS[args.action](service, args))
    except InvalidWorkflow as e:
        print(f"a2amesh: invalid definition ({len(e.errors)} error(s)):", file=sys.stderr)
        for issue in e.errors:
            print(f"  {_issue_line(issue)}", file=sys.stderr)
        return EXIT_USAGE
    except (WorkflowNotFound, WorkflowExists, StaleWorkflow) as e:
        raise UsageError(str(e)) from None


async def _list(service: DefinitionService, args: argparse.Namespace) -> int:
    from a2amesh.manage.definitions import WorkflowSummary

    rows = [WorkflowSummary.of(head) for head in await service.all()]
    if args.json:
        _dump([row.model_dump(by_alias=True) for row in rows])
        return EXIT_OK
    table = [("ID", "NAME", "FORMAT", "VERSION", "ENABLED", "UPDATED")]
    table += [(r.id, r.name, r.format, str(r.version), "yes" if r.enabled else "no", r.updated_at) for r in rows]
    print_table(table)
    return EXIT_OK


async def _get(service: DefinitionService, args: argparse.Namespace) -> int:
    import yaml

    from a2amesh.manage.definitions import WorkflowDetail

    stored = await service.get(args.id, args.version)
    if args.json:
        _dump(WorkflowDetail.of_stored(stored).model_dump(by_alias=True))
    else:
        print(f"# {args.id} version {stored.version.version} of {stored.head.version} ({stored.version.etag})")
        print(yaml.safe_dump(stored.document, sort_keys=False, allow_unicode=True), end="")
    return EXIT_OK


def _applied_line(item: Applied | tuple[str, str]) -> str:
    if isinstance(item, tuple):
        return f"{item[0]}: {item[1]}"
    return f"{item.id}: {item.outcome} (version {item.result.version})"


async def _apply(service: DefinitionService, args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not await asyncio.to_thread(path.exists):
        raise UsageError(f"{path}: no such file or folder")
    done = await service.apply_path(path, author=_author())
    failed = [item for item in done if isinstance(item, tuple)]
    if args.json:
        _dump(
            [
                {"file": i[0], "error": i[1]}
                if isinstance(i, tuple)
                else {"id": i.id, "outcome": i.outcome, **i.result.model_dump()}
                for i in done
            ]
        )
    else:
        for item in done:
            print(_applied_line(item), file=sys.stderr if isinstance(item, tuple) else sys.stdout)
            for warning in [] if isinstance(item, tuple) else item.result.warnings:
                print(f"  warning: {_issue_line(warning)}")
    return EXIT_USAGE if failed else EXIT_OK


async def _delete(service: DefinitionService, args: argparse.Namespace) -> int:
    if args.purge:
        await service.purge(args.id)
        print(f"{args.id}: purged (history included)")
    else:
        await service.delete(args.id, if_match=args.if_match, author=_author())
        print(f"{args.id}: deleted (history kept; --purge forgets it)")
    return EXIT_OK


async def _versions(service: DefinitionService, args: argparse.Namespace) -> int:
    from a2amesh.manage.definitions import VersionInfo

    rows = [VersionInfo.of(v) for v in await service.versions(args.id)]
    if args.json:
        _dump([row.model_dump() for row in rows])
        return EXIT_OK
    table = [("VERSION", "CREATED", "AUTHOR", "MESSAGE")]
    table += [(str(r.version), r.created_at, r.author or "-", r.message or "") for r in rows]
    print_table(table)
    return EXIT_OK


async def _restore(service: DefinitionService, args: argparse.Namespace) -> int:
    result = await service.restore(args.id, args.version, author=_author(), if_match=args.if_match)
    print(f"{args.id}: version {args.version} restored as version {result.version}")
    return EXIT_OK


async def _diff(service: DefinitionService, args: argparse.Namespace) -> int:
    text = await service.diff(args.id, args.old, args.new)
    print(text, end="")
    return EXIT_FAILED if text else EXIT_OK


async def _enable(service: DefinitionService, args: argparse.Namespace) -> int:
    enabled = args.action == "enable"
    await service.set_enabled(args.id, enabled, author=_author())
    print(f"{args.id}: {'enabled' if enabled else 'disabled'}")
    return EXIT_OK


_ACTIONS = {
    "list": _list,
    "get": _get,
    "apply": _apply,
    "delete": _delete,
    "versions": _versions,
    "restore": _restore,
    "diff": _diff,
    "enable": _enable,
    "disable": _enable,
}


def add_workflows_parser(sub: Any) -> None:
    """The ``workflows`` and ``llm-agents`` verbs and their actions."""
    _add_definitions_parser(sub, "workflows", "workflow")
    _add_definitions_parser(sub, "llm-agents", "LLM agent")
    s = sub.add_parser("llm-host", help="serve every stored LLM agent as its own agent (hot-updated)")
    s.add_argument("--interval", type=float, default=5.0, help="seconds between reconciles with the store")
    s.add_argument("--metrics-port", type=int, help=METRICS_HELP)
    s.set_defaults(func=cmd_llm_host)


def _add_definitions_parser(sub: Any, verb: str, noun: str) -> None:
    s = sub.add_parser(
        verb, help=f"manage stored {noun}s: list, get, apply, delete, versions, restore, diff, enable, disable"
    )
    actions = s.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = actions.add_parser("list", help=f"list stored {noun}s")
    a.add_argument("--json", action="store_true")
    a = actions.add_parser("get", help="print a definition (YAML; --json: with its version record)")
    a.add_argument("id")
    a.add_argument("--version", type=int, help="an older version")
    a.add_argument("--json", action="store_true")
    a = actions.add_parser("apply", help="upsert a definition file, or every file of a folder, by id")
    a.add_argument("path", metavar="FILE|DIR")
    a.add_argument("--json", action="store_true")
    a = actions.add_parser("delete", help=f"take a {noun} off the mesh (history kept unless --purge)")
    a.add_argument("id")
    a.add_argument("--if-match", help="only if this is still the current ETag")
    a.add_argument("--purge", action="store_true", help="forget it and its whole history")
    a = actions.add_parser("versions", help="list the versions")
    a.add_argument("id")
    a.add_argument("--json", action="store_true")
    a = actions.add_parser("restore", help="make a new version equal to an older one")
    a.add_argument("id")
    a.add_argument("version", type=int)
    a.add_argument("--if-match", help="only if this is still the current ETag")
    a = actions.add_parser("diff", help="unified diff of two versions (exit 1 when they differ)")
    a.add_argument("id")
    a.add_argument("old", type=int)
    a.add_argument("new", type=int, nargs="?", help="default: the current version")
    for action in ("enable", "disable"):
        a = actions.add_parser(action, help=f"{action} a {noun} (no new version)")
        a.add_argument("id")
    s.set_defaults(func=cmd_workflows)


async def cmd_llm_host(args: argparse.Namespace) -> int:
    """``a2amesh llm-host``: serve every enabled stored LLM agent until a signal."""
    from a2amesh.agent.pool import LlmAgentPool
    from a2amesh.service import ProcessService

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    serve_metrics(settings)
    service = ProcessService(
        settings,
        name="llm-host",
        build=lambda bus, redis: LlmAgentPool(bus=bus, redis=redis, settings=settings, interval=args.interval),
    )
    await serve_until_signal(service.run, service.shutdown)
    return EXIT_OK
