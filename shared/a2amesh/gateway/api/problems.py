"""Errors of the management API as RFC 9457 problem details (``application/problem+json``).

Every failure a client can cause is a :class:`Problem` with a precise ``detail``; request validation
failures are 422 with one entry per error (its ``path``, ``message``); anything unexpected is a 500 whose body
says only that (the traceback goes to the log, never to the client).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from a2amesh.logs import get_logger

__all__ = ["PROBLEM_TYPE", "Problem", "ProblemBody", "install_problem_handlers", "problem_doc", "problem_response"]

PROBLEM_TYPE = "application/problem+json"

log = get_logger("gateway.api")


class Problem(Exception):
    """A failure answered as a problem: ``status``, a short ``title`` (a slug), a precise ``detail``.

    Args:
        errors: one entry per error for 422s (``path``, ``message`` and, where known, ``node``, ``field``,
            ``suggestion``).
        headers: response headers (``WWW-Authenticate``, ``ETag``…).
    """

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
        self.headers = headers


class ProblemBody(BaseModel):
    """The body of every error answer (documented on every route's error responses)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None


def problem_doc(description: str) -> dict[str, Any]:
    """The OpenAPI entry of an error answer: a :class:`ProblemBody` served as ``application/problem+json``."""
    schema = {"$ref": "#/components/schemas/ProblemBody"}
    return {"model": ProblemBody, "description": description, "content": {PROBLEM_TYPE: {"schema": schema}}}


def problem_response(problem: Problem) -> Response:
    """The response answering ``problem``."""
    body = ProblemBody(title=problem.title, status=problem.status, detail=problem.detail, errors=problem.errors)
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=problem.status, headers=problem.headers, media_type=PROBLEM_TYPE
    )


def _where(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        head, rest = parts[0], parts[1:]
        return f"{head}." + ".".join(rest) if rest else head
    return ".".join(parts)


def install_problem_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` as a problem."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return problem_response(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [{"path": _where(e.get("loc", ())), "message": str(e.get("msg", ""))} for e in exc.errors()]
        detail = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:5])
        return problem_response(Problem(422, "invalid-request", detail or "the request is not valid", errors=errors))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        title = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        return problem_response(
            Problem(exc.status_code, title, str(exc.detail), headers=dict(exc.headers) if exc.headers else None)
        )

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.exception("api.internal_error", path=request.url.path, method=request.method)
        return problem_response(Problem(500, "internal-error", "the gateway failed to answer; see its log"))

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
