"""Routes of memory entries (seed 004's memory API): list, read, write and delete what the memory nodes keep."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from a2amesh.gateway.api.deps import ApiMesh, mesh_of
from a2amesh.gateway.api.executions import NOT_FOUND, UNAVAILABLE, Admin, Reader, translated
from a2amesh.gateway.api.problems import Problem
from a2amesh.gateway.auth import Caller
from a2amesh.manage.memory import NAME, MemoryItem, MemoryPage, MemoryService, NewMemory

__all__ = ["router"]

router = APIRouter(prefix="/api/memory", tags=["memory"])

Agent = Annotated[str, Query(min_length=1, max_length=200, pattern=NAME, description="Whose memory.")]
EntryId = Annotated[str, Path(min_length=1, max_length=200, description="The entry's id.")]


def _allowed(who: Caller, agent: str) -> None:
    if not who.allows(agent):
        raise Problem(403, "forbidden", f"API key {who.key_id!r} may not use the memory of {agent!r}")


def memory_of(mesh: ApiMesh) -> MemoryService:
    """The process's :class:`MemoryService`."""
    return mesh.manage.memory


@router.get("", response_model=MemoryPage, summary="An agent's memory entries")
async def list_memory(
    request: Request,
    who: Reader,
    agent: Agent,
    user: Annotated[str | None, Query(min_length=1, max_length=200, description="Only this user's.")] = None,
    key: Annotated[str | None, Query(min_length=1, max_length=500, description="Only the entry with this key.")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="At most this many.")] = 100,
) -> MemoryPage:
    """Most recently updated first."""
    _allowed(who, agent)
    async with translated():
        return await memory_of(mesh_of(request)).list(agent, user=user, key=key, limit=limit)


@router.get("/{entry_id}", response_model=MemoryItem, responses=NOT_FOUND, summary="One memory entry")
async def get_memory(request: Request, who: Reader, entry_id: EntryId, agent: Agent) -> MemoryItem:
    """The entry (without its embedding)."""
    _allowed(who, agent)
    async with translated():
        return await memory_of(mesh_of(request)).get(agent, entry_id)


@router.post(
    "",
    response_model=MemoryItem,
    status_code=201,
    responses={200: {"model": MemoryItem, "description": "An entry with the same key was replaced."}, **UNAVAILABLE},
    summary="Remember something",
)
async def write_memory(request: Request, response: Response, who: Admin, body: NewMemory) -> MemoryItem:
    """Embedded by the ``builtin-memory`` agent (the mesh's embedding model) and stored; 200 when it replaced the
    entry with the same key."""
    _allowed(who, body.agent)
    async with translated():
        item, replaced = await memory_of(mesh_of(request)).write(body)
    if replaced:
        response.status_code = 200
    return item


@router.delete("/{entry_id}", status_code=204, responses=NOT_FOUND, summary="Forget a memory entry")
async def delete_memory(request: Request, who: Admin, entry_id: EntryId, agent: Agent) -> Response:
    """Removes the entry, its embedding and its key."""
    _allowed(who, agent)
    async with translated():
        await memory_of(mesh_of(request)).delete(agent, entry_id)
    return Response(status_code=204)
