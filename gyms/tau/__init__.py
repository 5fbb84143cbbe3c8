"""Customer service (tau-bench retail/airline): follow the policy, use database tools, satisfy the customer.

The tau gym: tau-bench's retail and airline domains, with database tools. The agent follows the
domain policy (system prompt), talks to a customer (scripted or LLM) and changes an in-memory
database through typed tools. Reward 1 iff the final database equals the gold replay's and every
required output was said (docs/algorithms.md §9). See README.md.
"""

from __future__ import annotations

import json
import random

from gyms.common.spec import package_gym
from gyms.tau.data import build_tasks
from gyms.tau.env import TauEnv
from gyms.tau.expert import do_nothing_score, expert
from gyms.tau.seat import SEAT

_TOOL_NAMES = (
    "get_order_details",
    "cancel_pending_order",
    "find_user_id_by_email",
    "return_delivered_order_items",
    "book_reservation",
    "update_reservation_flights",
    "calculate",
    "think",
    "no_such_tool",
)
_WORDS = (
    "order",
    "refund",
    "please",
    "ok",
    "###",
    "STOP",
    "null",
    "{",
    "}",
    "\u00e9\u00e8",
    "yes",
    "cancel",
)


def _random_arguments(rng: random.Random) -> object:
    pick = rng.random()
    if pick < 0.2:
        return {}
    if pick < 0.35:
        return [1, 2, 3]
    if pick < 0.5:
        return "not an object"
    keys = ("order_id", "reason", "item_ids", "user_id", "expression", "flights", "amount", "bogus")
    values = (
        "#W0000000",
        "ordered by mistake",
        ["1", "1"],
        None,
        3.5,
        -1,
        "1/0",
        [{"flight_number": 5}],
        {"x": []},
        "",
    )
    return {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(1, 4))}


def random_action(rng: random.Random) -> str:
    """A random assistant output: garbled text, broken markup, or tool calls with bad arguments."""
    pick = rng.random()
    if pick < 0.3:
        return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(0, 12)))
    if pick < 0.45:
        return (
            "<tool_call>\n{"
            + rng.choice(['"name": "calculate"', '"name":', "]]", ""])
            + "\n</tool_call>"
        )
    call = {"name": rng.choice(_TOOL_NAMES), "arguments": _random_arguments(rng)}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


GYM = package_gym(
    __name__,
    __doc__,
    TauEnv,
    build_tasks,
    expert,
    random_action,
    reward_components={"db_match": 1.0, "outputs": 1.0},
    trivial_baseline=do_nothing_score,
    budgets={"max_turns": 30, "max_total_tokens": 16384, "max_new_tokens_per_turn": 512},
)
GYM.user_seat = SEAT
