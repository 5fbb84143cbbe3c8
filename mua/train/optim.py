"""Optimizer and learning-rate schedule built from `optim:` (AdamW; constant, linear or cosine after warm-up).

Does not clip gradients (see `mua.distributed.fsdp.clip_grad_norm`).
"""

from __future__ import annotations

import math

import torch


def build_optimizer(params, cfg, lr: float | None = None) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        [p for p in params if p.requires_grad],
        lr=lr if lr is not None else cfg.lr,
        betas=tuple(cfg.betas),
        weight_decay=cfg.weight_decay,
        # the fused kernel (CPU and GPU): one pass per tensor instead of the per-tensor loop
        # over DTensors on CPU, where torch's foreach kernels are not used
        fused=True,
    )


def lr_factor(step: int, cfg, total_steps: int) -> float:
    """Multiplier of the peak lr before optimizer step `step` (0-based)."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    if cfg.schedule == "linear":
        return max(0.0, 1.0 - progress)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(optimizer, cfg, total_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg, total_steps))
