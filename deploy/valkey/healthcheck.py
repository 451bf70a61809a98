"""The a2amesh-valkey image's HEALTHCHECK: PING on 127.0.0.1:6379 is answered, +PONG or, with an ACL file whose
default user is off (a2amesh deploy init), -NOAUTH (the image has no valkey-cli)."""

import socket
import sys

try:
    with socket.create_connection(("127.0.0.1", 6379), timeout=2) as s:
        s.sendall(b"PING\r\n")
        answer = s.recv(64)
except OSError as e:
    sys.exit(f"valkey PING: {e}")
if not answer.startswith((b"+PONG", b"-NOAUTH")):
    sys.exit(f"valkey PING answered {answer!r}")
