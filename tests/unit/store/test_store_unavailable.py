"""Nothing outside store/ sees redis-py: an unreachable Redis is our StoreUnavailable, on every path."""

import socket

import pytest

from a2amesh.config import Settings
from a2amesh.errors import StoreError, StoreUnavailable
from a2amesh.store.redis import AutoPipeline, connect_redis


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dead_url() -> str:
    return f"redis://127.0.0.1:{_closed_port()}/0"


async def test_commands_scripts_and_pipelines_raise_store_unavailable(dead_url: str) -> None:
    """A redis-py ConnectionError escaping the store would be failed as an internal error, not handed back."""
    redis = await connect_redis(Settings.load(environ={}), url=dead_url, check=False)
    try:
        with pytest.raises(StoreUnavailable, match=r"\S"):
            await redis.get("k")
        pipe = redis.pipeline(transaction=False)
        pipe.get("k")
        with pytest.raises(StoreUnavailable):
            await pipe.execute()
        with pytest.raises(StoreUnavailable):
            await redis.register_script("return 1")()
        with pytest.raises(StoreUnavailable):
            await AutoPipeline(redis).run(lambda p: p.get("k"))
    finally:
        await redis.aclose()


async def test_connecting_with_the_check_names_the_server(dead_url: str) -> None:
    """The startup check's error is a StoreError (so the CLI prints one line) that says where it looked."""
    with pytest.raises(StoreUnavailable, match="cannot reach Redis at redis://127.0.0.1") as info:
        await connect_redis(Settings.load(environ={}), url=dead_url)
    assert isinstance(info.value, StoreError)
