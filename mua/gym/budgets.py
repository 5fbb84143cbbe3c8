"""A gym's default rollout budgets, applied where a recipe leaves them unset.

Budgets that are too small make scores meaningless (a travel expert scores 0 in 8 turns and
1,024 tokens, 1 in 16 and 8,192), and the schema's defaults cannot suit every gym, so each gym
declares what its tasks need (`GymSpec.budgets`). `with_gym_budgets(rollout_cfg, spec)` returns
the rollout section with the gym's value for each budget the recipe did not set itself (a field
set in the YAML or by an override always wins). Verbs apply it once, before a recipe is written
or used, so `recipe.resolved.yaml` records the budgets a run really had.
"""

from __future__ import annotations

BUDGET_FIELDS = ("max_turns", "max_total_tokens", "max_new_tokens_per_turn")


def with_gym_budgets(rollout_cfg, spec):
    """`rollout_cfg` with `spec.budgets` filled into the budget fields it did not set."""
    unset = {
        key: value
        for key, value in (spec.budgets or {}).items()
        if key in BUDGET_FIELDS and key not in rollout_cfg.model_fields_set
    }
    if not unset:
        return rollout_cfg
    per_turn = unset.get("max_new_tokens_per_turn", rollout_cfg.max_new_tokens_per_turn)
    if (
        "max_total_tokens" in unset
    ):  # a per-turn budget raised past the gym's total keeps its meaning
        unset["max_total_tokens"] = max(unset["max_total_tokens"], per_turn)
    elif per_turn > rollout_cfg.max_total_tokens:
        unset["max_new_tokens_per_turn"] = rollout_cfg.max_total_tokens
    return rollout_cfg.model_copy(update=unset)
