"""The run layer: a recipe's `gyms:` entries made ready to run, the same way for every verb.

`run_spec` (spec.py) resolves an entry into a frozen, serialisable `RunSpec`; `preflight`
(preflight.py) is every verb's one pre-flight over the specs; `entry_runs(recipe)` (train, `mua
rollout`) and `entry_run(recipe, entry)` (`mua eval`'s cells) give each entry's `GymRun` with the
user seat applied and its driver: an agent program through the gateway, else the turn loop.
Not here: the entry checks and budgets (`mua.gym.mix`), the turn loop (`mua.rollout.runner`).
"""

from mua.run.entries import driven, entry_run, entry_runs

__all__ = ["driven", "entry_run", "entry_runs"]
