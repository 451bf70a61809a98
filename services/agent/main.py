"""Agent service entry point: run one agent process from its YAML (``AGENT_FILE`` or the first argument)."""

import os
import sys

from a2amesh.cli import main

if __name__ == "__main__":
    file = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("AGENT_FILE", "")
    raise SystemExit(main(["agent", file]))
