"""Load a domain database once per process and hand out independent copies.

The first load validates the file into the domain's pydantic model (a changed file, by time or
size, is read again) and keeps it with its JSON; each environment gets a private model
validated from that JSON, equal to a deep copy of the first and cheaper to make,
so episodes never share state. `check_db` only validates (once), for checks that build no
environment. Files are JSON or TOML.
"""

from __future__ import annotations

import json
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pydantic import BaseModel

_CACHE: dict[tuple, tuple[BaseModel, str]] = {}


def read_data_file(path: Path) -> object:
    """Parsed JSON or TOML (by suffix)."""
    if path.suffix == ".toml":
        with path.open("rb") as f:
            return tomllib.load(f)
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def _validated(path: Path, model: type[BaseModel]) -> tuple[BaseModel, str]:
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size, model)
    if key not in _CACHE:
        db = model.model_validate(read_data_file(Path(path)))
        _CACHE[key] = (db, db.model_dump_json())
    return _CACHE[key]


def check_db(path: Path, model: type[BaseModel]) -> None:
    """Raise what `fresh_db` would when the database at `path` does not validate as `model`."""
    _validated(path, model)


def fresh_db(path: Path, model: type[BaseModel]) -> BaseModel:
    """A private copy of the database at `path`, validated as `model`."""
    return model.model_validate_json(_validated(path, model)[1])
