"""The simulated user's settings: the scripted user, the LLM user behind an OpenAI-compatible
endpoint (`LLMUserConfig`, also what judges and preflights are built from), and a gym entry's own
user keys that replace the top-level ones (`GymUserConfig`).

Not here: building users from these (`mua.llm.llm_client`, the gyms), the user seat.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from mua.config.endpoint import CHECKPOINT_HELP, EndpointConfig, check_one_address
from mua.config.model import ParserName
from mua.recipe_section import Section


class ScriptedUserConfig(Section):
    kind: Literal["scripted"] = "scripted"


class LLMUserConfig(EndpointConfig):
    """A simulated user (and judge) behind an OpenAI-compatible endpoint."""

    kind: Literal["llm"] = "llm"
    model: str | None = Field(
        None, description="Simulator model name; defaults to $MULTITURN_MODEL_NAME."
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="Sampling temperature of the user.")
    max_tokens: PositiveInt = Field(512, description="Most tokens per user reply.")
    cache_dir: str | None = Field(
        None, description="Optional on-disk cache keyed by the request (deterministic evaluation)."
    )
    tool_parser: ParserName | None = Field(
        None,
        description="When the user or judge is offered tools: the family whose format it writes "
        "tool calls in as text (a raw open model behind a plain completion server), one of "
        "`model.tool_parser`'s names; unset, only structured `tool_calls` are read.",
    )

    def resolved_model(self) -> str:
        return (
            self.model or self.checkpoint or os.environ.get("MULTITURN_MODEL_NAME") or "gpt-4o-mini"
        )


UserConfig = Annotated[ScriptedUserConfig | LLMUserConfig, Field(discriminator="kind")]


class GymUserConfig(Section):
    """A gym's own simulated user: the keys given replace the top-level `user:` ones."""

    kind: Literal["scripted", "llm"] | None = Field(
        None, description="scripted or llm; default: the top-level user.kind."
    )
    model: str | None = Field(None, description="The LLM user's model for this gym.")
    temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="The LLM user's sampling temperature for this gym."
    )
    max_tokens: PositiveInt | None = Field(None, description="Most tokens per user reply.")
    base_url: str | None = Field(None, description="The LLM user's endpoint for this gym.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding this endpoint's key."
    )
    checkpoint: str | None = Field(None, description=CHECKPOINT_HELP)

    @model_validator(mode="after")
    def _one_address(self):
        check_one_address(self.base_url, self.checkpoint)
        return self
