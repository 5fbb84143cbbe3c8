"""The steps an episode answers without acting: one before `reset`, and any after its end.

`closed_step(task, done)` is that answer (a done `StepResult` whose termination says which), or
None when the episode is open and the env should act. Shared by the customer-service gyms
(tau, tau2); what an open step does stays with each env.
"""

from __future__ import annotations

from mua.gym.api import StepResult, Task


def closed_step(task: Task | None, done: bool) -> StepResult | None:
    if task is None:
        return StepResult(done=True, info={"error_kind": "not_reset", "termination": "not_reset"})
    if done:
        return StepResult(done=True, info={"termination": "already_done"})
    return None
