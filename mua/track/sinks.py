"""Where a run's metrics go besides MLflow: TensorBoard and Weights & Biases (`track.report_to`).

Each sink gets exactly MLflow's metric names and values at the same step. TensorBoard writes to
`<run_dir>/tensorboard`; a W&B run starts in `<run_dir>` with the flattened recipe as config and
resumes by `<run_dir>/wandb_run_id` (W&B's own `WANDB_*` variables apply). Both packages are
optional, imported only when named. Not here: computing metrics, transcripts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mua.errors import UsageError

_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_report_to(report_to: list[str]) -> None:
    """Every sink named can be imported here; else one line naming the extra to install."""
    for sink in report_to:
        package = _PACKAGES[sink]
        if importlib.util.find_spec(package) is None:
            raise UsageError(
                f"track.report_to names {sink} but the {package} package is not installed; "
                f"pip install 'mua[{sink}]' or remove {sink} from track.report_to"
            )


class TensorBoardSink:
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()

    def close(self, status: str) -> None:
        self._writer.close()


class WandbSink:
    def __init__(self, run_dir: Path, project: str, name: str, config: dict[str, str]):
        import wandb

        id_file = run_dir / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else None
        self._run = wandb.init(
            project=project, name=name, id=run_id, resume="allow", dir=str(run_dir), config=config
        )
        id_file.write_text(self._run.id)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def close(self, status: str) -> None:
        self._run.finish(exit_code=0 if status == "FINISHED" else 1)


def open_sinks(report_to: list[str], run_dir: Path, project: str, name: str, params: dict):
    """The sinks named in `report_to`, opened for this run."""
    sinks = []
    for sink in report_to:
        if sink == "tensorboard":
            sinks.append(TensorBoardSink(run_dir))
        elif sink == "wandb":
            sinks.append(WandbSink(run_dir, project, name, params))
    return sinks
