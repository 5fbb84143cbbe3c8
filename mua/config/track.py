"""Sections for tracking (MLflow, console) and evaluation (in training and `mua eval`).

`eval.users` lists the simulated users `mua eval` measures the agent against (besides the
recipe's own `user:`), `eval.blame_judge` an optional judge endpoint for failure blame; what
they do is in `mua.users.matrix` and `mua.eval.blame`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from mua.config.gyms import LABEL_PATTERN, GymUserConfig
from mua.config.users import LLMUserConfig
from mua.recipe_section import Section

# the row of the recipe's own `user:` (the one training ran against) in the user matrix
TRAIN_USER = "train"


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


class MatrixUserKeys(GymUserConfig):
    """The user keys an `eval.users` entry gives its cells: a gym's own user keys, plus how long
    one request attempt of this user may take and how often it is retried."""

    timeout_s: PositiveFloat | None = Field(
        None,
        description="Timeout of one request attempt of this LLM user (a timed-out attempt is "
        "retried); default: the recipe's user.timeout_s.",
    )
    max_retries: int | None = Field(
        None,
        ge=0,
        description="Retries after a failed, timed-out, rate-limited or malformed reply of this "
        "LLM user; default: the recipe's user.max_retries.",
    )


class EvalUserConfig(MatrixUserKeys):
    """One labelled simulated user of `mua eval`'s user matrix: the keys given replace the
    recipe's `user:` ones (as a gym's `user:` does), plus a persona and extra instructions."""

    label: str = Field(description="Name of this user in tables and summary.json (e.g. impatient).")
    persona: str | None = Field(
        None,
        description="A built-in persona (cooperative, non_cooperative, impatient, vague, "
        "telecom_easy, telecom_hard) or the path of a persona YAML file (copy one from "
        "mua/users/personas/).",
    )
    prompt: str | None = Field(
        None,
        description="Extra instructions appended to the LLM user's system message (after the "
        "persona's).",
    )

    @model_validator(mode="after")
    def _llm_keys_for_an_llm_user(self):
        given = [k for k in ("timeout_s", "max_retries") if getattr(self, k) is not None]
        if self.kind == "scripted" and given:
            raise ValueError(
                f"{', '.join(given)}: a scripted user sends no requests; drop the key or set "
                "kind: llm"
            )
        return self

    @field_validator("label")
    @classmethod
    def _label_is_a_name(cls, label: str) -> str:
        if not LABEL_PATTERN.fullmatch(label):
            raise ValueError(
                f"label {label!r}: use letters, digits, `_` and `-` only (it names table rows and "
                "summary.json keys), e.g. impatient_gpt4o"
            )
        if label == TRAIN_USER:
            raise ValueError(
                f"label {TRAIN_USER!r} is the recipe's own user (always evaluated); pick another"
            )
        return label


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
    users: list[EvalUserConfig] = Field(
        default_factory=list,
        description="`mua eval` only: more simulated users; every gym is evaluated against the "
        "recipe's own user (row `train`) and each of these, in a gym × user table.",
    )
    blame_judge: LLMUserConfig | None = Field(
        None,
        description="`mua eval` only: an LLM judge (OpenAI-compatible endpoint) that labels the "
        "failures no deterministic rule explains; verdicts cached in <out>/blame_cache unless "
        "cache_dir is set.",
    )
    exclude_user_failures: bool = Field(
        False,
        description="`mua eval` only: also report pass^k without the failures blamed on the user "
        "(always beside the raw numbers).",
    )
    audit_users: bool = Field(
        False,
        description="`mua eval` only: audit the users' turns on sampled conversations and write "
        "user_audit.json (a fidelity score per user and the worst examples).",
    )
    audit_samples: PositiveInt = Field(
        20, description="Conversations the audit samples per gym × user."
    )

    @field_validator("users")
    @classmethod
    def _labels_unique(cls, users: list[EvalUserConfig]) -> list[EvalUserConfig]:
        labels = [u.label for u in users]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(
                f"user label {repeated[0]!r} is listed twice; give each a distinct label"
            )
        return users
