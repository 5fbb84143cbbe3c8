"""Search gym: BM25 retrieval, exact-match reward, baselines, adversarial input, LLM judge, public data."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import fuzz_env, last_user_text, llm_context, mean_reward
from gyms.common.episode import random_policy
from gyms.search import GYM, random_action
from gyms.search.bm25 import BM25
from gyms.search.reward import exact_match
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from mua.testing.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_bm25_ranks_by_term_rarity_and_frequency():
    index = BM25(["the cat sat", "the dog sat on the dog mat", "a bird", "the the the"])
    assert index.top("dog", 2)[0][0] == 1
    assert index.top("cat bird", 3)[0][0] in (0, 2) and len(index.top("cat bird", 3)) == 2
    assert index.top("zebra", 3) == []
    scores = index.scores("sat dog")
    assert scores[1] > scores[0] > scores[2] == 0.0


def test_exact_match_normalisation():
    assert exact_match("The Drae Highlands.", ["Drae Highlands"])
    assert not exact_match("Drae", ["Drae Highlands"]) and not exact_match("", ["x"])


def test_search_then_answer(tasks):
    task = tasks["train"][0]
    env = GYM.make_env(GymContext())
    run(env.reset(task))
    hits = step(env, "[search] who founded the Royal Observatory of Brisa").messages[0]["content"]
    assert "Tilde Okafor" in hits and hits.count("\n") == 2
    assert "No results" in step(env, "[search] zzzz qqqq").messages[0]["content"]
    assert "not available" in step(env, "[action] hello").messages[0]["content"]
    wrong = step(env, "[answer] Brisa")
    assert wrong.reward == 0.0 and not wrong.done
    right = step(env, "[answer] varnholt")
    assert right.reward == 1.0 and right.done


def test_expert_high_random_low(tasks):
    ctx = GymContext()
    expert = run(mean_reward(GYM.make_env, ctx, tasks["test"], lambda i: GYM.expert(ctx)))
    rand = run(
        mean_reward(
            GYM.make_env,
            ctx,
            tasks["test"],
            lambda i: random_policy(random_action, random.Random(i)),
            max_turns=12,
        )
    )
    assert expert == 1.0 and rand <= 0.1


def test_500_adversarial_actions_raise_nothing(tasks):
    assert run(fuzz_env(GYM.make_env, GymContext(), tasks["train"], 500)) > 5


def test_llm_judge_only_after_a_miss(tasks):
    task = next(t for t in tasks["test"] if t.payload["answers"][0] == "54 metres")
    with FakeOpenAIServer(
        lambda r: json.dumps({"correct": "54" in last_user_text(r)}), faults=["malformed"]
    ) as server:
        env = GYM.make_env(llm_context(server.base_url))
        run(env.reset(task))
        assert step(env, "[answer] 60 metres").reward == 0.0
        assert step(env, "[answer] fifty-four metres (54)").reward == 1.0
        assert server.total_requests == 3  # one malformed reply re-asked, then the second answer
    with FakeOpenAIServer(lambda r: "not json") as server:
        env = GYM.make_env(llm_context(server.base_url, max_retries=1))
        run(env.reset(task))
        assert step(env, "[answer] 54 metres").reward == 1.0  # exact match never asks the judge
        assert server.total_requests == 0
        run(env.reset(task))
        with pytest.raises(UserFailure):
            step(env, "[answer] 55")


def test_custom_corpus_and_bad_corpus(tmp_path, tasks):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"title": "Zed", "text": "Zed is a quiet planet."}) + "\n")
    env = GYM.make_env(GymContext(options={"corpus_path": str(corpus)}))
    run(env.reset(tasks["test"][0]))
    assert "Zed" in step(env, "[search] quiet planet").messages[0]["content"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    with pytest.raises(UsageError, match="line 1 is not valid JSON"):
        GYM.make_env(GymContext(options={"corpus_path": str(bad)}))


def test_public_bamboogle_loads(shared_data):
    splits = GYM.build_tasks(source=shared_data / "userrl")
    assert len(splits["test"]) == 125 and not splits["train"]
    assert all(t.payload["answers"][0] for t in splits["test"])


def test_bad_public_file(tmp_path):
    (tmp_path / "questions.json").write_text(json.dumps({"q": 1}))
    with pytest.raises(UsageError, match="expected a JSON list"):
        GYM.build_tasks(source=tmp_path)
