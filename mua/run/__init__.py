"""The run layer: a recipe's `gyms:` entries made ready to run, the same way for every verb.

`entry_runs(recipe)` (train, `mua rollout`) and `entry_run(recipe, entry)` (`mua eval`'s cells)
give each entry's `mua.gym.mix.GymRun` with the user seat applied (`mua.users.seat_spec.seated`)
and its driver: an agent program through the training gateway for a `program:` entry, else the
turn loop. `mua.rollout.collect` runs conversations by the run it is handed and imports neither.
Not here: the entry checks and budgets (`mua.gym.mix`), the turn loop (`mua.rollout.runner`).
"""

from mua.run.entries import driven, entry_run, entry_runs

__all__ = ["driven", "entry_run", "entry_runs"]
