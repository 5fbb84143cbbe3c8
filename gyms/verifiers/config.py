"""The verifiers gym's options (`gyms: [{name: verifiers, options: {...}}]`)."""

from __future__ import annotations

from pydantic import Field, PositiveFloat

from gyms.common.options import section_options
from mua.recipe_section import Section


class VerifiersOptions(Section):
    """`gym.options` of the verifiers gym (also `mua prep --gym verifiers --option k=v`)."""

    env: str = Field(
        description="The environment's id: an installed verifiers 0.4.0 environment package "
        "(its taskset, and the Env and harness it exports), e.g. vf-guess."
    )
    python: str = Field(
        description="The Python of a venv with verifiers and the environment package (their "
        "pins are not mua's; e.g. tests/.verifiers/venv/bin/python from `make verifiers-side`)."
    )
    env_args: dict = Field(
        default_factory=dict,
        description="The environment's config over {taskset: {id: env}}: taskset options "
        "under `taskset`, the Env's own fields, its seats (`runtime` defaults to subprocess).",
    )
    test_rows: int = Field(
        0, ge=0, description="mua prep: the last this many rows are the test split."
    )
    start_timeout_s: PositiveFloat = Field(180.0, description="Most seconds to load the env.")
    timeout_s: PositiveFloat = Field(
        120.0, description="Most seconds from a turn to the environment's answer."
    )


def read_options(options: dict) -> VerifiersOptions:
    return section_options(VerifiersOptions, options, "docs/gyms.md (verifiers)")
