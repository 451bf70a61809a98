"""The a2amesh-nats image's HEALTHCHECK: the server's monitoring endpoint answers /healthz with JetStream on."""

import sys
import urllib.request

try:
    urllib.request.urlopen("http://127.0.0.1:8222/healthz?js-enabled-only=true", timeout=2).read()
except Exception as e:  # any failure is "unhealthy"; docker keeps the message
    sys.exit(f"nats /healthz: {e}")
