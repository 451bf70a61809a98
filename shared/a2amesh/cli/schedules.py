"""The ``a2amesh schedules`` verb: list schedules and their next fire; pause or resume one.

The store is imported inside the verb (redis: what ``a2amesh --help`` must not load).
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.output import print_table
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import UsageError

__all__ = ["cmd_schedules"]


async def cmd_schedules(args: argparse.Namespace) -> int:
    """``a2amesh schedules [list|pause|resume] [NAME[/BRANCH]]``."""
    from a2amesh.store.schedules import split_schedule_id
    from a2amesh.store.session import open_store

    if args.action != "list" and not args.target:
        raise UsageError(f"schedules {args.action} needs NAME or NAME/BRANCH (see `a2amesh schedules`)")
    if args.action == "list" and args.target:
        raise UsageError(f"unknown schedules action {args.target!r}; expected pause or resume")
    async with open_store(verb_settings(args)) as stores:
        schedules = stores.schedules
        found = [(s.id, s.state) for s in await schedules.all() if s.state is not None]
        if args.action == "list":
            rows = [_schedule_row(i, st) for i, st in found if not args.workflow or st.workflow == args.workflow]
            return _print_schedules(rows, args.json)
        workflow, branch = split_schedule_id(args.target)
        chosen = [i for i, st in found if st.workflow == workflow and branch in (None, st.branch)]
        if not chosen:
            raise UsageError(f"no schedule {args.target!r} (see `a2amesh schedules`)")
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
    print_table(table)
    if not rows:
        print("(no schedules)")
    return EXIT_OK
