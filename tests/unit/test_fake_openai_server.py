"""The fake OpenAI server works with the real ``openai`` client, so LLM-agent tests exercise real HTTP."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from tests.fakes.openai_server import FakeOpenAIServer, HttpError, Raw, Reply, ToolCall, Usage

MODEL = "fake-model"
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def client_for(server: FakeOpenAIServer, **options: Any) -> AsyncOpenAI:
    options.setdefault("max_retries", 0)
    return AsyncOpenAI(base_url=server.base_url, api_key="sk-test", **options)


async def test_plain_answer(fake_llm: FakeOpenAIServer) -> None:
    """A scripted text reaches the client as the assistant message, and the request is recorded."""
    fake_llm.script("Sunny, 21°C.")
    async with client_for(fake_llm) as client:
        response = await client.chat.completions.create(model=MODEL, messages=USER, temperature=0)
    assert response.choices[0].message.content == "Sunny, 21°C."
    assert response.choices[0].finish_reason == "stop"
    assert response.model == MODEL
    assert fake_llm.requests == [{"model": MODEL, "messages": USER, "temperature": 0}]
    assert fake_llm.request_headers[0]["authorization"] == "Bearer sk-test"
    assert fake_llm.pending == 0


async def test_tool_call_round_trip(fake_llm: FakeOpenAIServer) -> None:
    """A scripted tool call parses as the SDK's tool_calls, and the tool result comes back in the next request."""
    fake_llm.script(Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})]), "It is sunny in Paris.")
    async with client_for(fake_llm) as client:
        first = await client.chat.completions.create(model=MODEL, messages=USER, tools=[WEATHER_TOOL])
        message = first.choices[0].message
        assert first.choices[0].finish_reason == "tool_calls"
        assert message.content is None
        [call] = message.tool_calls or []
        assert call.type == "function"
        assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
        follow_up: list[ChatCompletionMessageParam] = [
            *USER,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
        ]
        second = await client.chat.completions.create(model=MODEL, messages=follow_up, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "It is sunny in Paris."
    first_request, second_request = fake_llm.requests
    assert first_request["tools"] == [WEATHER_TOOL]
    assert second_request["messages"][-1] == {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'}
    assert second_request["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"


async def test_streaming_text(fake_llm: FakeOpenAIServer) -> None:
    """A streamed answer arrives as several SSE deltas that join to the scripted text, then the stream ends."""
    text = "The quick brown fox jumps over the lazy dog."
    fake_llm.script(Reply(content=text, chunk_size=5))
    async with client_for(fake_llm) as client:
        stream = await client.chat.completions.create(model=MODEL, messages=USER, stream=True)
        deltas = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
    pieces = [d for d in deltas if d]
    assert "".join(pieces) == text
    assert len(pieces) == -(-len(text) // 5)


async def test_streamed_tool_call(fake_llm: FakeOpenAIServer) -> None:
    """Streamed tool-call deltas (id and name first, then argument fragments) accumulate to the scripted call."""
    calls = [ToolCall("get_weather", {"city": "Paris"}, id="call_a"), ToolCall("get_weather", {"city": "Oslo"})]
    fake_llm.script(Reply(content="Checking.", tool_calls=calls, chunk_size=4))
    async with (
        client_for(fake_llm) as client,
        client.chat.completions.stream(model=MODEL, messages=USER, tools=[WEATHER_TOOL]) as stream,
    ):
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    got = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or []]
    assert got == [("call_a", "get_weather", {"city": "Paris"}), ("call_1_1", "get_weather", {"city": "Oslo"})]


async def test_usage_numbers(fake_llm: FakeOpenAIServer) -> None:
    """Scripted usage is reported as is, in the response and in the final chunk when include_usage is asked."""
    fake_llm.script(Reply(content="a", usage=Usage(12, 5)), Reply(content="b", usage=Usage(7, 3)))
    async with client_for(fake_llm) as client:
        response = await client.chat.completions.create(model=MODEL, messages=USER)
        stream = await client.chat.completions.create(
            model=MODEL, messages=USER, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    assert response.usage is not None
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (12, 5, 17)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 10
    assert all(c.usage is None for c in chunks[:-1])


async def test_default_usage_is_nonzero(fake_llm: FakeOpenAIServer) -> None:
    """Without scripted usage the server still reports plausible token counts (for usage accounting tests)."""
    fake_llm.script("three word answer")
    async with client_for(fake_llm) as client:
        response = await client.chat.completions.create(model=MODEL, messages=USER)
    assert response.usage is not None
    assert response.usage.completion_tokens == 3
    assert response.usage.prompt_tokens == len("What is the weather in Paris?".split())


async def test_rate_limit_then_success(fake_llm: FakeOpenAIServer) -> None:
    """A 429 with Retry-After is retried by the client (max_retries=1) and the second answer wins."""
    fake_llm.script(HttpError(429, "slow down", retry_after=0.01), "ok")
    async with client_for(fake_llm, max_retries=1) as client:
        response = await client.chat.completions.create(model=MODEL, messages=USER)
    assert response.choices[0].message.content == "ok"
    assert len(fake_llm.requests) == 2


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(429, openai.RateLimitError), (500, openai.InternalServerError), (400, openai.BadRequestError)],
)
async def test_http_errors_surface_as_sdk_errors(
    fake_llm: FakeOpenAIServer, status: int, error_type: type[openai.APIStatusError]
) -> None:
    """Scripted HTTP errors become the SDK's typed errors, with our message."""
    fake_llm.script(HttpError(status, "scripted failure"))
    async with client_for(fake_llm) as client:
        with pytest.raises(error_type, match="scripted failure") as info:
            await client.chat.completions.create(model=MODEL, messages=USER)
    assert info.value.status_code == status


async def test_delay_beyond_client_timeout(fake_llm: FakeOpenAIServer) -> None:
    """A scripted delay longer than the client's timeout raises APITimeoutError (and does not stall teardown)."""
    fake_llm.script(Reply(content="too late", delay=30))
    async with client_for(fake_llm, timeout=0.3) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.chat.completions.create(model=MODEL, messages=USER)


async def test_malformed_output(fake_llm: FakeOpenAIServer) -> None:
    """A body that is not JSON reaches the client as an error, not as a hang or an empty answer."""
    fake_llm.script(Raw("{not json", status=200))
    async with client_for(fake_llm) as client:
        with pytest.raises((openai.APIError, json.JSONDecodeError)):
            await client.chat.completions.create(model=MODEL, messages=USER)


async def test_responder_answers_concurrent_requests(fake_llm: FakeOpenAIServer) -> None:
    """A responder callable answers each request from its own conversation, also under concurrency."""

    def echo(request: dict[str, Any]) -> str:
        return "echo: " + str(request["messages"][-1]["content"])

    fake_llm.responder = echo
    async with client_for(fake_llm) as client:

        async def ask(i: int) -> str | None:
            response = await client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": f"n{i}"}]
            )
            return response.choices[0].message.content

        answers = await asyncio.gather(*(ask(i) for i in range(12)))
    assert answers == [f"echo: n{i}" for i in range(12)]
    assert len(fake_llm.requests) == 12


async def test_script_runs_before_responder(fake_llm: FakeOpenAIServer) -> None:
    """Scripted answers are used first; the responder answers only once the script is empty."""
    fake_llm.script("scripted")
    fake_llm.responder = lambda request: "from responder"
    async with client_for(fake_llm) as client:
        first = await client.chat.completions.create(model=MODEL, messages=USER)
        second = await client.chat.completions.create(model=MODEL, messages=USER)
    assert [first.choices[0].message.content, second.choices[0].message.content] == ["scripted", "from responder"]


async def test_unscripted_request_fails_fast_and_is_reported() -> None:
    """A request nobody scripted gets a non-retryable 400 at once, and check() names it."""
    with FakeOpenAIServer() as server:
        async with client_for(server, max_retries=3) as client:
            with pytest.raises(openai.BadRequestError, match="no scripted response"):
                await client.chat.completions.create(model=MODEL, messages=USER)
        assert len(server.requests) == 1
        with pytest.raises(AssertionError, match="#1 found no scripted response"):
            server.check()


async def test_responder_exception_is_reported() -> None:
    """An exception in a test's responder is not hidden behind a 500: check() reports it."""

    def broken(request: dict[str, Any]) -> str:
        raise KeyError("missing")

    with FakeOpenAIServer(responder=broken) as server:
        async with client_for(server, max_retries=2) as client:
            with pytest.raises(openai.InternalServerError):
                await client.chat.completions.create(model=MODEL, messages=USER)
        assert len(server.requests) == 1
        with pytest.raises(AssertionError, match="KeyError"):
            server.check()


async def test_models_endpoint(fake_llm: FakeOpenAIServer) -> None:
    """GET /v1/models lists the configured models (clients probe it at startup)."""
    async with client_for(fake_llm) as client:
        models = [m.id async for m in client.models.list()]
        model = await client.models.retrieve(MODEL)
    assert models == [MODEL]
    assert model.id == MODEL


async def test_api_key_is_enforced_when_set() -> None:
    """With an API key configured, a client with the wrong key gets 401 (to test key propagation)."""
    with FakeOpenAIServer(api_key="right") as server:
        server.script("hello")
        async with AsyncOpenAI(base_url=server.base_url, api_key="wrong", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model=MODEL, messages=USER)
        async with AsyncOpenAI(base_url=server.base_url, api_key="right", max_retries=0) as client:
            response = await client.chat.completions.create(model=MODEL, messages=USER)
        assert response.choices[0].message.content == "hello"


async def test_wait_for_requests_async(fake_llm: FakeOpenAIServer) -> None:
    """A test can await the arrival of requests made by code running elsewhere, without sleeping."""
    fake_llm.script("a", "b")
    async with client_for(fake_llm) as client:
        calls = [asyncio.create_task(client.chat.completions.create(model=MODEL, messages=USER)) for _ in range(2)]
        async with asyncio.timeout(10):
            received = await fake_llm.wait_for_requests_async(2)
        await asyncio.gather(*calls)
    assert len(received) == 2


async def test_usable_from_another_process(fake_llm: FakeOpenAIServer) -> None:
    """An agent in a separate OS process, given only the URL, gets the scripted answer."""
    fake_llm.script("from the fake")
    code = (
        "import sys, openai\n"
        "c = openai.OpenAI(base_url=sys.argv[1], api_key='k', max_retries=0)\n"
        "r = c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])\n"
        "print(r.choices[0].message.content)\n"
        "c.close()\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, fake_llm.base_url, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "from the fake"
    assert fake_llm.last_request["messages"] == [{"role": "user", "content": "hi"}]
