"""`Trajectory`: one finished rollout, as the trainer, evaluation and `mua rollout` consume it.

A plain record holding its `TokenRecord`, with its JSON round trip (`to_json`, `from_json`, which
ignores unknown fields so older and newer files read alike). What this module does not do: build the token stream
(`mua.rollout.transcript`), run rollouts (`mua.rollout.runner`) or compute advantages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from mua.rollout.token_record import TokenRecord


@dataclass
class Trajectory:
    """One rollout of one task: what the trainer, evaluation and `mua rollout` consume.

    The per-token record (`record`, a `TokenRecord`, read through the properties) has
    `len(token_ids)` entries per list.
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
    - segments: when the per-token lists hold several samples one after another (a program gym's
      session that split, `mua.gateway`), each one's length; empty: one sample. Each sample is
      trained as its own sequence, all with the trajectory's reward.
    - attempt: how many earlier attempts of this sample the environment failed and
      `rollout.retries` ran again (0: the first conversation).
    - record.versions: per token, the policy version that sampled it (-1 off sampled tokens).
    - record.routes: a mixture of experts' routing, for the leading tokens the engine fed (top_k
      bytes per token per MoE layer; `routed_experts` in the JSON form); None otherwise.
    """

    task_id: str
    group_id: str
    sample_index: int
    record: TokenRecord = field(default_factory=TokenRecord)
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
    segments: list[int] = field(default_factory=list)  # sample lengths; empty: one sample
    attempt: int = 0  # retries before this conversation (`rollout.retries`); 0: the first

    token_ids = property(lambda self: self.record.token_ids)
    sources = property(lambda self: self.record.sources)
    loss_mask = property(lambda self: self.record.loss_mask)
    logprobs = property(lambda self: self.record.logprobs)
    turn_index = property(lambda self: self.record.turn_index)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the fields, with the record's lists at the top level."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "record"}
        return {**out, **self.record.to_dict()}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> Trajectory:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        known = {f for f in cls.__dataclass_fields__} - {"record"}
        kept = {k: v for k, v in data.items() if k in known}
        return cls(**kept, record=TokenRecord.from_dict(data))


def build_trajectory(
    task, group_id: str, sample_index: int, record: TokenRecord, turn_rewards: list[float],
    *, reward: float | None = None, parse_errors: int = 0, metrics: dict | None = None, **fields,
) -> Trajectory:  # fmt: skip
    """The one way a conversation becomes a `Trajectory` (the turn loop's and the gateway's):
    `reward` defaults to the sum of `turn_rewards`; `metrics` gets `tokens`, `assistant_tokens`
    and `parse_errors` first; `fields` are the rest of the Trajectory's (termination, messages,
    ...)."""
    counts = {
        "tokens": float(len(record)),
        "assistant_tokens": float(sum(record.loss_mask)),
        "parse_errors": float(parse_errors),
    }
    return Trajectory(
        task_id=task.task_id,
        group_id=group_id,
        sample_index=sample_index,
        record=record,
        turn_rewards=list(turn_rewards),
        reward=float(sum(turn_rewards)) if reward is None else reward,
        metrics={**counts, **(metrics or {})},
        **fields,
    )
