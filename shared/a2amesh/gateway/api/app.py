"""The management API's FastAPI app: its routers, problem answers, OpenAPI at ``/openapi.json``, docs at ``/docs``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI

from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.api.problems import install_problem_handlers, problem_doc

__all__ = ["ERROR_RESPONSES", "create_api"]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: problem_doc(text)
    for status, text in {
        401: "No or unknown API key.",
        403: "The key lacks the route's scope.",
        404: "No such resource (or a path no route matches).",
        422: "The request is not valid (one entry per error).",
    }.items()
}
"""Error answers every route may give (routes add their own 404, 409, 412, 413…)."""


def _routers() -> list[APIRouter]:
    from a2amesh.gateway.api import events, executions, llm_agents, mcp_servers, schedules, workflows

    routers: list[APIRouter] = [
        workflows.router,
        llm_agents.router,
        executions.router,
        schedules.router,
        events.router,
        mcp_servers.router,
    ]
    return routers


def create_api(mesh: ApiMesh) -> FastAPI:
    """The management API over ``mesh`` (mounted at the root of the gateway: its paths start with ``/api``)."""
    app = FastAPI(
        title="a2amesh management API",
        version="1",
        description="Definitions, executions, schedules and events of an a2amesh mesh (docs/api.md).",
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.mesh = mesh
    install_problem_handlers(app)
    for router in _routers():
        app.include_router(router, responses=ERROR_RESPONSES)
    return app
