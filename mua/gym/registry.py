"""Find gyms by name: built-in lazy import strings plus the `mua.gyms` entry-point group.

Core code never branches on a gym's name; it asks this registry. An unknown name is a
`UsageError` with a did-you-mean. Importing a gym happens only when it is asked for.
"""

from __future__ import annotations

import difflib
import importlib

from mua.errors import UsageError
from mua.plugin_targets import load_target, with_entry_points

BUILTIN_GYMS: dict[str, str] = {
    "guess": "gyms.guess:GYM",
    "function": "gyms.function:GYM",
    "telepathy": "gyms.telepathy:GYM",
    "turtle": "gyms.turtle:GYM",
    "persuade": "gyms.persuade:GYM",
    "intention": "gyms.intention:GYM",
    "search": "gyms.search:GYM",
    "travel": "gyms.travel:GYM",
    "tau": "gyms.tau:GYM",
    "tau2": "gyms.tau2:GYM",
    "math": "gyms.math:GYM",
    "mcp": "gyms.mcp:GYM",
    "openenv": "gyms.openenv:GYM",
    "verifiers": "gyms.verifiers:GYM",
}


def _all_targets() -> dict[str, str]:
    return with_entry_points(BUILTIN_GYMS, "mua.gyms")


def _available(name: str, target: str) -> bool:
    module = target.split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def list_gyms() -> list[str]:
    """Names of gyms that can be imported here."""
    return sorted(n for n, t in _all_targets().items() if _available(n, t))


def get_gym(name: str):
    """The `GymSpec` registered under `name`."""
    targets = _all_targets()
    target = targets.get(name)
    if target is None or not _available(name, target):
        close = difflib.get_close_matches(name, list_gyms(), n=1)
        hint = (
            f"; did you mean {close[0]!r}?" if close else f"; known gyms: {', '.join(list_gyms())}"
        )
        raise UsageError(f"unknown gym {name!r}{hint}")
    return load_target(target, "GYM")
