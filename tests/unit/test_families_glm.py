"""GLM-4.5/4.6's template has no end-of-turn token: a turn ends when the model writes the next
role token (`<|user|>`, `<|observation|>`). The renderer makes those tokens stops, the token the
model sampled starts the next turn's text (never written twice), a stop the template would not
write there is replaced by the template's own role token, and the token stream stays the
template's render of the conversation; also through the runner and the hf engine with a tiny
model forced to end its turns on role tokens."""

from __future__ import annotations

import pytest

from mua.errors import RunFailure
from mua.gym.api import ResetResult, StepResult
from mua.rollout.transcript import ChatRenderer, TranscriptBuilder, check_drift
from tests.unit.family_templates import TOOLS, family_tokenizer

USER = {"role": "user", "content": "Where is my order A-1042?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "c0",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": {"order_id": "A-1042"}},
        }
    ],
}
RESULT = {
    "role": "tool",
    "tool_call_id": "c0",
    "name": "lookup_order",
    "content": '{"status": "shipped"}',
}
ANSWER = {"role": "assistant", "content": "It has shipped."}
THANKS = {"role": "user", "content": "Thanks!"}


def _renderer():
    return ChatRenderer(family_tokenizer("glm4_6.jinja"), TOOLS)


def _sample(builder, message: dict, stop: str, turn: int) -> None:
    ids = builder.renderer.encode(builder.renderer.assistant_text(message) + stop)
    builder.add_sampled(ids, [0.0] * len(ids), turn)


def _render_ids(renderer, messages, gen=True) -> list[int]:
    return renderer.encode(renderer.render(messages, add_generation_prompt=gen))


def test_role_tokens_are_stops_and_are_stripped_from_the_turn_text():
    renderer = _renderer()
    tok = renderer.tokenizer
    assert renderer.stop_text == ""
    assert renderer.role_stops == ("<|user|>", "<|observation|>")
    stops = set(renderer.stop_token_ids())
    for text in ("<|user|>", "<|observation|>", "<|endoftext|>"):
        assert tok.convert_tokens_to_ids(text) in stops
    assert tok.convert_tokens_to_ids("<|assistant|>") not in stops
    assert renderer.strip_stop("done<|observation|>") == "done"
    assert renderer.strip_stop("done<|user|>") == "done"
    assert renderer.strip_stop("done") == "done"
    # the turn's own text carries no stop; what follows it starts with the next role token
    assert not renderer.assistant_text(CALL).endswith(("<|user|>", "<|observation|>"))
    assert renderer.followup_text([RESULT]).startswith("<|observation|>")
    assert renderer.followup_text([THANKS]).startswith("<|user|>")
    assert renderer.followup_text([], add_generation_prompt=False) == ""


def test_the_sampled_role_token_starts_the_next_turn_once():
    renderer = _renderer()
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    _sample(builder, CALL, "<|observation|>", 0)
    builder.add_followup([RESULT])
    _sample(builder, ANSWER, "<|user|>", 1)
    builder.add_followup([THANKS])
    messages = [USER, CALL, RESULT, ANSWER, THANKS]
    assert builder.token_ids == _render_ids(renderer, messages)
    observation = renderer.tokenizer.convert_tokens_to_ids("<|observation|>")
    at = builder.token_ids.index(observation)
    assert (builder.loss_mask[at], builder.sources[at]) == (1, "assistant")  # sampled, trained
    assert builder.token_ids.count(observation) == 1
    assert check_drift(builder, messages, ends_with_prompt=True) is None


def test_a_stop_the_template_would_not_write_there_is_replaced():
    renderer = _renderer()
    tok = renderer.tokenizer
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    _sample(builder, CALL, "<|user|>", 0)  # a call ended with <|user|>, then a tool result
    builder.add_followup([RESULT])
    _sample(builder, ANSWER, "<|endoftext|>", 1)  # eos, then the user speaks again
    builder.add_followup([THANKS])
    messages = [USER, CALL, RESULT, ANSWER, THANKS]
    assert builder.token_ids == _render_ids(renderer, messages)
    assert tok.convert_tokens_to_ids("<|endoftext|>") not in builder.token_ids
    assert len(builder.turn_starts) == 2
    assert check_drift(builder, messages, ends_with_prompt=True) is None


def test_a_last_turn_ended_by_its_role_token_is_not_drift():
    renderer = _renderer()
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    _sample(builder, ANSWER, "<|user|>", 0)
    assert builder.ended_with_stop()
    assert check_drift(builder, [USER, ANSWER], ends_with_prompt=False) is None
    assert builder.token_ids[:-1] == _render_ids(renderer, [USER, ANSWER], gen=False)


def test_a_template_with_no_turn_end_and_no_known_family_is_refused_in_one_line():
    tok = family_tokenizer("glm4_6.jinja")
    tok.chat_template = (
        "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    with pytest.raises(
        RunFailure, match="cannot find how the chat template ends an assistant turn"
    ):
        ChatRenderer(tok)


class _CallThenAnswer:
    """An env whose first step answers the model's call with a tool result and whose second
    ends the episode."""

    def __init__(self, ctx):
        self.turn = 0

    async def reset(self, task):
        return ResetResult(messages=[dict(m) for m in task.prompt])

    async def step(self, action):
        self.turn += 1
        if self.turn == 1:
            assert [c.name for c in action.tool_calls] == ["lookup_order"], action
            reply = [{"role": "tool", "name": "lookup_order", "content": RESULT["content"]}]
            return StepResult(messages=reply, reward=0.0, done=False)
        return StepResult(messages=[], reward=1.0, done=True)

    async def close(self):
        pass


def _forced(model, ids: list[int]):
    """Make `model` sample exactly `ids`, one per forward pass (its logits are overwritten)."""
    import torch

    script = iter(ids)

    def force(_module, _inputs, logits):
        out = torch.full_like(logits, -1e4)
        out[..., next(script)] = 0.0
        return out

    return model.get_output_embeddings().register_forward_hook(force)


def test_a_tiny_model_rollout_ends_its_turns_on_role_tokens():
    """The hf engine with a tiny model (its vocabulary grown to GLM's tokens), forced to write a
    call ended by `<|observation|>`, then an answer ended by `<|user|>`: the runner stops on the
    role tokens, keeps them as sampled, appends the tool result after the first, and the stream
    is the template's render of the conversation."""
    from mua.config.rollout import RolloutConfig
    from mua.engines.hf.hf_engine import HFEngine
    from mua.gym import GymContext, GymSpec, Task
    from mua.models import load_model
    from mua.rollout.collect import run_rollouts_sync
    from mua.rollout.policies import EnginePolicy

    renderer = _renderer()
    tok = renderer.tokenizer
    plain = ChatRenderer(tok)  # the task offers no tools
    turns = [
        plain.encode(plain.assistant_text(CALL) + "<|observation|>"),
        plain.encode(plain.assistant_text(ANSWER) + "<|user|>"),
    ]
    model = load_model("tiny:qwen3-1m", seed=0)
    model.resize_token_embeddings(len(tok))
    hook = _forced(model, [i for turn in turns for i in turn])
    gym = GymSpec(name="glm_fake", description="", make_env=_CallThenAnswer, build_tasks=dict)
    task = Task(task_id="t0", gym="glm_fake", split="test", prompt=[USER], payload={})
    try:
        (traj,) = run_rollouts_sync(
            [task],
            n=1,
            policy=EnginePolicy(HFEngine(model), temperature=1.0, tool_parser="auto"),
            gym_spec=gym,
            gym_ctx=GymContext(),
            tokenizer=tok,
            rollout_cfg=RolloutConfig(
                max_turns=4, max_new_tokens_per_turn=64, max_total_tokens=1024
            ),
        )
    finally:
        hook.remove()
    assert traj.termination == "done" and traj.reward == 1.0, traj.detail
    assert traj.metrics["parse_errors"] == 0 and traj.metrics["drift"] == 0.0
    sampled = [t for t, m in zip(traj.token_ids, traj.loss_mask, strict=True) if m]
    assert sampled == turns[0] + turns[1]  # both role tokens sampled and kept, once each
    observation = tok.convert_tokens_to_ids("<|observation|>")
    assert traj.token_ids.count(observation) == 1
    rendered = plain.encode(plain.render(traj.messages))
    assert traj.token_ids[:-1] == rendered  # the last <|user|> opens a turn that never came


def test_a_turn_spelled_with_other_tokens_is_retokenized_not_drift():
    renderer = _renderer()
    builder = TranscriptBuilder(renderer)
    builder.add_prompt([USER])
    text = renderer.assistant_text(ANSWER)
    ids = [i for ch in text for i in renderer.encode(ch)] + renderer.encode("<|user|>")
    assert ids[:-1] != renderer.encode(text)  # the same text, other tokens
    builder.add_sampled(ids, [0.0] * len(ids), 0)
    builder.add_followup([THANKS])
    assert check_drift(builder, [USER, ANSWER, THANKS], ends_with_prompt=True) is None
    assert builder.retokenized_turns == 1


def test_mua_serve_chat_replies_end_at_glm_role_tokens():
    """`mua serve`'s chat route (a local model as the LLM user) stops where the turn loop does:
    at GLM's next role tokens, not only at eos and `<|im_end|>`."""
    from mua.serve.chat_route import ChatRoute

    tok = family_tokenizer("glm4_6.jinja")
    route = ChatRoute()
    route.tokenizer = tok
    stops = route._stop_ids(TOOLS)
    for role in ("<|user|>", "<|observation|>"):
        assert tok.convert_tokens_to_ids(role) in stops, role
    assert stops == ChatRenderer(tok, TOOLS).stop_token_ids()
