"""The option strings of `mua.algo` are exactly those a recipe can name in `algo.*`."""

from __future__ import annotations

import typing

import pytest

from mua import algo
from mua.config.train import GRPOConfig, KLConfig, PolicyLossConfig


@pytest.mark.parametrize(
    ("model", "field", "names"),
    [
        (GRPOConfig, "score", algo.SCORE_KINDS),
        (GRPOConfig, "advantage", algo.ADVANTAGE_KINDS),
        (GRPOConfig, "credit", algo.GRPO_CREDIT_KINDS),
        (PolicyLossConfig, "aggregation", algo.AGGREGATIONS),
        (KLConfig, "estimator", algo.KL_ESTIMATORS),
        (GRPOConfig, "correction", algo.CORRECTION_KINDS),
    ],
)
def test_recipe_options_match_algo_names(model, field, names):
    assert set(typing.get_args(model.model_fields[field].annotation)) == set(names)
