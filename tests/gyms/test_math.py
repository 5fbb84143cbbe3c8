"""Contract tests of the math gym: interventions, scoring with Math-Verify, data, expert vs random."""

from __future__ import annotations

import asyncio
import random
import statistics
import threading

import pytest

from gyms.math import GYM, INTERVENTION, random_action
from gyms.math.answers import answers_match, extract_final_answer
from gyms.math.problems import GENERATORS, solve
from mua.errors import UsageError
from mua.gym.api import AgentAction, GymContext, Task


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def splits():
    return GYM.build_tasks(None, 0, {"num_train": 10, "num_test": 120})


def _task(answer: str) -> Task:
    return Task(
        "t", "math", "test", [{"role": "user", "content": "q"}], {"answer": answer, "kind": "jsonl"}
    )


async def _play(task, turns, ctx=None):
    env = GYM.make_env(ctx or GymContext())
    await env.reset(task)
    results = []
    for text in turns:
        results.append(await env.step(AgentAction(text=text)))
        if results[-1].done:
            break
    return results


def test_extracts_the_last_final_answer_of_the_response():
    assert extract_final_answer("try \\boxed{1} no wait \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert extract_final_answer("<answer> 7 </answer>") == "7"
    assert extract_final_answer("so.\nAnswer: 42.\n") == "42"
    for text in ["", "reasoning...", "\\boxed{", "Answer:", "\\boxed{}"]:
        assert extract_final_answer(text) is None


def test_math_verify_equivalence_gold_first_and_fallback_counted(monkeypatch):
    assert answers_match("\\frac{3}{4}", "0.75") == (True, False)
    assert answers_match("2", "x = 2") == (True, False)
    assert answers_match("7", "8") == (False, False)
    import math_verify

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(math_verify, "verify", broken)
    assert answers_match("\\frac{1}{2}", "1/2") == (True, True)
    assert answers_match("3", "4") == (False, True)


def test_answers_match_works_off_the_main_thread():
    out = []
    t = threading.Thread(target=lambda: out.append(answers_match("\\frac{1}{2}", "0.5")))
    t.start()
    t.join()
    assert out == [(True, False)]


def test_correct_answer_scores_one_and_ends():
    (r,) = run(_play(_task("\\frac{1}{2}"), ["We get \\boxed{0.5}."]))
    assert (
        r.done
        and r.reward == 1.0
        and r.components == {"correct": 1.0}
        and r.info["verify_fallback"] == 0
    )
    (r,) = run(_play(_task("12"), ["Answer: 13"]))
    assert r.done and r.reward == 0.0


def test_prompt_is_never_scored():
    task = Task(
        "t",
        "math",
        "test",
        [{"role": "user", "content": "Is it \\boxed{5}?"}],
        {"answer": "5", "kind": "jsonl"},
    )
    results = run(_play(task, ["thinking"] * 10))
    assert all(r.reward == 0 for r in results)


def test_interventions_then_one_final_round():
    results = run(_play(_task("5"), ["step one", "step two", "step three", "still going", "never"]))
    assert len(results) == 4  # 3 interventions + the final round
    for i, r in enumerate(results[:3], start=1):
        assert (
            not r.done
            and r.messages == [{"role": "env", "content": INTERVENTION}]
            and r.info["intervention"] == i
        )
    assert results[3].done and results[3].reward == 0 and results[3].messages == []
    results = run(_play(_task("5"), ["hmm", "Fine: \\boxed{5}"]))
    assert results[-1].done and results[-1].reward == 1.0 and results[-1].info["interventions"] == 1


def test_max_turns_option_and_bad_options():
    results = run(_play(_task("5"), ["a", "b", "c"], GymContext(options={"max_turns": 1})))
    assert [r.done for r in results] == [False, True]
    with pytest.raises(UsageError, match="max_turns"):
        GYM.make_env(GymContext(options={"max_turns": -1}))
    with pytest.raises(UsageError, match="unknown math option"):
        GYM.make_env(GymContext(options={"max_turn": 2}))


def test_generated_answers_are_exact(splits):
    kinds = {t.payload["kind"] for t in splits["test"]}
    assert kinds == set(GENERATORS)
    linear = next(t for t in splits["test"] if t.payload["kind"] == "linear").payload["params"]
    from fractions import Fraction

    x = Fraction(linear["c"] - linear["b"], linear["a"])
    assert linear["a"] * x + linear["b"] == linear["c"]
    quad = next(t for t in splits["test"] if t.payload["kind"] == "quadratic").payload
    assert quad["answer"] == str(max(quad["params"]["r1"], quad["params"]["r2"]))
    assert solve("arithmetic", {"numbers": [2, 3, 4, 5], "ops": ["+", "*", "-"]}) == "9"


def test_builtin_tasks_are_deterministic():
    a = GYM.build_tasks(None, 3, {"num_train": 5, "num_test": 5})
    b = GYM.build_tasks(None, 3, {"num_train": 5, "num_test": 5})
    assert [t.to_row() for t in a["test"]] == [t.to_row() for t in b["test"]]
    assert a["train"][0].payload != a["test"][0].payload


def test_expert_scores_high_and_random_low(splits):
    expert = GYM.expert(GymContext())

    async def episode(task, policy):
        env = GYM.make_env(GymContext())
        reset = await env.reset(task)
        messages, total = list(reset.messages), 0.0
        for _ in range(5):
            msg = await policy(messages, task)
            r = await env.step(AgentAction(text=msg["content"]))
            messages += [msg, *r.messages]
            total += r.reward
            if r.done:
                return total
        raise AssertionError("episode did not end")

    rng = random.Random(0)

    async def random_policy(messages, task):
        return {"role": "assistant", "content": random_action(rng)}

    expert_mean = statistics.mean(run(episode(t, expert)) for t in splits["test"])
    random_mean = statistics.mean(run(episode(t, random_policy)) for t in splits["test"])
    print(
        f"math test split (120 tasks): expert mean {expert_mean:.3f}, random mean {random_mean:.3f}"
    )
    assert expert_mean == 1.0
    assert random_mean <= 0.2


def test_500_malformed_or_adversarial_actions_raise_nothing(splits):
    rng = random.Random(1)
    nasty = [
        "\\boxed{" * 50,
        "\\boxed{\\frac{1}{0}}",
        "\\boxed{x^{x^{x^{x}}}}",
        "<answer></answer>",
        "\x00\\boxed{nan}",
        "Answer: " + "9" * 400,
        "\\boxed{\\sqrt{-1}}",
        "\\boxed{\\begin{pmatrix}1\\end{pmatrix}}",
        "}" * 100,
    ]

    async def go():
        env = GYM.make_env(GymContext())
        await env.reset(splits["test"][0])
        for i in range(500):
            text = random_action(rng) if i % 2 else rng.choice(nasty)
            r = await env.step(AgentAction(text=text, raw=text))
            assert isinstance(r.reward, float) and r.reward in (0.0, 1.0)
            if r.done:
                await env.reset(splits["test"][i % len(splits["test"])])

    run(go())


def test_limo_jsonl_loader(tmp_path):
    good = tmp_path / "limo.jsonl"
    good.write_text(
        '{"question": "1+1?", "answer": "2", "solution": "easy"}\n\n'
        + "".join(f'{{"question": "q{i}", "answer": {i}}}\n' for i in range(19))
    )
    splits = GYM.build_tasks(str(good), 0, {"test_fraction": 0.25})
    assert len(splits["train"]) == 15 and len(splits["test"]) == 5
    first = next(t for s in splits.values() for t in s if t.payload["question"] == "1+1?")
    assert first.payload["answer"] == "2" and first.prompt[-1]["content"] == "1+1?"
    again = GYM.build_tasks(str(good), 0, {"test_fraction": 0.25})
    assert [t.to_row() for t in again["test"]] == [t.to_row() for t in splits["test"]]
    cases = {
        '{"question": "q", "answer": "1"}\n{"question": "q2"\n': r"limo.jsonl:2: not valid JSON",
        '["q", "a"]\n': r":1: expected a JSON object",
        '{"question": "", "answer": "1"}\n': r":1: 'question' must be a non-empty string",
        '{"question": "q", "answer": null}\n': r":1: 'answer' must be",
        '{"question": "q", "answer": "1", "solution": 3}\n': r":1: 'solution' must be a string",
    }
    for text, message in cases.items():
        good.write_text(text)
        with pytest.raises(UsageError, match=message):
            GYM.build_tasks(str(good), 0, {})
