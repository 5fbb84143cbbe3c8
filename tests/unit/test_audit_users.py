"""The simulator audit (`mua eval --audit-users`) against a real endpoint on 127.0.0.1 playing a
good, a leaky and a quitting persuadee: it ranks them good > leaky > quitter, writes the worst
examples to the output folder, and `mua view` shows them."""

from __future__ import annotations

import json

import pytest

from tests.fakes.fake_users import users_server

pytestmark = pytest.mark.timeout(300)


def test_the_audit_ranks_the_three_users_and_mua_view_shows_it(tmp_path, mua_cli):
    out = tmp_path / "eval"
    with users_server() as server:
        url = server.base_url
        users = ", ".join(
            f"{{label: {u}, kind: llm, model: {u}, base_url: '{url}'}}"
            for u in ("quitter", "good", "leaky")
        )
        code, stdout, err = mua_cli(
            "eval", "--gym", "persuade", "--model", "expert", "--max-tasks", "2", "-n", "2",
            "--out", str(out), "--no-mlflow", "--audit-users", "gym.options.rules=mua",
            f"eval.users=[{users}]",
        )  # fmt: skip
    assert code == 0, err[-3000:]
    audit = json.loads((out / "user_audit.json").read_text())
    fidelity = {u: s["fidelity"] for u, s in audit["users"].items()}
    # good and the recipe's scripted user break nothing; the leaky one leaks on 2 of its 3 turns
    # (the third comes when the agent has raised every point); the quitter quits on every turn
    assert fidelity["good"] == 1.0 and fidelity["train"] == 1.0
    assert fidelity["leaky"] == pytest.approx(1 / 3)
    assert fidelity["quitter"] == 0.0
    assert audit["ranking"][-2:] == ["leaky", "quitter"]
    assert {ex["rules"][0] for ex in audit["worst"]["leaky"]} == {"leak"}
    assert "Goodbye." in audit["worst"]["quitter"][0]["user"]
    assert "good" not in audit["worst"]
    assert "simulator audit" in stdout and "user_audit.json" in stdout
    code, _, err = mua_cli("view", str(out), "--out", str(tmp_path / "view.html"))
    assert code == 0, err[-2000:]
    page = (tmp_path / "view.html").read_text()
    assert "simulated users" in page and "Goodbye." in page


def test_the_audit_samples_a_fixed_number_of_conversations():
    from mua.eval.audit import audit_users

    opening = [{"role": "user", "content": "Guess my number."}]
    row = {
        "gym": "guess@u",
        "task_id": "t",
        "sample_index": 0,
        "success": False,
        "messages": [
            *opening,
            {"role": "assistant", "content": "[answer] 5"},
            {"role": "user", "content": "it is 9"},
        ],  # fmt: skip
    }
    rows = [{**row, "sample_index": i} for i in range(10)]
    audit = audit_users({"guess@u": rows}, {("guess", "t"): {"target": 9}}, samples=4, seed=0)
    stats = audit["users"]["u"]
    assert stats["conversations"] == 4 and stats["turns"] == 4 and stats["flagged"] == 4
    assert stats["fidelity"] == 0.0 and stats["rules"] == {"leak": 4}
