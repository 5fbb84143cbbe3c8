"""MLflow tracking of a training run (rank 0 only; other ranks get a tracker that does nothing).

Store: `track.mlflow_uri`, else $MLFLOW_TRACKING_URI, else `sqlite:///<run_dir>/mlflow.db`.
Logged: the flattened resolved recipe as parameters (names of environment variables only, never
their values; URL credentials redacted), numeric metrics per step (NaN and infinities included),
the resolved recipe file and sampled transcripts as artifacts (`transcripts/step_N.txt`, and
`transcripts/val_N.txt` for the validation after step N). The same metrics and transcripts
also go to the run dir (`mua.track.run_files`: `metrics.jsonl`, `transcripts/step_N.jsonl`,
`transcripts/val_N.jsonl`) for `mua view`. A resumed run continues the same MLflow run (its id is
kept in `run_dir/mlflow_run_id`). mlflow is imported lazily. Does not compute metrics.
"""

from __future__ import annotations

import os
from pathlib import Path

from mua.config.redact import redact_text
from mua.track.console import StepConsole
from mua.track.run_files import append_metrics, write_transcripts

_MAX_PARAM_LEN = 500
_SECRET_HINTS = ("api_key", "secret", "password", "token")


def tracking_uri(configured: str | None, run_dir: str | Path) -> str:
    if configured:
        return configured
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{Path(run_dir).resolve() / 'mlflow.db'}"


def open_experiment(mlflow, uri: str, name: str) -> None:
    """Point `mlflow` at the store `uri` and the experiment `name`, creating it if needed.

    A new experiment in a sqlite store keeps its artifacts beside the database
    (`<db folder>/mlartifacts`): MLflow's default for a database store is `./mlruns` in whatever
    folder the command was started from."""
    from mlflow.exceptions import MlflowException

    mlflow.set_tracking_uri(uri)
    if uri.startswith("sqlite:///") and mlflow.get_experiment_by_name(name) is None:
        root = Path(uri[len("sqlite:///") :]).resolve().parent / "mlartifacts"
        try:
            mlflow.create_experiment(name, artifact_location=root.as_uri())
        except MlflowException:
            pass  # created meanwhile by another run on the same store
    mlflow.set_experiment(name)


def metric_name(key: str) -> str:
    """An MLflow-safe metric name: `pass@k` -> `pass_at_k`, `pass^k` -> `pass_hat_k`."""
    return key.replace("@", "_at_").replace("^", "_hat_")


def flatten_params(tree, prefix: str = "") -> dict[str, str]:
    """Nested recipe dict -> {"a.b.c": "value"}; a key that looks secret is kept only if it names an env var."""
    out: dict[str, str] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(flatten_params(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    leaf = key.rsplit(".", 1)[-1].lower()
    if any(h in leaf for h in _SECRET_HINTS) and not leaf.endswith("_env"):
        return out
    out[key] = redact_text(str(tree))[:_MAX_PARAM_LEN]
    return out


class Tracker:
    def __init__(self, recipe, run_dir: str | Path, enabled: bool, console: bool = True):
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self.gym = ",".join(g.key for g in recipe.gyms)  # a transcript's own gym wins
        self._mlflow = None
        self._console = StepConsole(recipe.total_steps) if (enabled and console) else None
        if not enabled:
            return
        import logging

        import mlflow

        # its INFO lines (creating tables, a new experiment) would bury the run's own output
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        self._mlflow = mlflow
        open_experiment(
            mlflow, tracking_uri(recipe.track.mlflow_uri, run_dir), recipe.track.experiment
        )
        id_file = self.run_dir / "mlflow_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else None
        run = mlflow.start_run(run_id=run_id, run_name=recipe.track.run_name or self.run_dir.name)
        if run_id is None:
            id_file.write_text(run.info.run_id)
            params = flatten_params(recipe.model_dump(mode="json"))
            items = list(params.items())
            for i in range(0, len(items), 100):
                mlflow.log_params(dict(items[i : i + 100]))
            resolved = self.run_dir / "recipe.resolved.yaml"
            if resolved.exists():
                mlflow.log_artifact(str(resolved))

    def log_step(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        # Non-finite values are logged as they are (MLflow stores NaN and infinities): a NaN
        # loss must show, not vanish from the step.
        clean = {
            metric_name(k): float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        self._mlflow.log_metrics(clean, step=step)
        append_metrics(self.run_dir, step, metrics)
        if self._console is not None:
            self._console.step(step, clean)

    def rollout_progress(self, step: int, total: int):
        """Progress of a step's rollouts on the console (None off a terminal or off rank 0)."""
        return self._console.rollouts(step, total) if self._console is not None else None

    def log_transcripts(self, step: int, trajectories, tokenizer=None, kind: str = "step") -> None:
        """The step's sampled trajectories (`kind="val"`: its validation's): text to MLflow,
        records to the run dir."""
        if not self.enabled or not trajectories:
            return
        path = write_transcripts(self.run_dir, step, trajectories, self.gym, tokenizer, kind)
        texts = []
        for t in trajectories:
            body = "\n".join(f"[{m.get('role')}] {m.get('content') or ''}" for m in t.messages)
            texts.append(
                f"task {t.task_id} sample {t.sample_index} reward {t.reward:g} ({t.termination})\n{body}"
            )
        text = "\n\n".join(f"===== transcript {i} =====\n{t}" for i, t in enumerate(texts))
        self._mlflow.log_text(text, f"transcripts/{path.stem}.txt")

    def close(self, status: str = "FINISHED") -> None:
        if self._console is not None:
            self._console.close()
        if self.enabled and self._mlflow is not None:
            self._mlflow.end_run(status=status)
