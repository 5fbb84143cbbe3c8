"""Warnings for GRPO settings whose expected update is not the policy gradient (§3's table).

`stopping_bias_warnings(recipe)` returns one line per setting of a loaded train recipe (its
`algo` and each `gyms:` entry's own `credit`/`gamma`) that biases the update when the policy
decides when an episode stops, each naming the unbiased choice. It refuses nothing and reads no
rewards: the group-std normalisation of `advantage: grpo`, exact in direction for 0/1 scores
only, is left to docs/algorithms.md §3.
"""

from __future__ import annotations

BIASED_CREDITS = ("r2g", "em", "turn-group")
UNBIASED_CREDIT = "r2g-loo"


def _credit_warning(where: str, credit: str | None, gamma: float) -> str | None:
    if credit in BIASED_CREDITS:
        return (
            f"{where}.credit: {credit} is biased toward stopping when the policy decides when to "
            f"stop; credit: {UNBIASED_CREDIT} with gamma: 1.0 is unbiased (docs/algorithms.md §3)"
        )
    if credit == UNBIASED_CREDIT and gamma < 1.0:
        return (
            f"{where}.credit: {UNBIASED_CREDIT} with gamma {gamma:g} drops the γ^(t−1) of the "
            "discounted return, so it is biased; set gamma: 1.0 for the exact gradient"
        )
    return None


def stopping_bias_warnings(recipe) -> list[str]:
    """One line per biased GRPO setting of `recipe` (empty for other recipes and verbs)."""
    algo = getattr(recipe, "algo", None)
    if getattr(algo, "kind", None) != "grpo":
        return []
    gyms = getattr(recipe, "gyms", [])
    lines = []
    if not gyms or any(gym.credit is None for gym in gyms):  # some gym uses algo.credit
        lines.append(_credit_warning("algo", algo.credit, algo.gamma))
    for i, gym in enumerate(gyms):
        gamma = algo.gamma if gym.gamma is None else gym.gamma
        lines.append(_credit_warning(f"gyms[{i}]", gym.credit, gamma))
    if algo.loss.aggregation == "seq-mean-token-mean":
        lines.append(
            "algo.loss.aggregation: seq-mean-token-mean divides each trajectory by its own "
            "length, which bends the update when the policy decides when to stop; "
            "seq-mean-token-sum (or seq-mean-token-sum-norm) is unbiased"
        )
    return [line for line in lines if line]
