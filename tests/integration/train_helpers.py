"""Helpers of the training and merge tests: tiny SFT data, recipes, running `mua train`, reading
MLflow, running any `mua` verb from a folder, writing a DCP checkpoint without torchrun, and the logits of a Hugging Face folder."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.conftest import fresh_checkout, installed_mua, user_env

REPO = Path(__file__).resolve().parents[2]


def write_sft_data(folder: Path, num: int = 16, seed: int = 0) -> Path:
    rng = random.Random(seed)
    path = folder / "sft.jsonl"
    with open(path, "w") as f:
        for _ in range(num):
            n = rng.randint(10, 40)
            ids = [rng.randint(3, 1999) for _ in range(n)]
            k = rng.randint(3, n - 2)
            f.write(json.dumps({"token_ids": ids, "loss_mask": [0] * k + [1] * (n - k)}) + "\n")
    return path


def write_sft_recipe(folder: Path, data: Path, **extra) -> Path:
    recipe = {
        "model": {"path": "tiny:qwen2-1m"},
        "data": {"train_files": [str(data)]},
        "algo": {"kind": "sft", "batch_size": 8, "epochs": 4},
        "optim": {"lr": 1e-4},
        "checkpoint": {"save_freq": 1, "keep_last": 2},
        "total_steps": 4,
        "run_dir": str(folder / "run"),
    }
    for key, value in extra.items():
        recipe[key] = {**recipe.get(key, {}), **value} if isinstance(value, dict) else value
    path = folder / "sft.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def run_train(recipe: Path, *args: str, env_extra: dict | None = None, timeout_s: float = 300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", **(env_extra or {})}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "mua.cli.main", "train", str(recipe), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout_s,
    )


def train_recipe(tmp_path: Path, recipe: dict, name: str, timeout_s: float = 600) -> Path:
    """`mua train` of `recipe` (written as <name>.yaml) to its end; its run dir, with one loss
    logged per step checked."""
    import yaml

    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    res = run_train(path, timeout_s=timeout_s)
    assert res.returncode == 0, res.stderr[-3000:]
    run = Path(recipe["run_dir"])
    assert len(metric_history(run, "loss")) == recipe["total_steps"]
    return run


def program_grpo_recipe(tmp_path: Path, gyms: list[dict], data: dict, rollout: dict, **extra):
    """Two GRPO steps of the tiny model (Hermes tool calls) over program `gyms`."""
    return {
        "model": {"path": "tiny:qwen2-1m", "tool_parser": "hermes"},
        "gyms": gyms,
        "data": data,
        "rollout": {"n": 2, **rollout},
        "algo": {"kind": "grpo", "score": "sum"},
        "optim": {"lr": 1e-3},
        "checkpoint": {"save_freq": 2, "keep_last": 1},
        "total_steps": 2,
        "run_dir": str(tmp_path / "run"),
        **extra,
    }


def check_gateway_tokens_trained(run: Path) -> None:
    """Every token the gateway sampled and kept was trained, in every step."""
    sampled = metric_history(run, "gateway/sampled_tokens")
    dropped = metric_history(run, "gateway/dropped_tokens")
    trained = metric_history(run, "tokens/trained")
    assert [s - d for s, d in zip(sampled, dropped, strict=True)] == trained
    assert all(t > 0 for t in trained)


def run_mua_in(folder: Path, *args: str, timeout_s: float = 2700) -> None:
    """`mua ARGS` as a user runs it from `folder` laid out as a fresh checkout (recipes' relative
    paths land there): the installed `mua`, no PYTHONPATH; fails the test with the output's tail
    when it fails."""
    res = subprocess.run(
        [installed_mua(), *args],
        cwd=fresh_checkout(folder),
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert res.returncode == 0, (
        f"mua {' '.join(args)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )


def sft_run(folder: Path, *args: str, **recipe_extra) -> Path:
    """The run dir of a successful `mua train` of the tiny SFT recipe (plus `recipe_extra`) in
    `folder`; `args` go to the command line."""
    res = run_train(write_sft_recipe(folder, write_sft_data(folder), **recipe_extra), *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return folder / "run"


def run_merge(*args) -> subprocess.CompletedProcess:
    """`mua merge ARGS` in a subprocess (output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "mua.cli.main", "merge", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def metric_history(run_dir: Path, key: str) -> list[float]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir.resolve() / 'mlflow.db'}")
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    hist = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
    return [m.value for m in hist]


def final_params(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "hf" / "final" / "model.safetensors"))


def write_dcp_checkpoint(model, step_dir: Path, tokenizer, state: dict | None = None) -> None:
    """`model` (or `state` under its config) as the trainer lays out `global_step_N`, replacing
    what `step_dir` held."""
    import torch
    import torch.distributed.checkpoint as dcp

    shutil.rmtree(step_dir, ignore_errors=True)
    step_dir.mkdir(parents=True)
    if state is None:
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    dcp.save({"model": state}, checkpoint_id=str(step_dir), no_dist=True)
    model.config.save_pretrained(step_dir)
    model.generation_config.save_pretrained(step_dir)
    tokenizer.save_pretrained(step_dir)
    torch.save({"step": int(step_dir.name.rsplit("_", 1)[1])}, step_dir / "trainer_state.pt")


def hf_logits(folder: Path, ids):
    """Logits of the Hugging Face model in `folder` (float32, eval mode) for token `ids`."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=ids).logits


@contextmanager
def mua_serve(model, *args: str) -> Iterator[str]:
    """`mua serve --model MODEL --port 0 ARGS` in a process of its own: yields its URL once it
    listens, and stops it at the end."""
    env = {**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mua.cli.main", "serve", "--model", str(model), "--port", "0"]
        + list(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        line, deadline = "", time.monotonic() + 120
        while "http://" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "mua serve exited before printing its address"
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
