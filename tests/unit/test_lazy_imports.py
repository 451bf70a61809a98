"""The pure layers stay pure: importing them loads no transport or store client."""

import json
import subprocess
import sys

import pytest

HEAVY = ("nats", "redis")


@pytest.mark.parametrize(
    "module", ["a2amesh", "a2amesh.protocol", "a2amesh.workflow.dag.engine", "a2amesh.workflow.graph.engine"]
)
def test_a_pure_module_loads_neither_nats_nor_redis(module: str) -> None:
    """An eager import in a2amesh/__init__ (or a stray one in the engine) would load nats and redis."""
    probe = f"import json, sys, {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == [], f"import {module} loaded {out.stdout.strip()}"


def test_public_names_resolve_lazily() -> None:
    """`from a2amesh import Client` still works once the names are imported on first use."""
    probe = "import sys, a2amesh; a2amesh.Client; print('nats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True"


@pytest.mark.parametrize("module", ["a2amesh.gateway.app", "a2amesh.executor.service", "a2amesh.agent.host"])
def test_the_gateway_executor_and_agent_host_load_no_model_client(module: str) -> None:
    """The model client and numpy are the LLM agents' and built-in agents' (0.5 s of CPU at every start): the
    gateway once loaded both through the management API's memory deletion event."""
    probe = f"import json, sys, {module}; print(json.dumps(sorted(m for m in ('openai', 'numpy') if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == [], f"import {module} loaded {out.stdout.strip()}"
