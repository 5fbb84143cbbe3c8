"""The runner's incremental token stream equals a full rendering of the finished conversation, on
the gyms' own conversations (each gym's scripted expert, tools included) under several chat
template families.

The runner renders a conversation once (the prompt), then appends each turn's ids: sampled or
rendered assistant turns, and the ids a reply adds after them. Here the reference is the slow,
obvious path through transformers: the whole conversation rendered by `apply_chat_template` and
encoded by `tokenizer.encode`, so the runner's own encoder is checked too.
"""

from __future__ import annotations

import pytest
from test_transcript_templates import LLAMA31_TEMPLATE, QWEN25_TEMPLATE, family_tokenizer

from mua.config.rollout import RolloutConfig
from mua.gym.registry import get_gym
from mua.models import load_tokenizer
from mua.rollout.transcript import ChatRenderer, template_messages
from tests.conftest import expert_rollouts

GYMS = ["function", "guess", "intention", "persuade", "search", "tau", "telepathy", "turtle"]
TEMPLATES = {
    "tiny": lambda: load_tokenizer("tiny:qwen3-1m"),
    "qwen2.5": lambda: family_tokenizer(QWEN25_TEMPLATE),
    "llama3.1": lambda: family_tokenizer(LLAMA31_TEMPLATE, llama=True),
}


def full_render_ids(tok, messages, tools) -> list[int]:
    text = tok.apply_chat_template(template_messages(messages), tools=tools or None, tokenize=False)
    return list(tok.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("template", sorted(TEMPLATES))
@pytest.mark.parametrize("name", GYMS)
def test_expert_conversations_stream_equals_the_full_rendering(name, template):
    tok = TEMPLATES[template]()
    gym = get_gym(name)
    tasks = gym.build_tasks()["test"][:3]
    budgets = dict(max_turns=30, max_new_tokens_per_turn=512, max_total_tokens=32768)
    trajs = expert_rollouts(gym, tasks, tok, RolloutConfig(**budgets, max_concurrency=3))
    for traj in trajs:
        assert traj.termination == "done" and traj.num_turns >= 3, traj.detail
        # the stream ends with the last assistant turn's stop; the template adds its tail
        last = max(i for i, m in enumerate(traj.messages) if m["role"] == "assistant")
        renderer = ChatRenderer(tok, traj.tools)
        tail = renderer.encode(renderer.followup_text([], add_generation_prompt=False))
        full = full_render_ids(tok, traj.messages[: last + 1], traj.tools)
        assert traj.token_ids + tail == full, f"{name} task {traj.task_id}"
        assert traj.metrics["drift"] == 0.0
