"""tau2's `calculate` tool: the same result or error as tau2's own for every expression whose
integers stay within the bound, and a prompt error for the rest (an exponent tower would
otherwise compute for hours inside the step). tau2's function is read from its source in the
shared data (`tau2_src`) and run here, beside ours."""

from __future__ import annotations

import ast
import random
import time
import warnings

import pytest

from gyms.tau2.arithmetic import MAX_INT_BITS, TOO_LARGE, arithmetic
from tests.gyms.tau2_checkout import missing, sources

HANDWRITTEN = [
    "(2 + 3) * 4 / 3", "1/0", "2 *", "", " ", "  12.5 + 3", "1+1 ", "()", "...", "2(3)",
    "(1)(2)", "01", "1.5.5", ".5", "3.", "-(2)**2", "2**-1", "0**-1", "(-8)**(1/3)", "7//2",
    "-7//2.0", "2**1023", "2**1024", "10**400/10**399", "2**65536//2**65535", "()*3",
    "()*10**30", "1e5", "(((1)))", "(" * 250 + "1" + ")" * 250, "+".join(["1"] * 2500),
    "9**9**2", "99999999999999999999 * 99999999999999999999", "9**9**9", "99**99**99",
]  # fmt: skip
TOKENS = ["1", "2", "9", "0", "10", "99", "1.5", ".5", "3.", "+", "-", "*", "/", "**", "//"]
TOKENS += ["(", ")", " ", "..."]


def _tau2_calculate():
    """tau2's `calculate` (retail's tools), compiled from its source as a plain function."""
    why = missing()
    if why:
        pytest.skip(why)
    path = sources()[0] / "src" / "tau2" / "domains" / "retail" / "tools.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "calculate"
    )
    found.decorator_list, found.returns = [], None
    found.args.args = [a for a in found.args.args if a.arg != "self"]
    for a in found.args.args:
        a.annotation = None
    scope: dict = {}
    exec(compile(ast.Module([found], []), str(path), "exec"), scope)  # noqa: S102
    return scope["calculate"]


def _outcome(function, expression: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        try:
            return function(expression)
        except Exception as err:  # noqa: BLE001 - the error is the outcome compared
            return type(err).__name__, str(err)


def _fuzzed(count: int) -> list[str]:
    rng = random.Random(0)
    return ["".join(rng.choices(TOKENS, k=rng.randint(1, 9))) for _ in range(count)]


@pytest.mark.timeout(120, method="thread")
def test_results_and_errors_are_tau2s_within_the_bound():
    tau2 = _tau2_calculate()
    compared = refused = 0
    for expression in HANDWRITTEN + _fuzzed(4000):
        ours = _outcome(arithmetic, expression)
        if ours == ("ValueError", TOO_LARGE):
            refused += 1  # tau2 would compute it for as long as it takes
            continue
        assert ours == _outcome(tau2, expression), expression
        compared += 1
    assert compared > 3900 and refused > 0
    assert tau2("(2 + 3) * 4 / 3") == arithmetic("(2 + 3) * 4 / 3") == "6.67"


@pytest.mark.timeout(30, method="thread")
def test_huge_numbers_are_refused_at_once():
    for expression in ("9**9**9**9", "9**9**9", "2**65537", "(2**40000)*(2**40000)", "10**99999"):
        start = time.monotonic()
        with pytest.raises(ValueError, match=f"^{TOO_LARGE}$"):
            arithmetic(expression)
        assert time.monotonic() - start < 0.5, expression
    assert MAX_INT_BITS == 65536
    assert arithmetic("2**65536 // 2**65535") == "2.0"  # at the bound: computed, as tau2 does
