"""The CPU quickstart behind `make demo`: the whole mua loop on the `guess` gym with a tiny model.

`python -m mua.demo [--out DIR] [--seed S] [--quick]` runs prep, a careless scripted expert's
rollouts, SFT, an evaluation, GRPO, merge and a second evaluation, each a real `mua` command in a
subprocess logged to `<out>/logs/<phase>.log`, then prints a before/after table, the MLflow store
and a `mua view` page. `run_demo(...)` returns the numbers. The folder must be new, empty or a
previous demo's (`claim_fresh_dir`). Not here: any setting (the recipes/quickstart*.yaml hold them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mua.errors import UsageError

REPO = Path(__file__).resolve().parents[1]
RECIPES = Path("recipes")  # relative to REPO, the phases' working directory
MAX_NUMBER = 8  # the game's range 1..N (a small range a 1M-parameter model learns in minutes)
# `--quick`: the same phases, cut to a smoke test (a couple of steps, a few tasks)
QUICK = {
    "expert": ["data.max_tasks=32"],
    "sft": ["total_steps=2"],
    "rl": ["total_steps=2", "checkpoint.save_freq=1", "data.tasks_per_step=2", "rollout.n=2"],
    "eval": ["--max-tasks", "4"],
}


@dataclass
class DemoResult:
    out_dir: Path
    seed: int
    phase_seconds: dict[str, float] = field(default_factory=dict)
    before: dict = field(default_factory=dict)  # summary of the SFT model on held-out tasks
    after: dict = field(default_factory=dict)  # summary of the RL model
    view_page: Path | None = None  # `mua view` over the RL run and both evaluations

    @property
    def minutes(self) -> float:
        return sum(self.phase_seconds.values()) / 60.0


class PhaseFailed(RuntimeError):
    pass


def _mua(*args: str) -> list[str]:
    return [sys.executable, "-m", "mua.cli.main", *args]


def _last_step_line(log: Path) -> str | None:
    """The phase's latest `step N/M ...` line (training logs one per step off a terminal)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    return next((line for line in reversed(lines) if line.startswith("step ")), None)


def _wait_showing_steps(proc: subprocess.Popen, log: Path) -> int:
    """Wait for a phase; on a terminal, keep its latest step line (with its ETA) in view."""
    live = sys.stdout.isatty()
    shown = ""
    while proc.poll() is None:
        time.sleep(0.5)
        line = _last_step_line(log) if live else None
        if line:
            width = shutil.get_terminal_size().columns - 1
            shown = f"      {'':<9} {line}"[:width]
            print(f"\r{shown:<{width}}", end="", flush=True)
    if shown:
        print("\r" + " " * len(shown) + "\r", end="", flush=True)
    return proc.returncode


def _run_phase(
    index: int, total: int, name: str, cmd: list[str], out_dir: Path, env: dict, result: DemoResult
) -> None:
    log = out_dir / "logs" / f"{index}_{name.replace(' ', '_')}.log"
    shown = " ".join(a if a != sys.executable else "python" for a in cmd).replace(
        "python -m mua.cli.main", "mua"
    )
    print(f"[{index}/{total}] {name:<9} {shown}", flush=True)
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        code = _wait_showing_steps(proc, log)
    seconds = time.perf_counter() - t0
    result.phase_seconds[name] = seconds
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise PhaseFailed(f"phase {name!r} failed (exit {code}); last lines of {log}:\n{tail}")
    print(f"      {'':<9} done in {seconds:.0f}s", flush=True)


def _phases(
    out: Path, seed: int, quick: bool = False, rl_recipe: str = "quickstart.yaml"
) -> list[tuple[str, list[str]]]:
    data = out / "data" / "guess"
    seeds = [f"data.seed={seed}", f"model.seed={seed}"]
    cut = QUICK if quick else {}
    eval_common = [
        str(RECIPES / "quickstart_eval.yaml"),
        f"data.test_files=[{data / 'test.parquet'}]",
        "--fresh",
        *cut.get("eval", []),
    ]
    return [
        (
            "prep",
            _mua(
                "prep", "--gym", "guess", "--out", str(data), "--option", f"max_number={MAX_NUMBER}"
            ),
        ),
        (
            "expert",
            _mua(
                "rollout",
                str(RECIPES / "quickstart_rollout.yaml"),
                f"data.train_files=[{data / 'train.parquet'}]",
                f"run_dir={out / 'expert'}",
                *cut.get("expert", []),
            ),
        ),
        (
            "sft",
            _mua(
                "train",
                str(RECIPES / "quickstart_sft.yaml"),
                f"data.train_files=[{out / 'expert' / 'trajectories.jsonl'}]",
                f"run_dir={out / 'sft'}",
                *seeds,
                *cut.get("sft", []),
                "--no-resume",
            ),
        ),
        (
            "eval sft",
            _mua(
                "eval",
                *eval_common,
                "--model",
                str(out / "sft" / "hf" / "final"),
                "--out",
                str(out / "eval_sft"),
            ),
        ),
        (
            "rl",
            _mua(
                "train",
                str(RECIPES / rl_recipe),
                f"model.path={out / 'sft' / 'hf' / 'final'}",
                f"data.train_files=[{data / 'train.parquet'}]",
                "data.test_files=[]",
                f"run_dir={out / 'rl'}",
                *seeds,
                *cut.get("rl", []),
                "--no-resume",
            ),
        ),
        ("merge", _mua("merge", str(out / "rl"), "--verify")),
        (
            "eval rl",
            _mua("eval", *eval_common, "--model", "{merged}", "--out", str(out / "eval_rl")),
        ),
    ]


def _latest_merged(out: Path) -> Path:
    merged = sorted(
        (out / "rl" / "hf").glob("global_step_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])
    )
    if not merged:
        raise PhaseFailed(f"no merged folder under {out / 'rl' / 'hf'}")
    return merged[-1]


def _guess_summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())["gyms"]["guess"]


def run_demo(
    out_dir: str | Path = "runs/demo",
    seed: int = 0,
    quick: bool = False,
    rl_recipe: str = "quickstart.yaml",
) -> DemoResult:
    """Run every phase (fresh) in `out_dir`; raises PhaseFailed with the log tail when one fails.
    `rl_recipe`: the RL phase's recipe under recipes/ (e.g. quickstart_lora.yaml)."""
    from mua.output_folders import claim_fresh_dir

    out = claim_fresh_dir(
        Path(out_dir).resolve(),
        what="demo output",
        writer="a demo",
        fix="give --out a new or empty folder, or a previous demo's folder",
    )
    (out / "logs").mkdir()
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{out / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "COLUMNS": "160",
    }
    result = DemoResult(out_dir=out, seed=seed)
    phases = _phases(out, seed, quick, rl_recipe)
    for i, (name, cmd) in enumerate(phases, start=1):
        if "{merged}" in cmd:
            cmd = [str(_latest_merged(out)) if a == "{merged}" else a for a in cmd]
        _run_phase(i, len(phases), name, cmd, out, env, result)
    result.before = _guess_summary(out / "eval_sft")
    result.after = _guess_summary(out / "eval_rl")
    result.view_page = _write_view(out)
    return result


def _write_view(out: Path) -> Path:
    from mua.view.page import write_page
    from mua.view.sources import load_view_data

    return write_page(load_view_data([out]), out / "view.html", title=f"mua demo · {out}")


def _decoding(result: DemoResult) -> str:
    summary = json.loads((result.out_dir / "eval_sft" / "summary.json").read_text())
    if not summary.get("temperature"):
        return "greedy"
    return f"sampled at temperature {summary['temperature']:g}, {summary['n']} games per task"


def print_report(result: DemoResult) -> None:
    from rich.console import Console
    from rich.table import Table

    from mua.track.console import mlflow_ui_command

    title = f"held-out guess tasks ({result.before['num_tasks']}), {_decoding(result)}"
    table = Table(title=title)
    for col in ("model", "reward", "success", "turns", "tokens"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for label, s in (("after SFT (start)", result.before), ("after GRPO", result.after)):
        table.add_row(
            label,
            f"{s['reward_mean']:.3f}",
            f"{s['success_rate']:.3f}",
            f"{s['turns_mean']:.2f}",
            f"{s['tokens_mean']:.0f}",
        )
    console = Console(highlight=False)
    console.print(table)
    gain = result.after["reward_mean"] - result.before["reward_mean"]
    console.print(
        f"reward gain from RL: {gain:+.3f} · total {result.minutes:.1f} min · outputs in {result.out_dir}"
    )
    ui = mlflow_ui_command(f"sqlite:///{result.out_dir / 'mlflow.db'}")
    console.print(f"MLflow (SFT, GRPO and both evaluations): {ui}", soft_wrap=True, markup=False)
    console.print(f"merged model: {_latest_merged(result.out_dir)}", soft_wrap=True, markup=False)
    if result.view_page is not None:
        console.print(
            f"transcripts (RL steps, both evaluations side by side): open {result.view_page} "
            f"(`mua view {result.out_dir}` rebuilds it)",
            soft_wrap=True,
            markup=False,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mua.demo", description="The mua CPU quickstart."
    )
    parser.add_argument(
        "--out",
        default="runs/demo",
        help="Folder for every output: new, empty, or a previous demo's (emptied first).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the model init and training.")
    parser.add_argument(
        "--quick", action="store_true", help="A smoke test: every phase, a couple of steps each."
    )
    args = parser.parse_args(argv)
    from mua.track.console import quiet_libraries

    quiet_libraries()  # the phases inherit it: no library warnings, log lines or bars
    try:
        result = run_demo(args.out, args.seed, args.quick)
    except UsageError as err:  # an --out that is not the demo's to empty
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except PhaseFailed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
