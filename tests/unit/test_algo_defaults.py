"""GRPO's defaults are UserRL's training setup: score `mean` (UserRL's "Sum") and γ = 0.8."""

from __future__ import annotations

from mua.config.train import GRPOConfig, PPOConfig


def test_grpo_defaults_follow_userrl():
    grpo = GRPOConfig()
    assert grpo.score == "mean" and grpo.gamma == 0.8


def test_ppo_keeps_undiscounted_gae_by_default():
    assert PPOConfig().gamma == 1.0
