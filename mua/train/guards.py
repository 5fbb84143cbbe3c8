"""Stops for training runs that would otherwise go on producing nothing or garbage.

`check_finite` stops on a non-finite loss or gradient norm before the optimizer step (collective:
every rank gets the same verdict). `StepWatch` says when a step could not move the policy, and
stops after `stop.empty_steps` such steps in a row, or at once when the `env_error` share exceeds
`stop.env_error_rate`. Errors raised are `RunStopped` (exit 1, printed once by rank 0).
Not here: computing the step's metrics (`mua.train.rl`).
"""

from __future__ import annotations

import math

from mua.errors import RunFailure


class RunStopped(RunFailure):
    """A stop decided from numbers every rank shares."""

    on_every_rank = True


def check_finite(loss: float, grad_norm: float, what: str = "policy") -> None:
    """Raise RunStopped unless this rank's loss and the global gradient norm are finite (the
    verdict is reduced over ranks, so all raise or none). The trainer's loop adds the step."""
    from mua.distributed import all_reduce_max

    bad = 0.0 if math.isfinite(loss) and math.isfinite(grad_norm) else 1.0
    if float(all_reduce_max([bad])[0]) > 0:
        raise RunStopped(
            f"the {what} loss or gradient is not finite (loss {loss:g}, grad_norm "
            f"{grad_norm:g}); stopped before the update, nothing exported. Lower optim.lr, check "
            "the data, or resume from an earlier checkpoint with --resume-from"
        )


def empty_step_reasons(metrics: dict[str, float]) -> str | None:
    """Why an RL step could not move the policy, or None when some sample carried a signal."""
    if metrics.get("filter/samples_with_signal", 1.0) > 0:
        return None
    total = int(sum(v for k, v in metrics.items() if k.startswith("termination/")))
    excluded = int(metrics.get("filter/excluded_by_termination", 0))
    parts = []
    if excluded:
        reasons = ", ".join(
            f"{k.split('/', 1)[1]} {int(v)}"
            for k, v in sorted(metrics.items())
            if k.startswith("termination/") and k != "termination/done" and v
        )
        parts.append(f"{excluded} of {total} trajectories excluded ({reasons})")
    dropped = int(metrics.get("filter/zero_variance_groups", 0))
    if dropped:
        parts.append(f"{dropped} groups dropped with equal rewards")
    kept = int(metrics.get("filter/samples_trained", 0))
    if kept:
        parts.append(f"the {kept} kept samples all have zero advantage (equal rewards per group)")
    return "; ".join(parts) or "no trajectories"


def env_error_cause(metrics: dict[str, float], env_errors: float) -> str:
    """What made a step's env errors: the agent programs that crashed (program gyms count them
    as `gateway/program_crashed/<label>`), else the gyms' tools or data."""
    prefix = "gateway/program_crashed/"
    crashed = {
        k[len(prefix) :]: int(v) for k, v in sorted(metrics.items()) if k.startswith(prefix) and v
    }
    if not crashed:
        return "the gym's tools or data fail"
    named = ", ".join(f"{label!r} ({n} runs)" for label, n in crashed.items())
    cause = (
        f"the agent program of gyms {'entry' if len(crashed) == 1 else 'entries'} {named} "
        "crashed (its stderr ends each transcript, `mua view`)"
    )
    rest = int(env_errors) - sum(crashed.values())
    return cause + (f"; in the other {rest} the gym's tools or data fail" if rest > 0 else "")


class StepWatch:
    """Counts consecutive empty RL steps; raises RunStopped when a stop condition is met."""

    def __init__(self, stop_cfg, *, show: bool):
        self.cfg = stop_cfg
        self.show = show
        self.empty_in_a_row = 0

    def after_step(self, step: int, metrics: dict[str, float]) -> None:
        total = sum(v for k, v in metrics.items() if k.startswith("termination/"))
        env_errors = metrics.get("termination/env_error", 0.0)
        if total and self.cfg.env_error_rate < 1 and env_errors / total > self.cfg.env_error_rate:
            raise RunStopped(
                f"step {step}: {int(env_errors)} of {int(total)} trajectories ended in env_error "
                f"(above stop.env_error_rate={self.cfg.env_error_rate:g}); "
                f"{env_error_cause(metrics, env_errors)}, see the transcripts; raise "
                "stop.env_error_rate to go on regardless"
            )
        reasons = empty_step_reasons(metrics)
        if reasons is None:
            self.empty_in_a_row = 0
            return
        self.empty_in_a_row += 1
        if self.show:
            print(f"step {step}: nothing to learn from: {reasons}", flush=True)
        limit = self.cfg.empty_steps
        if limit and self.empty_in_a_row >= limit:
            raise RunStopped(
                f"stopped after {self.empty_in_a_row} steps in a row with nothing to learn from "
                f"(last: {reasons}); check rollout.max_total_tokens / rollout.max_turns / "
                "algo.mask_truncated and the reward, or raise stop.empty_steps"
            )
