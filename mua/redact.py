"""Remove credentials from URLs before anything is written: files, MLflow, logs, error lines.

`redact_urls(value)` takes a string, or a dict/list/tuple holding strings (recursively), and
returns it with every URL's credentials replaced by `***`:

- the user-info part: `http://u:sk-123@host/v1` -> `http://***@host/v1`;
- query parameters whose name looks secret (key, api_key, token, secret, password, sig, auth,
  credential, ...): `?key=abc&model=x` -> `?key=***&model=x`.

Everything else (scheme, host, port, path, other parameters) is kept, so a redacted URL still
says where a request went. Text that is not a URL is returned unchanged.

`redact_secrets(value)` also replaces the string value of every key named like a secret
(`is_secret_name`: `api_key`, `OPENAI_API_KEY`, `token`, `password`, `Authorization`, `Cookie`,
...; a key ending in `_env` names a variable and is kept): for files holding settings (eval
configs, summaries, recipe change records), where a header or key may sit in a gym's options.
Result rows keep their transcripts and get `redact_urls` only. Does not decide where to redact:
writers of files, MLflow params and error messages call these.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
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


def redact_secrets(value: Any) -> Any:
    """`redact_urls`, and the string value of every key named like a secret replaced by `***`."""
    if isinstance(value, dict):
        return {
            k: MASK if isinstance(v, str) and v and is_secret_name(k) else redact_secrets(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(redact_secrets(v) for v in value)
    return redact_urls(value)
