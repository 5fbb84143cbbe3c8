"""Token-in/token-out transcripts of multi-turn rollouts: `TranscriptBuilder`.

`TranscriptBuilder` grows one trajectory's token stream: sampled ids are appended verbatim (never
re-encoded) with their log-probs and loss mask 1, everything else with mask 0, each token labelled
with its source. For a template with no end-of-turn token (GLM) the sampled role token is kept.
Also importable from here: `ChatRenderer`, `template_messages` (`mua.rollout.chat_renderer`), the
drift check (`mua.rollout.transcript_drift`) and `Trajectory` (`mua.rollout.trajectory`).
Not here: generation, tool-call parsing, env calls, budgets (the runner), advantages (the trainer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mua.rollout.chat_renderer import STOP_TEXTS, ChatRenderer, template_messages
from mua.rollout.token_record import TokenRecord
from mua.rollout.trajectory import Trajectory
from mua.rollout.transcript_drift import (
    check_drift,
    drift_diff,
    full_render_difference,
    per_turn_samples,
    reference_ids,
)

__all__ = [
    "SOURCES",
    "STOP_TEXTS",
    "ChatRenderer",
    "TokenRecord",
    "Trajectory",
    "TranscriptBuilder",
    "check_drift",
    "drift_diff",
    "full_render_difference",
    "per_turn_samples",
    "reference_ids",
    "template_messages",
]

SOURCES = ("prompt", "assistant", "user", "tool", "env")


@dataclass
class TranscriptBuilder:
    """Grows one trajectory's token stream into its `TokenRecord` (read through the properties)."""

    renderer: ChatRenderer
    record: TokenRecord = field(default_factory=TokenRecord)
    turn_starts: list[int] = field(default_factory=list)
    prompt_len: int = 0
    retokenized_turns: int = 0

    token_ids = property(lambda self: self.record.token_ids)
    sources = property(lambda self: self.record.sources)
    loss_mask = property(lambda self: self.record.loss_mask)
    logprobs = property(lambda self: self.record.logprobs)
    turn_index = property(lambda self: self.record.turn_index)
    routes = property(lambda self: self.record.routes)  # MoE: the engine's routed experts

    def add_prompt(self, messages: list[dict]) -> None:
        self.record.append(self.renderer.prompt_ids(messages), "prompt", 0)
        self.prompt_len = len(self.token_ids)

    def add_prompt_ids(self, ids: list[int], source: str = "prompt") -> None:
        """Ids rendered elsewhere (a template's render of a longer conversation), not sampled (mask 0)."""
        self.record.append(list(ids), source, 0)

    def add_sampled(self, ids: list[int], logprobs: list[float], turn: int, version=0) -> None:
        """Sampled ids, verbatim, trained on (mask 1), by policy `version`."""
        self.turn_starts.append(len(self.token_ids))
        self.record.append(list(ids), "assistant", 1, logprobs, turn, version)

    def add_assistant_message(self, message: dict, turn: int, version: int = 0) -> None:
        """A message-level policy's turn rendered through the template (mask 1, log-probs 0)."""
        self.turn_starts.append(len(self.token_ids))
        text = self.renderer.assistant_text(message)
        self.record.append(self.renderer.encode(text), "assistant", 1, None, turn, version)

    def close_truncated_turn(self) -> None:
        """End a turn cut by the token budget with the template's stop (mask 0: not sampled)."""
        self.record.append(self.renderer.encode_scaffold(self.renderer.stop_text), "prompt", 0)

    def add_followup(self, messages: list[dict], add_generation_prompt: bool = True) -> None:
        renderer = self.renderer
        chunks = renderer.followup_chunks(messages, add_generation_prompt)
        if renderer.role_stops and chunks:
            chunks = self._after_sampled_role(chunks)
        for source, text in chunks:
            # a "prompt" piece after the messages is the template's generation prompt
            encode = renderer.encode_scaffold if source == "prompt" else renderer.encode
            self.record.append(encode(text), source, 0)

    def _after_sampled_role(self, chunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """For a template with no end-of-turn token: the role token the model sampled to end its
        turn is the start of the follow-up, so the follow-up goes on after it. A sampled stop the
        template would not write here (`<|user|>` before a tool result, the eos token) is
        replaced by the template's own role token (it is dropped from the stream)."""
        renderer = self.renderer
        if not self.loss_mask or self.loss_mask[-1] != 1:
            return chunks
        last = self.token_ids[-1]
        if last not in set(renderer.stop_token_ids()):
            return chunks
        source, text = chunks[0]
        role = next((r for r in renderer.role_stops if text.startswith(r)), None)
        if role is not None and renderer.encode_scaffold(role) == [last]:
            return [(source, text[len(role) :]), *chunks[1:]]
        self.record.truncate(len(self.record) - 1)
        return chunks

    def truncate(self, length: int) -> None:
        """Forget every token from position `length` on (an env cut the turn short there)."""
        self.record.truncate(length)
        self.turn_starts = [s for s in self.turn_starts if s < length]

    def add_routes(self, routes) -> None:
        """The engine's routed experts of the stream's first tokens (`TokenRecord.add_routes`)."""
        self.record.add_routes(routes)

    def add_raw(self, text: str) -> None:
        """Raw continuation text appended to the assistant's tokens (interventions, mask 0)."""
        self.record.append(self.renderer.encode(text), "env", 0)

    def ended_with_stop(self) -> bool:
        return bool(self.token_ids) and self.token_ids[-1] in set(self.renderer.stop_token_ids())
