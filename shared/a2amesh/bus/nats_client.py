"""nats-py's client with a publish and a header parser that write and read the same bytes in fewer Python steps.

Both replace private methods of nats-py, so :data:`NATS_CLIENT` is this subclass only on the nats-py release they
were written for, and nats-py's own client on any other.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import nats.aio.client
import nats.errors
from nats.aio.client import Client as NatsClient

__all__ = ["NATS_CLIENT", "client_class"]


_WHITESPACE = re.compile(r"\s")
_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # nats-py's: RFC 7230 token characters
_HEADER_VALUE_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_VALID_HEADER_KEYS: set[str] = set()  # header names already checked (a handful in practice; bounded below)


class _Client(NatsClient):
    """nats-py's client, with message headers parsed and written the same way in fewer Python steps."""

    async def _send_publish(
        self, subject: str, reply: str, payload: bytes, payload_size: int, headers: dict[str, Any] | None
    ) -> None:
        # nats-py's own builds the header block in a bytearray, several extends and encodes per header
        if subject == "":
            raise nats.errors.BadSubjectError
        if headers is None:
            command = b"PUB %b %b %d\r\n%b\r\n" % (subject.encode(), reply.encode(), payload_size, payload)
        else:
            lines = ["NATS/1.0\r\n"]
            for name, value in headers.items():
                key = name.strip()
                if key not in _VALID_HEADER_KEYS:
                    if not key:
                        continue
                    if not _HEADER_KEY.fullmatch(key):
                        raise nats.errors.BadHeaderError(key)
                    if len(_VALID_HEADER_KEYS) < 1024:
                        _VALID_HEADER_KEYS.add(key)
                text = value.strip()
                if "\r" in text or "\n" in text:
                    text = text.translate(_HEADER_VALUE_NEWLINES)
                lines.append(f"{key}: {text}\r\n")
            lines.append("\r\n")
            block = "".join(lines).encode()
            command = b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
                subject.encode(),
                reply.encode(),
                len(block),
                len(block) + payload_size,
                block,
                payload,
            )
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(command)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    @staticmethod
    def _parse_header_lines(raw: bytes) -> dict[str, str]:
        # nats-py's own skips a name with whitespace in it by testing each character in a generator
        out: dict[str, str] = {}
        for line in raw.split(b"\r\n"):
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            try:
                key = name.strip().decode("ascii")
            except UnicodeDecodeError:
                continue
            if _WHITESPACE.search(key) is not None:
                continue
            out[key] = value.strip().decode("utf-8", "replace")
        return out


_CLIENT_WRITTEN_FOR = ("2.16.",)
"""nats-py releases whose private ``_send_publish`` / ``_parse_header_lines`` :class:`_Client` replaces."""


def client_class(version: str) -> type[NatsClient]:
    """:class:`_Client` on a nats-py it was written for (the private methods it replaces are its own), else
    nats-py's client as it is."""
    expected = ("self", "subject", "reply", "payload", "payload_size", "headers")
    own = tuple(inspect.signature(NatsClient._send_publish).parameters)
    if version.startswith(_CLIENT_WRITTEN_FOR) and own == expected and hasattr(NatsClient, "_parse_header_lines"):
        return _Client
    return NatsClient


NATS_CLIENT = client_class(getattr(nats.aio.client, "__version__", ""))
