"""The one intake of work messages: decode, validate, hand over, and settle every outcome in one place.

The agent host and the workflow executor each plug in what they do with a valid request (``accept``);
everything between pulling a message and settling it runs here, under one guard, so no input can leave
a message unsettled or crash a worker. How each outcome is settled (docs/protocol.md §5):

=====================================================  ==========================================
outcome                                                 settle
=====================================================  ==========================================
no valid ``A2A-Reply-To``                               ``term()``, answered nowhere
body above ``max_request_bytes``                        ``-32000 PAYLOAD_TOO_LARGE``, ``term()``
not JSON / too deep / bad envelope, method, version,    the precise JSON-RPC error, ``term()``
params, header
``A2A-Deadline`` already passed                         ``-32000 DEADLINE_EXCEEDED``, ``ack()``
``A2A-Call-Depth`` too deep                             ``-32000 CALL_DEPTH_EXCEEDED``, ``term()``
``accept`` raised one of our errors                     its JSON-RPC error, ``term()`` (a passed
                                                        deadline: ``ack()``)
the store is unreachable                                ``nak(delay=1)``: redelivered, not failed
shutdown (the worker's task is cancelled)               not settled: JetStream redelivers it
any other exception                                     ``-32603`` and one log line, ``term()``
``accept`` returned                                     ``accept`` settled it (acked once the work
                                                        is done or handed on)
=====================================================  ==========================================
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from a2amesh.bus import headers as h
from a2amesh.bus.nats import Bus, WorkMsg
from a2amesh.config import Settings
from a2amesh.errors import A2AMeshError, RpcError, StoreUnavailable, TransportError, to_rpc_error
from a2amesh.protocol import codes
from a2amesh.protocol.jsonrpc import JsonRpcId
from a2amesh.worker.decode import WorkRequest, decode_work_request, parse_body
from a2amesh.worker.replies import send_error, valid_reply_subject

__all__ = ["Accept", "Intake"]

Accept = Callable[[WorkMsg, WorkRequest], Awaitable[None]]
"""What a worker does with a valid work request; it settles the message itself once the work is in hand."""


class Intake:
    """Receives every work message of a worker.

    Args:
        bus: the worker's bus (error replies).
        settings: ``max_request_bytes``, ``max_call_depth``, reply TTLs.
        log: the worker's logger.
        accept: what the worker does with a valid request.
    """

    def __init__(self, bus: Bus, settings: Settings, *, log: Any, accept: Accept) -> None:
        self.bus = bus
        self.settings = settings
        self.log = log
        self.accept = accept

    async def handle(self, msg: WorkMsg, agent: str) -> None:
        """Decode, validate and hand over one message sent to ``agent``, settling it on every outcome but success.

        Never raises, except the cancellation of a shutdown (the message is then left for redelivery).
        """
        reply_to = msg.headers.get(h.REPLY_TO)
        request_id: JsonRpcId = None
        try:
            if not valid_reply_subject(self.bus, reply_to):
                self.log.warning("request.no_reply_to", agent=agent, got=_shown(reply_to), seq=msg.stream_seq)
                await self._settle(msg, "term")
                return
            assert reply_to is not None
            if len(msg.data) > self.settings.max_request_bytes:
                raise TransportError(
                    codes.PAYLOAD_TOO_LARGE,
                    f"request of {len(msg.data)} bytes exceeds the limit of {self.settings.max_request_bytes} "
                    "bytes; send large inputs as artifact:// URLs",
                )
            body = parse_body(msg.data)
            request_id = body.request_id
            request = decode_work_request(
                body,
                msg.headers,
                agent=agent,
                reply_to=reply_to,
                max_call_depth=self.settings.max_call_depth,
                now=time.time(),
            )
            await self.accept(msg, request)
        except StoreUnavailable as e:
            # Redis unreachable (restart, pause): hand the request back; it is redelivered, not failed
            self.log.warning(
                "request.store_unavailable", agent=agent, seq=msg.stream_seq, error=str(e) or type(e).__name__
            )
            await self._settle(msg, "nak")
        except A2AMeshError as e:
            err = to_rpc_error(e)
            self.log.info("request.rejected", agent=agent, code=err.code, error=str(err), seq=msg.stream_seq)
            await self._reject(msg, agent, reply_to, request_id, err)
            passed = isinstance(e, TransportError) and e.reason == codes.DEADLINE_EXCEEDED
            await self._settle(msg, "ack" if passed else "term")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.log.exception("request.internal_error", agent=agent, seq=msg.stream_seq)
            await self._reject(msg, agent, reply_to, request_id, to_rpc_error(e))
            await self._settle(msg, "term")

    async def _reject(
        self, msg: WorkMsg, agent: str, reply_to: str | None, request_id: JsonRpcId, error: RpcError
    ) -> None:
        try:
            await send_error(
                self.bus,
                self.settings,
                agent=agent,
                reply_to=reply_to,
                request_id=request_id,
                error=error,
                attempt=msg.num_delivered,
            )
        except Exception as e:  # encoding an error built from hostile input must not cost the settle
            self.log.warning("reply.error_not_sent", agent=agent, error=repr(e))

    async def _settle(self, msg: WorkMsg, how: str) -> None:
        try:
            if how == "ack":
                await msg.ack()
            elif how == "nak":
                await msg.nak(delay=1)
            else:
                await msg.term()
        except Exception as e:  # NATS away: the message is redelivered after ack_wait and settled then
            self.log.warning("request.settle_failed", how=how, seq=msg.stream_seq, error=str(e) or type(e).__name__)


def _shown(value: str | None) -> str | None:
    """A header value as logged: bounded, whatever a caller sent."""
    if value is None or len(value) <= 200:
        return value
    return f"{value[:200]}… ({len(value)} characters)"
