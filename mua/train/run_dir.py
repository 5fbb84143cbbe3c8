"""What `mua train` checks and holds in its run dir before any rank starts (no torch here).

Ownership (`mua.output_folders` marker, or an adopted older run), one `mua train` per run dir
(`RunLock`), and recipe changes on resume: refused with the differences listed unless allowed,
and always for `SHAPE_KEYS` (tensor shapes). `stage` writes a resuming recipe to
`recipe.pending.yaml`; `promote`, once every rank loaded the checkpoint, moves it over
`recipe.resolved.yaml`, so a failed start leaves the run dir as it was (docs/training.md).
Not here: loading checkpoints, locking across nodes (only node 0 locks).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml

from mua.errors import UsageError
from mua.output_folders import LOCK, FolderLock

__all__ = [
    "LOCK",
    "RunLock",
    "check_resume_recipe",
    "claim",
    "has_checkpoint",
    "latest_step_dir",
    "promote",
    "recipe_file",
    "stage",
]
CHANGES = "recipe_changes.yaml"
PENDING = "recipe.pending.yaml"  # the recipe of a resume not yet known to work
PENDING_CHANGES = ".recipe_changes.pending.yaml"
# settings whose change alters the checkpoint's tensor shapes: a resume cannot apply them
SHAPE_KEYS = ("model.lora",)
SHAPE_FREE = ("model.lora.alpha", "model.lora.dropout")
FREE_KEYS = ("total_steps",)  # may change on resume without --allow-recipe-change
# Restored from the checkpoint on resume, whatever the recipe says now.
KEPT_FROM_CHECKPOINT = {
    "model.path": "the weights come from the checkpoint",
    "model.seed": "the weights come from the checkpoint",
    "data.seed": "the sampler's position comes from the checkpoint",
    "data.shuffle": "the sampler's position comes from the checkpoint",
}
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def claim(run_dir: Path) -> None:
    """Make `run_dir` a folder mua may write into, or refuse (UsageError) before writing
    (`mua.output_folders.claim_dir`; a folder holding a resolved recipe is an older mua's run)."""
    from mua.config.resolved import RESOLVED_NAME
    from mua.output_folders import claim_dir

    claim_dir(run_dir, what="run_dir", legacy_proof=(RESOLVED_NAME,))


class RunLock(FolderLock):
    """The run dir's lock, held by `mua train` (see `mua.output_folders.FolderLock`)."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir, what="run_dir", verb="mua train")


def has_checkpoint(run_dir: Path) -> bool:
    return latest_step_dir(run_dir) is not None


def latest_step_dir(run_dir: Path) -> Path | None:
    """The complete checkpoint `checkpoints/global_step_N` with the largest N, or None (read
    from the folder names: no torch here)."""
    root = run_dir / "checkpoints"
    if not root.is_dir():
        return None
    steps = [
        (int(m.group(1)), p)
        for p in root.iterdir()
        if (m := _STEP_DIR.match(p.name)) and (p / "trainer_state.pt").exists()
    ]
    return max(steps)[1] if steps else None


def recipe_changes(old: dict, new: dict) -> dict[str, tuple]:
    """{dotted key: (old value, new value)} of the recipe dumps, FREE_KEYS left out."""
    a, b = _flatten(old), _flatten(new)
    missing = object()
    out = {}
    for key in sorted(set(a) | set(b)):
        if key in FREE_KEYS:
            continue
        va, vb = a.get(key, missing), b.get(key, missing)
        if va != vb:
            out[key] = (None if va is missing else va, None if vb is missing else vb)
    return out


def _flatten(tree, prefix: str = "") -> dict:
    """{dotted key: leaf}; a list of sections (the gym entries) is indexed, `gyms[0].seat`."""
    if isinstance(tree, dict) and tree:
        out = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(tree, list) and tree and all(isinstance(v, dict) for v in tree):
        out = {}
        for i, v in enumerate(tree):
            out.update(_flatten(v, f"{prefix[:-1]}[{i}]."))
        return out
    return {prefix[:-1]: tree}


def check_resume_recipe(run_dir: Path, recipe, *, resume: bool, allow_change: bool) -> dict:
    """Refuse a changed recipe for a run that will resume, or (when allowed) print and return
    its changes for `stage`; a change of tensor shapes is refused either way."""
    from mua.config.resolved import RESOLVED_NAME
    from mua.redact import redact_secrets

    resolved = run_dir / RESOLVED_NAME
    if not (resume and resolved.exists() and has_checkpoint(run_dir)):
        return {}
    try:
        old = yaml.safe_load(resolved.read_text())["recipe"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return {}  # unreadable: nothing to compare with (the new one replaces it)
    # the resolved recipe was written with credentials masked: compare (and record) alike
    changes = recipe_changes(old, redact_secrets(recipe.model_dump(mode="json")))
    if not changes:
        return {}
    shapes = [
        f"{key} {_short(before)} → {_short(after)}"
        for key, (before, after) in changes.items()
        if key.startswith(SHAPE_KEYS) and key not in SHAPE_FREE
    ]
    if shapes:
        raise UsageError(
            f"{'; '.join(shapes)} changes the shapes of the tensors in run_dir {run_dir}'s "
            "checkpoints, so they cannot be loaded (even with --allow-recipe-change); resume "
            "with the setting the run was started with, or start a new run_dir"
        )
    lines = [_describe(key, before, after) for key, (before, after) in changes.items()]
    if not allow_change:
        raise UsageError(
            f"the recipe differs from the one run_dir {run_dir} was started with: "
            + "; ".join(lines)
            + ". Resume with the same recipe, add --allow-recipe-change to apply the "
            "differences, or start a new run_dir"
        )
    for line in lines:
        print(f"recipe change: {line}", flush=True)
    return changes


def _short(value) -> str:
    return "unset" if value is None else str(value)


def stage(run_dir: Path, recipe, changes: dict, *, resuming: bool) -> None:
    """Write the recipe the ranks will read: a run that resumes from a checkpoint gets
    `recipe.pending.yaml` (and its changes beside it) until `promote`; any other run (nothing
    to lose) gets `recipe.resolved.yaml` directly. A pending recipe of an earlier failed start
    is dropped."""
    from mua.config.resolved import RESOLVED_NAME, write_resolved

    (run_dir / PENDING).unlink(missing_ok=True)
    (run_dir / PENDING_CHANGES).unlink(missing_ok=True)
    if not (resuming and (run_dir / RESOLVED_NAME).exists() and has_checkpoint(run_dir)):
        write_resolved(recipe, run_dir)
        return
    write_resolved(recipe, run_dir, name=PENDING)
    if changes:
        (run_dir / PENDING_CHANGES).write_text(
            yaml.safe_dump({k: list(v) for k, v in changes.items()}, sort_keys=False)
        )


def recipe_file(run_dir: Path) -> Path:
    """The recipe the ranks of this start read: the pending one of a resume, else the resolved."""
    from mua.config.resolved import RESOLVED_NAME

    pending = Path(run_dir) / PENDING
    return pending if pending.exists() else Path(run_dir) / RESOLVED_NAME


def promote(run_dir: Path) -> None:
    """After the checkpoint loaded on every rank: the pending recipe becomes the run's, and its
    changes are recorded (a no-op when nothing is pending)."""
    import os

    from mua.config.resolved import RESOLVED_NAME

    run_dir = Path(run_dir)
    pending = run_dir / PENDING
    if not pending.exists():
        return
    changes_file = run_dir / PENDING_CHANGES
    if changes_file.exists():
        changes = yaml.safe_load(changes_file.read_text()) or {}
        _record(run_dir, {k: tuple(v) for k, v in changes.items()})
        changes_file.unlink()
    os.replace(pending, run_dir / RESOLVED_NAME)


def _describe(key: str, before, after) -> str:
    effect = KEPT_FROM_CHECKPOINT.get(key)
    tail = f" (no effect: {effect})" if effect else ""
    return f"{key}: {before!r} -> {after!r}{tail}"


def _record(run_dir: Path, changes: dict[str, tuple]) -> None:
    path = run_dir / CHANGES
    history = []
    if path.exists():
        history = yaml.safe_load(path.read_text()) or []
    history.append(
        {
            "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "changes": {
                key: {
                    "from": before,
                    "to": after,
                    "took_effect": key not in KEPT_FROM_CHECKPOINT,
                    **(
                        {"why_not": KEPT_FROM_CHECKPOINT[key]}
                        if key in KEPT_FROM_CHECKPOINT
                        else {}
                    ),
                }
                for key, (before, after) in changes.items()
            },
        }
    )
    path.write_text(yaml.safe_dump(history, sort_keys=False))
