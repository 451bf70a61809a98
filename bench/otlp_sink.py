"""An OTLP/HTTP sink for benchmarks: accepts every export (``POST /v1/traces``), counts the bytes, keeps nothing."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OtlpSink:
    """A loopback HTTP server answering every OTLP export with 200 and an empty response, in a thread."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(size)
                sink.requests += 1
                sink.bytes += size
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def env(self, *, traces: bool, metrics: bool, ratio: float = 1.0) -> dict[str, str]:
        """The environment that turns a process's OpenTelemetry on with this sink as its OTLP endpoint (which asks
        for both signals): ``traces`` (every one, or ``ratio`` of the new ones) and ``metrics``, each alone or
        both."""
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint}
        if not traces:
            env["OTEL_TRACES_EXPORTER"] = "none"
        elif ratio < 1:
            env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            env["OTEL_TRACES_SAMPLER_ARG"] = str(ratio)
        else:
            env["OTEL_TRACES_SAMPLER"] = "always_on"
        if not metrics:
            env["OTEL_METRICS_EXPORTER"] = "none"
        return env
