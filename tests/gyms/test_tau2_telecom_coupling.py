"""Step-by-step coupling of the carrier database and the phone, against tau2's own runs.

`tests/golden/tau2_telecom_sequences.json.gz` holds 232 random sequences of 14 tool calls each
(user and agent requestors, valid and invalid arguments, unknown tools) on telecom tasks, as
tau2-bench v1.0.1's environment answered them: after every call, a digest of the tool-message
text, the error flag and both database hashes after the sync. Replaying them with our
environment must give the same digest at every step, so every result text, error message and
sync effect (line status, roaming, data cap, payment requests and bills) matches tau2's.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


@pytest.fixture(scope="module")
def telecom(telecom):
    """The domain, and its tasks by id."""
    domain, tasks = telecom
    return domain, {t["id"]: t for t in tasks}


def test_random_sequences_match_tau2_step_by_step(telecom):
    domain, tasks = telecom
    doc = json.loads(gzip.decompress((GOLDEN / "tau2_telecom_sequences.json.gz").read_bytes()))
    failures = []
    for episode in doc["episodes"]:
        env = domain.new_environment()
        env.apply_initial_state(tasks[episode["task"]]["initial_state"])
        for step, ((requestor, name, args), expected) in enumerate(
            zip(episode["calls"], episode["steps"])
        ):
            content, error = env.tool_call(requestor, name, args)
            if _digest(content, error, env.db_hash(), env.user_db_hash()) != expected:
                failures.append(
                    f"{episode['task']} step {step}: {requestor} {name}({args}) -> {content!r}"
                )
                break
    assert not failures, f"{len(failures)} episodes differ from tau2:\n" + "\n".join(failures[:15])


def test_bad_user_calls_are_messages_not_crashes(telecom):
    domain, tasks = telecom
    env = domain.new_environment()
    env.apply_initial_state(next(iter(tasks.values()))["initial_state"])
    before = env.user_db_hash()
    content, error = env.tool_call("user", "toggle_data", {"on": True})
    assert error and content == (
        "Error: TelecomUserTools.toggle_data() got an unexpected keyword argument 'on'"
    )
    content, error = env.tool_call("user", "grant_app_permission", {"app_name": "messaging"})
    assert error and "missing 1 required positional argument: 'permission'" in content
    content, error = env.tool_call("user", "enable_roaming", {})
    assert (content, error) == ("Error: Tool 'enable_roaming' not found.", True)
    content, error = env.tool_call("user", "set_network_mode_preference", {"mode": "5g"})
    assert not error and content.startswith(
        "Failed to set network mode: '5g' is not a valid option."
    )
    assert env.user_db_hash() == before


def test_solo_mode_gives_the_agent_the_phone(telecom):
    domain, tasks = telecom
    env = domain.new_environment(solo=True)
    names = [s["function"]["name"] for s in env.agent_schemas()]
    assert "toggle_airplane_mode" in names and "refuel_data" in names
    assert env.user_schemas() == []
    assert "<main_policy>" in env.policy and env.policy != domain.policy
    env.apply_initial_state(next(iter(tasks.values()))["initial_state"])
    content, error = env.tool_call("assistant", "toggle_roaming", {})
    assert not error and content.startswith("Data Roaming is now ON.")
    assert env.tool_call("user", "toggle_roaming", {}) == (
        "Error: User tool calls are not allowed in solo mode",
        True,
    )


def test_a_broken_vpn_stays_broken_after_reconnecting(telecom):
    """tau2 keeps one VPN profile that `break_vpn` degrades; reconnecting reuses it."""
    domain, tasks = telecom
    env = domain.new_environment()
    env.apply_initial_state(tasks["[mobile_data_issue]bad_vpn[PERSONA:None]"]["initial_state"])
    for name in ("disconnect_vpn", "connect_vpn"):
        assert not env.tool_call("user", name, {})[1]
    assert env.tool_call("user", "check_vpn_status", {})[0] == (
        "VPN is ON and connected. Details: {'server_address': '192.168.1.1', 'protocol': "
        "'OpenVPN', 'server_performance': <PerformanceLevel.POOR: 'poor'>}"
    )
    assert env.tool_call("user", "run_speed_test", {})[0] == (
        "Speed Test Result: 22.00 Mbps (Fair). Connection is okay for web browsing and some "
        "standard definition streaming."
    )
    fresh = domain.new_environment()  # a new environment starts with a good profile
    fresh.tool_call("user", "connect_vpn", {})
    assert "EXCELLENT" in fresh.tool_call("user", "check_vpn_status", {})[0]
