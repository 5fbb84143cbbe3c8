"""Top-level recipes, one per verb, composed from the section models.

A recipe file may say which verb it is for with `verb:`; `mua recipe validate` uses it (or the
file's location) to pick the model. Cross-section rules (sizes that contradict) live here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from mua.config.gyms import GymConfig, PrepGymConfig, check_entries, gyms_from_raw
from mua.config.model import ModelConfig
from mua.config.rollout import RolloutConfig
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
from mua.config.users import ScriptedUserConfig, UserConfig
from mua.recipe_section import Section


class _RecipeBase(Section):
    description: str = Field("", description="What this recipe is for (free text).")
    run_dir: str = Field(
        "runs/{name}", description="Where outputs go; `{name}` is the recipe file's stem."
    )


class _ConversationRecipe(_RecipeBase):
    """The sections of every verb that runs conversations: a model talks in gyms with a user.

    `gyms:` is the one shape; `gym: {...}` is shorthand for a one-entry `gyms:` list, read into
    `gyms` at load: a loaded recipe has only `gyms`."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    gym: GymConfig | None = Field(
        None,
        exclude=True,
        description="One gym: shorthand for a one-entry `gyms:` list (default: guess).",
    )
    gyms: list[GymConfig] = Field(
        default_factory=list,
        description="The gyms, each a section like `gym` plus its own files, weight and "
        "overrides (see docs/multi_gym.md); instead of `gym`.",
    )
    user: UserConfig = Field(default_factory=ScriptedUserConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)

    @model_validator(mode="before")
    @classmethod
    def _one_gym_is_a_list(cls, data):
        return gyms_from_raw(data)

    @model_validator(mode="after")
    def _entries(self):
        if not self.gyms:
            object.__setattr__(self, "gyms", [GymConfig()])
        check_entries(self.gyms)
        return self

    def gym_sections(self) -> list[GymConfig]:
        """The gym entries, in order."""
        return list(self.gyms)

    def gym_section(self, name: str) -> GymConfig:
        """The entry labelled (else named) `name`, or a bare section for that gym."""
        for section in self.gyms:
            if section.key == name:
                return section
        for section in self.gyms:
            if section.name == name:
                return section
        return GymConfig(name=name)


# evaluation keys of `mua eval` alone: training's validation runs the recipe's own user
EVAL_ONLY = ("users", "blame_judge", "exclude_user_failures", "audit_users")


class TrainRecipe(_ConversationRecipe):
    verb: Literal["train"] = "train"
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
            _routing_replay_has_records(self.algo, self.rollout)
            if self.rollout.oversample > 1.0 and self.algo.max_staleness < 1:
                raise ValueError(
                    f"rollout.oversample={self.rollout.oversample:g} carries unfinished groups into "
                    "the next step, one policy version old; set algo.max_staleness to 1 or more "
                    "(or rollout.oversample=1.0)"
                )
        elif self.rollout.oversample > 1.0:
            raise ValueError(
                "rollout.oversample applies to RL steps (algo.kind grpo or ppo); remove it for sft"
            )
        eval_only = [
            k
            for k in EVAL_ONLY
            if getattr(self.eval, k)
            != EvalConfig.model_fields[k].get_default(call_default_factory=True)
        ]
        if eval_only:
            raise ValueError(
                f"eval.{eval_only[0]} is read by `mua eval` only (training validates against its "
                "own user); move it to an eval recipe, or pass it to mua eval as an override"
            )
        if self.rollout.lora_sync == "adapter" and self.model.lora is None:
            raise ValueError(
                "rollout.lora_sync=adapter pushes LoRA adapters, but model.lora is not set; "
                "add model.lora (e.g. {rank: 16}) or remove rollout.lora_sync"
            )
        spec = self.rollout.engine_spec()
        if spec is not None and spec.check_train is not None:
            spec.check_train(self)
        return self


class RolloutRecipe(_ConversationRecipe):
    verb: Literal["rollout"] = "rollout"
    policy: Literal["model", "expert"] = Field(
        "model",
        description="Who acts: the model (via rollout.engine) or the gym's scripted expert.",
    )
    output: str = Field("{run_dir}/trajectories.jsonl", description="JSONL file of trajectories.")
    split: str = Field(
        "train", description="Which split of the built-in data to use when no files are given."
    )


def _routing_replay_has_records(algo, rollout) -> None:
    """`algo.routing_replay: r3` needs an engine that returns each token's routed experts (its
    spec's `routed_experts`, docs/moe.md); replay would otherwise do nothing, silently."""
    if algo.routing_replay != "r3":
        return
    spec = rollout.engine_spec()
    hook = spec.routed_experts if spec is not None else None
    fix = hook(rollout) if hook is not None else "use an engine that returns them (docs/moe.md)"
    if hook is not None and fix is None:
        return
    raise ValueError(
        f"algo.routing_replay=r3 replays the experts the engine routed each token to, but "
        f"rollout.engine={rollout.engine} does not return them; {fix}, or set "
        "algo.routing_replay=off"
    )


def _eval_rollout_defaults() -> RolloutConfig:
    """`mua eval`'s rollout defaults (one greedy sample), marked as defaults: none of them counts as
    set by the recipe (a set rollout.temperature is refused, `eval.temperature` rules)."""
    defaults = RolloutConfig(n=1, temperature=0.0)
    return RolloutConfig.model_construct(_fields_set=set(), **dict(defaults))


class EvalRecipe(_ConversationRecipe):
    """The gyms to evaluate in `gyms:` (or one in `gym:`; `name: all` for every gym), each with its
    own options, files and overrides."""

    verb: Literal["eval"] = "eval"
    rollout: RolloutConfig = Field(default_factory=lambda: _eval_rollout_defaults())
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
    gym: PrepGymConfig = Field(
        default_factory=PrepGymConfig,
        description="Gym whose tasks to write, and its prep options: `gym: {name: travel, "
        "options: {num_train: 200}}`.",
    )
    source: str | None = Field(None, description="Public data path; default: the built-in dataset.")
    out: str = Field("data/{gym}", description="Output folder for <split>.parquet files.")
    seed: int = Field(0, description="Seed for generation and splits.")

    @field_validator("gym", mode="before")
    @classmethod
    def _gym_is_a_section(cls, v):
        if isinstance(v, str):
            raise ValueError(
                f"write the gym as a section, `gym: {{name: {v}}}`, with its prep options under "
                "gym.options"
            )
        return v


class AlternateSide(Section):
    """One side of an alternating run: a train recipe and its overrides."""

    recipe: str = Field(description="A train recipe (GRPO or PPO) of this side.")
    overrides: list[str] = Field(
        default_factory=list, description="key=value overrides of that recipe."
    )


class AlternateConfig(Section):
    rounds: PositiveInt = Field(description="Rounds; each trains both sides `steps` steps.")
    steps: PositiveInt = Field(description="Training steps of each side per round (k).")
    agent: AlternateSide = Field(
        description="The agent's recipe: one gym entry, seat agent; its user is the user side's "
        "latest export, served (`user: {kind: llm, checkpoint: ...}`)."
    )
    user: AlternateSide = Field(
        description="The user's recipe: one gym entry with `seat: user`; its fixed agent is the "
        "agent side's latest export, served (`agent: {kind: llm, checkpoint: ...}`)."
    )
    first: Literal["agent", "user"] = Field("agent", description="Which side trains first.")


class AlternateRecipe(_RecipeBase):
    """`mua train` of an agent and a user in turns (docs/user_seat.md, mua.train.alternate)."""

    verb: Literal["train"] = "train"
    alternate: AlternateConfig


RECIPE_MODELS: dict[str, type[Section]] = {
    "train": TrainRecipe,
    "rollout": RolloutRecipe,
    "eval": EvalRecipe,
    "merge": MergeRecipe,
    "prep": PrepRecipe,
}


def recipe_model_for(verb: str, raw: dict | None = None) -> type[Section]:
    """The recipe model of `verb`; a train recipe with `alternate:` is an `AlternateRecipe`."""
    if verb == "train" and isinstance(raw, dict) and "alternate" in raw:
        return AlternateRecipe
    return RECIPE_MODELS[verb]
