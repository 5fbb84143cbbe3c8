"""The telecom domains (manual and workflow policy) built from a data folder, and bad input."""

from __future__ import annotations

import json
import shutil

import pytest

from gyms.tau2.domain import InitialStateError, load_domain
from tests.conftest import shared_dir


@pytest.fixture(scope="module")
def data_dir():
    shared = shared_dir() / "data" / "tau2"
    if not (shared / "tau2" / "domains" / "telecom" / "db.toml").is_file():
        pytest.skip(f"tau2 telecom data not found under {shared}")
    return shared


def test_policies_of_both_variants(data_dir):
    folder = data_dir / "tau2" / "domains" / "telecom"
    manual = load_domain("telecom", data_dir)
    workflow = load_domain("telecom-workflow", data_dir)
    assert manual.name == "telecom" and workflow.name == "telecom-workflow"
    assert workflow.domain_dir == manual.domain_dir == folder
    main = (folder / "main_policy.md").read_text()
    assert manual.policy == (
        f"<main_policy>\n{main}\n</main_policy>\n<tech_support_policy>\n"
        f"{(folder / 'tech_support_manual.md').read_text()}\n</tech_support_policy>"
    )
    assert (folder / "tech_support_workflow.md").read_text() in workflow.policy
    solo = workflow.new_environment(solo=True)
    assert (folder / "tech_support_workflow_solo.md").read_text() in solo.policy
    assert (folder / "main_policy_solo.md").read_text() in solo.policy
    # both variants offer the same tools on both sides
    env_a, env_b = manual.new_environment(), workflow.new_environment()
    assert env_a.agent_schemas() == env_b.agent_schemas()
    assert env_a.user_schemas() == env_b.user_schemas()


def test_environments_are_independent(data_dir):
    domain = load_domain("telecom", data_dir)
    a, b = domain.new_environment(), domain.new_environment()
    a.run_env_function("user", "set_user_info", {"name": "A", "phone_number": "555-123-2002"})
    a.tool_call("user", "toggle_airplane_mode", {})
    assert a.user_db_hash() != b.user_db_hash()
    assert b.user.db.device.airplane_mode is False


def test_missing_file_is_named(tmp_path, data_dir):
    copy = tmp_path / "tau2" / "domains" / "telecom"
    shutil.copytree(data_dir / "tau2" / "domains" / "telecom", copy)
    (copy / "user_db.toml").unlink()
    with pytest.raises(FileNotFoundError, match="lacks user_db.toml"):
        load_domain("telecom", tmp_path)


def test_failing_initialization_action_is_reported(data_dir):
    domain = load_domain("telecom", data_dir)
    env = domain.new_environment()
    state = {
        "initialization_actions": [
            {
                "env_type": "user",
                "func_name": "set_user_info",
                "arguments": {"name": "X", "phone_number": "555-123-2002"},
            },
            {
                "env_type": "assistant",
                "func_name": "set_data_usage",
                "arguments": {"customer_id": "C1001", "line_id": "L9999", "data_used_gb": 1},
            },
        ]
    }
    with pytest.raises(InitialStateError, match=r"action 1 \(assistant.set_data_usage\).*L9999"):
        env.apply_initial_state(state)


def test_unknown_phone_number_makes_sync_an_error_message(data_dir):
    domain = load_domain("telecom", data_dir)
    env = domain.new_environment()
    env.user.set_user_info("Nobody", "000-000-0000")
    content, error = env.tool_call("user", "check_status_bar", {})
    assert error and content == "Error: Line with phone number 000-000-0000 not found"


def test_every_task_initializes(data_dir):
    domain = load_domain("telecom", data_dir)
    tasks = json.loads((data_dir / "tau2" / "domains" / "telecom" / "tasks.json").read_text())
    for task in tasks[::50]:
        env = domain.new_environment()
        env.apply_initial_state(task["initial_state"])
        assert env.user.db.surroundings.phone_number
