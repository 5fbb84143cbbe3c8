"""The base model every recipe section derives from: unknown keys are errors, fields documented.

Does not define any section; see the sibling modules for those.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A strict recipe section: unknown keys are rejected, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)
