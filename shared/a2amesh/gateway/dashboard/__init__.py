"""The web dashboard served by the gateway at ``/`` (docs/dashboard.md).

Server-rendered pages (Jinja2) with a little vendored JavaScript (htmx and its SSE extension): the overview,
executions with their timeline and graph, the review inbox, workflows and agents. Pages read and act only
through :mod:`a2amesh.gateway.dashboard.data`, whose functions are the management API's operations.
"""

from a2amesh.gateway.dashboard.pages import dashboard_routes

__all__ = ["dashboard_routes"]
