"""tau2-bench customer service (retail, airline, telecom): policy, tools, a user with tools of its own; tau2's reward.

The tau2 gym: tau2-bench's domains, scored as tau2 v1.0.1 scores. The agent follows the domain
policy, talks to a simulated customer (LLM or scripted) and uses the domain's tools; in telecom
the customer has a phone with tools and state of its own. See README.md for data, options,
reward and what is comparable with tau2's leaderboard.
"""

from __future__ import annotations

import json
import random

from gyms.common.spec import package_gym
from gyms.tau2.env import Tau2Env
from gyms.tau2.expert import expert
from gyms.tau2.options import check_options
from gyms.tau2.seat import SEAT
from gyms.tau2.tasks import build_tasks

_NAMES = (
    "get_user_details",
    "cancel_reservation",
    "modify_pending_order_items",
    "calculate",
    "book_reservation",
    "toggle_airplane_mode",
    "done",
    "no_such_tool",
)
_VALUES = ("#W0000000", "", None, -1, 3.5, [1, "x"], {"flight_number": 5}, "1/0", "###STOP###")


def random_action(rng: random.Random) -> str:
    """A random assistant output: text (stop tokens included), broken markup, bad calls."""
    pick = rng.random()
    if pick < 0.3:
        return " ".join(rng.choice(("hi", "###STOP###", "{", "ok", "done?")) for _ in range(5))
    if pick < 0.45:
        return '<tool_call>\n{"name": \n</tool_call>'
    keys = ("user_id", "order_id", "item_ids", "expression", "flights", "bogus")
    args = {rng.choice(keys): rng.choice(_VALUES) for _ in range(rng.randint(0, 3))}
    call = {"name": rng.choice(_NAMES), "arguments": args if rng.random() < 0.8 else [1]}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def eval_notes(out_dir) -> list[str]:
    """Whether the run is comparable with tau2's leaderboard, and the checkout it read."""
    from gyms.tau2.leaderboard.comparable import report_lines

    return report_lines(out_dir)


def endpoints(options: dict) -> list[tuple[str, object]]:
    """The judge endpoint of `gym.options.judge` when it names one (checked before a run)."""
    judge = check_options(options).judge
    if not isinstance(judge, dict):
        return []
    from mua.config.users import LLMUserConfig

    return [("judge (gym.options.judge)", LLMUserConfig(**{"kind": "llm", **judge}))]


GYM = package_gym(
    __name__,
    __doc__,
    Tau2Env,
    build_tasks,
    expert,
    random_action,
    reward_components={
        "db": 1.0,
        "env_assertion": 1.0,
        "action": 1.0,
        "communicate": 1.0,
        "nl_assertion": 1.0,
    },
    needs_data=True,
    endpoints=endpoints,
    eval_notes=eval_notes,
    budgets={"max_turns": 60, "max_total_tokens": 32768, "max_new_tokens_per_turn": 1024},
)
GYM.user_seat = SEAT
