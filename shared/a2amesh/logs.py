"""structlog setup. Called by entry points only; the library just asks for loggers."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def configure(level: str = "INFO", fmt: str = "auto") -> None:
    """Configure structlog: JSON when not on a TTY (or ``fmt="json"``), coloured console otherwise."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if use_json:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping().get(level.upper(), 20)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def get_logger(name: str, **bound: Any) -> Any:
    """A structlog logger bound with ``component=name`` and the given keys."""
    # initial values on the lazy proxy (not .bind()): binding here would freeze the configuration in force at import
    return structlog.get_logger(name, component=name, **bound)
