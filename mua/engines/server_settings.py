"""The settings every engine that runs as HTTP servers next to the trainer shares (SGLang, vLLM):
one base model their recipe sections derive from. Imports pydantic and `mua.recipe_section` only.
"""

from __future__ import annotations

import os

from pydantic import Field, PositiveFloat

from mua.errors import UsageError
from mua.recipe_section import Section


class ServerEngineConfig(Section):
    """What every engine that runs as HTTP servers next to the trainer shares (SGLang, vLLM):
    where pushed weights are written, the post-push probe, and the launch and request timeouts."""

    base_urls: list[str] = Field(
        default_factory=list,
        description="Running servers to use instead of launching them: SGLang's protocol (SGLang "
        "or `mua serve`) for engine=sglang; vLLM servers, one per rank (rank r uses the r-th), "
        "started as docs/vllm.md says, for engine=vllm. Empty: mua launches them.",
    )
    weights_dir: str | None = Field(
        None, description="Folder for weights pushed through files; default /dev/shm (RAM-backed)."
    )
    probe_tolerance: PositiveFloat = Field(
        0.05,
        description="Most mean |log-prob| difference between engine and trainer on the probe "
        "prompt after a push before the run stops.",
    )
    launch_timeout_s: PositiveFloat = Field(
        900.0, description="Wait for a launched server to answer."
    )
    request_timeout_s: PositiveFloat = Field(600.0, description="Timeout of one HTTP request.")
    extra_args: list[str] = Field(
        default_factory=list, description="More flags of the server's launcher, passed verbatim."
    )
    api_key_env: str | None = Field(
        None,
        description="Environment variable holding the API key of the servers at `base_urls` "
        "(those started with `--api-key`), sent with every request; a server mua launches gets "
        "a key of its own.",
    )

    def base_urls_key(self) -> str | None:
        """The key of the servers at `base_urls`: the value of `api_key_env` (None when unset)."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UsageError(
                f"api_key_env names {self.api_key_env}, which is not set: export it with the "
                "servers' API key, or drop api_key_env for servers started without one"
            )
        return key
