"""``a2amesh validate`` and ``a2amesh graph`` on what a new user points them at: a folder, a graph workflow
(issue 37)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_cli import cli
from tests.support.processes import REPO


async def test_validate_takes_files_and_folders(tmp_path: Path) -> None:
    """A folder is its *.yaml, *.yml and *.json files; a bad file in it makes the exit 1; no folder is a 2."""
    code, out, err = await cli(None, "validate", "workflows/", "--json")
    assert code == 0, err
    checked = json.loads(out)
    shipped = sorted(p.name for p in (REPO / "workflows").iterdir() if p.suffix in (".yaml", ".yml", ".json"))
    assert sorted(Path(r["file"]).name for r in checked) == shipped
    assert all(r["ok"] for r in checked)

    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "good.yml").write_text("name: good\nnodes:\n  - {id: a, type: agent, agent_name: x}\n")
    (folder / "bad.yaml").write_text("name: bad\nnodes:\n  - {id: a, type: agnet, agent_name: x}\n")
    (folder / "notes.txt").write_text("not a definition")
    code, out, err = await cli(None, "validate", str(folder), str(REPO / "workflows" / "order_pipeline.yaml"))
    assert code == 1, err
    lines = out.splitlines()
    assert lines[0] == f"{folder / 'bad.yaml'}: bad: invalid"
    assert f"{folder / 'good.yml'}: good: ok" in out
    assert "order_pipeline.yaml: order_pipeline: ok" in out
    assert "notes.txt" not in out
    assert "Is a directory" not in out + err

    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = await cli(None, "validate", str(empty))
    assert code == 2
    assert f"{empty}: no workflow definitions" in err
    code, _, err = await cli(None, "validate", str(tmp_path / "nowhere"))
    assert code == 2
    assert "no such file or folder" in err


async def test_graph_draws_graph_workflows_with_node_names() -> None:
    """The seed's 2nChat draws as Mermaid: node names as labels, the undefined node marked."""
    code, out, err = await cli(None, "graph", "workflows/2nchat.json")
    assert code == 0, err
    assert out.startswith("flowchart TD")
    for name in ("Router", "RC2", "DM2", "2N", "tool_executor"):
        assert f'["{name}<br/>' in out or f'{{{{"{name}<br/>' in out, name
    assert '-- "RC2" -->' in out
    assert "node-uuid-6<br/>(not defined)" in out
    code, out, err = await cli(None, "graph", "workflows/order_pipeline.yaml", "--direction", "LR")
    assert code == 0, err
    assert out.startswith("flowchart LR")
