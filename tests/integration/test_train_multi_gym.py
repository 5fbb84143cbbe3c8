"""Several gyms in one GRPO run through `mua train` on CPU: per-gym metrics in MLflow, per-gym
group sizes, a curriculum and reward standardisation, and resume equal to the uninterrupted run
(two runs on this machine, never stored numbers)."""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import shared_guess_setup, write_rl_recipe
from tests.integration.train_helpers import final_params, metric_history, run_train

pytestmark = pytest.mark.integration


def _guess6_tasks(folder):
    from mua.gym import get_gym
    from mua.gym.taskfile import write_tasks

    splits = get_gym("guess").build_tasks(
        None, seed=3, options={"max_number": 6, "num_train": 24, "num_test": 4}
    )
    folder.mkdir(parents=True, exist_ok=True)
    return (
        write_tasks(splits["train"], folder / "train.parquet"),
        write_tasks(splits["test"], folder / "test.parquet"),
    )


def _recipe(folder, setup, six):
    model, train, test = setup
    gyms = [
        {
            "name": "guess",
            "label": "small",
            "train_files": [str(train)],
            "test_files": [str(test)],
            "weight": 1.0,
            "curriculum": {"easy_above": 0.9, "hard_below": 0.05, "weight": 0.2},
        },
        {
            "name": "guess",
            "label": "wide",
            "train_files": [str(six[0])],
            "test_files": [str(six[1])],
            "weight": 1.0,
            "n": 2,
            "max_turns": 3,
            "standardize_rewards": True,
            "score": "mean",
        },
    ]
    recipe = write_rl_recipe(
        folder, model, train, test, eval={"test_freq": 3, "max_tasks": 4}, total_steps=3
    )
    import yaml

    raw = yaml.safe_load(recipe.read_text())
    raw.pop("gym")
    raw["gyms"] = gyms
    raw["data"] = {"tasks_per_step": 4}
    recipe.write_text(yaml.safe_dump(raw))
    return recipe


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    shared = shared_guess_setup(tmp_path_factory)
    six = _guess6_tasks(tmp_path_factory.mktemp("six"))
    return shared, six


@pytest.fixture(scope="module")
def reference_run(setup, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mix_ref")
    res = run_train(_recipe(folder, *setup))
    assert res.returncode == 0, res.stderr[-3000:]
    (folder / "train.stdout").write_text(res.stdout)
    return folder / "run"


def test_mixed_run_logs_per_gym_metrics(reference_run):
    shares = [
        a + b
        for a, b in zip(
            metric_history(reference_run, "train/small/share"),
            metric_history(reference_run, "train/wide/share"),
            strict=True,
        )
    ]
    assert len(shares) == 3 and all(abs(s - 1.0) < 1e-9 for s in shares)
    for key in (
        "train/small/reward",
        "train/wide/reward",
        "train/wide/turns",
        "train/small/truncated",
        "train/wide/reward_scale",
        "curriculum/small/seen",
        "val/small/reward_mean",
        "val/wide/reward_mean",
        "val/macro/reward_mean",
        "val/reward_mean",
    ):
        assert metric_history(reference_run, key), key
    macro = metric_history(reference_run, "val/macro/reward_mean")[-1]
    small = metric_history(reference_run, "val/small/reward_mean")[-1]
    wide = metric_history(reference_run, "val/wide/reward_mean")[-1]
    assert abs(macro - (small + wide) / 2) < 1e-9
    # the wide gym's turn limit is its own (3), the small gym's the recipe's (2)
    assert max(metric_history(reference_run, "train/wide/turns")) <= 3
    assert max(metric_history(reference_run, "train/small/turns")) <= 2
    stdout = (reference_run.parent / "train.stdout").read_text()
    assert "gyms: small" in stdout and "wide" in stdout


def test_mixed_resume_matches_uninterrupted(setup, reference_run, tmp_path):
    recipe = _recipe(tmp_path, *setup)
    first = run_train(recipe, "total_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_train(recipe)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout + second.stderr
    for key in ("loss", "train/small/share", "train/wide/reward", "curriculum/small/seen"):
        ref, got = metric_history(reference_run, key), metric_history(tmp_path / "run", key)
        assert len(got) == 3 and max(abs(a - b) for a, b in zip(ref, got, strict=True)) <= 1e-6
    ref_params, params = final_params(reference_run), final_params(tmp_path / "run")
    assert max(float((ref_params[k] - params[k]).abs().max()) for k in ref_params) <= 1e-6


def test_rows_of_an_unlisted_gym_are_refused_before_launch(setup, tmp_path):
    import yaml

    recipe = _recipe(tmp_path, *setup)
    raw = yaml.safe_load(recipe.read_text())
    raw["data"]["train_files"] = [raw["gyms"][0]["train_files"][0]]
    raw["gyms"][0]["name"] = "math"
    raw["gyms"][0]["train_files"] = []
    raw["gyms"][0]["test_files"] = []
    raw["gyms"][0].pop("curriculum")
    recipe.write_text(yaml.safe_dump(raw))
    res = run_train(recipe)
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "guess" in lines[0] and "gyms" in lines[0], lines


@pytest.mark.slow
def test_userrl_all_seed_runs_one_step_with_scripted_users_on_cpu(tmp_path, mua_cli):
    """The all-gym seed as shipped, with built-in tasks in its data folders, scripted users, a
    tiny model and short budgets: one GRPO step over its five gyms."""
    from mua.gym import get_gym
    from mua.gym.taskfile import write_tasks
    from tests.conftest import REPO

    for gym in ("travel", "turtle", "persuade", "function", "tau"):
        options = {"domain": "retail"} if gym == "tau" else {}
        splits = get_gym(gym).build_tasks(None, seed=0, options=options)
        for split in ("train", "test"):
            write_tasks(splits[split][:4], tmp_path / "data" / f"userrl_{gym}" / f"{split}.parquet")
    recipe = tmp_path / "userrl_all.yaml"
    text = (REPO / "recipes" / "seeds" / "userrl_all.yaml").read_text()
    # built-in tau tasks carry their own database: no tau-bench folder (`data_dir`) is needed
    text = text.replace("data_dir: data/tau_bench, ", "")
    recipe.write_text(text.replace("data/", f"{tmp_path}/data/"))
    res = run_train(
        recipe,
        "user.kind=scripted",
        "model.path=tiny:qwen3-1m",
        "model.dtype=float32",
        "rollout.engine=hf",
        "parallel.mixed_precision=auto",
        "parallel.activation_checkpointing=false",
        "data.tasks_per_step=10",
        "rollout.n=2",
        "algo.mini_batches=1",
        "rollout.max_new_tokens_per_turn=16",
        "rollout.max_total_tokens=4096",
        "rollout.max_turns=2",
        "total_steps=1",
        "eval.test_freq=0",
        "checkpoint.save_freq=0",
        f"run_dir={tmp_path / 'run'}",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    shares = {
        g: metric_history(tmp_path / "run", f"train/{g}/share")
        for g in ("travel", "turtle", "persuade", "tau", "function")
    }
    assert all(len(v) == 1 for v in shares.values())
    assert abs(sum(v[0] for v in shares.values()) - 1.0) < 1e-9
    assert sum(1 for v in shares.values() if v[0] > 0) >= 3  # equal rows: most gyms are drawn
