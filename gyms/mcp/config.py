"""The mcp gym's options (`gyms: [{name: mcp, options: {...}}]`): its servers and its reward.

Checked when an env is made, so a bad option stops the run with one line naming the key
(`UsageError`). Nothing here starts a server.
"""

from __future__ import annotations

import shlex
from typing import Annotated, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from mua.errors import UsageError
from mua.recipe_section import Section


class ServerConfig(Section):
    """One MCP server: started from `command` (stdio) or reached at `url` (streamable HTTP)."""

    name: str = Field(description="The server's name in messages and errors.")
    command: list[str] | None = Field(
        None,
        description="Start the server with this command and talk to it over stdio (a list of "
        "arguments or one shell-style string; a leading `python` is mua's interpreter). One "
        "process per rank, closed with the run.",
    )
    url: str | None = Field(None, description="A streamable-HTTP server's URL (…/mcp).")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables of a started server."
    )
    tools: list[str] | None = Field(
        None, description="Offer only these of the server's tools (default: all of them)."
    )
    start_timeout_s: PositiveFloat = Field(
        30.0, description="Most seconds to start (or reach) the server and list its tools."
    )
    call_timeout_s: PositiveFloat = Field(
        30.0,
        description="Most seconds one tool call may take; a call past it ends the trajectory "
        "(env_error) and the server is restarted.",
    )
    max_result_chars: PositiveInt = Field(
        16384,
        description="Most characters of one tool result; a longer one ends the trajectory "
        "(env_error).",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value):
        return shlex.split(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_address(self):
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r}: give exactly one of command or url")
        if self.command is not None and not self.command:
            raise ValueError(f"server {self.name!r}: command is empty")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server {self.name!r}: url {self.url!r} must start with http://")
        return self


class ToolReward(Section):
    """A tool of the servers scores the episode when it ends; the model is not offered it."""

    kind: Literal["tool"] = "tool"
    name: str = Field(description="The judge tool's name.")


class GymReward(Section):
    """A registered gym's `score_conversation` scores the episode's conversation."""

    kind: Literal["gym"] = "gym"
    name: str = Field(description="The gym whose scorer is used (e.g. guess).")


class ProgramReward(Section):
    """A program reads `{"task", "messages"}` as JSON on stdin and prints `{"reward": x}`."""

    kind: Literal["program"] = "program"
    command: list[str] = Field(description="The scorer to run (a leading `python`: mua's).")
    timeout_s: PositiveFloat = Field(60.0, description="Most seconds the scorer may take.")

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, value):
        return shlex.split(value) if isinstance(value, str) else value


class NoReward(Section):
    """No episode reward (evaluation of the tools alone)."""

    kind: Literal["none"] = "none"


Reward = Annotated[ToolReward | GymReward | ProgramReward | NoReward, Field(discriminator="kind")]


class McpOptions(Section):
    """`gym.options` of the mcp gym."""

    servers: list[ServerConfig] = Field(min_length=1, description="The MCP servers.")
    tasks: str | None = Field(
        None,
        description="A JSONL file of tasks (as `mua prep --gym mcp --source` reads), used when "
        "the entry has no task files.",
    )
    reward: Reward = Field(description="How an episode is scored when it ends.")
    task_args: list[str] = Field(
        default_factory=list,
        description="Keys of the task payload passed to every tool (and the judge tool) that "
        "takes an argument of that name; such arguments are hidden from the model.",
    )
    end_on_text: bool = Field(
        False,
        description="A turn without tool calls ends the episode (the final answer); otherwise it "
        "goes to the user.",
    )


def read_options(options: dict) -> McpOptions:
    """The gym options checked; a bad one is a `UsageError` naming its key and the fix."""
    try:
        return McpOptions.model_validate(options)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("ToolReward", "Gym")))
        raise UsageError(
            f"gym.options.{where or 'servers'}: {err['msg']}; see docs/gyms.md (MCP servers)"
        ) from None
