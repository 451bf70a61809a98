"""One detector tells DAG from graph: for what a person writes and for the canonical data an executor stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2amesh.workflow.dag.engine import Engine
from a2amesh.workflow.formats import format_of, format_of_data, is_graph_document
from a2amesh.workflow.graph.definition import GraphDefinition
from a2amesh.workflow.graph.engine import GraphEngine
from a2amesh.workflow.loader import load_file

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "workflows").glob("*.*")) + sorted(
    (REPO.parent / "shared" / "compat" / "sam").glob("level*.yaml")
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_canonical_data_reads_back_as_the_same_format_and_version(path: Path) -> None:
    """Every example, stored as an executor stores it (``to_data()``), is told apart by the same detector as
    its file, parses back to the same digest, and gets the engine of its format."""
    for loaded in load_file(path):
        definition = loaded.definition
        data = definition.to_data()
        graph = isinstance(definition, GraphDefinition)
        assert is_graph_document(data) is graph, f"{path.name}: the stored form reads as the other format"
        again = format_of_data(data).parse(data, path.name)
        assert type(again) is type(definition)
        assert again.digest() == definition.digest(), f"{path.name}: the stored form does not read back the same"
        assert format_of(again) == format_of(definition)
        assert isinstance(format_of(again).engine(again), GraphEngine if graph else Engine)


def test_the_examples_hold_both_formats() -> None:
    """The parametrised test above sees DAGs and graphs (and the simple form), or it proves nothing."""
    formats = {format_of(w.definition).name for path in EXAMPLES for w in load_file(path)}
    assert {"dag", "graph"} <= formats, formats


def test_a_sam_app_config_is_not_a_graph_even_with_graph_keys() -> None:
    assert not is_graph_document({"apps": [], "edges": []})
    assert is_graph_document({"edges": [], "nodes": []})
    assert not is_graph_document(["edges"])
