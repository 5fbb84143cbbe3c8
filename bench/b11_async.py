"""Asynchronous RL across steps (partial rollouts) against synchronous steps, on CPU.

Workload: a long-tailed multi-turn game. Each conversation lasts a log-normal number of
assistant turns (median 3, σ 0.8, at most 12) and every user reply comes over HTTP from a
scripted user server on 127.0.0.1 (`bench._b11_user_server`, another process) after a
log-normal delay (median 150 ms, σ 0.6). The policy is the tiny model (tiny:qwen2-1m) behind the
hf engine, 16 new tokens a turn; 8 tasks a step, 4 samples each (GRPO groups of 4).

Both modes run the trainer's own parts on one CPU rank: `EngineSync` (wake, serve, push),
`SeededPolicy`, the runner, `score` / `group_relative_advantages` / `with_inputs` and `update`
(one optimizer step of GRPO on every step's 32 samples), then the weight push:
- sync: `PartialRollouts` with oversample 1 (the trainer's synchronous step): each step rolls
  out its 8 groups and waits for the last one;
- async: `PartialRollouts` with oversample 2.0 (16 groups in flight), max_staleness 3 and the
  `tis` correction: each step trains the first 8 complete groups and carries the rest; a
  conversation waiting on its user when the step has its groups parks with the reply on its
  way (it arrives while the step trains).
20 steps each, sync first, after one untimed warm-up step each. The reward (1 when the last
turn's text has a length divisible by 3) only gives groups some variance: B11 measures
throughput, not learning.

Metrics: `samples_per_s_vs_sync` (trained samples per second, async over sync; bar ≥ 1.3),
each mode's `samples_per_s`, `engine_idle_frac` (share of the steps' wall time the engine's
serving thread was not admitting or decoding: rollout phases waiting on users, and the train
and push phases; the training run's `engine/idle_frac` is the same measure), and
the wall split per step (`rollout_s`, `train_s`, `push_s`), and async's mean staleness and
dropped-stale samples.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from bench.common import load_1min, require_same_work, require_work

ID = "B11"
BAR = {"samples_per_s_vs_sync": ">= 1.3"}
MODEL = "tiny:qwen2-1m"
STEPS, TASKS_PER_STEP, N = 20, 8, 4
TURNS_MEDIAN, TURNS_SIGMA, MAX_TURNS = 3.0, 0.9, 12
USER_MEDIAN_S, USER_SIGMA = 0.3, 0.5
NEW_TOKENS = 8
OVERSAMPLE, MAX_STALENESS = 2.0, 3
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _draw(key: str) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))


class _Gym:
    """The long-tailed game: turns per conversation and the user's replies over HTTP."""

    def __init__(self, url: str):
        from mua.http_session import LoopSessions

        self.url = url
        self.sessions = LoopSessions(url)
        self.made: dict[str, int] = {}

    def make_env(self, ctx):
        return _Env(self)


class _Env:
    def __init__(self, gym: _Gym):
        self.gym, self.turn = gym, 0

    async def reset(self, task):
        from mua.gym import ResetResult

        k = self.gym.made.get(task.task_id, 0)
        self.gym.made[task.task_id] = k + 1
        self.key = f"{task.task_id}/{k}"  # the k-th conversation of a task: the same in both modes
        # a task's length is log-normal; its conversations differ from it by at most one turn
        turns = math.exp(_draw(task.task_id).gauss(math.log(TURNS_MEDIAN), TURNS_SIGMA))
        jitter = _draw(self.key).choice((-1, 0, 1))
        self.turns = max(1, min(MAX_TURNS, round(turns) + jitter))
        return ResetResult(
            messages=[
                {"role": "system", "content": "Guess the number."},
                {"role": "user", "content": "I am thinking of a number from 1 to 100."},
            ]
        )

    async def step(self, action):
        from mua.gym import StepResult

        self.turn += 1
        session = await self.gym.sessions.get()
        async with session.post(
            f"{self.gym.url}/reply", json={"key": self.key, "turn": self.turn}
        ) as response:
            content = (await response.json())["content"]
        done = self.turn >= self.turns
        reward = float(done and len(action.text) % 3 == 0)
        return StepResult(messages=[{"role": "user", "content": content}], reward=reward, done=done)

    async def close(self):
        return None


class _Tasks:
    def __init__(self):
        self.draws = 0

    def next_labelled(self, k: int):
        from mua.gym import Task

        out = []
        for _ in range(k):
            out.append(
                (
                    "b11",
                    Task(task_id=f"t{self.draws}", gym="b11", split="train", prompt=[], payload={}),
                )
            )
            self.draws += 1
        return out


def _run_mode(mode: str, url: str) -> dict[str, float]:
    import torch

    from mua.config.model import ModelConfig
    from mua.config.rollout import RolloutConfig
    from mua.config.train import GRPOConfig, OptimConfig, ParallelConfig
    from mua.distributed import DistInfo
    from mua.engines.hf.colocated import HFColocated
    from mua.engines.hf.hf_engine import HFEngine
    from mua.gym import GymContext, GymSpec
    from mua.gym.mix import GymRun
    from mua.models import load_model, load_tokenizer
    from mua.rollout.policies import SeededPolicy
    from mua.train.engine_sync import EngineSync
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.partial_rollouts import PartialRollouts
    from mua.train.policy_update import update
    from mua.train.rl_batch import group_relative_advantages, score, with_inputs
    from mua.train.trained_model import load_trained_lm

    torch.manual_seed(0)
    tok = load_tokenizer(MODEL)
    dist = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    is_async = mode == "async"
    algo = GRPOConfig(
        score="sum",
        gamma=1.0,
        max_staleness=MAX_STALENESS if is_async else 0,
        correction="tis" if is_async else "none",
    )
    parallel, optim = ParallelConfig(), OptimConfig(lr=1e-4)
    cfg = RolloutConfig(
        n=N,
        max_new_tokens_per_turn=NEW_TOKENS,
        max_total_tokens=1024,
        max_turns=MAX_TURNS,
        oversample=OVERSAMPLE if is_async else 1.0,
    )
    model = load_trained_lm(
        SimpleNamespace(model=ModelConfig(path=MODEL), parallel=parallel), "cpu"
    )
    optimizer = build_optimizer(model.parameters(), optim)
    scheduler = build_scheduler(optimizer, optim, STEPS + 1)
    engine = HFEngine(
        load_model(MODEL, dtype="float32", seed=0),
        device="cpu",
        copy_model=False,
        pad_token_id=tok.pad_token_id or 0,
    )
    sync = EngineSync(HFColocated(engine, parallel.weight_push_bucket_mb), model)
    policy = SeededPolicy.for_rollout(engine, cfg, "bracket", seed=0)
    gym = _Gym(url)
    spec = GymSpec(name="b11", description="", make_env=gym.make_env, build_tasks=lambda *a: {})
    route = GymRun("b11", spec, GymContext(), cfg, N)
    tasks, carry = _Tasks(), PartialRollouts(cfg.oversample, algo.max_staleness)
    totals = {"rollout_s": 0.0, "train_s": 0.0, "push_s": 0.0, "samples": 0.0, "wall_s": 0.0}
    staleness, dropped = [], 0.0
    for step in range(STEPS + 1):
        busy0 = engine.stats["busy_s"]  # the serving thread's seconds admitting and decoding
        t0 = time.perf_counter()
        out = carry.rollout(
            sampler=tasks, tasks_per_step=TASKS_PER_STEP, runs={"b11": route},
            sync=sync, policy=policy, tokenizer=tok, rollout_cfg=cfg, step=step, dist=dist,
        )  # fmt: skip
        trajectories = out.trajectories
        if is_async:
            staleness += out.staleness
            dropped += out.counts["dropped_stale_samples"]
        t1 = time.perf_counter()
        batch = score(trajectories, algo, rank=0, world_size=1, n=N)
        advantages, _ = group_relative_advantages(batch, algo)
        samples = with_inputs(batch.samples, advantages, None, None)
        # both modes train every step's 8 x 4 samples, with trained tokens
        require_same_work(
            ID, f"{mode} step {step}: samples", mode=len(trajectories), workload=TASKS_PER_STEP * N
        )
        require_work(
            ID, f"{mode} step {step}", trained_tokens=sum(sum(s.loss_mask) for s in samples)
        )
        update(
            model, optimizer, scheduler, None, samples, algo=algo, parallel=parallel,
            grad_clip=1.0, global_batch=TASKS_PER_STEP * N, temperature=1.0, dist=dist,
            train_policy=True, with_ref=False, old_from_forward=True,
        )  # fmt: skip
        t2 = time.perf_counter()
        sync.push_weights()
        t3 = time.perf_counter()
        if step == 0:
            continue  # warm-up
        totals["rollout_s"] += t1 - t0
        totals["train_s"] += t2 - t1
        totals["push_s"] += t3 - t2
        totals["wall_s"] += t3 - t0
        totals["samples"] += len(trajectories)
        totals.setdefault("busy_s", 0.0)
        totals["busy_s"] += engine.stats["busy_s"] - busy0
    carry.close()  # the parked conversations' envs, and the loop they ran on
    out = {
        "samples_per_s": totals["samples"] / totals["wall_s"],
        "engine_idle_frac": 1.0 - totals["busy_s"] / totals["wall_s"],
        "rollout_s_per_step": totals["rollout_s"] / STEPS,
        "train_s_per_step": totals["train_s"] / STEPS,
        "push_s_per_step": totals["push_s"] / STEPS,
    }
    if is_async:
        out["staleness_mean"] = sum(staleness) / max(len(staleness), 1)
        out["dropped_stale_samples"] = dropped
    return out


def run():
    import torch

    torch.set_num_threads(1)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench._b11_user_server", str(port), str(USER_MEDIAN_S),
         str(USER_SIGMA)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    try:
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError("the B11 user server did not start")
        url = f"http://127.0.0.1:{port}"
        sync = _run_mode("sync", url)
        async_ = _run_mode("async", url)
    finally:
        server.terminate()
        server.wait(timeout=10)
    metrics = {"samples_per_s_vs_sync": async_["samples_per_s"] / sync["samples_per_s"]}
    for name, part in (("sync", sync), ("async", async_)):
        metrics.update({f"{name}_{k}": v for k, v in part.items()})
    notes = (
        f"{STEPS} steps each after a warm-up; {TASKS_PER_STEP} tasks x {N} samples a step; "
        f"async: oversample {OVERSAMPLE}, max_staleness {MAX_STALENESS}, tis; "
        f"1-minute load at the end {load_1min():.2f}"
    )
    return metrics, notes
