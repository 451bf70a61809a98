"""Agent YAML files: valid ones load; invalid ones give one line naming file, field and problem."""

from pathlib import Path

import pytest

from a2amesh.agent.definition import load_agent_file
from a2amesh.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("path", sorted((REPO / "agent_cards").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_agents_load(path: Path) -> None:
    """Every example agent definition is valid."""
    d = load_agent_file(path)
    card = d.card("a2amesh")
    assert card.name == d.name
    assert card.supported_interfaces[0].url == f"nats://a2amesh/{d.name}"
    assert card.supported_interfaces[0].protocol_binding == "urn:a2amesh:binding:nats:v1"
    assert card.agent_type == "agent"


BAD = [
    ("name: a.b\nhandler: m:f\n", "name", "must match"),
    ("name: ok\n", "(top level)", "exactly one of handler"),
    ("name: ok\nhandler: nocolon\n", "handler", "module:function"),
    ("name: ok\nhandler: m:f\nreplica: 2\n", "replica", "did you mean 'replicas'"),
    ("name: ok\nhandler: m:f\nmax_retries: -1\n", "max_retries", "greater than or equal"),
    ("name: ok\nllm: {modle: x}\n", "llm.modle", "did you mean 'model'"),
    ("name: [unclosed\n", "", "not valid YAML at line"),
    ("- just\n- a list\n", "", "must be a YAML mapping"),
]


@pytest.mark.parametrize(("text", "field", "problem"), BAD)
def test_invalid_agent_yaml(tmp_path: Path, text: str, field: str, problem: str) -> None:
    """Each mistake is reported with the file, the field and the problem on one line."""
    f = tmp_path / "agent.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_agent_file(f)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(f) in msg
    assert field in msg
    assert problem in msg
