"""order_validator for the compose smoke test: the example's own validation after a pause, so that the replica
running it can be killed mid-task; it logs the task it holds (a JSON line, as the agent's own logs are)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from typing import Any

from example_agents import validate_order

HOLD = float(os.environ.get("VALIDATOR_HOLD_SECONDS", "0"))


async def validate(order: dict[str, Any], ctx: Any) -> dict[str, Any]:
    line = {"event": "test.validating", "task_id": ctx.task_id, "attempt": ctx.attempt, "host": socket.gethostname()}
    print(json.dumps({**line, "order_id": order.get("order_id")}), file=sys.stderr, flush=True)
    await asyncio.sleep(HOLD)
    return await validate_order(order, ctx)
