"""Gateway service entry point: the HTTP gateway on ``A2AMESH_HTTP_HOST:A2AMESH_HTTP_PORT``.

In a container it listens on 0.0.0.0, so it needs ``A2AMESH_API_KEYS`` (or ``A2AMESH_HTTP_INSECURE=1`` for a
private network behind an authenticating proxy).
"""

import sys

from a2amesh.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["gateway", *sys.argv[1:]]))
