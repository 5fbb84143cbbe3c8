"""GRPO through `mua train` on CPU under torchrun (gloo): rank-count and micro-batch independence,
exact resume, engine/trainer log-prob agreement, metrics and transcripts in MLflow."""

from __future__ import annotations

import pytest

from tests.integration.grpo_helpers import write_rl_recipe
from tests.integration.train_helpers import final_params, metric_history, run_train

pytestmark = pytest.mark.integration

# Two mini-batches × two epochs: the second pass has ratio != 1, so clipping and the
# recomputed old log-probs both matter.
ALGO = {"kind": "grpo", "mini_batches": 2, "epochs": 2}


def _max_param_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def reference_run(guess_setup, tmp_path_factory):
    """3 GRPO steps, 1 rank, one large micro-batch, no interruption."""
    model, train, test = guess_setup
    folder = tmp_path_factory.mktemp("ref")
    res = run_train(write_rl_recipe(folder, model, train, test, algo=ALGO, eval={"test_freq": 3}))
    assert res.returncode == 0, res.stderr[-3000:]
    (folder / "train.stdout").write_text(res.stdout)  # beside the run dir, not in it
    return folder / "run"


def test_grpo_trains_and_logs(reference_run):
    from mlflow.tracking import MlflowClient

    loss = metric_history(reference_run, "loss")
    assert len(loss) == 3 and all(abs(v) > 0 for v in loss)
    rewards = metric_history(reference_run, "reward/mean")
    assert 0 < min(rewards) and max(rewards) < 1  # the warm start gives GRPO reward variance
    # After every update the engine holds the trainer's weights: sampling log-probs agree.
    assert max(metric_history(reference_run, "logp_diff_engine_vs_trainer")) < 1e-4
    assert max(metric_history(reference_run, "actor/clip_frac")) > 0  # epoch 2 is off-policy
    assert metric_history(reference_run, "optimizer_steps") == [4.0, 4.0, 4.0]
    assert len(metric_history(reference_run, "val/reward_mean")) == 1
    client = MlflowClient(f"sqlite:///{reference_run / 'mlflow.db'}")
    run_id = (reference_run / "mlflow_run_id").read_text().strip()
    metrics = client.get_run(run_id).data.metrics
    for key in (
        "reward/success_rate",
        "rollout/turns_mean",
        "advantage/std",
        "actor/entropy",
        "grad_norm",
        "time/rollout_s",
        "time/update_s",
        "time/weight_push_s",
        "tokens_per_s",
        "termination/done",
    ):
        assert key in metrics, key
    transcripts = sorted(a.path for a in client.list_artifacts(run_id, "transcripts"))
    assert transcripts == [
        *(f"transcripts/step_00000{s}.txt" for s in (1, 2, 3)),
        "transcripts/val_000003.txt",  # the validation after step 3 (eval.test_freq 3)
    ]


def test_train_ends_saying_where_to_look(reference_run):
    from mua.track.console import mlflow_ui_command

    end = (reference_run.parent / "train.stdout").read_text().splitlines()[-3:]
    store = f"sqlite:///{reference_run.resolve() / 'mlflow.db'}"
    assert end == [
        f"done: {reference_run} · model: {reference_run / 'hf' / 'final'}",
        f"mlflow: {mlflow_ui_command(store)}",
        f"transcripts: mua view {reference_run}",
    ]


def test_view_page_holds_the_validation_transcripts(reference_run):
    from mua.view.page import write_page
    from mua.view.sources import load_view_data

    data = load_view_data([reference_run])
    assert [c.key for c in data.checkpoints] == ["run@1", "run@2", "run@3", "run:val@3"]
    (val,) = [r for r in data.records if r["checkpoint"] == "run:val@3"]  # transcripts_per_step 1
    assert val["messages"] and val["token_runs"] and val["sample_index"] == 0
    page = write_page(data, reference_run / "view.html", "t").read_text()
    assert page.count("data-ckpt='run:val@3'") == 1


def test_two_ranks_and_small_micro_batches_match_one_rank(guess_setup, reference_run, tmp_path):
    model, train, test = guess_setup
    recipe = write_rl_recipe(
        tmp_path,
        model,
        train,
        test,
        algo=ALGO,
        eval={"test_freq": 3},
        parallel={"micro_batch_tokens": 100},
    )
    res = run_train(recipe, "--nproc-per-node", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    for key in ("loss", "reward/mean", "grad_norm", "val/reward_mean"):
        ref, got = metric_history(reference_run, key), metric_history(tmp_path / "run", key)
        assert (
            len(ref) == len(got) and max(abs(a - b) for a, b in zip(ref, got, strict=False)) < 1e-5
        ), key
    assert _max_param_diff(final_params(reference_run), final_params(tmp_path / "run")) < 1e-5


def test_resume_matches_uninterrupted(guess_setup, reference_run, tmp_path):
    model, train, test = guess_setup
    recipe = write_rl_recipe(tmp_path, model, train, test, algo=ALGO, eval={"test_freq": 3})
    first = run_train(recipe, "total_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_train(recipe)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout + second.stderr
    ref_loss, loss = metric_history(reference_run, "loss"), metric_history(tmp_path / "run", "loss")
    assert len(loss) == 3
    assert max(abs(a - b) for a, b in zip(ref_loss, loss, strict=False)) <= 1e-6
    assert _max_param_diff(final_params(reference_run), final_params(tmp_path / "run")) <= 1e-6


def test_task_file_of_another_gym_is_a_usage_error(guess_setup, tmp_path):
    model, train, _ = guess_setup
    recipe = write_rl_recipe(tmp_path, model, train, gym={"name": "math"})
    res = run_train(recipe)
    assert res.returncode == 2
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "gym.name" in lines[0] and "guess" in lines[0]
