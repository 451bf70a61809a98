"""structlog setup. Called by entry points only; the library just asks for loggers."""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import threading
import time
from typing import Any, TextIO

import structlog

from a2amesh import tracing
from a2amesh.jsontext import dumps_text

LOG_FLUSH_INTERVAL = 0.05
"""Seconds a process holds its log lines before writing them together (see :class:`BufferedLogStream`)."""


class BufferedLogStream:
    """A log stream that writes the lines of a short interval together, in one system call.

    Each write costs a system call, and on a virtual machine a costly one: a replica logging a line per
    task paid one per task. Lines are held for ``interval`` seconds after the first one (0: until the end
    of the current event-loop turn), written at once off the loop (no running loop in this thread), and
    flushed at interpreter exit; only a process killed (SIGKILL) within the interval loses its last lines.
    """

    def __init__(self, stream: TextIO, interval: float = 0.0) -> None:
        self._stream = stream
        self._interval = interval
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop a drain is scheduled on
        atexit.register(self.drain)

    def write(self, text: str) -> int:
        """Hold ``text`` until the drain scheduled on this loop (write it now when no loop runs here)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._lines.append(text)
            if loop is not None and (self._loop is not loop or loop.is_closed()):
                self._loop = loop
                if self._interval > 0:
                    loop.call_later(self._interval, self.drain)
                else:
                    loop.call_soon(self.drain)
                return len(text)
        if loop is None:
            self.drain()
        return len(text)

    def flush(self) -> None:
        """Nothing here: the lines leave together at the scheduled drain (see :meth:`drain`)."""

    def drain(self) -> None:
        """Write every held line now."""
        with self._lock:
            self._loop = None
            if not self._lines:
                return
            text = "".join(self._lines)
            self._lines.clear()
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # closed or broken stream: logging must never take the process down
            pass


def configure(level: str = "INFO", fmt: str = "auto") -> None:
    """Configure structlog: JSON when not on a TTY (or ``fmt="json"``), coloured console otherwise; the standard
    library's loggers (the a2a-sdk's, uvicorn's, mcp's, httpx's) go through the same renderer and stream."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [structlog.processors.add_log_level, _add_timestamp, _add_trace_ids]
    renderer: Any
    if use_json:
        renderer = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer(serializer=_json_line)]
    else:
        renderer = [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    stream = BufferedLogStream(sys.stderr, LOG_FLUSH_INTERVAL)
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping().get(level.upper(), 20)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    _route_stdlib(stream, [structlog.stdlib.add_logger_name, *shared], renderer)


class ClientInputFilter(logging.Filter):
    """The a2a-sdk logs a client's malformed request at ERROR with the protobuf parser's traceback; it is the
    client's mistake, answered with a precise JSON-RPC error: one WARNING line with the reason instead."""

    MESSAGES = frozenset({"Failed to parse request params", "Failed to validate base JSON-RPC request"})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("a2a.") and record.msg in self.MESSAGES and record.exc_info:
            error = record.exc_info[1]
            reason = str(error).strip().splitlines()[0] if error is not None and str(error).strip() else ""
            record.msg = f"{record.msg} (the client's request): {type(error).__name__}: {reason}"
            record.args = None
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _route_stdlib(stream: BufferedLogStream, pre_chain: list[Any], renderer: list[Any]) -> None:
    """Render every standard-library log record (WARNING and above) like our own lines, on ``stream``."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=pre_chain,
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        )
    )
    handler.addFilter(ClientInputFilter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.WARNING)
    for name in ("a2a", "uvicorn", "uvicorn.error", "uvicorn.access", "mcp", "httpx"):
        sdk = logging.getLogger(name)
        sdk.handlers = []
        sdk.propagate = True


_second_text: list[Any] = [None, ""]  # the last whole second formatted, and its text


def _add_timestamp(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """``timestamp``: ISO 8601 in UTC with microseconds and ``Z``, as structlog's ``TimeStamper(fmt="iso",
    utc=True)`` writes it (but always with six digits of fraction); the date and time formatted once a
    second, as strftime and datetime cost more than the rest of a log line's processing."""
    t = time.time()
    second = int(t)
    if _second_text[0] != second:
        _second_text[0], _second_text[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    event_dict["timestamp"] = f"{_second_text[1]}.{int((t - second) * 1_000_000):06d}Z"
    return event_dict


def _add_trace_ids(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """``trace_id`` and ``span_id`` of the current span, when this process traces and a span is current."""
    if tracing.enabled:
        ids = tracing.current_ids()
        if ids is not None:
            event_dict["trace_id"], event_dict["span_id"] = ids
    return event_dict


def _json_line(event: Any, **_: Any) -> str:
    return dumps_text(event, default=str)


def get_logger(name: str, **bound: Any) -> Any:
    """A structlog logger bound with ``component=name`` and the given keys."""
    # initial values on the lazy proxy (not .bind()): binding here would freeze the configuration in force at import
    return structlog.get_logger(name, component=name, **bound)
