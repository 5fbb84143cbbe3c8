"""On-disk cache of LLM replies, keyed by a hash of the request.

The key covers everything that decides the reply of a deterministic endpoint: base URL, model,
messages, temperature and max_tokens. One small JSON file per entry, written atomically (temp
file in the same folder, then `os.replace`), so concurrent writers and crashed runs never leave
a half-written entry. It does not expire entries, bound its size, or cache failures; the API
key is never part of the key or the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def request_key(
    *,
    base_url: str,
    model: str,
    messages: list[dict],
    temperature: float,
    max_tokens: int,
    tools: list[dict] | None = None,
) -> str:
    """A stable sha256 hex digest of the request fields that determine the reply (`tools` only
    when offered, so keys of plain requests do not change)."""
    payload = {
        "base_url": base_url,
        "model": model,
        "messages": messages,
        "temperature": float(temperature),
        "max_tokens": int(max_tokens),
    }
    if tools:
        payload["tools"] = tools
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ReplyCache:
    """Replies stored as `<dir>/<key[:2]>/<key>.json` holding `{"content": ...}`."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory).expanduser()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                content = json.load(fh).get("content")
        except (OSError, ValueError, AttributeError):
            return None  # missing or unreadable entries are misses, never errors
        return content if isinstance(content, str) else None

    def put(self, key: str, content: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"content": content}, fh, ensure_ascii=False)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
