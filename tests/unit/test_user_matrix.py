"""The user matrix of `mua eval`: every gym against the recipe's own user and each `eval.users`
entry, through a real OpenAI-compatible endpoint on 127.0.0.1 playing a good, a leaky and a
quitting persuadee (tests/fakes/fake_users.py)."""

from __future__ import annotations

import json

import pytest

from tests.fakes.fake_users import users_server

pytestmark = pytest.mark.timeout(300)


def _users(url: str) -> list[str]:
    entries = ", ".join(
        f"{{label: {name}, kind: llm, model: {name}, base_url: '{url}'"
        + (", persona: impatient" if name == "quitter" else "")
        + "}"
        for name in ("good", "leaky", "quitter")
    )
    return [f"eval.users=[{entries}]"]


def _eval(mua_cli, url, out, *extra):
    return mua_cli(
        "eval",
        "--gym",
        "persuade",
        "--model",
        "expert",
        "-n",
        "2",
        "--max-tasks",
        "2",
        "--out",
        str(out),
        "--no-mlflow",
        "gym.options.rules=mua",
        *_users(url),
        *extra,
    )


def test_the_matrix_separates_a_good_a_leaky_and_a_quitting_user(tmp_path, mua_cli):
    with users_server() as server:
        code, stdout, err = _eval(mua_cli, server.base_url, tmp_path / "eval")
        systems = [
            (r["json"]["model"], r["json"]["messages"][0]["content"]) for r in server.requests
        ]
    # the persuadee's turns (not the one-line preflight request before the run)
    impatient = [text for model, text in systems if model == "quitter" and "firmly" in text]
    good = [text for model, text in systems if model == "good" and "firmly" in text]
    assert code == 0, err[-3000:]
    saved = json.loads((tmp_path / "eval" / "summary.json").read_text())
    cells = saved["gyms"]
    assert set(cells) == {"persuade@train", "persuade@good", "persuade@leaky", "persuade@quitter"}
    # the recipe's own (scripted) user and the good LLM user let the expert win; the others do not
    assert cells["persuade@train"]["pass^2"] == 1.0 and cells["persuade@good"]["pass^1"] == 1.0
    assert cells["persuade@leaky"]["pass^1"] == 0.0 and cells["persuade@quitter"]["pass^1"] == 0.0
    matrix = saved["user_matrix"]["persuade"]
    assert matrix["spread"] == 1.0
    assert matrix["train_gap"] == pytest.approx(1.0 - 1.0 / 3)
    # the table marks the training user and prints the spread
    assert "train*" in stdout and "spread" in stdout and "leaky" in stdout
    # the persona's prompt reaches that user's requests only
    assert impatient and all("Persona: you are in a hurry" in text for text in impatient)
    assert good and not any("Persona:" in text for text in good)


def test_eval_without_users_keeps_one_row_per_gym(tmp_path, mua_cli):
    code, stdout, err = mua_cli(
        "eval", "--gym", "guess", "--model", "expert", "--max-tasks", "2",
        "--out", str(tmp_path / "plain"), "--no-mlflow",
    )  # fmt: skip
    assert code == 0, err[-3000:]
    saved = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert list(saved["gyms"]) == ["guess"] and "user_matrix" not in saved
    assert saved["gyms"]["guess"]["blame"]["failures"] == 0


def test_user_labels_and_personas_are_checked():
    from mua.config import load_recipe
    from mua.errors import UsageError
    from mua.users.matrix import load_persona

    base = ["gym.name=persuade"]
    with pytest.raises(Exception, match="recipe's own user"):
        load_recipe(None, [*base, "eval.users=[{label: train}]"], verb="eval")
    with pytest.raises(Exception, match="listed twice"):
        load_recipe(None, [*base, "eval.users=[{label: a}, {label: a}]"], verb="eval")
    with pytest.raises(Exception, match="letters, digits"):
        load_recipe(None, [*base, "eval.users=[{label: 'a b'}]"], verb="eval")
    with pytest.raises(UsageError, match="no built-in persona of that name.*cooperative"):
        load_persona("grumpy")
    assert "hurry" in load_persona("impatient").prompt


def test_a_persona_file_is_data_a_user_can_copy(tmp_path):
    from mua.errors import UsageError
    from mua.users.matrix import PERSONA_DIR, builtin_personas, load_persona

    assert {"cooperative", "non_cooperative", "impatient", "vague"} <= set(builtin_personas())
    assert {"telecom_easy", "telecom_hard"} <= set(builtin_personas())
    mine = tmp_path / "mine.yaml"
    mine.write_text((PERSONA_DIR / "vague.yaml").read_text().replace("loosely", "in riddles"))
    assert "in riddles" in load_persona(str(mine)).prompt
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nprompts: oops\n")
    with pytest.raises(UsageError, match="unknown key.*prompts"):
        load_persona(str(bad))


def test_a_cell_applies_the_users_keys_and_its_personas_gym_options():
    from mua.config import load_recipe
    from mua.gym.mix import entry_user
    from mua.users.matrix import eval_cells

    recipe = load_recipe(
        None,
        [
            "gym.name=tau2",
            "user.kind=scripted",
            "eval.users=[{label: hard, persona: telecom_hard}, "
            "{label: remote, kind: llm, model: m1, base_url: 'http://127.0.0.1:9/v1', temperature: 0.7}]",
        ],
        verb="eval",
    )
    cells = {c.label: c for c in eval_cells(recipe, ["tau2"])}
    assert list(cells) == ["tau2@train", "tau2@hard", "tau2@remote"]
    assert cells["tau2@train"].entry.options == {}
    assert cells["tau2@hard"].entry.options == {"persona": "non_cooperative"}
    remote = entry_user(recipe.user, cells["tau2@remote"].entry)
    assert (remote.kind, remote.model, remote.temperature) == ("llm", "m1", 0.7)
    assert entry_user(recipe.user, cells["tau2@hard"].entry).kind == "scripted"


def test_spread_and_gap_of_the_matrix():
    from mua.users.matrix import matrix_summary

    cell = lambda p: {"pass^1": p}  # noqa: E731
    out = matrix_summary({"g@train": cell(0.9), "g@a": cell(0.5), "g@b": cell(0.7), "h": cell(1.0)})
    assert set(out) == {"g"}
    assert out["g"]["spread"] == pytest.approx(0.4)
    assert out["g"]["train_gap"] == pytest.approx(0.9 - 0.6)


def test_training_refuses_the_eval_only_user_keys():
    from mua.config import load_recipe
    from mua.errors import UsageError

    with pytest.raises(UsageError, match="eval.users is read by `mua eval` only"):
        load_recipe(None, ["eval.users=[{label: a}]"], verb="train")
    with pytest.raises(UsageError, match="eval.audit_users is read by `mua eval` only"):
        load_recipe(None, ["eval.audit_users=true"], verb="train")
    load_recipe(None, ["eval.test_freq=2"], verb="train")  # validation keys stay


def test_a_changed_user_list_is_not_resumed_into_the_same_folder(tmp_path, mua_cli):
    with users_server() as server:
        url = server.base_url
        first = _eval(mua_cli, url, tmp_path / "eval")
        assert first[0] == 0, first[2][-2000:]
        code, _, err = mua_cli(
            "eval", "--gym", "persuade", "--model", "expert", "-n", "2", "--max-tasks", "2",
            "--out", str(tmp_path / "eval"), "--no-mlflow", "gym.options.rules=mua",
            f"eval.users=[{{label: good, kind: llm, model: leaky, base_url: '{url}'}}]",
        )  # fmt: skip
    assert code != 0 and "different evaluation" in err and "--fresh" in err


def test_a_user_broken_from_its_first_request_is_not_run_and_the_others_are(tmp_path, mua_cli):
    from tests.fakes.fake_openai import FakeOpenAIServer, Fault

    out = tmp_path / "eval"
    # the broken user never answers: its own timeout (0.5 s) and retries (0) end its preflight
    with users_server() as good, FakeOpenAIServer(faults=lambda _i, _b: Fault("hang"), hang_cap_s=60) as broken:  # fmt: skip
        users = (
            f"eval.users=[{{label: good, kind: llm, model: good, base_url: '{good.base_url}'}}, "
            f"{{label: broken, kind: llm, model: m, base_url: '{broken.base_url}', "
            "timeout_s: 0.5, max_retries: 0}]"
        )
        code, stdout, err = mua_cli(
            "eval", "--gym", "persuade", "--model", "expert", "--max-tasks", "2",
            "--out", str(out), "--no-mlflow", "gym.options.rules=mua", users,
        )  # fmt: skip
        broken_requests = broken.total_requests
    assert code == 1, (stdout[-2000:], err[-3000:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: 1 eval.users entry not run (broken: see above)"), lines[0]
    assert broken_requests == 1  # max_retries 0: one attempt
    saved = json.loads((out / "summary.json").read_text())
    assert set(saved["gyms"]) == {"persuade@train", "persuade@good"}
    assert saved["gyms"]["persuade@good"]["pass^1"] == 1.0
    why = saved["users_not_run"]["broken"]
    assert "timed out after 0.5 s" in why and "\n" not in why
    assert "user broken not run (its cells are marked `not run`)" in stdout
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in stdout.splitlines() if line.startswith("│")]  # fmt: skip
    assert ["persuade", "broken", "not run"] in rows  # pass^1
    assert ["persuade", "broken", "not run", "–", "–", "–", "–"] in rows  # blame


def test_a_matrix_users_timeout_and_retries_reach_its_client():
    from mua.config import load_recipe
    from mua.gym.mix import gym_run
    from mua.users.matrix import eval_cells

    recipe = load_recipe(
        None,
        [
            "gym.name=persuade",
            "user.kind=llm",
            "user.base_url=http://127.0.0.1:9/v1",
            "eval.users=[{label: slow, timeout_s: 7.5, max_retries: 1}, {label: plain}]",
        ],
        verb="eval",
    )
    cells = {c.label: c for c in eval_cells(recipe, ["persuade"])}
    slow = gym_run(recipe, cells["persuade@slow"].entry).ctx.llm.cfg
    plain = gym_run(recipe, cells["persuade@plain"].entry).ctx.llm.cfg
    assert (slow.timeout_s, slow.max_retries) == (7.5, 1)
    assert (plain.timeout_s, plain.max_retries) == (60.0, 4)  # the recipe's user's, as before
    with pytest.raises(Exception, match="timeout_s: a scripted user sends no requests"):
        load_recipe(None, ["gym.name=persuade", "eval.users=[{label: s, kind: scripted, timeout_s: 3}]"], verb="eval")  # fmt: skip
    with pytest.raises(Exception, match="max_retries"):
        load_recipe(None, ["gym.name=persuade", "eval.users=[{label: s, max_retries: -1}]"], verb="eval")  # fmt: skip
