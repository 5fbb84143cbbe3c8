"""Training through the gateway against the built-in turn loop, on the same workload, on CPU.

Workload: the guess gym's tasks (numbers 1..8), the tiny model (tiny:qwen2-1m) behind the hf
engine, 12 new tokens a turn, at most 4 turns, 8 tasks a step, 4 samples each (GRPO groups of 4).
Both sides run the trainer's own parts on one CPU rank, as B11 does: `PartialRollouts` (the
synchronous step), `EngineSync`, `SeededPolicy`, `collect`, `score` /
`group_relative_advantages` / `with_inputs`, one `update` and the weight push:
- builtin: the gym's own turn loop (`mua.rollout.runner`);
- gateway: a program gym whose program (`bench._b12_agent.play`, an entry point) plays the same
  game over HTTP through the gateway, posting plain JSON chat requests: same prompts, same
  bracket reader, same env, same seeds, so the sides sample the same conversations;
- gateway_sdk: the same with the `openai` SDK as the client (`play_sdk`): what a typical harness
  adds on top, its client's own CPU per request, in the same process as the engine here;
- gateway_responses, gateway_messages: the same game as plain JSON over the Responses API
  (`play_responses`) and Anthropic's Messages API (`play_messages`).
Each side has its own model, optimizer and engine from the same seed; their steps alternate
(builtin, gateway, gateway_sdk, gateway_responses, gateway_messages, builtin, ...) so load on the shared machine hits all alike; one
untimed warm-up step each. The guess reward gives groups variance; B12 measures throughput.

Metrics: `samples_per_s_vs_builtin` (trained samples per second, gateway over builtin; bar
>= 0.8), `sdk_samples_per_s_vs_builtin`, `responses_samples_per_s_vs_builtin` and
`messages_samples_per_s_vs_builtin` (the other gateway sides over builtin, reported), each side's
`samples_per_s`; exactness: `gateway_untrained_sampled_tokens` (tokens the engine sampled for
the programs of every gateway side minus tokens the steps trained, summed over the steps, with
the trained ones checked to be the sampled ones id by id, every step; bar `<= 0`) and
`same_streams_frac` (share of the gateway side's trajectories whose token stream is identical
to the built-in side's; `responses_same_streams_frac`, `messages_same_streams_frac` the same for
those sides).
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from bench.common import load_1min, require_same_work, require_work

ID = "B12"
BAR = {"samples_per_s_vs_builtin": ">= 0.8", "gateway_untrained_sampled_tokens": "<= 0"}
MODEL = "tiny:qwen2-1m"
STEPS, TASKS_PER_STEP, N, MAX_TURNS, NEW_TOKENS = 8, 8, 4, 4, 12


class _Counting:
    """The engine as the policy sees it, keeping each step's sampled ids."""

    def __init__(self, engine):
        self.engine = engine
        self.sampled: list[list[int]] = []

    async def generate(self, request):
        result = await self.engine.generate(request)
        self.sampled.append(list(result.token_ids))
        return result

    async def close(self):
        return None


class _Tasks:
    def __init__(self, label: str, tasks):
        self.label, self.tasks, self.draws = label, tasks, 0

    def next_labelled(self, k: int):
        out = [(self.label, self.tasks[(self.draws + i) % len(self.tasks)]) for i in range(k)]
        self.draws += k
        return out


def _side(name: str):
    import torch

    from mua.config.gyms import GymConfig, ProgramConfig
    from mua.config.model import ModelConfig
    from mua.config.rollout import RolloutConfig
    from mua.config.train import GRPOConfig, OptimConfig, ParallelConfig
    from mua.engines.hf.colocated import HFColocated
    from mua.engines.hf.hf_engine import HFEngine
    from mua.gym import GymContext, get_gym
    from mua.gym.mix import GymRun
    from mua.models import load_model, load_tokenizer
    from mua.rollout.policies import SeededPolicy
    from mua.run import driven
    from mua.train.engine_sync import EngineSync
    from mua.train.optim import build_optimizer, build_scheduler
    from mua.train.partial_rollouts import PartialRollouts
    from mua.train.trained_model import load_trained_lm

    torch.manual_seed(0)
    tok = load_tokenizer(MODEL)
    parallel, optim = ParallelConfig(), OptimConfig(lr=1e-4)
    cfg = RolloutConfig(
        n=N, max_new_tokens_per_turn=NEW_TOKENS, max_total_tokens=1024, max_turns=MAX_TURNS
    )
    model = load_trained_lm(
        SimpleNamespace(model=ModelConfig(path=MODEL), parallel=parallel), "cpu"
    )
    optimizer = build_optimizer(model.parameters(), optim)
    engine = HFEngine(
        load_model(MODEL, dtype="float32", seed=0),
        device="cpu",
        copy_model=False,
        pad_token_id=tok.pad_token_id or 0,
    )
    counting = _Counting(engine)
    spec = get_gym("guess")
    options = {"max_number": 8, "num_train": 64, "num_test": 0}
    tasks = spec.build_tasks(None, seed=0, options=options)["train"]
    target = {
        "gateway": "bench._b12_agent:play",
        "gateway_sdk": "bench._b12_agent:play_sdk",
        "gateway_responses": "bench._b12_agent:play_responses",
        "gateway_messages": "bench._b12_agent:play_messages",
    }
    program = ProgramConfig(entry_point=target[name], timeout_s=120) if name in target else None
    entry = GymConfig(name="guess", program=program)
    return SimpleNamespace(
        name=name,
        tok=tok,
        algo=GRPOConfig(score="sum", gamma=1.0),
        parallel=parallel,
        cfg=cfg,
        model=model,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, optim, STEPS + 1),
        engine=engine,
        counting=counting,
        sync=EngineSync(HFColocated(engine, parallel.weight_push_bucket_mb), model),
        policy=SeededPolicy.for_rollout(counting, cfg, "bracket", seed=0),
        run=driven(GymRun("guess", spec, GymContext(), cfg, N, entry=entry)),
        tasks=_Tasks("guess", tasks),
        carry=PartialRollouts(1.0, 0),
        totals={"wall_s": 0.0, "samples": 0.0, "rollout_s": 0.0},
        streams=[],
        untrained=0,
    )


def _step(side, step: int, dist) -> None:
    from mua.train.policy_update import update
    from mua.train.rl_batch import group_relative_advantages, score, with_inputs

    side.counting.sampled.clear()
    t0 = time.perf_counter()
    out = side.carry.rollout(
        sampler=side.tasks, tasks_per_step=TASKS_PER_STEP, runs={"guess": side.run},
        sync=side.sync, policy=side.policy, tokenizer=side.tok, rollout_cfg=side.cfg,
        step=step, dist=dist,
    )  # fmt: skip
    t1 = time.perf_counter()
    trajectories = out.trajectories
    batch = score(trajectories, side.algo, rank=0, world_size=1, n=N)
    advantages, _ = group_relative_advantages(batch, side.algo)
    samples = with_inputs(batch.samples, advantages, None, None)
    require_same_work(ID, f"{side.name} step {step}: trajectories", side=len(trajectories),
                      workload=TASKS_PER_STEP * N)  # fmt: skip
    trained = [t for s in samples for t, m in zip(s.token_ids, s.loss_mask, strict=True) if m]
    require_work(ID, f"{side.name} step {step}", trained_tokens=len(trained))
    update(
        side.model, side.optimizer, side.scheduler, None, samples, algo=side.algo,
        parallel=side.parallel, grad_clip=1.0, global_batch=TASKS_PER_STEP * N, temperature=1.0,
        dist=dist, train_policy=True, with_ref=False, old_from_forward=True,
    )  # fmt: skip
    side.sync.push_weights()
    t2 = time.perf_counter()
    sampled = sorted(tuple(s) for s in side.counting.sampled)
    if side.name != "builtin":  # every sampled id trained, in order within its turn
        turns = sorted(
            tuple(
                t.token_ids[i]
                for i in range(len(t.token_ids))
                if t.loss_mask[i] and t.turn_index[i] == k
            )
            for t in batch.kept
            for k in range(t.num_turns)
        )
        if turns != sampled:
            raise AssertionError(f"{ID}: step {step} trained tokens the engine did not sample")
    side.untrained_step = sum(len(s) for s in sampled) - len(trained)
    if step == 0:
        return
    side.untrained += side.untrained_step
    side.totals["wall_s"] += t2 - t0
    side.totals["rollout_s"] += t1 - t0
    side.totals["samples"] += len(samples)
    side.streams.append({(t.group_id, t.sample_index): tuple(t.token_ids) for t in trajectories})


def run():
    import torch

    from mua.distributed import DistInfo

    torch.set_num_threads(1)
    dist = DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"), backend="gloo")
    os.environ["B12_MAX_TURNS"] = str(MAX_TURNS)
    names = ["builtin", "gateway", "gateway_sdk", "gateway_responses", "gateway_messages"]
    sides = [_side(name) for name in names]
    for step in range(STEPS + 1):
        for side in sides:
            _step(side, step, dist)
    builtin, gateway, sdk, responses, messages = sides

    def same_streams(other) -> float:
        same = total = 0
        for a, b in zip(builtin.streams, other.streams, strict=True):
            for key, stream in a.items():
                total += 1
                same += int(b.get(key) == stream)
        return same / max(total, 1)

    def rate(side) -> float:
        return side.totals["samples"] / side.totals["wall_s"]

    metrics = {
        "samples_per_s_vs_builtin": rate(gateway) / rate(builtin),
        "sdk_samples_per_s_vs_builtin": rate(sdk) / rate(builtin),
        "responses_samples_per_s_vs_builtin": rate(responses) / rate(builtin),
        "messages_samples_per_s_vs_builtin": rate(messages) / rate(builtin),
        "gateway_untrained_sampled_tokens": float(sum(s.untrained for s in sides[1:])),
        "same_streams_frac": same_streams(gateway),
        "responses_same_streams_frac": same_streams(responses),
        "messages_same_streams_frac": same_streams(messages),
    }
    for side in sides:
        metrics[f"{side.name}_samples_per_s"] = side.totals["samples"] / side.totals["wall_s"]
        metrics[f"{side.name}_rollout_s_per_step"] = side.totals["rollout_s"] / STEPS
    notes = (
        f"{STEPS} steps a side after a warm-up, steps alternating; {TASKS_PER_STEP} tasks x {N} "
        f"samples a step, at most {MAX_TURNS} turns of {NEW_TOKENS} tokens; gateway sides: entry "
        f"points over HTTP (plain JSON chat completions; openai SDK; plain JSON Responses API; "
        f"plain JSON Messages API); 1-minute load at the end {load_1min():.2f}"
    )
    return metrics, notes
