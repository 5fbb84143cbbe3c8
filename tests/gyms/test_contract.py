"""The contract every registered gym keeps: a scripted expert scores high, a seeded random policy low,
and 500 malformed or hostile actions raise nothing.

Gyms whose episodes need more than `GYM.make_env` + `GYM.expert(ctx)` (a tool-using customer, a
numeric guessing range, a math verifier, a travel planner) check the same contract in their own test
files; `test_every_registered_gym_has_a_contract` makes sure a new gym lands in one place or the other.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

import pytest

from gyms.common.checks import fuzz_env, mean_reward
from gyms.common.episode import random_policy
from mua.gym import GymContext
from mua.gym.registry import get_gym, list_gyms


@dataclass(frozen=True)
class Contract:
    expert: float  # mean reward of the scripted expert on the test split
    random_at_most: float  # ceiling on the seeded random policy's mean reward
    random_max_turns: int  # turn limit for the random policy's episodes
    fuzz_split: str  # split whose tasks receive the adversarial actions


CONTRACTS = {
    "function": Contract(expert=1.0, random_at_most=0.2, random_max_turns=12, fuzz_split="test"),
    "intention": Contract(expert=2.8, random_at_most=0.3, random_max_turns=20, fuzz_split="train"),
    "persuade": Contract(expert=1.0, random_at_most=0.1, random_max_turns=20, fuzz_split="train"),
    "search": Contract(expert=1.0, random_at_most=0.1, random_max_turns=12, fuzz_split="train"),
    "telepathy": Contract(expert=1.0, random_at_most=0.1, random_max_turns=20, fuzz_split="test"),
    "turtle": Contract(expert=1.0, random_at_most=0.1, random_max_turns=20, fuzz_split="train"),
}
OWN_CONTRACT_TESTS = {
    "guess": "tests/gyms/test_guess.py",
    "math": "tests/gyms/test_math.py",
    "tau": "tests/gyms/test_tau_env.py",
    "tau2": "tests/gyms/test_tau2_env.py",
    "travel": "tests/gyms/test_travel.py",
    "mcp": "tests/gyms/test_mcp_env.py",
    "openenv": "tests/gyms/test_openenv_env.py",
    "verifiers": "tests/gyms/test_verifiers_env.py",
}


def run(coro):
    return asyncio.run(coro)


def test_every_registered_gym_has_a_contract():
    assert set(list_gyms()) == set(CONTRACTS) | set(OWN_CONTRACT_TESTS)


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_expert_high_random_low(name):
    gym, contract = get_gym(name), CONTRACTS[name]
    test, ctx = gym.build_tasks()["test"], GymContext()
    expert = run(mean_reward(gym.make_env, ctx, test, lambda i: gym.expert(ctx)))
    rand = run(
        mean_reward(
            gym.make_env,
            ctx,
            test,
            lambda i: random_policy(gym.random_action, random.Random(i)),
            max_turns=contract.random_max_turns,
        )
    )
    assert expert == pytest.approx(contract.expert, abs=1e-5)
    assert rand <= contract.random_at_most


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_500_adversarial_actions_raise_nothing(name):
    gym = get_gym(name)
    tasks = gym.build_tasks()[CONTRACTS[name].fuzz_split]
    assert run(fuzz_env(gym.make_env, GymContext(), tasks, 500)) > 5
