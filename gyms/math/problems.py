"""Built-in math problems: seeded arithmetic and algebra items with exactly computed answers.

Each generator draws parameters and returns `{"kind", "params", "question", "answer"}`; the answer
is LaTeX-ish text (`12`, `-\\frac{3}{4}`) that Math-Verify parses. `solve(kind, params)` computes
the answer from the parameters alone (exact `Fraction` arithmetic), which is what the scripted
expert uses. Deliberately easy and closed-form: this set exercises the pipeline and the
intervention mechanics, it is not a benchmark.
"""

from __future__ import annotations

import random
from fractions import Fraction

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def format_answer(value: Fraction) -> str:
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _arith_value(params: dict) -> Fraction:
    nums, ops = params["numbers"], params["ops"]
    # standard precedence: fold multiplications first, then left to right
    terms, signs = [Fraction(nums[0])], []
    for op, n in zip(ops, nums[1:], strict=True):
        if op == "*":
            terms[-1] *= n
        else:
            signs.append(op)
            terms.append(Fraction(n))
    total = terms[0]
    for op, t in zip(signs, terms[1:], strict=True):
        total = _OPS[op](total, t)
    return total


def solve(kind: str, params: dict) -> str:
    """The exact answer of a generated problem, from its parameters."""
    if kind == "arithmetic":
        return format_answer(_arith_value(params))
    if kind == "fractions":
        a, b, c, d = params["a"], params["b"], params["c"], params["d"]
        return format_answer(_OPS[params["op"]](Fraction(a, b), Fraction(c, d)))
    if kind == "linear":  # a*x + b = c
        return format_answer(Fraction(params["c"] - params["b"], params["a"]))
    if kind == "system":  # x + y = s, x - y = t; ask for x*y
        s, t = params["s"], params["t"]
        return format_answer(Fraction(s + t, 2) * Fraction(s - t, 2))
    if kind == "quadratic":  # (x - r1)(x - r2) = 0; ask for the larger root
        return format_answer(max(params["r1"], params["r2"]))
    if kind == "percent":
        return format_answer(Fraction(params["p"] * params["n"], 100))
    raise ValueError(f"unknown problem kind {kind!r}")


def _signed(n: int) -> str:
    return f"+ {n}" if n >= 0 else f"- {-n}"


def _arithmetic(rng: random.Random) -> tuple[dict, str]:
    count = rng.randint(3, 4)
    nums = [rng.randint(2, 60) for _ in range(count)]
    ops = [rng.choice("+-*") for _ in range(count - 1)]
    expr = str(nums[0]) + "".join(f" {op} {n}" for op, n in zip(ops, nums[1:], strict=True))
    return {"numbers": nums, "ops": ops}, f"Compute {expr}."


def _fractions(rng: random.Random) -> tuple[dict, str]:
    b, d = rng.randint(2, 12), rng.randint(2, 12)
    p = {
        "a": rng.randint(1, b * 2),
        "b": b,
        "c": rng.randint(1, d * 2),
        "d": d,
        "op": rng.choice("+-*"),
    }
    word = {"+": "plus", "-": "minus", "*": "times"}[p["op"]]
    return (
        p,
        f"What is {p['a']}/{p['b']} {word} {p['c']}/{p['d']}? Give the answer as a reduced fraction or an integer.",
    )


def _linear(rng: random.Random) -> tuple[dict, str]:
    a = rng.choice([i for i in range(-9, 10) if i not in (0, 1)])
    p = {"a": a, "b": rng.randint(-30, 30), "c": rng.randint(-50, 50)}
    return p, f"Solve for x: {a}x {_signed(p['b'])} = {p['c']}."


def _system(rng: random.Random) -> tuple[dict, str]:
    x, y = rng.randint(-15, 20), rng.randint(-15, 20)
    p = {"s": x + y, "t": x - y}
    return p, f"Real numbers x and y satisfy x + y = {p['s']} and x - y = {p['t']}. What is xy?"


def _quadratic(rng: random.Random) -> tuple[dict, str]:
    r1, r2 = rng.randint(-12, 12), rng.randint(-12, 12)
    while r2 == r1:
        r2 = rng.randint(-12, 12)
    b, c = -(r1 + r2), r1 * r2
    return {"r1": r1, "r2": r2}, f"What is the larger root of x^2 {_signed(b)}x {_signed(c)} = 0?"


def _percent(rng: random.Random) -> tuple[dict, str]:
    p = {"p": rng.choice([5, 10, 12, 15, 20, 25, 30, 40, 45, 60, 75]), "n": rng.randint(4, 80) * 10}
    return p, f"What is {p['p']}% of {p['n']}?"


GENERATORS = {
    "arithmetic": _arithmetic,
    "fractions": _fractions,
    "linear": _linear,
    "system": _system,
    "quadratic": _quadratic,
    "percent": _percent,
}


def make_problem(rng: random.Random) -> dict:
    kind = rng.choice(sorted(GENERATORS))
    params, question = GENERATORS[kind](rng)
    return {"kind": kind, "params": params, "question": question, "answer": solve(kind, params)}
