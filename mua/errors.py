"""Exceptions a user can cause, with the exit code the CLI maps them to.

Raise `UsageError` for a bad recipe, flag, path or name (exit 2) and `RunFailure` for a
runtime failure the user can act on (exit 1). Their message is printed as one line, without a
traceback unless MUA_DEBUG=1; credentials in URLs are redacted from it. Programming errors stay
ordinary exceptions.
"""

from __future__ import annotations

from mua.redact import redact_urls


class MuaError(Exception):
    """Base class of errors whose message is meant for the user (URL credentials redacted)."""

    exit_code = 1

    def __init__(self, *args):
        super().__init__(*redact_urls(args))


class UsageError(MuaError):
    """Bad input: recipe, override, path, name. Exit code 2."""

    exit_code = 2


class RunFailure(MuaError):
    """A run could not proceed (unreachable endpoint, broken checkpoint, ...). Exit code 1."""

    exit_code = 1


class UserFailure(Exception):
    """The simulated user or judge could not answer (after retries).

    The runner ends the trajectory with reason `user_failure`: masked from the loss, counted,
    never scored 0. Its message becomes the trajectory's detail, so URL credentials are redacted.
    Not a `MuaError`: it ends one trajectory, not the command. Gyms import it from `mua.gym`.
    """

    def __init__(self, *args):
        super().__init__(*redact_urls(args))
