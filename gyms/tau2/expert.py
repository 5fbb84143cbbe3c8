"""The gold agent: plays a task's gold actions, one per turn, then says it is done.

An assistant-side action becomes a tool call; a user-side action (telecom) becomes a request
naming the action, which the scripted user performs on its device. After the last action the
expert says the task is complete and repeats every `communicate_info` string, so it can
satisfy DB, ENV_ASSERTION, ACTION and COMMUNICATE (NL assertions need the judge). In solo
mode it calls the user-side actions itself and ends with the `done` tool. It reads its
progress from the conversation (assistant turns after the greeting), holding no state.
"""

from __future__ import annotations

import copy

from gyms.tau2.domain import USER
from mua.gym.api import GymContext, Task

DONE_TEXT = "Your request has been completed successfully."


def _call(name: str, arguments: dict) -> dict:
    call = {"type": "function", "function": {"name": name, "arguments": copy.deepcopy(arguments)}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def expert_message(messages: list[dict], task: Task, solo: bool = False) -> dict:
    tau2_task = task.payload["task"]
    actions = (tau2_task.get("evaluation_criteria") or {}).get("actions") or []
    infos = (tau2_task.get("evaluation_criteria") or {}).get("communicate_info") or []
    turns = sum(1 for m in messages if m.get("role") == "assistant") - (0 if solo else 1)
    if turns < len(actions):
        action = actions[max(turns, 0)]
        if action.get("requestor") == USER and not solo:
            return {
                "role": "assistant",
                "content": f"Please do this on your phone: {action['name']}.",
            }
        return _call(action["name"], action.get("arguments") or {})
    if solo:
        return _call("done", {})
    text = DONE_TEXT + (" " + " ".join(infos) if infos else "")
    return {"role": "assistant", "content": text}


def expert(ctx: GymContext):
    solo = bool((ctx.options or {}).get("solo"))

    async def policy(messages: list[dict], task: Task) -> dict:
        return expert_message(messages, task, solo=solo)

    return policy
