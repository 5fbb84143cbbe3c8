"""Scripted tau expert and the do-nothing baseline.

The expert replays the task's gold actions as tool calls, one per turn (as the policy asks),
says the required outputs to the customer (before a transfer to a human, which ends the
episode, or at the end), then announces completion until the customer stops. It reads its
progress from the conversation, so it holds no state between calls.

`do_nothing_score(tasks)` is the fraction of tasks a policy that changes nothing scores on:
tasks whose gold actions leave the database unchanged and that require no outputs.

Deliberately not here: any judgement about policy compliance (the gold actions are trusted).
"""

from __future__ import annotations

import copy

from gyms.tau import domains, reward
from gyms.tau.common_tools import TRANSFER_TOOL
from mua.gym.api import GymContext, Task

DONE_TEXT = "Your request has been completed successfully."


def _tool_calls_so_far(messages: list[dict]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


def _outputs_said(messages: list[dict], outputs: list[str]) -> bool:
    said = [
        m.get("content") or ""
        for m in messages
        if m.get("role") == "assistant" and not m.get("tool_calls")
    ]
    return all(reward.outputs_found(outputs, said).values())


def _call(action: dict) -> dict:
    call = {
        "type": "function",
        "function": {"name": action["name"], "arguments": copy.deepcopy(action.get("kwargs", {}))},
    }
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def _say_outputs(outputs: list[str], suffix: str = "") -> dict:
    return {
        "role": "assistant",
        "content": ("Here is what you asked for: " + "; ".join(outputs) + ". " + suffix).strip(),
    }


def expert(ctx: GymContext):
    async def policy(messages: list[dict], task: Task) -> dict:
        actions = task.payload.get("actions", [])
        outputs = task.payload.get("outputs", [])
        done_calls = _tool_calls_so_far(messages)
        if done_calls < len(actions):
            action = actions[done_calls]
            if action["name"] == TRANSFER_TOOL and outputs and not _outputs_said(messages, outputs):
                return _say_outputs(outputs)
            return _call(action)
        if outputs:
            return _say_outputs(outputs, DONE_TEXT)
        return {"role": "assistant", "content": DONE_TEXT}

    return policy


def do_nothing_score(tasks: list[Task]) -> float:
    """Mean reward of an agent that changes nothing and says nothing required (0.0 for no tasks)."""
    if not tasks:
        return 0.0
    wins = 0
    for task in tasks:
        payload = task.payload
        if payload.get("outputs"):
            continue
        changes = payload.get("changes_db")
        if changes is None:  # built-in tasks, and rows prepared before the flag existed
            base = domains.load_base(payload)
            changes = reward.changes_database(
                base, domains.toolset_class(payload), payload.get("actions", [])
            )
        if not changes:
            wins += 1
    return wins / len(tasks)
