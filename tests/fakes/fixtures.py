"""Pytest fixtures for the fakes (registered by ``tests/conftest.py`` through ``pytest_plugins``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIServer]:
    """A started fake OpenAI server for one test; teardown stops it and fails on requests it could not answer."""
    with FakeOpenAIServer() as server:
        yield server
    server.check()
