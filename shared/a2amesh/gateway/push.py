"""Push notifications (A2A 1.0): the task push config methods over ``store/push.py``, and the delivery of a
task's updates to its webhooks.

The gateway keeps no state, so configs live in Redis, and a task's updates are delivered by the replica that
carries a call of the task: the SendMessage (or SendStreamingMessage) that set a config inline or that continues
a task with configs, and, for a config created on a task still running, a follower the creating replica starts
(SubscribeToTask over the mesh until the task ends or is interrupted). Each update is POSTed as the
``StreamResponse`` JSON the SSE stream carries (``{"task": …}``, ``{"statusUpdate": …}``, ``{"artifactUpdate":
…}``), in order per task, with the config's ``token`` as ``X-A2A-Notification-Token`` and its
``authentication`` as ``Authorization: {scheme} {credentials}``. A failed POST (no connection, a time-out,
HTTP 5xx or 429) is retried with exponential backoff; other answers end that delivery. Updates of a task that
advances without the gateway (a NATS caller continuing it) are not delivered, nor are those of a task whose
following replica stopped (docs/gateway.md "Push notifications").

Webhook URLs (SSRF): only ``http`` and ``https``; unless private targets are allowed, a host that is or resolves
to a loopback, private, link-local, reserved or multicast address is refused when the config is set and again
before every POST (``A2AMESH_PUSH_ALLOW_PRIVATE``; by default allowed only when the gateway itself listens on
loopback, whose callers reach those addresses anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import urllib.parse
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

import httpx
from a2a.types import a2a_pb2 as pb
from a2a.utils import errors as sdk
from google.protobuf.json_format import MessageToDict, Parse

from a2amesh.gateway.conversion import Event
from a2amesh.ids import nuid
from a2amesh.lifecycle import Background
from a2amesh.logs import get_logger
from a2amesh.store.push import PushConfigStore

__all__ = ["TOKEN_HEADER", "PushNotifications", "PushSettings", "WebhookRefused", "check_webhook_url"]

log = get_logger("gateway.push")

TOKEN_HEADER = "X-A2A-Notification-Token"
SCHEMES = ("http", "https")


@dataclass(frozen=True)
class PushSettings:
    """How webhooks are reached.

    Attributes:
        allow_private: whether a webhook may be a loopback, private or link-local address.
        attempts: POSTs per update and webhook before giving up.
        first_backoff: seconds before the first retry; doubled after each failure, up to ``max_backoff``.
        timeout: seconds one POST may take.
    """

    allow_private: bool = False
    attempts: int = 5
    first_backoff: float = 0.5
    max_backoff: float = 8.0
    timeout: float = 10.0


class WebhookRefused(ValueError):
    """A webhook URL the gateway does not POST to (the reason names the URL's problem)."""


async def check_webhook_url(url: str, *, allow_private: bool) -> None:
    """Raise :class:`WebhookRefused` for a URL that is not http(s), has no host, or (unless ``allow_private``)
    is or resolves to an address that is not public."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise WebhookRefused(f"url {url!r} is not a valid URL: {e}") from e
    if parts.scheme not in SCHEMES:
        raise WebhookRefused(f"url scheme {parts.scheme or '(none)'!r} is not served: a webhook is an http(s) URL")
    host = parts.hostname
    if not host:
        raise WebhookRefused(f"url {url!r} has no host")
    if allow_private:
        return
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise WebhookRefused(f"url host {host!r} cannot be resolved: {e.strerror or e}") from e
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if not address.is_global or address.is_multicast:
            raise WebhookRefused(
                f"url host {host!r} is the non-public address {address}; webhooks go to public addresses only "
                "(A2AMESH_PUSH_ALLOW_PRIVATE=1 allows private ones)"
            )


def _config_json(config: pb.TaskPushNotificationConfig) -> str:
    return json.dumps(MessageToDict(config), separators=(",", ":"))


def _config(text: str) -> pb.TaskPushNotificationConfig:
    return Parse(text, pb.TaskPushNotificationConfig())


def _payload(event: Event) -> bytes:
    if isinstance(event, pb.Task):
        response = pb.StreamResponse(task=event)
    elif isinstance(event, pb.Message):
        response = pb.StreamResponse(message=event)
    elif isinstance(event, pb.TaskStatusUpdateEvent):
        response = pb.StreamResponse(status_update=event)
    else:
        response = pb.StreamResponse(artifact_update=event)
    return json.dumps(MessageToDict(response), separators=(",", ":")).encode()


@dataclass
class _Chain:
    """The updates of one task still to deliver, in order."""

    queue: list[tuple[list[pb.TaskPushNotificationConfig], bytes]] = field(default_factory=list)
    running: bool = False


class PushNotifications:
    """Push configs (set, get, list, delete) and delivery (see the module docstring).

    Args:
        store: where configs live.
        settings: how webhooks are reached.
    """

    def __init__(self, store: PushConfigStore, settings: PushSettings) -> None:
        self.store = store
        self.settings = settings
        self._http: httpx.AsyncClient | None = None
        self._chains: dict[str, _Chain] = {}
        self._background = Background()

    # --- configs -------------------------------------------------------------------------------

    async def check(self, config: pb.TaskPushNotificationConfig) -> None:
        """Raise the SDK's InvalidParamsError for a config whose webhook is refused (before any work starts)."""
        try:
            await check_webhook_url(config.url, allow_private=self.settings.allow_private)
        except WebhookRefused as e:
            raise sdk.InvalidParamsError(f"taskPushNotificationConfig.{e}") from e

    async def set(self, task_id: str, config: pb.TaskPushNotificationConfig) -> pb.TaskPushNotificationConfig:
        """Store ``config`` for ``task_id`` (an id is minted when it has none); returns it as stored."""
        await self.check(config)
        stored = pb.TaskPushNotificationConfig()
        stored.CopyFrom(config)
        stored.task_id = task_id
        stored.id = config.id or nuid()
        stored.tenant = ""
        await self.store.put(task_id, stored.id, _config_json(stored))
        return stored

    async def get(self, task_id: str, config_id: str) -> pb.TaskPushNotificationConfig:
        """One config, or the SDK's TaskNotFoundError naming it."""
        text = await self.store.get(task_id, config_id)
        if text is None:
            raise sdk.TaskNotFoundError(f"task {task_id} has no push notification config {config_id!r}")
        return _config(text)

    async def configs(self, task_id: str) -> list[pb.TaskPushNotificationConfig]:
        """Every config of ``task_id``, by id."""
        stored = await self.store.all(task_id)
        return [_config(stored[config_id]) for config_id in sorted(stored)]

    async def delete(self, task_id: str, config_id: str) -> None:
        """Remove a config (removing one that is not there is not an error)."""
        await self.store.delete(task_id, config_id)

    # --- delivery ------------------------------------------------------------------------------

    def deliver(self, task_id: str, configs: list[pb.TaskPushNotificationConfig], event: Event) -> None:
        """Queue one update of ``task_id`` for its webhooks (delivered in order, in the background)."""
        if not configs:
            return
        chain = self._chains.setdefault(task_id, _Chain())
        chain.queue.append((configs, _payload(event)))
        if not chain.running:
            chain.running = True
            self._background.spawn(self._drain(task_id, chain), name=f"push-{task_id}")

    async def deliver_all(
        self, task_id: str, configs: list[pb.TaskPushNotificationConfig], events: AsyncGenerator[Event]
    ) -> None:
        """Deliver every update ``events`` yields (a follower's stream), then close it."""
        with contextlib.suppress(Exception):  # the follower ends with its stream; its errors are the stream's
            async with contextlib.aclosing(events):
                async for event in events:
                    self.deliver(task_id, configs, event)

    def follow(self, task_id: str, configs: list[pb.TaskPushNotificationConfig], events: AsyncGenerator[Event]) -> None:
        """Deliver the updates of a stream in the background (a task running on after its call's answer)."""
        self._background.spawn(self.deliver_all(task_id, configs, events), name=f"push-follow-{task_id}")

    async def _drain(self, task_id: str, chain: _Chain) -> None:
        try:
            while chain.queue:
                configs, body = chain.queue.pop(0)
                for config in configs:
                    await self._post(task_id, config, body)
        finally:
            chain.running = False
            if not chain.queue:
                self._chains.pop(task_id, None)

    async def _post(self, task_id: str, config: pb.TaskPushNotificationConfig, body: bytes) -> bool:
        """POST ``body`` to one webhook with retries; whether it was accepted (2xx)."""
        headers = {"Content-Type": "application/json"}
        if config.token:
            headers[TOKEN_HEADER] = config.token
        if config.HasField("authentication") and config.authentication.scheme and config.authentication.credentials:
            headers["Authorization"] = f"{config.authentication.scheme} {config.authentication.credentials}"
        delay = self.settings.first_backoff
        problem = ""
        for attempt in range(1, self.settings.attempts + 1):
            try:
                await check_webhook_url(config.url, allow_private=self.settings.allow_private)
                response = await self._client().post(config.url, content=body, headers=headers)
                if 200 <= response.status_code < 300:
                    return True
                problem = f"HTTP {response.status_code}"
                if response.status_code < 500 and response.status_code != 429:
                    break  # the webhook refuses this update: sending it again will not help
            except WebhookRefused as e:
                problem = str(e)
                break
            except httpx.HTTPError as e:
                problem = type(e).__name__
            except Exception as e:  # a URL httpx cannot use: sending it again will not help
                problem = type(e).__name__
                break
            if attempt < self.settings.attempts:
                log.info("push.retry", task_id=task_id, config_id=config.id, attempt=attempt, problem=problem)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.max_backoff)
        log.warning("push.undelivered", task_id=task_id, config_id=config.id, problem=problem)
        return False

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self.settings.timeout, follow_redirects=False)
        return self._http

    async def aclose(self, grace: float = 5.0) -> None:
        """Give queued deliveries ``grace`` seconds, stop the rest, close the HTTP client."""
        await self._background.wait(grace)
        self._background.cancel()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
