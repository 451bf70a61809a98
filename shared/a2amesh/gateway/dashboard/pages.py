"""The dashboard's routes: one handler per page, the partials its live parts re-fetch, and the actions.

Every handler goes through :func:`_guard`: not logged in → a redirect to ``/login`` (or a 401 for a partial),
a key without the route's scope → a 403 page, an action without this browser's CSRF token → a 403. Data comes
only from :mod:`a2amesh.gateway.dashboard.data`; its :class:`~a2amesh.gateway.dashboard.data.DataError` is
shown as a page (or in place, for an action sent by htmx) with its status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from a2amesh.gateway.api.deps import ApiMesh, Scope
from a2amesh.gateway.auth import API_KEY_HEADER, AuthFailed
from a2amesh.gateway.dashboard import data, forms, live, session, views
from a2amesh.gateway.dashboard.graph import Shape, definition_shape, graph_view, node_states
from a2amesh.logs import get_logger

__all__ = ["dashboard_routes"]

HERE = Path(__file__).parent
STATIC = "/dashboard/static"
SHAPES_KEPT = 256
log = get_logger("gateway.dashboard")

Handler = Callable[[Request], Awaitable[Response]]
Method = Callable[["Dashboard", Request], Awaitable[Response]]


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]), enable_async=False
    )
    env.filters["pretty"] = views.pretty
    env.filters["iso"] = views.iso
    env.filters["duration"] = views.duration
    env.filters["short"] = views.short_id
    env.globals["STATUSES"] = data.STATUSES
    env.globals["static"] = STATIC
    return env


def _guard(scope: Scope, *, action: bool = False) -> Callable[[Method], Method]:
    """A page or action for callers with ``scope`` (actions also need this browser's CSRF token)."""

    def wrap(handler: Method) -> Method:
        async def endpoint(self: Dashboard, request: Request) -> Response:
            caller = session.caller_of(request, self.auth)
            if caller is None:
                if request.headers.get("hx-request") or action or request.url.path == "/dashboard/events":
                    return self.problem(request, 401, "log in again: your key is missing or no longer valid")
                back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(back)}", status_code=303)
            try:
                self.auth.require_scope(caller, scope)
            except AuthFailed as e:
                return self.problem(request, 403, str(e))
            request.state.caller = caller
            if action:
                form = await request.form()
                token = form.get(session.CSRF_FIELD)
                if not session.csrf_ok(request, token if isinstance(token, str) else None):
                    return self.problem(request, 403, "the form is stale or came from another site: reload the page")
            try:
                return await handler(self, request)
            except data.DataError as e:
                return self.problem(request, e.status, str(e))
            except Exception:  # the page says only that; the traceback goes to the log
                log.exception("dashboard.internal_error", path=request.url.path, method=request.method)
                return self.problem(request, 500, "the gateway failed to answer; see its log")

        return endpoint

    return wrap


class Dashboard:
    """The dashboard's handlers over one gateway's :class:`ApiMesh`."""

    def __init__(self, mesh: ApiMesh, directory: Handler | None) -> None:
        self.mesh = mesh
        self.auth = mesh.auth
        self.directory = directory
        self.env = _environment()
        self.secure = bool(mesh.http.public_url and mesh.http.public_url.startswith("https"))
        self._shapes: dict[str, Shape] = {}

    def render(self, request: Request, template: str, code: int = 200, **context: Any) -> HTMLResponse:
        context.setdefault("caller", request.state.caller if hasattr(request.state, "caller") else None)
        context["csrf"] = session.csrf_token(request)
        context["path"] = request.url.path
        context["keys"] = bool(self.mesh.http.api_keys)
        return HTMLResponse(self.env.get_template(template).render(request=request, **context), status_code=code)

    def problem(self, request: Request, status: int, message: str) -> Response:
        if request.headers.get("hx-request"):
            return self.render(request, "parts/notice.html", status, kind="error", message=message)
        return self.render(request, "error.html", status, status=status, message=message)

    async def live_after(self) -> str:
        """The event id a page rendered now follows from (empty when unknown: it then refreshes on connect)."""
        last = await data.last_event(self.mesh)
        return "" if last is None else str(last)

    @_guard("read")
    async def overview(self, request: Request) -> Response:
        after = await self.live_after()
        return self.render(request, "overview.html", live_after=after, **await views.overview(self.mesh))

    @_guard("read")
    async def overview_part(self, request: Request) -> Response:
        return self.render(request, "parts/overview_live.html", **await views.overview(self.mesh))

    def _filters(self, request: Request) -> dict[str, str]:
        q = request.query_params
        return {k: q.get(k, "") for k in ("workflow", "status", "since", "parent", "cursor")}

    async def _executions(self, request: Request) -> dict[str, Any]:
        f = self._filters(request)
        if f["since"] and f["since"] not in views.SINCE:
            raise data.DataError(422, f"since {f['since']!r} is not one of {', '.join(views.SINCE)}")
        since = data.now() - timedelta(seconds=views.SINCE[f["since"]]) if f["since"] else None
        page = await data.list_executions(
            self.mesh,
            workflow=f["workflow"] or None,
            status=f["status"] or None,
            since=since,
            parent=f["parent"] or None,
            cursor=f["cursor"] or None,
        )
        items = page.items
        more = {k: v for k, v in f.items() if v and k != "cursor"}
        next_url = f"/executions?{urlencode({**more, 'cursor': page.next_cursor})}" if page.next_cursor else None
        workflows = sorted({w.name for w in await data.list_workflows(self.mesh)} | {e.workflow for e in items})
        return {"items": items, "filters": f, "next_url": next_url, "workflows": workflows, "query": urlencode(more)}

    @_guard("read")
    async def executions(self, request: Request) -> Response:
        wanted = request.query_params.get("id", "").strip()
        if wanted:
            found = await data.get_execution(self.mesh, wanted)
            return RedirectResponse(f"/executions/{found.id}", status_code=303)
        after = await self.live_after()
        return self.render(request, "executions.html", live_after=after, **await self._executions(request))

    @_guard("read")
    async def executions_part(self, request: Request) -> Response:
        return self.render(request, "parts/execution_rows.html", **await self._executions(request))

    async def _detail(self, execution_id: str) -> dict[str, Any]:
        execution = await data.get_execution(self.mesh, execution_id)
        nodes = await data.list_execution_nodes(self.mesh, execution.id)
        definition = await data.get_definition(self.mesh, execution)
        graph = None
        graph_error = None
        if definition is not None:
            try:
                shape = self._shape(execution.digest or "", definition, execution.workflow)
                records = {n.path: n.model_dump() for n in nodes}
                graph = graph_view(shape, node_states(records), finished=execution.status == "completed")
            except Exception as e:  # an old snapshot this version cannot read: the page still shows the rest
                graph_error = f"the definition could not be drawn: {e}"
        review = execution.review or {}
        trace_url = self.mesh.http.trace_url
        return {
            "execution": execution,
            "trace_link": trace_url.replace("{trace_id}", execution.trace_id)
            if trace_url and execution.trace_id
            else None,
            "nodes": nodes,
            "timeline": views.timeline(execution, nodes),
            "graph": graph,
            "graph_error": graph_error,
            "review": review,
            "review_fields": forms.fields_of(review.get("edit_schema")),
            "node_ids": list(dict.fromkeys(n.node_id for n in nodes if n.node_id)),
        }

    def _shape(self, digest: str, definition: dict[str, Any], name: str) -> Shape:
        """The drawn shape of a definition version (kept: a running execution's page asks for it twice a second)."""
        shape = self._shapes.get(digest) if digest else None
        if shape is None:
            shape = definition_shape(definition, name=name)
            if digest:
                if len(self._shapes) >= SHAPES_KEPT:
                    self._shapes.clear()
                self._shapes[digest] = shape
        return shape

    @_guard("read")
    async def execution(self, request: Request) -> Response:
        after = await self.live_after()
        return self.render(request, "execution.html", live_after=after, **await self._detail(request.path_params["id"]))

    @_guard("read")
    async def execution_part(self, request: Request) -> Response:
        return self.render(request, "parts/execution_live.html", **await self._detail(request.path_params["id"]))

    @_guard("read")
    async def timeline_part(self, request: Request) -> Response:
        execution = await data.get_execution(self.mesh, request.path_params["id"])
        nodes = await data.list_execution_nodes(self.mesh, execution.id)
        return self.render(
            request, "parts/timeline.html", execution=execution, timeline=views.timeline(execution, nodes), sub=True
        )

    async def _reviews(self) -> dict[str, Any]:
        reviews = await data.list_reviews(self.mesh)
        return {"reviews": reviews, "fields": {r.execution.id: forms.fields_of(r.edit_schema) for r in reviews}}

    @_guard("read")
    async def reviews(self, request: Request) -> Response:
        after = await self.live_after()
        return self.render(request, "reviews.html", live_after=after, **await self._reviews())

    @_guard("read")
    async def reviews_part(self, request: Request) -> Response:
        return self.render(request, "parts/review_list.html", **await self._reviews())

    @_guard("read")
    async def workflows(self, request: Request) -> Response:
        return self.render(request, "workflows.html", workflows=await data.list_workflows(self.mesh))

    @_guard("read")
    async def workflow(self, request: Request) -> Response:
        wf = await data.get_workflow(self.mesh, request.path_params["name"])
        graph = graph_view(definition_shape(wf.definition, name=wf.name), None)
        recent = await data.list_executions(self.mesh, workflow=wf.name, limit=20)
        schedules = await data.list_schedules(self.mesh, workflow=wf.name)
        versions = await data.list_workflow_versions(self.mesh, wf)
        return self.render(
            request,
            "workflow.html",
            workflow=wf,
            graph=graph,
            recent=recent.items,
            yaml=views.as_yaml(wf.definition),
            json=views.pretty(wf.definition),
            fields=forms.fields_of(wf.input_schema),
            schedules=schedules,
            versions=versions,
        )

    @_guard("read")
    async def diff(self, request: Request) -> Response:
        name = request.path_params["name"]
        q = request.query_params
        old_key, new_key = q.get("from", ""), q.get("to", "")
        if not old_key or not new_key:
            raise data.DataError(422, "choose two versions to compare (from and to)")
        old = await data.get_workflow_version(self.mesh, name, old_key)
        new = await data.get_workflow_version(self.mesh, name, new_key)
        lines = views.diff_lines(
            old, new, f"{name}@{views.version_label(old_key)}", f"{name}@{views.version_label(new_key)}"
        )
        return self.render(request, "diff.html", name=name, old=old_key, new=new_key, lines=lines)

    @_guard("read")
    async def agents_page(self, request: Request) -> Response:
        return self.render(request, "agents.html", agents=await data.list_agents(self.mesh))

    async def agents(self, request: Request) -> Response:
        accept = request.headers.get("accept", "")
        if self.directory is not None and "text/html" not in accept:
            return await self.directory(request)
        return await self.agents_page(request)

    # --- actions --------------------------------------------------------------------------------------

    def done(self, request: Request, message: str, back: str) -> Response:
        if request.headers.get("hx-request"):
            return self.render(request, "parts/notice.html", kind="ok", message=message)
        return RedirectResponse(back, status_code=303)

    @_guard("run", action=True)
    async def cancel(self, request: Request) -> Response:
        execution = await data.cancel_execution(self.mesh, request.path_params["id"])
        return self.done(request, f"execution {execution.id} is {execution.status}", f"/executions/{execution.id}")

    @_guard("run", action=True)
    async def retry(self, request: Request) -> Response:
        form = await request.form()
        from_node = str(form.get("from_node") or "") or None
        new = await data.retry_execution(self.mesh, request.path_params["id"], from_node=from_node)
        return self.moved(request, f"/executions/{new}")

    @_guard("run", action=True)
    async def run(self, request: Request) -> Response:
        name = request.path_params["name"]
        workflow = await data.get_workflow(self.mesh, name)
        form = await request.form()
        try:
            value = forms.parse(workflow.input_schema, form)
        except ValueError as e:
            raise data.DataError(422, str(e)) from e
        if workflow.input_schema:
            problems = forms.validate(workflow.input_schema, value)
            if problems:
                raise data.DataError(422, "the input is not valid: " + "; ".join(problems))
        new = await data.start_execution(self.mesh, name, {} if value is None else value)
        return self.moved(request, f"/executions/{new}")

    @_guard("run", action=True)
    async def schedule(self, request: Request) -> Response:
        schedule, action = request.path_params["schedule"], request.path_params["action"]
        if action not in ("pause", "resume"):
            raise data.DataError(404, f"schedules have no action {action!r}: pause or resume")
        if action == "pause":
            await data.pause_schedule(self.mesh, schedule)
        else:
            await data.resume_schedule(self.mesh, schedule)
        workflow = schedule.split("/", 1)[0]
        return self.moved(request, f"/workflows/{workflow}")

    @_guard("admin", action=True)
    async def restore(self, request: Request) -> Response:
        name, version = request.path_params["name"], request.path_params["version"]
        await data.restore_workflow_version(self.mesh, name, version, author=request.state.caller.key_id)
        return self.moved(request, f"/workflows/{name}")

    @_guard("admin", action=True)
    async def enable(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        if action not in ("enable", "disable"):
            raise data.DataError(404, f"workflows have no action {action!r}: enable or disable")
        await data.set_workflow_enabled(self.mesh, name, action == "enable", author=request.state.caller.key_id)
        return self.moved(request, f"/workflows/{name}")

    def moved(self, request: Request, to: str) -> Response:
        if request.headers.get("hx-request"):
            return Response(status_code=204, headers={"HX-Redirect": to})
        return RedirectResponse(to, status_code=303)

    @_guard("review", action=True)
    async def resume(self, request: Request) -> Response:
        execution_id = request.path_params["id"]
        form = await request.form()
        decision = str(form.get("decision") or "")
        if decision not in ("approve", "reject", "edit"):
            raise data.DataError(422, f"decision {decision!r} is not approve, reject or edit")
        chosen: Literal["approve", "reject", "edit"] = decision  # type: ignore[assignment]
        edited: Any = None
        if chosen == "edit":
            execution = await data.get_execution(self.mesh, execution_id)
            schema = (execution.review or {}).get("edit_schema")
            try:
                edited = forms.parse(schema if isinstance(schema, dict) else None, form)
            except ValueError as e:
                raise data.DataError(422, str(e)) from e
            if isinstance(schema, dict):
                problems = forms.validate(schema, edited)
                if problems:
                    raise data.DataError(422, "the edit is not valid: " + "; ".join(problems))
        path = str(form.get("path") or "") or None
        reason = str(form.get("reason") or "").strip() or None
        await data.resume_execution(self.mesh, execution_id, decision=chosen, data=edited, reason=reason, path=path)
        said = {"approve": "Approved", "reject": "Rejected", "edit": "Edit sent"}[chosen]
        done = self.done(request, f"{said}: execution {execution_id} resumes", f"/executions/{execution_id}")
        if request.headers.get("hx-request"):
            # the review's card leaves with the next live refresh: the confirmation goes where it stays
            done.headers["HX-Retarget"] = "#notices"
            done.headers["HX-Reswap"] = "afterbegin"
        return done

    # --- live updates ------------------------------------------------------------------------------------

    @_guard("read")
    async def events(self, request: Request) -> Response:
        execution = request.query_params.get("execution") or None
        last = request.query_params.get("after") or request.headers.get("last-event-id", "")
        last = last.strip()
        if last and not last.isdigit():
            raise data.DataError(422, f"Last-Event-ID {last[:40]!r} is not an id this stream sent (a sequence number)")
        return StreamingResponse(
            live.stream(self.mesh, execution=execution, after=int(last) if last else None),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    # --- login ---------------------------------------------------------------------------------------------

    def _next(self, value: str) -> str:
        return value if value.startswith("/") and not value.startswith("//") else "/"

    async def login(self, request: Request) -> Response:
        nxt = self._next(request.query_params.get("next", "/"))
        if request.method == "GET":
            if not self.mesh.http.api_keys:
                return RedirectResponse(nxt, status_code=303)
            return self.render(request, "login.html", next=nxt, error=None)
        form = await request.form()
        nxt = self._next(str(form.get("next") or "/"))
        key = str(form.get("key") or "").strip()
        try:
            self.auth.authenticate({API_KEY_HEADER.lower(): key})
        except AuthFailed:
            return self.render(request, "login.html", 401, next=nxt, error="that key is not valid")
        response = RedirectResponse(nxt, status_code=303)
        session.keep_key(response, key, secure=self.secure)
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        session.forget_key(response)
        return response


def dashboard_routes(mesh: ApiMesh, *, directory: Handler | None = None) -> list[BaseRoute]:
    """The dashboard's routes over ``mesh`` (mounted by the gateway before its other routes).

    Args:
        mesh: what the management API serves.
        directory: the gateway's JSON agent directory: ``/agents`` answers it unless the client asks for HTML.
    """
    d = Dashboard(mesh, directory)
    return [
        Route("/", d.overview, methods=["GET"]),
        Route("/executions", d.executions, methods=["GET"]),
        Route("/executions/{id}", d.execution, methods=["GET"]),
        Route("/executions/{id}/cancel", d.cancel, methods=["POST"]),
        Route("/executions/{id}/retry", d.retry, methods=["POST"]),
        Route("/executions/{id}/resume", d.resume, methods=["POST"]),
        Route("/reviews", d.reviews, methods=["GET"]),
        Route("/workflows", d.workflows, methods=["GET"]),
        Route("/workflows/{name}", d.workflow, methods=["GET"]),
        Route("/workflows/{name}/run", d.run, methods=["POST"]),
        Route("/workflows/{name}/diff", d.diff, methods=["GET"]),
        Route("/workflows/{name}/versions/{version:int}/restore", d.restore, methods=["POST"]),
        Route("/workflows/{name}/{action:str}", d.enable, methods=["POST"]),
        Route("/schedules/{schedule:path}/{action:str}", d.schedule, methods=["POST"]),
        Route("/agents", d.agents, methods=["GET"]),
        Route("/login", d.login, methods=["GET", "POST"]),
        Route("/logout", d.logout, methods=["POST"]),
        Route("/dashboard/parts/overview", d.overview_part, methods=["GET"]),
        Route("/dashboard/parts/executions", d.executions_part, methods=["GET"]),
        Route("/dashboard/parts/executions/{id}", d.execution_part, methods=["GET"]),
        Route("/dashboard/parts/executions/{id}/timeline", d.timeline_part, methods=["GET"]),
        Route("/dashboard/parts/reviews", d.reviews_part, methods=["GET"]),
        Route("/dashboard/events", d.events, methods=["GET"]),
        Mount(STATIC, app=StaticFiles(directory=HERE / "static"), name="dashboard-static"),
    ]
