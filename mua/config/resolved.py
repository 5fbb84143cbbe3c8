"""Write and read `run_dir/recipe.resolved.yaml`: the recipe every process of a run reads.

The file records the validated recipe plus package versions and the git revision, with URL
credentials redacted and `env:` map values as `<set>` (`mua.redact`). `write_resolved` puts the
real values in `MUA_URL_SECRETS` and `MUA_ENV_VALUES` for its torchrun children; `read_resolved`
restores them, and refuses at once when an `env:` map's values are missing (docs/training.md).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from pathlib import Path

import yaml

from mua.config.recipes import RECIPE_MODELS
from mua.errors import UsageError
from mua.redact import ENV_MARK, is_env_map, mask_env_maps, redact_urls

RESOLVED_NAME = "recipe.resolved.yaml"
URL_SECRETS_ENV = "MUA_URL_SECRETS"
ENV_VALUES_ENV = "MUA_ENV_VALUES"
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
    masked = mask_env_maps(dumped)
    redacted = redact_urls(masked)
    secrets = dict(_changed_strings(redacted, masked))
    if secrets:
        os.environ[URL_SECRETS_ENV] = json.dumps(secrets)
    env_maps = list(_env_maps(dumped))
    if env_maps:
        os.environ[ENV_VALUES_ENV] = json.dumps(env_maps)
    else:
        os.environ.pop(ENV_VALUES_ENV, None)  # none of an earlier recipe's values apply
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
    _restore_env_maps(data, json.loads(os.environ.get(ENV_VALUES_ENV) or "[]"), p)
    return RECIPE_MODELS[data["verb"]].model_validate(data)


def _env_maps(tree, where: tuple = ()):
    """([keys from the root], {name: value}) of every environment map in the dumped recipe."""
    if not isinstance(tree, (dict, list)):
        return
    for key, value in tree.items() if isinstance(tree, dict) else enumerate(tree):
        if is_env_map(key, value):
            yield [*where, key], dict(value)
        else:
            yield from _env_maps(value, (*where, key))


def _restore_env_maps(data: dict, env_maps: list, path: Path) -> None:
    """Put each env map's values (as `write_resolved` kept them) back in place; refuse a map
    left masked (its values did not reach this process)."""
    restored = set()
    for where, values in env_maps:
        node = data
        try:
            for key in where[:-1]:
                node = node[key]
            if set(node[where[-1]]) == set(values):
                node[where[-1]] = values
                restored.add(tuple(where))
        except (KeyError, IndexError, TypeError):
            continue  # a map of another recipe: the check below decides
    for where, values in _env_maps(data):
        if tuple(where) not in restored and ENV_MARK in values.values():
            place = ".".join(str(k) for k in where)
            raise UsageError(
                f"{path}: {place} holds only the names of its variables ({', '.join(values)}), "
                "their values are kept out of files and did not reach this process; start the "
                "run with `mua train`, which passes them to its ranks"
            )


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
