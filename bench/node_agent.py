"""The agent side of the node floor: what SPEC §3 asks of an agent for one node, in raw nats-py and redis-py.

``python bench/node_agent.py STREAM CONSUMER KEY_PREFIX`` (``NATS_URL`` and ``REDIS_URL`` in the
environment). Pulls one request at a time from the durable consumer CONSUMER of the work-queue stream
STREAM and, for each, does what an a2amesh agent must do and nothing else:

1. claim the task in Redis (``SET … NX PX`` with the task record, one transaction: §3.3);
2. store the final task record and drop the claim (one transaction);
3. publish the final to the request's ``A2A-Reply-To`` subject, which a file-stored stream keeps, and
   wait for its PubAck;
4. ack the request (§3.6: only after the result is stored and published).

No A2A payload is decoded or built and no handler runs: the request's bytes are the task record and the
answer. The bench (``floors.py``) plays the executor against it. Runs until SIGTERM / SIGINT.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import nats
import nats.errors
import redis.asyncio as aioredis

CLAIM_MS = 20_000
RECORD_TTL_S = 600


async def serve(nats_url: str, redis_url: str, stream: str, consumer: str, prefix: str) -> None:
    """Answer requests until a signal arrives."""
    nc = await nats.connect(nats_url, name="bench-node-agent")
    js = nc.jetstream()
    store = aioredis.from_url(redis_url)
    psub = await js.pull_subscribe_bind(durable=consumer, stream=stream)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    instance = f"node-agent-{os.getpid()}"
    while not stop.is_set():
        try:
            (msg,) = await psub.fetch(1, timeout=0.5)
        except nats.errors.TimeoutError:
            continue
        headers = msg.headers or {}
        task_key = f"{prefix}:{headers.get('Nats-Msg-Id', 'task')}"
        async with store.pipeline(transaction=True) as pipe:
            pipe.set(f"{task_key}:claim", instance, nx=True, px=CLAIM_MS)
            pipe.hset(task_key, mapping={"record": msg.data, "state": "TASK_STATE_WORKING"})
            pipe.expire(task_key, RECORD_TTL_S)
            claimed, _, _ = await pipe.execute()
        if not claimed:  # a redelivery while another copy works: left to it
            continue
        async with store.pipeline(transaction=True) as pipe:
            pipe.hset(task_key, mapping={"record": msg.data, "state": "TASK_STATE_COMPLETED"})
            pipe.delete(f"{task_key}:claim")
            await pipe.execute()
        await js.publish(headers["A2A-Reply-To"], msg.data, timeout=5, headers={"A2A-Final": "true"})
        await msg.ack()
    await store.aclose()
    await nc.drain()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit("usage: node_agent.py STREAM CONSUMER KEY_PREFIX  (NATS_URL, REDIS_URL in the environment)")
    asyncio.run(
        serve(
            os.environ.get("NATS_URL", "nats://127.0.0.1:4222"),
            os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"),
            *sys.argv[1:],
        )
    )
