"""`profile: leaderboard`: what the agent and user models are first sent, as tau2-bench sends it.

With a `Tau2Source` (a checkout's texts) and a domain environment (`Tau2Environment`):
- `agent_opening(source, env)`: the agent's system message (tau2's template and instruction
  around the domain policy), the greeting as tau2 writes an assistant message
  (`"tool_calls": null` included) and the tool schemas with tau2's descriptions;
- `user_opening(source, env, task)`: the user simulator's system message (tau2's guidelines,
  the tools variant when the user has tools, and the task's scenario as tau2 prints it), the
  greeting as the user model sees it (a user message) and the user's tool schemas, or None.

Both return `{"messages": [...], "tools": [...] | None}`, the request body's two fields; the
env sends exactly these. `request_fields(seed, tools)` are the fields tau2 adds to every request
of a trial: its `seed` (`trial_seed(base, trial)`: tau2 draws one per trial from the run's seed)
and `tool_choice: "auto"` when tools are offered. `refuse_without_checkout()` is the one-line
refusal when the data folder given is not a checkout. Not here: the conversation loop (env.py), the judge.
"""

from __future__ import annotations

import copy
import random
from functools import lru_cache

from gyms.tau2.leaderboard.source import Tau2Source
from gyms.tau2.users import scenario_text
from mua.errors import UsageError

NAME = "leaderboard"
PROFILES = ("mua", NAME)


def refuse_without_checkout(given) -> UsageError:
    return UsageError(
        f"tau2: profile leaderboard reads tau2's prompts and tool schemas from a tau2-bench "
        f"checkout, and {given} is not one; set gym.options.data_dir (and mua prep --source) to "
        "a clone of https://github.com/sierra-research/tau2-bench (the folder holding src/tau2 "
        "and data/tau2)"
    )


def greeting_message(source: Tau2Source) -> dict:
    return {"role": "assistant", "content": source.greeting(), "tool_calls": None}


def _schemas(source: Tau2Source, env, domain: str, side: str) -> list[dict]:
    """A domain side's schemas with tau2's descriptions, built once per source (a copy)."""

    def build() -> list[dict]:
        schemas = env.agent_schemas() if side == "agent" else env.user_schemas()
        return source.tool_schemas(domain, side, schemas)

    return copy.deepcopy(source._once(("schemas", domain, side), build))


def agent_tools(source: Tau2Source, env, domain: str) -> list[dict]:
    return _schemas(source, env, domain, "agent")


def user_tools(source: Tau2Source, env, domain: str, task: dict) -> list[dict] | None:
    """tau2's user tools for `task` (its `user_tools` list filters them), or None."""
    schemas = _schemas(source, env, domain, "user")
    include = task.get("user_tools")
    if include is not None:
        schemas = [s for s in schemas if s["function"]["name"] in include]
    return schemas or None


def agent_opening(source: Tau2Source, env, domain: str) -> dict:
    system = {"role": "system", "content": source.agent_system_prompt(env.policy)}
    return {
        "messages": [system, greeting_message(source)],
        "tools": agent_tools(source, env, domain),
    }


def user_opening(source: Tau2Source, env, domain: str, task: dict) -> dict:
    tools = user_tools(source, env, domain, task)
    scenario = scenario_text(task.get("user_scenario") or {})
    system = {"role": "system", "content": source.user_system_prompt(scenario, tools is not None)}
    greeting = {"role": "user", "content": source.greeting()}
    return {"messages": [system, greeting], "tools": tools}


@lru_cache(maxsize=64)
def _trial_seeds(base: int, trials: int) -> tuple[int, ...]:
    rng = random.Random(base)  # tau2: random.seed(config.seed), then a randint per trial
    return tuple(rng.randint(0, 1000000) for _ in range(trials))


def trial_seed(base: int, trial: int) -> int:
    """The seed tau2 sends with every request of trial `trial` (0-based) of a run seeded `base`."""
    return _trial_seeds(base, trial + 1)[trial]


def request_fields(seed: int, tools) -> dict:
    """What tau2 adds to a request besides messages and tools."""
    return {"tool_choice": "auto", "seed": seed} if tools else {"seed": seed}
