"""The dashboard's answers to bad requests, its auth and its plumbing, over a real gateway (HTTP, no browser)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from a2amesh.client import Client
from a2amesh.gateway.settings import parse_api_keys
from tests.support.waiting import within

HTML = {"Accept": "text/html"}
ECHO = """
name: echo
nodes:
  - {id: say, type: agent, agent_name: say, input: "{{workflow.input}}"}
"""


async def say(input: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return input


def _csrf(page: str) -> str:
    found = re.search(r'"X-CSRF-Token": "([0-9a-f]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def test_bad_requests_get_precise_pages(agent_host: Any, executor: Any, client: Client, gateway: Any) -> None:
    """Unknown ids, bad filters, forged or misdirected actions: each answered with its status and what is wrong."""
    await agent_host("say", say)
    await executor({"echo": ECHO})
    await client.registry.wait_for("echo", 5)
    done = await within(client.send("echo", {"x": 1}), 10, "a finished run")
    url = await gateway()
    async with httpx.AsyncClient(base_url=url, headers=HTML) as http:
        r = await http.get("/executions/no-such-run")
        assert r.status_code == 404
        assert "no execution &#39;no-such-run&#39;" in r.text
        r = await http.get("/executions?status=bogus")
        assert r.status_code == 422
        assert "status: &#39;bogus&#39; is not one of running, paused, completed, failed, cancelled" in r.text
        assert (await http.get("/executions?cursor=abc")).status_code == 422
        r = await http.get("/workflows/nope")
        assert r.status_code == 404
        assert "no workflow named &#39;nope&#39; is stored or served" in r.text
        r = await http.post(f"/executions/{done.id}/cancel", data={"csrf": "forged"})
        assert r.status_code == 403
        assert "reload the page" in r.text
        token = _csrf((await http.get("/")).text)
        r = await http.post(f"/executions/{done.id}/cancel", data={"csrf": token}, headers={"HX-Request": "true"})
        assert r.status_code == 409
        assert "is completed: only a running or paused one can be cancelled" in r.text
        r = await http.post(f"/executions/{done.id}/resume", data={"csrf": token, "decision": "maybe"})
        assert r.status_code == 422
        assert "decision &#39;maybe&#39; is not approve, reject or edit" in r.text
        r = await http.get("/workflows/echo/diff?from=abc")
        assert r.status_code == 422
        assert "choose two versions to compare" in r.text
        r = await http.get("/workflows/echo/diff?from=abc&to=def")
        assert r.status_code == 404
        assert "workflow &#39;echo&#39; has no known version &#39;abc&#39;" in r.text
        r = await http.post("/schedules/echo/main/explode", data={"csrf": token})
        assert r.status_code == 404
        r = await http.post("/workflows/echo/explode", data={"csrf": token})
        assert r.status_code == 404
        assert "workflows have no action &#39;explode&#39;: enable or disable" in r.text
        r = await http.post("/workflows/echo/versions/1/restore", data={"csrf": token})
        assert r.status_code == 404
        r = await http.get("/dashboard/events", headers={"Last-Event-ID": "yesterday"})
        assert r.status_code == 422
        assert "is not an id this stream sent" in r.text
        r = await http.post(
            "/executions/x/cancel", data={"csrf": token}, headers={"Origin": "https://elsewhere.example"}
        )
        assert r.status_code == 403


async def test_agents_negotiates_json_for_clients_and_html_for_browsers(
    agent_host: Any, client: Client, gateway: Any
) -> None:
    """``/agents`` stays the gateway's JSON directory for API clients; a browser gets the dashboard's page."""
    await agent_host("say", say)
    url = await gateway()
    async with httpx.AsyncClient(base_url=url) as http:
        directory = (await http.get("/agents")).json()
        assert [a["name"] for a in directory["agents"]] == ["say"]
        page = await http.get("/agents", headers=HTML)
        assert page.headers["content-type"].startswith("text/html")
        assert 'aria-label="agent say"' in page.text


async def test_vendored_scripts_and_their_licences_are_served(gateway: Any) -> None:
    """htmx comes from the package (no CDN), with its licence beside it; so does the page script."""
    url = await gateway()
    async with httpx.AsyncClient(base_url=url) as http:
        page = (await http.get("/", headers=HTML)).text
        for script in ("vendor/htmx-2.0.11.min.js", "app.js"):
            assert f"/dashboard/static/{script}" in page
            assert (await http.get(f"/dashboard/static/{script}")).status_code == 200
        r = await http.get("/dashboard/static/vendor/htmx-2.0.11.LICENSE")
        assert "Zero-Clause BSD" in r.text or "BSD Zero Clause" in r.text


async def test_event_stream_starts_with_a_changed_message(gateway: Any) -> None:
    """A page that connects (or reconnects) is told at once to refresh, so it misses nothing while away."""
    url = await gateway()
    async with httpx.AsyncClient(base_url=url, timeout=10) as http, http.stream("GET", "/dashboard/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.aiter_lines()

        async def first_event() -> str:
            async for line in lines:
                if line.startswith("event:"):
                    return line
            return ""

        assert await within(first_event(), 5, "the stream's first event") == "event: changed"


async def test_keys_and_scopes(gateway: Any) -> None:
    """With keys: no key → login redirect (pages) or 401 (actions, the stream); a read-only key reads but may
    not act (403 naming the scope); schedules need run, workflow writes admin, as in the API; a key in a
    header works as for the API."""
    url = await gateway(api_keys=parse_api_keys("viewer=v-secret#read,runner=r-secret#run|read,ops=o-secret"))
    async with httpx.AsyncClient(base_url=url, headers=HTML) as http:
        r = await http.get("/reviews")
        assert r.status_code == 303
        assert r.headers["location"] == "/login?next=/reviews"
        assert (await http.get("/dashboard/events")).status_code == 401
        assert (await http.post("/executions/x/cancel")).status_code == 401
        assert (await http.get("/", headers={"X-API-Key": "o-secret"})).status_code == 200
        r = await http.post("/login", data={"key": "v-secret", "next": "//evil.example/"})
        assert r.status_code == 303
        assert r.headers["location"] == "/"
        assert "httponly" in r.headers["set-cookie"].lower()
        assert "samesite=strict" in r.headers["set-cookie"].lower()
        page = await http.get("/")
        assert page.status_code == 200
        r = await http.post("/executions/x/cancel", data={"csrf": _csrf(page.text)})
        assert r.status_code == 403
        assert "lacks the &#39;run&#39; scope" in r.text
        r = await http.post("/schedules/nightly/main/pause", data={"csrf": _csrf(page.text)})
        assert r.status_code == 403
        assert "lacks the &#39;run&#39; scope" in r.text
    async with httpx.AsyncClient(base_url=url, headers={**HTML, "X-API-Key": "r-secret"}) as http:
        token = _csrf((await http.get("/")).text)
        r = await http.post("/schedules/nightly/main/pause", data={"csrf": token})
        assert r.status_code == 404  # the run scope is enough (as for the API); there is no such schedule
        assert "no schedule &#39;nightly/main&#39;" in r.text
        r = await http.post("/workflows/nightly/disable", data={"csrf": token})
        assert r.status_code == 403
        assert "lacks the &#39;admin&#39; scope" in r.text


async def _changes(lines: Any, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The next ``count`` ``changed`` messages of a stream: (id, data)."""
    found: list[tuple[str, dict[str, Any]]] = []
    ident = ""
    async for line in lines:
        if line.startswith("id: "):
            ident = line[4:]
        elif line.startswith("data: "):
            found.append((ident, json.loads(line[6:])))
            ident = ""
            if len(found) == count:
                break
    return found


async def test_event_stream_resumes_after_last_event_id(
    agent_host: Any, executor: Any, client: Client, gateway: Any
) -> None:
    """Each batch carries its last event's id; reconnecting with it as Last-Event-ID (what a browser sends by
    itself) replays what came after it: the run that finished while away is named, with no connect message."""
    await agent_host("say", say)
    await executor({"echo": ECHO})
    await client.registry.wait_for("echo", 5)
    url = await gateway()
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        async with http.stream("GET", "/dashboard/events") as r:
            lines = r.aiter_lines()
            [(first_id, first)] = await within(_changes(lines, 1), 5, "the connect message")
            assert (first_id, first["ids"]) == ("", [])
            seen = await within(client.send("echo", {"x": 1}), 10, "a run while connected")

            async def until_seen() -> str:
                while True:
                    [(ident, data)] = await _changes(lines, 1)
                    if seen.id in data["ids"] and "completed" in data["statuses"]:
                        return ident

            last = await within(until_seen(), 10, "the batch with the first run's completion")
        assert last.isdigit(), last
        missed = await within(client.send("echo", {"x": 2}), 10, "a run while away")
        async with http.stream("GET", "/dashboard/events", headers={"Last-Event-ID": last}) as r:
            replay = r.aiter_lines()

            async def until_missed() -> list[str]:
                idents = []
                while True:
                    [(ident, data)] = await _changes(replay, 1)
                    idents.append(ident)
                    if missed.id in data["ids"]:
                        return idents

            idents = await within(until_missed(), 5, "the replayed batch naming the run missed while away")
        assert all(int(i) > int(last) for i in idents), (idents, last)
        page = (await http.get("/executions", headers=HTML)).text
        rendered = re.search(r'data-live-after="(\d+)"', page)
        assert rendered, "the page does not say which event it was rendered after"
        assert int(rendered.group(1)) >= max(int(i) for i in idents)  # it follows from the newest stored event


async def test_execution_page_shows_and_links_its_trace(
    agent_host: Any, executor: Any, client: Client, gateway: Any
) -> None:
    """An execution whose request carried a traceparent shows its trace id, linked through A2AMESH_TRACE_URL's
    template; one without a traceparent shows no trace."""
    await agent_host("say", say)
    await executor({"echo": ECHO})
    await client.registry.wait_for("echo", 5)
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    traced = await within(
        client.send("echo", {"x": 1}, headers={"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}), 10, "a traced run"
    )
    plain = await within(client.send("echo", {"x": 2}), 10, "a run without a trace")
    url = await gateway(trace_url="https://tempo.example/explore?trace={trace_id}")
    async with httpx.AsyncClient(base_url=url, headers=HTML) as http:
        page = (await http.get(f"/executions/{traced.id}")).text
        assert f'<a href="https://tempo.example/explore?trace={trace}"' in page
        assert f"<code>{trace}</code>" in page
        detail = (await http.get(f"/api/executions/{traced.id}", headers={"Accept": "application/json"})).json()
        assert detail["trace_id"] == trace
        assert "<dt>Trace</dt>" not in (await http.get(f"/executions/{plain.id}")).text
