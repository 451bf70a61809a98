"""ADK's ``RemoteA2aAgent`` (run as the root agent of an ``InMemoryRunner``) calls an agent or workflow through our
gateway; prints one JSON line: the texts of the events it got, and per turn. Run with the Python of the ADK
virtualenv: ``python adk_client.py CARD_URL TEXT [TEXT …]``: each TEXT is one turn of the same ADK session (a
turn after an INPUT_REQUIRED continues that task: ADK sends its task id).

ADK is given the card's URL, as its users do: it fetches the card itself (it refuses a card whose interface URLs
are not all HTTP(S) on the card's origin; the gateway's card lists only its HTTP interfaces)."""

import asyncio
import json
import sys

from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
from google.adk.runners import InMemoryRunner
from google.genai import types


async def main() -> None:
    agent = RemoteA2aAgent(name="mesh", agent_card=sys.argv[1])
    runner = InMemoryRunner(agent=agent, app_name="interop")
    session = await runner.session_service.create_session(app_name="interop", user_id="u")
    turns: list[list[str]] = []
    for text in sys.argv[2:]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        said: list[str] = []
        async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            for part in event.content.parts or [] if event.content else []:
                if part.text:
                    said.append(part.text)
                elif part.function_call:  # ADK shows an INPUT_REQUIRED's question as a call asking the user
                    said.append(f"{part.function_call.name} {json.dumps(part.function_call.args)}")
        turns.append(said)
    texts = [t for said in turns for t in said]
    print(json.dumps({"texts": texts, "turns": turns}), flush=True)


asyncio.run(main())
