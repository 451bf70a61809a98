"""``/api/remotes``: remote A2A agents declared through the management API (docs/interop.md, docs/api.md).

Adding one fetches and checks its card first, by the code path of ``a2amesh remote add``
(:func:`a2amesh.remote.declare.check_remote`); a bad card is a 4xx naming the URL and the problem. The
declaration is stored in Redis and announced: every ``a2amesh remote serve --stored`` process (``a2amesh up``
starts one) runs its proxy at once, and stops it when the declaration is removed. Reads need ``read``, changes
``admin``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, Field

from a2amesh.errors import ConfigError, RemoteError
from a2amesh.gateway.api.deps import ApiMesh, mesh_of, require
from a2amesh.gateway.api.problems import Problem, problem_doc
from a2amesh.gateway.auth import Caller
from a2amesh.manage.remotes import Remotes
from a2amesh.remote.declare import check_remote, declaration
from a2amesh.remote.spec import RemoteSpec

__all__ = ["RemoteInfo", "router"]

router = APIRouter(prefix="/api/remotes", tags=["remotes"])

Reader = Annotated[Caller, Depends(require("read"))]
Admin = Annotated[Caller, Depends(require("admin"))]
RemoteName = Annotated[
    str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_-]+$", description="The remote's mesh name.")
]
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: problem_doc("No remote of that name was declared here.")}
ADD_ERRORS: dict[int | str, dict[str, Any]] = {
    409: problem_doc("A remote of that name is already declared, or a live agent or workflow holds the name."),
    422: problem_doc("The body is not valid, or the remote's card is not an A2A agent card one can use."),
    424: problem_doc("The remote is unreachable (no connection, or no answer in time)."),
}


class RemoteInfo(BaseModel):
    """One declared remote agent."""

    name: str = Field(description="Its name in the mesh.")
    url: str = Field(description="Its card URL or base URL, as declared.")
    declaration: dict[str, Any] = Field(description="The declaration as under remote: (secrets by reference only).")
    serve: str = Field(
        description="The command that runs a proxy of this remote alone (every `a2amesh remote serve --stored` "
        "process, which `a2amesh up` starts, serves it already)."
    )

    @classmethod
    def of(cls, spec: RemoteSpec) -> RemoteInfo:
        assert spec.name is not None
        return cls(
            name=spec.name,
            url=spec.url,
            declaration=declaration(spec),
            serve=f"a2amesh remote serve --stored {spec.name}",
        )


class AddedRemote(RemoteInfo):
    """A remote just declared, with what its card offers."""

    endpoint: str = Field(description="The interface URL the proxy forwards to.")
    binding: str = Field(description="JSONRPC or HTTP+JSON.")
    version: str = Field(description="The A2A protocol version of that interface.")
    skills: list[str] = Field(description="The card's skill ids.")


def _store(mesh: ApiMesh) -> Remotes:
    return mesh.manage.remotes


def _missing(name: str) -> Problem:
    return Problem(404, "not-found", f"no remote agent {name!r} is declared through the API")


@router.get("", response_model=list[RemoteInfo], summary="List declared remote agents")
async def list_remotes(request: Request, who: Reader) -> list[RemoteInfo]:
    """Every remote declared through the API, by name (those of YAML files are not listed)."""
    return [RemoteInfo.of(s) for s in await _store(mesh_of(request)).all() if who.allows(s.name or "")]


@router.get("/{name}", response_model=RemoteInfo, responses=NOT_FOUND, summary="One declared remote agent")
async def get_remote(request: Request, who: Reader, name: RemoteName) -> RemoteInfo:
    """The declaration of one remote."""
    spec = await _store(mesh_of(request)).get(name)
    if spec is None or not who.allows(name):
        raise _missing(name)
    return RemoteInfo.of(spec)


@router.post("", response_model=AddedRemote, status_code=201, responses=ADD_ERRORS, summary="Declare a remote agent")
async def add_remote(request: Request, who: Admin, body: RemoteSpec, response: Response) -> AddedRemote:
    """Fetch and check the remote's card, then store the declaration under its mesh name (``name``, else the
    card's); the proxies of stored remotes start serving it."""
    mesh = mesh_of(request)
    try:
        checked = await check_remote(body, source="POST /api/remotes")
    except ConfigError as e:
        raise Problem(422, "invalid-remote", f"remote agent {body.url}: {e}") from e
    except RemoteError as e:
        if e.problem.startswith("unreachable"):
            raise Problem(424, "remote-unreachable", str(e)) from e
        raise Problem(422, "bad-remote-card", str(e)) from e
    live = mesh.client.registry.get(checked.name)
    if live is not None and live.remote_url != checked.spec.url:
        what = (
            f"remote agent of {live.remote_url}"
            if live.remote_url
            else ("workflow" if live.agent_type == "workflow" else "agent")
        )
        raise Problem(
            409,
            "conflict",
            f"{checked.name!r} is the name of a live {what} in the mesh: both would serve its tasks; "
            "give the remote another name (name)",
        )
    if not await _store(mesh).add(checked.spec):
        raise Problem(409, "conflict", f"a remote agent {checked.name!r} is already declared; remove it or give name")
    response.headers["Location"] = f"/api/remotes/{checked.name}"
    remote = checked.card
    return AddedRemote(
        **RemoteInfo.of(checked.spec).model_dump(),
        endpoint=remote.url,
        binding=remote.binding,
        version=remote.version,
        skills=[s.id for s in remote.card.skills],
    )


@router.delete("/{name}", status_code=204, responses=NOT_FOUND, summary="Forget a declared remote agent")
async def remove_remote(request: Request, who: Admin, name: RemoteName) -> Response:
    """Forget the declaration: the proxies of stored remotes stop serving it, and its card leaves the registry
    (a proxy started for it alone, ``remote serve --stored NAME``, goes on until it is stopped)."""
    if not who.allows(name) or not await _store(mesh_of(request)).remove(name):
        raise _missing(name)
    return Response(status_code=204)
