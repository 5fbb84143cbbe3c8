"""Contract checks shared by the gym tests: mean reward of a policy, and adversarial actions.

`mean_reward` runs a policy over tasks (fresh env per task). `adversarial_actions(rng)` yields
malformed or hostile `AgentAction`s (unknown tools, wrong argument types, bad JSON, huge or
empty content, unknown choices, calls after the end) that an env must answer without raising.
"""

from __future__ import annotations

import random

from gyms.common.actions import TOOL_NAME
from gyms.common.episode import run_episode
from mua.gym import AgentAction, GymContext, ToolCall

_WEIRD_TEXT = [
    "",
    " ",
    "\x00",
    "[answer]",
    "[finish] now",
    "[search]",
    "[bogus] x",
    "{" * 50,
    "🙂" * 30,
    "a" * 5000,
    "<tool_call>{not json</tool_call>",
    "1 2 3 4",
    "[action] 1e309 2 3 4",
    "[answer] nan",
    "[answer] inf",
]
_WEIRD_ARGS = [
    None,
    5,
    "not an object",
    [],
    {"choice": "dance", "content": "x"},
    {"choice": None},
    {"content": "x"},
    {"choice": "answer", "content": {"nested": 1}},
    {"choice": "answer", "content": ["x"]},
    {"choice": "action", "content": 12},
    {"choice": "finish"},
    {"choice": "answer", "content": "", "extra": 1},
    {"choice": "search", "content": "x" * 3000},
    {"choice": "ANSWER", "content": "1"},
    '{"choice": "action"',
]


def adversarial_action(rng: random.Random) -> AgentAction:
    kind = rng.randrange(5)
    if kind == 0:
        text = rng.choice(_WEIRD_TEXT)
        return AgentAction(text=text, raw=text)
    if kind == 1:
        return AgentAction(
            text="",
            tool_calls=[
                ToolCall(name=rng.choice(["", "search", "x" * 200, "interact"]), arguments={})
            ],
        )
    if kind == 2:
        args = rng.choice(_WEIRD_ARGS)
        return AgentAction(text="", tool_calls=[ToolCall(name=TOOL_NAME, arguments=args)])
    if kind == 3:
        return AgentAction(text="", parse_errors=["unterminated <tool_call>"])
    calls = [
        ToolCall(
            name=TOOL_NAME,
            arguments={
                "choice": rng.choice(["action", "search", "answer", "finish"]),
                "content": rng.choice(_WEIRD_TEXT),
            },
        )
        for _ in range(rng.randint(2, 4))
    ]
    return AgentAction(text="", tool_calls=calls)


async def fuzz_env(make_env, ctx: GymContext, tasks: list, num_actions: int, seed: int = 0) -> int:
    """Send `num_actions` adversarial actions across fresh episodes; return how many episodes ran."""
    rng = random.Random(seed)
    episodes, sent = 0, 0
    while sent < num_actions:
        env = make_env(ctx)
        await env.reset(tasks[episodes % len(tasks)])
        episodes += 1
        for _ in range(rng.randint(3, 25)):
            result = await env.step(adversarial_action(rng))
            sent += 1
            assert isinstance(result.reward, float) and all(
                m.get("content") is not None for m in result.messages
            )
            if sent >= num_actions:
                break
        await env.close()
    return episodes


async def mean_reward(
    make_env, ctx: GymContext, tasks: list, policy_factory, max_turns: int = 30
) -> float:
    """Average total reward of `policy_factory(i)`'s episodes over `tasks`."""
    total = 0.0
    for i, task in enumerate(tasks):
        result = await run_episode(make_env(ctx), task, policy_factory(i), max_turns=max_turns)
        total += result.total_reward
    return total / max(1, len(tasks))


def llm_context(base_url: str, max_retries: int = 2, **options) -> GymContext:
    """A `GymContext` whose LLM user is a real `LLMClient` pointed at `base_url` (e.g. a fake server)."""
    from mua.config.users import LLMUserConfig
    from mua.llm.llm_client import LLMClient

    cfg = LLMUserConfig(
        base_url=base_url, model="fake-model", max_retries=max_retries, backoff_s=0.01, timeout_s=10
    )
    return GymContext(user_kind="llm", llm=LLMClient(cfg), options=options)


def system_text(request: dict) -> str:
    """The system message of a chat request the fake server received."""
    return next(
        (m.get("content") or "" for m in request.get("messages", []) if m.get("role") == "system"),
        "",
    )


def last_user_text(request: dict) -> str:
    return next(
        (
            m.get("content") or ""
            for m in reversed(request.get("messages", []))
            if m.get("role") == "user"
        ),
        "",
    )
