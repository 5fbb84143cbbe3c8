"""Token-in/token-out transcripts of multi-turn rollouts, and the `Trajectory` they become.

`ChatRenderer` wraps a tokenizer's chat template: the prompt, the ids a new user/tool/env message
appends after an assistant turn (a suffix delta rendered against a fixed stand-in conversation,
so templates that rewrite earlier turns, like Qwen3 dropping old reasoning, still give the right
delta), and an assistant message's ids for message-level policies. `TranscriptBuilder` appends
sampled ids verbatim (never decoded and re-encoded) with their log-probs and loss mask 1, and
everything else with mask 0. `check_drift` re-renders the finished conversation and compares.
Whole conversations rendered to ids are remembered per tokenizer (`rendered_ids`): the n samples
of a task share their prompt, and a one-turn rollout cut by the token budget is checked against
that same prompt, so a GRPO step renders each distinct prompt once instead of 2n times.

What this module does not do: generate, parse tool calls, call envs or decide budgets (the runner
does), or compute advantages (the trainer does).
"""

from __future__ import annotations

import json
import logging
import weakref
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

from mua.errors import RunFailure
from mua.text import clean_text

log = logging.getLogger("mua.rollout")

# Strings templates end an assistant turn with, most specific first.
STOP_TEXTS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "</s>",
)
_SENTINEL = "Zq7Xj9Wk"
_PROBE_USER = {"role": "user", "content": "Hi"}
SOURCES = ("prompt", "assistant", "user", "tool", "env")
# What probing a template found, per (tokenizer, template, tools): probing renders several times.
_PROBES: dict[tuple, tuple] = {}
# Per tokenizer (held weakly), the ids of recently rendered conversations, most recent last.
_RENDERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_RENDERED_KEEP = 512
_SCAFFOLD_KEEP = 64  # distinct scaffolding texts remembered per template


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as the chat template should see them.

    Chat-style env messages (interventions) render as user turns (templates know no `env` role);
    raw-style env text is glued into the surrounding assistant message, as the model saw it.
    """
    out: list[dict] = []
    for msg in messages:
        role = msg.get("role")
        if role == "env" and msg.get("style") == "raw" and out and out[-1]["role"] == "assistant":
            out[-1]["content"] = (out[-1].get("content") or "") + msg.get("content", "")
            out[-1]["_glue"] = True
            continue
        if role == "assistant" and out and out[-1].get("_glue"):
            prev = out[-1]
            prev["content"] = (prev.get("content") or "") + (msg.get("content") or "")
            prev.pop("_glue")
            if msg.get("tool_calls"):
                prev["tool_calls"] = msg["tool_calls"]
            continue
        clean = {k: v for k, v in msg.items() if k not in ("style",)}
        if role == "env":
            clean["role"] = "user"
        out.append(clean)
    for msg in out:
        msg.pop("_glue", None)
    return out


class ChatRenderer:
    """A tokenizer plus the tool schemas of one conversation, rendered through its chat template.

    A renderer remembers its follow-up texts (the drift check renders a conversation's replies
    again), and renderers of one tokenizer, template and tools share the ids of the template's
    own scaffolding (its stop text, generation prompts): rendering and encoding are most of the
    runner's CPU per turn.
    """

    def __init__(self, tokenizer, tools: list[dict] | None = None):
        self.tokenizer = tokenizer
        self.tools = list(tools or [])
        key = (
            id(tokenizer),
            getattr(tokenizer, "chat_template", None),
            json.dumps(self.tools, sort_keys=True),
        )
        known = _PROBES.get(key)
        if known is None:
            self._probe_template()
            self._scaffold: dict[str, list[int]] = {}
            _PROBES[key] = (
                self.stop_text,
                self.rewrites_history,
                self._assistant_prefix,
                self._scaffold,
            )
        else:
            self.stop_text, self.rewrites_history, self._assistant_prefix, self._scaffold = known
        self._tools_json: str | None = None
        self._followups: dict[tuple[str, bool], str] = {}

    def _probe_template(self) -> None:
        probe = self.render([_PROBE_USER, {"role": "assistant", "content": _SENTINEL}])
        after = probe[probe.index(_SENTINEL) + len(_SENTINEL) :]
        self.stop_text = next((s for s in STOP_TEXTS if after.startswith(s)), None)
        if self.stop_text is None:
            raise RunFailure(
                f"cannot find how the chat template ends an assistant turn (after it comes {after[:20]!r}); "
                f"expected one of {list(STOP_TEXTS)}"
            )
        self.rewrites_history = self._probe_rewrites_history()
        self._assistant_prefix = self.render([_PROBE_USER], add_generation_prompt=True)

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        from mua.models.chat import render_text

        return render_text(
            self.tokenizer, template_messages(messages), self.tools or None, add_generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        from mua.models.chat import encode_text

        # Text is cleaned where it enters (runner, policies, endpoints); this catches what
        # reached the template another way (a tool schema, a system prompt built by a gym).
        return encode_text(self.tokenizer, clean_text(text))

    def decode(self, ids: list[int]) -> str:
        from mua.models.chat import decode_ids

        return decode_ids(self.tokenizer, ids)

    def encode_scaffold(self, text: str) -> list[int]:
        """`encode(text)` for text the template makes without message content (a stop, a
        generation prompt), remembered for every renderer of this template (a new list each call)."""
        ids = self._scaffold.get(text)
        if ids is None:
            ids = self.encode(text)
            if len(self._scaffold) < _SCAFFOLD_KEEP:
                self._scaffold[text] = ids
        return list(ids)

    def stop_token_ids(self) -> list[int]:
        """Ids that end an assistant turn: the template's end-of-turn token and the eos token."""
        ids = set(self.encode_scaffold(self.stop_text))
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        return sorted(ids)

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        return self.rendered_ids(messages, add_generation_prompt=True)

    def rendered_ids(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        """encode(render(messages, add_generation_prompt)), remembered for the last
        `_RENDERED_KEEP` conversations of this tokenizer (a new list each call)."""
        try:
            seen = _RENDERED.setdefault(self.tokenizer, OrderedDict())
        except TypeError:  # a tokenizer that cannot be referenced weakly: no memory
            return self.encode(self.render(messages, add_generation_prompt))
        if self._tools_json is None:
            self._tools_json = json.dumps(self.tools, sort_keys=True, default=str)
        key = (
            getattr(self.tokenizer, "chat_template", None),
            self._tools_json,
            json.dumps(messages, sort_keys=True, default=str),
            add_generation_prompt,
        )
        ids = seen.get(key)
        if ids is None:
            ids = seen[key] = self.encode(self.render(messages, add_generation_prompt))
            if len(seen) > _RENDERED_KEEP:
                seen.popitem(last=False)
        else:
            seen.move_to_end(key)
        return list(ids)

    def followup_text(self, new_messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Text that follows an assistant turn's stop token when `new_messages` come next
        (remembered by this renderer)."""
        key = (json.dumps(new_messages, sort_keys=True, default=str), add_generation_prompt)
        text = self._followups.get(key)
        if text is None:
            base = [_PROBE_USER, {"role": "assistant", "content": _SENTINEL}]
            full = self.render(base + list(new_messages), add_generation_prompt)
            end = full.index(self.stop_text, full.index(_SENTINEL)) + len(self.stop_text)
            text = self._followups[key] = full[end:]
        return text

    def followup_chunks(
        self, new_messages: list[dict], add_generation_prompt: bool = True
    ) -> list[tuple[str, str]]:
        """`followup_text` split into (source, text) pieces, one per message, then the generation prompt."""
        chunks, done = [], ""
        for k, msg in enumerate(new_messages):
            text = self.followup_text(new_messages[: k + 1], add_generation_prompt=False)
            if not text.startswith(done):  # the template merges neighbours (e.g. tool results)
                return [
                    (
                        _source_of(new_messages[0]),
                        self.followup_text(new_messages, add_generation_prompt),
                    )
                ]
            chunks.append((_source_of(msg), text[len(done) :]))
            done = text
        full = self.followup_text(new_messages, add_generation_prompt)
        if not full.startswith(done):
            return [(_source_of(new_messages[0]), full)]
        if full[len(done) :]:
            chunks.append(("prompt", full[len(done) :]))
        return chunks

    def assistant_text(self, message: dict) -> str:
        """Text of an assistant message after the generation prompt, up to and including its stop."""
        prefix = self._assistant_prefix
        full = self.render([_PROBE_USER, message])
        if not full.startswith(prefix):
            raise RunFailure(
                "chat template renders an assistant turn without its own generation prompt"
            )
        body = full[len(prefix) :]
        cut = body.rfind(self.stop_text)
        return body[: cut + len(self.stop_text)] if cut >= 0 else body

    def _probe_rewrites_history(self) -> bool:
        first = [_PROBE_USER, {"role": "assistant", "content": "<think>R</think>A"}]
        later = first + [{"role": "user", "content": "Again"}]
        return not self.render(later).startswith(self.render(first))


def _source_of(msg: dict) -> str:
    role = msg.get("role")
    return role if role in ("user", "tool", "env") else "prompt"


@dataclass
class TranscriptBuilder:
    """Grows one trajectory's token stream. Parallel lists, one entry per token."""

    renderer: ChatRenderer
    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    prompt_len: int = 0
    retokenized_turns: int = 0

    def _extend(
        self, ids: list[int], source: str, mask: int, logprobs=None, turn: int = -1
    ) -> None:
        self.token_ids.extend(ids)
        self.sources.extend([source] * len(ids))
        self.loss_mask.extend([mask] * len(ids))
        self.logprobs.extend(list(logprobs) if logprobs is not None else [0.0] * len(ids))
        self.turn_index.extend([turn] * len(ids))

    def add_prompt(self, messages: list[dict]) -> None:
        self._extend(self.renderer.prompt_ids(messages), "prompt", 0)
        self.prompt_len = len(self.token_ids)

    def add_sampled(self, ids: list[int], logprobs: list[float], turn: int) -> None:
        """Sampled ids, verbatim, trained on (mask 1)."""
        self.turn_starts.append(len(self.token_ids))
        self._extend(list(ids), "assistant", 1, logprobs, turn)

    def add_assistant_message(self, message: dict, turn: int) -> None:
        """A message-level policy's turn rendered through the template (mask 1, log-probs 0)."""
        self.turn_starts.append(len(self.token_ids))
        self._extend(
            self.renderer.encode(self.renderer.assistant_text(message)), "assistant", 1, None, turn
        )

    def close_truncated_turn(self) -> None:
        """End a turn cut by the token budget with the template's stop (mask 0: not sampled)."""
        self._extend(self.renderer.encode_scaffold(self.renderer.stop_text), "prompt", 0)

    def add_followup(self, messages: list[dict], add_generation_prompt: bool = True) -> None:
        renderer = self.renderer
        for source, text in renderer.followup_chunks(messages, add_generation_prompt):
            # a "prompt" piece after the messages is the template's generation prompt
            encode = renderer.encode_scaffold if source == "prompt" else renderer.encode
            self._extend(encode(text), source, 0)

    def truncate(self, length: int) -> None:
        """Forget every token from position `length` on (an env cut the turn short there)."""
        for name in ("token_ids", "sources", "loss_mask", "logprobs", "turn_index"):
            del getattr(self, name)[length:]
        self.turn_starts = [s for s in self.turn_starts if s < length]

    def add_raw(self, text: str) -> None:
        """Raw continuation text appended to the assistant's tokens (interventions, mask 0)."""
        self._extend(self.renderer.encode(text), "env", 0)

    def ended_with_stop(self) -> bool:
        return bool(self.token_ids) and self.token_ids[-1] in set(self.renderer.stop_token_ids())


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


def _sampled_turns(builder: TranscriptBuilder) -> list[list[int]]:
    """Each turn's ids, with the stop that closed a cut turn."""
    stops = set(builder.renderer.stop_token_ids())
    turns = []
    for t, start in enumerate(builder.turn_starts):
        end = start
        while end < len(builder.token_ids) and builder.turn_index[end] == t:
            end += 1
        seg = builder.token_ids[start:end]
        if (
            (not seg or seg[-1] not in stops)
            and end < len(builder.token_ids)
            and builder.token_ids[end] in stops
        ):
            seg = seg + [builder.token_ids[end]]
        turns.append(seg)
    return turns


def check_drift(
    builder: TranscriptBuilder, messages: list[dict], ends_with_prompt: bool
) -> str | None:
    """Compare the stream with the re-rendered `messages` (those the stream covers).

    `ends_with_prompt`: the stream ends with a generation prompt (replies were appended); else it
    ends with an assistant turn, and the template's text after that turn's stop is added before
    comparing. Returns None when they agree, else a readable diff. Sets
    `builder.retokenized_turns`: turns whose text matches but whose ids differ (not drift).
    """
    renderer = builder.renderer
    builder.retokenized_turns = 0
    stream = list(builder.token_ids)
    if not ends_with_prompt:
        stream += renderer.encode_scaffold(renderer.followup_text([], add_generation_prompt=False))
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
    return drift_diff(renderer.tokenizer, stream, reference)


def per_turn_samples(builder: TranscriptBuilder, messages: list[dict]) -> list[dict]:
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


@dataclass
class Trajectory:
    """One rollout of one task: what the trainer, evaluation and `mua rollout` consume.

    Per-token lists all have `len(token_ids)` entries.
    - task_id, group_id, sample_index: the task; samples of one task share `group_id`
      (the GRPO group) and are numbered 0..n-1.
    - token_ids: the whole conversation as the policy saw it (prompt, sampled turns, replies).
    - sources: per token, one of `prompt` (system, first user turn, template scaffolding and
      generation prompts), `assistant`, `user`, `tool`, `env`.
    - loss_mask: 1 only on tokens the policy sampled (stop token included); 0 elsewhere. Zeroed
      everywhere when the re-render check failed (see `metrics["drift"]`).
    - logprobs: the sampler's log_softmax(logits / T) of each sampled token; 0.0 elsewhere and for
      message-level policies.
    - turn_index: assistant turn t >= 0 for assistant tokens, -1 otherwise.
    - turn_rewards: one reward per assistant turn; reward: their sum; reward_components: named
      parts summed over turns.
    - termination: `done`, `max_turns`, `length`, `timeout`, `user_failure` or `env_error`;
      `detail` says more for the last three.
    - messages: the full chat (env messages keep role `env`); tools: schemas shown to the model.
    - num_turns: assistant turns taken; prompt_len: tokens of the initial prompt.
    - metrics: `tokens`, `assistant_tokens`, `parse_errors`, `tool_errors/<kind>`, `drift` (1.0
      when the re-render differed), `drift_dropped` (drift with rollout.drift=drop).
    - per_turn_samples: with rollout.drift=per_turn and drift, one dict per assistant turn
      {turn, token_ids, loss_mask, logprobs}: the re-rendered context, then that turn's samples.
    - gym: the label of the `gyms:` entry it ran in (empty when not set by the caller).
    """

    task_id: str
    group_id: str
    sample_index: int
    token_ids: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_index: list[int] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    termination: str = "done"
    detail: str = ""
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    num_turns: int = 0
    prompt_len: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    per_turn_samples: list[dict] = field(default_factory=list)
    gym: str = ""  # the `gyms:` entry (label) it ran in, when the run has a gyms list

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=str)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Trajectory:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})
