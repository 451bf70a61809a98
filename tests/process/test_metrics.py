"""Prometheus metrics: a real Prometheus (Debian's package) scrapes the gateway's /metrics and an agent's metrics port,
and its query API shows the series move as calls are made."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.servers import free_port
from tests.support.executors import write_workflows
from tests.support.otlp import OtlpReceiver
from tests.support.processes import REPO, Proc, ProcessFactory
from tests.support.waiting import eventually

PROMETHEUS = "/usr/bin/prometheus"


class Prometheus:
    """A Prometheus server of one test: its config scrapes ``targets`` (job → host:port) every second."""

    def __init__(self, tmp: Path, targets: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        (tmp / "tsdb").mkdir()
        self.log = tmp / "prometheus.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out,
                stderr=out,
            )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    async def ready(self, http: httpx.AsyncClient) -> bool:
        """Whether Prometheus serves queries (until its storage is open, its API answers 503)."""
        assert self.proc.poll() is None, f"prometheus exited: {self.log.read_text()[-3000:]}"
        try:
            return (await http.get(f"{self.url}/-/ready")).status_code == 200
        except httpx.TransportError:
            return False

    async def query(self, http: httpx.AsyncClient, promql: str) -> float | None:
        """The value of a query returning one sample (None: no sample)."""
        answer = (await http.get(f"{self.url}/api/v1/query", params={"query": promql})).json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        assert len(result) <= 1, f"{promql}: {result}"
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus_bin() -> str:
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.fail(f"{PROMETHEUS} is missing: .ci/install-prometheus installs Debian's prometheus package")
    return PROMETHEUS


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


async def start_gateway(processes: ProcessFactory, http: httpx.AsyncClient, env: dict[str, str]) -> tuple[Proc, str]:
    port = free_port()
    proc = await processes.start("gateway", "--port", str(port), env=env)
    url = f"http://127.0.0.1:{port}"

    async def ready() -> bool:
        assert proc.returncode is None, f"gateway exited: {proc.output()[-3000:]}"
        try:
            return (await http.get(f"{url}/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    await eventually(ready, timeout=30, what="the gateway to be ready")
    return proc, url


def send(text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"data": {"text": text}}]}
        },
    }


async def test_prometheus_scrapes_the_gateway_and_an_agent(
    prometheus_bin: str, processes: ProcessFactory, client: Client, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Calls through the gateway to an agent move the gateway's request series and the agent's call, queue-wait and
    duration series, as a real Prometheus scrapes and stores them."""
    env = {"PYTHONPATH": os.pathsep.join([str(REPO / "agent_cards"), os.environ.get("PYTHONPATH", "")])}
    agent_port = free_port()
    agent = await processes.start(
        "agent", str(REPO / "agent_cards" / "text_stats.yaml"), "--metrics-port", str(agent_port), env=env
    )

    def agent_up() -> bool:
        assert agent.returncode is None, f"agent exited: {agent.output()[-3000:]}"
        return client.registry.get("text_stats") is not None

    await eventually(agent_up, timeout=30, what="the card of text_stats")
    _, url = await start_gateway(processes, http, env)
    prom = Prometheus(tmp_path, {"gateway": url.removeprefix("http://"), "agent": f"127.0.0.1:{agent_port}"})
    try:

        async def scraped() -> bool:
            ups = [await prom.query(http, f'up{{job="{job}"}}') for job in ("gateway", "agent")]
            return ups == [1.0, 1.0]

        await eventually(lambda: prom.ready(http), timeout=60, what="prometheus to be ready", interval=0.2)
        await eventually(scraped, timeout=60, what="prometheus to scrape both targets", interval=0.5)
        calls = 'sum(a2amesh_calls_total{agent="text_stats",outcome="completed"})'
        requests = 'sum(a2amesh_http_requests_total{agent="text_stats",status="200"})'
        waits = 'sum(a2amesh_queue_wait_seconds_count{agent="text_stats"})'
        durations = 'sum(a2amesh_call_duration_seconds_count{job="agent"})'
        assert await prom.query(http, calls) is None, "no call was made yet"
        for i in range(3):
            answer = (
                await http.post(f"{url}/agents/text_stats/", json=send(f"a b {i}"), headers={"A2A-Version": "1.0"})
            ).json()
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer

        async def moved() -> bool:
            got = [await prom.query(http, q) for q in (calls, requests, waits, durations)]
            return got == [3.0, 3.0, 3.0, 3.0]

        await eventually(moved, timeout=30, what="the scraped series to count the 3 calls", interval=0.5)
        running = await prom.query(http, 'a2amesh_executions_by_status{job="gateway",status="running"}')
        assert running == 0.0, "the gateway reads the namespace's executions per status for each scrape"

        # the Grafana dashboard's queries are valid PromQL over series these processes export
        exported = (await http.get(f"http://127.0.0.1:{agent_port}/metrics")).text
        dashboard = json.loads((REPO / "deploy" / "observability" / "grafana-dashboard.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                answer = (await http.get(f"{prom.url}/api/v1/query", params={"query": target["expr"]})).json()
                assert answer["status"] == "success", (panel["title"], answer)
                for name in re.findall(r"a2amesh_[a-z_]+", target["expr"]):
                    family = re.sub(r"_(bucket|count|sum|total)$", "", name)
                    declared = f"# TYPE {name} " in exported or f"# TYPE {family} " in exported
                    assert declared, f"{panel['title']}: {name} is not exported"
    finally:
        await asyncio.to_thread(prom.stop)


async def test_metrics_need_a_read_key_when_keys_are_set(gateway: Any, http: httpx.AsyncClient) -> None:
    """/metrics answers the text format to a key with the read scope; 401 without a key, 403 without the scope."""
    keys = "reader=r3ad#read,runner=ru4n#run"
    url = await gateway(api_keys=parse_api_keys(keys))
    assert (await http.get(f"{url}/metrics")).status_code == 401
    assert (await http.get(f"{url}/metrics", headers={"Authorization": "Bearer ru4n"})).status_code == 403
    ok = await http.get(f"{url}/metrics", headers={"Authorization": "Bearer r3ad"})
    assert ok.status_code == 200
    assert ok.headers["content-type"].startswith("text/plain")
    assert "# TYPE a2amesh_http_requests_total counter" in ok.text


async def test_a_metrics_port_in_use_stops_the_process_with_one_line(processes: ProcessFactory) -> None:
    """A port that cannot be bound is a usage error naming it (exit 2), never a traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"PYTHONPATH": os.pathsep.join([str(REPO / "agent_cards"), os.environ.get("PYTHONPATH", "")])}
        proc = await processes.start(
            "agent", str(REPO / "agent_cards" / "text_stats.yaml"), "--metrics-port", str(port), env=env
        )
        assert await proc.wait(30) == 2, proc.output()[-2000:]
    lines = [line for line in proc.output().splitlines() if line.startswith("a2amesh:")]
    assert len(lines) == 1, proc.output()[-2000:]
    assert f"metrics port 127.0.0.1:{port}" in lines[0]
    assert "Traceback" not in proc.output()


ONE_NODE = """
name: counted
nodes:
  - {id: stats, type: agent, agent_name: text_stats, input: {text: "{{workflow.input.text}}"}}
"""


async def test_an_agent_and_an_executor_export_their_metrics_over_otlp(
    processes: ProcessFactory, client: Client, tmp_path: Path
) -> None:
    """With an OTLP endpoint set (and no metrics port), an agent and an executor send the same metrics as /metrics
    to the receiver, decoded from the real protobuf: counters as monotonic cumulative sums named without
    ``_total``, histograms with their buckets, the service name as the resource; the executor's queue wait is
    its workflow calls' time in their work queue. A gateway, which no one scrapes, exports the namespace's
    executions per status all the same."""
    receiver = OtlpReceiver().start()
    try:
        env = {
            "PYTHONPATH": os.pathsep.join([str(REPO / "agent_cards"), os.environ.get("PYTHONPATH", "")]),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRIC_EXPORT_INTERVAL": "300",
        }
        agent = await processes.start("agent", str(REPO / "agent_cards" / "text_stats.yaml"), env=env)

        def agent_up() -> bool:
            assert agent.returncode is None, f"agent exited: {agent.output()[-3000:]}"
            return client.registry.get("text_stats") is not None

        await eventually(agent_up, timeout=30, what="the card of text_stats")
        folder = write_workflows(tmp_path / "wf", {"counted": ONE_NODE})
        executor = await processes.start("executor", str(folder), env=env)

        def executor_up() -> bool:
            assert executor.returncode is None, f"executor exited: {executor.output()[-3000:]}"
            return client.registry.get("counted") is not None

        await eventually(executor_up, timeout=30, what="the card of the workflow counted")
        for i in range(2):
            run = await client.send("counted", {"text": f"a b c {i}"})
            assert run.status.state.value == "TASK_STATE_COMPLETED", run
        for i in range(3):
            task = await client.send("text_stats", {"text": f"a b {i}"})
            assert task.status.state.value == "TASK_STATE_COMPLETED", task

        def counted() -> bool:
            assert agent.returncode is None, f"agent exited: {agent.output()[-3000:]}"
            point = receiver.latest("a2amesh_calls", agent="text_stats", outcome="completed")
            ran = receiver.latest("a2amesh_executions", workflow="counted", status="completed")
            return point is not None and point.value == 5.0 and ran is not None and ran.value == 2.0

        await eventually(counted, timeout=30, what="5 completed calls and 2 executions exported", interval=0.2)
        async with httpx.AsyncClient(timeout=30) as http:
            await start_gateway(processes, http, env)

        def statuses() -> bool:
            point = receiver.latest("a2amesh_executions_by_status", status="completed")
            return point is not None and point.value == 2.0 and point.service == "a2amesh-gateway"

        await eventually(statuses, timeout=30, what="the gateway's executions per status exported", interval=0.2)
        calls = receiver.latest("a2amesh_calls", agent="text_stats", outcome="completed")
        assert calls is not None
        assert calls.kind == "sum"
        assert calls.monotonic
        assert calls.cumulative
        assert calls.service == "a2amesh-agent"
        assert 0 < calls.start_ns <= calls.time_ns
        duration = receiver.latest("a2amesh_call_duration_seconds", agent="text_stats")
        assert duration is not None
        assert duration.kind == "histogram"
        assert duration.count == 5, duration
        assert sum(duration.bucket_counts) == 5
        assert len(duration.bucket_counts) == len(duration.bounds) + 1
        assert duration.bounds[0] == 0.005
        assert duration.sum > 0
        wait = receiver.latest("a2amesh_queue_wait_seconds", agent="text_stats")
        assert wait is not None
        assert wait.count == 5, "the agent's requests: 3 calls and 2 nodes"
        workflow_wait = receiver.latest("a2amesh_queue_wait_seconds", agent="counted")
        assert workflow_wait is not None
        assert workflow_wait.count == 2, "the executor's: 2 calls of the workflow"
        assert workflow_wait.service == "a2amesh-executor"
        pending = receiver.latest("a2amesh_consumer_pending", agent="text_stats")
        assert pending is not None
        assert pending.kind == "gauge"
        assert receiver.latest("process_cpu_seconds") is not None, "the process series too, as on /metrics"
        assert not receiver.spans, "OTEL_TRACES_EXPORTER=none: metrics only"
        assert not receiver.bad_requests
    finally:
        receiver.stop()
