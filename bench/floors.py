"""The two floors of SPEC §11, measured in the same run on the same servers.

- **core floor**: one raw nats-py request-reply (the responder is another process, ``responder.py``)
  plus one Redis transaction of two writes (MULTI/EXEC pipeline);
- **durable floor**: one JetStream publish awaited for its ack, one pull (``fetch(1)``), one ack,
  plus the same Redis transaction;
- **node floor** (not in SPEC §11; what the per-node overhead can reach at best): what SPEC §3 asks of one
  workflow node, in raw clients with no other work. The bench plays the executor: it publishes the
  request to a work-queue stream while it writes its checkpoint, then waits for the final on its reply
  subject. The agent is ``node_agent.py`` in its own process: pull, claim, final write, final
  published (stored by a stream, PubAck awaited), ack. Two JetStream hops and three Redis transactions,
  two of them one after the other.

All three are timed in one loop, interleaved, so machine drift hits them alike. The probes
here are reused by ``roundtrip.py`` as the raw references beside the mesh.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python bench/floors.py` from anywhere

import nats
import nats.errors
import redis.asyncio as aioredis
from nats.js import api

from bench.common import BenchContext, Child, Figure, Section, main, ms_since, ratio

PAYLOAD = b'{"jsonrpc":"2.0","id":"x","method":"SendMessage","params":{"message":{"data":{"n":1}}}}'.ljust(400, b" ")
REDIS_KEYS = 64  # the transaction cycles through this many key pairs, so memory stays flat


class Probes:
    """Raw nats-py and redis-py operations on the run's servers, in their own namespace.

    ``open`` starts the responder process, creates two streams (a work queue with a durable pull
    consumer, and a limits stream for plain publish-acks) and connects to Redis; ``close`` removes
    what it created.
    """

    def __init__(self, ctx: BenchContext, namespace: str) -> None:
        self.ctx = ctx
        self.ns = namespace
        up = namespace.upper().replace("-", "_")
        self.rr_subject = f"{namespace}.floor.rr"
        self.work_stream, self.work_subject = f"{up}_FLOOR_WORK", f"{namespace}.floor.work"
        self.pub_stream, self.pub_subject = f"{up}_FLOOR_PUB", f"{namespace}.floor.pub"
        self.node_stream, self.node_subject = f"{up}_FLOOR_NODE", f"{namespace}.floor.node"
        self.node_replies, self.node_reply_prefix = f"{up}_FLOOR_NODE_REPLIES", f"{namespace}.floor.node_reply"
        self.node_agent: Child | None = None
        self._node_reply: asyncio.Future[bytes] | None = None
        self.nc: Any = None
        self.js: Any = None
        self.psub: Any = None
        self.redis: aioredis.Redis | None = None
        self.responder: Child | None = None
        self._i = 0

    @classmethod
    async def open(cls, ctx: BenchContext, namespace: str, *, node: bool = False) -> Probes:
        """Start the responder, create the streams and the consumer, connect to Redis; with ``node``, the
        node floor's streams and agent process too."""
        p = cls(ctx, namespace)
        p.responder = await ctx.spawn(
            f"responder-{namespace}",
            [sys.executable, str(Path(__file__).with_name("responder.py")), p.rr_subject],
            ctx.child_env(namespace),
        )
        p.nc = await nats.connect(ctx.srv.nats_url, name="bench-floors")
        p.js = p.nc.jetstream()
        await p._add_streams(p.work_stream, p.work_subject, p.pub_stream, p.pub_subject)
        p.psub = await p.js.pull_subscribe(
            p.work_subject,
            durable="floor",
            stream=p.work_stream,
            config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30, max_ack_pending=1024),
        )
        p.redis = aioredis.from_url(ctx.srv.redis_url)
        await p.redis.ping()
        await p._wait_for_responder()
        if node:
            await p._open_node()
        return p

    async def _add_streams(self, work: str, work_subject: str, kept: str, kept_subject: str) -> None:
        """A file-stored work-queue stream and a file-stored limits stream (the last 10,000 messages)."""
        await self.js.add_stream(
            api.StreamConfig(
                name=work,
                subjects=[work_subject],
                retention=api.RetentionPolicy.WORK_QUEUE,
                storage=api.StorageType.FILE,
            )
        )
        await self.js.add_stream(
            api.StreamConfig(
                name=kept,
                subjects=[kept_subject],
                retention=api.RetentionPolicy.LIMITS,
                storage=api.StorageType.FILE,
                max_msgs=10_000,
                discard=api.DiscardPolicy.OLD,
            )
        )

    async def _open_node(self) -> None:
        """The node floor's streams (requests: work queue; replies: limits), its consumer and its agent process."""
        await self._add_streams(self.node_stream, self.node_subject, self.node_replies, f"{self.node_reply_prefix}.>")
        await self.js.add_consumer(
            self.node_stream,
            api.ConsumerConfig(
                durable_name="node", ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30, max_ack_pending=1024
            ),
        )

        async def on_reply(msg: Any) -> None:
            if self._node_reply is not None and not self._node_reply.done():
                self._node_reply.set_result(msg.data)

        await self.nc.subscribe(f"{self.node_reply_prefix}.bench.>", cb=on_reply)
        self.node_agent = await self.ctx.spawn(
            f"node-agent-{self.ns}",
            [
                sys.executable,
                str(Path(__file__).with_name("node_agent.py")),
                self.node_stream,
                "node",
                f"{self.ns}:floor:node",
            ],
            self.ctx.child_env(self.ns),
        )
        try:
            await self.node_floor(timeout=20)
        except TimeoutError:
            raise RuntimeError(f"the node agent did not answer:\n{self.node_agent.tail()}") from None

    async def _wait_for_responder(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self.nc.request(self.rr_subject, b"ping", timeout=0.5)
                return
            except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                assert self.responder is not None
                if self.responder.proc.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the responder did not answer:\n{self.responder.tail()}") from None
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        """Stop the node agent, delete the streams and keys, close the connections, stop the responder."""
        if self.node_agent is not None:
            await self.node_agent.stop()
        if self.js is not None:
            streams = [self.work_stream, self.pub_stream]
            if self.node_agent is not None:
                streams += [self.node_stream, self.node_replies]
            for stream in streams:
                try:
                    await self.js.delete_stream(stream)
                except Exception as e:  # cleanup must not hide the measurement
                    print(f"  (could not delete stream {stream}: {e})", file=sys.stderr)
        if self.nc is not None:
            await self.nc.close()
        if self.redis is not None:
            keys = [k async for k in self.redis.scan_iter(match=f"{self.ns}:floor:*", count=1000)]
            if keys:
                await self.redis.delete(*keys)
            await self.redis.aclose()
        if self.responder is not None:
            await self.responder.stop()

    # single operations, each returning milliseconds
    async def request_reply(self) -> float:
        """One core NATS request to the responder process and its reply."""
        t0 = time.perf_counter()
        await self.nc.request(self.rr_subject, PAYLOAD, timeout=5)
        return ms_since(t0)

    async def js_publish(self) -> float:
        """One JetStream publish to a file-stored limits stream, awaited until the PubAck."""
        t0 = time.perf_counter()
        await self.js.publish(self.pub_subject, PAYLOAD, timeout=5)
        return ms_since(t0)

    async def redis_tx(self) -> float:
        """One MULTI/EXEC transaction of two writes (a hash write and a SET with a TTL: a task record and a claim)."""
        assert self.redis is not None
        self._i += 1
        k = f"{self.ns}:floor:{{{self._i % REDIS_KEYS}}}"
        t0 = time.perf_counter()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(f"{k}:task", mapping={"record": PAYLOAD, "state": "TASK_STATE_WORKING"})
            pipe.set(f"{k}:claim", "bench", px=20_000)
            await pipe.execute()
        return ms_since(t0)

    async def core_floor(self) -> dict[str, float]:
        """Request-reply, then the Redis transaction; step times and the total."""
        rr = await self.request_reply()
        tx = await self.redis_tx()
        return {"request_reply": rr, "redis_tx": tx, "total": rr + tx}

    async def durable_floor(self) -> dict[str, float]:
        """JetStream publish + ack, pull, ack, then the Redis transaction; step times and the total."""
        t0 = time.perf_counter()
        await self.js.publish(self.work_subject, PAYLOAD, timeout=5)
        t1 = time.perf_counter()
        msgs = await self.psub.fetch(1, timeout=5)
        t2 = time.perf_counter()
        await msgs[0].ack()
        t3 = time.perf_counter()
        tx = await self.redis_tx()
        steps = {
            "publish_ack": (t1 - t0) * 1000,
            "pull": (t2 - t1) * 1000,
            "ack": (t3 - t2) * 1000,
            "redis_tx": tx,
        }
        steps["total"] = sum(steps.values())
        return steps

    async def node_floor(self, timeout: float = 5) -> float:
        """One node at its floor: the request published while the checkpoint is written, then its final back."""
        self._i += 1
        self._node_reply = asyncio.get_running_loop().create_future()
        headers = {"Nats-Msg-Id": f"{self.ns}-{self._i}", "A2A-Reply-To": f"{self.node_reply_prefix}.bench.{self._i}"}
        t0 = time.perf_counter()
        await asyncio.gather(
            self.js.publish(self.node_subject, PAYLOAD, timeout=timeout, headers=headers), self.redis_tx()
        )
        await asyncio.wait_for(self._node_reply, timeout)
        return ms_since(t0)


async def run(ctx: BenchContext) -> list[Figure]:
    """Measure the three floors, interleaved, after a warm-up."""
    n = ctx.scale(2000, 100)
    probes = await Probes.open(ctx, ctx.new_namespace("floor"), node=True)
    try:
        for _ in range(ctx.scale(200, 20)):
            await probes.core_floor()
            await probes.durable_floor()
            await probes.node_floor()
        core: list[dict[str, float]] = []
        durable: list[dict[str, float]] = []
        node: list[float] = []
        for i in range(n):
            if i % 2:
                core.append(await probes.core_floor())
                durable.append(await probes.durable_floor())
                node.append(await probes.node_floor())
            else:
                node.append(await probes.node_floor())
                durable.append(await probes.durable_floor())
                core.append(await probes.core_floor())
    finally:
        await probes.close()

    def col(rows: list[dict[str, float]], k: str) -> list[float]:
        return [r[k] for r in rows]

    return [
        Figure.from_samples(
            "floors.core", "core floor: NATS request-reply + Redis MULTI/EXEC", col(core, "total"), note="SPEC §11"
        ),
        Figure.from_samples(
            "floors.core.request_reply", "  request-reply (responder process)", col(core, "request_reply")
        ),
        Figure.from_samples("floors.core.redis_tx", "  Redis MULTI/EXEC, 2 writes", col(core, "redis_tx")),
        Figure.from_samples(
            "floors.durable",
            "durable floor: JS publish+ack, pull, ack + Redis MULTI/EXEC",
            col(durable, "total"),
            note="SPEC §11",
        ),
        Figure.from_samples(
            "floors.durable.publish_ack", "  JetStream publish, await PubAck", col(durable, "publish_ack")
        ),
        Figure.from_samples("floors.durable.pull", "  pull (fetch 1)", col(durable, "pull")),
        Figure.from_samples("floors.durable.ack", "  ack (no wait)", col(durable, "ack")),
        Figure.from_samples("floors.durable.redis_tx", "  Redis MULTI/EXEC, 2 writes", col(durable, "redis_tx")),
        Figure.from_samples(
            "floors.node",
            "node floor: one workflow node of SPEC §3, raw clients",
            node,
            note=f"{ratio(statistics.median(node), statistics.median(col(durable, 'total')))} the durable floor",
        ),
    ]


SECTION = Section(
    "floors",
    "floors: core (request-reply + Redis tx), durable (JetStream + Redis tx) and node (SPEC §3 in raw clients)",
    run,
    latency=True,
)

if __name__ == "__main__":
    raise SystemExit(main([SECTION], "floors", __doc__ or ""))
