"""Scripted simulated users behind one OpenAI-compatible endpoint, chosen by the request's model.

For the persuade gym's LLM persuadee (`{"reply": ..., "stance": ...}`):

- `good`: moves two stances toward Strongly Disagree for every argument, as an honest persuadee
  convinced by the arguments;
- `leaky`: keeps its stance but tells the persuader a counter-point it has not raised yet (the
  solution the agent must find itself), i.e. reveals what it should not;
- `quitter`: keeps its stance and ends the talk at the first argument ("Goodbye");
- `stubborn`: keeps its stance politely, breaking no rule the deterministic checks know.

A model name starting with one of these picks it (`good-cooperative` is `good`); any other name
is `good`. The leaky user knows the counter-points of the built-in persuade tasks (from the
gym's own task builder). `requests_for(server, model)` lists the requests a user received.

Run standalone (for `recipes/eval_user_matrix.yaml`), from the repository root:
`python -m tests.fakes.fake_users --port 8011`. A test double: not shipped in the `mua` package.
"""

from __future__ import annotations

import argparse
import json
import re
from functools import lru_cache

from gyms.persuade.reward import STANCES
from tests.fakes.fake_openai import FakeOpenAIServer

USERS = ("good", "leaky", "quitter", "stubborn")
QUIT_LINE = "I don't want to discuss this any more. Goodbye."


@lru_cache(maxsize=1)
def _points_by_claim() -> dict[str, list[str]]:
    from gyms.persuade import GYM

    out = {}
    for split in GYM.build_tasks(None, seed=0, options={}).values():
        for task in split:
            out[task.payload["claim"]] = [p["point"] for p in task.payload["points"]]
    return out


def user_of(model: str) -> str:
    return next((u for u in USERS if str(model).startswith(u)), "good")


def _said_by_persuader(system: str, message: str) -> str:
    return f"{system}\n{message}".lower()


def persuadee_reply(request: dict) -> str:
    messages = request.get("messages", [])
    system = next((m["content"] for m in messages if m.get("role") == "system"), "")
    last = messages[-1].get("content", "") if messages else ""
    claim = re.search(r'You firmly believe this claim: "([^"]+)"', system)
    previous = re.search(r"Your previous stance: ([A-Za-z ]+)\.", system)
    level = STANCES.index(previous.group(1)) if previous and previous.group(1) in STANCES else 0
    kind = user_of(request.get("model", ""))
    if kind == "good":
        level = min(len(STANCES) - 1, level + 2)
        reply = "That is a fair point. I am reconsidering."
    elif kind == "quitter":
        reply = QUIT_LINE
    elif kind == "stubborn":
        reply = "I see your point, but I still agree with the claim."
    else:
        said = _said_by_persuader(system, last)
        points = _points_by_claim().get(claim.group(1) if claim else "", [])
        unsaid = [p for p in points if p.lower() not in said]
        hint = f" Between us, you could have said: {unsaid[0]}" if unsaid else ""
        reply = f"I still agree with the claim.{hint}"
    return json.dumps({"reply": reply, "stance": STANCES[level]})


def reply(request: dict) -> str:
    return persuadee_reply(request)


def requests_for(server: FakeOpenAIServer, model: str) -> list[dict]:
    return [r["json"] for r in server.requests if r["json"].get("model") == model]


def users_server(**kwargs) -> FakeOpenAIServer:
    """A FakeOpenAIServer answering as these users."""
    return FakeOpenAIServer(reply, **kwargs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Scripted simulated users (good, leaky, quitter).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--max-seconds", type=float, default=3600.0, help="Stop after this long.")
    args = parser.parse_args(argv)
    with users_server(host=args.host, port=args.port) as server:
        print(f"serving {server.base_url} (stops after {args.max_seconds:.0f} s)", flush=True)
        try:
            server.wait(args.max_seconds)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
