"""The openenv gym's options (`gyms: [{name: openenv, options: {...}}]`)."""

from __future__ import annotations

from pydantic import Field, PositiveFloat, PositiveInt

from gyms.common.options import section_options
from mua.recipe_section import Section


class OpenEnvOptions(Section):
    """`gym.options` of the openenv gym."""

    url: str = Field(description="The OpenEnv server's base URL (http://host:port).")
    python: str = Field(
        description="The Python of a venv with `openenv` (its pins are not mua's; e.g. "
        "tests/.openenv/venv/bin/python from `make openenv-side`)."
    )
    tasks: str | None = Field(None, description="A JSONL of tasks, when the entry has no files.")
    action_field: str = Field(
        "message",
        description="A turn without tool calls is the action {action_field: its text}; a turn "
        "with a tool call is the action of the call's arguments.",
    )
    observation_field: str | None = Field(
        None,
        description="The observation field shown to the model (default: the observation as "
        "JSON, without its metadata).",
    )
    reset_args: list[str] | None = Field(
        None, description="Payload keys passed to reset (default: the whole payload)."
    )
    start_timeout_s: PositiveFloat = Field(120.0, description="Most seconds to start the client.")
    timeout_s: PositiveFloat = Field(60.0, description="Most seconds of one reset or step.")
    max_observation_chars: PositiveInt = Field(
        16384, description="Most characters of one observation; more ends the trajectory."
    )


def read_options(options: dict) -> OpenEnvOptions:
    return section_options(OpenEnvOptions, options, "docs/gyms.md (OpenEnv)")
