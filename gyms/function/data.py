"""Function gym tasks: generated rules (built-in) and UserRL's 538 public rules.

Built-in rules are random expression trees over a, b, c, d with + - * / and squaring, drawn
from a seeded RNG; a rule is kept only when its test case (four integers 1..9) gives a finite
value of moderate size. The split is fixed by index: the first 48 train, the last 24 test.
Public rules keep their own test case and expected value; with UserRL's parquets at or under
the source, its published split (460 train / 78 test), else 15% go to test by a stable hash.
"""

from __future__ import annotations

import random

from gyms.common.tasks import by_split, make_task, public_splits, system_prompt
from gyms.function.rule import RuleError, evaluate

GYM_NAME = "function"
CHOICES = ("action", "search", "answer")
NUM_TRAIN, NUM_TEST = 48, 24
DESCRIPTION = (
    "You are playing a rule-guessing game. The environment hides a function f(a, b, c, d) built "
    "from addition, subtraction, multiplication, division and squaring. Find the rule by trying "
    "inputs, then compute it on the test case."
)
RULES = (
    "- `action`: give four integers separated by spaces (a b c d); the environment returns f(a, b, c, d).\n"
    "- `search`: content `test` returns the test case.\n"
    "- `answer`: one number, f applied to the test case. A correct answer (within 1e-6) wins; a wrong "
    "one can be retried.\n"
    "Vary one input at a time to isolate its effect."
)
FIRST_USER = "My function is fixed. Start probing it whenever you are ready."


def _random_expr(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        leaf = rng.choice("abcd")
        return f"{leaf} ** 2" if rng.random() < 0.15 else leaf
    op = rng.choice(["+", "-", "*", "+", "-", "*", "/"])
    left, right = _random_expr(rng, depth - 1), _random_expr(rng, depth - 1)
    return f"({left} {op} {right})" if depth > 1 and rng.random() < 0.5 else f"{left} {op} {right}"


def generate_rules(count: int, seed: int) -> list[dict]:
    rng = random.Random(f"function-rules-{seed}")
    out, seen = [], set()
    while len(out) < count:
        rule = _random_expr(rng, depth=2)
        used = {v for v in "abcd" if v in rule}
        if len(used) < 3 or rule in seen:
            continue
        case = [rng.randint(1, 9) for _ in range(4)]
        try:
            value = evaluate(rule, case)
        except RuleError:
            continue
        if abs(value) > 1e5:
            continue
        seen.add(rule)
        out.append(
            {"id": f"gen-{seed}-{len(out):03d}", "rule": rule, "test_case": case, "expected": value}
        )
    return out


def task_from_rule(row: dict, split: str, source: str):
    payload = {"rule": row["rule"], "test_case": row["test_case"], "expected": row["expected"]}
    system = system_prompt(DESCRIPTION, CHOICES, RULES)
    return make_task(GYM_NAME, f"function-{row['id']}", split, system, FIRST_USER, payload, source)


def build_tasks(source=None, seed: int = 0, options: dict | None = None) -> dict:
    if source is None:
        rows = generate_rules(NUM_TRAIN + NUM_TEST, seed)
        tasks = [
            task_from_rule(r, "train" if i < NUM_TRAIN else "test", "builtin")
            for i, r in enumerate(rows)
        ]
        return by_split(tasks)
    from data_prep.userrl import read_function_rules

    pairs = public_splits(source, GYM_NAME, read_function_rules(source), "id", 0.15)
    return by_split([task_from_rule(r, split, "userrl") for r, split in pairs])
