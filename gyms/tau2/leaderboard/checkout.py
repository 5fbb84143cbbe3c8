"""A tau2-bench checkout: where its source, data, version and commit are.

`--source` (mua prep) and `gym.options.data_dir` accept either tau2-bench's `data/` folder or a
whole checkout (the folder holding `src/tau2/`, `pyproject.toml` and `data/tau2/`).
`find_checkout(path)` says which: a `Checkout` for a checkout (or for a `data/` folder whose
parent is one), None for a bare data folder. The version is pyproject's `project.version`; the
commit is read from `.git` when there is one (HEAD, a loose ref or packed-refs; nothing is run),
otherwise it is None. Nothing here reads tau2's texts (see `source.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

_HEX = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class Checkout:
    root: Path
    version: str | None
    commit: str | None

    @property
    def package(self) -> Path:
        """`src/tau2`: the source mua parses (never imports)."""
        return self.root / "src" / "tau2"

    @property
    def data_dir(self) -> Path:
        """`data/`: the folder holding `tau2/domains/`, as a bare data folder would be given."""
        return self.root / "data"

    def describe(self) -> dict:
        """What prepared rows and eval summaries record."""
        return {"version": self.version, "commit": self.commit}


def _is_checkout(root: Path) -> bool:
    return (root / "src" / "tau2").is_dir() and (root / "pyproject.toml").is_file()


def find_checkout(path) -> Checkout | None:
    """The checkout at `path` (or whose `data/` folder `path` is), else None."""
    path = Path(path).expanduser()
    if _is_checkout(path):
        root = path
    elif path.name == "data" and _is_checkout(path.parent):
        root = path.parent
    else:
        return None
    if not (root / "data" / "tau2" / "domains").is_dir():
        return None
    return Checkout(root=root, version=_version(root), commit=_commit(root))


def data_folder(path) -> Path:
    """The data folder behind `path`: `<checkout>/data` for a checkout, else `path` itself."""
    path = Path(path).expanduser()
    return path / "data" if _is_checkout(path) else path


def _version(root: Path) -> str | None:
    try:
        with (root / "pyproject.toml").open("rb") as handle:
            return tomllib.load(handle).get("project", {}).get("version")
    except (OSError, tomllib.TOMLDecodeError):
        return None


def _commit(root: Path) -> str | None:
    git = root / ".git"
    if git.is_file():  # a worktree or submodule: "gitdir: <path>"
        text = git.read_text(encoding="utf-8").strip()
        if text.startswith("gitdir:"):
            git = (root / text.split(":", 1)[1].strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return None
    value = head.read_text(encoding="utf-8").strip()
    if _HEX.match(value):
        return value
    if not value.startswith("ref:"):
        return None
    ref = value.split(":", 1)[1].strip()
    for base in (git, _common_dir(git)):
        loose = base / ref
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip() or None
        packed = base / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref and _HEX.match(parts[0]):
                    return parts[0]
    return None


def _common_dir(git: Path) -> Path:
    common = git / "commondir"
    if common.is_file():
        return (git / common.read_text(encoding="utf-8").strip()).resolve()
    return git
