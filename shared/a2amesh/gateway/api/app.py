"""The management API's FastAPI app: its routers, problem answers, OpenAPI at ``/openapi.json``, docs at ``/docs``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI

from a2amesh.gateway.api.deps import ApiMesh
from a2amesh.gateway.api.problems import Problem, install_problem_handlers, problem_doc, problem_response
from a2amesh.gateway.bodies import BodyLimit

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
    from a2amesh.gateway.api import events, executions, llm_agents, mcp_servers, memory, remotes, schedules, workflows

    routers: list[APIRouter] = [
        workflows.router,
        llm_agents.router,
        executions.router,
        schedules.router,
        events.router,
        memory.router,
        mcp_servers.router,
        remotes.router,
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
    limit = mesh.http.max_body_bytes
    too_large = problem_response(
        Problem(413, "payload-too-large", f"the request body exceeds the gateway's limit of {limit} bytes")
    )
    app.add_middleware(BodyLimit, limit=limit, too_large=too_large)
    for router in _routers():
        app.include_router(router, responses=ERROR_RESPONSES)
    return app
