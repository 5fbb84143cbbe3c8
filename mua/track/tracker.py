"""MLflow tracking of a training run (rank 0 only; other ranks get a tracker that does nothing).

Logs the flattened resolved recipe (environment values and URL credentials never), numeric
metrics per step, the recipe and sampled transcripts; the same go to the run dir
(`mua.track.run_files`) and, with `track.report_to`, TensorBoard and W&B (docs/training.md,
"Tracking"). A resumed run continues its MLflow run with one value per step. A failed write stops
the run with one `RunFailure` line; closing a failed run never raises. mlflow is imported lazily.
Not here: computing metrics.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

from mua.errors import MuaError, RunFailure
from mua.redact import is_secret_name, mask_env_maps, redact_text
from mua.track.console import StepConsole, verbose
from mua.track.run_files import append_metrics, keep_metrics_through, write_transcripts
from mua.track.sinks import open_sinks

_MAX_PARAM_LEN = 500


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
    """Nested recipe dict -> {"a.b.c": "value"}; a key that looks secret is kept only if it names
    an env var, and an environment map's values are `<set>` (`mask_env_maps`)."""
    return _flat_params(mask_env_maps(tree), prefix)


def _flat_params(tree, prefix: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flat_params(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    if is_secret_name(key.rsplit(".", 1)[-1]):
        return out
    out[key] = redact_text(str(tree))[:_MAX_PARAM_LEN]
    return out


class Tracker:
    def __init__(
        self,
        recipe,
        run_dir: str | Path,
        enabled: bool,
        console: bool = True,
        start_step: int = 0,
    ):
        self.enabled = enabled
        self.run_dir = Path(run_dir)
        self.gym = ",".join(g.key for g in recipe.gyms)  # a transcript's own gym wins
        self._mlflow = None
        self._sinks = []
        self._console = StepConsole(recipe.total_steps) if (enabled and console) else None
        self._stored_through: dict[str, int] = {}  # a resumed run: metric -> last step stored
        if not enabled:
            return
        import mlflow

        # its INFO lines (creating tables, a new experiment) would bury the run's own output
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        self.uri = tracking_uri(recipe.track.mlflow_uri, run_dir)
        with self._writing("the start of the run"):
            keep_metrics_through(self.run_dir, start_step)  # later steps are logged again
            open_experiment(mlflow, self.uri, recipe.track.experiment)
            self._mlflow = mlflow
            id_file = self.run_dir / "mlflow_run_id"
            run_id = id_file.read_text().strip() if id_file.exists() else None
            run_name = recipe.track.run_name or self.run_dir.name
            run = mlflow.start_run(run_id=run_id, run_name=run_name)
            params = flatten_params(recipe.model_dump(mode="json"))
            self._sinks = open_sinks(
                recipe.track.report_to, self.run_dir, recipe.track.experiment, run_name, params
            )
            if run_id is not None:
                self._stored_through = stored_steps(mlflow, run_id)
            else:
                id_file.write_text(run.info.run_id)
                items = list(params.items())
                for i in range(0, len(items), 100):
                    mlflow.log_params(dict(items[i : i + 100]))
                resolved = self.run_dir / "recipe.resolved.yaml"
                if resolved.exists():
                    mlflow.log_artifact(str(resolved))

    @contextmanager
    def _writing(self, what: str):
        """A failed write to the store or the run dir becomes one line; MLflow's own error log
        of it (a traceback with the SQL) is held back unless `mua -v`."""
        logger = logging.getLogger("mlflow")
        level = logger.level
        if not verbose():
            logger.setLevel(logging.CRITICAL)
        try:
            yield
        except MuaError:
            raise
        except Exception as e:
            store = self.run_dir if isinstance(e, OSError) else redact_text(self.uri)
            raise RunFailure(
                f"cannot write {what} to {store} ({_root_cause(e)}); free space (or fix the "
                "tracking store) and run the same command to resume"
            ) from e  # the chain shows with MUA_DEBUG=1; the console gets the line alone
        finally:
            logger.setLevel(level)

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
        # MLflow keeps every value logged: a step the store has already (logged before the run
        # was stopped, then run again after the resume) is not stored a second time
        fresh = {k: v for k, v in clean.items() if step > self._stored_through.get(k, -1)}
        with self._writing(f"the metrics of step {step}"):
            if fresh:
                self._mlflow.log_metrics(fresh, step=step)
            for sink in self._sinks:
                sink.log(step, clean)
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
        with self._writing(f"the transcripts of step {step}"):
            self._write_transcripts(step, trajectories, tokenizer, kind)

    def _write_transcripts(self, step: int, trajectories, tokenizer, kind: str) -> None:
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
        """End the MLflow run with `status`. After a failure (`status` other than FINISHED) a
        store that cannot record it is left as it is: the run's own error is the one to show."""
        if self._console is not None:
            self._console.close()
        for sink in self._sinks:
            sink.close(status)
        if not (self.enabled and self._mlflow is not None):
            return
        try:
            with self._writing("the end of the run"):
                self._mlflow.end_run(status=status)
        except RunFailure:
            if status == "FINISHED":
                raise


def stored_steps(mlflow, run_id: str) -> dict[str, int]:
    """The last step the store holds of each metric of run `run_id`."""
    client = mlflow.tracking.MlflowClient()
    keys = client.get_run(run_id).data.metrics
    return {
        key: max((m.step for m in client.get_metric_history(run_id, key)), default=-1)
        for key in keys
    }


def _root_cause(error: BaseException) -> str:
    """`Type: first line` of the innermost exception (MLflow wraps SQLAlchemy, which wraps the
    driver's own error, whose message is the useful one)."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:200]
