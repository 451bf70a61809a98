"""The HTTP gateway: every agent and workflow of the mesh as an A2A 1.0 endpoint (JSON-RPC, HTTP+JSON, SSE).

``app`` (routes and the per-agent gate), ``handler`` (the SDK ``RequestHandler`` forwarding over ``Client``),
``conversion`` (protobuf ↔ our models), ``errors`` (our errors as the SDK's), ``auth`` (API keys, allow-lists,
rate limit), ``cards`` (card rewrite and the ``/agents`` directory), ``settings``, ``server`` (uvicorn).
"""

from a2amesh.gateway.app import create_app
from a2amesh.gateway.server import Gateway
from a2amesh.gateway.settings import GatewaySettings

__all__ = ["Gateway", "GatewaySettings", "create_app"]
