"""The RL task sampler over a recipe's gyms: which gym and which task each GRPO group gets.

`MixSampler` keeps one source per `gyms:` entry and picks one by weight per draw (seeded by
data.seed and draw number), then its next task in seeded per-epoch shuffles (`TaskSampler`) or,
with `curriculum`, by difficulty (docs/multi_gym.md). `observe` takes every scored trajectory
from all ranks to update group means and reward statistics. Its whole state is a plain dict saved
in checkpoints; one entry without curriculum draws exactly as `TaskSampler`.
Not here: rolling out, talking to other ranks.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from mua.errors import UsageError
from mua.train.data import TaskSampler


class MixSampler:
    def __init__(
        self,
        sources: dict[str, list],
        weights: dict[str, float],
        seed: int,
        *,
        shuffle: bool = True,
        curricula: dict | None = None,
        standardize: set[str] | frozenset = frozenset(),
        file_weights: list[float] | None = None,
    ):
        """`sources`: label -> tasks (a single source may be a list of files, each a task list,
        with `file_weights` as in `TaskSampler`); `weights`: label -> share of the draws."""
        empty = [label for label, tasks in sources.items() if not tasks]
        if empty:
            raise UsageError(
                f"gyms ({empty[0]}): no training tasks; give the entry train_files, or rows of "
                "its gym in data.train_files"
            )
        self.labels = list(sources)
        self.weights = [float(weights[label]) for label in self.labels]
        if not sum(self.weights) > 0:
            raise UsageError("gyms: every weight is 0; give at least one entry a weight > 0")
        self.seed = seed
        self.curricula = dict(curricula or {})
        self.standardize = set(standardize)
        self.samplers: dict[str, TaskSampler] = {}
        for i, label in enumerate(self.labels):
            tasks = sources[label]
            nested = bool(tasks) and isinstance(tasks[0], list)
            files = tasks if nested else [tasks]
            seed_i = seed if len(self.labels) == 1 else seed * 7919 + 104_729 * (i + 1)
            self.samplers[label] = TaskSampler(
                files, file_weights if nested else None, seed_i, shuffle
            )
        self.epoch_len = sum(s.epoch_len for s in self.samplers.values())
        self.draws = 0
        self.group_means: dict[str, dict[str, float]] = defaultdict(dict)
        self.reward_stats: dict[str, list[float]] = {}  # label -> [count, mean, M2]
        self._by_id: dict[str, dict] = {}  # label -> task id -> task (`find_task`)

    # ---- drawing -------------------------------------------------------------------------
    @property
    def consumed(self) -> int:
        return self.draws

    @property
    def epoch(self) -> int:
        return self.draws // max(self.epoch_len, 1)

    def _pick_source(self, rng: random.Random) -> str:
        if len(self.labels) == 1:
            return self.labels[0]
        return rng.choices(self.labels, weights=self.weights, k=1)[0]

    def _curriculum_task(self, label: str, rng: random.Random):
        cur = self.curricula[label]
        tasks = [t for f in self.samplers[label].files for t in f]
        seen = self.group_means.get(label, {})
        weights = []
        for task in tasks:
            mean = seen.get(str(task.task_id))
            hard_or_easy = mean is not None and (mean <= cur.hard_below or mean >= cur.easy_above)
            weights.append(cur.weight if hard_or_easy else 1.0)
        if not sum(weights) > 0:  # every task too easy or too hard, and their weight is 0
            weights = [1.0] * len(tasks)
        return rng.choices(tasks, weights=weights, k=1)[0]

    def next_labelled(self, k: int) -> list[tuple[str, object]]:
        """The next `k` draws as (label, task)."""
        out = []
        for _ in range(k):
            rng = random.Random(f"mua-mix/{self.seed}/{self.draws}")
            label = self._pick_source(rng)
            if label in self.curricula:
                task = self._curriculum_task(label, rng)
            else:
                task = self.samplers[label].next_tasks(1)[0]
            out.append((label, task))
            self.draws += 1
        return out

    def next_tasks(self, k: int) -> list:
        return [task for _, task in self.next_labelled(k)]

    def find_task(self, label: str, task_id: str):
        """Entry `label`'s task `task_id` (a resumed run restarting the groups in flight at its
        checkpoint); UsageError when the recipe's data no longer has it."""
        source = self.samplers.get(label)
        if source is not None and label not in self._by_id:
            self._by_id[label] = {str(t.task_id): t for f in source.files for t in f}
        task = self._by_id.get(label, {}).get(str(task_id))
        if task is not None:
            return task
        raise UsageError(
            f"gyms ({label}): the checkpoint has task {task_id} in flight but the training data "
            "has no such task; resume with the data the run was saved with, or --no-resume"
        )

    # ---- feedback ------------------------------------------------------------------------
    def observe(self, rows: list[tuple[str, str, float]]) -> None:
        """Every scored (not masked) trajectory of a step, from all ranks: (label, task id, reward).
        A task with none keeps its previous group mean."""
        groups: dict[tuple[str, str], list[float]] = defaultdict(list)
        for label, task_id, reward in rows:
            groups[(label, str(task_id))].append(float(reward))
            if label in self.standardize:
                count, mean, m2 = self.reward_stats.get(label, [0.0, 0.0, 0.0])
                count += 1
                delta = reward - mean
                mean += delta / count
                m2 += delta * (reward - mean)
                self.reward_stats[label] = [count, mean, m2]
        for (label, task_id), rewards in groups.items():
            if label in self.curricula:
                self.group_means[label][task_id] = sum(rewards) / len(rewards)

    def reward_scale(self, label: str) -> float:
        """1 / the running std of an entry's rewards (1 without `standardize_rewards`, or before
        two rewards that differ were seen)."""
        count, _, m2 = self.reward_stats.get(label, [0.0, 0.0, 0.0])
        if label not in self.standardize or count < 2:
            return 1.0
        std = math.sqrt(m2 / (count - 1))
        return 1.0 / std if std > 1e-8 else 1.0

    def pool_sizes(self, label: str) -> dict[str, int]:
        """How many of an entry's tasks are too easy, too hard, or in between (curriculum)."""
        cur = self.curricula.get(label)
        if cur is None:
            return {}
        means = self.group_means.get(label, {}).values()
        easy = sum(1 for m in means if m >= cur.easy_above)
        hard = sum(1 for m in means if m <= cur.hard_below)
        return {"easy": easy, "hard": hard, "seen": len(self.group_means.get(label, {}))}

    # ---- checkpoints ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "consumed": self.draws,
            "sources": {label: s.state_dict() for label, s in self.samplers.items()},
            "group_means": {k: dict(v) for k, v in self.group_means.items()},
            "reward_stats": {k: list(v) for k, v in self.reward_stats.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        self.draws = int(state["consumed"])
        sources = state.get("sources")
        if sources is None:  # a checkpoint of a single-gym run before the gyms list
            if len(self.labels) != 1:
                raise UsageError(
                    "the checkpoint holds one gym's sampler position but the recipe lists "
                    f"{len(self.labels)} gyms; resume with the recipe it was saved with"
                )
            sources = {self.labels[0]: {"consumed": self.draws}}
        missing = [label for label in self.labels if label not in sources]
        if missing:
            raise UsageError(
                f"gyms ({missing[0]}): the checkpoint has no sampler state for this entry; resume "
                "with the gyms list the run was saved with"
            )
        for label in self.labels:
            self.samplers[label].load_state_dict(sources[label])
        self.group_means = defaultdict(
            dict, {k: dict(v) for k, v in state.get("group_means", {}).items()}
        )
        self.reward_stats = {k: list(v) for k, v in state.get("reward_stats", {}).items()}


def build_task_sampler(recipe) -> MixSampler:
    """The RL run's sampler: one source per `gyms:` entry, weights as the entries say (default:
    their training rows), each entry's tasks kept per file: `data.weights` (one gym only,
    `mua.gym.mix.check_gyms`) weighs them; without it the files are one pool."""
    from mua.gym.mix import default_weights, entry_task_files
    from mua.train.data import cap_files

    r = recipe
    curricula = {e.key: e.curriculum for e in r.gyms if e.curriculum is not None}
    standardize = {e.key for e in r.gyms if e.standardize_rewards}
    by_gym = entry_task_files(r, "train", builtin=False)
    if r.data.max_tasks:
        by_gym = {label: cap_files(files, r.data.max_tasks) for label, files in by_gym.items()}
    weights = default_weights({k: sum(map(len, v)) for k, v in by_gym.items()}, r.gyms)
    return MixSampler(
        by_gym,
        weights,
        r.data.seed,
        shuffle=r.data.shuffle,
        curricula=curricula,
        standardize=standardize,
        file_weights=r.data.weights,
    )
