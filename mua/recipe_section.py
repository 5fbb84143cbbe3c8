"""The base model every recipe section derives from: unknown keys are errors, fields documented.

Defines no section: the recipe's are in `mua.config`, each engine's own in its folder
(`mua.engines.<name>.settings`), a gym's options in the gym.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A strict recipe section: unknown keys are rejected, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)
