"""Test helper: a tau2-bench checkout assembled in a temporary folder from the shared data.

`../shared/data/tau2_src` holds tau2-bench's `src/`, `pyproject.toml` and LICENSE and
`../shared/data/tau2` its `data/tau2` folder, both at the same commit (their SOURCE.md files
say which). A checkout is `src/` and `pyproject.toml` beside `data/tau2`: two symlinks and a
folder, nothing copied. `assemble(dest)` builds one; the `tau2_checkout` fixture (module
scope) builds one in a temporary folder or skips, naming what is missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import shared_dir


def sources() -> tuple[Path, Path]:
    data = shared_dir() / "data"
    return data / "tau2_src", data / "tau2"


def missing() -> str | None:
    """Why a checkout cannot be assembled here, or None."""
    src, data = sources()
    if not (src / "src" / "tau2").is_dir() or not (src / "pyproject.toml").is_file():
        return f"tau2-bench source not found at {src} (set MUA_SHARED to the shared/ folder)"
    if not (data / "tau2" / "domains").is_dir():
        return f"tau2 data not found at {data} (set MUA_SHARED to the shared/ folder)"
    return None


def assemble(dest: Path) -> Path:
    """`dest` laid out as a tau2-bench checkout (src/, pyproject.toml, data/tau2)."""
    src, data = sources()
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "src").symlink_to(src / "src", target_is_directory=True)
    (dest / "pyproject.toml").symlink_to(src / "pyproject.toml")
    (dest / "data").mkdir()
    (dest / "data" / "tau2").symlink_to(data / "tau2", target_is_directory=True)
    return dest


@pytest.fixture(scope="module")
def tau2_checkout(tmp_path_factory) -> Path:
    why = missing()
    if why:
        pytest.skip(why)
    return assemble(tmp_path_factory.mktemp("tau2-bench") / "tau2-bench")
