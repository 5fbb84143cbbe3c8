"""`mua train` of a recipe with `alternate:`: an agent and a simulated user trained in turns.

Each side is an ordinary run of its own recipe in `<run_dir>/agent` and `<run_dir>/user`; a
round trains one side `steps` steps against the other's latest export (served by
`mua.serve.checkpoints`), then the other (docs/user_seat.md, "Agent and user in turns"). Phases
done are kept as `<side>/hf/round_<r>` and skipped on a rerun; `rounds.jsonl` has a row per
phase. On several nodes node 0 alone locks the run dir and writes exports and `rounds.jsonl`.
Not here: training itself (the launcher and the ranks), serving.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from mua.errors import RunFailure, UsageError

SIDES = ("agent", "user")
ROUNDS_FILE = "rounds.jsonl"
# how long a node other than 0 waits, after a phase, for node 0 to keep its export
EXPORT_WAIT_S = 1800.0


def _other(side: str) -> str:
    return "user" if side == "agent" else "agent"


def phases(alt) -> list[tuple[int, str]]:
    """(round, side) in the order they train."""
    order = (alt.first, _other(alt.first))
    return [(r, side) for r in range(1, alt.rounds + 1) for side in order]


def round_export(run_dir: Path, side: str, round_: int) -> Path:
    return run_dir / side / "hf" / f"round_{round_}"


def opponent_of(recipe, starts: dict[str, str], round_: int, side: str) -> str:
    """The other side's latest export before (round_, side) trains, else its start model."""
    run_dir = Path(recipe.run_dir)
    alt = recipe.alternate
    other = _other(side)
    done_before = round_ if alt.first == other else round_ - 1
    for r in range(done_before, 0, -1):
        if round_export(run_dir, other, r).is_dir():
            return str(round_export(run_dir, other, r))
    return starts[other]


def side_recipe(recipe, side: str, round_: int, opponent: str, tool_parser: str = "auto"):
    """The side's train recipe for one phase (its file and overrides, then the phase's)."""
    from mua.config import load_recipe

    alt = recipe.alternate
    cfg = getattr(alt, side)
    run_dir = Path(recipe.run_dir)
    phase = [
        f"run_dir={run_dir / side}",
        f"total_steps={round_ * alt.steps}",
        f"track.run_name={run_dir.name}-{side}",
    ]
    if side == "agent":
        phase.append("user=" + json.dumps({"kind": "llm", "checkpoint": opponent}))
    else:
        agent = {"kind": "llm", "checkpoint": opponent, "tool_parser": tool_parser}
        phase.append("gym.agent=" + json.dumps(agent))
    return load_recipe(cfg.recipe, [*cfg.overrides, *phase], verb="train")


def check_sides(recipe) -> dict:
    """Refuse sides that cannot alternate, in one line; returns each side's recipe as loaded
    (its file and overrides, before any phase's)."""
    from mua.config import load_recipe

    sides = {}
    for side in SIDES:
        cfg = getattr(recipe.alternate, side)
        where = f"alternate.{side}.recipe ({cfg.recipe})"
        if not Path(cfg.recipe).is_file():
            raise UsageError(
                f"{where}: no such file (relative to the current folder, like every path of a "
                "recipe); run from the folder the recipe expects or give an absolute path"
            )
        probe = load_recipe(cfg.recipe, list(cfg.overrides), verb="train")
        if getattr(probe, "alternate", None) is not None:
            raise UsageError(f"{where}: is itself alternating; give a plain train recipe")
        if probe.algo.kind == "sft":
            raise UsageError(f"{where}: is SFT; alternate GRPO or PPO recipes")
        if len(probe.gyms) != 1:
            raise UsageError(f"{where}: has {len(probe.gyms)} gyms; alternate one gym entry")
        if probe.gyms[0].seat != side:
            raise UsageError(
                f"{where}: its gym entry has seat: {probe.gyms[0].seat}; this side needs {side}"
            )
        if probe.optim.schedule != "constant":
            raise UsageError(
                f"{where}: optim.schedule={probe.optim.schedule} decays over total_steps, which "
                "grows round by round here; use optim.schedule=constant"
            )
        sides[side] = probe
    return sides


def _mean_reward(rows: list[dict], first_step: int, last_step: int) -> float | None:
    """The mean `reward/mean` of a side's metrics rows of steps first..last."""
    rewards = [
        row["reward/mean"]
        for row in rows
        if first_step <= row.get("step", 0) <= last_step and "reward/mean" in row
    ]
    return sum(rewards) / len(rewards) if rewards else None


def _keep_export(run_dir: Path, side: str, round_: int) -> Path:
    final = run_dir / side / "hf" / "final"
    if not final.is_dir():
        raise UsageError(
            f"{run_dir / side} has no hf/final after its phase; set checkpoint.export_hf_at_end "
            "to true in that side's recipe"
        )
    target = round_export(run_dir, side, round_)
    tmp = target.with_name(f".tmp-{target.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(final, tmp)
    tmp.rename(target)
    return target


def run_alternation(recipe, **launch_options) -> None:
    """Train both sides in turns (see the module docstring); `launch_options` go to every
    phase's `launch` (processes, nodes). Node 0 alone claims and locks the run dir, keeps each
    phase's export and writes `rounds.jsonl`; every other node trains the same phases and waits
    for node 0's export before the next one, so it faces the same opponent."""
    from mua.output_folders import FolderLock, claim_dir

    sides = check_sides(recipe)
    starts = {side: sides[side].model.path for side in SIDES}
    node_rank = launch_options.get("node_rank", 0)
    run_dir = Path(recipe.run_dir)
    if node_rank != 0:
        _run_phases(
            recipe,
            sides,
            starts,
            launch_options,
            lambda r, s: _await_export(run_dir, s, r, node_rank),
        )
        return

    def keep(round_: int, side: str) -> None:
        _keep_export(run_dir, side, round_)
        row = _write_rounds(recipe, starts)[-1]
        shown = "n/a" if row["reward_mean"] is None else f"{row['reward_mean']:.3f}"
        print(f"round {round_} · {side}: mean training reward {shown}", flush=True)

    claim_dir(run_dir, what="run_dir")
    with FolderLock(run_dir, what="alternating run_dir", verb="mua train"):
        _run_phases(recipe, sides, starts, launch_options, keep)


def _run_phases(recipe, sides: dict, starts: dict, launch_options: dict, after) -> None:
    """Launch each phase not done yet (no export), then `after(round, side)`."""
    from mua.train.launcher import launch

    run_dir = Path(recipe.run_dir)
    alt = recipe.alternate
    for round_, side in phases(alt):
        if round_export(run_dir, side, round_).is_dir():
            continue
        opponent = opponent_of(recipe, starts, round_, side)
        print(
            f"round {round_}/{alt.rounds} · {side}: steps {(round_ - 1) * alt.steps + 1}-"
            f"{round_ * alt.steps} against {opponent}",
            flush=True,
        )
        phase = side_recipe(recipe, side, round_, opponent, sides["agent"].model.tool_parser)
        launch(phase, resume=True, allow_recipe_change=True, **launch_options)
        after(round_, side)


def _await_export(run_dir: Path, side: str, round_: int, node_rank: int) -> None:
    """Wait (on a node other than 0) until node 0 kept the phase's export."""
    target = round_export(run_dir, side, round_)
    deadline = time.monotonic() + EXPORT_WAIT_S
    while not target.is_dir():
        if time.monotonic() > deadline:
            raise RunFailure(
                f"node {node_rank}: node 0 kept no {target} within {EXPORT_WAIT_S:g} s after "
                "the phase; read node 0's output (the run dir must be on a file system every "
                "node shares)"
            )
        time.sleep(min(2.0, EXPORT_WAIT_S / 10))


def _write_rounds(recipe, starts: dict[str, str]) -> list[dict]:
    """Rewrite `rounds.jsonl`: a row per phase done (side, round, steps, opponent, mean
    training reward); returns the rows."""
    from mua.track.run_files import read_metrics

    run_dir = Path(recipe.run_dir)
    alt = recipe.alternate
    metrics = {side: read_metrics(run_dir / side) for side in SIDES}
    rows = []
    for round_, side in phases(alt):
        if not round_export(run_dir, side, round_).is_dir():
            break
        first, last = (round_ - 1) * alt.steps + 1, round_ * alt.steps
        rows.append(
            {
                "round": round_,
                "side": side,
                "steps": [first, last],
                "opponent": opponent_of(recipe, starts, round_, side),
                "reward_mean": _mean_reward(metrics[side], first, last),
            }
        )
    path = run_dir / ROUNDS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(path)
    return rows
