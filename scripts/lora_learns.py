"""Does the CPU quickstart learn with LoRA? Held-out reward after SFT and after RL, per seed.

    python scripts/lora_learns.py --seeds 0,1,2 [--recipe quickstart_lora.yaml]
        [--set optim.lr=3e-3 --set model.lora.rank=64 ...] [--name NAME] [--out runs/lora_learns]

The first setting run for a seed runs the whole demo (`mua.demo`: prep, expert data, SFT, eval,
RL, merge, eval) in OUT/sft_start/seed_S; every setting (NAME, default the recipe's stem) then
runs only the RL phase, the merge and the evaluation in OUT/NAME/seed_S, from that seed's SFT
model, with `--set` overrides added to the RL command. A seed already run for NAME is not run
again (delete OUT/NAME/seed_S to rerun it). So settings compared on one seed start from the
same SFT model and are evaluated on the same held-out tasks.

`--embedding-swap` instead evaluates each seed's full-fine-tuned model (OUT/sft_start/seed_S/rl)
twice: with its decoder blocks trained but its token embedding and output head put back to the
SFT model's, and the other way round (OUT/lora_embedding_swap/seed_S). LoRA on every linear
layer of the blocks never changes the embedding or the head, so this shows how much of full
fine-tuning's gain is within its reach.

Prints one line per seed (reward after SFT, after RL, minutes of the RL phases; a run that stopped,
e.g. collapsed to every reward 0, counts as a gain of 0 and is named) and a summary:
mean gain, spread (max - min), sample standard deviation, and whether it learns by the bar used
in docs/lora.md: every seed gains and the mean gain exceeds twice the standard deviation of the
gains (and the spread). The same figures for the demo's own full-fine-tuning GRPO phase from the
same starts (OUT/sft_start/seed_S/eval_rl) sit beside them, under `full_ft`. Writes
OUT/NAME/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _sft_start(out: Path, seed: int) -> Path:
    """The SFT folder (phases 1-4 of the demo) of `seed`, run once and kept."""
    from mua.demo import run_demo

    folder = out / "sft_start" / f"seed_{seed}"
    if not (folder / "eval_sft" / "summary.json").is_file():
        run_demo(folder, seed=seed)
    return folder


def _rl_phases(start: Path, folder: Path, seed: int, recipe: str, sets: list[str]) -> float:
    """RL, merge and evaluation of one setting from the SFT start; minutes taken."""
    from mua.demo import DemoResult, _phases, _run_phase

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    for name in ("data", "sft", "eval_sft", "expert"):
        link = folder / name
        if not link.exists():
            link.symlink_to(start / name)
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    result = DemoResult(out_dir=folder, seed=seed)
    phases = dict(_phases(folder.resolve(), seed, rl_recipe=recipe))
    phases["rl"] = phases["rl"] + list(sets)
    t0 = time.perf_counter()
    for i, name in enumerate(("rl", "merge", "eval rl"), start=5):
        cmd = phases[name]
        if "{merged}" in cmd:
            from mua.demo import _latest_merged

            cmd = [str(_latest_merged(folder.resolve())) if a == "{merged}" else a for a in cmd]
        _run_phase(i, 7, name, cmd, folder, env, result)
    return (time.perf_counter() - t0) / 60.0


_HEAD_OR_EMBEDDING = ("model.embed_tokens.", "lm_head.")


def _swapped_model(sft_dir: Path, rl_dir: Path, folder: Path, embedding_from_rl: bool) -> Path:
    """A copy of the full-fine-tuned model with either its decoder blocks or its token
    embedding (and output head) put back to the SFT model's; the rest from the RL model."""
    import shutil

    from safetensors.torch import load_file, save_file

    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(rl_dir, folder)
    sft_files = {f.name: f for f in sft_dir.glob("*.safetensors")}
    for file in folder.glob("*.safetensors"):
        rl, sft = load_file(file), load_file(sft_files[file.name])
        mixed = {}
        for name, tensor in rl.items():
            head = name.startswith(_HEAD_OR_EMBEDDING)
            mixed[name] = (tensor if head == embedding_from_rl else sft[name]).contiguous()
        save_file(mixed, file, metadata={"format": "pt"})
    return folder


def _embedding_swap(start: Path, out: Path, seed: int) -> dict:
    """Held-out reward of the demo's full-fine-tuned model with only its decoder blocks, or
    only its token embedding / output head, trained (the other part put back to SFT): which
    part of full fine-tuning's gain a LoRA on the decoder blocks can reach."""
    from mua.demo import DemoResult, _latest_merged, _phases, _run_phase

    folder = out / "lora_embedding_swap" / f"seed_{seed}"
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    eval_cmd = dict(_phases(start.resolve(), seed))["eval rl"]
    rl_dir = _latest_merged(start.resolve())
    row = {"seed": seed, "sft": _reward(start / "eval_sft"), "full_ft": _reward(start / "eval_rl")}
    for i, (part, from_rl) in enumerate((("blocks_only", False), ("embedding_only", True)), 1):
        model = _swapped_model(start / "sft" / "hf" / "final", rl_dir, folder / part, from_rl)
        evals = folder / f"eval_{part}"
        cmd = [str(model) if a == "{merged}" else a for a in eval_cmd]
        cmd[cmd.index(str(start.resolve() / "eval_rl"))] = str(evals)
        _run_phase(i, 2, f"eval {part}", cmd, folder, env, DemoResult(out_dir=folder, seed=seed))
        row[part] = _reward(evals)
    return row


def _reward(folder: Path) -> float:
    summary = json.loads((folder / "summary.json").read_text())
    return float(summary["gyms"]["guess"]["reward_mean"])


def learns(gains: list[float]) -> bool:
    """The bar of docs/lora.md: every seed gains, and the mean gain exceeds twice the sample standard
    deviation of the gains and their spread (max - min)."""
    if len(gains) < 2:
        return False
    mean = statistics.mean(gains)
    spread = max(gains) - min(gains)
    return all(g > 0 for g in gains) and mean > 2 * statistics.stdev(gains) and mean > spread


def _gain_stats(gains: list[float]) -> dict:
    return {
        "gains": gains,
        "gain_mean": statistics.mean(gains),
        "gain_std": statistics.stdev(gains) if len(gains) > 1 else 0.0,
        "gain_spread": max(gains) - min(gains),
    }


def main(argv: list[str]) -> int:
    from mua.demo import PhaseFailed

    parser = argparse.ArgumentParser(prog="python scripts/lora_learns.py")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--recipe", default="quickstart_lora.yaml", help="under recipes/")
    parser.add_argument("--set", action="append", default=[], help="RL override key=value")
    parser.add_argument("--name", default=None)
    parser.add_argument("--out", default="runs/lora_learns")
    parser.add_argument(
        "--embedding-swap",
        action="store_true",
        help="instead: evaluate each seed's full-fine-tuned model with only its decoder blocks "
        "or only its embedding / output head trained",
    )
    args = parser.parse_args(argv)
    os.chdir(REPO)
    out = Path(args.out).resolve()
    if args.embedding_swap:
        rows = [
            _embedding_swap(_sft_start(out, int(s)), out, int(s)) for s in args.seeds.split(",")
        ]
        for row in rows:
            print(json.dumps(row), flush=True)
        (out / "lora_embedding_swap" / "summary.json").write_text(json.dumps(rows, indent=2))
        return 0
    name = args.name or Path(args.recipe).stem
    rows = []
    for seed in [int(s) for s in args.seeds.split(",") if s.strip()]:
        start = _sft_start(out, seed)
        folder = out / name / f"seed_{seed}"
        minutes, failed = float("nan"), None
        failed_note = folder / "failed.txt"  # kept, so a rerun reports the stopped run again
        if failed_note.is_file():
            failed = failed_note.read_text().strip()
        elif not (folder / "eval_rl" / "summary.json").is_file():
            try:
                minutes = _rl_phases(start, folder, seed, args.recipe, args.set)
            except PhaseFailed as err:  # e.g. a collapse: every reward 0, the run stops
                failed = str(err).splitlines()[-1][:300]
                failed_note.write_text(failed + "\n")
        sft = _reward(start / "eval_sft")
        row = {
            "seed": seed,
            "sft": sft,
            # a run that stopped counts as no gain at all
            "rl": sft if failed else _reward(folder / "eval_rl"),
            # the demo's own GRPO phase (full fine-tuning, quickstart.yaml) from the same start
            "full_ft_rl": _reward(start / "eval_rl"),
            "rl_minutes": minutes,
            **({"failed": failed} if failed else {}),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    gains = [r["rl"] - r["sft"] for r in rows]
    full_ft = [r["full_ft_rl"] - r["sft"] for r in rows]
    summary = {
        "name": name,
        "recipe": args.recipe,
        "overrides": args.set,
        **_gain_stats(gains),
        "failed_seeds": [r["seed"] for r in rows if "failed" in r],
        "learns": learns(gains),
        "full_ft": {**_gain_stats(full_ft), "learns": learns(full_ft)},
    }
    print(json.dumps(summary), flush=True)
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "summary.json").write_text(json.dumps({"seeds": rows, **summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
