"""`mua train` end to end on CPU under torchrun (gloo): SFT determinism, resume, MLflow, bad recipes."""

from __future__ import annotations

import pytest

from tests.integration.train_helpers import (
    final_params,
    metric_history,
    run_train,
    write_sft_data,
    write_sft_recipe,
)

pytestmark = pytest.mark.integration


def _max_param_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


SECRET = "sk-planted-secret-value-123456789"


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """4 SFT steps on 1 rank, large micro-batches, no interruption; the recipe names an LLM
    user's key variable, set to `SECRET` (which the run must not write anywhere)."""
    folder = tmp_path_factory.mktemp("ref")
    user = {"kind": "llm", "api_key_env": "MUA_TEST_KEY"}
    recipe = write_sft_recipe(folder, write_sft_data(folder), user=user)
    res = run_train(recipe, env_extra={"MUA_TEST_KEY": SECRET})
    assert res.returncode == 0, res.stderr[-3000:]
    return folder / "run"


def test_two_ranks_and_small_micro_batches_match_one_rank(reference_run, tmp_path):
    recipe = write_sft_recipe(
        tmp_path, write_sft_data(tmp_path), parallel={"micro_batch_tokens": 48}
    )
    res = run_train(recipe, "--nproc-per-node", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    ref_loss = metric_history(reference_run, "loss")
    loss = metric_history(tmp_path / "run", "loss")
    assert len(ref_loss) == 4 and len(loss) == 4
    assert max(abs(a - b) for a, b in zip(ref_loss, loss)) < 1e-5
    assert ref_loss[0] != ref_loss[-1]  # it trained
    assert _max_param_diff(final_params(reference_run), final_params(tmp_path / "run")) < 1e-5


def test_resume_after_interruption_matches_uninterrupted(reference_run, tmp_path):
    recipe = write_sft_recipe(tmp_path, write_sft_data(tmp_path))
    first = run_train(recipe, "total_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    # What a trainer killed during the next checkpoint write leaves behind: a partial temp dir.
    partial = tmp_path / "run" / "checkpoints" / ".tmp-global_step_2"
    partial.mkdir()
    (partial / "__0_0.distcp").write_bytes(b"\0" * 10)
    second = run_train(recipe)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout + second.stderr
    assert not partial.exists()
    ref_loss = metric_history(reference_run, "loss")
    loss = metric_history(tmp_path / "run", "loss")
    assert len(loss) == 4
    assert max(abs(a - b) for a, b in zip(ref_loss, loss)) <= 1e-6
    assert _max_param_diff(final_params(reference_run), final_params(tmp_path / "run")) <= 1e-6
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["global_step_3", "global_step_4"]


def test_mlflow_store_has_params_metrics_artifacts_and_no_secret(reference_run):
    from mlflow.tracking import MlflowClient

    run_dir = reference_run
    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    run = client.get_run((run_dir / "mlflow_run_id").read_text().strip())
    assert run.data.params["optim.lr"] == "0.0001"
    assert run.data.params["user.api_key_env"] == "MUA_TEST_KEY"
    for key in ("loss", "grad_norm", "lr", "tokens_per_s", "time/step_s"):
        assert key in run.data.metrics, key
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["recipe.resolved.yaml"]
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


def test_bad_recipe_fails_fast_with_one_line(tmp_path):
    """A bad recipe is refused before torch is imported or any rank starts.

    "Fast" is checked by what runs, not by a clock: a `torch` that refuses to import sits first on
    the path, so the test fails if validation ever comes after the heavy imports.
    """
    recipe = write_sft_recipe(tmp_path, write_sft_data(tmp_path), optim={"lrr": 1.0})
    poisoned = tmp_path / "poisoned"
    (poisoned / "torch").mkdir(parents=True)
    (poisoned / "torch" / "__init__.py").write_text(
        "raise ImportError('torch was imported before the recipe was validated')\n"
    )
    res = run_train(recipe, env_extra={"PYTHONPATH": str(poisoned)})
    assert res.returncode == 2, res.stderr
    assert "torch was imported" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "optim.lrr" in lines[0] and "did you mean" in lines[0]


def test_missing_data_file_is_a_usage_error(tmp_path):
    recipe = write_sft_recipe(tmp_path, tmp_path / "nope.jsonl")
    res = run_train(recipe)
    assert res.returncode == 2
    assert "nope.jsonl not found" in res.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_allowed_recipe_change_takes_effect_once_the_resume_loaded(tmp_path):
    """The changed recipe is staged while the ranks load the checkpoint, then becomes the run's
    (with its change recorded); a failed start before that leaves the run's recipe alone."""
    import yaml

    recipe = write_sft_recipe(tmp_path, write_sft_data(tmp_path))
    first = run_train(recipe, "total_steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "run"
    second = run_train(recipe, "total_steps=2", "optim.lr=2e-5", "--allow-recipe-change")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from" in second.stdout + second.stderr
    resolved = yaml.safe_load((run / "recipe.resolved.yaml").read_text())["recipe"]
    assert resolved["optim"]["lr"] == 2e-5
    assert not (run / "recipe.pending.yaml").exists()
    changes = yaml.safe_load((run / "recipe_changes.yaml").read_text())[-1]["changes"]
    assert changes["optim.lr"]["to"] == 2e-5 and changes["optim.lr"]["took_effect"] is True
