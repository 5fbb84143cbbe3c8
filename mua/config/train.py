"""Sections for training: data, algorithm (grpo | ppo | sft), optimizer, parallelism, checkpoints.

Field names follow docs/algorithms.md; the math lives in `mua.algo`, not here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from mua.algo_names import (
    ADVANTAGE_KINDS,
    AGGREGATIONS,
    CORRECTION_KINDS,
    GRPO_CREDIT_KINDS,
    KL_ESTIMATORS,
    POLICY_LOSS_KINDS,
    SCORE_KINDS,
    SEQUENCE_CORRECTIONS,
)
from mua.recipe_section import Section


class DataConfig(Section):
    train_files: list[str] = Field(
        default_factory=list,
        description="Task parquet files (from `mua prep`) or, for SFT, conversation JSONL/parquet.",
    )
    test_files: list[str] = Field(default_factory=list, description="Held-out task files.")
    weights: list[float] | None = Field(
        None, description="Sampling weight per train file (a mix); default: equal by rows."
    )
    tasks_per_step: PositiveInt = Field(
        8, description="Tasks per training step (each rolled out n times)."
    )
    shuffle: bool = Field(True, description="Shuffle tasks every epoch (seeded).")
    seed: int = Field(0, description="Seed for shuffling, sampling and initialisation.")
    max_tasks: int | None = Field(
        None, ge=1, description="Use at most this many tasks (training, or `mua rollout`)."
    )

    @model_validator(mode="after")
    def _weights_match(self):
        if self.weights is not None and len(self.weights) != len(self.train_files):
            raise ValueError(
                f"data.weights has {len(self.weights)} entries but data.train_files has "
                f"{len(self.train_files)}; give one weight per file"
            )
        return self


class KLConfig(Section):
    coef: NonNegativeFloat = Field(0.0, description="β; 0 loads no reference model.")
    estimator: Literal[KL_ESTIMATORS] = Field(
        "k3", description="KL estimator (docs/algorithms.md §6)."
    )
    placement: Literal["loss", "reward"] = Field(
        "loss", description="KL in the loss or in the token reward."
    )


class PolicyLossConfig(Section):
    kind: Literal[POLICY_LOSS_KINDS] = Field(
        "ppo-clip",
        description="Policy loss (docs/algorithms.md §5): `ppo-clip` (the token ratio clipped), "
        "`gspo` (the sequence ratio clipped; needs aggregation seq-mean-token-mean), `gspo-token` "
        "(GSPO's ratio with token advantages) or `cispo` (the clipped ratio as a constant weight "
        "of every token's log-prob).",
    )
    clip_low: PositiveFloat = Field(
        0.2,
        description="ε_low of the clipped ratio: the token ratio (ppo-clip), the sequence ratio "
        "(gspo, gspo-token; the GSPO paper uses 3e-4) or CISPO's importance weight.",
    )
    clip_high: PositiveFloat = Field(
        0.2,
        description="ε_high of the clipped ratio (gspo: the paper uses 4e-4; see clip_low).",
    )
    dual_clip: float | None = Field(
        None,
        gt=1.0,
        description="Dual-clip constant c (e.g. 3) for negative advantages (ppo-clip only).",
    )
    entropy_coef: NonNegativeFloat = Field(0.0, description="Entropy bonus coefficient.")
    aggregation: Literal[AGGREGATIONS] = Field(
        "token-mean", description="How token losses are reduced (docs/algorithms.md §5)."
    )
    norm_length: PositiveInt = Field(1024, description="Fixed length for seq-mean-token-sum-norm.")

    @model_validator(mode="after")
    def _kind_fits_options(self):
        if self.kind == "gspo" and self.aggregation != "seq-mean-token-mean":
            raise ValueError(
                f"algo.loss.kind=gspo averages one loss per sequence, but "
                f"algo.loss.aggregation={self.aggregation}; set algo.loss.aggregation="
                "seq-mean-token-mean (or use algo.loss.kind=gspo-token)"
            )
        if self.dual_clip is not None and self.kind != "ppo-clip":
            raise ValueError(
                f"algo.loss.dual_clip applies to algo.loss.kind=ppo-clip only, not "
                f"{self.kind}; remove algo.loss.dual_clip"
            )
        return self


class _RLCommon(Section):
    epochs: PositiveInt = Field(1, description="Passes over each step's rollouts.")
    mini_batches: PositiveInt = Field(1, description="Optimizer steps per epoch.")
    gamma: float = Field(
        1.0, ge=0.0, le=1.0, description="Discount γ for r2g scores/credits and GAE."
    )
    eps: PositiveFloat = Field(
        1e-6,
        description="ε in the advantage normalisation (GRPO's group std, PPO's whitening variance).",
    )
    loss: PolicyLossConfig = Field(default_factory=PolicyLossConfig)
    kl: KLConfig = Field(default_factory=KLConfig)
    mask_truncated: bool = Field(
        False, description="Exclude trajectories that hit a length/turn limit from the loss."
    )
    dynamic_sampling: bool = Field(False, description="Drop groups whose scores all agree (DAPO).")
    max_staleness: int = Field(
        0,
        ge=0,
        description="Most policy versions a trained sample may lag the policy being updated "
        "(asynchronous RL, docs/async_rl.md); older carried-over groups are dropped and counted. "
        "0: every sample comes from the current policy (synchronous).",
    )
    correction: Literal[CORRECTION_KINDS] = Field(
        "none",
        description="Off-policy correction of the loss for the behaviour (engine) policy's "
        "log-probs: `tis` (truncated importance sampling), `decoupled` (decoupled PPO; also "
        "token-level masked importance sampling), `icepop` (tokens outside a band dropped), "
        "`seq-mis` (sequence-level masked importance sampling) or `none` (docs/algorithms.md §11).",
    )
    correction_cap: float = Field(
        2.0,
        gt=1.0,
        description="Cap on the importance weight exp(proximal − behaviour): `tis` truncates at "
        "it, `decoupled` and `icepop` drop tokens above it, `seq-mis` drops sequences whose "
        "weight (the product over their tokens) is above it.",
    )
    correction_floor: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="`icepop` only: tokens whose importance weight exp(proximal − behaviour) is "
        "below it are dropped too (the band runs from correction_floor to correction_cap).",
    )
    router_aux_coef: NonNegativeFloat = Field(
        0.0,
        description="Mixture of experts: weight of the routers' load-balancing loss (Switch "
        "Transformer's: experts x sum of each expert's share of the routed slots times its mean "
        "router probability, averaged over MoE layers) added to the loss; logged as "
        "moe/aux_loss when > 0. RL should keep 0 (docs/moe.md).",
    )
    routing_replay: Literal["off", "r3"] = Field(
        "off",
        description="Mixture-of-experts models: `r3` routes every token of the trainer's forward "
        "passes (old log-probs, reference, update) to the experts the engine chose for it "
        "(rollout routing replay, docs/moe.md); `off` lets the trainer's routers choose. "
        "Either way `moe/routing_disagreement` is logged.",
    )

    @model_validator(mode="after")
    def _correction_fits_loss(self):
        if self.loss.kind == "gspo" and self.correction not in SEQUENCE_CORRECTIONS:
            raise ValueError(
                f"algo.correction={self.correction} weighs tokens, but algo.loss.kind=gspo gives "
                "each token its sequence's loss; use algo.correction=seq-mis or none, or "
                "algo.loss.kind=gspo-token"
            )
        return self


class GRPOConfig(_RLCommon):
    kind: Literal["grpo"] = "grpo"
    gamma: float = Field(
        0.8,
        ge=0.0,
        le=1.0,
        description="Discount γ for r2g scores/credits (UserRL's default, 0.8).",
    )
    score: Literal[SCORE_KINDS] = Field(
        "mean", description="Trajectory score (default `mean`: UserRL's default 'Sum' is a mean)."
    )
    advantage: Literal[ADVANTAGE_KINDS] = Field("grpo", description="Group baseline.")
    credit: Literal[GRPO_CREDIT_KINDS] = Field(
        "equalized",
        description="Turn-level credit (`turn-group`: per-turn group normalisation; `r2g-loo`: "
        "each turn's reward-to-go minus the other group members' mean at that turn, unbiased "
        "with gamma 1 when the policy decides when to stop; docs/algorithms.md §3).",
    )


class PPOConfig(_RLCommon):
    kind: Literal["ppo"] = "ppo"
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE λ.")
    value_clip: PositiveFloat = Field(0.2, description="Value clip c_v.")
    critic_lr: PositiveFloat = Field(1e-5, description="Critic learning rate.")
    critic: Literal["value_head", "separate"] = Field(
        "value_head", description="Critic architecture."
    )
    critic_warmup_steps: int = Field(0, ge=0, description="Steps training only the critic.")


class SFTConfig(Section):
    kind: Literal["sft"] = "sft"
    epochs: PositiveInt = Field(1, description="Passes over the conversation data.")
    batch_size: PositiveInt = Field(16, description="Conversations per optimizer step.")
    router_aux_coef: NonNegativeFloat = Field(
        0.0,
        description="Mixture of experts: weight of the routers' load-balancing loss (Switch "
        "Transformer's: experts x sum of each expert's share of the routed slots times its mean "
        "router probability, averaged over MoE layers) added to the loss; logged as "
        "moe/aux_loss when > 0. SFT of a pretrained MoE may keep its own (Qwen3-MoE: 0.001) (docs/moe.md).",
    )


AlgoConfig = Annotated[GRPOConfig | PPOConfig | SFTConfig, Field(discriminator="kind")]


class OptimConfig(Section):
    lr: PositiveFloat = Field(1e-5, description="Peak learning rate.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    weight_decay: NonNegativeFloat = Field(0.0, description="AdamW weight decay.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    schedule: Literal["constant", "cosine", "linear"] = Field(
        "constant", description="LR schedule after warm-up."
    )
    grad_clip: PositiveFloat | None = Field(1.0, description="Max global grad norm; null disables.")


class ParallelConfig(Section):
    micro_batch_tokens: PositiveInt = Field(
        4096, description="Token budget of one packed micro-batch (no padding is computed)."
    )
    share_prefixes: bool = Field(
        True,
        description="In the policy update, feed a prompt that consecutive samples of a micro-batch "
        "share (a task's n samples) once; same numbers, fewer tokens. Needs the `sdpa` attention "
        "path (mua_varlen); flash-attn rows are packed whole.",
    )
    mixed_precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="FSDP2 compute dtype: bf16 on GPU, fp32 on CPU when `auto`."
    )
    activation_checkpointing: bool = Field(False, description="Recompute activations per block.")
    cpu_offload: bool = Field(False, description="Offload parameters and optimizer state to CPU.")
    weight_push_bucket_mb: PositiveInt = Field(
        256, description="Bucket size when pushing weights to engines."
    )


class StopConfig(Section):
    empty_steps: int = Field(
        3,
        ge=0,
        description="Stop (exit 1) after this many consecutive steps that could not move the "
        "policy (every sample excluded or with zero advantage); 0 never stops.",
    )
    env_error_rate: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Stop (exit 1) when a step's share of trajectories ending in env_error is "
        "above this; 1 never stops.",
    )


class CheckpointConfig(Section):
    save_freq: int = Field(0, ge=0, description="Save every N steps; 0 saves only at the end.")
    keep_last: PositiveInt = Field(2, description="How many checkpoints to keep.")
    export_hf_every: int = Field(
        0,
        ge=0,
        description=(
            "Also export a Hugging Face folder run_dir/hf/global_step_N after every N-th checkpoint "
            "(same layout as `mua merge`; needs save_freq > 0; 0: only at the end)."
        ),
    )
    export_hf_at_end: bool = Field(
        True, description="Export a Hugging Face folder when training ends."
    )

    @model_validator(mode="after")
    def _export_needs_checkpoints(self):
        if self.export_hf_every and not self.save_freq:
            raise ValueError(
                f"checkpoint.export_hf_every={self.export_hf_every} exports after every N-th saved "
                "checkpoint but checkpoint.save_freq=0 saves none during training; set save_freq"
            )
        return self
