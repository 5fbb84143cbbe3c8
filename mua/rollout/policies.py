"""Who acts in a rollout: a token-level policy (a RolloutEngine) or a message-level one.

`EnginePolicy` samples token ids from an engine; the runner keeps them verbatim with their
log-probs and parses tool calls from their text. `MessagePolicy` returns whole assistant messages
(a gym's scripted expert, or an agent behind an OpenAI-compatible API), cleaned of unencodable
text (`mua.text`); the runner renders them through the chat template with loss mask 1 on the
assistant tokens, which is how SFT data is made.
Neither class knows about envs, budgets or transcripts: the runner does.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from mua.engines.engine_contract import (
    GenerationRequest,
    GenerationResult,
    RolloutEngine,
    SamplingParams,
)
from mua.families.tool_calls import ParserName, parse_action, read_native_calls
from mua.gym.api import AgentAction, GymContext, GymSpec, Task, ToolCall
from mua.text import clean_message

PolicyKind = Literal["tokens", "messages"]


class EnginePolicy:
    """Sample assistant turns from a `RolloutEngine` with fixed sampling settings."""

    kind: PolicyKind = "tokens"

    def __init__(
        self,
        engine: RolloutEngine,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        tool_parser: ParserName = "auto",
        seed: int | None = None,
    ):
        self.engine, self.tool_parser, self.seed = engine, tool_parser, seed
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self._requests = 0

    @classmethod
    def from_config(
        cls, engine: RolloutEngine, rollout_cfg, tool_parser: ParserName = "auto"
    ) -> EnginePolicy:
        return cls(
            engine,
            temperature=rollout_cfg.temperature,
            top_p=rollout_cfg.top_p,
            top_k=rollout_cfg.top_k,
            tool_parser=tool_parser,
        )

    def request_seed(self, seed_key, turn: int) -> int | None:
        """The sampling seed of a request: `seed + request count` when the policy has a seed
        (subclasses derive it from the conversation's `mua.rollout.collect.SeedKey` and turn)."""
        self._requests += 1
        return None if self.seed is None else self.seed + self._requests

    async def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        stop_token_ids: list[int],
        route_key: str = "",
        keep_prefix: bool = True,
        seed_key=None,
        turn: int = 0,
    ) -> GenerationResult:
        """One assistant turn; `keep_prefix=False` says no later turn continues this one;
        `seed_key` and `turn` are what `request_seed` seeds it by."""
        sampling = SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=max_new_tokens,
            stop_token_ids=list(stop_token_ids),
            seed=self.request_seed(seed_key, turn),
        )
        request = GenerationRequest(
            prompt_ids=list(prompt_ids),
            sampling=sampling,
            route_key=route_key,
            keep_prefix=keep_prefix,
        )
        return await self.engine.generate(request)


class SeededPolicy(EnginePolicy):
    """An EnginePolicy whose every request is seeded by the conversation, never by arrival
    order: (seed, the `mua.rollout.collect.SeedKey`'s training step when it has one, its position,
    sample and retry attempt, the turn). Training keys positions by the task's global position,
    so 1 and N ranks draw the same rollouts; evaluation by the task id, so the order of tasks
    does not matter. `step` is the training step being rolled out (`start_step`)."""

    def __init__(self, engine, *, seed: int = 0, **sampling):
        super().__init__(engine, **sampling)
        self.base_seed, self.step = seed, 0

    @classmethod
    def for_rollout(cls, engine, rollout_cfg, tool_parser, *, seed: int, temperature=None):
        """Sampling settings from the recipe's `rollout` section (`temperature` overrides)."""
        temp = rollout_cfg.temperature if temperature is None else temperature
        return cls(
            engine, seed=seed, temperature=temp, top_p=rollout_cfg.top_p,
            top_k=rollout_cfg.top_k, tool_parser=tool_parser,
        )  # fmt: skip

    def start_step(self, step: int) -> None:
        self.step = step

    def request_seed(self, seed_key, turn: int) -> int:
        key = seed_key
        step = "" if key.step is None else f"{key.step}/"
        text = f"{self.base_seed}/{step}{key.position}/{key.sample}/{turn}{key.retry_tag}"
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & (2**62 - 1)


MessageActor = Callable[..., Awaitable[dict]]


class MessagePolicy:
    """Wrap `act(messages, task)` or `act(messages, task, tools)` returning an assistant message;
    an actor with a `request` parameter also gets the env's request extras (`ResetResult.request`)."""

    kind: PolicyKind = "messages"

    def __init__(self, act: MessageActor, tool_parser: ParserName = "auto", name: str = "messages"):
        self._act = act
        self.tool_parser = tool_parser
        self.name = name
        try:
            parameters = inspect.signature(act).parameters
        except (TypeError, ValueError):
            parameters = {}
        self._takes_tools = len(parameters) >= 3
        self._takes_request = "request" in parameters

    async def act(
        self, messages: list[dict], task: Task, tools: list[dict], request: dict | None = None
    ) -> dict:
        history = [dict(m) for m in messages]
        extra = {"request": request} if request and self._takes_request else {}
        msg = await (
            self._act(history, task, tools, **extra)
            if self._takes_tools
            else self._act(history, task)
        )
        if not isinstance(msg, dict):
            raise TypeError(
                f"{self.name} policy returned {type(msg).__name__}, expected a message dict"
            )
        msg = clean_message(msg)  # unencodable text never reaches the tokenizer
        out: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
        # markup the policy's own reader could not use, then native calls we cannot read
        errors = list(msg.get("parse_errors") or [])
        if msg.get("tool_calls"):
            calls, unreadable = read_native_calls(msg["tool_calls"])
            errors += unreadable
            if calls:
                out["tool_calls"] = calls
        if errors:
            out["parse_errors"] = errors
        return out

    def to_action(self, message: dict) -> AgentAction:
        """Structured tool calls (as `act` normalised them) are taken as they are; otherwise the
        text is parsed with the policy's tool parser."""
        calls = message.get("tool_calls") or []
        if not calls and not message.get("parse_errors"):
            return parse_action(message.get("content") or "", self.tool_parser)
        tool_calls = [
            ToolCall(
                name=call["function"]["name"],
                arguments=call["function"]["arguments"],
                id=call.get("id") or f"call_{i}",
            )
            for i, call in enumerate(calls)
        ]
        content = message.get("content") or ""
        errors = list(message.get("parse_errors") or [])
        return AgentAction(text=content, tool_calls=tool_calls, parse_errors=errors, raw=content)


def expert_policy(gym_spec: GymSpec, ctx: GymContext) -> MessagePolicy:
    """The gym's scripted expert as a policy (for SFT data, tests and eval ceilings)."""
    from mua.errors import UsageError

    if gym_spec.expert is None:
        raise UsageError(f"gym {gym_spec.name!r} has no scripted expert; use policy=model")
    return MessagePolicy(gym_spec.expert(ctx), tool_parser="auto", name=f"{gym_spec.name} expert")
