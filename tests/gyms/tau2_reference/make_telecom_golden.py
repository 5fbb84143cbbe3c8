"""Regenerate the telecom golden files with tau2-bench's own code (the tests never run this).

Usage (tau2-bench v1.0.1's `src/` on the path, its data folder in TAU2_DATA_DIR; tau2's
heavy package `__init__` is bypassed, so pydantic, toml, loguru, addict, deepdiff and
docstring-parser are enough):

    TAU2_DATA_DIR=<data> python make_telecom_golden.py <tau2-bench>/src tests/golden

Writes, next to each other:
  - `tau2_telecom_reference.json.gz`: for every task of tasks.json, both DB hashes after the
    initial state, after tau2's evaluator gold replay (`make_tool_call`, no sync) and after a
    live replay (`get_response` per gold action, synced), a digest of the live replay's
    tool-message texts, and each env assertion's result on the live-replayed environment;
  - `tau2_telecom_sequences.json.gz`: 240 random tool-call sequences (both requestors, valid
    and invalid arguments, unknown tools) with a digest per step of the tool message, its
    error flag and both DB hashes; episodes that differ between two runs (a refuel opening
    a bill with a random ID) are dropped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys
import types
from pathlib import Path

USER_NOARG = [
    "check_status_bar", "check_network_status", "check_network_mode_preference",
    "run_speed_test", "toggle_airplane_mode", "check_sim_status", "reseat_sim_card",
    "toggle_data", "toggle_roaming", "check_data_restriction_status", "toggle_data_saver_mode",
    "check_apn_settings", "reset_apn_settings", "check_wifi_status", "toggle_wifi",
    "check_wifi_calling_status", "toggle_wifi_calling", "check_vpn_status", "connect_vpn",
    "disconnect_vpn", "check_installed_apps", "can_send_mms", "reboot_device",
    "check_payment_request", "make_payment",
]  # fmt: skip
BAD_USER_CALLS = [
    ("toggle_data", {"on": True}),
    ("grant_app_permission", {"app_name": "messaging"}),
    ("make_payment", {"bill_id": "B1"}),
    ("enable_roaming", {}),
    ("no_such_tool", {}),
    ("set_network_mode_preference", {}),
    ("check_app_status", {"name": "messaging"}),
]


def import_tau2(src: str):
    """tau2's telecom modules without running tau2's package `__init__` (it imports the world)."""
    package = types.ModuleType("tau2")
    package.__path__ = [str(Path(src) / "tau2")]
    sys.modules["tau2"] = package
    from loguru import logger

    logger.remove()
    from tau2.data_model.message import ToolCall
    from tau2.domains.telecom import user_data_model as phone
    from tau2.domains.telecom import user_tools
    from tau2.domains.telecom.environment import get_environment, get_tasks

    return get_environment, get_tasks, ToolCall, phone, user_tools


def short(text: str) -> str:
    return text[:12]


def digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def reference(get_environment, get_tasks, ToolCall) -> dict:
    tasks = {}
    for task in get_tasks(None):
        init = task.initial_state.initialization_actions
        actions = task.evaluation_criteria.actions or []
        gold = get_environment()
        gold.set_state(None, init, [])
        row = [short(gold.get_db_hash()), short(gold.get_user_db_hash())]
        for action in actions:
            try:
                gold.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
            except Exception:  # noqa: BLE001 - tau2's evaluator ignores failing gold actions
                pass
        row += [short(gold.get_db_hash()), short(gold.get_user_db_hash())]
        live = get_environment()
        live.set_state(None, init, [])
        texts = [
            live.get_response(
                ToolCall(id=str(i), name=a.name, arguments=a.arguments, requestor=a.requestor)
            ).content
            for i, a in enumerate(actions)
        ]
        row += [short(live.get_db_hash()), short(live.get_user_db_hash())]
        row.append(short(hashlib.sha256(json.dumps(texts).encode()).hexdigest()))
        met = [
            live.run_env_assertion(a, raise_assertion_error=False)
            for a in task.evaluation_criteria.env_assertions or []
        ]
        row.append("".join("1" if m else "0" for m in met))
        tasks[task.id] = row
    return {
        "about": "tau2-bench v1.0.1 telecom, computed by tau2's own TelecomEnvironment for every "
        "task of tasks.json (see make_telecom_golden.py).",
        "fields": [
            "init_agent",
            "init_user",
            "gold_agent",
            "gold_user",
            "live_agent",
            "live_user",
            "live_results",
            "assertions",
        ],  # fmt: skip
        "tasks": tasks,
    }


def sequences(get_environment, get_tasks, ToolCall, phone, user_tools, seed: int) -> list:
    rng = random.Random(seed)
    tasks = get_tasks(None)

    def user_call():
        r = rng.random()
        if r < 0.6:
            return rng.choice(USER_NOARG), {}
        if r < 0.7:
            modes = ["4g_5g_preferred", "4g_only", "3g_only", "2g_only", "5g", "LTE"]
            return "set_network_mode_preference", {"mode": rng.choice(modes)}
        if r < 0.8:
            return "grant_app_permission", {
                "app_name": rng.choice(["messaging", "browser", "camera"]),
                "permission": rng.choice(["sms", "storage", "STORAGE", "location", "network"]),
            }
        if r < 0.87:
            name = rng.choice(["check_app_status", "check_app_permissions"])
            return name, {"app_name": rng.choice(["messaging", "browser", "maps"])}
        return rng.choice(BAD_USER_CALLS)

    def agent_call(ids):
        c, line, bills = ids["customer_id"], ids["line_id"], ids["bills"]
        some_bill = rng.choice(bills) if bills else "B0"
        options = [
            ("get_customer_by_phone", {"phone_number": ids["phone"]}),
            ("get_customer_by_phone", {"phone_number": "555-000-0000"}),
            ("get_customer_by_id", {"customer_id": c}),
            ("get_customer_by_name", {"full_name": ids["name"].upper(), "dob": ids["dob"]}),
            ("get_details_by_id", {"id": rng.choice([c, line, "P1001", "D1001", "X1", some_bill])}),
            ("get_bills_for_customer", {"customer_id": c, "limit": rng.choice([1, 3, 12])}),
            ("get_data_usage", {"customer_id": c, "line_id": line}),
            ("enable_roaming", {"customer_id": c, "line_id": line}),
            ("disable_roaming", {"customer_id": c, "line_id": line}),
            ("suspend_line", {"customer_id": c, "line_id": line, "reason": "travel"}),
            ("resume_line", {"customer_id": c, "line_id": rng.choice([line, "L9999"])}),
            ("refuel_data", {"customer_id": c, "line_id": line, "gb_amount": rng.choice([1, 2.0, 0.5, -1])}),
            ("send_payment_request", {"customer_id": c, "bill_id": some_bill}),
            ("transfer_to_human_agents", {"summary": "help"}),
            ("refuel_data", {"customer_id": c, "line_id": line}),
            ("get_customer_by_id", {"customer_id": "C0000"}),
        ]  # fmt: skip
        return rng.choice(options)

    episodes = []
    for index in rng.sample(range(len(tasks)), 240):
        task = tasks[index]
        # tau2 keeps the VPN profile on the class: fresh for each episode, as in a new process
        user_tools.TelecomUserTools.default_vpn_details = phone.VpnDetails(
            server_address="192.168.1.1",
            protocol="OpenVPN",
            server_performance=phone.PerformanceLevel.EXCELLENT,
        )
        env = get_environment(solo_mode=False)
        env.set_state(None, task.initial_state.initialization_actions, [])
        number = env.user_tools.db.surroundings.phone_number
        customer = env.tools.get_customer_by_phone(number)
        ids = {
            "customer_id": customer.customer_id,
            "line_id": env.tools._get_line_by_phone(number).line_id,
            "bills": list(customer.bill_ids),
            "phone": number,
            "name": customer.full_name,
            "dob": customer.date_of_birth,
        }
        calls, steps = [], []
        for step in range(14):
            if rng.random() < 0.6:
                requestor, (name, args) = "user", user_call()
            else:
                requestor, (name, args) = "assistant", agent_call(ids)
            message = env.get_response(
                ToolCall(id=str(step), name=name, arguments=args, requestor=requestor)
            )
            calls.append([requestor, name, args])
            steps.append(
                digest(message.content, message.error, env.get_db_hash(), env.get_user_db_hash())
            )
        episodes.append({"task": task.id, "calls": calls, "steps": steps})
    return episodes


def write(path: Path, doc: dict) -> None:
    data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    path.write_bytes(gzip.compress(data, 9, mtime=0))


def main(src: str, out: str) -> None:
    get_environment, get_tasks, ToolCall, phone, user_tools = import_tau2(src)
    out_dir = Path(out)
    write(
        out_dir / "tau2_telecom_reference.json.gz", reference(get_environment, get_tasks, ToolCall)
    )
    runs = [
        sequences(get_environment, get_tasks, ToolCall, phone, user_tools, seed=20251125)
        for _ in range(2)
    ]
    kept = [a for a, b in zip(*runs) if a == b]
    write(
        out_dir / "tau2_telecom_sequences.json.gz",
        {
            "about": "Random tool-call sequences on telecom tasks as tau2-bench v1.0.1 answered "
            "them, a digest per step (see make_telecom_golden.py).",
            "episodes": kept,
        },
    )
    print(f"reference and {len(kept)} sequences written to {out_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
