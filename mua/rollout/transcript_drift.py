"""Checking a rollout's token stream against the chat template's rendering of its messages.

`check_drift` re-renders the finished conversation (`reference_ids`) and compares it with the
stream the policy was fed; a turn whose ids decode to the template's text but tokenize differently
counts as `retokenized_turns`, not drift. `drift_diff` words the first difference,
`full_render_difference` names the family's known reason, and `per_turn_samples` is
`rollout.drift: per_turn`'s remedy (docs/model_families.md, "Token exactness and drift").
Not here: building the stream, rendering templates, deciding what drift does (the runner).
"""

from __future__ import annotations

from typing import Protocol

from mua.families import detect_family
from mua.rollout.chat_renderer import ChatRenderer, template_messages


class BuiltStream(Protocol):
    """What the checks read of a built stream (`mua.rollout.transcript.TranscriptBuilder`)."""

    renderer: ChatRenderer
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    sources: list[str]
    turn_index: list[int]
    turn_starts: list[int]
    retokenized_turns: int


def reference_ids(
    renderer: ChatRenderer,
    messages: list[dict],
    add_generation_prompt: bool,
    sampled_turns: list[list[int]] | None = None,
) -> tuple[list[int], int]:
    """What the template makes of `messages`, and how many sampled turns were kept as sampled.

    One render, or message by message when the template rewrites history (Qwen3 drops old
    reasoning, so its one-shot render never equals the stream a multi-turn rollout feeds the
    model) or when `sampled_turns` is given: then an assistant turn whose sampled ids decode to
    the template's text but tokenize differently counts as agreeing (the model may spell a word
    with other tokens; its context is still the template's text).
    """
    if sampled_turns is None and not renderer.rewrites_history:
        return renderer.rendered_ids(messages, add_generation_prompt), 0
    msgs = template_messages(messages)
    first = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), len(msgs))
    if first == len(msgs):
        return renderer.rendered_ids(msgs, add_generation_prompt), 0
    ids, kept, turn = renderer.prompt_ids(msgs[:first]), 0, 0
    decode = renderer.decode
    i = first
    while i < len(msgs):
        canonical = renderer.encode(renderer.assistant_text(msgs[i]))
        sampled = sampled_turns[turn] if sampled_turns and turn < len(sampled_turns) else None
        if sampled is not None and sampled != canonical and decode(sampled) == decode(canonical):
            canonical, kept = sampled, kept + 1
        ids += canonical
        j = i + 1
        while j < len(msgs) and msgs[j]["role"] != "assistant":
            j += 1
        gen = j < len(msgs) or add_generation_prompt
        replies = msgs[i + 1 : j]
        encode = renderer.encode if replies else renderer.encode_scaffold
        ids += encode(renderer.followup_text(replies, gen))
        i, turn = j, turn + 1
    return ids, kept


def _sampled_turns(builder: BuiltStream) -> list[list[int]]:
    """Each turn's ids, with the stop that closed a cut turn (for a template with no
    end-of-turn token, without the role token that ended it: the template renders that token
    with the follow-up)."""
    renderer = builder.renderer
    stops = set(renderer.stop_token_ids())
    turns = []
    for t, start in enumerate(builder.turn_starts):
        end = start
        while end < len(builder.token_ids) and builder.turn_index[end] == t:
            end += 1
        seg = builder.token_ids[start:end]
        if renderer.role_stops:  # a role token ends a turn by beginning the follow-up
            if seg and seg[-1] in stops:
                seg = seg[:-1]
        elif (
            (not seg or seg[-1] not in stops)
            and end < len(builder.token_ids)
            and builder.token_ids[end] in stops
        ):
            seg = seg + [builder.token_ids[end]]
        turns.append(seg)
    return turns


def check_drift(builder: BuiltStream, messages: list[dict], ends_with_prompt: bool) -> str | None:
    """Compare the stream with the re-rendered `messages` (those the stream covers).

    `ends_with_prompt`: the stream ends with a generation prompt (replies were appended); else it
    ends with an assistant turn, and the template's text after that turn's stop is added before
    comparing. Returns None when they agree, else a readable diff (with the known drift reason of
    the template's model family, `mua.families`). Sets
    `builder.retokenized_turns`: turns whose text matches but whose ids differ (not drift).
    """
    renderer = builder.renderer
    builder.retokenized_turns = 0
    stream = _closed_stream(builder, ends_with_prompt)
    try:
        reference, _ = reference_ids(renderer, messages, ends_with_prompt)
        if reference != stream:
            one_turn_per_message = sum(
                m["role"] == "assistant" for m in template_messages(messages)
            )
            if one_turn_per_message == len(builder.turn_starts):
                reference, kept = reference_ids(
                    renderer, messages, ends_with_prompt, _sampled_turns(builder)
                )
                builder.retokenized_turns = kept
    except Exception as e:  # a template that cannot render this conversation is drift too
        return f"re-rendering failed: {type(e).__name__}: {e}"
    return _with_family_reason(renderer, drift_diff(renderer.tokenizer, stream, reference))


def _closed_stream(builder: BuiltStream, ends_with_prompt: bool) -> list[int]:
    """The stream as the template renders a conversation ending there: a last assistant turn
    gets the template's text after its stop; for a template with no end-of-turn token, the
    role token the model sampled to end it opens a turn that never came, and is left out."""
    renderer = builder.renderer
    stream = list(builder.token_ids)
    if ends_with_prompt:
        return stream
    if renderer.role_stops and stream and builder.loss_mask[-1] == 1:
        if stream[-1] in set(renderer.stop_token_ids()):
            stream.pop()
    return stream + renderer.encode_scaffold(
        renderer.followup_text([], add_generation_prompt=False)
    )


def _with_family_reason(renderer: ChatRenderer, diff: str | None) -> str | None:
    family = detect_family(getattr(renderer.tokenizer, "chat_template", None))
    if diff is not None and family is not None:
        diff += f" (known for {family.name}: {family.drift})"
    return diff


def full_render_difference(
    builder: BuiltStream, messages: list[dict], ends_with_prompt: bool
) -> str | None:
    """How the stream differs from the template's one-shot render of `messages` (None when
    equal), with the known reason of the template's model family.

    Unlike `check_drift` this counts what a template rewrites in earlier turns (Qwen3 dropping
    old reasoning): the stream is still what the model saw, but a one-shot render of the
    conversation (SFT data, a server's prompt cache) is not it.
    """
    renderer = builder.renderer
    stream = _closed_stream(builder, ends_with_prompt)
    try:
        whole = renderer.rendered_ids(messages, ends_with_prompt)
    except Exception as e:
        return f"re-rendering failed: {type(e).__name__}: {e}"
    return _with_family_reason(renderer, drift_diff(renderer.tokenizer, stream, whole))


def per_turn_samples(builder: BuiltStream, messages: list[dict]) -> list[dict]:
    """One training sample per assistant turn: the template's context, then the sampled tokens.

    A turn that continues raw text inside the same assistant message keeps the stream's own
    prefix as its context (there is no template rendering of a half-finished message).
    """
    renderer = builder.renderer
    assistant_at = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    samples = []
    for turn, start in enumerate(builder.turn_starts):
        end = start
        while end < len(builder.token_ids) and builder.turn_index[end] == turn:
            end += 1
        raw_continuation = (
            start > 0
            and builder.sources[start - 1] == "env"
            and builder.loss_mask[start - 1] == 0
            and turn < len(assistant_at)
            and _follows_raw(messages, assistant_at[turn])
        )
        if raw_continuation or turn >= len(assistant_at):
            context = builder.token_ids[:start]
        else:
            context = renderer.prompt_ids(messages[: assistant_at[turn]])
        sampled = builder.token_ids[start:end]
        samples.append(
            {
                "turn": turn,
                "token_ids": context + sampled,
                "loss_mask": [0] * len(context) + builder.loss_mask[start:end],
                "logprobs": [0.0] * len(context) + builder.logprobs[start:end],
            }
        )
    return samples


def _follows_raw(messages: list[dict], index: int) -> bool:
    return (
        index > 0
        and messages[index - 1].get("role") == "env"
        and messages[index - 1].get("style") == "raw"
    )


def drift_diff(tokenizer, stream: list[int], reference: list[int], width: int = 12) -> str | None:
    """None when equal, else a readable account of the first difference."""
    if stream == reference:
        return None
    at = next(
        (k for k, (a, b) in enumerate(zip(stream, reference, strict=False)) if a != b),
        min(len(stream), len(reference)),
    )

    def window(ids):
        return tokenizer.decode(ids[max(0, at - width) : at + width])

    return (
        f"token {at} of {len(stream)} sampled / {len(reference)} re-rendered differs: "
        f"sampled {window(stream)!r} vs re-rendered {window(reference)!r}"
    )
