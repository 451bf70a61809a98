"""Verbs of the vector data of the agent nodes: ``rag ingest STORE FILE…`` and ``memory list|delete``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from a2amesh.cli.exits import EXIT_OK
from a2amesh.cli.settings import verb_settings
from a2amesh.errors import UsageError

__all__ = ["cmd_memory", "cmd_rag_ingest"]


def _read(paths: list[str]) -> list[tuple[str, str]]:
    documents = []
    for name in paths:
        path = Path(name)
        try:
            documents.append((path.name, path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise UsageError(f"{name}: no such file") from None
        except UnicodeDecodeError as e:
            raise UsageError(f"{name}: not UTF-8 text (byte {e.start}); give text or Markdown files") from None
        except OSError as e:
            raise UsageError(f"{name}: cannot read it: {e.strerror}") from None
    return documents


async def cmd_rag_ingest(args: argparse.Namespace) -> int:
    """``a2amesh rag ingest STORE FILE…``: chunk, embed and store documents in a vector store."""
    import asyncio
    import re

    from a2amesh.builtins.agents import ModelSettings
    from a2amesh.builtins.memory import EmbeddingMismatch
    from a2amesh.builtins.rag import ingest
    from a2amesh.errors import LlmError
    from a2amesh.store.session import open_store

    if not re.fullmatch(r"[A-Za-z0-9_.-]+", args.store):
        raise UsageError(f"store name {args.store!r}: use letters, digits, '_', '.' and '-'")
    if args.chunk_size < 50 or not 0 <= args.overlap < args.chunk_size // 2:
        raise UsageError("--chunk-size must be at least 50 and --overlap below half of it")
    documents = await asyncio.to_thread(_read, args.files)
    settings = verb_settings(args)
    models = ModelSettings.from_settings(settings, embedding_model=args.embedding_model)
    try:
        embedder = models.embedder()
    except LlmError as e:
        raise UsageError(str(e)) from None
    model = models.default_embedding_model
    try:
        async with open_store(settings) as stores:
            counts = await ingest(
                stores.memory, embedder, args.store, documents, model=model, size=args.chunk_size, overlap=args.overlap
            )
    except EmbeddingMismatch as e:
        raise UsageError(str(e)) from None
    finally:
        await embedder.aclose()
    if args.json:
        print(json.dumps({"store": args.store, "chunks": counts}))
    else:
        for source, count in counts.items():
            print(f"{source}: {count} chunk(s)")
        print(f"store {args.store}: {sum(counts.values())} chunk(s) from {len(counts)} file(s)")
    return EXIT_OK


async def cmd_memory(args: argparse.Namespace) -> int:
    """``a2amesh memory list AGENT [--user U] [--key K]`` and ``memory delete AGENT ID``."""
    from a2amesh.store.session import open_store

    async with open_store(verb_settings(args)) as stores:
        if args.action == "delete":
            if not args.entry:
                raise UsageError("memory delete needs AGENT and the entry ID (see `a2amesh memory list AGENT`)")
            if not await stores.memory.delete(args.agent, args.entry):
                raise UsageError(f"agent {args.agent!r} has no memory entry {args.entry!r}")
            print(f"deleted {args.entry}")
            return EXIT_OK
        entries = await stores.memory.list(args.agent, user=args.user, key=args.key, limit=args.limit)
    if args.json:
        print(json.dumps([e.to_json() for e in entries], indent=2))
        return EXIT_OK
    for e in entries:
        who = f" user={e.user}" if e.user else ""
        label = f" key={e.key}" if e.key else ""
        print(f"{e.id}{who}{label}: {e.content[:100]}")
    if not entries:
        print(f"(no memory entries of {args.agent})")
    return EXIT_OK
