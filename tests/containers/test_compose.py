"""docker-compose.yml as users run it (docker-compose 1.29), with the credentials `a2amesh deploy init` makes: NATS
and Valkey from the local server images, two executors, the gateway, each example agent in its own container and
order_validator twice, each process signed in as its own least-privilege user, on the project's internal network;
the host calls in through the gateway's published port (and reaches the servers through
docker-compose.ports.yml, where each credential is refused what its process must not do). One order_validator
container is SIGKILLed while it holds a workflow's task, and the run completes on the other replica. The 3-node
NATS override comes up as a JetStream cluster with the mesh on it. Each project prints its timeline
(docs/deploy.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import shutil
import ssl
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
import yaml
from redis.asyncio import Redis
from redis.exceptions import AuthenticationError

from a2amesh.provision import DeployInit, redis_password_file
from tests.containers.conftest import Timeline, free_port
from tests.support.docker import REPO, BuiltImages, Compose, DockerError, adocker, ainspect
from tests.support.least_privilege import check_nats, check_redis
from tests.support.waiting import eventually, within

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]

BASE_FILE = REPO / "docker-compose.yml"
CLUSTER_FILE = REPO / "docker-compose.nats-cluster.yml"
PORTS_FILE = REPO / "docker-compose.ports.yml"
TLS_FILE = REPO / "docker-compose.tls.yml"
AGENTS = ("echo", "order_validator", "text_stats", "notifier", "pricing", "job_status")
LLM_AGENTS = ("2nchat_router", "2nchat_rc2", "2nchat_dm2", "2nchat_2n")
WORKFLOWS = ("order_pipeline", "notify_customer")
CONTAINERS = {
    "nats": 1,
    "redis": 1,
    "executor": 2,
    "gateway": 1,
    "remotes": 1,
    **dict.fromkeys(AGENTS, 1),
    "order_validator": 2,
}
"""Containers per service that docker-compose.yml asks for (scale: 2 for the executor and order_validator)."""
HOLD = 5.0
"""Seconds the smoke test's order_validator holds an order before validating it: time to see which replica took
it and kill that one while the run is in flight."""
UP_WAIT = 180
"""Seconds for every container to run, pass its HEALTHCHECK and publish its card (Python starts on 2 busy cores)."""
V = {"A2A-Version": "1.0"}


def send(data: dict[str, Any]) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"data": data}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def log_lines(logs: str) -> list[dict[str, Any]]:
    """The JSON lines of a container's log (structlog's, and the slow validator's own)."""
    lines = []
    for line in logs.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines


async def logs_of(container: str) -> list[dict[str, Any]]:
    code, out = await adocker("logs", container)
    if code != 0:
        raise DockerError(f"docker logs {container} exited {code}: {out.strip()}")
    return log_lines(out)


def deploy_init(folder: Path, *, tls: bool = False) -> tuple[Path, str]:
    """`a2amesh deploy init` for the example agents into ``folder`` (as root, the files go to the images' uid
    10001, mode 0600), with ``tls`` also the local CA; the folder and the gateway's demo key."""
    agents = sorted(p.stem for p in (REPO / "agent_cards").glob("*.yaml"))
    # compose runs every example agent but 2nChat's LLM agents, which need a model endpoint
    assert set(agents) - set(AGENTS) == set(LLM_AGENTS), agents
    DeployInit(folder, "a2amesh", agents, tls=tls).run()
    return folder, (folder / "api-demo.key").read_text().strip()


def project_env(images: BuiltImages, secrets_dir: Path) -> dict[str, str]:
    """The variables docker-compose.yml reads: this session's images, free host ports (all on 127.0.0.1), the
    folder of deploy init's files."""
    return {
        "A2AMESH_TAG": images.tag,
        "A2AMESH_BASE": images.base,
        "A2AMESH_NATS_IMAGE": images.image("nats"),
        "A2AMESH_VALKEY_IMAGE": images.image("valkey"),
        "A2AMESH_SECRETS": str(secrets_dir),
        "A2AMESH_PROFILE": "test",
        "A2AMESH_SHUTDOWN_GRACE": "5",
        "A2AMESH_GATEWAY_HOST": "127.0.0.1",
        **{
            var: str(free_port())
            for var in ("A2AMESH_NATS_PORT", "A2AMESH_NATS_MONITOR_PORT", "A2AMESH_REDIS_PORT", "A2AMESH_GATEWAY_PORT")
        },
    }


FAST_HEALTH = {
    "services": {s: {"healthcheck": {"interval": "1s"}} for s in ("gateway", "executor", "remotes", *AGENTS)}
}
"""The images' HEALTHCHECKs (every 10 s) run every second, so the tests see them pass sooner."""


def compose_override(folder: Path, *, slow_validator: bool) -> Path:
    """The tests' compose override: FAST_HEALTH, and with ``slow_validator`` order_validator run from
    agent_cards/order_validator.yaml with the handler of tests/containers/agents/slow_validator.py (the example's
    validation after HOLD seconds), from a read-only mount."""
    override = folder / "docker-compose.test.yml"
    if not slow_validator:
        override.write_text(json.dumps(FAST_HEALTH))
        return override
    folder = folder / "agents"
    folder.mkdir(mode=0o755)
    definition = yaml.safe_load((REPO / "agent_cards" / "order_validator.yaml").read_text())
    (folder / "order_validator.yaml").write_text(yaml.safe_dump({**definition, "handler": "slow_validator:validate"}))
    shutil.copy(Path(__file__).parent / "agents" / "slow_validator.py", folder / "slow_validator.py")
    for file in folder.iterdir():
        file.chmod(0o644)
    service = {
        "volumes": [f"{folder}:/agents:ro"],
        "environment": {
            "AGENT_FILE": "/agents/order_validator.yaml",
            "PYTHONPATH": "/app/agent_cards",
            "VALIDATOR_HOLD_SECONDS": str(HOLD),
        },
    }
    slow = {**FAST_HEALTH["services"]["order_validator"], **service}
    override.write_text(json.dumps({"services": {**FAST_HEALTH["services"], "order_validator": slow}}))
    return override


async def wait_running_and_healthy(compose: Compose, expected: dict[str, int]) -> None:
    """Every service has its number of containers, all running, and those with a HEALTHCHECK healthy; a container
    that exits fails at once with its last log lines."""

    async def check() -> bool:
        ready = True
        for service, count in expected.items():
            names = await compose.containers(service)
            if len(names) < count:
                return False
            assert len(names) == count, f"{service} has {len(names)} containers, expected {count}: {names}"
            for name in names:
                state = (await ainspect(name))["State"]
                if not state["Running"]:
                    _, logs = await adocker("logs", "--tail", "30", name)
                    status = f"{state['Status']}, exit {state['ExitCode']}"
                    raise AssertionError(f"{name} is not running ({status}):\n{logs}")
                ready = ready and state.get("Health", {"Status": "healthy"})["Status"] == "healthy"
        return ready

    await eventually(check, timeout=UP_WAIT, interval=0.5, what=f"the containers of {compose.project} to be healthy")


@contextlib.asynccontextmanager
async def running(compose: Compose, timeline: Timeline, up: str, down: str, *services: str) -> AsyncIterator[None]:
    """``up -d`` (all services, or those named) for the block; on a failure the containers' last log lines are
    printed; ``down -v`` in every case, after which no container or volume of the project may be left."""
    try:
        with timeline.step(up):
            await compose.run("up", "-d", "--no-build", *services, timeout=180)
        yield
    except BaseException:
        logs = await compose.run("logs", "--no-color", "--tail=40", timeout=60, check=False)
        print(f"--- the last log lines of project {compose.project} ---\n{logs}")
        raise
    finally:
        with timeline.step(down):
            stopped = await compose.run("down", "-v", "--timeout", "20", timeout=180, check=False)
    assert await compose.containers() == [], f"docker-compose down left containers behind:\n{stopped}"
    assert await compose.volumes() == [], f"docker-compose down -v left volumes behind:\n{stopped}"


async def servers_are_durable(env: dict[str, str], secrets_dir: Path) -> None:
    """NATS runs JetStream on the file store with every write flushed (deploy init's nats.conf), Valkey with the
    append-only file and no eviction (deploy/redis.conf): read from the servers through their host ports (Valkey
    as its admin user)."""
    async with httpx.AsyncClient(timeout=10) as http:
        varz = (await http.get(f"http://127.0.0.1:{env['A2AMESH_NATS_MONITOR_PORT']}/varz")).json()
    jetstream = varz["jetstream"]["config"]
    assert jetstream["sync_always"] is True, jetstream
    assert jetstream["store_dir"].startswith("/data/jetstream"), jetstream
    assert varz["max_payload"] == 8 * 1024 * 1024, varz["max_payload"]
    admin = (secrets_dir / redis_password_file("admin")).read_text().strip()
    url = f"redis://127.0.0.1:{env['A2AMESH_REDIS_PORT']}/0"
    valkey = Redis.from_url(url, username="admin", password=admin, decode_responses=True)
    async with valkey:
        config = await valkey.config_get("appendonly") | await valkey.config_get("maxmemory-policy")
    assert config == {"appendonly": "yes", "maxmemory-policy": "noeviction"}, config


async def gateway_names(http: httpx.AsyncClient, key: str) -> set[str]:
    """The names in the gateway's directory (public, like the cards; the key is sent as a client would)."""
    answer = await http.get("/agents", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return {card["name"] for card in answer.json()["agents"]}


async def test_compose_files_are_valid_for_docker_compose_1_29(tmp_path: Path) -> None:
    """Guards against compose files that docker-compose 1.29 refuses, a replica count it silently drops
    (`deploy.replicas` without --compatibility), a cluster override that leaves services on one server, servers
    published or left unhardened, a network with a way out, or a container given another's credentials."""
    env = {"A2AMESH_NATS_IMAGE": "a2amesh-nats:x", "A2AMESH_SECRETS": str(tmp_path)}
    single = yaml.safe_load(await Compose("config", (BASE_FILE,), env).run("config"))
    services = single["services"]
    assert {s: services[s].get("scale", 1) for s in CONTAINERS} == CONTAINERS
    assert services["nats"]["image"] == "a2amesh-nats:x"
    assert [s for s in services if services[s].get("ports")] == ["gateway"], "only the gateway is published"
    assert all(p.startswith("127.0.0.1:") for p in services["gateway"]["ports"]), services["gateway"]["ports"]
    assert single["networks"]["mesh"] == {"internal": True}, single["networks"]
    # the gateway answers from outside; the stored remotes' proxies reach remote agents outside
    assert {s for s in services if "edge" in services[s]["networks"]} == {"gateway", "remotes"}
    for name, service in services.items():
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert service["security_opt"] == ["no-new-privileges"], name
    assert services["nats"]["user"] == services["redis"]["user"] == "10001:10001"
    assert "--protected-mode" in services["redis"]["command"]
    assert services["redis"]["command"][services["redis"]["command"].index("--protected-mode") + 1] == "yes"
    for agent in AGENTS:
        environment = services[agent]["environment"]
        assert [x["source"] for x in services[agent]["secrets"]] == [f"nats-{agent}", f"redis-{agent}"]
        assert (environment["NATS_USER"], environment["REDIS_USER"]) == (agent, agent)
        assert environment["NATS_PASSWORD_FILE"] == f"/run/secrets/nats-{agent}"
    assert [x["source"] for x in services["gateway"]["secrets"]] == ["nats-gateway", "redis-gateway", "api-keys"]
    assert [x["source"] for x in services["init"]["secrets"]] == ["nats-admin"]
    assert [x["source"] for x in services["remotes"]["secrets"]] == ["nats-remotes", "redis-remotes"]
    assert (services["remotes"]["environment"]["NATS_USER"], services["remotes"]["command"][-1]) == (
        "remotes",
        "--stored",
    )
    published = yaml.safe_load(await Compose("config", (BASE_FILE, PORTS_FILE), env).run("config"))
    for server in ("nats", "redis"):
        ports = published["services"][server]["ports"]
        assert ports, server
        assert all(p.startswith("127.0.0.1:") for p in ports), ports
    tls = yaml.safe_load(await Compose("config", (BASE_FILE, TLS_FILE), env).run("config"))
    assert f"{tmp_path}/tls/nats-server.pem:/etc/nats/tls/nats-server.pem:ro" in tls["services"]["nats"]["volumes"]
    for service in (*AGENTS, "executor", "gateway", "remotes", "init"):
        assert tls["services"][service]["environment"]["NATS_TLS_CA"] == "/run/secrets/nats-ca", service
        assert {"source": "nats-ca"} in tls["services"][service]["secrets"], service
    cluster = yaml.safe_load(await Compose("config", (BASE_FILE, CLUSTER_FILE), env).run("config"))
    assert {"nats", "nats-2", "nats-3"} <= set(cluster["services"])
    for node in ("nats", "nats-2", "nats-3"):
        service = cluster["services"][node]
        assert (service["read_only"], service["cap_drop"], service["networks"]) == (True, ["ALL"], {"mesh": {}})
        assert f"{tmp_path}/nats-accounts.conf:/etc/nats/nats-accounts.conf:ro" in service["volumes"], node
    for service in (*AGENTS, "executor", "gateway", "remotes", "init"):
        environment = cluster["services"][service]["environment"]
        assert environment["NATS_URL"].split(",") == [f"nats://{n}:4222" for n in ("nats", "nats-2", "nats-3")]
        assert environment["A2AMESH_REPLICAS"] == "3", service


@pytest.fixture(scope="module")
def timeline(images: BuiltImages) -> Iterator[Timeline]:
    line = Timeline("compose smoke test")
    line.add(f"build: deploy/build-images --servers ({images.origin})", images.seconds)
    yield line
    line.report()


async def test_compose_mesh_serves_calls_and_survives_a_replica_killed_mid_run(
    images: BuiltImages, tmp_path: Path, timeline: Timeline
) -> None:
    """Guards against a compose file whose containers do not find each other, a replica count that is not real, a
    gateway that does not reach agents in other containers, and a task lost with the container running it."""
    folder, key = deploy_init(tmp_path / "secrets", tls=True)
    env = project_env(images, folder)
    override = compose_override(tmp_path, slow_validator=True)
    compose = Compose(f"a2t{uuid.uuid4().hex[:8]}", (BASE_FILE, PORTS_FILE, TLS_FILE, override), env)
    trust = ssl.create_default_context(cafile=str(folder / "tls" / "ca.pem"))
    async with running(compose, timeline, "compose up -d", "compose down -v"):
        gateway = f"http://127.0.0.1:{env['A2AMESH_GATEWAY_PORT']}"
        async with httpx.AsyncClient(base_url=gateway, timeout=60) as http:
            with timeline.step("healthy: 13 containers running, HEALTHCHECKs passing, every card live"):
                await wait_running_and_healthy(compose, CONTAINERS)
                await eventually(
                    lambda: _has_all(http, key),
                    timeout=UP_WAIT,
                    interval=0.5,
                    what=f"the cards of {AGENTS + WORKFLOWS} at GET /agents",
                )
            await servers_are_durable(env, folder)
            validators = await compose.containers("order_validator")
            for name in validators:
                await eventually(
                    functools.partial(_logged, name, "agent.ready"),
                    timeout=UP_WAIT,
                    interval=0.5,
                    what=f"{name} to be ready",
                )

            with timeline.step("calls: text_stats over HTTP (401 without the key)"):
                auth = {**V, "Authorization": f"Bearer {key}"}
                text = send({"text": "containers for real"})
                assert (await http.post("/agents/text_stats/", json=text, headers=V)).status_code == 401
                answer = await http.post("/agents/text_stats/", json=text, headers=auth)
                task = answer.json()["result"]["task"]
                assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer.text
                assert task["artifacts"][0]["parts"][0]["data"]["words"] == 3, task

            order_id = f"o-{uuid.uuid4().hex[:8]}"
            items = [{"sku": s, "quantity": q, "unit_price": 10.0} for s, q in (("a", 1), ("b", 2), ("c", 3))]
            order = {"order_id": order_id, "total": 60.0, "items": items}
            with timeline.step("workflow order_pipeline started, until a validator replica holds its task"):
                run = asyncio.create_task(http.post("/agents/order_pipeline/", json=send(order), headers=auth))
                holder, held = await eventually(
                    lambda: _holding(validators, order_id), timeout=60, interval=0.2, what="a validator to take it"
                )
            assert not run.done(), "the workflow finished before the kill (HOLD too short to kill mid-run)"
            with timeline.step(f"docker kill {holder} (SIGKILL, mid-task)"):
                code, out = await adocker("kill", holder)
                assert code == 0, out
            with timeline.step("run completed on the other replica"):
                answer = await within(run, 90, "the order_pipeline run after the kill")
            task = answer.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer.text
            output = task["artifacts"][0]["parts"][0]["data"]
            assert output["valid"] is True, output
            assert output["tier"] == "bulk", output
            assert [line["line_total"] for line in output["lines"]] == [10.0, 20.0, 30.0], output
            assert output["notified"] == ["email", "sms"], output

            state = (await ainspect(holder))["State"]
            assert not state["Running"], f"{holder} still runs after docker kill: {state}"
            assert state["ExitCode"] == 137, f"{holder} was not SIGKILLed: {state}"
            killed_logs = await logs_of(holder)
            assert not [x for x in killed_logs if x.get("event") == "task.finished"], "the killed replica finished it"
            (survivor,) = [n for n in validators if n != holder]
            survivor_logs = await logs_of(survivor)
            retaken = [
                x for x in survivor_logs if x.get("event") == "test.validating" and x["task_id"] == held["task_id"]
            ]
            assert retaken, f"{survivor} never took task {held['task_id']} over"
            assert retaken[0]["attempt"] > held["attempt"], (held, retaken)
            finished = [
                x for x in survivor_logs if x.get("event") == "task.finished" and x["task_id"] == held["task_id"]
            ]
            assert finished, f"{survivor} did not finish task {held['task_id']}"
            assert "COMPLETED" in finished[0]["state"].upper(), finished

            # the mesh did all of that under its users without one refusal; then the refusals, from outside
            (nats_container,) = await compose.containers("nats")
            _, nats_logs = await adocker("logs", nats_container)
            assert " Violation - " not in nats_logs, [x for x in nats_logs.splitlines() if " Violation - " in x][:5]
            with timeline.step("least privilege: each credential refused outside its part (NATS, Valkey)"):
                await no_way_in_without_a_user(env, trust)
                nats_url = f"nats://127.0.0.1:{env['A2AMESH_NATS_PORT']}"
                await check_nats(folder, nats_url, "a2amesh", "echo", "pricing", tls=trust)
                await check_redis(
                    folder, f"redis://127.0.0.1:{env['A2AMESH_REDIS_PORT']}/0", "a2amesh", "echo", "pricing"
                )
            init = await compose.containers("init")
            assert len(init) == 1, init
            assert (await ainspect(init[0]))["State"]["ExitCode"] == 0, await logs_of(init[0])

            # the processes stop before NATS (they hand their work back through it): each exits 0 in its grace
            with timeline.step("compose stop: every process exits 0"):
                await compose.run("stop", "-t", "20", timeout=120)
            codes = {n: (await ainspect(n))["State"]["ExitCode"] for n in await compose.containers() if n != holder}
            assert set(codes.values()) == {0}, codes


async def no_way_in_without_a_user(env: dict[str, str], tls: ssl.SSLContext) -> None:
    """Neither server lets in a client without credentials (NATS not even one trusting its CA), and NATS none
    that does not trust the CA."""
    url = f"nats://127.0.0.1:{env['A2AMESH_NATS_PORT']}"
    with pytest.raises(Exception, match="(?i)authorization"):  # nats-py raises it in several shapes
        await nats.connect(url, allow_reconnect=False, connect_timeout=5, tls=tls)
    with pytest.raises(ssl.SSLCertVerificationError):
        await nats.connect(url, allow_reconnect=False, connect_timeout=5)
    anonymous = Redis.from_url(f"redis://127.0.0.1:{env['A2AMESH_REDIS_PORT']}/0")
    async with anonymous:
        with pytest.raises(AuthenticationError):
            await anonymous.ping()


async def _has_all(http: httpx.AsyncClient, key: str) -> bool:
    return set(AGENTS + WORKFLOWS) <= await gateway_names(http, key)


async def _logged(container: str, event: str) -> bool:
    return any(line.get("event") == event for line in await logs_of(container))


async def _holding(validators: list[str], order_id: str) -> tuple[str, dict[str, Any]] | None:
    for name in validators:
        for line in await logs_of(name):
            if line.get("event") == "test.validating" and line.get("order_id") == order_id:
                return name, line
    return None


async def test_nats_cluster_override_runs_the_mesh_on_three_jetstream_nodes(
    images: BuiltImages, tmp_path: Path, timeline: Timeline
) -> None:
    """Guards against a cluster override whose nodes do not form one JetStream cluster, or a mesh on it whose
    streams are not replicated to all three nodes."""
    folder, key = deploy_init(tmp_path / "secrets")
    env = project_env(images, folder)
    files = (BASE_FILE, CLUSTER_FILE, PORTS_FILE, compose_override(tmp_path, slow_validator=False))
    compose = Compose(f"a2c{uuid.uuid4().hex[:8]}", files, env)
    services = {"nats": 1, "nats-2": 1, "nats-3": 1, "redis": 1, "gateway": 1, "echo": 1}
    up = "cluster: compose up -d (3 NATS nodes, Valkey, gateway, echo)"
    async with running(compose, timeline, up, "cluster: compose down -v", *services):
        monitor = f"http://127.0.0.1:{env['A2AMESH_NATS_MONITOR_PORT']}"
        gateway = f"http://127.0.0.1:{env['A2AMESH_GATEWAY_PORT']}"
        async with httpx.AsyncClient(timeout=30) as http, httpx.AsyncClient(base_url=gateway, timeout=30) as gw:

            async def meta() -> dict[str, Any] | None:
                cluster: dict[str, Any] = (await http.get(f"{monitor}/jsz")).json().get("meta_cluster", {})
                return cluster if cluster.get("leader") and cluster.get("cluster_size") == 3 else None

            with timeline.step("cluster: healthy, meta leader elected, echo card live"):
                await wait_running_and_healthy(compose, services)
                cluster = await eventually(meta, timeout=60, interval=0.5, what="a 3-node JetStream meta leader")
                await eventually(lambda: _has(gw, key, "echo"), timeout=UP_WAIT, interval=0.5, what="the echo card")
            assert cluster["name"] == "a2amesh", cluster
            with timeline.step("cluster: echo over HTTP"):
                auth = {**V, "Authorization": f"Bearer {key}"}
                answer = await gw.post("/agents/echo/", json=send({"on": "cluster"}), headers=auth)
            task = answer.json()["result"]["task"]
            assert task["artifacts"][0]["parts"][0]["data"] == {"on": "cluster"}, answer.text
            streams = (await http.get(f"{monitor}/jsz?streams=true")).json()["account_details"]
            replicas = {
                s["name"]: len(s.get("cluster", {}).get("replicas", [])) + 1
                for account in streams
                for s in account.get("stream_detail", [])
            }
            assert replicas, "no streams on the cluster"
            assert all(n == 3 for n in replicas.values()), replicas


async def _has(http: httpx.AsyncClient, key: str, name: str) -> bool:
    return name in await gateway_names(http, key)
