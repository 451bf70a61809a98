"""``/api/workflows``: stored workflow definitions, their versions, restore, enable and disable (docs/api.md).

The body of a create or update **is** the definition (JSON, or YAML with ``Content-Type: application/yaml``).
Writes answer ``{id, version, etag, warnings}`` and an ``ETag`` header; ``If-Match`` on an update, a delete,
a restore or an enable/disable makes it conditional (412 when stale). Reads need the ``read`` scope, writes
``admin``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response

from a2amesh.gateway.api.deps import ApiMesh, mesh_of, require
from a2amesh.gateway.api.problems import Problem, problem_doc
from a2amesh.gateway.auth import Caller
from a2amesh.manage.definitions import (
    DefinitionService,
    InvalidWorkflow,
    StaleWorkflow,
    VersionInfo,
    WorkflowDetail,
    WorkflowExists,
    WorkflowNotFound,
    WorkflowSummary,
    WriteResult,
    parse_body,
)

__all__ = ["definitions_of", "definitions_router", "router"]

_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
_BODY_TYPES = ("application/json", *_YAML_TYPES)
_DEFINITION_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "The workflow definition itself (a DAG, seed-000 graph or seed-003 simple workflow).",
        "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
            "application/yaml": {"schema": {"type": "object", "additionalProperties": True}},
        },
    }
}


def _problem(status: int, text: str) -> dict[str, Any]:
    return problem_doc(text)


Responses = dict[int | str, dict[str, Any]]
_NOT_FOUND: Responses = {404: _problem(404, "No such workflow (or version).")}
_STALE: Responses = {412: _problem(412, "If-Match is not the current ETag.")}


def definitions_of(mesh: ApiMesh) -> DefinitionService:
    """The gateway process's workflow definitions service."""
    return mesh.manage.workflows


_SERVICES: dict[str, Callable[[ApiMesh], DefinitionService]] = {}
"""The service of each definitions router, by its path prefix."""


def _service(request: Request) -> DefinitionService:
    path = request.url.path
    for prefix, service_of in _SERVICES.items():
        if path == prefix or path.startswith(prefix + "/"):
            return service_of(mesh_of(request))
    raise AssertionError(f"no definitions service serves {path}")


Service = Annotated[DefinitionService, Depends(_service)]


Reader = Annotated[Caller, Depends(require("read"))]
Admin = Annotated[Caller, Depends(require("admin"))]
IfMatch = Annotated[str | None, Header(description="The ETag last read: the write fails with 412 if it is stale.")]
Purge = Annotated[bool, Query(description="Also forget every version (the id then starts again at version 1).")]
Message = Annotated[str | None, Query(max_length=500, description="What this change is (kept with the version).")]


async def _definition(request: Request) -> Any:
    """The request body as data, within the gateway's body limit (413) and content types (415)."""
    limit = mesh_of(request).http.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Problem(413, "payload-too-large", f"the definition exceeds the limit of {limit} bytes")
    media = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if media not in _BODY_TYPES and not media.endswith(("+json", "+yaml")):
        raise Problem(415, "unsupported-media-type", f"send JSON or YAML (application/yaml), not {media}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Problem(413, "payload-too-large", f"the definition exceeds the limit of {limit} bytes")
    try:
        return parse_body(bytes(body), media)
    except InvalidWorkflow as e:
        raise _invalid(e) from None


def _invalid(e: InvalidWorkflow) -> Problem:
    errors = [issue.model_dump() for issue in e.errors]
    return Problem(422, "invalid-definition", str(e), errors=errors)


def _mapped(e: Exception) -> Problem:
    if isinstance(e, InvalidWorkflow):
        return _invalid(e)
    if isinstance(e, WorkflowNotFound):
        return Problem(404, "not-found", str(e))
    if isinstance(e, WorkflowExists):
        return Problem(409, "conflict", str(e), headers={"ETag": e.head.etag})
    if isinstance(e, StaleWorkflow):
        return Problem(412, "precondition-failed", str(e), headers={"ETag": e.current} if e.current else None)
    raise e


_WRITE_ERRORS = (InvalidWorkflow, WorkflowNotFound, WorkflowExists, StaleWorkflow)


def definitions_router(
    prefix: str, tag: str, noun: str, service_of: Callable[[ApiMesh], DefinitionService]
) -> APIRouter:
    """The routes of one kind of stored definitions (workflows; LLM agents) under ``prefix``."""
    _SERVICES[prefix] = service_of
    router = APIRouter(prefix=prefix, tags=[tag])
    _add_core_routes(router, prefix, noun)
    _add_history_routes(router, noun)
    return router


def _add_core_routes(router: APIRouter, prefix: str, noun: str) -> None:
    @router.get("", response_model=list[WorkflowSummary], response_model_by_alias=True, summary=f"List {noun}s")
    async def list_workflows(service: Service, caller: Reader) -> list[WorkflowSummary]:
        """Every stored definition that is not deleted (enabled or not), by id."""
        return [WorkflowSummary.of(head) for head in await service.all()]

    @router.post(
        "",
        status_code=201,
        response_model=WriteResult,
        openapi_extra=_DEFINITION_BODY,
        responses={
            409: _problem(409, f"A {noun} with this id exists."),
            413: _problem(413, "Body too large."),
            415: _problem(415, "Neither JSON nor YAML."),
        },
        summary=f"Create a {noun}",
    )
    async def create_workflow(
        request: Request, response: Response, service: Service, caller: Admin, message: Message = None
    ) -> WriteResult:
        """Store a new definition (its id: the definition's ``id``, else its ``name``); served within 1 s."""
        document = await _definition(request)
        try:
            result = await service.create(document, author=caller.key_id, message=message)
        except _WRITE_ERRORS as e:
            raise _mapped(e) from None
        response.headers["ETag"] = result.etag
        response.headers["Location"] = f"{prefix}/{result.id}"
        return result

    @router.put(
        "/{workflow_id}",
        response_model=WriteResult,
        openapi_extra=_DEFINITION_BODY,
        responses={
            201: {"model": WriteResult, "description": "Created."},
            **_STALE,
            413: _problem(413, "Body too large."),
            415: _problem(415, "Neither JSON nor YAML."),
        },
        summary=f"Create or update a {noun}",
    )
    async def put_workflow(
        workflow_id: str,
        request: Request,
        response: Response,
        service: Service,
        caller: Admin,
        if_match: IfMatch = None,
        message: Message = None,
    ) -> WriteResult:
        """Store the definition as the next version (its id must be the path's). New executions and tasks use
        it; running ones finish on the version they started with."""
        document = await _definition(request)
        try:
            result, created = await service.put(
                workflow_id, document, author=caller.key_id, message=message, if_match=if_match
            )
        except _WRITE_ERRORS as e:
            raise _mapped(e) from None
        response.status_code = 201 if created else 200
        response.headers["ETag"] = result.etag
        return result

    @router.get(
        "/{workflow_id}",
        response_model=WorkflowDetail,
        response_model_by_alias=True,
        responses=_NOT_FOUND,
        summary=f"Get a {noun}",
    )
    async def get_workflow(
        workflow_id: str,
        response: Response,
        service: Service,
        caller: Reader,
        version: Annotated[int | None, Query(ge=1, description="An older version (default: the current one).")] = None,
    ) -> WorkflowDetail:
        """The current definition (or ``?version=N``) with its version, ETag and settings."""
        try:
            stored = await service.get(workflow_id, version)
        except WorkflowNotFound as e:
            raise _mapped(e) from None
        response.headers["ETag"] = stored.head.etag
        return WorkflowDetail.of_stored(stored)

    @router.delete("/{workflow_id}", status_code=204, responses={**_NOT_FOUND, **_STALE}, summary=f"Delete a {noun}")
    async def delete_workflow(
        workflow_id: str, service: Service, caller: Admin, if_match: IfMatch = None, purge: Purge = False
    ) -> Response:
        """Take it off the mesh (its card goes; calls fail with AGENT_NOT_FOUND). The history is kept unless
        ``?purge=true`` (which also forgets an already deleted one)."""
        try:
            if purge:
                await service.purge(workflow_id)
            else:
                await service.delete(workflow_id, if_match=if_match, author=caller.key_id)
        except _WRITE_ERRORS as e:
            raise _mapped(e) from None
        return Response(status_code=204)


def _add_history_routes(router: APIRouter, noun: str) -> None:
    @router.get(
        "/{workflow_id}/versions",
        response_model=list[VersionInfo],
        responses=_NOT_FOUND,
        summary=f"List a {noun}'s versions",
    )
    async def list_versions(workflow_id: str, service: Service, caller: Reader) -> list[VersionInfo]:
        """Every version, oldest first."""
        try:
            return [VersionInfo.of(v) for v in await service.versions(workflow_id)]
        except WorkflowNotFound as e:
            raise _mapped(e) from None

    @router.post(
        "/{workflow_id}/versions/{version}/restore",
        response_model=WriteResult,
        responses={**_NOT_FOUND, **_STALE},
        summary=f"Restore a {noun} version",
    )
    async def restore_version(
        workflow_id: str, version: int, response: Response, service: Service, caller: Admin, if_match: IfMatch = None
    ) -> WriteResult:
        """Make a new version whose definition equals ``version``'s."""
        try:
            result = await service.restore(workflow_id, version, author=caller.key_id, if_match=if_match)
        except _WRITE_ERRORS as e:
            raise _mapped(e) from None
        response.headers["ETag"] = result.etag
        return result

    async def _set_enabled(
        service: DefinitionService, workflow_id: str, enabled: bool, caller: Caller, if_match: str | None
    ) -> WorkflowSummary:
        try:
            head = await service.set_enabled(workflow_id, enabled, if_match=if_match, author=caller.key_id)
        except _WRITE_ERRORS as e:
            raise _mapped(e) from None
        return WorkflowSummary.of(head)

    @router.post(
        "/{workflow_id}/enable",
        response_model=WorkflowSummary,
        response_model_by_alias=True,
        responses={**_NOT_FOUND, **_STALE},
        summary=f"Enable a {noun}",
    )
    async def enable_workflow(
        workflow_id: str, service: Service, caller: Admin, if_match: IfMatch = None
    ) -> WorkflowSummary:
        """Serve it again (no new version)."""
        return await _set_enabled(service, workflow_id, True, caller, if_match)

    @router.post(
        "/{workflow_id}/disable",
        response_model=WorkflowSummary,
        response_model_by_alias=True,
        responses={**_NOT_FOUND, **_STALE},
        summary=f"Disable a {noun}",
    )
    async def disable_workflow(
        workflow_id: str, service: Service, caller: Admin, if_match: IfMatch = None
    ) -> WorkflowSummary:
        """Stop serving it (its card goes) but keep it, with its history (no new version)."""
        return await _set_enabled(service, workflow_id, False, caller, if_match)


router = definitions_router("/api/workflows", "workflows", "workflow", definitions_of)
