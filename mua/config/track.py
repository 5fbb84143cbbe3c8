"""Sections for tracking (MLflow, console) and evaluation (in training and `mua eval`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, field_validator

from mua.config.base import Section


class TrackConfig(Section):
    mlflow_uri: str | None = Field(
        None,
        description="MLflow tracking URI; default $MLFLOW_TRACKING_URI, else sqlite in the run dir.",
    )
    experiment: str = Field("mua", description="MLflow experiment name.")
    run_name: str | None = Field(None, description="MLflow run name (default: the run dir name).")
    transcripts_per_step: int = Field(4, ge=0, description="Sample transcripts logged per step.")
    report_to: list[Literal["tensorboard", "wandb"]] = Field(
        default_factory=list,
        description="Also send the metrics (same names, same steps) to TensorBoard "
        "(<run_dir>/tensorboard) and/or Weights & Biases; MLflow always gets them. Each is an "
        "optional extra: pip install 'mua[tensorboard]' / 'mua[wandb]'.",
    )

    @field_validator("report_to")
    @classmethod
    def _once_each(cls, v: list[str]) -> list[str]:
        repeated = sorted({s for s in v if v.count(s) > 1})
        if repeated:
            raise ValueError(f"{repeated[0]} is listed twice; list each sink once")
        return v


class EvalConfig(Section):
    test_freq: int = Field(0, ge=0, description="Validate every N training steps; 0 disables.")
    n: PositiveInt = Field(1, description="Samples per held-out task.")
    max_tasks: int | None = Field(None, ge=1, description="Evaluate at most this many tasks.")
    temperature: float = Field(
        0.0,
        ge=0.0,
        description="Sampling temperature of held-out evaluation (in-training validation and "
        "`mua eval`); training rollouts use rollout.temperature.",
    )
    k: list[int] = Field(
        default_factory=lambda: [1],
        description="k values for pass@k and pass^k (1 and n are always added).",
    )
    success_threshold: float = Field(
        1.0,
        description="A trajectory succeeds when its reward reaches this (1.0: the task's full score).",
    )
