"""Property-based fuzz of every management API route from its own OpenAPI schema (schemathesis).

A real gateway (uvicorn, real NATS + Valkey, its own event loop in a thread) answers generated requests, valid
and invalid: no answer may be a 5xx, and every answer must match what the schema documents for it (status,
content type, body). ``GET /api/events`` streams without end and is left to its own tests.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks
from schemathesis.core.result import Ok

from a2amesh.builtins.agents import BuiltinAgents, ModelSettings
from a2amesh.builtins.service import BuiltinsWorker
from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.config import Settings
from a2amesh.gateway import Gateway, GatewaySettings
from a2amesh.store.executions import ExecutionStore
from a2amesh.store.keys import Keys
from a2amesh.store.redis import connect_redis
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.servers import MeshServers

EXAMPLES = 100
"""Generated requests per operation (about 10 operations: well under a minute)."""


class GatewayThread:
    """A gateway with its own event loop in a thread, over the test servers, in a namespace of its own."""

    def __init__(self, mesh: Settings, model_url: str) -> None:
        self.mesh = mesh
        self.model_url = model_url
        self.url = ""
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="fuzz-gateway", daemon=True)

    def start(self) -> str:
        self._thread.start()
        if not self._ready.wait(30):
            raise AssertionError("the fuzz gateway did not start within 30s")
        if self._error is not None:
            raise AssertionError(f"the fuzz gateway failed to start: {self._error!r}")
        return self.url

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # reported to the test by start()
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        bus = await Bus.connect(self.mesh, name="fuzz")
        await init_mesh(bus, self.mesh)
        redis = await connect_redis(self.mesh)
        store = ExecutionStore(redis, Keys(self.mesh.namespace), retention=600, lease_ttl=5)
        fields = {"workflow": "wf", "status": "running", "task_id": "known", "input": "{}"}
        await store.create("known", owner="fuzz", state_json="{}", fields=fields, nodes={}, events=[], timers={})
        await store.index_created("known", workflow="wf", status="running", timers={})
        models = ModelSettings(base_url=self.model_url, api_key=None, model="fake-model", embedding_model="fake")
        worker = BuiltinsWorker(BuiltinAgents(models), bus=bus, redis=redis, settings=self.mesh)
        serving = asyncio.create_task(worker.run_until(self._stop))  # the memory API writes through builtin-memory
        await worker.ready.wait()
        gw = Gateway(self.mesh, GatewaySettings(host="127.0.0.1", port=0), bus=bus, redis=redis)
        task = asyncio.create_task(gw.run_until(self._stop))
        await asyncio.wait({asyncio.create_task(gw.ready.wait()), task}, return_when=asyncio.FIRST_COMPLETED)
        self.url = gw.url
        self._ready.set()
        try:
            await task
            await serving
        finally:
            await store.aclose()
            await redis.aclose()
            await bus.close()


@pytest.fixture(scope="module")
def api_schema(servers: MeshServers) -> Iterator[object]:
    mesh = Settings.load(
        environ={},
        profile="test",
        nats_url=servers.nats_url,
        redis_url=servers.redis_url,
        namespace="f" + uuid.uuid4().hex[:8],
    )
    model = FakeOpenAIServer()
    model.start()
    gateway = GatewayThread(mesh, model.base_url)
    url = gateway.start()
    try:
        loaded = schemathesis.openapi.from_url(f"{url}/openapi.json").exclude(path="/api/events")
        loaded.config.update(base_url=url)
        yield loaded
    finally:
        gateway.stop()
        model.stop()


def test_every_route_answers_within_its_schema(api_schema: schemathesis.BaseSchema) -> None:
    """No generated request gets a 5xx or an answer its OpenAPI schema does not describe."""
    failures: list[str] = []
    labels = []
    for result in api_schema.get_all_operations():
        assert isinstance(result, Ok), result.err()
        operation = result.ok()
        labels.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        def check(case: schemathesis.Case[Any]) -> None:
            # an opaque cursor is only valid when this API issued it: schema-valid garbage is rightly a 422
            case.call_and_validate(timeout=30, excluded_checks=[checks.positive_data_acceptance])

        try:
            check()
        except Exception as e:
            failures.append(f"{operation.label}: {e}")
    assert len(labels) >= 9, labels
    assert not failures, "\n\n".join(failures)
