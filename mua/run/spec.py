"""A `gyms:` entry's run spec: a frozen, JSON-serialisable record of how its conversations run.

`run_spec(recipe, entry)` resolves one entry once: its gym and options, its effective user (the
recipe's `user:` with the entry's keys), its effective budgets, the seat with its fixed agent, the
fidelity judge and the program. Eval's resume fingerprint hashes it, the pre-flight asks the
endpoints it names and the checkpoint server serves the folders it names.
Not here: making the run (`mua.run.entries`), calling endpoints (`mua.run.preflight`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType

# an entry's keys that cannot change its conversations: its name in tables, where its tasks were read
NAMES_ONLY = ("label", "train_files", "test_files")


def _frozen(value):
    if isinstance(value, dict):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _thawed(value):
    if isinstance(value, MappingProxyType | dict):
        return {k: _thawed(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thawed(v) for v in value]
    return value


@dataclass(frozen=True)
class RunSpec:
    """One entry as its conversations run: `label` and its resolved `settings` (read-only)."""

    label: str
    settings: MappingProxyType

    @property
    def gym(self) -> str:
        return self.settings["name"]

    @property
    def options(self) -> dict:
        return _thawed(self.settings.get("options") or {})

    @property
    def user(self) -> dict:
        return _thawed(self.settings["user"])

    @property
    def seat(self) -> str:
        return self.settings.get("seat") or "agent"

    @property
    def agent(self) -> dict | None:
        return _thawed(self.settings.get("agent"))

    @property
    def fidelity_judge(self) -> dict | None:
        return _thawed(self.settings.get("fidelity_judge"))

    @property
    def program(self) -> dict | None:
        return _thawed(self.settings.get("program"))

    def to_dict(self) -> dict:
        """The spec as plain JSON data (`from_dict` reads it back)."""
        return {"label": self.label, "settings": _thawed(self.settings)}

    @classmethod
    def from_dict(cls, data: dict) -> RunSpec:
        return cls(label=data["label"], settings=_frozen(json.loads(json.dumps(data["settings"]))))

    def checkpoint_folders(self) -> list[str]:
        """The distinct `checkpoint:` folders of the spec's endpoint sections, in order."""
        from mua.serve.checkpoints import checkpoints_in

        return checkpoints_in(_thawed(self.settings))


def run_spec(recipe, entry, label: str | None = None) -> RunSpec:
    """The spec of one entry of `recipe.gyms` (or an eval cell's entry, named `label`)."""
    from mua.gym import get_gym
    from mua.gym.budgets import BUDGET_FIELDS
    from mua.gym.mix import entry_rollout, entry_user

    settings = entry.model_dump(mode="json", exclude=set(NAMES_ONLY))
    budgets = entry_rollout(recipe.rollout, entry, get_gym(entry.name))
    settings.update({key: getattr(budgets, key) for key in BUDGET_FIELDS})
    settings["user"] = entry_user(recipe.user, entry).model_dump(mode="json")
    return RunSpec(label=label or entry.key, settings=_frozen(settings))
