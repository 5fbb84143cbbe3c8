"""B1: one GRPO step, single-turn: mua's trainer vs TRL's GRPOTrainer, same tiny Qwen2 models.

Workload (both sides): 8 chat prompts x 4 generations x at most 32 new tokens, temperature 1,
top_p 1, no top-k, one optimizer step (AdamW, lr 1e-5 constant, grad clip 1.0), beta = 0 (no
reference model), clip epsilon 0.2, group-normalised advantages, token-mean loss over the batch
(TRL's "dapo"), fp32, 2 threads, the same reward function (`bench._b1_task.reward_of`), the same
model weights and tokenizer (`mua.models`, seed 0). Models: tiny:qwen2-1m and tiny:qwen2-10m.

mua: a `Trainer` built from a GRPO recipe exactly as `mua train` builds it (a one-process gloo
group, where the trainer keeps the model unsharded because FSDP2 would shard nothing; an `hf`
engine with its own copy of the weights, running the model's own transformers forward); the timed
unit is `rl_step` (`mua.train.rl`): rollouts through the multi-turn runner, advantages, the
update, and the weight push into the engine. The recipe names the one-turn gym of
`bench._b1_task`, registered in this process. Every timed step of each side must have done the
work: 8 x 4 trajectories (completions) on both sides and trained tokens > 0 (`NoWorkTimed`
otherwise: a step that generated or trained nothing would time nothing).
TRL (trl 1.16, in bench/.venv, `bench._trl_side`): `GRPOTrainer.train()` with docs/benchmarks.md's
GRPOConfig (TRL's default gradient checkpointing left on), timed by a callback from step begin to
step end and paused between steps.

Settings that differ: mua pushes weights into its engine every step, prefills each prompt once
for its 4 samples, and in the update feeds each prompt once for its 4 samples (shared-prefix rows);
like TRL with num_iterations = 1 it takes old log-probs from the update's own forward and runs the
LM head only where completion tokens are predicted (in chunks of tokens, `mua.train.head_scores`).
Both processes run with glibc's default allocator settings. TRL generates with the training model
itself, left-padded, and recomputes activations (gradient checkpointing).
Steps alternate mua, TRL, mua, TRL ...: 3 warm-up rounds (both sides' step times fall over their
first rounds while allocators and caches settle), then the median of 11 (on a shared 2-core
machine one side's steps vary by 10-20% from round to round; 7 rounds left the ratio's median
moving by about 0.03 between runs).
step_ratio_vs_trl_* = mua's median step seconds / TRL's (bar <= 0.75, with portable code only:
no private torch API, no re-implemented model forward, no allocator tuning).
Without bench/.venv (or without trl in it) only mua's absolute step times are reported.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench import _b1_task as task
from bench.common import require_same_work, require_work

ID = "B1"
BAR = {"step_ratio_vs_trl_1m": "<= 0.75", "step_ratio_vs_trl_10m": "<= 0.75"}

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_PYTHON = REPO_ROOT / "bench" / ".venv" / "bin" / "python"
# MUA_B1_ROUNDS="warm-up,timed" (e.g. "2,5") shortens a run on a crowded machine
WARMUP_ROUNDS, TIMED_ROUNDS = (
    int(x) for x in os.environ.get("MUA_B1_ROUNDS", "3,11").split(",", 1)
)
MODELS = {"1m": task.MODEL_SMALL, "10m": task.MODEL_LARGE}
_DROPPED_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
)


class TRLWorker:
    """The TRL side in bench/.venv: one `step()` runs one GRPOTrainer step and returns its seconds."""

    def __init__(self, model_path: str, num_steps: int, log_path: Path):
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            OMP_NUM_THREADS=str(task.NUM_THREADS),
            PYTHONPATH=str(REPO_ROOT),
        )
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [str(BENCH_PYTHON), "-m", "bench._trl_side", model_path, str(num_steps + 1)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self.version = ""

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            tail = self.log_path.read_text()[-2000:]
            raise RuntimeError(f"the TRL side exited (code {self.proc.returncode}):\n{tail}")
        return json.loads(line)

    def wait_ready(self) -> None:
        self.version = self._read().get("trl", "")

    def step(self) -> dict[str, float]:
        """{"step_s": seconds of the step, "generation_s": its generation and scoring part}."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return {k: float(v) for k, v in self._read().items()}

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.proc.kill()
        finally:
            self._log.close()


def trl_available() -> bool:
    if not BENCH_PYTHON.exists():
        return False
    probe = subprocess.run([str(BENCH_PYTHON), "-c", "import trl"], capture_output=True)
    return probe.returncode == 0


def mua_recipe(model_path: str, task_file: Path, run_dir: Path):
    from mua.config.recipes import TrainRecipe

    return TrainRecipe.model_validate(
        {
            "run_dir": str(run_dir),
            "model": {"path": model_path, "seed": task.SEED},
            "gym": {"name": task.GYM_NAME},
            "data": {
                "train_files": [str(task_file)],
                "tasks_per_step": task.NUM_PROMPTS,
                "seed": task.SEED,
            },
            "rollout": {
                "engine": "hf",
                "n": task.NUM_GENERATIONS,
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": 0,
                "max_new_tokens_per_turn": task.MAX_NEW_TOKENS,
                "max_total_tokens": 512,
                "max_turns": 1,
            },
            "algo": {
                "kind": "grpo",
                "score": "sum",
                "advantage": "grpo",
                "credit": "equalized",
                "epochs": 1,
                "mini_batches": 1,
                "kl": {"coef": 0.0},
                "loss": {
                    "clip_low": task.CLIP_EPSILON,
                    "clip_high": task.CLIP_EPSILON,
                    "aggregation": "token-mean",
                },
            },
            "optim": {"lr": task.LEARNING_RATE, "grad_clip": 1.0, "schedule": "constant"},
            "parallel": {"micro_batch_tokens": 4096, "mixed_precision": "fp32"},
            "checkpoint": {"export_hf_at_end": False},
            "track": {
                "transcripts_per_step": 0,
                "mlflow_uri": f"sqlite:///{run_dir.parent.parent / 'mlflow.db'}",
            },
            "total_steps": WARMUP_ROUNDS + TIMED_ROUNDS + 1,
        }
    )


def mua_trainer(model_path: str, workdir: Path, dist):
    from mua.config import write_resolved
    from mua.gym.taskfile import write_tasks
    from mua.train.trainer import Trainer

    task.register()
    task_file = write_tasks(task.tasks(), workdir / "tasks.parquet")
    recipe = mua_recipe(model_path, task_file, workdir / "run")
    write_resolved(recipe, workdir / "run")  # as `mua train` does before starting the ranks
    return Trainer(recipe, workdir / "run", dist, resume=False)


def mua_step(trainer, step: int) -> dict:
    """One RL step of `trainer`, as `mua train`'s loop runs it (`Trainer.run_step`): its metrics."""
    return trainer.run_step(step)


WORK = task.NUM_PROMPTS * task.NUM_GENERATIONS  # trajectories (completions) of one step


def check_mua_step(step_metrics: dict, round_index: int) -> None:
    """The mua step generated every trajectory and trained tokens (else `NoWorkTimed`)."""
    trajectories = sum(v for k, v in step_metrics.items() if k.startswith("termination/"))
    what = f"mua step {round_index}"
    require_work(ID, what, trajectories=trajectories, trained_tokens=step_metrics["tokens/trained"])
    require_same_work(ID, f"{what}: trajectories", mua=trajectories, workload=WORK)


def check_trl_step(trl_times: dict, round_index: int) -> None:
    """The TRL step generated every completion and trained tokens (else `NoWorkTimed`)."""
    what = f"TRL step {round_index}"
    completions = trl_times.get("completions", 0.0)
    require_work(
        ID, what, completions=completions, completion_tokens=trl_times.get("completion_tokens", 0.0)
    )
    require_same_work(ID, f"{what}: completions", trl=completions, workload=WORK)


def compare(model_path: str, dist, workdir: Path, with_trl: bool) -> tuple[dict[str, float], str]:
    """Median seconds per step of mua (`mua_step_s`, with its `mua_rollout_s` and
    `mua_update_s` phases) and of TRL (`trl_step_s`, with `trl_generation_s`), and TRL's version."""
    trl = (
        TRLWorker(model_path, WARMUP_ROUNDS + TIMED_ROUNDS, workdir / "trl.log")
        if with_trl
        else None
    )
    try:
        trainer = mua_trainer(model_path, workdir, dist)
        if trl is not None:
            trl.wait_ready()
        rounds: dict[str, list[float]] = {}
        for round_index in range(WARMUP_ROUNDS + TIMED_ROUNDS):
            t0 = time.perf_counter()
            step_metrics = mua_step(trainer, round_index + 1)
            elapsed = time.perf_counter() - t0
            check_mua_step(step_metrics, round_index)
            seen = {
                "mua_step_s": elapsed,
                "mua_rollout_s": step_metrics["time/rollout_s"],
                "mua_update_s": step_metrics["time/update_s"],
            }
            if trl is not None:
                trl_times = trl.step()
                check_trl_step(trl_times, round_index)
                seen["trl_step_s"] = trl_times["step_s"]
                seen["trl_generation_s"] = trl_times["generation_s"]
            shown = f", TRL {seen['trl_step_s']:.3f} s" if trl is not None else ""
            print(
                f"  {model_path} round {round_index}: mua {seen['mua_step_s']:.3f} s{shown}",
                flush=True,
            )
            if round_index >= WARMUP_ROUNDS:
                for name, value in seen.items():
                    rounds.setdefault(name, []).append(value)
        trainer.tracker.close("FINISHED")
        medians = {name: statistics.median(values) for name, values in rounds.items()}
        return medians, (trl.version if trl else "")
    finally:
        if trl is not None:
            trl.close()


def run():
    import torch

    from bench._proc_group import one_process_group

    torch.set_num_threads(task.NUM_THREADS)
    with_trl = trl_available()
    metrics: dict[str, float] = {}
    versions = set()
    with one_process_group() as dist, tempfile.TemporaryDirectory(prefix="mua-b1-") as tmp:
        for tag, model_path in MODELS.items():
            workdir = Path(tmp) / tag
            workdir.mkdir()
            medians, version = compare(model_path, dist, workdir, with_trl)
            if "trl_step_s" in medians:
                ratio = medians["mua_step_s"] / medians["trl_step_s"]
                metrics[f"step_ratio_vs_trl_{tag}"] = ratio
                versions.add(version)
            metrics.update({f"{name}_{tag}": value for name, value in medians.items()})
    notes = (
        f"TRL {', '.join(sorted(versions))} in bench/.venv"
        if with_trl
        else "TRL is not installed (bench/.venv missing or without trl): only mua's absolute step times"
    )
    return metrics, notes
