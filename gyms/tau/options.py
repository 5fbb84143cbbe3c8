"""The tau gym's options (`gym.options` in a recipe), checked once per environment.

- `rules`: `upstream` (default) plays an episode as tau-bench and MUA-RL do: only the first tool
  call of a turn runs, an episode the runner cuts short (turn or token budget) is still scored on
  its final database, and the LLM customer gets tau-bench's simulator instructions. `mua` keeps
  mua's own variant: every tool call of a turn runs, only an episode that ended on its own
  (`###STOP###` or a transfer) is scored, and the customer prompt adds that a goal that cannot be
  achieved also ends the conversation. docs/fidelity.md compares the two.
- `domain`: `retail`, `airline` or `all`; read by `mua prep` (`build_tasks`), ignored here.
- `data_dir`: the public tau-bench data folder (the `--source` given to `mua prep`). Task rows
  name their database without a path, so public tasks need it at train/eval time; moving the
  data means changing this one option.

Deliberately not here: reading the data (data_prep.tau) or acting on the rules (env.py, users.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gyms.common.options import known_options, one_of
from mua.errors import UsageError

RULES = ("upstream", "mua")
KNOWN = ("rules", "domain", "data_dir")


@dataclass(frozen=True)
class TauOptions:
    rules: str = "upstream"
    data_dir: str | None = None

    @property
    def upstream(self) -> bool:
        return self.rules == "upstream"


def check_options(options: dict | None) -> TauOptions:
    """`gym.options` as TauOptions; an unknown key or a bad value is one UsageError line."""
    options = known_options(options, KNOWN, "tau")
    rules = one_of("rules", options.get("rules", "upstream"), RULES)
    data_dir = options.get("data_dir")
    if data_dir is not None and not isinstance(data_dir, str):
        raise UsageError(f"gym.options.data_dir must be a folder path, got {data_dir!r}")
    if data_dir and not Path(data_dir).expanduser().is_dir():
        raise UsageError(
            f"gym.options.data_dir: {data_dir} is not a folder; point it at the tau-bench data "
            "(the folder holding retail/ and airline/)"
        )
    return TauOptions(rules=rules, data_dir=data_dir or None)
