"""MuTIS's two leftovers, each against its definition: the prompt of its data preparation
(template `base`: one user turn, `Answer the given math question. Please reason step by step and
put the final answer in \\boxed{}. Question: {question} `, a `?` added to a question that ends in
neither `?` nor `.`) under the math gym's `rules: upstream`, and its rolling context (each round
the model is given `input_ids[:, -max_len:]` with `max_len = min(max_prompt_length, length)`,
`max_prompt_length` 4096) as `rollout.context_window`."""

from __future__ import annotations

import asyncio

import pytest

from gyms.math import GYM as MATH
from mua.gym.api import GymContext, Task
from mua.models import load_tokenizer
from tests.unit.test_runner import ScriptedTokens, run, task

MUTIS = (
    "Answer the given math question. Please reason step by step and put the final answer in "
    "\\boxed{}. Question: "
)


def _reset(rules: str, question: str):
    env = MATH.make_env(GymContext(options={"rules": rules}))
    prompt = [{"role": "system", "content": "Solve it."}, {"role": "user", "content": question}]
    t = Task("t", "math", "test", prompt, {"answer": "2", "kind": "jsonl"})
    return asyncio.run(env.reset(t)).messages


@pytest.mark.parametrize(
    ("question", "shown"),
    [
        ("What is 1+1", "What is 1+1?"),
        ("What is 1+1?", "What is 1+1?"),
        ("Add 1 and 1.", "Add 1 and 1."),
    ],
)
def test_upstream_prompt_is_mutis_single_user_turn(question, shown):
    assert _reset("upstream", question) == [{"role": "user", "content": f"{MUTIS}{shown} "}]


def test_mua_rules_keep_the_tasks_own_prompt():
    messages = _reset("mua", "What is 1+1")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "What is 1+1"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def _turn_starts(traj) -> list[int]:
    mask = traj.loss_mask
    return [i for i in range(len(mask)) if mask[i] and (i == 0 or not mask[i - 1])]


@pytest.mark.parametrize("window", [None, 40, 4096])
def test_each_turn_is_shown_the_last_window_tokens(tok, window):
    policy = ScriptedTokens(tok, "thinking about it some more")
    kw = {"context_window": window} if window else {}
    (traj,) = run([task(0, done_at=4)], policy, tok, max_total_tokens=4096, **kw)
    starts = _turn_starts(traj)
    assert len(starts) == len(policy.prompts) == 4
    for start, prompt in zip(starts, policy.prompts, strict=True):
        stream = traj.token_ids[:start]
        max_len = min(window, len(stream)) if window else len(stream)
        assert prompt == stream[-max_len:]
    if window == 40:  # the cut is real here: later turns see less than the whole stream
        assert len(policy.prompts[-1]) == 40 < starts[-1]
