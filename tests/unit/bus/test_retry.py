"""Which JetStream errors :func:`ride_out` asks again for: those an election or a reconnect causes and ends."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from a2amesh.bus.retry import is_transient, ride_out
from a2amesh.errors import TransportError


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (nats.errors.TimeoutError(), True),
        (nats.errors.NoRespondersError(), True),
        (nats.js.errors.NoStreamResponseError(), True),  # a KV put meeting a stream without a leader
        (nats.js.errors.ServiceUnavailableError(code=503), True),
        (nats.js.errors.APIError(code=503, description="unavailable"), True),
        (nats.errors.ConnectionClosedError(), False),  # closed by us: nothing comes back
        (nats.js.errors.BadRequestError(code=400, description="bad request"), False),
        (ValueError("not a transport error"), False),
    ],
)
def test_transient_errors(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


async def test_a_put_without_a_stream_leader_is_asked_again_until_it_is_stored() -> None:
    answers: list[Exception | str] = [nats.js.errors.NoStreamResponseError(), nats.errors.TimeoutError(), "stored"]

    async def put() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await ride_out("a put", put, within=5, pause=0.001) == "stored"
    assert answers == []


async def test_gives_up_with_what_it_asked_for() -> None:
    async def put() -> str:
        raise nats.js.errors.NoStreamResponseError

    with pytest.raises(TransportError, match="a put of k in KV bucket b"):
        await ride_out("a put of k in KV bucket b", put, within=0.05, pause=0.01)
