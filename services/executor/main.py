"""Workflow executor entry point: run the executor over a folder of definitions (``WORKFLOWS_DIR``)."""

import os
import sys

from a2amesh.cli import main

if __name__ == "__main__":
    folder = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("WORKFLOWS_DIR", "workflows")
    raise SystemExit(main(["executor", folder]))
