"""Text that is safe to tokenize, hash, log and write as UTF-8.

`clean_text` repairs lone UTF-16 surrogates once, where text enters mua (LLM replies, messages of
message-level policies, every message an env hands the runner): surrogate pairs become their
character, lone ones U+FFFD; valid text is returned as the same object. Task loaders call
`clean_messages` / `clean_value` on rows. Not here: stripping control characters, normalising
Unicode (valid text that may matter to a task).
"""

from __future__ import annotations

from typing import Any


def clean_text(text: str) -> str:
    """`text` with surrogate pairs joined and lone surrogates replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    # UTF-16 code units round-trip: pairs decode to their character, lone halves to U+FFFD.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_value(value: Any) -> Any:
    """Strings anywhere inside dicts, lists and tuples cleaned (keys too); other values as they are.

    Containers are rebuilt only where something changed."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        out = {clean_value(k): clean_value(v) for k, v in value.items()}
        return value if _same_items(out, value) else out
    if isinstance(value, list):
        items = [clean_value(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, tuple):
        items = tuple(clean_value(v) for v in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _same_items(new: dict, old: dict) -> bool:
    if len(new) != len(old):
        return False
    return all(k in old and old[k] is v for k, v in new.items())


def clean_message(message: dict) -> dict:
    """A chat message (content, tool calls, names, any field) with every string cleaned."""
    return clean_value(message)


def clean_messages(messages: list[dict]) -> list[dict]:
    return [clean_message(m) for m in messages]
