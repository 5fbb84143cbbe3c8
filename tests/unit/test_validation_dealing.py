"""In-training validation deals each gym's held-out tasks and seeds each gym on its own."""

from mua.gym.api import Task
from mua.gym.mix import GymRun
from mua.rollout.collect import SeedKey
from mua.rollout.policies import SeededPolicy
from mua.train.rl_validation import deal_held_out, validation_groups, validation_seed


def _task(task_id: str) -> Task:
    return Task(task_id=task_id, gym="g", split="test", prompt=[], payload={})


def _seeds(test_by_gym, world_size):
    """(gym, task) -> the seed of its sample 0, turn 0, as each rank's groups draw it."""
    runs = {label: GymRun(label, None, None, _Rollout(), 1) for label in test_by_gym}
    out = {}
    for rank in range(world_size):
        mine = deal_held_out(test_by_gym, rank, world_size)
        groups = validation_groups(
            mine,
            runs,
            1,
            rank,
            world_size,
            lambda index: SeededPolicy.for_rollout(
                None, _Rollout(), None, seed=validation_seed(0, index)
            ),
        )
        for group in groups:
            key = (group.run.label, group.task.task_id)
            out[key] = group.run.policy.request_seed(group.seed, 0)
    return out


class _Rollout:
    temperature, top_p, top_k = 1.0, 1.0, -1


def test_seeds_do_not_depend_on_the_number_of_ranks_and_differ_between_gyms():
    test_by_gym = {
        "guess": [_task("a"), _task("b"), _task("c")],
        "math": [_task("x"), _task("y")],
    }
    one, two, three = (_seeds(test_by_gym, w) for w in (1, 2, 3))
    assert len(one) == 5
    assert one == two == three
    assert one[("guess", "a")] != one[("math", "x")]  # each gym's first task draws differently


def test_seeds_come_from_the_key_not_a_string():
    policy = SeededPolicy.for_rollout(None, _Rollout(), None, seed=3)
    seeds = {
        policy.request_seed(SeedKey(step, pos, sample), turn)
        for step in (1, 2)
        for pos in (0, 1)
        for sample in (0, 1)
        for turn in (0, 1)
    }
    assert len(seeds) == 16  # each part of the key changes the seed
    assert policy.request_seed(SeedKey(1, 0, 0), 0) == policy.request_seed(SeedKey(1, 0, 0), 0)


def test_a_single_gym_keeps_the_data_seed_plus_one():
    assert validation_seed(5, 0) == 6
