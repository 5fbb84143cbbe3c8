"""The math environment with MuTIS-style interventions.

Each assistant turn is capped by the runner (`rollout.max_new_tokens_per_turn`). A turn with a
final answer ends the episode and is scored: 1 when Math-Verify says it equals the gold answer,
else 0 (component `correct`). A turn without one gets an intervention (role `env`, masked from
the loss by the runner). At most `max_turns` interventions (gym option, default 3); the round
after the last one is final: without an answer it ends with reward 0.

`rules` (gym option) picks how a turn is read and how the env intervenes:

- `upstream` (default, MuTIS's loop): the prompt is MuTIS's single user turn (its instruction
  then the task's question; the task's own system turn is not used); the response is cut where MuTIS cuts it (after the first
  `</answer>`, the paragraph of an `Answer:` line, or the first `\\boxed{}`) and the runner drops
  the rest (`StepResult.cut_at`), so nothing after the answer is trained on; the answer is read
  `<answer>` first, then `Answer:`, then `\\boxed{}` (answers.py); the intervention is MuTIS's
  sentence in the model's own voice, appended as raw text that continues the model's turn.
- `mua`: the whole turn is kept; the answer is the last `\\boxed{}`, else `<answer>`, else
  `Answer:`; the intervention is an instruction in the second person, rendered as a chat turn or
  as raw text per `rollout.intervention_style`.

Only the response is scored: the env sees assistant turns, never the prompt. Tool calls are not
part of this gym; their markup is ignored and the turn's text is read.
"""

from __future__ import annotations

from gyms.math.answers import answers_match, extract_final_answer, upstream_answer, upstream_cut
from mua.errors import UsageError
from mua.gym.api import AgentAction, GymContext, ResetResult, StepResult, Task

DEFAULT_OPTIONS = {"max_turns": 3, "rules": "upstream"}
RULES = ("upstream", "mua")
INTERVENTION = (
    "Time is up. Stop reasoning here and state your final answer now in the required format, "
    "\\boxed{ANSWER}; then continue."
)
# MuTIS's intervention, character for character (the model continues right after it).
UPSTREAM_INTERVENTION = (
    "\n My previous action is invalid. If I want to give the final answer, I should put the "
    "answer between <answer> and </answer>. Let me try again:\n"
)

# MuTIS's prompt (its data preparation, template `base`): one user turn, character for character,
# trailing space included; a question that does not end in `?` or `.` gets a `?`.
UPSTREAM_PROMPT = (
    "Answer the given math question. Please reason step by step and put the final answer in "
    "\\boxed{{}}. Question: {question} "
)


def upstream_prompt(question: str) -> list[dict]:
    """The prompt MuTIS gives for `question`: one user turn, no system turn."""
    question = question.strip()
    if question and question[-1] not in ("?", "."):
        question += "?"
    return [{"role": "user", "content": UPSTREAM_PROMPT.format(question=question)}]


def _question(task: Task) -> str:
    users = [m for m in task.prompt if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


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
    if merged["rules"] not in RULES:
        raise UsageError(f"gym.options.rules: {merged['rules']!r} is not one of {', '.join(RULES)}")
    return merged


class MathEnv:
    def __init__(self, ctx: GymContext):
        options = _check_options(dict(ctx.options))
        self.max_interventions = options["max_turns"]
        self.upstream = options["rules"] == "upstream"
        self.weight = float(ctx.reward_weights.get("correct", 1.0))

    async def reset(self, task: Task) -> ResetResult:
        self.gold = str(task.payload["answer"])
        self.interventions = 0
        self.rounds = 0
        self.done = False
        if self.upstream:
            return ResetResult(messages=upstream_prompt(_question(task)), tools=[])
        return ResetResult(messages=[dict(m) for m in task.prompt], tools=[])

    async def step(self, action: AgentAction) -> StepResult:
        if self.done:
            return StepResult(done=True, info={"after_done": 1})
        self.rounds += 1
        if self.upstream:
            text = action.raw or action.text
            cut_at = upstream_cut(text)
            answer = upstream_answer(text if cut_at is None else text[:cut_at])
        else:
            text = action.text if action.text.strip() else action.raw
            cut_at, answer = None, extract_final_answer(text)
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
            return StepResult(
                reward=score, components={"correct": score}, done=True, info=info, cut_at=cut_at
            )
        if self.interventions < self.max_interventions:
            self.interventions += 1
            message = (
                {"role": "env", "content": UPSTREAM_INTERVENTION, "style": "raw"}
                if self.upstream
                else {"role": "env", "content": INTERVENTION}
            )
            return StepResult(
                messages=[message], info={"intervention": self.interventions}, cut_at=cut_at
            )
        self.done = True
        return StepResult(
            reward=0.0,
            components={"correct": 0.0},
            done=True,
            info={"no_final_answer": 1, "interventions": self.interventions, "rounds": self.rounds},
            cut_at=cut_at,
        )

    async def close(self) -> None:
        return None
