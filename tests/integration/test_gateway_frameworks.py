"""The agent frameworks people write agents with, unchanged, against the gateway: the OpenAI
Agents SDK (its default Responses model class, streamed and not, and its chat-completions model
class), LangGraph with `ChatOpenAI`, pydantic-ai and the `anthropic` SDK (Messages API), each
from the pinned side environment (`make agents-side`).

Against a scripted engine, each plays the guess game with a tool and with structured output:
the program finds the number only when the gateway served its route and fields (tool calls
back as the framework's own shapes, tool results and structured answers read back in), the
session is one sample fed its own record, and only the sampled tokens are trained. Then one
`mua train` run (torchrun, CPU, the tiny model) trains every framework's program as its own
program gym for two steps: the step trains exactly the tokens the engine sampled for them."""

from __future__ import annotations

import json

import pytest

from mua.models import load_tokenizer
from tests.integration.frameworks_helpers import (
    AGENTS_PYTHON,
    FRAMEWORKS,
    TARGET,
    call,
    needs_agents_side,
    play,
)
from tests.integration.grpo_helpers import write_guess_tasks
from tests.integration.train_helpers import (
    check_gateway_tokens_trained,
    metric_history,
    program_grpo_recipe,
    train_recipe,
)

pytestmark = [pytest.mark.integration, needs_agents_side()]

GUESS = call("guess", number=TARGET)
ANSWER = json.dumps({"number": TARGET})
CASES = {
    # name: (script, engine replies, env, the API it must use)
    "agents_sdk_tool": ("openai_agents_sdk.py", [GUESS, "Found it."], {}, "responses"),
    "agents_sdk_tool_streamed": (
        "openai_agents_sdk.py", [GUESS, "Found it."], {"AGENT_STREAM": "1"}, "responses"
    ),
    "agents_sdk_structured": (
        "openai_agents_sdk.py", [ANSWER], {"AGENT_MODE": "structured"}, "responses"
    ),
    "agents_sdk_chat_tool": (
        "openai_agents_sdk.py", [GUESS, "Found it."], {"AGENT_API": "chat"}, "chat"
    ),
    "agents_sdk_chat_structured": (
        "openai_agents_sdk.py", [ANSWER], {"AGENT_API": "chat", "AGENT_MODE": "structured"}, "chat"
    ),
    "langgraph_tool": ("langgraph_agent.py", [GUESS, "Found it."], {}, "chat"),
    "langgraph_structured": (
        "langgraph_agent.py", ["It is 5.", ANSWER], {"AGENT_MODE": "structured"}, "chat"
    ),
    "pydantic_ai_tool": ("pydantic_ai_agent.py", [GUESS, "Found it."], {}, "responses"),
    "pydantic_ai_structured": (
        "pydantic_ai_agent.py",
        [call("final_result", number=TARGET)],
        {"AGENT_MODE": "structured"},
        "responses",
    ),
    "pydantic_ai_chat_tool": (
        "pydantic_ai_agent.py", [GUESS, "Found it."], {"AGENT_API": "chat"}, "chat"
    ),
    "pydantic_ai_chat_structured": (
        "pydantic_ai_agent.py",
        [call("final_result", number=TARGET)],
        {"AGENT_MODE": "structured", "AGENT_API": "chat"},
        "chat",
    ),
    "anthropic_tool": (
        "anthropic_agent.py", ["Let me try. " + call("guess", number=3), GUESS], {}, "messages"
    ),
    "anthropic_structured": (
        "anthropic_agent.py", [ANSWER], {"AGENT_MODE": "structured"}, "messages"
    ),
    "anthropic_tool_streamed": (
        "anthropic_agent.py", [call("guess", number=3), GUESS], {"AGENT_STREAM": "1"}, "messages"
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny:qwen2-1m")


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_framework_agent_plays_through_the_gateway(tokenizer, name):
    script, replies, env, api = CASES[name]
    played = play(tokenizer, script, replies, **env)
    assert played.returncode == 0, played.stderr
    assert played.reward == 1.0, played.stderr
    session = played.session
    assert dict(session.apis) == {api: len(replies)}
    # LangGraph asks for the structured answer in a call of its own, without the agent's
    # prompt: it does not continue the record, so it is a new sample
    assert session.splits == (1 if name == "langgraph_structured" else 0)
    metrics = session.metrics()
    assert metrics["gateway/malformed_calls"] == 0
    assert metrics["gateway/structured_invalid"] == 0
    assert metrics["gateway/tool_choice_unmet"] == 0
    rec = session.record()
    trained = [t for t, m in zip(rec.token_ids, rec.loss_mask, strict=True) if m]
    assert trained == [t for ids in played.engine.sampled for t in ids]
    if session.splits == 0:  # each request was fed the record so far, then its new messages
        for earlier, later in zip(played.engine.prompts, played.engine.prompts[1:]):
            assert later[: len(earlier)] == earlier


@pytest.mark.parametrize(
    "script, env, reply, counter",
    [
        ("openai_agents_sdk.py", {"AGENT_MODE": "structured"}, "five", "structured_invalid"),
        ("anthropic_agent.py", {"AGENT_MODE": "structured"}, "five", "structured_invalid"),
        ("pydantic_ai_agent.py", {"AGENT_MODE": "structured"}, "five", "tool_choice_unmet"),
        (
            "pydantic_ai_agent.py",
            {"AGENT_MODE": "structured", "AGENT_API": "chat"},
            "five",
            "tool_choice_unmet",
        ),
    ],
)
def test_a_reply_that_misses_the_format_is_returned_and_counted(
    tokenizer, script, env, reply, counter
):
    played = play(tokenizer, script, [reply], **env)
    assert played.returncode == 0, played.stderr
    assert played.reward == 0.0  # the framework got the reply as written and gave up on it
    assert played.session.metrics()[f"gateway/{counter}"] == 1


def test_every_framework_trains_through_mua_train(tmp_path):
    python = str(AGENTS_PYTHON)
    programs = {
        "agents_sdk": {},
        "agents_sdk_chat": {"AGENT_API": "chat"},
        "langgraph": {},
        "pydantic_ai": {"AGENT_API": "chat"},
        "anthropic": {},
    }
    scripts = {
        "agents_sdk": "openai_agents_sdk.py",
        "agents_sdk_chat": "openai_agents_sdk.py",
        "langgraph": "langgraph_agent.py",
        "pydantic_ai": "pydantic_ai_agent.py",
        "anthropic": "anthropic_agent.py",
    }
    gyms = []
    for label, env in programs.items():
        tasks, _ = write_guess_tasks(tmp_path / label, num_train=4, num_test=0)
        program = {
            "command": f"{python} {FRAMEWORKS / scripts[label]}",
            "timeout_s": 120,
            "env": {"AGENT_MODE": "both", **env},
        }
        gyms.append(
            {"name": "guess", "label": label, "train_files": [str(tasks)], "program": program}
        )
    # data.seed 3 draws every entry in the first step (the mix draws entries by weight)
    data = {"tasks_per_step": len(gyms), "seed": 3}
    budgets = {"max_new_tokens_per_turn": 12, "max_total_tokens": 2048, "max_turns": 8}
    run = train_recipe(tmp_path, program_grpo_recipe(tmp_path, gyms, data, budgets), "frameworks")
    for api in ("responses", "chat", "messages"):  # every API was called
        assert sum(metric_history(run, f"gateway/api_requests/{api}")) > 0, api
    check_gateway_tokens_trained(run)
    assert max(metric_history(run, "logp_diff_engine_vs_trainer")) < 1e-4
    assert (
        not metric_history(run, "reward/masked") or max(metric_history(run, "reward/masked")) == 0
    )
    for label in programs:  # every framework's program ran
        assert sum(metric_history(run, f"train/{label}/share")) > 0, label
