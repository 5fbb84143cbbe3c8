"""Render conversations to token ids through a tokenizer's chat template, and check stability.

`render_ids` is the one way the project turns messages into ids (template to text, encoded with no
extra special tokens, a flat `list[int]`). `encode_text` and `decode_ids` call the fast tokenizer's
Rust backend directly where that gives the same result by construction, skipping wrappers and
offsets that cost as much as the tokenization. `render_delta_ids` gives the ids a new message
appends; `check_prefix_stability` checks that turn-by-turn rendering only appends, which multi-turn
rollouts rely on. Not here: parsing model output, editing templates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mua.errors import UsageError

Message = Mapping[str, Any]


def render_text(
    tokenizer,
    messages: Sequence[Message],
    tools: Sequence[Mapping] | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """The chat template's text for `messages` (and `tools`, listed in the system turn).

    An empty conversation renders as "" (what it contributes to any longer rendering).
    """
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise UsageError(
            f"tokenizer {name!r} has no chat template; use a chat/instruct model's tokenizer "
            "or set model.tokenizer to one that has a template (e.g. tiny:qwen3-1m)"
        )
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
    )


def render_ids(
    tokenizer,
    messages: Sequence[Message],
    tools: Sequence[Mapping] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Token ids of the rendered conversation, as a flat list of ints."""
    return encode_text(tokenizer, render_text(tokenizer, messages, tools, add_generation_prompt))


# transformers' fast-tokenizer base classes (4.x, 5.x) and the steps of encode and decode a model
# family may override; an override means the backend alone may not give the same ids or text.
_FAST_BASES = ("PreTrainedTokenizerFast", "TokenizersBackend")
_ENCODE_STEPS = (
    "encode",
    "encode_plus",
    "_encode_plus",
    "_batch_encode_plus",
    "set_truncation_and_padding",
)
_DECODE_STEPS = ("decode", "_decode", "convert_tokens_to_string")
_DIRECT: dict[tuple[type, str], bool] = {}


def _direct_class(cls: type, steps: tuple[str, ...]) -> bool:
    """Whether `cls` is a transformers fast tokenizer that runs `steps` as its base class does."""
    key = (cls, steps[0])
    known = _DIRECT.get(key)
    if known is None:
        base = next(
            (
                c
                for c in cls.__mro__
                if c.__name__ in _FAST_BASES and c.__module__.startswith("transformers.")
            ),
            None,
        )
        known = base is not None and all(
            getattr(cls, name, None) is getattr(base, name, None) for name in steps
        )
        _DIRECT[key] = known
    return known


def encode_text(tokenizer, text: str) -> list[int]:
    """`tokenizer.encode(text, add_special_tokens=False)` as a list of ints."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (
        backend is not None
        and _direct_class(type(tokenizer), _ENCODE_STEPS)
        and not getattr(tokenizer, "split_special_tokens", False)
        and not getattr(backend, "encode_special_tokens", False)
        and backend.truncation is None
        and backend.padding is None
    ):
        fast = getattr(backend, "encode_batch_fast", None)  # tokenizers >= 0.21: no offsets
        if fast is not None:
            return fast([text], add_special_tokens=False)[0].ids
        return backend.encode(text, add_special_tokens=False).ids
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]


def decode_ids(tokenizer, ids: Sequence[int]) -> str:
    """`tokenizer.decode(ids)` (special tokens kept)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (
        backend is not None
        and not getattr(tokenizer, "clean_up_tokenization_spaces", True)
        and _direct_class(type(tokenizer), _DECODE_STEPS)
    ):
        return backend.decode(list(ids), skip_special_tokens=False)
    return tokenizer.decode(list(ids))


def render_delta_ids(
    tokenizer,
    previous: Sequence[Message],
    new: Sequence[Message],
    tools: Sequence[Mapping] | None = None,
    add_generation_prompt: bool = False,
) -> list[int]:
    """Ids that rendering `new` after `previous` appends to the rendering of `previous` alone.

    Raises RunFailure when the template is not prefix-stable for this conversation, because
    then no suffix exists and appending ids would train on a sequence the template never makes.
    """
    from mua.errors import RunFailure

    before = render_ids(tokenizer, previous, tools)
    after = render_ids(tokenizer, [*previous, *new], tools, add_generation_prompt)
    if after[: len(before)] != before:
        where = _first_difference(before, after)
        raise RunFailure(
            "chat template is not prefix-stable: adding a message changed earlier tokens at "
            f"position {where} ({_excerpt(tokenizer, before, where)!r} became "
            f"{_excerpt(tokenizer, after, where)!r}); fix the template or use another tokenizer"
        )
    return after[len(before) :]


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def _excerpt(tokenizer, ids: Sequence[int], at: int, width: int = 8) -> str:
    return tokenizer.decode(list(ids[max(0, at - width) : at + width]))


def _split_conversation(conversation) -> tuple[list[Message], list[Mapping] | None]:
    if isinstance(conversation, Mapping):
        return list(conversation["messages"]), conversation.get("tools")
    return list(conversation), None


def check_prefix_stability(tokenizer, conversations) -> list[str]:
    """Render each conversation turn by turn and whole; return one line per disagreement.

    A conversation is a list of messages or a mapping with `messages` and optional `tools`.
    Two things are checked at every message boundary: the rendering of the first k messages is
    a prefix of the whole rendering, and before each assistant message the rendering with the
    generation prompt is a prefix too (that is the prompt a rollout sends to the engine).
    An empty list means the template is prefix-stable on these conversations.
    """
    problems: list[str] = []
    for conv_index, conversation in enumerate(conversations):
        messages, tools = _split_conversation(conversation)
        whole = render_ids(tokenizer, messages, tools)
        for count in range(1, len(messages)):
            checks = [(render_ids(tokenizer, messages[:count], tools), "")]
            if messages[count].get("role") == "assistant":
                prompt = render_ids(tokenizer, messages[:count], tools, add_generation_prompt=True)
                checks.append((prompt, " with the generation prompt"))
            for prefix, how in checks:
                if whole[: len(prefix)] == prefix:
                    continue
                at = _first_difference(prefix, whole)
                role = messages[count].get("role", "?")
                problems.append(
                    f"conversation {conv_index}: the first {count} message(s){how} render to "
                    f"tokens that are not a prefix of the whole before message {count} ({role}): "
                    f"token {at} is {_excerpt(tokenizer, prefix, at)!r} turn by turn but "
                    f"{_excerpt(tokenizer, whole, at)!r} in the whole"
                )
    return problems
