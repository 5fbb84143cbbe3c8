"""Top-level recipes, one per verb, composed from the section models.

A recipe file may say which verb it is for with `verb:`; `mua recipe validate` uses it (or the
file's location) to pick the model. Cross-section rules (sizes that contradict) live here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mua.config.base import Section
from mua.config.model import ModelConfig
from mua.config.rollout import GymConfig, RolloutConfig, ScriptedUserConfig, UserConfig
from mua.config.track import EvalConfig, TrackConfig
from mua.config.train import (
    AlgoConfig,
    CheckpointConfig,
    DataConfig,
    GRPOConfig,
    OptimConfig,
    ParallelConfig,
    StopConfig,
)


class _RecipeBase(Section):
    description: str = Field("", description="What this recipe is for (free text).")
    run_dir: str = Field(
        "runs/{name}", description="Where outputs go; `{name}` is the recipe file's stem."
    )


class TrainRecipe(_RecipeBase):
    verb: Literal["train"] = "train"
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    gym: GymConfig = Field(default_factory=GymConfig)
    user: UserConfig = Field(default_factory=ScriptedUserConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=GRPOConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    stop: StopConfig = Field(default_factory=StopConfig)
    track: TrackConfig = Field(default_factory=TrackConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    total_steps: int = Field(
        10, ge=1, description="Training steps (RL) or optimizer steps cap (SFT)."
    )

    @model_validator(mode="after")
    def _sizes_agree(self):
        if self.algo.kind in ("grpo", "ppo"):
            per_step = self.data.tasks_per_step * self.rollout.n
            if per_step % self.algo.mini_batches:
                raise ValueError(
                    f"algo.mini_batches ({self.algo.mini_batches}) must divide data.tasks_per_step × "
                    f"rollout.n ({self.data.tasks_per_step} × {self.rollout.n} = {per_step})"
                )
            if self.rollout.engine == "openai":
                raise ValueError(
                    "rollout.engine=openai cannot be trained (it serves evaluation only); use hf or sglang"
                )
        return self


class RolloutRecipe(_RecipeBase):
    verb: Literal["rollout"] = "rollout"
    model: ModelConfig = Field(default_factory=ModelConfig)
    policy: Literal["model", "expert"] = Field(
        "model",
        description="Who acts: the model (via rollout.engine) or the gym's scripted expert.",
    )
    data: DataConfig = Field(default_factory=DataConfig)
    gym: GymConfig = Field(default_factory=GymConfig)
    user: UserConfig = Field(default_factory=ScriptedUserConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    output: str = Field("{run_dir}/trajectories.jsonl", description="JSONL file of trajectories.")
    split: str = Field(
        "train", description="Which split of the built-in data to use when no files are given."
    )


class EvalRecipe(_RecipeBase):
    verb: Literal["eval"] = "eval"
    model: ModelConfig = Field(default_factory=ModelConfig)
    gyms: list[str] = Field(
        default_factory=lambda: ["guess"], description="Gyms to evaluate (`all` for every one)."
    )
    gym: GymConfig = Field(default_factory=GymConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    user: UserConfig = Field(default_factory=ScriptedUserConfig)
    rollout: RolloutConfig = Field(default_factory=lambda: RolloutConfig(n=1, temperature=0.0))
    eval: EvalConfig = Field(default_factory=EvalConfig)
    track: TrackConfig = Field(default_factory=TrackConfig)

    @model_validator(mode="after")
    def _one_temperature(self):
        if (
            "temperature" in self.rollout.model_fields_set
            and self.rollout.temperature != self.eval.temperature
        ):
            raise ValueError(
                f"rollout.temperature={self.rollout.temperature:g} is not used by `mua eval`; "
                "set eval.temperature (or --temperature) instead"
            )
        return self


class MergeRecipe(_RecipeBase):
    verb: Literal["merge"] = "merge"
    checkpoint_dir: str = Field(
        "runs/quickstart/checkpoints",
        description="A run's checkpoints/ folder or one global_step_N.",
    )
    out_dir: str | None = Field(
        None, description="Where HF folders go (default: <run>/hf/global_step_N)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Dtype of the exported weights."
    )
    force: bool = Field(False, description="Re-merge steps that were merged already.")
    verify: bool = Field(
        False, description="Compare logits of the merged model with the checkpoint's."
    )


class PrepRecipe(_RecipeBase):
    verb: Literal["prep"] = "prep"
    gym: str = Field("guess", description="Gym whose tasks to write.")
    source: str | None = Field(None, description="Public data path; default: the built-in dataset.")
    out: str = Field("data/{gym}", description="Output folder for <split>.parquet files.")
    seed: int = Field(0, description="Seed for generation and splits.")
    options: dict = Field(
        default_factory=dict, description="Gym-specific prep options (sizes, domains, ...)."
    )
    mix: dict[str, float] = Field(
        default_factory=dict,
        description="Mix instead of build: task folder -> weight (relative share of rows), written to `out`.",
    )
    rows: int | None = Field(
        None,
        ge=1,
        description="Mix only: rows per split (default: the largest mix without repeats).",
    )


RECIPE_MODELS: dict[str, type[Section]] = {
    "train": TrainRecipe,
    "rollout": RolloutRecipe,
    "eval": EvalRecipe,
    "merge": MergeRecipe,
    "prep": PrepRecipe,
}


def recipe_model_for(verb: str) -> type[Section]:
    return RECIPE_MODELS[verb]
