"""LLM agents defined through the API, served by the pooled LLM host: create, call, update the prompt, delete."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from a2amesh.agent.pool import LlmAgentPool
from a2amesh.bus.nats import Bus
from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.errors import TransportError
from a2amesh.gateway.settings import parse_api_keys
from a2amesh.protocol import TaskState, codes
from a2amesh.store.redis import Redis
from tests.fakes.openai_server import FakeOpenAIServer
from tests.support.waiting import eventually, within

ADMIN = {"Authorization": "Bearer adm1n-secret"}
YAML = {"Content-Type": "application/yaml"}


def greeter(language: str) -> str:
    return (
        f"name: greeter\ndescription: Greets people\nllm:\n  model: fake-model\n  system_prompt: Greet in {language}.\n"
    )


@pytest.fixture
async def pool(bus: Bus, redis: Redis, settings: Settings, fake_llm: FakeOpenAIServer) -> AsyncIterator[LlmAgentPool]:
    """An in-process LLM host whose endpoint is the fake OpenAI server."""
    host = LlmAgentPool(bus=bus, redis=redis, settings=settings.model_copy(update={"llm_base_url": fake_llm.base_url}))
    stop = asyncio.Event()
    task = asyncio.create_task(host.run_until(stop))
    await within(host.ready.wait(), 10, "the LLM host to start")
    yield host
    stop.set()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 20)


async def test_create_call_update_prompt_and_delete(
    pool: LlmAgentPool, gateway: object, client: Client, fake_llm: FakeOpenAIServer
) -> None:
    """An LLM agent created over HTTP answers; a new prompt applies to the next call without a restart; a delete
    takes its card away."""
    url = await gateway(api_keys=parse_api_keys("admin=adm1n-secret#admin|read"))  # type: ignore[operator]
    fake_llm.script("Hello!", "Bonjour !")
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/llm-agents", content=greeter("English"), headers={**ADMIN, **YAML})
        assert r.status_code == 201, r.text
        assert r.json()["id"] == "greeter"
        await within(client.registry.wait_for("greeter", 5), 1.0, "the LLM agent's card")
        task = await within(client.send("greeter", "hi"), 15, "the first answer")
        assert (task.status.state, task.output()) == (TaskState.COMPLETED, "Hello!")
        host = pool.hosts["greeter"].host

        r = await http.put("/api/llm-agents/greeter", content=greeter("French"), headers={**ADMIN, **YAML})
        assert r.status_code == 200, r.text
        etag = r.json()["etag"]
        await eventually(lambda: pool.hosts["greeter"].etag == etag, timeout=1, what="the host to take v2")
        assert pool.hosts["greeter"].host is host  # swapped in place: no restart
        task = await within(client.send("greeter", "hi"), 15, "the answer under v2")
        assert task.output() == "Bonjour !"
        prompts = [request["messages"][0]["content"] for request in fake_llm.requests]
        assert prompts == ["Greet in English.", "Greet in French."]

        listed = (await http.get("/api/llm-agents", headers=ADMIN)).json()
        assert [(a["id"], a["format"], a["version"]) for a in listed] == [("greeter", "llm", 2)]
        assert (await http.get("/api/workflows", headers=ADMIN)).json() == []

        assert (await http.delete("/api/llm-agents/greeter", headers=ADMIN)).status_code == 204
        await eventually(lambda: client.registry.get("greeter") is None, timeout=5, what="the card to go")
        assert "greeter" not in pool.hosts
        with pytest.raises(TransportError) as failure:
            await client.send("greeter", "hi", timeout=5)
        assert failure.value.reason == codes.AGENT_NOT_FOUND


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("  tools: [os:system]\n", "llm.tools"),
        ("  base_url: http://elsewhere/v1\n", "llm.base_url"),
        ("  api_key_env: AWS_SECRET_ACCESS_KEY\n", "llm.api_key_env"),
        ("  temprature: 0.2\n", "llm.temprature"),
    ],
)
async def test_refused_llm_agent_definitions(gateway: object, extra: str, path: str) -> None:
    """What the host must own (tools, endpoint, key) and unknown fields are 422 with their path."""
    url = await gateway(api_keys=parse_api_keys("admin=adm1n-secret#admin|read"))  # type: ignore[operator]
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        r = await http.post("/api/llm-agents", content=greeter("English") + extra, headers={**ADMIN, **YAML})
        assert r.status_code == 422, r.text
        assert [e["path"] for e in r.json()["errors"]] == [path]
        r = await http.post("/api/llm-agents", content="name: py\nhandler: mod:fn\n", headers={**ADMIN, **YAML})
        assert r.json()["errors"][0]["path"] == "handler"
