"""ToolEnv dispatch: mistakes become observations; a user/judge failure passes through."""

from __future__ import annotations

import asyncio

import pytest

from mua.gym import AgentAction, ToolCall, ToolEnv, UserFailure, tool, tool_schema


class _Env(ToolEnv):
    @tool
    def add(self, a: int, b: int = 1) -> int:
        """Add two numbers.

        Args:
            a: First number.
            b: Second number.
        """
        return a + b

    @tool
    async def ask_user(self, question: str) -> str:
        """Ask the simulated user.

        Args:
            question: What to ask.
        """
        raise UserFailure("endpoint gave up")

    @tool
    def broken(self) -> str:
        """A tool with a bug."""
        raise KeyError("oops")


def _step(env, *calls):
    return asyncio.run(env.step_tools(AgentAction(text="", tool_calls=list(calls))))


def test_schema_is_derived_from_signature_and_docstring():
    schema = tool_schema(_Env.add)["function"]
    assert schema["name"] == "add" and schema["description"] == "Add two numbers."
    assert schema["parameters"]["properties"]["a"] == {
        "type": "integer",
        "description": "First number.",
    }
    assert schema["parameters"]["required"] == ["a"]


def test_mistakes_become_observations_with_error_kinds():
    res = _step(
        _Env(),
        ToolCall("add", {"a": 2}),
        ToolCall("nope", {}),
        ToolCall("add", {"a": "x"}),
        ToolCall("broken", {}),
    )
    assert res.messages[0]["content"] == "3"
    assert "unknown tool 'nope'" in res.messages[1]["content"]
    assert "bad arguments" in res.messages[2]["content"]
    assert "KeyError" in res.messages[3]["content"]
    assert res.info["errors"] == {"unknown_tool": 1, "bad_arguments": 1, "tool_exception": 1}


def test_user_failure_is_not_swallowed():
    with pytest.raises(UserFailure, match="endpoint gave up"):
        _step(_Env(), ToolCall("ask_user", {"question": "hi"}))
