"""Remote agent proxy entry point: serve one remote A2A agent in the mesh (``REMOTE_FILE`` or the first argument),
or with ``--stored`` every remote declared through the management API (``a2amesh remote serve --stored``)."""

import os
import sys

from a2amesh.cli import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["--stored"]:
        raise SystemExit(main(["remote", "serve", *sys.argv[1:]]))
    file = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("REMOTE_FILE", "")
    raise SystemExit(main(["remote", "serve", file]))
