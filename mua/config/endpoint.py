"""The settings of one OpenAI-compatible chat endpoint: one model, used wherever mua talks to one.

The simulated user and its judges (`user:` with `kind: llm`) and the API agent of
`rollout.engine: openai` (`rollout.openai:`) take the same keys: where the server is, which
environment variable holds its key, and how requests are bounded (timeout per attempt, retries
with backoff, requests in flight). Which model to ask is not an endpoint setting: the user names
it in `user.model`, the agent in `model.path: openai:<name>` (`mua eval --model openai:<name>`).

Secrets are never stored here: `api_key_env` names an environment variable. Nothing here sends a
request (see `mua.llm.llm_client`).
"""

from __future__ import annotations

import os

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from mua.config.base import Section


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

    @field_validator("api_key_env")
    @classmethod
    def _looks_like_env_name(cls, v: str) -> str:
        if v.startswith(("sk-", "sk_")) or not v.replace("_", "").isalnum() or len(v) > 64:
            raise ValueError(
                "must name an environment variable (e.g. OPENAI_API_KEY), not hold a secret"
            )
        return v

    def resolved_base_url(self) -> str | None:
        """`base_url`, else $OPENAI_BASE_URL; None means the OpenAI API itself."""
        return self.base_url or os.environ.get("OPENAI_BASE_URL")
