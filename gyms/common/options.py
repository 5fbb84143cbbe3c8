"""Checks of a gym's `gym.options` shared by the gyms that read them into a dataclass.

`known_options(options, known, gym)` refuses a key the gym does not know, with a did-you-mean;
`one_of(key, value, allowed)` refuses a value outside a fixed set. Each is one `UsageError` line
naming `gym.options.<key>`. What an option means stays with its gym (its options.py).
"""

from __future__ import annotations

import difflib

from mua.errors import UsageError


def known_options(options: dict | None, known: tuple[str, ...], gym: str) -> dict:
    """A copy of `options` (None: empty) whose every key is in `known`."""
    options = dict(options or {})
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise UsageError(f"gym.options.{key}: unknown {gym} option; {hint}")
    return options


def one_of(key: str, value, allowed):
    """`value` when it is one of `allowed`."""
    if value not in allowed:
        raise UsageError(f"gym.options.{key}: {value!r} is not one of {', '.join(allowed)}")
    return value


def section_options(cls, options: dict, where: str):
    """`options` validated as the pydantic section `cls`; the first error is one `UsageError`
    naming `gym.options.<key>` and the docs section `where` (e.g. "docs/gyms.md (OpenEnv)")."""
    from pydantic import ValidationError

    try:
        return cls.model_validate(options)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise UsageError(f"gym.options.{key}: {err['msg']}; see {where}") from None
