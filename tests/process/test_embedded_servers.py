"""The embedded servers (``a2amesh.servers``): started, stopped, killed and restarted as real processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from a2amesh.servers import NatsServer, ValkeyServer


@pytest.fixture
def thread_errors() -> Iterator[list[threading.ExceptHookArgs]]:
    """Exceptions raised in any thread while the test runs."""
    seen: list[threading.ExceptHookArgs] = []
    previous = threading.excepthook
    threading.excepthook = seen.append
    try:
        yield seen
    finally:
        threading.excepthook = previous


@pytest.mark.parametrize("kind", [NatsServer, ValkeyServer])
def test_stop_and_kill_end_the_output_reader_cleanly(
    kind: type[NatsServer] | type[ValkeyServer], tmp_path: Path, thread_errors: list[threading.ExceptHookArgs]
) -> None:
    """Each stop or SIGKILL waits for the thread reading the server's output to reach its end; the reader
    closes the pipe itself, so it never fails on a pipe closed under it (a race seen on a loaded machine)."""
    server = kind(data_dir=tmp_path / "data")
    try:
        for cycle in range(6):
            server.start_sync()
            assert server.pid is not None
            assert server.reading_output
            if cycle % 2:
                server.kill_sync()
            else:
                server.stop_sync()
            assert server.pid is None
            assert not server.reading_output, f"cycle {cycle}: the output reader outlived the stop"
        server.stop_sync()  # a second stop is a no-op
        assert [str(e.exc_value) for e in thread_errors] == []
    finally:
        server.stop_sync()  # a failed assertion leaves no server behind
