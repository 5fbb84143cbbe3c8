"""Several gyms in one recipe: the one `gyms:` shape, its checks, the seeded and checkpointed
task sampler (weights, curriculum, reward standardisation), per-gym advantages, the runner's
per-task routes, the eval macro average and the console's per-gym split."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from mua.config import load_recipe
from mua.errors import UsageError
from mua.gym.api import Task
from mua.gym.taskfile import write_tasks


def _tasks(gym: str, n: int, split: str = "train") -> list[Task]:
    return [
        Task(f"{gym}-{split}-{i}", gym, split, [{"role": "user", "content": str(i)}], {"i": i})
        for i in range(n)
    ]


def _recipe(tmp_path, body: dict, verb: str = "train"):
    path = tmp_path / f"{verb}.yaml"
    path.write_text(yaml.safe_dump({"verb": verb, **body}))
    return load_recipe(str(path))


# ---- the recipe shape ----------------------------------------------------------------------


def test_single_gym_is_a_one_entry_list(tmp_path):
    one = _recipe(tmp_path, {"gym": {"name": "travel", "options": {"rules": "mua"}}})
    assert len(one.gyms) == 1 and one.gyms[0].name == "travel"
    assert not hasattr(one, "gym")  # read into gyms at load: no second way to reach the entry
    dumped = one.model_dump(mode="json")
    assert "gym" not in dumped and dumped["gyms"][0]["name"] == "travel"
    again = _recipe(tmp_path, {"gyms": dumped["gyms"]})  # the resolved form reads back
    assert again.gyms == one.gyms
    assert [g.name for g in _recipe(tmp_path, {}).gyms] == ["guess"]  # neither: the default gym
    two = _recipe(tmp_path, {"gyms": [{"name": "guess"}, {"name": "travel"}]})
    assert [g.key for g in two.gyms] == ["guess", "travel"]
    for verb in ("rollout", "eval"):
        both = _recipe(tmp_path, {"gyms": [{"name": "guess"}, {"name": "math"}]}, verb)
        assert [g.name for g in both.gyms] == ["guess", "math"]


@pytest.mark.parametrize(
    "gyms, message",
    [
        ([{"name": "tau"}, {"name": "tau"}], "gyms[1] (tau): label 'tau' is also gyms[0]'s"),
        ([{"name": "guess", "weight": 0}], "gyms[0] (guess): weight 0 must be > 0"),
        ([{"name": "guess", "weight": -1}, {"name": "math", "weight": 1}], "weight -1 must be > 0"),
        ([{"name": "guess", "weight": 2}, {"name": "math"}], "gyms[1] (math): no weight while"),
        ([{"name": "guess", "curriculum": {"easy_above": 0.1, "hard_below": 0.5}}], "hard_below"),
    ],
)
def test_shape_errors_name_the_entry(tmp_path, gyms, message):
    with pytest.raises(UsageError) as err:
        _recipe(tmp_path, {"gyms": gyms})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_labels_tell_two_entries_of_one_gym_apart(tmp_path):
    r = _recipe(tmp_path, {"gyms": [{"name": "tau", "label": "retail"}, {"name": "tau"}]})
    assert [g.key for g in r.gyms] == ["retail", "tau"]


def _checked(tmp_path, body, verb="train"):
    from mua.gym.mix import check_gyms

    check_gyms(_recipe(tmp_path, body, verb), verb)


def test_run_checks_name_the_entry_and_the_fix(tmp_path):
    guess = write_tasks(_tasks("guess", 4), tmp_path / "guess.parquet")
    math = write_tasks(_tasks("math", 4), tmp_path / "math.parquet")
    cases = [
        ({"gyms": [{"name": "guess"}, {"name": "travl"}]}, "gyms[1] (travl): unknown gym"),
        (
            {"gyms": [{"name": "guess"}, {"name": "travel"}], "data": {"train_files": [str(math)]}},
            "holds tasks of gym 'math', which gyms does not list",
        ),
        (
            {"gyms": [{"name": "guess", "train_files": [str(math)]}, {"name": "math"}]},
            "gyms[0] (guess): " + str(math) + " holds tasks of gym 'math'",
        ),
        (
            {
                "gyms": [{"name": "guess", "label": "a"}, {"name": "guess", "label": "b"}],
                "data": {"train_files": [str(guess)]},
            },
            "would go to both a and b",
        ),
        (
            {"gyms": [{"name": "guess", "temperature": 0.5}, {"name": "math"}]},
            "gyms[0] (guess): temperature 0.5 differs from rollout.temperature",
        ),
        (
            {"gyms": [{"name": "guess", "reward_weights": {"speed": 1}}, {"name": "math"}]},
            "gyms[0] (guess): reward_weights names 'speed'",
        ),
        (
            {
                "gyms": [{"name": "guess", "score": "sum"}, {"name": "math"}],
                "algo": {"kind": "ppo"},
            },
            "score applies to GRPO",
        ),
        (
            {
                "gyms": [{"name": "guess"}, {"name": "math"}],
                "data": {"train_files": [str(guess)], "weights": [1.0]},
            },
            "give each entry a `weight` instead",
        ),
    ]
    for body, message in cases:
        with pytest.raises(UsageError) as err:
            _checked(tmp_path, body)
        assert message in str(err.value), (body, str(err.value))
    with pytest.raises(UsageError, match=r"gyms\[0\] \(guess\): n is a training setting"):
        _checked(tmp_path, {"gyms": [{"name": "guess", "n": 2}, {"name": "math"}]}, "eval")
    _checked(tmp_path, {"gyms": [{"name": "guess", "n": 2}, {"name": "math"}]}, "rollout")


def test_train_refuses_a_bad_mix_with_one_line_exit_2(mua_cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "verb": "train",
                "gyms": [{"name": "guess", "train_files": ["x.parquet"]}, {"name": "nope"}],
            }
        )
    )
    code, _, err = mua_cli("train", str(path))
    assert code == 2 and "gyms[1] (nope): " in err and len(err.strip().splitlines()) == 1, err


def test_entry_user_and_budgets(tmp_path):
    from mua.gym import get_gym
    from mua.gym.mix import entry_rollout, entry_user

    r = _recipe(
        tmp_path,
        {
            "user": {"kind": "llm", "model": "big", "base_url": "http://127.0.0.1:9/v1"},
            "rollout": {"max_turns": 5},
            "gyms": [
                {"name": "travel", "user": {"model": "small", "temperature": 0.7}},
                {"name": "turtle", "user": {"kind": "scripted"}, "max_turns": 2},
            ],
        },
    )
    travel, turtle = (entry_user(r.user, g) for g in r.gyms)
    assert (travel.kind, travel.model, travel.temperature) == ("llm", "small", 0.7)
    assert travel.base_url == "http://127.0.0.1:9/v1"  # the rest from the top-level user
    assert turtle.kind == "scripted"
    cfg_travel = entry_rollout(r.rollout, r.gyms[0], get_gym("travel"))
    cfg_turtle = entry_rollout(r.rollout, r.gyms[1], get_gym("turtle"))
    assert cfg_travel.max_turns == 5 and cfg_turtle.max_turns == 2  # recipe, then entry
    assert cfg_travel.max_total_tokens == get_gym("travel").budgets["max_total_tokens"]
    scripted = _recipe(tmp_path, {"gyms": [{"name": "travel", "user": {"model": "small"}}]})
    assert entry_user(scripted.user, scripted.gyms[0]).kind == "scripted"  # user.kind=scripted


# ---- the sampler ---------------------------------------------------------------------------


def _sampler(**kw):
    from mua.train.mix_sampler import MixSampler

    sources = {"a": _tasks("ga", 30), "b": _tasks("gb", 10), "c": _tasks("gc", 5)}
    return MixSampler(sources, kw.pop("weights", {"a": 1, "b": 1, "c": 2}), seed=3, **kw)


def test_sampler_follows_weights_and_is_seeded():
    from collections import Counter

    first, second = _sampler(), _sampler()
    draws = first.next_labelled(4000)
    assert [(lab, t.task_id) for lab, t in draws] == [
        (lab, t.task_id) for lab, t in second.next_labelled(4000)
    ]
    counts = Counter(lab for lab, _ in draws)
    assert abs(counts["c"] / 4000 - 0.5) < 0.03 and abs(counts["a"] / 4000 - 0.25) < 0.03
    assert all(t.gym == "g" + lab for lab, t in draws)  # a label draws only its own tasks
    other = _sampler()
    other.seed = 4
    assert [t.task_id for _, t in other.next_labelled(50)] != [t.task_id for _, t in draws[:50]]


def test_sampler_resume_equals_uninterrupted():
    from mua.train.mix_sampler import MixSampler

    cur = {"b": _curriculum()}
    straight = _sampler(curricula=cur, standardize={"a"})
    part = _sampler(curricula=cur, standardize={"a"})

    def rewards(draws):  # (label, task id, reward) rows
        return [(lab, t.task_id, float(int(t.task_id.split("-")[-1]) % 3)) for lab, t in draws]

    for s in (straight, part):
        s.observe(rewards(s.next_labelled(20)))
    state = part.state_dict()
    resumed = _sampler(curricula=cur, standardize={"a"})
    resumed.load_state_dict(state)
    a = straight.next_labelled(40)
    b = resumed.next_labelled(40)
    assert [(x, t.task_id) for x, t in a] == [(x, t.task_id) for x, t in b]
    assert straight.reward_scale("a") == resumed.reward_scale("a") != 1.0
    # one gym: exactly the single-gym TaskSampler order, and its old checkpoint form loads
    one = MixSampler({"g": [_tasks("g", 7)]}, {"g": 1.0}, seed=5)
    from mua.train.data import TaskSampler as Plain

    plain = Plain([_tasks("g", 7)], None, 5)
    assert [t.task_id for t in one.next_tasks(20)] == [t.task_id for t in plain.next_tasks(20)]
    fresh = MixSampler({"g": [_tasks("g", 7)]}, {"g": 1.0}, seed=5)
    fresh.load_state_dict({"consumed": 20})
    assert [t.task_id for t in fresh.next_tasks(5)] == [t.task_id for t in plain.next_tasks(5)]


def _curriculum(**kw):
    from mua.config.gyms import CurriculumConfig

    return CurriculumConfig(**{"easy_above": 0.9, "hard_below": 0.1, "weight": 0.0, **kw})


def test_curriculum_draws_too_easy_and_too_hard_tasks_less():
    s = _sampler(weights={"a": 0.0001, "b": 1, "c": 0.0001}, curricula={"b": _curriculum()})
    solved = {f"gb-train-{i}" for i in range(5)}  # always solved: too easy
    s.observe([("b", tid, 1.0) for tid in solved] + [("b", "gb-train-5", 0.0)])  # too hard
    s.observe([("b", "gb-train-6", 0.5)])  # in between
    drawn = [t.task_id for lab, t in s.next_labelled(300) if lab == "b"]
    assert drawn and not (set(drawn) & (solved | {"gb-train-5"}))
    assert "gb-train-6" in drawn
    assert s.pool_sizes("b") == {"easy": 5, "hard": 1, "seen": 7}
    s.observe([("b", tid, 0.5) for tid in solved])  # a task's latest group mean counts
    assert s.pool_sizes("b")["easy"] == 0


def test_empty_source_and_zero_weights_are_refused():
    from mua.train.mix_sampler import MixSampler

    with pytest.raises(UsageError, match=r"gyms \(b\): no training tasks"):
        MixSampler({"a": _tasks("a", 2), "b": []}, {"a": 1, "b": 1}, seed=0)
    with pytest.raises(UsageError, match="every weight is 0"):
        MixSampler({"a": _tasks("a", 2)}, {"a": 0.0}, seed=0)


# ---- advantages per gym --------------------------------------------------------------------


def _scored(rows):
    from types import SimpleNamespace

    from mua.train.rl_batch import ScoredBatch

    kept = [
        SimpleNamespace(gym=gym, group_id=group, turn_rewards=rewards, turn_index=[0] * 2 + [1] * 2)
        for gym, group, rewards in rows
    ]
    masks = [[1, 1, 1, 1] for _ in kept]
    return ScoredBatch(kept=kept, masks=masks, samples=[], rows=list(range(len(kept))), report=None)


def test_each_gym_scores_with_its_own_settings_and_scale():
    from mua.config.train import GRPOConfig
    from mua.train.rl_batch import group_relative_advantages

    rows = [
        ("x", "0:t", [0.0, 1.0]),
        ("x", "0:t", [1.0, 1.0]),
        ("y", "1:u", [0.0, 3.0]),
        ("y", "1:u", [5.0, 0.0]),
    ]
    algo = GRPOConfig(score="sum", advantage="grpo", credit="equalized", gamma=1.0)
    tokens, traj = group_relative_advantages(_scored(rows), algo)
    own_y = algo.model_copy(update={"score": "r2g", "gamma": 0.5})
    mixed_tokens, mixed = group_relative_advantages(_scored(rows), algo, {"y": own_y})
    assert mixed[:2] == traj[:2] and [t.tolist() for t in mixed_tokens[:2]] == [
        t.tolist() for t in tokens[:2]
    ]  # gym x unchanged
    alone_tokens, alone = group_relative_advantages(_scored(rows[2:]), own_y)
    assert mixed[2:] == alone and [t.tolist() for t in mixed_tokens[2:]] == [
        t.tolist() for t in alone_tokens
    ]  # gym y as if alone
    assert mixed[2:] != traj[2:]
    no_std = algo.model_copy(update={"advantage": "rloo"})
    _, unscaled = group_relative_advantages(_scored(rows), no_std)
    _, scaled = group_relative_advantages(
        _scored(rows), no_std, reward_scale=lambda g: 0.5 if g == "y" else 1.0
    )
    assert scaled[:2] == unscaled[:2]
    assert scaled[2:] == pytest.approx([a * 0.5 for a in unscaled[2:]])


# ---- the runner ----------------------------------------------------------------------------


def test_runner_routes_each_task_to_its_gym_limits_and_group_size():
    from mua.config.rollout import RolloutConfig
    from mua.gym import GymContext, get_gym
    from mua.gym.mix import GymRun
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts
    from mua.rollout.policies import expert_policy

    guess, math = get_gym("guess"), get_gym("math")
    g_tasks = guess.build_tasks(None, seed=0, options={"num_train": 2, "num_test": 0})["train"]
    m_tasks = math.build_tasks(None, seed=0, options={"num_train": 2, "num_test": 0})["train"]
    ctx = GymContext()
    cfg = RolloutConfig(n=1, max_total_tokens=2048, max_new_tokens_per_turn=256)
    one_turn = cfg.model_copy(update={"max_turns": 1})
    routes = [
        GymRun("g", guess, ctx, one_turn, 3, policy=expert_policy(guess, ctx)),
        GymRun("m", math, ctx, cfg, 2, policy=expert_policy(math, ctx)),
    ]
    tasks = [g_tasks[0], m_tasks[0], g_tasks[1]]
    trajs = asyncio.run(
        run_rollouts(
            tasks,
            policy=None,
            tokenizer=load_tokenizer("tiny:qwen3-1m"),
            rollout_cfg=cfg,
            runs=[routes[0], routes[1], routes[0]],
        )
    )
    assert [t.gym for t in trajs] == ["g"] * 3 + ["m"] * 2 + ["g"] * 3
    assert [t.group_id.split(":")[0] for t in trajs] == ["0"] * 3 + ["1"] * 2 + ["2"] * 3
    assert all(t.num_turns == 1 for t in trajs if t.gym == "g")  # guess's own turn limit
    assert all(t.reward == 1.0 for t in trajs if t.gym == "m")  # math's expert solves it


def test_global_index_with_per_gym_group_sizes():
    from mua.train.rl_batch import global_index

    sizes = [4, 2, 4, 2]  # global tasks 0..3; two ranks deal them strided
    assert global_index("1:t", 0, rank=0, world_size=2, n=sizes) == 4 + 2 + 0
    assert global_index("1:t", 1, rank=1, world_size=2, n=sizes) == 4 + 2 + 4 + 1
    assert global_index("1:t", 1, rank=1, world_size=2, n=4) == 3 * 4 + 1


# ---- reports -------------------------------------------------------------------------------


def test_macro_average_and_console_split():
    from mua.eval.report import macro_average
    from mua.track.console import gym_split

    counts = {"num_trajectories": 2, "excluded": 0}
    summaries = {
        "a": {"reward_mean": 1.0, "success_rate": 1.0, "turns_mean": 2.0, "pass@1": 1.0, **counts},
        "b": {"reward_mean": 0.0, "success_rate": 0.5, "turns_mean": 4.0, "pass@1": 0.0, **counts},
    }
    assert macro_average(summaries) == {
        "reward_mean": 0.5,
        "success_rate": 0.75,
        "turns_mean": 3.0,
        "pass@1": 0.5,
    }
    assert macro_average({"a": summaries["a"]}) == {}
    line = gym_split(
        {
            "train/a/reward": 0.5,
            "train/a/share": 0.25,
            "train/b/reward": 0.1,
            "val/b/reward_mean": 0.3,
        }
    )
    assert (
        line.startswith("gyms: a 0.5") and "(25%)" in line and "b 0.1" in line and "val 0.3" in line
    )


def test_view_charts_each_gyms_reward_of_a_mixed_run():
    from mua.view.sources import per_gym_series

    metrics = [
        {"step": 1, "reward/mean": 0.2, "train/a/reward": 0.1, "train/b/reward": 0.3},
        {"step": 2, "train/a/reward": 0.4, "val/a/reward_mean": 0.5, "val/a/termination/done": 3},
    ]
    assert per_gym_series(metrics) == {
        "train/a/reward": [(1, 0.1), (2, 0.4)],
        "train/b/reward": [(1, 0.3)],
        "val/a/reward_mean": [(2, 0.5)],
    }
    assert per_gym_series([{"step": 1, "reward/mean": 0.2, "val/reward_mean": 0.1}]) == {}


def test_an_entry_without_training_tasks_is_refused(tmp_path):
    guess = write_tasks(_tasks("guess", 4), tmp_path / "guess.parquet")
    with pytest.raises(UsageError, match=r"gyms\[1\] \(math\): no training tasks"):
        _checked(
            tmp_path,
            {"gyms": [{"name": "guess"}, {"name": "math"}], "data": {"train_files": [str(guess)]}},
        )


def test_a_one_gym_run_weighs_its_files_with_data_weights(tmp_path):
    """One gym, two task files: `data.weights` picks the file of each draw (all from the
    second with weights [0, 1]); without it the files are one pool, as rows of one list."""
    from mua.gym import get_gym
    from mua.gym.taskfile import write_tasks
    from mua.train.mix_sampler import build_task_sampler

    tasks = get_gym("guess").build_tasks(None, seed=0, options={"num_train": 8, "num_test": 0})
    first, second = tasks["train"][:4], tasks["train"][4:]
    paths = [
        str(write_tasks(ts, tmp_path / f"{i}.parquet")) for i, ts in enumerate((first, second))
    ]
    data = {"train_files": paths, "tasks_per_step": 2}
    weighted = _recipe(tmp_path, {"gym": {"name": "guess"}, "data": {**data, "weights": [0, 1]}})
    drawn = build_task_sampler(weighted).next_tasks(12)
    assert {t.task_id for t in drawn} <= {t.task_id for t in second}
    pooled = build_task_sampler(_recipe(tmp_path, {"gym": {"name": "guess"}, "data": data}))
    assert {t.task_id for t in pooled.next_tasks(8)} == {t.task_id for t in first + second}
    capped = _recipe(tmp_path, {"gym": {"name": "guess"}, "data": {**data, "max_tasks": 3}})
    assert {t.task_id for t in build_task_sampler(capped).next_tasks(6)} == {
        t.task_id for t in first[:3]
    }
