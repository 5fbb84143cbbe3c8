"""tau2 under `profile: leaderboard`: what the agent's and the user's HTTP requests carry
besides messages and tools, captured by a fake OpenAI-compatible server on 127.0.0.1.

tau2 seeds every trial: `random.seed(DEFAULT_SEED)` (300) then one `randint(0, 1000000)` per
trial, sent as `seed` with every agent and user request of that trial; it sends
`tool_choice: "auto"` whenever a request offers tools (never otherwise)."""

from __future__ import annotations

import asyncio
import random
import re
from types import SimpleNamespace

import pytest

from gyms.tau2 import GYM
from gyms.tau2.leaderboard.profile import trial_seed
from gyms.tau2.options import check_options
from mua.config.rollout import RolloutConfig
from mua.config.users import LLMUserConfig
from mua.errors import UsageError
from mua.gym import GymContext
from mua.llm.llm_client import LLMClient
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.gyms.tau2_checkout import tau2_checkout  # noqa: F401

KEY_ENV = "MUA_TEST_TAU2_KEY"
TRIAL_SEEDS = [626729, 373753, 361454, 1567]  # random.seed(300); randint(0, 1000000) per trial


def _reply(request: dict) -> str:
    """Each side says the seed it was sent, so a trajectory shows its requests' seeds."""
    if request["model"] == "agent-model":
        return f"Goodbye (agent seed {request.get('seed')}). ###STOP###"
    return f"My phone has no service (user seed {request.get('seed')})."


def _rollouts(checkout, server: FakeOpenAIServer, tasks, n: int, **options):
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts_sync
    from mua.rollout.openai_policy import OpenAIPolicy

    agent = OpenAIPolicy.from_config(
        RolloutConfig(
            engine="openai",
            openai={"base_url": server.base_url, "api_key_env": KEY_ENV},
            max_new_tokens_per_turn=64,
        ),
        model="agent-model",
    )
    user = LLMUserConfig(
        kind="llm", base_url=server.base_url, api_key_env=KEY_ENV, model="user-model"
    )
    options = {"data_dir": str(checkout), "profile": "leaderboard", "basis": "no_nl", **options}
    return run_rollouts_sync(
        tasks,
        n=n,
        policy=agent.as_message_policy(),
        gym_spec=GYM,
        gym_ctx=GymContext(options=options, user_kind="llm", llm=LLMClient(user)),
        tokenizer=load_tokenizer("tiny:qwen2-1m"),
        rollout_cfg=RolloutConfig(max_turns=4, max_total_tokens=65536, call_timeout_s=30),
    )


def _seeds_said(traj) -> list[tuple[str, int]]:
    said = " ".join(m.get("content") or "" for m in traj.messages)
    return [(side, int(seed)) for side, seed in re.findall(r"(agent|user) seed (\d+)", said)]


def _first_task(checkout, domain: str):
    return GYM.build_tasks(str(checkout), 0, {"domain": domain})["base"][0]


def test_every_request_carries_the_trials_seed_and_tool_choice(
    tau2_checkout,  # noqa: F811
    monkeypatch,
):
    monkeypatch.setenv(KEY_ENV, "test-key")
    tasks = [_first_task(tau2_checkout, d) for d in ("telecom", "retail")]
    with FakeOpenAIServer(_reply) as server:
        trajectories = _rollouts(tau2_checkout, server, tasks, n=2)
    assert len(trajectories) == 4
    for traj in trajectories:
        seed = TRIAL_SEEDS[traj.sample_index]
        assert _seeds_said(traj) == [("user", seed), ("agent", seed)], traj.task_id
    bodies = [r["json"] for r in server.requests]
    assert len(bodies) == 8  # one user and one agent request per trajectory
    for body in bodies:
        agent = body["model"] == "agent-model"
        # of the two tasks' users, telecom's has tools of its own
        offers_tools = agent or "Domain: telecom" in body["messages"][0]["content"]
        assert bool(body.get("tools")) == offers_tools
        assert body.get("tool_choice") == ("auto" if offers_tools else None)
    assert sorted(b["seed"] for b in bodies) == sorted(TRIAL_SEEDS[:2] * 4)


def test_trial_seeds_are_tau2s():
    assert [trial_seed(300, t) for t in range(4)] == TRIAL_SEEDS
    rng = random.Random(7)
    assert [trial_seed(7, t) for t in range(3)] == [rng.randint(0, 1000000) for _ in range(3)]


class _Endpoint:
    """Records the user's requests (keyword arguments included); answers with text."""

    def __init__(self):
        self.requests: list[dict] = []

    async def chat(self, messages, parse=None, **kwargs):
        self.requests.append(kwargs)
        message = SimpleNamespace(content="Hello.", tool_calls=None)
        return message, parse(message)


def test_the_base_seed_is_an_option(tau2_checkout):  # noqa: F811
    task = _first_task(tau2_checkout, "airline")
    options = {"data_dir": str(tau2_checkout), "profile": "leaderboard", "basis": "no_nl"}
    for seed, trial in ((None, 3), (7, 2)):
        llm = SimpleNamespace(
            endpoint=_Endpoint(), cfg=SimpleNamespace(temperature=0.0, max_tokens=None)
        )
        ctx = GymContext(
            options={**options, **({"seed": seed} if seed is not None else {})},
            user_kind="llm",
            llm=llm,
            sample_index=trial,
        )
        reset = asyncio.run(GYM.make_env(ctx).reset(task))
        want = trial_seed(300 if seed is None else seed, trial)
        assert reset.request == {"tool_choice": "auto", "seed": want}
        assert [r["seed"] for r in llm.endpoint.requests] == [want]
        assert "tool_choice" not in llm.endpoint.requests[0]  # airline's user has no tools


def test_a_seed_needs_the_leaderboard_profile(tau2_checkout):  # noqa: F811
    options = {"data_dir": str(tau2_checkout), "seed": 7}
    for bad, message in (
        ({}, "gym.options.seed seeds tau2's leaderboard requests; set gym.options.profile"),
        ({"profile": "leaderboard", "seed": -1}, "gym.options.seed must be a non-negative"),
    ):
        with pytest.raises(UsageError, match=message):
            check_options({**options, **bad})
