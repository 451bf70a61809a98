"""The ``a2amesh schedules`` verb: list schedules and their next fire; pause, resume or delete one.

Runs the management library (:mod:`a2amesh.manage.schedules`) the API runs. The store and the client are
imported inside the verb (redis and nats: what ``a2amesh --help`` must not load).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.output import print_table
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import UsageError

if TYPE_CHECKING:
    from a2amesh.manage.schedules import Schedules

__all__ = ["cmd_schedules"]


@contextlib.asynccontextmanager
async def _schedules(args: argparse.Namespace, *, live: bool) -> AsyncIterator[Schedules]:
    """The schedules of the namespace; with ``live``, with the card registry a delete checks."""
    from a2amesh.client import connect
    from a2amesh.manage.schedules import Schedules
    from a2amesh.store.session import open_store

    settings = verb_settings(args)
    async with open_store(settings) as stores:
        if not live:
            yield Schedules(stores.schedules)
            return
        async with connect(settings, name="a2amesh-cli") as client:
            yield Schedules(stores.schedules, client.registry)


async def cmd_schedules(args: argparse.Namespace) -> int:
    """``a2amesh schedules [list|pause|resume|delete] [NAME[/BRANCH]]``."""
    if args.action != "list" and not args.target:
        raise UsageError(f"schedules {args.action} needs NAME or NAME/BRANCH (see `a2amesh schedules`)")
    if args.action == "list" and args.target:
        raise UsageError(f"unknown schedules action {args.target!r}; expected pause, resume or delete")
    async with _schedules(args, live=args.action == "delete") as schedules:
        if args.action == "list":
            page = await schedules.all(args.workflow)
            return _print_schedules([s.model_dump(mode="json") for s in page.items], args.json)
        if args.action == "delete":
            deleted = await schedules.delete(args.target)
            print(json.dumps(deleted) if args.json else "\n".join(f"{d}: deleted" for d in deleted))
            return EXIT_OK
        changed = await (schedules.pause(args.target) if args.action == "pause" else schedules.resume(args.target))
    rows = [s.model_dump(mode="json") for s in changed]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            when = f", next fire {row['next_fire']}" if row["next_fire"] else ""
            print(f"{row['id']}: {'paused' if row['paused'] else 'resumed'}{when}")
    return EXIT_OK


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
    print_table(table)
    if not rows:
        print("(no schedules)")
    return EXIT_OK
