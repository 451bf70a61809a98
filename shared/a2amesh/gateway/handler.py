"""The a2a-sdk ``RequestHandler`` of the gateway: every A2A method forwarded over the mesh with ``Client``.

It only translates: SDK protobuf requests to our models (``conversion``), one ``Client`` call, the answer back
to protobuf, our errors to the SDK's (``errors``). It keeps no state: a task lives in Redis and its events come
from NATS, so any replica answers any call about it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as sdk

from a2amesh.bus import headers as h
from a2amesh.client import Call, Client, TokenDelta
from a2amesh.errors import RpcError, TransportError
from a2amesh.gateway import conversion
from a2amesh.gateway.auth import Caller
from a2amesh.gateway.errors import to_sdk_error
from a2amesh.gateway.push import PushNotifications
from a2amesh.logs import get_logger
from a2amesh.protocol import Task
from a2amesh.protocol.jsonrpc import SendMessageRequest

log = get_logger("gateway.handler")

CALL_STATE_KEY = "a2amesh.call"
"""Where the gateway's :class:`CallInfo` sits in the ASGI scope and in ``ServerCallContext.state``."""

T = TypeVar("T")


@dataclass
class CallInfo:
    """What the gateway knows about one HTTP call before the SDK parses it."""

    agent: str
    caller: Caller
    traceparent: str | None = None
    task_id: str | None = field(default=None)

    def headers(self) -> dict[str, str]:
        """The headers the mesh call carries: the caller as ``A2A-User`` and the trace context."""
        out: dict[str, str] = {}
        if self.caller.key_id:
            out[h.USER] = self.caller.key_id
        if self.traceparent:
            out[h.TRACEPARENT] = self.traceparent
        return out


def call_info(context: ServerCallContext) -> CallInfo:
    """The :class:`CallInfo` our context builder put in the SDK's call context."""
    info = context.state.get(CALL_STATE_KEY)
    if not isinstance(info, CallInfo):
        raise sdk.InternalError("the gateway's call context is missing")
    return info


def _convert(fn: Callable[[Any], T], value: Any) -> T:
    try:
        return fn(value)
    except conversion.ConversionError as e:
        raise sdk.InvalidParamsError(str(e)) from e


def _raise(e: TransportError | RpcError) -> NoReturn:
    raise to_sdk_error(e) from e


class MeshRequestHandler(RequestHandler):
    """Serves every agent and workflow of the mesh; the agent comes from the URL (``/agents/{agent}``).

    Args:
        client: a started ``Client``; the handler never closes it.
        call_timeout: the deadline of a forwarded SendMessage / stream, in seconds.
        push: push notification configs and delivery; None: not served (PushNotificationNotSupportedError).
    """

    def __init__(self, client: Client, *, call_timeout: float, push: PushNotifications | None = None) -> None:
        self.client = client
        self.call_timeout = call_timeout
        self.push = push

    async def on_message_send(self, params: pb.SendMessageRequest, context: ServerCallContext) -> pb.Task:
        info = call_info(context)
        request = _convert(conversion.send_request_from_proto, params)
        immediate = bool(request.configuration and request.configuration.return_immediately)
        inline = await self._inline_push(params)
        configs = await self._push_configs(request)
        try:
            # a task with webhooks is followed event by event, to push each update
            pushing = inline is not None or bool(configs)
            call = await self._send(info, request, stream=immediate or pushing)
            if inline is not None:
                configs = [*configs, await self._push_required().set(call.task_id, inline)]
            if immediate:
                # returnImmediately: answer with the task as first reported; the work goes on without us.
                events = self._proto_events(call)
                async for event in events:
                    self._push(call.task_id, configs, event)
                    break
                if configs:
                    self._push_required().follow(call.task_id, configs, events)
                else:
                    await events.aclose()
                task = call.task
                if task is None:
                    raise sdk.InvalidAgentResponseError(f"{info.agent!r} sent no task")
            elif pushing:
                async with contextlib.aclosing(self._proto_events(call)) as events:
                    async for event in events:
                        self._push(call.task_id, configs, event)
                task = call.task
                if task is None:
                    raise sdk.InvalidAgentResponseError(f"{info.agent!r} ended the call without a task")
            else:
                task = await call.result()
        except (TransportError, RpcError) as e:
            _raise(e)
        return conversion.task_to_proto(task)

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[conversion.Event]:
        info = call_info(context)
        request = _convert(conversion.send_request_from_proto, params)
        inline = await self._inline_push(params)
        configs = await self._push_configs(request)
        call: Call | None = None
        ended = False  # the stream reached its final event, or failed: nothing left to follow
        try:
            call = await self._send(info, request, stream=True, deltas=True)
            if inline is not None:
                configs = [*configs, await self._push_required().set(call.task_id, inline)]
            # A client that goes away closes this generator; the task itself carries on (no CancelTask).
            held: list[TokenDelta] = []  # deltas heard before the first event (the task) are sent after it
            started = False
            async with contextlib.aclosing(call.events_and_deltas()) as events:
                async for event in events:
                    if isinstance(event, TokenDelta):
                        if started:
                            yield conversion.delta_to_proto(event)
                        else:
                            held.append(event)
                        continue
                    update = conversion.event_to_proto(event)
                    self._push(call.task_id, configs, update)
                    yield update
                    if not started:
                        started = True
                        for delta in held:
                            yield conversion.delta_to_proto(delta)
                        held.clear()
            ended = True
        except (TransportError, RpcError) as e:
            ended = True
            _raise(e)
        finally:
            if configs and not ended and call is not None and self.push is not None:
                # the client went away before the end: the task's webhooks still hear the rest
                self.push.follow(call.task_id, configs, self._follower(info, call.task_id))

    async def _proto_events(self, call: Call) -> AsyncGenerator[conversion.Event]:
        async with contextlib.aclosing(call.events()) as events:
            async for event in events:
                yield conversion.event_to_proto(event)

    async def _follower(self, info: CallInfo, task_id: str) -> AsyncGenerator[conversion.Event]:
        """SubscribeToTask over the mesh, as SDK events (what a webhook of a running task hears)."""
        events = self.client.subscribe(info.agent, task_id, timeout=self.call_timeout, headers=info.headers())
        async with contextlib.aclosing(events):
            async for event in events:
                yield conversion.event_to_proto(event)

    # --- push notifications (gateway/push.py) ----------------------------------------------------

    def _push_required(self) -> PushNotifications:
        if self.push is None:
            raise sdk.PushNotificationNotSupportedError("push notifications need the gateway's Redis store")
        return self.push

    async def _inline_push(self, params: pb.SendMessageRequest) -> pb.TaskPushNotificationConfig | None:
        """The config a SendMessage sets inline (``configuration.taskPushNotificationConfig``), its URL checked."""
        if not (params.HasField("configuration") and params.configuration.HasField("task_push_notification_config")):
            return None
        config = params.configuration.task_push_notification_config
        await self._push_required().check(config)
        return config

    async def _push_configs(self, request: SendMessageRequest) -> list[pb.TaskPushNotificationConfig]:
        """The webhooks of the task a message continues (a new task has none before it starts)."""
        if self.push is None or not request.message.task_id:
            return []
        return await self.push.configs(request.message.task_id)

    def _push(self, task_id: str, configs: list[pb.TaskPushNotificationConfig], event: conversion.Event) -> None:
        if configs and self.push is not None:
            self.push.deliver(task_id, configs, event)

    async def _send(self, info: CallInfo, request: SendMessageRequest, *, stream: bool, deltas: bool = False) -> Call:
        """Dispatch a SendMessage over the mesh for the caller ``info`` describes; the task id goes to its log."""
        config = request.configuration
        call = await self.client.dispatch(
            info.agent,
            request.message,
            stream=stream,
            timeout=self.call_timeout,
            headers=info.headers(),
            history_length=config.history_length if config else None,
            deltas=deltas,
        )
        info.task_id = call.task_id
        return call

    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[conversion.Event]:
        info = call_info(context)
        info.task_id = params.id
        task = await self._known_task(info, params.id)
        if task.status.state.terminal:
            # A2A 1.0 §3.1.6: a task in a terminal state has no events left to stream
            raise sdk.UnsupportedOperationError(
                f"task {params.id} is {task.status.state.value}; SubscribeToTask needs a task still running"
            )
        try:
            events = self.client.subscribe(info.agent, params.id, timeout=self.call_timeout, headers=info.headers())
            async with contextlib.aclosing(events):
                async for event in events:
                    yield conversion.event_to_proto(event)
        except (TransportError, RpcError) as e:
            _raise(e)

    async def _known_task(self, info: CallInfo, task_id: str) -> Task:
        """The task as stored, or TaskNotFoundError.

        Over NATS a CancelTask or SubscribeToTask of an id with no record yet is taken for a task still in the
        queue (its record is written when a replica pulls it). An HTTP client only learns a task id from an
        answer sent after that, so here an id without a record is an unknown task, as A2A 1.0 wants.
        """
        try:
            return await self.client.get_task(info.agent, task_id, history_length=0, headers=info.headers())
        except (TransportError, RpcError) as e:
            _raise(e)

    async def on_get_task(self, params: pb.GetTaskRequest, context: ServerCallContext) -> pb.Task | None:
        info = call_info(context)
        info.task_id = params.id
        history = params.history_length if params.HasField("history_length") else None
        if history is not None and history < 0:
            raise sdk.InvalidParamsError("historyLength must be 0 or more")
        try:
            task = await self.client.get_task(info.agent, params.id, history_length=history, headers=info.headers())
        except (TransportError, RpcError) as e:
            _raise(e)
        return conversion.task_to_proto(task)

    async def on_list_tasks(self, params: pb.ListTasksRequest, context: ServerCallContext) -> pb.ListTasksResponse:
        info = call_info(context)
        request = _convert(conversion.list_request_from_proto, params)
        try:
            response = await self.client.list_tasks(info.agent, request, headers=info.headers())
        except (TransportError, RpcError) as e:
            _raise(e)
        return conversion.list_response_to_proto(response)

    async def on_cancel_task(self, params: pb.CancelTaskRequest, context: ServerCallContext) -> pb.Task | None:
        info = call_info(context)
        info.task_id = params.id
        await self._known_task(info, params.id)
        try:
            task = await self.client.cancel_task(info.agent, params.id, headers=info.headers())
        except (TransportError, RpcError) as e:
            _raise(e)
        return conversion.task_to_proto(task)

    async def on_create_task_push_notification_config(
        self, params: pb.TaskPushNotificationConfig, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        push = self._push_required()
        info = call_info(context)
        info.task_id = params.task_id
        task = await self._known_task(info, params.task_id)
        stored = await push.set(params.task_id, params)
        state = task.status.state
        if not state.terminal and not state.interrupted:
            # running: this replica follows it for the new webhook (a call of the task carries the others)
            push.follow(params.task_id, [stored], self._follower(info, params.task_id))
        return stored

    async def on_get_task_push_notification_config(
        self, params: pb.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        call_info(context).task_id = params.task_id
        return await self._push_required().get(params.task_id, params.id)

    async def on_list_task_push_notification_configs(
        self, params: pb.ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        call_info(context).task_id = params.task_id
        configs = await self._push_required().configs(params.task_id)
        return pb.ListTaskPushNotificationConfigsResponse(configs=configs)

    async def on_delete_task_push_notification_config(
        self, params: pb.DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        call_info(context).task_id = params.task_id
        await self._push_required().delete(params.task_id, params.id)

    async def on_get_extended_agent_card(
        self, params: pb.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> pb.AgentCard:
        raise sdk.ExtendedAgentCardNotConfiguredError("no extended agent card is served")
