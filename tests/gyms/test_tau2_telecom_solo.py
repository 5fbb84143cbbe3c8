"""Telecom solo mode: the agent alone, with the ticket and the phone's tools."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gyms.tau2.domain import load_domain
from gyms.tau2.telecom.solo import DONE_TOOL, NO_TEXT, SoloEpisode, can_run_solo
from tests.conftest import shared_dir

REFERENCE = Path(__file__).resolve().parents[1] / "golden" / "tau2_telecom_reference.json.gz"


@pytest.fixture(scope="module")
def telecom():
    shared = shared_dir() / "data" / "tau2"
    tasks_file = shared / "tau2" / "domains" / "telecom" / "tasks.json"
    if not tasks_file.is_file():
        pytest.skip(f"tau2 telecom data not found under {shared}")
    return load_domain("telecom", shared), json.loads(tasks_file.read_text())


def test_gold_actions_alone_solve_every_task(telecom):
    """The agent doing the customer's gold actions itself ends where tau2's synced replay does."""
    domain, tasks = telecom
    expected = json.loads(gzip.decompress(REFERENCE.read_bytes()))["tasks"]
    failures = []
    for task in tasks:
        assert can_run_solo(task)
        episode = SoloEpisode(domain, task)
        for action in task["evaluation_criteria"]["actions"]:
            step = episode.step(None, [{"name": action["name"], "arguments": action["arguments"]}])
            assert not any(error for _text, error in step.results), (task["id"], step.results)
        assert episode.step(None, [{"name": DONE_TOOL, "arguments": {}}]).done
        env = episode.env
        met = [
            env.run_assertion(a["env_type"], a["func_name"], a.get("arguments"), a["assert_value"])
            for a in task["evaluation_criteria"]["env_assertions"]
        ]
        hashes = [env.db_hash()[:12], env.user_db_hash()[:12]]
        if not all(met) or hashes != expected[task["id"]][4:6]:
            failures.append(task["id"])
    assert not failures, f"{len(failures)} tasks: {failures[:5]}"


def test_solo_rules(telecom):
    domain, tasks = telecom
    episode = SoloEpisode(domain, tasks[0])
    names = [t["function"]["name"] for t in episode.tools()]
    assert names[-1] == DONE_TOOL and "toggle_roaming" in names and "enable_roaming" in names
    assert tasks[0]["ticket"] in episode.system_prompt
    assert "main_policy_solo" not in episode.system_prompt  # the text, not the file name
    assert episode.step("I will help", []).feedback == NO_TEXT
    assert episode.step(None, []).feedback.startswith("You sent an empty message")
    assert episode.env.tool_call("user", "toggle_data", {})[1]  # no user side in solo
