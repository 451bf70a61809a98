"""The ``openai`` client configured for whole answers (``agent/openai_http.py``) behaves as the stock one:
same request on the wire, retries with their retry count, bodies decoded by their encoding, transport
errors reported as the ``openai`` client's, proxies from the environment."""

from __future__ import annotations

import gzip
import json

import httpx2
import openai
import pytest

from a2amesh.agent.llm_client import ChatModel
from a2amesh.agent.openai_http import WholeAnswerHttpClient, WholeAnswerOpenAI, _WholeBodyTransport
from a2amesh.errors import LlmError
from a2amesh.servers import free_port
from tests.fakes.openai_server import FakeOpenAIServer, HttpError, Raw, Reply, ToolCall

MESSAGES = [{"role": "user", "content": "hi"}]


def model_for(server: FakeOpenAIServer, *, retries: int = 2, base_url: str | None = None) -> ChatModel:
    return ChatModel(
        base_url=base_url or server.base_url, api_key="sk-test", model="fake-model", timeout=5, max_retries=retries
    )


async def test_whole_answers_go_through_the_configured_openai_client(fake_llm: FakeOpenAIServer) -> None:
    """A whole answer is requested by the openai client with its headers and the JSON body, and read back."""
    fake_llm.script(Reply(tool_calls=[ToolCall("save_artifact", {"name": "a.json"})]), "done")
    model = model_for(fake_llm)
    try:
        first = await model.complete(MESSAGES, tools=[{"type": "function", "function": {"name": "save_artifact"}}])
        second = await model.complete([*MESSAGES, first.message()])
        assert isinstance(model._openai(), WholeAnswerOpenAI)
    finally:
        await model.aclose()
    assert [c.name for c in first.tool_calls] == ["save_artifact"]
    assert json.loads(first.tool_calls[0].arguments) == {"name": "a.json"}
    assert second.content == "done"
    assert second.total_tokens > 0
    assert fake_llm.requests[0]["tools"][0]["function"]["name"] == "save_artifact"
    assert fake_llm.requests[1]["messages"][-1]["tool_calls"][0]["function"]["name"] == "save_artifact"
    for headers in fake_llm.request_headers:
        assert headers["authorization"] == "Bearer sk-test"
        assert headers["content-type"] == "application/json"
        assert headers["user-agent"].startswith("AsyncOpenAI/Python")
        assert headers["x-stainless-retry-count"] == "0"


async def test_retries_carry_their_own_retry_count(fake_llm: FakeOpenAIServer) -> None:
    """Headers are reused per request shape, never across retry counts: each retry says which it is."""
    fake_llm.script(HttpError(429, retry_after=0.01), HttpError(503, retry_after=0.01), "fine", "again")
    model = model_for(fake_llm)
    try:
        assert (await model.complete(MESSAGES)).content == "fine"
        assert (await model.complete(MESSAGES)).content == "again"
    finally:
        await model.aclose()
    assert [h["x-stainless-retry-count"] for h in fake_llm.request_headers] == ["0", "1", "2", "0"]
    assert len({h["content-length"] for h in fake_llm.request_headers}) == 1


async def test_an_encoded_body_is_decoded(fake_llm: FakeOpenAIServer) -> None:
    """The transport hands httpx the body as sent; httpx decodes it by its Content-Encoding."""
    body = {"model": "m", "choices": [{"message": {"role": "assistant", "content": "zipped"}}], "usage": {}}
    fake_llm.script(Raw(gzip.compress(json.dumps(body).encode()), headers={"Content-Encoding": "gzip"}))
    model = model_for(fake_llm)
    try:
        assert (await model.complete(MESSAGES)).content == "zipped"
    finally:
        await model.aclose()


async def test_an_unreachable_endpoint_is_the_openai_clients_connection_error(fake_llm: FakeOpenAIServer) -> None:
    """A refused connection becomes openai's APIConnectionError (retried, then reported as unreachable)."""
    model = model_for(fake_llm, retries=1, base_url=f"http://127.0.0.1:{free_port()}/v1")
    try:
        with pytest.raises(LlmError, match="cannot reach the model endpoint"):
            await model.complete(MESSAGES)
    finally:
        await model.aclose()


async def test_a_slow_answer_is_the_openai_clients_timeout(fake_llm: FakeOpenAIServer) -> None:
    """A read past the timeout becomes openai's APITimeoutError."""
    fake_llm.script(Reply("late", delay=1.0))
    model = ChatModel(base_url=fake_llm.base_url, api_key="k", model="m", timeout=0.2, max_retries=0)
    try:
        with pytest.raises(LlmError, match="did not answer within 0.2s"):
            await model.complete(MESSAGES)
    finally:
        await model.aclose()


async def test_streamed_answers_use_a_streaming_client(fake_llm: FakeOpenAIServer) -> None:
    """A streamed answer still arrives in deltas: it goes through the openai package's own transport."""
    fake_llm.script(Reply("one two three", chunk_size=4))
    model = model_for(fake_llm)
    deltas: list[str] = []

    async def sink(text: str) -> None:
        deltas.append(text)

    try:
        answer = await model.complete(MESSAGES, on_delta=sink)
        assert not isinstance(model._openai(streaming=True), WholeAnswerOpenAI)
    finally:
        await model.aclose()
    assert answer.content == "one two three"
    assert "".join(deltas) == "one two three"
    assert fake_llm.requests[0]["stream"] is True


async def test_proxies_from_the_environment_get_a_whole_body_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx still finds the proxy of each URL in the environment; its transport is the whole-body one."""
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost")
    client = WholeAnswerHttpClient()
    try:
        transport = client._transport_for_url(httpx2.URL("https://api.example.com/v1/chat/completions"))
        assert isinstance(transport, _WholeBodyTransport)
        assert transport._proxy == "http://proxy.example:3128"
        assert transport._proxy_headers == {"Proxy-Authorization": "Basic dXNlcjpzZWNyZXQ="}  # user:secret
        direct = client._transport_for_url(httpx2.URL("http://localhost:8000/v1/chat/completions"))
        assert isinstance(direct, _WholeBodyTransport)
        assert direct._proxy is None
    finally:
        await client.aclose()


def test_requests_other_than_plain_json_are_built_by_httpx() -> None:
    """Query parameters, forms or files take httpx's own path; a plain JSON post reuses URL and headers."""
    client = WholeAnswerHttpClient()
    headers = [("Authorization", "Bearer k"), ("Content-Type", "application/json")]
    url = "https://api.example.com/v1/chat/completions"
    a = client.build_request("POST", url, headers=headers, content=b'{"a":1}', timeout=5.0)
    b = client.build_request("POST", url, headers=headers, content=b'{"bb":22}', timeout=5.0)
    assert a.url == b.url == httpx2.URL(url)
    assert a.headers["content-length"] == "7"
    assert b.headers["content-length"] == "9"
    assert a.headers["host"] == "api.example.com"
    assert a.headers["authorization"] == "Bearer k"
    assert a.extensions["timeout"] == httpx2.Timeout(5.0).as_dict()
    stock = httpx2.AsyncClient(headers=client.headers).build_request(
        "POST", url, headers=headers, content=b'{"a":1}', timeout=5.0
    )
    assert a.headers.multi_items() == stock.headers.multi_items()
    with_params = client.build_request("POST", url, headers=headers, content=b"{}", params={"x": "1"})
    assert with_params.url.params["x"] == "1"


async def test_an_openai_it_is_not_written_for_gets_the_stock_client(
    fake_llm: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without SUPPORTED (an openai whose HTTP layer or request steps differ), whole answers use the stock client."""
    monkeypatch.setattr("a2amesh.agent.llm_client.SUPPORTED", False)
    fake_llm.script("stock")
    model = model_for(fake_llm)
    try:
        assert (await model.complete(MESSAGES)).content == "stock"
        assert type(model._openai()) is openai.AsyncOpenAI
    finally:
        await model.aclose()
    assert fake_llm.request_headers[0]["user-agent"].startswith("AsyncOpenAI/Python")


def test_supported_only_for_the_major_version_it_was_written_for() -> None:
    """The overridden request steps are openai internals: another major version gets the stock client."""
    from a2amesh.agent import openai_http

    assert not openai_http.supported("4.0.0")
    assert not openai_http.supported("2.9.0")
    assert openai_http.supported(openai.__version__) is openai_http.SUPPORTED
