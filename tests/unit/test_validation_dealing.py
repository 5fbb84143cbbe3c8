"""In-training validation deals each gym's held-out tasks and seeds each gym on its own."""

from mua.train.rl_setup import SeededPolicy
from mua.train.rl_validation import deal_held_out, validation_seed


def _seeds(test_by_gym, world_size):
    """(gym, task) -> the seed of its sample 0, turn 0, as each rank's policy draws it."""
    out = {}
    for rank in range(world_size):
        mine = deal_held_out(test_by_gym, rank, world_size)
        for index, (label, tasks) in enumerate(mine.items()):
            policy = SeededPolicy(
                None,
                _Rollout(),
                None,
                seed=validation_seed(0, index),
                rank=rank,
                world_size=world_size,
            )
            for pos, task in enumerate(tasks):
                out[(label, task)] = policy.request_seed(f"{pos}:{task}/0")
    return out


class _Rollout:
    temperature, top_p, top_k = 1.0, 1.0, -1


def test_seeds_do_not_depend_on_the_number_of_ranks_and_differ_between_gyms():
    test_by_gym = {"guess": ["a", "b", "c"], "math": ["x", "y"]}
    one, two, three = (_seeds(test_by_gym, w) for w in (1, 2, 3))
    assert one == two == three
    assert one[("guess", "a")] != one[("math", "x")]  # each gym's first task draws differently


def test_a_single_gym_keeps_the_data_seed_plus_one():
    assert validation_seed(5, 0) == 6
