"""The user seat's judge rubric (`fidelity_judge:`): the judge's request, the blend with the
checks and the components, retries of a malformed verdict, a judge that fails masking the
trajectory (never a silent 0), the key refused outside the seat, the judge preflight, and
`mua eval` reporting the components. The judge is a scripted OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from mua.config.gyms import GymConfig
from mua.users.seat_judge import CRITERIA, read_verdict
from tests.fakes.fake_openai import FakeOpenAIServer, Fault
from tests.unit.test_user_seat import guess_task, replies, run_seat

pytestmark = pytest.mark.timeout(120)

ALL_MET = json.dumps(dict.fromkeys(CRITERIA, 1))
HALF_MET = json.dumps({"instructions": 1, "asked_only": 1, "persona": 0, "ending": 0})


def _entry(url: str, weight: float = 0.5, **keys) -> GymConfig:
    judge = {"base_url": url, "model": "judge", "weight": weight, "backoff_s": 0.01, **keys}
    return GymConfig(name="guess", seat="user", fidelity_judge=judge)


@pytest.fixture(scope="module")
def tok():
    from mua.models import load_tokenizer

    return load_tokenizer("tiny:qwen3-1m")


def test_the_judge_key_belongs_to_the_user_seat():
    with pytest.raises(ValidationError, match="fidelity_judge: belongs to the user seat"):
        GymConfig(name="guess", fidelity_judge={"model": "m"})
    with pytest.raises(ValidationError):
        GymConfig(name="guess", seat="user", fidelity_judge={"model": "m", "weight": 0})


def test_a_verdict_needs_a_0_or_1_per_criterion():
    assert read_verdict(ALL_MET) == dict.fromkeys(CRITERIA, 1.0)
    assert read_verdict({**dict.fromkeys(CRITERIA, True), "persona": False})["persona"] == 0.0
    with pytest.raises(ValueError, match="'ending' must be 0 or 1"):
        read_verdict({k: 1 for k in CRITERIA if k != "ending"})
    with pytest.raises(ValueError, match="must be 0 or 1"):
        read_verdict(dict.fromkeys(CRITERIA, 0.5))


def test_the_reward_blends_checks_and_rubric(tok, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    # target 3: the expert guesses 4, 2, 3 and every reply is true (checks 1.0); the judge
    # finds two of the four criteria met (rubric 0.5)
    with FakeOpenAIServer(lambda request: HALF_MET) as srv:
        entry = _entry(srv.base_url, weight=0.25)
        (traj,) = run_seat(tok, entry, [guess_task(3)], replies("lower", "higher", "correct"))
        asked = srv.requests[-1]["json"]["messages"]
    assert traj.termination == "done"
    parts = traj.reward_components
    assert parts["fidelity"] == pytest.approx(1.0) and parts["judge"] == pytest.approx(0.5)
    assert parts["judge_persona"] == 0.0 and parts["judge_instructions"] == 1.0
    assert traj.reward == pytest.approx(0.75 * 1.0 + 0.25 * 0.5)
    assert len(srv.requests) == 1  # one verdict per episode
    # the judge read the hidden instructions and the whole conversation
    assert "You picked the number 3" in asked[1]["content"]
    assert "Agent: [answer] 4\nUser: lower\nAgent: [answer] 2" in asked[1]["content"]
    assert all(name in asked[0]["content"] for name in CRITERIA)
    assert asked[1]["content"].endswith("The conversation ended.")
    # a user that lies on every turn: checks 0, so only the rubric's share is left
    with FakeOpenAIServer(lambda request: HALF_MET) as srv:
        entry = _entry(srv.base_url, weight=0.25)
        # the runner's budget (3 user turns) ends it before the agent's own (6 guesses)
        (lying,) = run_seat(
            tok, entry, [guess_task(3)], replies("higher"), max_turns=3, agent_turns=6
        )
        cut = srv.requests[-1]["json"]["messages"][1]["content"]
    assert lying.reward_components["fidelity"] == pytest.approx(0.0)
    assert lying.reward == pytest.approx(0.25 * 0.5)
    assert lying.termination == "max_turns" and cut.endswith("cut the conversation off.")


def test_a_malformed_verdict_is_asked_again(tok, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    answers = iter(['{"instructions": 1}', "not json", ALL_MET])
    with FakeOpenAIServer(lambda request: next(answers)) as srv:
        entry = _entry(srv.base_url, weight=1.0)
        (traj,) = run_seat(tok, entry, [guess_task(3)], replies("lower", "higher", "correct"))
    assert traj.termination == "done" and traj.reward == pytest.approx(1.0)
    assert len(srv.requests) == 3


def test_a_judge_that_cannot_answer_masks_the_trajectory(tok, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with FakeOpenAIServer(faults=lambda i, body: Fault("http500")) as srv:
        entry = _entry(srv.base_url, max_retries=1)
        (traj,) = run_seat(tok, entry, [guess_task(3)], replies("lower", "higher", "correct"))
    assert traj.termination == "user_failure"  # masked: not scored, not trained
    assert "fidelity judge" in traj.detail
    assert traj.reward == 0.0 and not traj.reward_components


def test_the_judge_is_asked_once_before_a_run(monkeypatch):
    from mua.config.recipes import EvalRecipe
    from mua.errors import RunFailure
    from mua.run.preflight import ask_endpoints
    from mua.run.spec import run_spec

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    refuse = Fault("status", status=401, message="bad key")
    with FakeOpenAIServer(faults=lambda i, body: refuse) as srv:
        recipe = EvalRecipe(gyms=[_entry(srv.base_url).model_dump()])
        with pytest.raises(RunFailure, match="guess fidelity judge"):
            ask_endpoints(run_spec(recipe, e) for e in recipe.gyms)


def test_mua_eval_reports_the_blend_and_its_components(tmp_path, mua_cli):
    with FakeOpenAIServer(lambda request: HALF_MET) as srv:
        recipe = tmp_path / "eval.yaml"
        recipe.write_text(
            "verb: eval\nmodel: {path: 'tiny:qwen3-1m', tool_parser: bracket}\n"
            "gym: {name: guess, seat: user, options: {max_number: 8}, "
            f"fidelity_judge: {{base_url: '{srv.base_url}', model: judge, weight: 0.5}}}}\n"
            "rollout: {max_turns: 2, max_new_tokens_per_turn: 4}\neval: {max_tasks: 2}\n"
        )
        code, out, err = mua_cli("eval", str(recipe), "--out", str(tmp_path / "out"))
        judged = len(srv.requests)
    assert code == 0, out + err
    guess = json.loads((tmp_path / "out" / "summary.json").read_text())["gyms"]["guess"]
    parts = guess["components"]
    assert set(parts) == {"fidelity", "judge", *(f"judge_{c}" for c in CRITERIA)}
    assert parts["judge"] == pytest.approx(0.5) and parts["judge_persona"] == 0.0
    assert guess["reward_mean"] == pytest.approx(0.5 * parts["fidelity"] + 0.5 * 0.5)
    assert judged >= 3  # the preflight, then one verdict per episode
