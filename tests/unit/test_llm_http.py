"""The whole-answer path to a model endpoint (``agent/llm_http.py``): its retry policy and failures, over real HTTP."""

from __future__ import annotations

import email.utils
import json
import socket
import time

import pytest

from a2amesh.agent.llm_client import ChatModel
from a2amesh.agent.llm_http import MAX_BACKOFF, JsonEndpoint, endpoint_message, retry_after, retry_delay, should_retry
from a2amesh.errors import LlmError
from tests.fakes.openai_server import FakeOpenAIServer, HttpError, Raw


def endpoint(server: FakeOpenAIServer, max_retries: int = 2, timeout: float = 5.0) -> JsonEndpoint:
    headers = {"Authorization": "Bearer sk-test", "Content-Type": "application/json"}
    return JsonEndpoint(
        base_url=server.base_url, headers=headers, timeout=timeout, max_retries=max_retries, name=server.base_url
    )


def test_retry_after_forms() -> None:
    """Milliseconds win over seconds; an HTTP date counts from now; garbage is no ask; overflow is too long."""
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after({"retry-after": "1.5"}) == 1.5
    date = email.utils.formatdate(time.time() + 30, usegmt=True)
    after = retry_after({"retry-after": date})
    assert after is not None
    assert 25 < after <= 30
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
    assert retry_after({"retry-after": "1e999"}) == pytest.approx(61.0)


def test_which_answers_are_retried() -> None:
    """408/409/429/5xx are; other 4xx are not; x-should-retry overrides; a wait above a minute is not waited."""
    assert [should_retry(s, {}) for s in (408, 409, 429, 500, 503)] == [True] * 5
    assert [should_retry(s, {}) for s in (400, 401, 404, 422)] == [False] * 4
    assert should_retry(400, {"x-should-retry": "true"})
    assert not should_retry(503, {"x-should-retry": "false"})
    assert not should_retry(429, {"retry-after": "120"})


def test_backoff_doubles_within_its_cap() -> None:
    """Without a server's ask: 0.5 s doubling, capped at 8 s, less up to a quarter; a short ask is taken as is."""
    for retries, base in ((0, 0.5), (1, 1.0), (2, 2.0), (10, MAX_BACKOFF)):
        delay = retry_delay(retries, {})
        assert base * 0.75 <= delay <= base
    assert retry_delay(3, {"retry-after": "0.2"}) == 0.2


def test_error_message_of_an_answer() -> None:
    """OpenAI's error JSON gives its message; other bodies their text; an empty body the reason phrase."""
    assert endpoint_message(b'{"error": {"message": "slow down", "code": "rate"}}', "Too Many") == "slow down"
    assert endpoint_message(b'{"message": "bad key"}', None) == "bad key"
    assert endpoint_message(b"<html>gateway down</html>", "Bad Gateway") == "<html>gateway down</html>"
    assert endpoint_message(b"", "Bad Gateway") == "Bad Gateway"


async def test_retried_answers_then_success(fake_llm: FakeOpenAIServer) -> None:
    """A 429 and a 503 (each asking for 10 ms) are retried; the third answer is returned; the body is the JSON sent."""
    fake_llm.script(HttpError(429, "slow down", retry_after=0.01), HttpError(503, retry_after=0.01), "fine")
    ep = endpoint(fake_llm)
    try:
        body = await ep.post("chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hé"}]})
    finally:
        await ep.aclose()
    assert json.loads(body)["choices"][0]["message"]["content"] == "fine"
    assert len(fake_llm.requests) == 3
    assert fake_llm.requests[0]["messages"][0]["content"] == "hé"
    assert fake_llm.request_headers[0]["authorization"] == "Bearer sk-test"


async def test_status_failure_after_the_retries(fake_llm: FakeOpenAIServer) -> None:
    """What still fails after max_retries names the endpoint, the status, the retries and the endpoint's message."""
    fake_llm.script(*(HttpError(500, "model crashed", retry_after=0.01) for _ in range(2)))
    ep = endpoint(fake_llm, max_retries=1)
    try:
        with pytest.raises(LlmError) as info:
            await ep.post("chat/completions", {"model": "m", "messages": []})
    finally:
        await ep.aclose()
    assert str(info.value) == (
        f"the model endpoint {fake_llm.base_url} answered HTTP 500 (after 1 retries): model crashed"
    )
    assert info.value.status == 500
    assert len(fake_llm.requests) == 2


async def test_not_retried_when_the_server_says_so(fake_llm: FakeOpenAIServer) -> None:
    """x-should-retry: false ends the call at the first answer, whatever the status."""
    fake_llm.script(HttpError(503, "no", headers={"x-should-retry": "false"}))
    ep = endpoint(fake_llm, max_retries=3)
    try:
        with pytest.raises(LlmError, match="answered HTTP 503"):
            await ep.post("chat/completions", {"model": "m", "messages": []})
    finally:
        await ep.aclose()
    assert len(fake_llm.requests) == 1


async def test_timeout_and_unreachable(fake_llm: FakeOpenAIServer) -> None:
    """A slow answer fails as a timeout of the configured seconds; a closed port as unreachable, naming it."""
    fake_llm.script(Raw('{"choices": []}', delay=2.0))
    ep = endpoint(fake_llm, max_retries=0, timeout=0.2)
    try:
        with pytest.raises(LlmError, match=r"did not answer within 0\.2s \(after 0 retries\)"):
            await ep.post("chat/completions", {"model": "m", "messages": []})
    finally:
        await ep.aclose()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    closed = JsonEndpoint(base_url=url, headers={}, timeout=2.0, max_retries=0, name=url)
    try:
        with pytest.raises(LlmError, match=f"cannot reach the model endpoint {url}: "):
            await closed.post("embeddings", {"input": ["x"]})
    finally:
        await closed.aclose()


async def test_chat_model_sends_the_openai_clients_headers(fake_llm: FakeOpenAIServer) -> None:
    """A whole-answer chat call carries the headers the openai client is configured with (key, client identity)."""
    fake_llm.script("hello")
    model = ChatModel(base_url=fake_llm.base_url, api_key="sk-test", model="fake-model", timeout=5, max_retries=0)
    try:
        done = await model.complete([{"role": "user", "content": "hi"}])
    finally:
        await model.aclose()
    assert done.content == "hello"
    headers = fake_llm.request_headers[0]
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"].startswith("AsyncOpenAI/Python")
