"""One gateway session: what its requests were sampled from, recorded token by token.

A session is one agent program's run (one task sample). `Session.plan` turns each request into
prompt ids by the prefix rule (docs/gateway.md): a request repeating the record renders only its
new messages as a delta; a re-render starting with the recorded ids appends the rest; anything
else splits (a new sample; `splits` counts them). Each sample is a `TokenRecord`: prompt ids mask
0, sampled ids mask 1 with the engine's log-probs, the policy version and, for a mixture of
experts, the engine's routed experts; turn indices run over the whole session.
Not here: HTTP (`mua.gateway.server`), sampling, the `Trajectory` (`mua.gateway.program`).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mua.rollout.transcript import ChatRenderer, TokenRecord, TranscriptBuilder
from mua.text import clean_text

ROLES = ("system", "developer", "user", "assistant", "tool")


def content_text(content: Any) -> str:
    """A message's content as text (a list of parts keeps its text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text")
        )
    return str(content)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def normal_message(msg: dict) -> dict:
    """The form messages are compared and rendered in: role, text content, tool calls with
    parsed arguments, a tool result's call id and name; SDK extras (`refusal: null`, ...) go."""
    role = "system" if msg.get("role") == "developer" else str(msg.get("role"))
    out: dict[str, Any] = {"role": role, "content": clean_text(content_text(msg.get("content")))}
    if role == "assistant" and msg.get("tool_calls"):
        out["tool_calls"] = [
            {
                "id": str(call.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str((call.get("function") or {}).get("name", "")),
                    "arguments": _arguments((call.get("function") or {}).get("arguments")),
                },
            }
            for call in msg["tool_calls"]
            if isinstance(call, dict)
        ]
    if role == "tool":
        for key in ("tool_call_id", "name"):
            if msg.get(key):
                out[key] = str(msg[key])
    return out


@dataclass
class SessionLimits:
    """A session's budgets (None: unlimited): requests answered, new tokens per request,
    tokens of one sample (prompt and sampled)."""

    max_turns: int | None = None
    max_new_tokens: int = 256
    max_total_tokens: int | None = None


class BudgetSpent(Exception):
    """A request the session's budgets do not allow; `reason` is `max_turns` or `length`."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass
class Segment:
    """One sample of a session: its token stream and the messages it covers."""

    builder: TranscriptBuilder
    tools: list[dict]
    messages: list[dict] = field(default_factory=list)
    open_turn: bool = False  # the stream ends with a sampled turn
    stopped: bool = True  # that turn ended with a stop token


@dataclass
class Plan:
    """How one request's prompt is made: `ids` (the whole prompt), `pieces` to append to the
    last segment (ids, source), or `split` (a new segment from `ids`)."""

    ids: list[int]
    messages: list[dict]
    tools: list[dict]
    pieces: list[tuple[list[int], str]] = field(default_factory=list)
    new_segment: bool = False
    renderer: ChatRenderer | None = None


class Session:
    """What one program's requests were sampled from (see the module docstring)."""

    def __init__(self, key: str, tokenizer, limits: SessionLimits | None = None, **context):
        self.key = key
        self.tokenizer = tokenizer
        self.limits = limits or SessionLimits()
        self.context = context  # what the sampler needs (policy, seed key), opaque here
        self.segments: list[Segment] = []
        self.turns = 0
        self.splits = 0
        self.malformed = 0
        self.requests = 0
        self.sampled_tokens = 0
        self.dropped_tokens = 0  # sampled after a `stop` string: never shown, never trained
        self.structured_invalid = 0  # replies that missed the request's response_format
        self.tool_choice_unmet = 0  # replies without the call tool_choice asked for
        self.responses: dict[str, list[dict]] = {}  # Responses API: id -> its conversation
        self.apis: Counter = Counter()  # requests by API: chat, responses, messages
        self.budget_hit = ""  # `max_turns` / `length` once a request was refused for it
        self.failure: BaseException | None = None  # an engine failure while answering
        self.lock = asyncio.Lock()  # a session's requests are taken one at a time, in order
        self._renderers: dict[str, ChatRenderer] = {}

    def renderer(self, tools: list[dict]) -> ChatRenderer:
        key = json.dumps(tools, sort_keys=True, default=str)
        if key not in self._renderers:
            self._renderers[key] = ChatRenderer(self.tokenizer, tools)
        return self._renderers[key]

    def plan(self, messages: list[dict], tools: list[dict]) -> Plan:
        """The prompt of a request (normal-form `messages`) by the prefix rule; nothing is
        recorded until `commit`."""
        renderer = self.renderer(tools)
        seg = self.segments[-1] if self.segments else None
        if seg is not None and seg.tools == tools and seg.open_turn:
            n = len(seg.messages)
            if len(messages) > n and messages[:n] == seg.messages:
                pieces = []
                if not seg.stopped:
                    pieces.append((renderer.encode_scaffold(renderer.stop_text), "prompt"))
                for source, text in renderer.followup_chunks(messages[n:]):
                    encode = renderer.encode_scaffold if source == "prompt" else renderer.encode
                    pieces.append((encode(text), source))
                ids = list(seg.builder.token_ids) + [t for p, _ in pieces for t in p]
                return Plan(ids, messages, tools, pieces)
        ids = renderer.prompt_ids(messages)
        if seg is not None and seg.tools == tools:
            recorded = seg.builder.token_ids
            if len(ids) > len(recorded) and ids[: len(recorded)] == recorded:
                return Plan(ids, messages, tools, [(ids[len(recorded) :], "prompt")])
        return Plan(ids, messages, tools, new_segment=True, renderer=renderer)

    def check_budget(self, plan: Plan) -> int:
        """The new tokens this request may sample; `BudgetSpent` when it may sample none."""
        lim = self.limits
        if lim.max_turns is not None and self.turns >= lim.max_turns:
            self.budget_hit = "max_turns"
            raise BudgetSpent(
                "max_turns", f"this session has used its {lim.max_turns} turns (gym max_turns)"
            )
        room = lim.max_new_tokens
        if lim.max_total_tokens is not None:
            room = min(room, lim.max_total_tokens - len(plan.ids))
            if room <= 0:
                self.budget_hit = "length"
                raise BudgetSpent(
                    "length",
                    f"the conversation has {len(plan.ids)} tokens, the session's budget is "
                    f"{lim.max_total_tokens} (gym max_total_tokens)",
                )
        return room

    def commit(self, plan: Plan) -> Segment:
        """Record the plan's prompt ids (mask 0); returns the segment the turn samples into."""
        if plan.new_segment:
            if self.segments:
                self.splits += 1
            builder = TranscriptBuilder(plan.renderer)
            builder.add_prompt_ids(plan.ids)
            builder.prompt_len = len(plan.ids)
            seg = Segment(builder, plan.tools)
            self.segments.append(seg)
        else:
            seg = self.segments[-1]
            for ids, source in plan.pieces:
                seg.builder.add_prompt_ids(ids, source)
        seg.messages = list(plan.messages)
        seg.open_turn = False
        return seg

    def record_turn(
        self, seg: Segment, ids: list[int], logprobs: list[float], stopped: bool, message: dict,
        routes=None,
    ) -> None:  # fmt: skip
        """A sampled turn (mask 1, by the context's policy `version`), the assistant message
        returned for it and the engine's routed experts of the tokens it fed (None: none)."""
        seg.builder.add_sampled(
            list(ids), list(logprobs), self.turns, self.context.get("version", 0)
        )
        if routes is not None:
            seg.builder.add_routes(routes)
        seg.messages.append(message)
        seg.open_turn, seg.stopped = True, stopped
        self.turns += 1

    def record(self) -> TokenRecord:
        """The session's samples, one after another (`segment_lengths` says where they split)."""
        return TokenRecord.concat([seg.builder.record for seg in self.segments])

    def segment_lengths(self) -> list[int]:
        return [len(seg.builder.record) for seg in self.segments]

    def metrics(self) -> dict[str, float]:
        return {
            "gateway/requests": float(self.requests),
            "gateway/splits": float(self.splits),
            "gateway/malformed_calls": float(self.malformed),
            "gateway/sampled_tokens": float(self.sampled_tokens),
            "gateway/dropped_tokens": float(self.dropped_tokens),
            "gateway/structured_invalid": float(self.structured_invalid),
            "gateway/tool_choice_unmet": float(self.tool_choice_unmet),
            **{f"gateway/api_requests/{api}": float(n) for api, n in sorted(self.apis.items())},
        }
