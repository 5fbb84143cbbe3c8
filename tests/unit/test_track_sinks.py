"""`track.report_to`: TensorBoard and W&B receive the metric names and values MLflow receives.

Both sinks run for real (TensorBoard event files read back with TensorBoard's own reader; W&B in
offline mode, its run file read back record by record). A sink whose package is missing is
refused at launch with one line.
"""

from __future__ import annotations

import json
import struct

import pytest

STEPS = {1: {"loss": 0.5, "reward/mean": 0.25, "pass@1": 0.5}, 2: {"loss": 0.4, "reward/mean": 0.5}}
EXPECTED = {
    1: {"loss": 0.5, "reward/mean": 0.25, "pass_at_1": 0.5},
    2: {"loss": 0.4, "reward/mean": 0.5},
}


def _run(tmp_path, monkeypatch, report_to: str):
    from mua.config import load_recipe
    from mua.track import Tracker

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    recipe = load_recipe(None, [f"run_dir={tmp_path}", f"track.report_to=[{report_to}]"], "train")
    tracker = Tracker(recipe, tmp_path, enabled=True, console=False)
    for step, metrics in STEPS.items():
        tracker.log_step(step, metrics)
    tracker.close("FINISHED")


def _mlflow_metrics(tmp_path) -> dict[int, dict[str, float]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    out: dict[int, dict[str, float]] = {}
    for name in client.get_run(run_id).data.metrics:
        for m in client.get_metric_history(run_id, name):
            out.setdefault(m.step, {})[name] = m.value
    return out


def test_tensorboard_gets_what_mlflow_gets(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _run(tmp_path, monkeypatch, "tensorboard")
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    seen: dict[int, dict[str, float]] = {}
    for tag in events.Tags()["scalars"]:
        for e in events.Scalars(tag):
            seen.setdefault(e.step, {})[tag] = pytest.approx(e.value)
    assert seen == EXPECTED
    assert _mlflow_metrics(tmp_path) == EXPECTED


def _wandb_history(run_file) -> list[dict]:
    """History records of a W&B run file: a 7-byte file header, then 32 KiB blocks of records
    (4-byte checksum, 2-byte length, 1-byte type: full, first, middle, last), each a Record."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pieces, rows = 7, 32768, b"", []
    while pos + 7 <= len(data):
        room = block - pos % block
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        pieces += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(pieces)
            pieces = b""
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        i.key or "/".join(i.nested_key): json.loads(i.value_json)
                        for i in record.history.item
                    }
                )
        elif kind == 0:
            break
    return rows


def test_wandb_gets_what_mlflow_gets(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    _run(tmp_path, monkeypatch, "wandb")
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    rows = _wandb_history(run_file)
    seen = {row["_step"]: {k: v for k, v in row.items() if not k.startswith("_")} for row in rows}
    assert seen == EXPECTED
    assert (tmp_path / "wandb_run_id").read_text().strip() in run_file.name


def test_missing_sink_package_is_one_line(monkeypatch):
    import importlib.util

    from mua.errors import UsageError
    from mua.track.sinks import check_report_to

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name)
    )
    check_report_to(["tensorboard"]) if real("tensorboard") else None
    with pytest.raises(UsageError, match=r"pip install 'mua\[wandb\]'"):
        check_report_to(["wandb"])


def test_a_sink_named_twice_is_refused():
    from mua.config import load_recipe
    from mua.errors import UsageError

    with pytest.raises(UsageError, match="listed twice"):
        load_recipe(None, ["track.report_to=[wandb,wandb]"], "train")
