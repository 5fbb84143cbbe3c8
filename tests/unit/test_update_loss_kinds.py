"""The loss kinds and corrections of docs/algorithms.md §5 and §11 reach a real update and its metrics.

One `mua.train.policy_update.update` on the fixed batch of the update reference tests, with GSPO
and sequence-level MIS, then CISPO and IcePop: the step's `actor/clip_frac` and
`actor/is_masked_frac` equal the fractions computed in float64 from the formulas (the ratio from
the float64 reference model, the engine weight from the samples). Also: the recipe accepts the
names and refuses the meaningless combinations in one line, and `mua recipe schema` lists the
new fields.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from tests.unit.update_harness import one_rank_update, scored_samples, trainer_parts
from tests.unit.update_reference import fixed_rows, reference_lm, scored

REPO = Path(__file__).resolve().parents[2]
GROUPS, N = 2, 4
CAP, FLOOR = 2.0, 0.5


def _noisy(values, masks, seed: int, std: float) -> list[list[float]]:
    gen = torch.Generator().manual_seed(seed)
    return [
        ((v + torch.randn(v.shape, generator=gen, dtype=torch.float64) * std) * m).float().tolist()
        for v, m in zip(values, masks, strict=True)
    ]


def _setup(loss: dict, correction: str):
    from mua.config.train import GRPOConfig, OptimConfig, ParallelConfig
    from mua.train.rl_batch import group_relative_advantages, with_inputs

    algo = GRPOConfig(loss=loss, correction=correction, correction_floor=FLOOR)
    optim, parallel = OptimConfig(lr=1e-3), ParallelConfig(micro_batch_tokens=64)
    rows = fixed_rows(GROUPS, N)
    masks = [torch.tensor([0, *r.loss_mask[1:]], dtype=torch.float64) for r in rows]
    with torch.no_grad():
        current = [scored(reference_lm(), r.token_ids)[0] for r in rows]
    old = _noisy(current, masks, seed=2, std=0.05)
    engine = _noisy([torch.tensor(o, dtype=torch.float64) for o in old], masks, seed=3, std=0.5)
    batch = scored_samples(rows, algo, N)
    tokens, _ = group_relative_advantages(batch, algo)
    samples = [
        dataclasses.replace(s, record=dataclasses.replace(s.record, logprobs=list(e)), tensors=None)
        for s, e in zip(with_inputs(batch.samples, tokens, old, None), engine, strict=True)
    ]
    parts = trainer_parts(optim, parallel, optimizer_steps=1)
    result = one_rank_update(parts, None, samples, algo, optim, parallel, GROUPS * N, 1.0)
    per_row = [
        ([float(x) for x in c], o, e, [int(x) for x in m], a.tolist())
        for c, o, e, m, a in zip(current, old, engine, masks, tokens, strict=True)
    ]
    return algo, result.metrics, per_row


def _clipped(ratio: float, adv: float, low: float, high: float) -> bool:
    """PPO's clipped term is the larger loss: the ratio left the band on its advantage's side."""
    return (adv > 0 and ratio > 1 + high) or (adv < 0 and ratio < 1 - low)


def test_gspo_with_sequence_mis_logs_exact_fractions():
    loss = {"kind": "gspo", "aggregation": "seq-mean-token-mean", "clip_low": 0.01}
    algo, metrics, rows = _setup({**loss, "clip_high": 0.02}, "seq-mis")
    tokens = clipped = masked = 0
    for logp, old, engine, mask, adv in rows:
        pos = [t for t, m in enumerate(mask) if m]
        s = math.exp(sum(logp[t] - old[t] for t in pos) / len(pos))
        seq_adv = sum(adv[t] for t in pos) / len(pos)
        rho = math.exp(sum(old[t] - engine[t] for t in pos))
        tokens += len(pos)
        clipped += len(pos) * _clipped(s, seq_adv, algo.loss.clip_low, algo.loss.clip_high)
        masked += len(pos) * (rho > CAP)
    _assert_fractions(metrics, clipped, masked, tokens)


def _assert_fractions(metrics: dict, clipped: int, masked: int, tokens: int) -> None:
    """Both logged fractions equal the counted ones (some tokens of each kind, not all)."""
    assert 0 < clipped < tokens and 0 < masked < tokens
    # float32 stat sums; one token is 1e-2
    assert metrics["actor/clip_frac"] == pytest.approx(clipped / tokens, abs=1e-6)
    assert metrics["actor/is_masked_frac"] == pytest.approx(masked / tokens, abs=1e-6)


def test_cispo_with_icepop_logs_exact_fractions():
    algo, metrics, rows = _setup({"kind": "cispo", "clip_low": 0.02, "clip_high": 0.03}, "icepop")
    tokens = clipped = masked = 0
    for logp, old, engine, mask, _ in rows:
        for t, m in enumerate(mask):
            if m:
                tokens += 1
                ratio = math.exp(logp[t] - old[t])
                clipped += not 1 - 0.02 <= ratio <= 1 + 0.03  # CISPO clips both sides
                masked += not FLOOR <= math.exp(old[t] - engine[t]) <= CAP
    _assert_fractions(metrics, clipped, masked, tokens)


def test_recipe_names_match_the_algo_names():
    import typing

    from mua import algo
    from mua.config.train import PolicyLossConfig

    annotation = PolicyLossConfig.model_fields["kind"].annotation
    assert set(typing.get_args(annotation)) == set(algo.POLICY_LOSS_KINDS)
    assert {"icepop", "seq-mis"} <= set(algo.CORRECTION_KINDS)


REFUSED = {
    "gspo_token_mean": (
        ["algo.loss.kind=gspo", "algo.loss.aggregation=token-mean"],
        "algo.loss.kind=gspo averages one loss per sequence, but algo.loss.aggregation=token-mean;"
        " set algo.loss.aggregation=seq-mean-token-mean",
    ),
    "cispo_dual_clip": (
        ["algo.loss.kind=cispo", "algo.loss.dual_clip=3"],
        "algo.loss.dual_clip applies to algo.loss.kind=ppo-clip only, not cispo",
    ),
    "gspo_token_correction": (
        ["algo.loss.kind=gspo", "algo.correction=icepop"],
        "algo.correction=icepop weighs tokens, but algo.loss.kind=gspo gives each token its "
        "sequence's loss; use algo.correction=seq-mis or none, or algo.loss.kind=gspo-token",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_meaningless_combinations_are_refused_in_one_line(name):
    from mua.config import load_recipe
    from mua.errors import UsageError

    overrides, expected = REFUSED[name]
    with pytest.raises(UsageError) as exc:
        load_recipe(REPO / "recipes/quickstart.yaml", overrides, verb="train")
    assert expected in str(exc.value) and len(str(exc.value).splitlines()) == 1, str(exc.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["algo.loss.kind=gspo", "algo.correction=seq-mis"],
        ["algo.loss.kind=gspo-token", "algo.loss.aggregation=token-mean", "algo.correction=icepop"],
        ["algo.loss.kind=cispo", "algo.correction=decoupled"],
    ],
)
def test_meaningful_combinations_are_accepted(overrides):
    from mua.config import load_recipe

    recipe = load_recipe(REPO / "recipes/quickstart.yaml", overrides, verb="train")
    assert recipe.algo.loss.kind == overrides[0].split("=")[1]


def test_the_schema_lists_and_describes_the_new_fields():
    from mua.config.recipes import TrainRecipe
    from mua.config.schema_rows import schema_rows

    rows = {row[0]: row for row in schema_rows(TrainRecipe)}
    for field in ("loss.kind", "correction_floor"):
        (row,) = {r for path, r in rows.items() if path.endswith(f"[kind=grpo].{field}")}
        assert row[3], row  # a description
