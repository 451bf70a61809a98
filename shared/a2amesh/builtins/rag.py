"""Retrieval-augmented generation: vector stores of chunks in Redis, ``a2amesh rag ingest``, and ``builtin-rag``.

A vector store is a memory scope named ``rag:{store}`` (:mod:`a2amesh.store.memory`): each chunk is an entry
keyed ``{source}#{n}`` with metadata ``{source, chunk}``, so ingesting a file again replaces its chunks.
Retrieval is the memory agent's exact cosine search; with ``answer`` one model call answers from the chunks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2amesh.agent.context import TaskContext
from a2amesh.builtins.agents import BuiltinAgents
from a2amesh.builtins.conversation import LlmRequest, parse_input
from a2amesh.builtins.embedders import Embedder
from a2amesh.builtins.memory import EmbeddingMismatch, MemoryAgents, ScopeRef
from a2amesh.store.memory import MemoryStore

__all__ = ["ANSWER_PROMPT", "RagAgent", "chunk_text", "ingest", "rag_scope"]

ANSWER_PROMPT = (
    "Answer the question from the numbered context passages below, citing them like [1]. If they do not hold "
    "the answer, say so."
)
_BATCH = 64


def rag_scope(store: str) -> str:
    """The memory scope that holds a vector store's chunks."""
    return f"rag:{store}"


def chunk_text(text: str, *, size: int = 800, overlap: int = 100) -> list[str]:
    """Split a text into chunks of at most ``size`` characters, on paragraph, then sentence, then word
    boundaries; consecutive chunks share up to ``overlap`` characters so a passage cut in two is found whole."""
    if size < 50 or not 0 <= overlap < size // 2:
        raise ValueError(f"chunk size {size} and overlap {overlap}: size must be ≥ 50 and overlap below size/2")
    pieces: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        if len(paragraph) <= size:
            pieces.append(paragraph)
            continue
        for sentence in re.split(r"(?<=[.!?])\s+", paragraph):
            while len(sentence) > size:
                cut = sentence.rfind(" ", 0, size)
                cut = cut if cut > size // 2 else size
                pieces.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                pieces.append(sentence)
    chunks: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + 1 + len(piece) > size:
            chunks.append(current)
            tail = current[-overlap:] if overlap else ""
            tail = tail[tail.find(" ") + 1 :] if " " in tail else tail
            current = f"{tail} {piece}".strip() if tail and len(tail) + 1 + len(piece) <= size else piece
        else:
            current = f"{current} {piece}".strip()
    if current:
        chunks.append(current)
    return chunks


async def ingest(
    store: MemoryStore,
    embedder: Embedder,
    name: str,
    documents: Sequence[tuple[str, str]],
    *,
    model: str,
    size: int = 800,
    overlap: int = 100,
) -> dict[str, int]:
    """Chunk, embed and store ``(source, text)`` documents in the vector store ``name``.

    Returns:
        Chunks stored per source.

    Raises:
        LlmError: the embeddings endpoint failed.
        EmbeddingMismatch: the store already holds vectors of another length (another embedding model).
    """
    scope = rag_scope(name)
    known = await store.dimensions(scope, None)
    counts: dict[str, int] = {}
    for source, text in documents:
        chunks = chunk_text(text, size=size, overlap=overlap)
        counts[source] = len(chunks)
        for start in range(0, len(chunks), _BATCH):
            batch = chunks[start : start + _BATCH]
            vectors = (await embedder.embed(batch, model=model)).vectors
            for offset, (chunk, vector) in enumerate(zip(batch, vectors, strict=True)):
                if known is not None and len(vector) != known:
                    raise EmbeddingMismatch(
                        f"embedding dimension mismatch: store {name!r} holds {known}-dimensional vectors, the "
                        f"embedding model {model} gives {len(vector)}; ingest with the model it was filled with"
                    )
                known = len(vector)
                index = start + offset
                await store.write(
                    agent=scope,
                    user=None,
                    content=chunk,
                    vector=vector,
                    key=f"{source}#{index}",
                    metadata={"source": source, "chunk": index},
                )
    return counts


class RagRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    store: str = Field(min_length=1)
    query: str = Field(min_length=1)
    top_k: int = Field(5, ge=1, le=100)
    min_score: float | None = None
    filter: dict[str, Any] | None = None
    answer: bool = False
    system: str | None = None
    model: str | None = None
    embedding_model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = False


class RagAgent:
    """The work of ``builtin-rag``."""

    def __init__(self, memory: MemoryAgents, agents: BuiltinAgents) -> None:
        self.memory = memory
        self.agents = agents

    async def retrieve(self, data: Any, ctx: TaskContext) -> dict[str, Any]:
        """Top-k chunks, and optionally an answer. Output: ``{chunks, context, answer}``."""
        request = parse_input(RagRequest, data)
        scope = ScopeRef(agent=rag_scope(request.store), user=None, model=request.embedding_model)
        chunks = await self.memory.search(
            scope, request.query, ctx, top_k=request.top_k, min_score=request.min_score, where=request.filter
        )
        found = [
            {"content": c["content"], "metadata": c["metadata"], "score": c["score"], "id": c["id"]} for c in chunks
        ]
        context = "\n\n".join(f"[{i}] {c['content']}" for i, c in enumerate(found, 1))
        answer = None
        if request.answer:
            llm = LlmRequest(
                messages=f"Context:\n{context or '(nothing found)'}\n\nQuestion: {request.query}",
                system=request.system or ANSWER_PROMPT,
                model=request.model,
                temperature=request.temperature,
                max_tokens=request.max_tokens,
                stream=request.stream,
            )
            messages = [{"role": "system", "content": llm.system}, {"role": "user", "content": llm.messages}]
            answer = (await self.agents.complete(llm, messages, {}, ctx, "rag")).content
        return {"chunks": found, "context": context, "answer": answer}
