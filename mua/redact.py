"""Remove credentials before anything is written: files, MLflow, logs, error lines.

`redact_urls` replaces a URL's user-info and secret-looking query parameters by `***`, keeping
scheme, host, port and path, in a string or nested dicts/lists. `redact_secrets` also replaces the
value of every key named like a secret (`is_secret_name`; a name ending in `_env` is kept), for
settings files. `mask_env_maps` replaces each value of an `env:` map by `ENV_MARK`, keeping names.
Not here: deciding where to redact (the writers call these), handing values to processes.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
ENV_MARK = "<set>"  # an environment map's value, as written: the variable is set, to something
ENV_MAP_KEY = "env"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'<>`]+")
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/?#@]*@)")
_SECRET_PARAM = re.compile(
    r"([?&;](?:[^=&;#]*?(?:key|token|secret|passw|pwd|sig|auth|credential|session)[^=&;#]*)=)"
    r"([^&;#]*)",
    re.IGNORECASE,
)


_SECRET_NAME = re.compile(
    r"(api[_-]?key|secret|token|password|passwd|authorization|cookie|credentials?)$",
    re.IGNORECASE,
)


def is_secret_name(key: object) -> bool:
    """Whether a setting named `key` holds a secret (not one ending `_env`: it names a variable)."""
    name = str(key)
    return bool(_SECRET_NAME.search(name)) and not name.lower().endswith("_env")


def _redact_url(url: str) -> str:
    url = _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", url, count=1)
    return _SECRET_PARAM.sub(lambda m: m.group(1) + (MASK if m.group(2) else ""), url)


def redact_text(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by `***`."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: _redact_url(m.group(0)), text)


def redact_urls(value: Any) -> Any:
    """`value` (str, or dict/list/tuple of them, recursively) with URL credentials redacted."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_urls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_urls(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_urls(v) for v in value)
    return value


def is_env_map(key: object, value: Any) -> bool:
    """Whether `value`, found under `key`, is an environment map (its values are never written)."""
    return str(key).lower() == ENV_MAP_KEY and isinstance(value, dict)


def _env_names(env: dict) -> dict:
    return {name: ENV_MARK for name in env}


def mask_env_maps(value: Any) -> Any:
    """`value` (dicts and lists, recursively) with every environment map's values `ENV_MARK`."""
    if isinstance(value, dict):
        return {
            k: _env_names(v) if is_env_map(k, v) else mask_env_maps(v) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(mask_env_maps(v) for v in value)
    return value


def _redacted_setting(key: object, value: Any) -> Any:
    if isinstance(value, str) and value and is_secret_name(key):
        return MASK
    return _env_names(value) if is_env_map(key, value) else redact_secrets(value)


def redact_secrets(value: Any) -> Any:
    """`redact_urls`, environment maps masked (`mask_env_maps`), and the string value of every
    key named like a secret replaced by `***`."""
    if isinstance(value, dict):
        return {k: _redacted_setting(k, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_secrets(v) for v in value)
    return redact_urls(value)
