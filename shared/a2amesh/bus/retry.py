"""Riding out a JetStream leader election: the one retry loop of every JetStream request.

While a replicated stream or bucket (or the cluster's meta group) elects a new leader, JetStream answers
nothing (nats-py's ``nats: timeout``), ``503`` (no responders, "JetStream system temporarily unavailable")
or refuses a connection that is reconnecting. Each of these passes within seconds, so a request meeting one
is asked again with backoff until a bound; one still failing then is ``UNAVAILABLE`` naming what was asked.
Every other answer (not found, a bad request) is the request's own and is raised at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors

from a2amesh.errors import TransportError
from a2amesh.logs import get_logger
from a2amesh.protocol import codes

__all__ = ["ELECTION_WAIT", "is_transient", "ride_out"]

log = get_logger("bus")

ELECTION_WAIT = 20.0
"""Seconds a JetStream request is asked again while JetStream does not answer or is electing: longer than a
leader election of a cluster that lost a node (a few seconds, more on a loaded machine)."""
PAUSE = 0.1
PAUSE_MAX = 2.0

T = TypeVar("T")

_TRANSIENT_DESCRIPTIONS = ("temporarily unavailable", "not ready", "no leader", "leader not", "stream offline")


def is_transient(error: Exception) -> bool:
    """Whether ``error`` from a JetStream request is one an election (or a reconnect) causes and ends."""
    if isinstance(error, nats.errors.ConnectionClosedError):
        return False  # closed by us: nothing comes back
    if isinstance(
        error,
        nats.errors.TimeoutError
        | nats.errors.NoRespondersError
        | nats.errors.ConnectionReconnectingError
        | nats.errors.StaleConnectionError
        | nats.errors.OutboundBufferLimitError
        | nats.js.errors.ServiceUnavailableError
        # a KV put (nats-py's own publish) meeting a replicated stream without a leader, or whose interest has
        # not reached this server yet just after it was made: a 503 with no responders
        | nats.js.errors.NoStreamResponseError,
    ):
        return True
    if isinstance(error, nats.js.errors.APIError):
        if error.code == 503:
            return True
        description = str(error.description or "").lower()
        return any(d in description for d in _TRANSIENT_DESCRIPTIONS)
    return False


def _describe(error: Exception) -> str:
    if isinstance(error, nats.errors.TimeoutError):
        return "no answer in time"
    if isinstance(error, nats.errors.NoRespondersError):
        return "no responders"
    if isinstance(error, nats.js.errors.APIError) and error.description:
        return str(error.description)
    return str(error) or type(error).__name__


async def ride_out(
    what: str,
    request: Callable[[], Awaitable[T]],
    *,
    within: float = ELECTION_WAIT,
    transient: Callable[[Exception], bool] = is_transient,
    pause: float = PAUSE,
    pause_max: float = PAUSE_MAX,
    gave_up: Callable[[Exception], BaseException] | None = None,
) -> T:
    """``request()``'s answer, asked again while it fails with a :func:`transient` error, for up to ``within``
    seconds, pausing ``pause`` seconds (doubling up to ``pause_max``) between tries.

    Raises:
        TransportError: ``UNAVAILABLE`` naming ``what`` when it still fails with a transient error after
            ``within`` seconds (``gave_up(error)`` instead, when given); any other error of ``request`` as it is.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    tries = 0
    while True:
        tries += 1
        try:
            return await request()
        except Exception as e:
            if not transient(e):
                raise
            remaining = deadline - loop.time()
            if remaining <= 0:
                if gave_up is not None:
                    raise gave_up(e)  # noqa: B904 - its cause is its own
                raise TransportError(
                    codes.UNAVAILABLE,
                    f"JetStream did not answer for {what} within {within:g}s ({tries} tries, last: {_describe(e)}; "
                    "a cluster electing its leaders, or a server too busy to answer)",
                ) from e
            log.info("jetstream.retry", what=what, error=_describe(e), tries=tries)
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, pause_max)
