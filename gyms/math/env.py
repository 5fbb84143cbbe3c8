"""The math environment with MuTIS-style interventions.

Each assistant turn is capped by the runner (`rollout.max_new_tokens_per_turn`). A turn with a
final answer (`\\boxed{}`, `<answer>` or `Answer:`) ends the episode and is scored: 1 when
Math-Verify says it equals the gold answer, else 0 (component `correct`). A turn without one gets
an intervention message (role `env`, which the runner masks from the loss and renders as a chat
turn or as raw continuation text per `rollout.intervention_style`) asking the model to stop, give
the answer in the required format and continue. At most `max_turns` interventions (gym option,
default 3); the round after the last one is final: without an answer it ends with reward 0.

Only the response is scored: the env sees assistant turns, never the prompt. Tool calls are not
part of this gym; their markup is ignored and the turn's text is read.
"""

from __future__ import annotations

from gyms.math.answers import answers_match, extract_final_answer
from mua.errors import UsageError
from mua.gym.api import AgentAction, GymContext, ResetResult, StepResult, Task

DEFAULT_OPTIONS = {"max_turns": 3}
INTERVENTION = (
    "Time is up. Stop reasoning here and state your final answer now in the required format, "
    "\\boxed{ANSWER}; then continue."
)


def _check_options(options: dict) -> dict:
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise UsageError(
            f"gym.options: unknown math option(s) {unknown}; known: {sorted(DEFAULT_OPTIONS)}"
        )
    merged = {**DEFAULT_OPTIONS, **options}
    turns = merged["max_turns"]
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
        raise UsageError(f"gym.options.max_turns must be an integer >= 0, got {turns!r}")
    return merged


class MathEnv:
    def __init__(self, ctx: GymContext):
        self.max_interventions = _check_options(dict(ctx.options))["max_turns"]
        self.weight = float(ctx.reward_weights.get("correct", 1.0))

    async def reset(self, task: Task) -> ResetResult:
        self.gold = str(task.payload["answer"])
        self.interventions = 0
        self.rounds = 0
        self.done = False
        return ResetResult(messages=[dict(m) for m in task.prompt], tools=[])

    async def step(self, action: AgentAction) -> StepResult:
        if self.done:
            return StepResult(done=True, info={"after_done": 1})
        self.rounds += 1
        text = action.text if action.text.strip() else action.raw
        answer = extract_final_answer(text)
        if answer is not None:
            self.done = True
            correct, fallback = answers_match(self.gold, answer)
            score = self.weight * float(correct)
            info = {
                "final_answer": answer,
                "correct": int(correct),
                "verify_fallback": int(fallback),
                "interventions": self.interventions,
                "rounds": self.rounds,
            }
            return StepResult(reward=score, components={"correct": score}, done=True, info=info)
        if self.interventions < self.max_interventions:
            self.interventions += 1
            return StepResult(
                messages=[{"role": "env", "content": INTERVENTION}],
                info={"intervention": self.interventions},
            )
        self.done = True
        return StepResult(
            reward=0.0,
            components={"correct": 0.0},
            done=True,
            info={"no_final_answer": 1, "interventions": self.interventions, "rounds": self.rounds},
        )

    async def close(self) -> None:
        return None


def make_env(ctx: GymContext) -> MathEnv:
    return MathEnv(ctx)
