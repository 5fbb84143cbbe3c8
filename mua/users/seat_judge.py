"""The user seat's judge rubric: an LLM judge rates one episode's user against four criteria.

With `fidelity_judge:` on a `seat: user` entry, the judge reads the user's hidden instructions and
the conversation and answers JSON with 0 or 1 for `instructions`, `asked_only`, `persona` and
`ending` (docs/user_seat.md, "The judge rubric"); the score is their mean. A judge whose retries
are spent raises `UserFailure`: the trajectory ends `user_failure`, masked.
Not here: running an episode, blending the score with the checks (`mua.users.seat_env`).
"""

from __future__ import annotations

import json

from mua.gym.api import UserFailure

CRITERIA = {
    "instructions": "kept to its hidden instructions and the truth they hold",
    "asked_only": "revealed information only when the agent asked for it",
    "persona": "stayed in its role as the user (never spoke as the agent or a narrator)",
    "ending": "ended the conversation when its goal was met or impossible, not earlier, and "
    "neither quit nor dragged on",
}

_SYSTEM = (
    "You judge a simulated user. Read its hidden instructions and the conversation, then rate "
    "the USER (not the agent) on each criterion with 1 (met) or 0 (not met):\n"
    + "\n".join(f"- {name}: {text}" for name, text in CRITERIA.items())
    + "\nReply with JSON only: {"
    + ", ".join(f'"{name}": 0 or 1' for name in CRITERIA)
    + "}."
)


def rubric_messages(user_prompt: str, turns, ended: bool = True) -> list[dict]:
    """The judge's request: the rubric, then the hidden instructions, the conversation and how
    it stopped (`ended`: the episode ended; else the turn budget cut it off)."""
    lines = [f"Agent: {t.agent}\nUser: {t.reply}" for t in turns] or ["(the user never spoke)"]
    how = "The conversation ended." if ended else "The turn budget cut the conversation off."
    text = (
        f"Hidden instructions of the user:\n{user_prompt}\n\nConversation:\n"
        + "\n".join(lines)
        + f"\n\n{how}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]


def read_verdict(value) -> dict[str, float]:
    """{criterion: 0.0 or 1.0} from the judge's JSON; ValueError when it is not that."""
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object with a 0 or 1 per criterion")
    out = {}
    for name in CRITERIA:
        verdict = value.get(name)
        if isinstance(verdict, bool):
            verdict = int(verdict)
        if verdict not in (0, 1):
            raise ValueError(f"criterion {name!r} must be 0 or 1, got {verdict!r}")
        out[name] = float(verdict)
    return out


def judge_client(cfg, where: str):
    """The `LLMClient` of a `FidelityJudgeConfig` (errors name it as the fidelity judge)."""
    from mua.llm.llm_client import make_llm_client

    return make_llm_client(
        cfg.endpoint(),
        label=f"{where} fidelity judge",
        setting=f"{where}.fidelity_judge.base_url",
    )


async def rate(client, user_prompt: str, turns, ended: bool = True) -> tuple[float, dict]:
    """(rubric score, {criterion: verdict}) of one episode's user."""
    messages = rubric_messages(user_prompt, turns, ended)
    verdict = await client.complete_json(messages, read_verdict)
    if not isinstance(verdict, dict) or set(verdict) != set(CRITERIA):
        raise UserFailure(f"the fidelity judge's verdict {verdict!r} has not one per criterion")
    return sum(verdict.values()) / len(verdict), verdict
