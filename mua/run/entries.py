"""Each `gyms:` entry's `GymRun` with its seat and its driver (see `mua.run`).

Not here: building the plain run (`mua.gym.mix.gym_run`), running it (`mua.rollout.collect`).
"""

from __future__ import annotations

import dataclasses

from mua.gateway.program import run_program
from mua.gym.mix import GymRun, gym_run
from mua.users.seat_spec import seated


def driven(run: GymRun) -> GymRun:
    """`run` ready to run: seated when its entry says `seat: user`, driven by the gateway when
    its entry has a `program:`. Applying it twice changes nothing."""
    run = seated(run)
    if getattr(run.entry, "program", None) is not None and run.driver is None:
        run = dataclasses.replace(run, driver=run_program)
    return run


def entry_run(recipe, entry, *, with_client: bool = True) -> GymRun:
    """The ready run of one entry of `recipe.gyms` (its LLM user client made when `with_client`)."""
    return driven(gym_run(recipe, entry, with_client=with_client))


def entry_runs(recipe, *, with_clients: bool = True) -> list[GymRun]:
    """Every entry's ready run, in `recipe.gyms` order."""
    return [entry_run(recipe, entry, with_client=with_clients) for entry in recipe.gyms]
