"""Scripted travel policies: a privileged expert and a random baseline.

The expert reads the trip from the task payload, yet goes through the motions a good agent makes
for each aspect in order: search it, ask about it once per preference, then recommend the best
option (`payload["aspects"][i]["best"]`). It reads its own past tool calls from the conversation
to know where it is, so it is stateless and can resume any conversation it started.
`random_action(rng)` writes one random assistant output (bracket text, tool-call markup, or
junk) for baselines and robustness tests. Neither is a model; neither learns.
"""

from __future__ import annotations

import json
import random

from gyms.travel.scenarios import ASPECT_NAMES, ASPECTS, CATALOGUE
from mua.gym.api import GymContext, Task


def _past_calls(messages: list[dict]) -> list[dict]:
    calls = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        for c in m.get("tool_calls") or []:
            args = c.get("function", {}).get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    args = {}
            calls.append(args if isinstance(args, dict) else {})
    return calls


def _call(choice: str, content: str, thought: str) -> dict:
    return {
        "role": "assistant",
        "content": f"<think>{thought}</think>",
        "tool_calls": [
            {
                "type": "function",
                "function": {
                    "name": "interact_with_env",
                    "arguments": {"choice": choice, "content": content},
                },
            }
        ],
    }


def next_expert_message(messages: list[dict], task: Task) -> dict:
    """The expert's next assistant message for the conversation so far."""
    aspects = task.payload["aspects"]
    calls = _past_calls(messages)
    answered = sum(1 for c in calls if c.get("choice") == "answer")
    if answered >= len(aspects):
        return _call("finish", "", "Every aspect has a recommendation.")
    last_answer = max((i for i, c in enumerate(calls) if c.get("choice") == "answer"), default=-1)
    since = calls[last_answer + 1 :]
    spec = aspects[answered]
    name = ASPECT_NAMES[spec["name"]]
    if not any(c.get("choice") == "search" for c in since):
        return _call("search", name, f"First I look at the {name} options.")
    asked = sum(1 for c in since if c.get("choice") == "action")
    if asked < len(spec["preferences"]):
        return _call(
            "action",
            f"What matters to you about the {name}?",
            "I need the traveller's preferences.",
        )
    return _call(
        "answer", spec["best"], f"{spec['best']} is the cheapest option meeting every preference."
    )


def make_expert(ctx: GymContext):
    async def policy(messages: list[dict], task: Task) -> dict:
        return next_expert_message(messages, task)

    return policy


_JUNK = [
    "",
    "   ",
    "[answer]",
    "[search]",
    "[action]",
    "[unknown] x",
    "<tool_call>{not json</tool_call>",
    "\u0000\u202e",
    '{"choice": 1}',
    "[answer] ZZ99 H1 F1",
    "🙂" * 20,
    "<think>hmm",
]


def random_action(rng: random.Random) -> str:
    """One random assistant output: bracket text, tool-call markup, plain talk or junk."""
    aspect = rng.choice(ASPECTS)
    option_id = f"{CATALOGUE[aspect]['prefix']}{rng.randint(1, 10)}"
    kind = rng.randrange(6)
    if kind == 0:
        return f"[search] {rng.choice([ASPECT_NAMES[aspect], 'everything', 'cheap stuff'])}"
    if kind == 1:
        return f"[answer] {option_id}"
    if kind == 2:
        return f"[action] {rng.choice(['What do you like?', 'Hello', f'Any wishes for the {aspect}?', 'ok'])}"
    if kind == 3:
        choice = rng.choice(["action", "search", "answer", "finish", "fly", 7])
        return (
            "<tool_call>\n"
            + json.dumps(
                {"name": "interact_with_env", "arguments": {"choice": choice, "content": option_id}}
            )
            + "\n</tool_call>"
        )
    if kind == 4:
        return rng.choice(["Sure, let me help.", "I think you will love it.", "Done."])
    return rng.choice(_JUNK)
