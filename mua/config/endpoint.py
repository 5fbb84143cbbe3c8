"""The settings of one OpenAI-compatible chat endpoint: one model, used wherever mua talks to one.

The simulated user and its judges (`user:` with `kind: llm`) and `rollout.openai:` take the same
keys: where the server is, which environment variable holds its key (`api_key_env`; no secret is
stored), and request bounds (timeout, retries with backoff, requests in flight). The model is named
elsewhere (`user.model`, `model.path: openai:<name>`). `checkpoint:` instead of `base_url` serves a
frozen local model for the run (`mua.serve.checkpoints`, address in `$MUA_SERVED_CHECKPOINTS`,
read by `resolved_base_url`). Nothing here sends a request (`mua.llm.llm_client`).
"""

from __future__ import annotations

import json
import os

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from mua.errors import UsageError
from mua.recipe_section import Section

# {absolute checkpoint path: base URL} of the checkpoints the running verb serves
SERVED_CHECKPOINTS_ENV = "MUA_SERVED_CHECKPOINTS"

CHECKPOINT_HELP = (
    "A local model folder (e.g. runs/quickstart/hf/final) that the verb running this recipe serves "
    "on 127.0.0.1 for the run (`mua serve`, greedy replies one request at a time) and talks to, "
    "instead of base_url; the model name defaults to it."
)


def check_one_address(base_url: str | None, checkpoint: str | None) -> None:
    """An endpoint is a running server (`base_url`) or a local model mua serves, not both."""
    if checkpoint is not None and base_url is not None:
        raise ValueError(
            f"base_url and checkpoint both set ({base_url}, {checkpoint}); give base_url for a "
            "running server or checkpoint for a local model mua serves"
        )


def served_checkpoint_url(checkpoint: str) -> str:
    """The base URL (`.../v1`) at which the running verb serves `checkpoint`."""
    served = json.loads(os.environ.get(SERVED_CHECKPOINTS_ENV) or "{}")
    url = served.get(os.path.abspath(checkpoint))
    if url is None:
        raise UsageError(
            f"checkpoint {checkpoint} is not being served; `mua train`, `mua eval` and `mua "
            "rollout` serve the checkpoints their recipe names (or set base_url to a running "
            "`mua serve --model ...`)"
        )
    return url


class EndpointConfig(Section):
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint (e.g. http://127.0.0.1:30000/v1); defaults to "
        "$OPENAI_BASE_URL, then the OpenAI API.",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Name of the environment variable holding the API key (never the key itself).",
    )
    timeout_s: PositiveFloat = Field(
        60.0,
        description="Timeout of one request attempt, counted from when it leaves the "
        "max_concurrency queue; a timed-out attempt is retried.",
    )
    max_retries: int = Field(
        4,
        ge=0,
        description="Retries after a failed, timed-out, rate-limited or malformed reply. When they "
        "are spent, an LLM user's trajectory ends `user_failure` (masked from the loss, not "
        "scored) and an API agent stops the evaluation.",
    )
    backoff_s: PositiveFloat = Field(
        0.5, description="First backoff; doubles per retry, with jitter."
    )
    max_concurrency: PositiveInt = Field(32, description="Most requests in flight at once.")
    checkpoint: str | None = Field(None, description=CHECKPOINT_HELP)

    @model_validator(mode="after")
    def _one_address(self):
        check_one_address(self.base_url, self.checkpoint)
        return self

    @field_validator("api_key_env")
    @classmethod
    def _looks_like_env_name(cls, v: str) -> str:
        if v.startswith(("sk-", "sk_")) or not v.replace("_", "").isalnum() or len(v) > 64:
            raise ValueError(
                "must name an environment variable (e.g. OPENAI_API_KEY), not hold a secret"
            )
        return v

    def resolved_base_url(self) -> str | None:
        """`base_url`; for a `checkpoint`, where it is served; else $OPENAI_BASE_URL; None
        means the OpenAI API itself."""
        if self.checkpoint is not None:
            return served_checkpoint_url(self.checkpoint)
        return self.base_url or os.environ.get("OPENAI_BASE_URL")
