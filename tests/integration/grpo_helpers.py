"""Helpers of the RL training tests: guess tasks, a warm-started tiny policy, GRPO/PPO recipes.

A randomly initialised tiny model never writes `[answer] N`, so every reward would be 0 and every
advantage 0. The warm start is one short SFT run on conversations of a careless random guesser
(right format, guesses in 1..2N for a game over 1..N): GRPO then has reward variance to learn from
(staying in range, not repeating guesses, following higher/lower). Everything is seeded; the warm
model's weights agree across machines only to float rounding, so tests compare runs made from it
on the same machine, never with numbers stored elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import yaml

MAX_NUMBER = 4
MODEL = "tiny:qwen2-1m"


def write_guess_tasks(folder: Path, num_train: int = 64, num_test: int = 8) -> tuple[Path, Path]:
    from mua.gym import get_gym
    from mua.gym.taskfile import write_tasks

    splits = get_gym("guess").build_tasks(
        None,
        seed=0,
        options={"max_number": MAX_NUMBER, "num_train": num_train, "num_test": num_test},
    )
    return write_tasks(splits["train"], folder / "train.parquet"), write_tasks(
        splits["test"], folder / "test.parquet"
    )


def write_random_guesser_data(
    folder: Path, num: int = 96, seed: int = 0, guess_max: int = 2 * MAX_NUMBER
) -> Path:
    """Conversations of a careless player guessing uniformly in 1..guess_max (twice the game's range:
    half its guesses are out of range), rendered with the tiny tokenizer."""
    from mua.config.rollout import RolloutConfig
    from mua.gym import GymContext, get_gym
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts
    from mua.rollout.policies import MessagePolicy

    rng = random.Random(seed)

    async def act(messages, task):
        return {"role": "assistant", "content": f"[answer] {rng.randint(1, guess_max)}"}

    gym = get_gym("guess")
    tasks = gym.build_tasks(
        None, seed=seed + 1, options={"max_number": MAX_NUMBER, "num_train": num, "num_test": 0}
    )["train"]
    cfg = RolloutConfig(n=1, max_total_tokens=512, max_turns=4, max_concurrency=1)
    trajs = asyncio.run(
        run_rollouts(
            tasks,
            n=1,
            policy=MessagePolicy(act, tool_parser="bracket"),
            gym_spec=gym,
            gym_ctx=GymContext(),
            tokenizer=load_tokenizer(MODEL),
            rollout_cfg=cfg,
        )
    )
    path = folder / "random_guesser.jsonl"
    with open(path, "w") as f:
        for t in trajs:
            f.write(json.dumps({"token_ids": t.token_ids, "loss_mask": t.loss_mask}) + "\n")
    return path


def warm_model(folder: Path, steps: int = 48, batch_size: int = 16, lr: float = 3e-3) -> Path:
    """SFT the tiny model on the random guesser's conversations (one process, plain AdamW); returns
    its HF folder. Done in-process rather than through `mua train` to keep the tests fast."""
    import torch

    torch.set_num_threads(1)
    from mua.models import load_model, load_tokenizer, save_hf
    from mua.train.packed_batch import first_token_mask, pack, plan_micro_batches
    from mua.train.packed_forward import packed_logits, token_logprobs

    out = folder / "hf"
    if (out / "config.json").exists():
        return out
    folder.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in write_random_guesser_data(folder).read_text().splitlines()]
    torch.manual_seed(0)
    model = load_model(MODEL, dtype="float32", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    order = random.Random(0)
    for _ in range(steps):
        batch = order.sample(rows, batch_size)
        seqs = [r["token_ids"] for r in batch]
        masks = [r["loss_mask"] for r in batch]
        total = sum(sum(m[1:]) for m in masks)
        opt.zero_grad()
        for group in plan_micro_batches(
            [len(q) for q in seqs], 256
        ):  # short rows: attention is O(T^2)
            mb = pack(seqs, group)
            mask = torch.tensor([x for i in group for x in masks[i]], dtype=torch.float32)
            mask = mask * first_token_mask(mb.lengths)
            logp = token_logprobs(packed_logits(model, mb), mb.input_ids, mb.lengths)
            (-(logp * mask).sum() / total).backward()
        opt.step()
    save_hf(model, load_tokenizer(MODEL), out, "float32")
    return out


def write_rl_recipe(
    folder: Path, model: Path, train: Path, test: Path | None = None, name: str = "rl.yaml", **extra
) -> Path:
    recipe = {
        "model": {"path": str(model), "tool_parser": "bracket"},
        "gym": {"name": "guess"},
        "data": {
            "train_files": [str(train)],
            "test_files": [str(test)] if test else [],
            "tasks_per_step": 4,
        },
        "rollout": {"n": 4, "max_new_tokens_per_turn": 8, "max_total_tokens": 160, "max_turns": 2},
        # the pre-UserRL-default score and γ, with which these runs were sized
        "algo": {"kind": "grpo", "score": "sum", "gamma": 1.0},
        "optim": {"lr": 1e-3},
        "checkpoint": {"save_freq": 1, "keep_last": 2},
        "track": {"transcripts_per_step": 1},
        "total_steps": 3,
        "run_dir": str(folder / "run"),
    }
    for key, value in extra.items():
        other_algo = key == "algo" and value.get("kind", "grpo") != "grpo"  # no GRPO-only keys
        merge = isinstance(value, dict) and not other_algo
        recipe[key] = {**recipe.get(key, {}), **value} if merge else value
    path = folder / name
    path.write_text(yaml.safe_dump(recipe))
    return path


def shared_guess_setup(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(warm model, train tasks, test tasks), built once per test session and shared by modules."""
    folder = tmp_path_factory.getbasetemp() / "guess-shared"
    folder.mkdir(exist_ok=True)
    train, test = folder / "train.parquet", folder / "test.parquet"
    if not (train.exists() and test.exists()):
        train, test = write_guess_tasks(folder)
    return warm_model(folder / "warm"), train, test
