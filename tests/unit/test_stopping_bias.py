"""Which GRPO modes follow the policy gradient when the policy decides when to stop (§3's table).

Small MDPs are enumerated exactly in float64: at each turn a tabular softmax policy (one logit
per turn) continues or stops; a continued turn succeeds with a per-turn probability (reward
`win`, the episode ends) or earns `step` (an intermediate reward, or a per-turn cost when
negative) and goes on; the last failed turn adds `fail`; a stop turn earns `stop`. Every
multiset of trajectory outcomes of a group of size n is weighed by its exact probability, each
mode's token advantages come from mua's own `grpo_token_advantages` and its per-token loss
weights from mua's own `aggregate` (one token per turn), and the expected update is compared
with the exact gradient of the objective the score names.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import pytest
import torch

from mua.algo import aggregate, grpo_token_advantages

torch.set_num_threads(1)


@dataclass(frozen=True)
class StopMDP:
    """The game and the policy: `p_continue[t]` is the chance to continue at turn t."""

    p_continue: tuple[float, ...]
    p_success: tuple[float, ...]
    step: float = 0.0
    win: float = 1.0
    stop: float = 0.0
    fail: float = 0.0


@dataclass(frozen=True)
class Outcome:
    prob: float
    rewards: tuple[float, ...]
    grad_logp: tuple[tuple[float, ...], ...]  # per turn: ∂ log π(a_t) / ∂ θ


def _score_grad(mdp: StopMDP, turn: int, cont: bool) -> tuple[float, ...]:
    p = mdp.p_continue[turn]
    g = [0.0] * len(mdp.p_continue)
    g[turn] = (1.0 - p) if cont else -p
    return tuple(g)


def outcomes(mdp: StopMDP) -> list[Outcome]:
    """Every trajectory the MDP can produce, with its probability."""
    out, prob, rewards, grads = [], 1.0, [], []
    last = len(mdp.p_continue) - 1
    for t, (p, q) in enumerate(zip(mdp.p_continue, mdp.p_success, strict=True)):
        stop_grads = (*grads, _score_grad(mdp, t, False))
        out.append(Outcome(prob * (1 - p), (*rewards, mdp.stop), stop_grads))
        grads.append(_score_grad(mdp, t, True))
        out.append(Outcome(prob * p * q, (*rewards, mdp.win), tuple(grads)))
        prob *= p * (1 - q)
        rewards.append(mdp.step + (mdp.fail if t == last else 0.0))
    out.append(Outcome(prob, tuple(rewards), tuple(grads)))
    return [o for o in out if o.prob > 0]


OBJECTIVES = {
    "sum": lambda r: sum(r),
    "mean": lambda r: sum(r) / len(r),
    "outcome": lambda r: r[-1],
}


def true_gradient(mdp: StopMDP, objective: str) -> torch.Tensor:
    """∇ E[S(τ)] = Σ_τ P(τ) S(τ) Σ_t ∇ log π(a_t), exactly."""
    total = torch.zeros(len(mdp.p_continue), dtype=torch.float64)
    for o in outcomes(mdp):
        total += o.prob * OBJECTIVES[objective](o.rewards) * torch.tensor(o.grad_logp).sum(0)
    return total


@functools.cache
def _token_weights(lengths: tuple[int, ...], aggregation: str) -> list[torch.Tensor]:
    """d loss / d token loss of mua's `aggregate` for one group (its mini-batch)."""
    mask = torch.zeros(len(lengths), max(lengths), dtype=torch.float64)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
    x = torch.zeros_like(mask, requires_grad=True)
    aggregate(x, mask, aggregation, norm_length=4).backward()
    return [x.grad[b, :n] for b, n in enumerate(lengths)]


def expected_update(mdp: StopMDP, n: int, mode: dict, aggregation: str) -> torch.Tensor:
    """E over groups of n of Σ_b Σ_t w_{b,t} A_{b,t} ∇ log π(a_{b,t}): the update's direction."""
    kinds = outcomes(mdp)
    groups = list(itertools.combinations_with_replacement(range(len(kinds)), n))
    members = [kinds[k] for g in groups for k in g]
    out = grpo_token_advantages(
        [list(o.rewards) for o in members],
        [i for i, g in enumerate(groups) for _ in g],
        [torch.arange(len(o.rewards)) for o in members],
        [torch.ones(len(o.rewards)) for o in members],
        **mode,
    )
    total = torch.zeros(len(mdp.p_continue), dtype=torch.float64)
    for i, g in enumerate(groups):
        ways = math.factorial(n) / math.prod(math.factorial(g.count(k)) for k in set(g))
        prob = ways * math.prod(kinds[k].prob for k in g)
        rows = range(i * n, (i + 1) * n)
        weights = _token_weights(tuple(len(members[b].rewards) for b in rows), aggregation)
        for b, w in zip(rows, weights, strict=True):
            adv = out.token_advantages[b].to(torch.float64) * w
            total += prob * (adv[:, None] * torch.tensor(members[b].grad_logp)).sum(0)
    return total


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


@pytest.fixture(autouse=True)
def _float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


TERMINAL = StopMDP((0.7, 0.5, 0.6), (0.3, 0.4, 0.5))  # 0/1 rewards: success or not
INTERMEDIATE = StopMDP((0.6, 0.5, 0.7), (0.3, 0.4, 0.5), step=0.3)  # each failed try earns 0.3
COST = StopMDP((0.3, 0.5, 0.2), (0.3, 0.3, 0.3), step=-0.4)  # each failed try costs 0.4
GIVE_UP = StopMDP((0.5, 0.5, 0.5), (0.7, 0.4, 0.2), stop=-0.5)  # stopping costs 0.5
PARTIAL = StopMDP((0.7, 0.6), (0.4, 0.5), stop=0.5)  # stopping earns half a success
FAIL = StopMDP((0.6, 0.5, 0.7), (0.3, 0.4, 0.5), step=-0.1, fail=-1.0)  # running out costs 1
ALL_MDPS = [TERMINAL, INTERMEDIATE, COST, GIVE_UP, PARTIAL, FAIL]

SUM = "seq-mean-token-sum"
EQ_DRGRPO = dict(score="sum", advantage="drgrpo", credit="equalized")
EQ_RLOO = dict(score="sum", advantage="rloo", credit="equalized")
EQ_GRPO = dict(score="sum", advantage="grpo", credit="equalized")
R2G_LOO = dict(score="sum", advantage="drgrpo", credit="r2g-loo", gamma=1.0)


def assert_proportional(update: torch.Tensor, grad: torch.Tensor, factor: float) -> None:
    assert torch.allclose(update, factor * grad, atol=1e-9, rtol=0), (update, factor * grad)


@pytest.mark.parametrize("mdp", ALL_MDPS)
@pytest.mark.parametrize("n", [2, 4])
def test_r2g_loo_is_the_exact_gradient_of_the_sum_of_rewards(mdp, n):
    assert_proportional(expected_update(mdp, n, R2G_LOO, SUM), true_gradient(mdp, "sum"), 1.0)


@pytest.mark.parametrize("mdp", [COST, PARTIAL, FAIL])
def test_equalized_with_drgrpo_or_rloo_is_unbiased(mdp):
    grad = true_gradient(mdp, "sum")
    assert_proportional(expected_update(mdp, 3, EQ_DRGRPO, SUM), grad, 2 / 3)
    assert_proportional(expected_update(mdp, 3, EQ_RLOO, SUM), grad, 1.0)
    mean_drgrpo = dict(EQ_DRGRPO, score="mean")  # unbiased for the mean reward's objective
    assert_proportional(
        expected_update(mdp, 3, mean_drgrpo, SUM), true_gradient(mdp, "mean"), 2 / 3
    )


def test_a_fixed_length_normaliser_only_scales_the_update():
    update = expected_update(COST, 2, R2G_LOO, "seq-mean-token-sum-norm")  # norm_length 4
    assert_proportional(update, true_gradient(COST, "sum"), 0.25)


@pytest.mark.parametrize("n", [2, 4])
def test_grpo_std_keeps_the_direction_for_0_1_scores_only(n):
    grad = true_gradient(TERMINAL, "sum")
    assert cosine(expected_update(TERMINAL, n, EQ_GRPO, SUM), grad) == pytest.approx(1, abs=1e-9)
    update = expected_update(COST, n, EQ_GRPO, SUM)
    assert cosine(update, true_gradient(COST, "sum")) < -0.65
    assert update[0] < 0 < true_gradient(COST, "sum")[0]  # stops more where it should go on


BIASED = [
    # (mode, objective, mdp, bound on the cosine with the true gradient)
    (dict(score="sum", advantage="drgrpo", credit="r2g", gamma=1.0), "sum", COST, -0.91),
    (dict(score="sum", advantage="rloo", credit="r2g", gamma=1.0), "sum", COST, -0.91),
    (dict(score="sum", advantage="rloo", credit="em"), "sum", GIVE_UP, -0.75),
    (dict(score="sum", advantage="drgrpo", credit="turn-group"), "sum", PARTIAL, -0.9999),
    (dict(score="sum", advantage="drgrpo", credit="turn-group"), "sum", COST, -0.98),
    (dict(score="mean", advantage="grpo", credit="r2g", gamma=0.8), "mean", COST, -0.999),
]


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize(("mode", "objective", "mdp", "bound"), BIASED)
def test_biased_modes_lean_toward_stopping_at_every_group_size(mode, objective, mdp, bound, n):
    grad = true_gradient(mdp, objective)
    update = expected_update(mdp, n, mode, SUM)
    assert cosine(update, grad) < bound
    assert update[0] < 0 < grad[0]  # the first turn is pushed to stop; continuing pays


def test_seq_mean_token_mean_bends_even_the_unbiased_modes():
    grad = true_gradient(TERMINAL, "sum")
    for mode in (EQ_DRGRPO, R2G_LOO):
        assert cosine(expected_update(TERMINAL, 2, mode, "seq-mean-token-mean"), grad) < 0.96


def test_token_mean_over_one_group_is_biased_by_its_token_count():
    grad = true_gradient(TERMINAL, "sum")
    assert cosine(expected_update(TERMINAL, 2, EQ_DRGRPO, "token-mean"), grad) < 0.99


def test_recipe_validate_warns_once_per_biased_setting(mua_cli, tmp_path):
    biased = tmp_path / "biased.yaml"
    biased.write_text(
        "algo: {kind: grpo, credit: em, loss: {aggregation: seq-mean-token-mean}}\n"
        "gyms: [{name: guess, credit: r2g-loo, gamma: 0.9}]\n"
    )
    code, out, err = mua_cli("recipe", "validate", str(biased), "recipes/quickstart_turn_cost.yaml")
    assert code == 0, err
    assert out.count("ok ") == 2
    assert err.splitlines() == [
        f"warning: {biased}: gyms[0].credit: r2g-loo with gamma 0.9 drops the γ^(t−1) of the "
        "discounted return, so it is biased; set gamma: 1.0 for the exact gradient",
        f"warning: {biased}: algo.loss.aggregation: seq-mean-token-mean divides each trajectory "
        "by its own length, which bends the update when the policy decides when to stop; "
        "seq-mean-token-sum (or seq-mean-token-sum-norm) is unbiased",
    ]
    code, out, err = mua_cli("recipe", "validate", "recipes/travel_grpo.yaml")
    assert err.splitlines() == [
        "warning: recipes/travel_grpo.yaml: algo.credit: r2g is biased toward stopping when the "
        "policy decides when to stop; credit: r2g-loo with gamma: 1.0 is unbiased "
        "(docs/algorithms.md §3)"
    ]
