"""Sections for rollouts: which gym, which simulated user, how the policy is sampled.

The LLM user's endpoint settings, and those of the API agent (`rollout.openai`), are one model
(`mua.config.endpoint.EndpointConfig`). Secrets are never stored here: `api_key_env` names an
environment variable. Each engine's own section (`rollout.sglang`, `rollout.vllm`, a plugin's
`rollout.<name>`) is the settings model of its `EngineSpec`, added to `RolloutConfig` from
`mua.engines.registry` (a layer below) when this module is imported; the chosen engine's own
rules run through its spec.
"""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    create_model,
    field_validator,
    model_validator,
)

from mua.config.endpoint import EndpointConfig
from mua.recipe_section import Section


class RetryConfig(Section):
    """Retries of conversations the environment failed (docs/training.md): one that ends
    `user_failure`, `env_error` or `timeout` is run again in a fresh env with new seeds."""

    max: NonNegativeInt = Field(
        0,
        description="Most retries of one conversation the environment failed (its user, gym or "
        "time budget), each in a fresh env with seeds derived from (seed, attempt); 0: no "
        "retries, the failed conversation is masked from the loss.",
    )
    on_exhausted: Literal["drop_group", "mask_member"] = Field(
        "drop_group",
        description="Training, when a conversation still fails after `max` retries: "
        "`drop_group` (its group is not trained) or `mask_member` (the group is trained, that "
        "conversation masked). Evaluation and `mua rollout` keep it as a failure. Unused while "
        "`max` is 0.",
    )


class _RolloutSettings(Section):
    """`rollout:` without the engines' own sections (added below as `RolloutConfig`)."""

    engine: str = Field(
        "hf",
        description="Generation engine: `hf` (transformers, CPU/GPU), `sglang` (GPU), `vllm` "
        "(a vLLM server per rank, CPU/GPU), "
        "`openai` (any OpenAI-compatible server; evaluation only), or another engine "
        "registered in `mua.engines.registry`.",
    )
    n: PositiveInt = Field(4, description="Samples per task (the GRPO group size).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 disables.")
    max_new_tokens_per_turn: PositiveInt = Field(
        64, description="Most new tokens per assistant turn."
    )
    max_total_tokens: PositiveInt = Field(1024, description="Most tokens in one trajectory.")
    context_window: PositiveInt | None = Field(
        None,
        description="Most tokens the policy is shown when it generates a turn: the last N of "
        "the conversation so far (MuTIS's rolling context, 4096). The trajectory and its "
        "training sample keep every token. Unset: the whole conversation.",
    )
    max_turns: PositiveInt = Field(8, description="Most assistant turns per trajectory.")
    trajectory_timeout_s: PositiveFloat = Field(
        600.0,
        description="Wall time per trajectory, not counting time waiting on LLM endpoints (the "
        "user, a judge, an API agent), which are bounded by their own timeout and retries.",
    )
    call_timeout_s: PositiveFloat = Field(
        60.0,
        description="Timeout of one env call (reset, step: tools, scripted users), not counting "
        "time waiting on the LLM user, a judge or an API agent (see their `timeout_s`).",
    )
    max_concurrency: PositiveInt = Field(64, description="Most trajectories in flight at once.")
    oversample: float = Field(
        1.0,
        ge=1.0,
        description="Partial rollouts (training only, docs/async_rl.md): a step keeps "
        "ceil(oversample × groups) groups in flight, trains on the first complete ones and "
        "carries the others into the next step; 1.0: every step waits for all its groups.",
    )
    retries: RetryConfig = Field(
        default_factory=lambda: RetryConfig(),
        description="Retries of conversations the environment failed (`user_failure`, "
        "`env_error`, `timeout`): `{max: N, on_exhausted: drop_group | mask_member}`; off by "
        "default.",
    )
    drift: Literal["drop", "per_turn"] = Field(
        "drop",
        description="When re-rendering the finished conversation differs from the sampled tokens: "
        "drop the trajectory, or fall back to one training sample per assistant turn.",
    )
    intervention_style: Literal["chat", "raw"] = Field(
        "chat", description="How env-injected messages (e.g. math interventions) are added."
    )
    openai: EndpointConfig = Field(
        default_factory=EndpointConfig,
        description="The API agent's endpoint; engine=openai only (the served model's name is "
        "model.path).",
    )
    lora_sync: Literal["merged", "adapter"] = Field(
        "merged",
        description="How a LoRA policy (model.lora) reaches the engine after each update: "
        "`merged` (the adapters merged into the gathered weights while pushing; every engine, "
        "pushes stay bucketed) or `adapter` (the engine keeps the base and receives only the "
        "adapter, under a versioned name; hf, or SGLang >= 0.5.8).",
    )

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        from mua.engines.registry import list_engines

        known = [*list_engines(), "openai"]
        if v not in known:
            raise ValueError(f"unknown engine {v!r}; use one of: {', '.join(sorted(known))}")
        return v

    @field_validator("max_total_tokens")
    @classmethod
    def _total_vs_turn(cls, v: int, info) -> int:
        per_turn = info.data.get("max_new_tokens_per_turn")
        if per_turn is not None and v < per_turn:
            raise ValueError(
                f"must be at least rollout.max_new_tokens_per_turn ({per_turn}); raise it or "
                "lower the per-turn budget"
            )
        return v

    @model_validator(mode="after")
    def _chosen_engine_rules(self):
        spec = self.engine_spec()
        if spec is not None and spec.check_chosen is not None:
            spec.check_chosen(self)
        return self

    def engine_spec(self):
        """The `EngineSpec` of `engine` (`mua.engines.registry`); None for `openai`, which
        samples for evaluation only and has none."""
        if self.engine == "openai":
            return None
        from mua.engines.registry import engine_spec

        return engine_spec(self.engine)


def _with_engine_sections(base: type[Section]) -> type[Section]:
    """`base` plus one `rollout.<name>` field per registered engine with a settings model
    (defaults: that model's defaults); a name that is already a field of `base` is left out."""
    from mua.engines.registry import engine_sections

    fields = {
        name: (model, Field(default_factory=model, description=_summary(model)))
        for name, model in engine_sections().items()
        if name.isidentifier() and name not in base.model_fields
    }
    return create_model("RolloutConfig", __base__=base, __module__=__name__, **fields)


def _summary(model: type) -> str:
    """The first paragraph of a settings model's docstring, on one line."""
    return " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())


RolloutConfig = _with_engine_sections(_RolloutSettings)
