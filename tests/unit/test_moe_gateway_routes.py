"""Routing replay for program gyms: the hf engine's routed experts reach a gateway session's
token record, the trajectory, its JSON form and the trained samples, aligned with the tokens."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from mua.config.gyms import GymConfig, ProgramConfig
from mua.config.rollout import RolloutConfig
from mua.config.train import GRPOConfig
from mua.engines.hf.hf_engine import HFEngine
from mua.gym import GymContext, get_gym
from mua.gym.mix import GymRun
from mua.models import load_model, load_tokenizer, moe_replay
from mua.rollout.collect import run_rollouts
from mua.rollout.policies import EnginePolicy
from mua.rollout.trajectory import Trajectory
from mua.run import driven
from mua.train.policy_update import sample_replay
from mua.train.rl_batch import score

PRESET = "tiny:qwen3moe-2m"


@pytest.fixture(scope="module")
def played():
    """Two guess games played by the example agent (an in-process entry point) against the
    tiny mixture of experts, through the gateway."""
    torch.set_num_threads(1)
    model, tokenizer = load_model(PRESET, seed=0), load_tokenizer(PRESET)
    options = {"max_number": 8, "num_train": 1, "num_test": 0}
    task = get_gym("guess").build_tasks(None, seed=0, options=options)["train"][0]
    cfg = RolloutConfig(
        n=2, max_turns=4, max_total_tokens=2048, max_new_tokens_per_turn=12, max_concurrency=2
    )
    program = ProgramConfig(entry_point="examples.gateway_agents.guess_agent:play")
    entry = GymConfig(name="guess", program=program)
    run = driven(GymRun("guess", get_gym("guess"), GymContext(), cfg, 2, entry=entry))
    policy = EnginePolicy(HFEngine(model, max_batch_size=4), tool_parser="hermes", seed=0)
    trajs = asyncio.run(
        run_rollouts([task], policy=policy, tokenizer=tokenizer, rollout_cfg=cfg, runs=[run])
    )
    return model, trajs


def test_a_program_gyms_trajectory_keeps_the_engines_routes_of_every_fed_token(played):
    model, trajs = played
    for traj in trajs:
        assert traj.termination == "done" and traj.num_turns >= 1
        routes = traj.record.routes
        assert routes is not None, "the gateway dropped the engine's routed experts"
        # every token but the last was fed to the engine, routed as the model itself routes it
        assert routes.dtype == np.uint8 and routes.shape == (len(traj.token_ids) - 1, 4, 2)
        with torch.no_grad(), moe_replay.routing(model) as capture:
            model(input_ids=torch.tensor([traj.token_ids[:-1]]), use_cache=False)
        own = capture.stacked().numpy()
        assert np.array_equal(np.sort(routes, -1), np.sort(own, -1))
        back = Trajectory.from_json(traj.to_json())
        assert back.record == traj.record and np.array_equal(back.record.routes, routes)


def test_a_program_gyms_samples_are_trained_with_replay(played):
    _, trajs = played
    algo = GRPOConfig(routing_replay="r3", dynamic_sampling=False)
    batch = score(trajs, algo, rank=0, world_size=1, n=2)
    assert len(batch.samples) == 2
    for sample, traj in zip(batch.samples, trajs, strict=True):
        assert sample.routes.shape == (len(traj.token_ids), 4, 2)
        assert np.array_equal(sample.routes[:-1], traj.record.routes)
        assert (sample.routes[-1] == moe_replay.no_route(np.uint8)).all()  # never fed
    replay = sample_replay(batch.samples, algo)
    assert replay is not None and replay.enforce
