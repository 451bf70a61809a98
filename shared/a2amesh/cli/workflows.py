"""Workflow-definition verbs of the ``a2amesh`` command line: executor, validate, graph.

The executor service and the workflow loader are imported inside the verb that uses them (nats, redis and
jsonschema; 0.5–1 s that ``a2amesh --help`` must not pay).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from a2amesh import logs
from a2amesh.cli.exits import EXIT_FAILED, EXIT_OK
from a2amesh.cli.serve import serve_until_signal
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import ConfigError, UsageError

__all__ = ["cmd_executor", "cmd_graph", "cmd_validate"]


async def cmd_executor(args: argparse.Namespace) -> int:
    """``a2amesh executor FOLDER``: run the workflow executor over a folder of definitions until a signal."""
    from a2amesh.executor.service import executor_service

    settings = verb_settings(args)
    logs.configure(settings.log_level if not args.verbose else "DEBUG", settings.log_format)
    folder = Path(args.folder)
    if not await asyncio.to_thread(folder.is_dir):
        raise UsageError(f"{folder}: the workflows folder does not exist")
    service = executor_service(folder, settings, reload_interval=args.reload_interval)
    await serve_until_signal(service.run, service.shutdown)
    return EXIT_OK


async def cmd_validate(args: argparse.Namespace) -> int:
    """``a2amesh validate FILE…``: check definition files; 1 when any has an error."""
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
    """``a2amesh graph FILE``: print a DAG workflow as a Mermaid flowchart."""
    from a2amesh.workflow.loader import LoadedWorkflow, load_file
    from a2amesh.workflow.mermaid import to_mermaid

    loaded = [w for w in load_file(args.file, name=args.name) if isinstance(w, LoadedWorkflow)]
    if not loaded:
        raise UsageError(f"{args.file}: no DAG workflow to draw")
    if len(loaded) > 1:
        names = ", ".join(w.name for w in loaded)
        raise UsageError(f"{args.file} holds {len(loaded)} workflows ({names}); pick one with --name")
    print(to_mermaid(loaded[0].definition, direction=args.direction))
    return EXIT_OK
