"""ADK's ``RemoteA2aAgent`` (run as the root agent of an ``InMemoryRunner``) calls an agent or workflow through our
gateway; prints one JSON line: the texts of the events it got. Run with the Python of the ADK virtualenv:
``python adk_client.py CARD_URL TEXT``.

ADK refuses a card fetched over the network if any interface URL is not HTTP(S) on the card's origin, and our
gateway's card also lists the mesh's own ``nats://`` interface; so the card is fetched here, its HTTP interfaces
kept, and given to ``RemoteA2aAgent`` as an object (docs/interop.md)."""

import asyncio
import json
import sys

import httpx
from a2a.client.card_resolver import parse_agent_card
from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
from google.adk.runners import InMemoryRunner
from google.genai import types


async def main() -> None:
    async with httpx.AsyncClient() as http:
        card = (await http.get(sys.argv[1])).json()
    card["supportedInterfaces"] = [i for i in card["supportedInterfaces"] if i["url"].startswith("http")]
    agent = RemoteA2aAgent(name="mesh", agent_card=parse_agent_card(card))
    runner = InMemoryRunner(agent=agent, app_name="interop")
    session = await runner.session_service.create_session(app_name="interop", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=sys.argv[2])])
    texts = []
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        if event.content and event.content.parts:
            texts += [p.text for p in event.content.parts if p.text]
    print(json.dumps({"texts": texts}), flush=True)


asyncio.run(main())
