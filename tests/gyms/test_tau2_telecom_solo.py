"""Telecom solo mode at the environment level: the agent alone holds both tool sets.

The conversation rules of solo mode (ticket in the system prompt, tool calls only, the `done`
tool) belong to the gym's env; here the environment underneath is checked against tau2.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from gyms.tau2.domain import AGENT, USER

REFERENCE = Path(__file__).resolve().parents[1] / "golden" / "tau2_telecom_reference.json.gz"


def test_gold_actions_by_the_agent_alone_end_as_tau2(telecom):
    """Every gold action called by the agent in a solo environment ends in tau2's synced end
    state (both DB hashes) with every env assertion met, for every task (all have a ticket)."""
    domain, tasks = telecom
    expected = json.loads(gzip.decompress(REFERENCE.read_bytes()))["tasks"]
    failures = []
    for task in tasks:
        assert task.get("ticket") and task["evaluation_criteria"]["actions"]
        env = domain.new_environment(solo=True)
        env.apply_initial_state(task["initial_state"])
        for action in task["evaluation_criteria"]["actions"]:
            _text, error = env.tool_call(AGENT, action["name"], action["arguments"])
            assert not error, (task["id"], action)
        met = [
            env.run_assertion(a["env_type"], a["func_name"], a.get("arguments"), a["assert_value"])
            for a in task["evaluation_criteria"]["env_assertions"]
        ]
        if (
            not all(met)
            or [env.db_hash()[:12], env.user_db_hash()[:12]] != expected[task["id"]][4:6]
        ):
            failures.append(task["id"])
    assert not failures, f"{len(failures)} tasks: {failures[:5]}"


def test_solo_environment(telecom):
    domain, tasks = telecom
    env = domain.new_environment(solo=True)
    names = [t["function"]["name"] for t in env.agent_schemas()]
    assert "toggle_roaming" in names and "enable_roaming" in names
    assert env.user_schemas() == []
    assert env.policy != domain.policy and "<tech_support_policy>" in env.policy
    assert env.tool_call(USER, "toggle_data", {}) == (
        "Error: User tool calls are not allowed in solo mode",
        True,
    )
