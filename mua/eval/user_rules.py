"""Deterministic checks of a simulated user's turns against its task: where the user broke its role.

`user_findings(row, payload)` reads one result row's conversation (the user's turns: `user`
messages and the replies of the `interact_with_env` tool, through which the UserRL-style gyms'
users answer) and returns every finding, in conversation order (at most one of each rule per
user turn):

- `leak`: the user said a piece of the task's hidden solution before the agent had said it or
  asked about it (guess: the number; telepathy: the entity's name; turtle: a run of the hidden
  story; persuade: one of the counter-points the agent must raise; intention: a missing
  detail's answer the agent had not asked about);
- `gave_up`: the user ended or abandoned the conversation (a goodbye, `###STOP###`) although the
  agent had not said the task was done;
- `contradicted`: the user's answer contradicts its hidden answer (telepathy: `No` to a question
  naming the entity);
- `invented`: the user gave an id its instruction does not hold and nobody had said
  (tau's order ids and user ids).

What counts as a secret is known per gym (`SECRETS`, by gym name; a plugin gym adds its own with
`register_secrets`). A finding is evidence about the user, not a verdict: `mua.eval.blame`
decides the failure's label, `mua.eval.audit` scores a user's fidelity. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

USER_CHANNEL_TOOLS = ("interact_with_env",)
STOP_MARKER = "###STOP###"
QUIT = re.compile(
    r"\b(good ?bye|bye|i give up|i'?m done|i am done|stop (?:talking|this)|"
    r"(?:do not|don'?t) want to (?:talk|continue|discuss|go on)|no longer (?:want|interested)|"
    r"end (?:this|the) conversation)\b"
)
CLAIMS_DONE = re.compile(
    r"\b(complet\w*|done|resolved|all set|anything else|finished|taken care of|processed)\b"
)
ID_PATTERNS = (re.compile(r"#W\d{7}"), re.compile(r"\b[a-z]+_[a-z]+_\d{4}\b"))
MIN_COPIED_WORDS = 8


@dataclass
class Finding:
    rule: str  # leak, gave_up, contradicted, invented
    turn: int  # index of the message in the conversation
    why: str


@dataclass
class Secret:
    """Something only the user knows: `text` must not come from it before the agent said one of
    `asked` (any of these words or phrases, compared in normalised form); with `copy` the text is
    long and a run of MIN_COPIED_WORDS of its words counts as saying it."""

    text: str
    asked: tuple[str, ...] = ()
    copy: bool = False


def norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", str(text).lower()))


def says(text: str, phrase: str) -> bool:
    """Whether normalised `phrase` occurs in `text` as whole words."""
    phrase = norm(phrase)
    return bool(phrase) and f" {phrase} " in f" {norm(text)} "


def copies(text: str, secret: str, min_words: int = MIN_COPIED_WORDS) -> bool:
    """Whether `text` repeats a run of `min_words` consecutive words of `secret`."""
    words = norm(secret).split()
    padded = f" {norm(text)} "
    return any(
        f" {' '.join(words[i : i + min_words])} " in padded
        for i in range(len(words) - min_words + 1)
    )


def _guess(payload: dict) -> list[Secret]:
    target = str(payload.get("target", ""))
    return [Secret(target, (target,))] if target else []


def _telepathy(payload: dict) -> list[Secret]:
    names = [payload.get("name", ""), *payload.get("aliases", [])]
    return [Secret(n, tuple(names)) for n in names if n]


def _turtle(payload: dict) -> list[Secret]:
    return [Secret(payload["bottom"], (), copy=True)] if payload.get("bottom") else []


def _persuade(payload: dict) -> list[Secret]:
    return [
        Secret(p["point"], tuple(p.get("keywords", ())))
        for p in payload.get("points", [])
        if p.get("point")
    ]


def _intention(payload: dict) -> list[Secret]:
    return [
        Secret(d["answer"], tuple(d.get("keywords", ())) + (d.get("description", ""),))
        for d in payload.get("missing_details", [])
        if d.get("answer")
    ]


SECRETS: dict[str, Callable[[dict], list[Secret]]] = {
    "guess": _guess,
    "telepathy": _telepathy,
    "turtle": _turtle,
    "persuade": _persuade,
    "intention": _intention,
}


def register_secrets(gym: str, secrets: Callable[[dict], list[Secret]]) -> None:
    """Tell the checks what a gym's users must not reveal: `secrets(payload) -> [Secret]`."""
    SECRETS[gym] = secrets


def user_channel(message: dict) -> bool:
    """Whether the message is the simulated user speaking."""
    role = message.get("role")
    return role == "user" or (role == "tool" and message.get("name") in USER_CHANNEL_TOOLS)


def _ends_episode(message: dict) -> bool:
    """An `interact_with_env` call with choice `finish`: the env, not the user, answers it."""
    calls = message.get("tool_calls") or []
    args = (calls[0].get("function") or {}).get("arguments") if calls else None
    return isinstance(args, dict) and args.get("choice") == "finish"


def user_turns(messages: list[dict]) -> list[int]:
    """Indices of the user's turns after the agent's first message (the opening is the task's;
    the env's answer to `finish` is not the user's)."""
    turns, last = [], None
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            last = m
        elif last is not None and user_channel(m) and not _ends_episode(last):
            turns.append(i)
    return turns


def agent_text(message: dict) -> str:
    """What the agent said in a message: its text and its tool calls' arguments."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        args = (call.get("function") or {}).get("arguments")
        parts.append(args if isinstance(args, str) else " ".join(map(str, (args or {}).values())))
    return " ".join(parts)


def _leaks(messages: list[dict], secrets: list[Secret]) -> list[Finding]:
    found, agent_so_far, started = [], "", False
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            agent_so_far += " " + agent_text(m)
            started = True
            continue
        if not user_channel(m) or not started:  # the task's own prompt is public
            continue
        text = str(m.get("content") or "")
        for s in secrets:
            hit = copies(text, s.text) if s.copy else says(text, s.text)
            asked = any(says(agent_so_far, a) for a in (*s.asked, s.text) if a)
            if hit and not asked:
                found.append(Finding("leak", i, f"the user revealed {s.text[:80]!r} unasked"))
                break  # one finding per turn
    return found


def _gave_up(messages: list[dict], success: bool) -> list[Finding]:
    if success:
        return []
    found, last_agent = [], ""
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            last_agent = agent_text(m)
        elif user_channel(m) and i > 0:
            text = str(m.get("content") or "")
            quits = STOP_MARKER in text or QUIT.search(text.lower())
            if quits and not CLAIMS_DONE.search(last_agent.lower()):
                why = f"the user quit before the task was done: {text[:80]!r}"
                found.append(Finding("gave_up", i, why))
    return found


def _contradicted(gym: str, messages: list[dict], payload: dict) -> list[Finding]:
    if gym != "telepathy":
        return []
    names = [payload.get("name", ""), *payload.get("aliases", [])]
    for i in range(1, len(messages)):
        m, prev = messages[i], messages[i - 1]
        if not (user_channel(m) and prev.get("role") == "assistant"):
            continue
        question = agent_text(prev)
        reply = norm(m.get("content") or "")
        if (
            "?" in question
            and any(says(question, n) for n in names if n)
            and reply.startswith("no")
        ):
            return [
                Finding(
                    "contradicted", i, f"the user denied its own hidden answer: {question[:80]!r}"
                )
            ]
    return []


def _invented(messages: list[dict], payload: dict) -> list[Finding]:
    instruction = str(payload.get("instruction") or "")
    if not instruction:
        return []
    said = f"{instruction} {payload.get('user_id', '')}"  # the user's own id is its to give
    for i, m in enumerate(messages):
        text = str(m.get("content") or "")
        if user_channel(m) and m.get("role") == "user":
            for pattern in ID_PATTERNS:
                for token in pattern.findall(text):
                    if token not in said:
                        return [
                            Finding(
                                "invented",
                                i,
                                f"the user gave {token!r}, which its instruction does not hold",
                            )
                        ]
        said += " " + text + " " + agent_text(m)
    return []


def user_findings(row: dict, payload: dict, gym: str | None = None) -> list[Finding]:
    """Every finding about the user in `row`'s conversation (see the module docstring); `gym` is
    the gym's registered name (default: the row's gym label up to `@`)."""
    gym = gym or str(row.get("gym", "")).split("@", 1)[0]
    messages = list(row.get("messages") or [])
    secrets = SECRETS[gym](payload) if gym in SECRETS else []
    found = [
        *_leaks(messages, secrets),
        *_gave_up(messages, bool(row.get("success"))),
        *_contradicted(gym, messages, payload),
        *_invented(messages, payload),
    ]
    return sorted(found, key=lambda f: f.turn)
