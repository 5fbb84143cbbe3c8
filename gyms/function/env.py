"""Function gym environment: probe a hidden rule f(a, b, c, d), fetch the test case, answer.

`action` takes four integers and returns f at them (or says why it is undefined there); the
test case itself is refused with reward 0, as UserRL does, so the answer cannot be read off a
probe; `search` with content `test` returns the test case; `answer` pays 1 and ends when within 1e-6
of the truth, else 0 and the agent may retry. No user and no LLM: fully deterministic.
"""

from __future__ import annotations

import re

from gyms.common.interact import InteractEnv, Outcome
from gyms.function.reward import answer_correct, parse_answer
from gyms.function.rule import RuleError, evaluate, parse_rule

MAX_ABS_INPUT = 10_000
TEST_CASE_REFUSAL = "This is the test case and I cannot provide you with the calculation feedback."
_INTEGER = re.compile(r"^[-+]?\d+$")


class FunctionEnv(InteractEnv):
    gym_name = "function"
    choices = ("action", "search", "answer")
    default_weights = {"answer": 1.0}

    def needs_llm(self) -> bool:
        return False

    def setup(self, task) -> None:
        self.rule = parse_rule(task.payload["rule"])
        self.test_case = [float(x) for x in task.payload["test_case"]]
        self.expected = float(task.payload["expected"])

    async def on_action(self, content: str) -> Outcome:
        parts = content.replace(",", " ").split()
        if len(parts) != 4 or not all(_INTEGER.match(p) for p in parts):
            return Outcome(
                f"Error: `action` needs exactly four integers separated by spaces, got {content[:80]!r}."
            )
        values = [int(p) for p in parts]
        if any(abs(v) > MAX_ABS_INPUT for v in values):
            return Outcome(f"Error: inputs must lie between -{MAX_ABS_INPUT} and {MAX_ABS_INPUT}.")
        if [float(v) for v in values] == self.test_case:
            return Outcome(TEST_CASE_REFUSAL)
        try:
            result = evaluate(self.rule, values)
        except RuleError as e:
            return Outcome(f"f({', '.join(parts)}) is {e}.")
        return Outcome(
            f"f({', '.join(map(str, values))}) = {result:g}"
            if abs(result) < 1e15
            else f"f(...) = {result!r}"
        )

    async def on_search(self, content: str) -> Outcome:
        if content.strip().lower().strip(".'\"") != "test":
            return Outcome(
                "Error: `search` only accepts the content `test` (it returns the test case)."
            )
        a, b, c, d = (f"{x:g}" for x in self.test_case)
        return Outcome(f"Test case: a = {a}, b = {b}, c = {c}, d = {d}. Answer with f(a, b, c, d).")

    async def on_answer(self, content: str) -> Outcome:
        value = parse_answer(content)
        if value is None:
            return Outcome("Error: `answer` needs one number (e.g. `42` or `7/3`).")
        if answer_correct(value, self.expected):
            return Outcome(
                "Correct! That is the value of the function on the test case.",
                {"answer": 1.0},
                done=True,
            )
        return Outcome("Incorrect. You may keep probing and answer again.", {"answer": 0.0})
