"""Load a domain database once per process and hand out independent copies.

The first load validates the file into the domain's pydantic model; later environments get a
deep copy (a changed file, by time or size, is read again) of that validated model, so episodes never share state. Files are JSON or TOML.
"""

from __future__ import annotations

import json
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pydantic import BaseModel

_CACHE: dict[tuple, BaseModel] = {}


def read_data_file(path: Path) -> object:
    """Parsed JSON or TOML (by suffix)."""
    if path.suffix == ".toml":
        with path.open("rb") as f:
            return tomllib.load(f)
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def fresh_db(path: Path, model: type[BaseModel]) -> BaseModel:
    """A private copy of the database at `path`, validated as `model`."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size, model)
    if key not in _CACHE:
        _CACHE[key] = model.model_validate(read_data_file(Path(path)))
    return _CACHE[key].model_copy(deep=True)
