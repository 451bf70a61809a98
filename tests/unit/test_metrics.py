"""metrics.py: docs/observability.md lists every metric the module registers, with its type."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from a2amesh import metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"


def test_the_docs_list_every_metric_with_its_type(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import REGISTRY

    monkeypatch.setattr(metrics, "enabled", metrics.enabled)  # restored after: no hook records in other tests
    metrics.enable()
    registered = {
        (f"{family.name}_total" if family.type == "counter" else family.name, family.type)
        for family in REGISTRY.collect()
        if family.name.startswith("a2amesh_")
    }
    documented = set(re.findall(r"^\| `(a2amesh_[a-z_]+)` \| (\w+) \|", DOC.read_text(), re.MULTILINE))
    assert registered, "metrics.enable() registers the mesh's metrics"
    assert registered - documented == set(), "registered but not in docs/observability.md's table"
    assert documented - registered == set(), "in docs/observability.md's table but not registered"
