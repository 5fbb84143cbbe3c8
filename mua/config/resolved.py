"""Write and read `run_dir/recipe.resolved.yaml`: the recipe every process of a run reads.

The file records the validated recipe plus package versions and the git revision. Secrets never
appear in it: recipes only name environment variables, loading rejects inline secrets, and
credentials inside URLs (`http://user:key@host`, `?api_key=...`) are written redacted
(`mua.redact`). The ranks still need those URLs whole: `write_resolved` puts the mapping
{redacted URL: real URL} in the environment variable `MUA_URL_SECRETS` of the writing process,
which torchrun's children inherit, and `read_resolved` restores the URLs from it. A rank
started without it (e.g. another node's launcher did not see the credentials) gets the redacted
URL, and its endpoint refuses it loudly.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from pathlib import Path

import yaml

from mua.config.recipes import RECIPE_MODELS
from mua.redact import redact_urls

RESOLVED_NAME = "recipe.resolved.yaml"
URL_SECRETS_ENV = "MUA_URL_SECRETS"
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


def write_resolved(recipe, run_dir: str | Path | None = None, name: str = RESOLVED_NAME) -> Path:
    """Write the resolved recipe atomically (as `name` in the run dir) and return its path."""
    run_dir = Path(run_dir or recipe.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dumped = recipe.model_dump(mode="json")
    redacted = redact_urls(dumped)
    secrets = dict(_changed_strings(redacted, dumped))
    if secrets:
        os.environ[URL_SECRETS_ENV] = json.dumps(secrets)
    doc = {
        "recipe": redacted,
        "provenance": {"versions": _versions(), "git_revision": _git_revision()},
    }
    target = run_dir / name
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
    data = _restore_urls(doc["recipe"], json.loads(os.environ.get(URL_SECRETS_ENV) or "{}"))
    return RECIPE_MODELS[data["verb"]].model_validate(data)


def _changed_strings(redacted, original):
    """(redacted, original) for every string the redaction changed, anywhere in the tree."""
    if isinstance(original, str):
        if redacted != original:
            yield redacted, original
    elif isinstance(original, dict):
        for key, value in original.items():
            yield from _changed_strings(redacted[key], value)
    elif isinstance(original, list):
        for red, value in zip(redacted, original, strict=True):
            yield from _changed_strings(red, value)


def _restore_urls(value, secrets: dict[str, str]):
    if not secrets:
        return value
    if isinstance(value, str):
        return secrets.get(value, value)
    if isinstance(value, dict):
        return {k: _restore_urls(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore_urls(v, secrets) for v in value]
    return value
