"""Write and read `run_dir/recipe.resolved.yaml`: the recipe every process of a run reads.

The file records the validated recipe plus package versions and the git revision. Secrets never
appear in it: recipes only name environment variables, and loading rejects inline secrets.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
from pathlib import Path

import yaml

from mua.config.recipes import RECIPE_MODELS

RESOLVED_NAME = "recipe.resolved.yaml"
_PACKAGES = (
    "mua",
    "torch",
    "transformers",
    "pydantic",
    "mlflow-skinny",
    "sglang",
    "flash-attn",
    "openai",
)


def _versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def _git_revision() -> str | None:
    try:
        here = Path(__file__).resolve().parent
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        return res.stdout.strip() or None if res.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def write_resolved(recipe, run_dir: str | Path | None = None) -> Path:
    """Write the resolved recipe atomically and return its path."""
    run_dir = Path(run_dir or recipe.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "recipe": recipe.model_dump(mode="json"),
        "provenance": {"versions": _versions(), "git_revision": _git_revision()},
    }
    target = run_dir / RESOLVED_NAME
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    os.replace(tmp, target)
    return target


def read_resolved(path: str | Path):
    """Read a resolved recipe (a run dir or the file itself) back into its pydantic model."""
    p = Path(path)
    if p.is_dir():
        p = p / RESOLVED_NAME
    doc = yaml.safe_load(p.read_text())
    data = doc["recipe"]
    return RECIPE_MODELS[data["verb"]].model_validate(data)
