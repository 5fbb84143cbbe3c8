"""What the runner hands the env for a turn the tool-call reader cannot trust: a turn cut by the
token budget runs no calls (one counted parse error), and a turn inside the reasoning a
generation prompt opened (Qwen3.5's `<think>`) is text, whatever calls it writes."""

from __future__ import annotations

import pytest

from mua.config.rollout import RolloutConfig
from mua.engines.engine_contract import GenerationResult
from mua.gym import AgentAction, GymContext, GymSpec, ResetResult, StepResult, Task
from mua.models import load_tokenizer
from mua.rollout.collect import run_rollouts_sync
from tests.unit.family_templates import TOOLS, family_tokenizer

HERMES_CALL = '<tool_call>{"name": "lookup_order", "arguments": {"order_id": "A-1"}}</tool_call>'
CUT_TURN_ERROR = (
    "your turn hit the token limit before it ended, so none of its tool calls were run; "
    "write shorter turns"
)
XML_CALL = (
    "<tool_call>\n<function=lookup_order>\n<parameter=order_id>\nA-1\n</parameter>\n"
    "</function>\n</tool_call>"
)


class RecordingEnv:
    """Ends after one step; keeps the action it was handed."""

    actions: list[AgentAction] = []

    def __init__(self, ctx):
        pass

    async def reset(self, task):
        return ResetResult(messages=[{"role": "user", "content": "Where is A-1?"}], tools=TOOLS)

    async def step(self, action: AgentAction):
        RecordingEnv.actions.append(action)
        return StepResult(messages=[{"role": "user", "content": "ok"}], reward=0.0, done=True)

    async def close(self):
        pass


class Scripted:
    """A token policy that writes `text`, ended by a stop token or cut (finish reason length)."""

    kind = "tokens"
    tool_parser = "auto"

    def __init__(self, tok, text: str, stop: bool):
        self.ids = tok.encode(text, add_special_tokens=False)
        self.stop = stop

    async def generate(self, prompt_ids, max_new_tokens, stop_token_ids, **kw):
        ids = self.ids + ([stop_token_ids[0]] if self.stop else [])
        reason = "stop" if self.stop else "length"
        return GenerationResult(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason=reason)


def _run(tok, text: str, stop: bool):
    RecordingEnv.actions = []
    gym = GymSpec(name="rec", description="", make_env=RecordingEnv, build_tasks=lambda *a: {})
    task = Task(task_id="t", gym="rec", split="train", prompt=[], payload={})
    cfg = RolloutConfig(
        max_turns=2,
        max_new_tokens_per_turn=256,
        max_total_tokens=4096,
        call_timeout_s=5.0,
        trajectory_timeout_s=30.0,
        max_concurrency=1,
    )
    (traj,) = run_rollouts_sync(
        [task],
        n=1,
        policy=Scripted(tok, text, stop),
        gym_spec=gym,
        gym_ctx=GymContext(),
        tokenizer=tok,
        rollout_cfg=cfg,
    )
    (action,) = RecordingEnv.actions
    return traj, action


@pytest.fixture(scope="module")
def tiny():
    return load_tokenizer("tiny:qwen3-1m")


def test_a_turn_cut_by_the_budget_runs_none_of_its_calls(tiny):
    traj, action = _run(tiny, HERMES_CALL + "\n<tool_call>", stop=False)
    assert (action.tool_calls, action.parse_errors) == ([], [CUT_TURN_ERROR])
    assert traj.metrics["parse_errors"] == 1.0


def test_a_cut_turn_whose_calls_all_closed_runs_none_either(tiny):
    traj, action = _run(tiny, HERMES_CALL, stop=False)
    assert (action.tool_calls, action.parse_errors) == ([], [CUT_TURN_ERROR])
    assert traj.metrics["parse_errors"] == 1.0
    assert traj.messages[-2] == {"role": "assistant", "content": HERMES_CALL}


def test_a_cut_turn_of_plain_text_is_text(tiny):
    traj, action = _run(tiny, "The order is on its w", stop=False)
    assert (action.tool_calls, action.parse_errors) == ([], [])
    assert action.text == "The order is on its w" and traj.metrics["parse_errors"] == 0.0


def test_a_stopped_turn_runs_its_calls(tiny):
    traj, action = _run(tiny, HERMES_CALL, stop=True)
    assert [(c.name, c.arguments) for c in action.tool_calls] == [
        ("lookup_order", {"order_id": "A-1"})
    ]
    assert traj.metrics["parse_errors"] == 0.0


def test_qwen3_5_calls_inside_the_reasoning_its_prompt_opened_are_not_run():
    tok = family_tokenizer("qwen3_5.jinja")
    text = "I could call\n" + XML_CALL + "\nbut first"
    traj, action = _run(tok, text, stop=True)
    assert (action.tool_calls, action.parse_errors, action.text) == ([], [], text)
    assert traj.metrics["parse_errors"] == 0.0
    _, after = _run(tok, "Need it.\n</think>\n\n" + XML_CALL, stop=True)
    assert [(c.name, c.arguments) for c in after.tool_calls] == [
        ("lookup_order", {"order_id": "A-1"})
    ]
    assert after.text == "Need it.\n</think>"
