"""Contract tests of the math gym: interventions, scoring with Math-Verify, data, expert vs random."""

from __future__ import annotations

import asyncio
import random
import statistics
import threading

import pytest

from gyms.math import GYM, INTERVENTION, random_action
from gyms.math.answers import answers_match, extract_final_answer, upstream_answer, upstream_cut
from gyms.math.env import UPSTREAM_INTERVENTION
from gyms.math.problems import GENERATORS, solve
from mua.errors import UsageError
from mua.gym.api import AgentAction, GymContext, Task

MUA_RULES = GymContext(options={"rules": "mua"})


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
        results.append(await env.step(AgentAction(text=text, raw=text)))
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


def test_mua_rules_interventions_then_one_final_round():
    turns = ["step one", "step two", "step three", "still going", "never"]
    results = run(_play(_task("5"), turns, MUA_RULES))
    assert len(results) == 4  # 3 interventions + the final round
    for i, r in enumerate(results[:3], start=1):
        assert (
            not r.done
            and r.messages == [{"role": "env", "content": INTERVENTION}]
            and r.info["intervention"] == i
        )
    assert results[3].done and results[3].reward == 0 and results[3].messages == []
    results = run(_play(_task("5"), ["hmm", "Fine: \\boxed{5}"], MUA_RULES))
    assert results[-1].done and results[-1].reward == 1.0 and results[-1].info["interventions"] == 1
    assert all(r.cut_at is None for r in results)  # mua rules keep the whole turn


def test_upstream_rules_intervene_with_mutis_sentence_as_raw_text():
    turns = ["step one", "step two", "step three", "still going", "never"]
    results = run(_play(_task("5"), turns))
    assert len(results) == 4
    for r in results[:3]:
        assert not r.done and r.messages == [
            {"role": "env", "content": UPSTREAM_INTERVENTION, "style": "raw"}
        ]
    assert "My previous action is invalid." in UPSTREAM_INTERVENTION
    assert UPSTREAM_INTERVENTION.endswith("<answer> and </answer>. Let me try again:\n")
    assert results[3].done and results[3].reward == 0


def test_upstream_rules_read_answer_tag_then_answer_line_then_boxed():
    for text, read in [
        ("<answer>3</answer> though maybe \\boxed{4}", "3"),
        ("Answer: 3\n\nOr is it \\boxed{4}?", "3"),
        ("first \\boxed{3} then \\boxed{4}", "3"),
        ("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
    ]:
        cut = upstream_cut(text)
        assert upstream_answer(text[:cut] if cut is not None else text) == read, text
        (r,) = run(_play(_task(read), [text]))
        assert r.done and r.reward == 1.0 and r.info["final_answer"] == read, text
    (r,) = run(_play(_task("4"), ["<answer>3</answer> though maybe \\boxed{4}"]))
    assert r.reward == 0.0  # mua's rules would read the last \\boxed{} (4) and pay
    assert upstream_answer("Answer:") == ""  # an empty answer is still an answer there


def test_upstream_rules_cut_the_response_after_the_answer():
    for text, kept in [
        ("x <answer>5</answer> and then more", "x <answer>5</answer>"),
        ("Answer: 5\n\nmore talk", "Answer: 5"),
        ("so \\boxed{5}. More talk", "so \\boxed{5}"),
        ("answer: 5\n\nmore talk", None),  # the cut looks for a capitalised Answer:
    ]:
        (r,) = run(_play(_task("5"), [text]))
        assert r.done and r.reward == 1.0
        assert (text[: r.cut_at] if r.cut_at is not None else None) == kept, text


def test_max_turns_option_and_bad_options():
    with pytest.raises(UsageError, match="gym.options.rules"):
        GYM.make_env(GymContext(options={"rules": "mutis"}))
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
        '{"question": "q", "answer": "1"}\n{"question": "q2"\n': r"limo.jsonl: line 2: not JSON",
        '["q", "a"]\n': r": line 1: a JSON list; expected one object",
        '{"question": "", "answer": "1"}\n': r":1: 'question' must be a non-empty string",
        '{"question": "q", "answer": null}\n': r":1: 'answer' must be",
        '{"question": "q", "answer": "1", "solution": 3}\n': r":1: 'solution' must be a string",
    }
    for text, message in cases.items():
        good.write_text(text)
        with pytest.raises(UsageError, match=message):
            GYM.build_tasks(str(good), 0, {})


class _TokenTurns:
    """A token-level policy that says the given texts, one per turn, each closed by a stop token."""

    kind = "tokens"
    tool_parser = "auto"

    def __init__(self, tok, texts: list[str]):
        self.turns = [tok.encode(text, add_special_tokens=False) for text in texts]
        self.calls = 0

    async def generate(
        self, prompt_ids, max_new_tokens, stop_token_ids, route_key="", keep_prefix=True, **seed
    ):
        from mua.engines.engine_contract import GenerationResult

        ids = self.turns[min(self.calls, len(self.turns) - 1)] + [stop_token_ids[0]]
        self.calls += 1
        return GenerationResult(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop")


def _rollout(texts: list[str], answer: str, options: dict | None = None):
    from mua.config.rollout import RolloutConfig
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts_sync

    tok = load_tokenizer("tiny:qwen3-1m")
    cfg = RolloutConfig(max_turns=4, max_new_tokens_per_turn=64, max_total_tokens=2048)
    (traj,) = run_rollouts_sync(
        [_task(answer)],
        n=1,
        policy=_TokenTurns(tok, texts),
        gym_spec=GYM,
        gym_ctx=GymContext(options=options or {}),
        tokenizer=tok,
        rollout_cfg=cfg,
    )
    trained = tok.decode([i for i, m in zip(traj.token_ids, traj.loss_mask) if m])
    return tok, traj, trained


def test_upstream_rules_train_on_nothing_after_the_answer():
    text = "so \\boxed{5}. Now some junk words follow the answer"
    tok, traj, trained = _rollout([text], "5")
    assert traj.termination == "done" and traj.reward == 1.0
    assert trained.startswith("so \\boxed{5}") and "junk" not in trained
    assert len(trained) <= len("so \\boxed{5}") + 2  # at most the token straddling the cut
    assert "<|im_end|>" not in trained  # the turn's stop came after the cut
    assert traj.messages[-1] == {"role": "assistant", "content": trained}
    assert traj.metrics["drift"] == 0.0
    _, whole, trained = _rollout([text], "5", {"rules": "mua"})
    assert "junk" in trained and whole.reward == 1.0


def test_upstream_intervention_continues_the_models_own_turn():
    tok, traj, trained = _rollout(["let me think", "<answer>5</answer>"], "5")
    assert traj.termination == "done" and traj.reward == 1.0
    env = [i for i, s in enumerate(traj.sources) if s == "env"]
    assert tok.decode([traj.token_ids[i] for i in env]) == UPSTREAM_INTERVENTION
    assert all(traj.loss_mask[i] == 0 for i in env)
    before = tok.decode(traj.token_ids[env[0] - 1 : env[0]])
    assert traj.sources[env[0] - 1] == "assistant" and before != "<|im_end|>"
    assert trained.startswith("let me think") and "<answer>5</answer>" in trained
    assert traj.metrics["drift"] == 0.0
