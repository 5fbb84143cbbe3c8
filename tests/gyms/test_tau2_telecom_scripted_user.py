"""The scripted telecom customer: performs what an agent asks in plain words, by persona.

The main test plays every telecom task with a by-the-book agent: it runs its own gold actions
itself and asks for each gold user action in a plain sentence ("Please turn off airplane
mode."). The scripted user must do exactly the gold user actions (no extra changes), and
every env assertion of the task must then hold, as tau2 would check it.
"""

from __future__ import annotations

import pytest

from gyms.tau2.domain import AGENT, USER
from gyms.tau2.telecom.scripted_user import (
    STOP,
    TRANSFER,
    TelecomScriptedUser,
    persona_of,
    requested_tools,
    wanted_side,
)

SWITCH_WORDS = {
    "toggle_airplane_mode": ("airplane_mode", "airplane mode"),
    "toggle_data": ("data_enabled", "your mobile data"),
    "toggle_roaming": ("roaming_enabled", "data roaming in your settings"),
    "toggle_data_saver_mode": ("data_saver_mode", "data saver"),
    "toggle_wifi_calling": ("wifi_calling_enabled", "Wi-Fi calling"),
}
PLAIN = {
    "reseat_sim_card": "Please remove and reinsert your SIM card.",
    "reset_apn_settings": "Please reset your APN settings to the default.",
    "reboot_device": "Now please restart your phone.",
    "disconnect_vpn": "Please disconnect your VPN.",
    "make_payment": "Please pay the bill with the payment request I just sent.",
}
MODE_WORDS = {"4g_5g_preferred": "4G/5G preferred", "4g_only": "4G only"}


def ask_for(action: dict, env) -> str:
    """What a careful agent says to get one gold user action done."""
    name, args = action["name"], action.get("arguments") or {}
    if name in SWITCH_WORDS:
        field, words = SWITCH_WORDS[name]
        side = "off" if getattr(env.user.db.device, field) else "on"
        return f"Thanks. Please turn {side} {words}."
    if name == "set_network_mode_preference":
        return f"Please change your network mode preference to {MODE_WORDS[args['mode']]}."
    if name == "grant_app_permission":
        return f"Please grant the {args['app_name']} app the {args['permission']} permission."
    return PLAIN[name]


def by_tool_name(action: dict, env) -> str:
    """How the gym's expert agent asks: by the tool's name."""
    return f"Please do this on your phone: {action['name']}."


def play(domain, task: dict, persona: str | None = None, ask=ask_for):
    env = domain.new_environment()
    env.apply_initial_state(task["initial_state"])
    user = TelecomScriptedUser(env, task, persona)
    user_calls = []
    for action in task["evaluation_criteria"]["actions"]:
        if action["requestor"] == AGENT:
            env.tool_call(AGENT, action["name"], action.get("arguments") or {})
            continue
        request = ask(action, env)
        for _attempt in range(2):  # a hesitant user may need asking twice
            turn = user.respond(request)
            user_calls += turn.calls
            if turn.calls:
                break
    closing = user.respond("Your issue should now be resolved. Is there anything else?")
    return env, user_calls, closing


@pytest.mark.parametrize("ask", [ask_for, by_tool_name], ids=["plain_words", "tool_names"])
def test_every_task_solved_by_requests(telecom, ask):
    domain, tasks = telecom
    failures = []
    for task in tasks:
        env, calls, closing = play(domain, task, ask=ask)
        gold = [
            (a["name"], a.get("arguments") or {})
            for a in task["evaluation_criteria"]["actions"]
            if a["requestor"] == USER
        ]
        done = [(c["name"], c["arguments"]) for c in calls if env.is_mutating(c["name"])]
        met = [
            env.run_assertion(a["env_type"], a["func_name"], a.get("arguments"), a["assert_value"])
            for a in task["evaluation_criteria"].get("env_assertions") or []
        ]
        if done != gold or not all(met) or STOP not in closing.text:
            failures.append(f"{task['id']}: did {done}, gold {gold}, assertions {met}")
    assert not failures, f"{len(failures)} of {len(tasks)} tasks:\n" + "\n".join(failures[:10])


def test_personas(telecom):
    domain, tasks = telecom
    hard = next(t for t in tasks if "[PERSONA:Hard]" in t["id"])
    easy = next(t for t in tasks if "[PERSONA:Easy]" in t["id"])
    env = domain.new_environment()
    known = " ".join(hard["user_scenario"]["instructions"]["known_info"].split())
    assert known not in TelecomScriptedUser(env, hard).opening()
    assert known in TelecomScriptedUser(env, easy).opening()
    assert persona_of(easy, "non_cooperative") == "Hard" and persona_of(easy) == "Easy"
    user = TelecomScriptedUser(env, hard)
    assert user.respond("May I have your phone number?").text == known
    turn = user.respond("Please restart your phone.")
    assert turn.calls == [] and "photos" in turn.text  # hesitates once
    assert [c["name"] for c in user.respond("It is safe. Please restart your phone.").calls] == [
        "reboot_device"
    ]
    two = user.respond("Please turn on airplane mode. Then run a speed test.")
    assert len(two.calls) == 1  # one thing per message
    calm = TelecomScriptedUser(domain.new_environment(), easy)
    both = calm.respond("Please turn on airplane mode. Then run a speed test.")
    assert [c["name"] for c in both.calls] == ["toggle_airplane_mode", "run_speed_test"]


def test_grounded_answers_and_endings(telecom):
    domain, tasks = telecom
    task = tasks[0]
    env = domain.new_environment()
    env.apply_initial_state(task["initial_state"])
    user = TelecomScriptedUser(env, task)
    turn = user.respond("What does your status bar show?")
    assert turn.text.startswith("Status Bar: ") and turn.calls[0]["name"] == "check_status_bar"
    assert user.respond("Please turn off airplane mode.").text.startswith(
        "My airplane mode is already off"
    )
    assert STOP not in user.respond("Everything is resolved now.").text  # gold actions remain
    assert user.respond("I am transferring you to a human agent.").text == TRANSFER


def test_request_parsing():
    assert requested_tools("please turn on data roaming") == ["toggle_roaming"]
    assert requested_tools("turn off wi-fi calling") == ["toggle_wifi_calling"]
    assert requested_tools("remove and reinsert your sim card") == ["reseat_sim_card"]
    assert wanted_side("please turn airplane mode off") is False
    assert wanted_side("enable mobile data") is True
    assert wanted_side("toggle_data") is None


def test_every_task_solved_by_a_hard_user_when_the_agent_keeps_going(telecom):
    """A Hard (non-cooperative) user lags behind: one request per message, a worried question
    before the restart. An agent that asks once per action and then says it is done until the
    user stops still gets every gold user action done, in order."""
    domain, tasks = telecom
    failures = []
    for task in tasks[::7]:
        env = domain.new_environment()
        env.apply_initial_state(task["initial_state"])
        user = TelecomScriptedUser(env, task, "non_cooperative")
        calls = []
        for action in task["evaluation_criteria"]["actions"]:
            if action["requestor"] == AGENT:
                env.tool_call(AGENT, action["name"], action.get("arguments") or {})
            else:
                calls += user.respond(by_tool_name(action, env)).calls
        for _ in range(12):
            turn = user.respond("Your request has been completed successfully.")
            calls += turn.calls
            if STOP in turn.text:
                break
        gold = [a["name"] for a in task["evaluation_criteria"]["actions"] if a["requestor"] == USER]
        met = [
            env.run_assertion(a["env_type"], a["func_name"], a.get("arguments"), a["assert_value"])
            for a in task["evaluation_criteria"]["env_assertions"]
        ]
        if [c["name"] for c in calls] != gold or not all(met) or STOP not in turn.text:
            failures.append(task["id"])
    assert not failures, f"{len(failures)} tasks: {failures[:5]}"
