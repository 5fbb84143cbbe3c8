"""The guess gym: deterministic tasks, higher/lower replies, rewards, expert and random baselines
(the README's numbers are checked here)."""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import pytest

from mua.errors import UsageError
from mua.families.tool_calls import parse_action
from mua.gym import GymContext, get_gym

GYM = get_gym("guess")
README = Path(__file__).resolve().parents[2] / "gyms" / "guess" / "README.md"
MAX_TURNS = 8


async def play(task, act, max_turns=MAX_TURNS):
    env = GYM.make_env(GymContext())
    reset = await env.reset(task)
    messages, total = list(reset.messages), 0.0
    for _ in range(max_turns):
        msg = await act(messages, task)
        messages.append(msg)
        step = await env.step(parse_action(msg["content"], "bracket"))
        messages.extend(step.messages)
        total += step.reward
        if step.done:
            break
    await env.close()
    return total, messages


def mean_reward(act, tasks):
    return sum(asyncio.run(play(t, act))[0] for t in tasks) / len(tasks)


def test_tasks_are_deterministic_and_split():
    a, b = GYM.build_tasks(None, seed=0, options={}), GYM.build_tasks(None, seed=0, options={})
    assert (len(a["train"]), len(a["test"])) == (512, 64)
    assert [t.payload for t in a["test"]] == [t.payload for t in b["test"]]
    assert [t.payload for t in GYM.build_tasks(None, seed=1)["test"]] != [
        t.payload for t in a["test"]
    ]
    assert all(1 <= t.payload["target"] <= 16 for t in a["train"])
    small = GYM.build_tasks(None, seed=0, options={"max_number": 4, "num_train": 3, "num_test": 2})
    assert len(small["train"]) == 3 and all(t.payload["target"] <= 4 for t in small["train"])
    with pytest.raises(UsageError, match="max_numbr"):
        GYM.build_tasks(None, options={"max_numbr": 4})
    with pytest.raises(UsageError, match="no public dataset"):
        GYM.build_tasks("/some/file")


def test_replies_and_reward():
    task = GYM.build_tasks(None, seed=0)["test"][0]
    target = task.payload["target"]

    async def steps():
        env = GYM.make_env(GymContext())
        await env.reset(task)
        out = []
        for text in (
            f"[answer] {target - 1}",
            f"[answer] {target + 1}",
            "hello",
            "[answer] seven",
            "[search] hint",
            f"[answer] {target} final",
        ):
            r = await env.step(parse_action(text, "bracket"))
            out.append((r.messages[0]["content"], r.reward, r.done, r.info.get("errors", {})))
        return out

    out = asyncio.run(steps())
    assert out[0][:3] == ("higher", 0.0, False) and out[1][:3] == ("lower", 0.0, False)
    assert out[2][3] == {"no_action": 1} and out[3][3] == {"bad_answer": 1}
    assert "Guess with [answer]" in out[4][0]
    assert out[5][:3] == ("Correct!", 1.0, True)


def test_expert_and_random_baselines_match_readme():
    tasks = GYM.build_tasks(None, seed=0)["test"]
    expert = mean_reward(GYM.expert(GymContext()), tasks)
    rng = random.Random(0)

    async def random_act(messages, task):
        return {"role": "assistant", "content": GYM.random_action(rng)}

    rand = mean_reward(random_act, tasks)
    assert expert == 1.0
    assert 0.2 < rand < 0.6
    text = README.read_text()
    stated = dict(re.findall(r"\| (expert|random) [^|]*\| ([0-9.]+) \|", text))
    assert float(stated["expert"]) == pytest.approx(expert, abs=0.005)
    assert float(stated["random"]) == pytest.approx(rand, abs=0.005), rand


def test_careless_expert_is_seeded_weaker_and_matches_readme():
    tasks = GYM.build_tasks(None, seed=0)["test"]
    careless = GYM.expert(GymContext(options={"expert_noise": 0.5}))
    first = [asyncio.run(play(t, careless)) for t in tasks]
    again = [asyncio.run(play(t, careless)) for t in tasks]
    assert [m for _, m in first] == [m for _, m in again]  # same seed, same conversations
    reward = sum(r for r, _ in first) / len(tasks)
    assert 0.3 < reward < 0.95
    guesses = [
        int(m["content"].split()[-1]) for _, msgs in first for m in msgs if m["role"] == "assistant"
    ]
    assert max(guesses) > 16  # careless guesses reach 1..2N
    stated = dict(
        re.findall(
            r"\| careless expert \(expert_noise ([0-9.]+)\) \| ([0-9.]+) \|", README.read_text()
        )
    )
    assert float(stated["0.5"]) == pytest.approx(reward, abs=0.005), reward
    reseeded = GYM.expert(GymContext(options={"expert_noise": 0.5}, seed=1))
    assert [m for _, m in first] != [asyncio.run(play(t, reseeded))[1] for t in tasks]
    for bad in (1.5, -0.1, "half", True):
        with pytest.raises(UsageError, match="expert_noise"):
            GYM.expert(GymContext(options={"expert_noise": bad}))


def test_turn_cost_lowers_every_turns_reward():
    task = GYM.build_tasks(None, seed=0, options={"turn_cost": 0.1})["test"][0]
    target = task.payload["target"]

    async def rewards():
        env = GYM.make_env(GymContext(options={"turn_cost": 0.1}))
        await env.reset(task)
        out = []
        for text in (f"[answer] {target + 1}", "hello", f"[answer] {target}"):
            r = await env.step(parse_action(text, "bracket"))
            out.append((r.reward, r.components.get("turn_cost"), r.done))
        return out

    assert asyncio.run(rewards()) == [(-0.1, -0.1, False), (-0.1, -0.1, False), (0.9, -0.1, True)]
    for bad in (-0.1, "0.1", True):
        with pytest.raises(UsageError, match="gym.options.turn_cost must be a number >= 0"):
            GYM.make_env(GymContext(options={"turn_cost": bad}))
