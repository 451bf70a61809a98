"""A raw nats-py responder in its own process: answers every request on SUBJECT with the request's payload.

The other end of the floors' request-reply (``python bench/responder.py SUBJECT``, ``NATS_URL`` in the
environment). Runs until SIGTERM / SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import nats
from nats.aio.msg import Msg


async def serve(url: str, subject: str) -> None:
    """Echo requests on ``subject`` until a signal arrives."""
    nc = await nats.connect(url, name="bench-responder")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def on_request(msg: Msg) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(subject, cb=on_request)
    await nc.flush()
    await stop.wait()
    await nc.drain()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: responder.py SUBJECT  (NATS_URL in the environment)")
    asyncio.run(serve(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"), sys.argv[1]))
