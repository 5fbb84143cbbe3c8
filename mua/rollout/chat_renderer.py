"""A tokenizer's chat template as a multi-turn rollout needs it: `ChatRenderer`.

It renders the prompt, the ids a user/tool/env message appends after an assistant turn (a delta
against a fixed stand-in conversation, so templates that rewrite earlier turns still give the
right delta) and an assistant message's ids; a family without an end-of-turn token stops at its
`role_stops`. `template_messages` shapes messages for the template (`mua.families.for_template`).
Rendered conversations are cached per tokenizer (`rendered_ids`), so a step renders each prompt once.
Not here: the token stream (`transcript`), drift checks (`transcript_drift`), tool calls.
"""

from __future__ import annotations

import contextlib
import json
import weakref
from collections import OrderedDict

from mua.errors import RunFailure
from mua.text import clean_text

# Strings templates end an assistant turn with, most specific first.
STOP_TEXTS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|return|>",
    "<|end|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "</s>",
    "<｜end▁of▁sentence｜>",
)
_SENTINEL = "Zq7Xj9Wk"
_PROBE_USER = {"role": "user", "content": "Hi"}
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
                self.role_stops,
                self.rewrites_history,
                self._assistant_prefix,
                self._scaffold,
            )
        else:
            (
                self.stop_text,
                self.role_stops,
                self.rewrites_history,
                self._assistant_prefix,
                self._scaffold,
            ) = known
        self._tools_json: str | None = None
        self._followups: dict[tuple[str, bool], str] = {}

    def _probe_template(self) -> None:
        probe = self.render([_PROBE_USER, {"role": "assistant", "content": _SENTINEL}])
        after = probe[probe.index(_SENTINEL) + len(_SENTINEL) :]
        self.stop_text = next((s for s in STOP_TEXTS if after.startswith(s)), None)
        self.role_stops: tuple[str, ...] = ()
        if self.stop_text is None:
            from mua.families import detect_family

            family = detect_family(getattr(self.tokenizer, "chat_template", None))
            if family is None or not self._ends_at_next_role(after, family.role_stops):
                known = f" (a {family.name} template: {family.drift})" if family else ""
                raise RunFailure(
                    f"cannot find how the chat template ends an assistant turn (after it comes {after[:20]!r}); "
                    f"expected one of {list(STOP_TEXTS)}{known}; see docs/model_families.md"
                )
            self.stop_text, self.role_stops = "", family.role_stops
        self.rewrites_history = self._probe_rewrites_history()
        self._assistant_prefix = self.render([_PROBE_USER], add_generation_prompt=True)

    def _ends_at_next_role(self, after: str, role_stops: tuple[str, ...]) -> bool:
        """Whether the template writes nothing after a last assistant turn and starts the next
        message with one of `role_stops` (GLM: no end-of-turn token)."""
        if not role_stops or after:
            return False
        later = self.render([_PROBE_USER, {"role": "assistant", "content": _SENTINEL}, _PROBE_USER])
        rest = later[later.index(_SENTINEL) + len(_SENTINEL) :]
        return any(rest.startswith(role) for role in role_stops)

    def strip_stop(self, text: str) -> str:
        """A sampled turn's text without the stop that ended it (the template's end-of-turn text,
        or for templates with no such token the role token that starts the next turn)."""
        for stop in (self.stop_text, *self.role_stops):
            if stop and text.endswith(stop):
                return text[: -len(stop)]
        return text

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        from mua.families import for_template
        from mua.models.chat import render_text

        msgs = for_template(
            getattr(self.tokenizer, "chat_template", None), template_messages(messages)
        )
        return render_text(self.tokenizer, msgs, self.tools or None, add_generation_prompt)

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
        """Ids that end an assistant turn: the template's end-of-turn token, the eos token and the
        other ends of a known family's turns (gpt-oss's `<|call|>`, GLM's next role tokens)."""
        from mua.families import detect_family

        ids = set(self.encode_scaffold(self.stop_text))
        family = detect_family(getattr(self.tokenizer, "chat_template", None))
        for text in (*(family.stop_texts if family is not None else ()), *self.role_stops):
            ids.update(self.encode_scaffold(text))
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
        else:  # the gateway renders in worker threads: another may just have evicted the key
            with contextlib.suppress(KeyError):
                seen.move_to_end(key)
        return list(ids)

    def followup_text(self, new_messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Text that follows an assistant turn's stop token when `new_messages` come next
        (remembered by this renderer). A template with no end-of-turn token starts it with the
        next message's role token, which the model may have sampled as its stop
        (`TranscriptBuilder.add_followup` then appends the rest)."""
        key = (json.dumps(new_messages, sort_keys=True, default=str), add_generation_prompt)
        text = self._followups.get(key)
        if text is None:
            base = [_PROBE_USER, {"role": "assistant", "content": _SENTINEL}]
            try:
                full = self.render(base + list(new_messages), add_generation_prompt)
            except Exception:
                text = self._followup_after_call(new_messages, add_generation_prompt)
                if text is None:
                    raise
            else:
                text = full[self._turn_end(full, full.index(_SENTINEL)) :]
            self._followups[key] = text
        return text

    def _turn_end(self, text: str, start: int) -> int:
        """Where the assistant turn that starts at `start` ends: after its stop text, or after
        another known end where the template ends a turn in history differently (gpt-oss ends
        its last turn with <|return|> but earlier ones with <|end|>). A template with no
        end-of-turn token ends a turn where the next role token starts (or at the end)."""
        if self.role_stops:
            found = [at for role in self.role_stops if (at := text.find(role, start)) >= 0]
            return min(found, default=len(text))
        ends = [
            (at, len(stop))
            for stop in (self.stop_text, *STOP_TEXTS)
            if (at := text.find(stop, start)) >= 0
        ]
        if not ends:
            raise RunFailure(f"the chat template's turn after {text[start:][:40]!r} has no end")
        at, length = min(ends)
        return at + length

    def _followup_after_call(
        self, new_messages: list[dict], add_generation_prompt: bool
    ) -> str | None:
        """The follow-up text after a stand-in call turn, for templates that render a tool
        result only after a call (gpt-oss names the result after the call); None when the
        replies do not start with a named tool result or the template rewrites that turn."""
        first = new_messages[0] if new_messages else {}
        if first.get("role") != "tool" or not first.get("name"):
            return None
        call = {"type": "function", "function": {"name": first["name"], "arguments": {}}}
        base = [_PROBE_USER, {"role": "assistant", "content": "", "tool_calls": [call]}]
        before = self.render(base)
        full = self.render(base + list(new_messages), add_generation_prompt)
        return full[len(before) :] if full.startswith(before) else None

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
        cut = body.rfind(self.stop_text) if self.stop_text else -1
        return body[: cut + len(self.stop_text)] if cut >= 0 else body

    def _probe_rewrites_history(self) -> bool:
        first = [_PROBE_USER, {"role": "assistant", "content": "<think>R</think>A"}]
        later = first + [{"role": "user", "content": "Again"}]
        return not self.render(later).startswith(self.render(first))


def _source_of(msg: dict) -> str:
    role = msg.get("role")
    return role if role in ("user", "tool", "env") else "prompt"
