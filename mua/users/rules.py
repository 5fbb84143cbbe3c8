"""Deterministic checks of a simulated user's turns against its task: where the user broke its role.

`user_findings(row, payload)` reads one result row's user turns (`user` messages and
`interact_with_env` replies) and returns every finding in order, at most one per rule per turn:
`leak`, `gave_up`, `contradicted`, `invented` (docs/user_population.md, "Failure blame"). Secrets
are known per gym (`SECRETS`; plugins call `register_secrets`). Pure functions, no I/O.
Not here: the failure's label (`mua.eval.blame`), a user's fidelity score (`mua.eval.audit`).
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
NEAR = 4  # a one-word answer is stated as that answer when its detail is named this close to it
# endings a question's word may add to a keyword (which may be a stem: `sourc` asks "sources")
INFLECTIONS = ("ing", "ies", "ed", "es", "s", "e", "ly")
FUNCTION_WORDS = frozenset(
    "a an and are at by do for how in is it many much my of on or per the their to what when "
    "where which who whose why with you your".split()
)


@dataclass
class Finding:
    rule: str  # leak, gave_up, contradicted, invented
    turn: int  # index of the message in the conversation
    why: str


@dataclass
class Secret:
    """Something only the user knows: `text` must not come from it before the agent said it or
    one of `asked` (any of these words or phrases, compared in normalised form); with `copy` the
    text is long and a run of MIN_COPIED_WORDS of its words counts as saying it.

    With `answer` the text is the answer to a question the agent is to ask (intention's missing
    details), and `asked` names that question's subject (its keywords and description). Then a
    leak means stating that answer, as that answer, to a question about something else:
    - the agent asked when its text holds every word of one of `asked`, in any order and any
      inflection (as the gym's scripted judge reads a question: `sourc` is asked by "sources");
    - a one-word answer ("nothing", "modern", "nurse") is an everyday word too: it is stated only
      with its subject named within NEAR words ("Things to keep: nothing", "a modern style"),
      never by "nothing else" or "modern, nothing flashy";
    - a reply to an agent message that names no answer's subject may state one answer, the
      first it says: the question asked for it in its own words (an LLM judge covers paraphrases
      the keywords miss)."""

    text: str
    asked: tuple[str, ...] = ()
    copy: bool = False
    answer: bool = False


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


def _root(word: str) -> str:
    """`word` less its inflections, stripped while three letters stay (`sources`, `source` and
    the stem `sourc` share `sourc`; `hobbies` and `hobby` share `hobby`)."""
    while True:
        for suffix in INFLECTIONS:
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
                break
        else:
            return word


def _form_of(word: str, key: str) -> bool:
    """Whether `word` is a form of the keyword `key` (which may be a stem)."""
    return word == key or _root(word) == _root(key)


def all_words_in(text: str, phrase: str) -> bool:
    """Whether every word of `phrase` occurs in `text`, in any order and inflection."""
    words = norm(text).split()
    wanted = norm(phrase).split()
    return bool(wanted) and all(any(_form_of(w, k) for w in words) for k in wanted)


def _subject_words(secret: Secret) -> set[str]:
    """The words that name what an answer answers: those of `asked`, less function words and
    the answer's own words."""
    own = set(norm(secret.text).split())
    words = {w for phrase in secret.asked for w in norm(phrase).split()}
    return {w for w in words - own - FUNCTION_WORDS if len(w) > 1}


def _named_near(text: str, word: str, subject: set[str]) -> bool:
    """Whether a subject word occurs within NEAR words of an occurrence of `word` in `text`."""
    words = norm(text).split()
    for i, w in enumerate(words):
        near = words[max(0, i - NEAR) : i] + words[i + 1 : i + NEAR + 1]
        if w == word and any(_form_of(n, key) for n in near for key in subject):
            return True
    return False


def stated(text: str, secret: Secret) -> bool:
    """Whether the user's `text` states `secret` (see `Secret`)."""
    if secret.copy:
        return copies(text, secret.text)
    if not says(text, secret.text):
        return False
    word = norm(secret.text)
    if secret.answer and " " not in word:
        return _named_near(text, word, _subject_words(secret))
    return True


def asked(agent: str, secret: Secret) -> bool:
    """Whether the agent's text `agent` said `secret` or asked about it."""
    match = all_words_in if secret.answer else says
    return says(agent, secret.text) or any(match(agent, a) for a in secret.asked if a)


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
        Secret(d["answer"], tuple(d.get("keywords", ())) + (d.get("description", ""),), answer=True)
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


def agent_text(message: dict, choice: bool = True) -> str:
    """What the agent said in a message: its text and its tool calls' arguments (without the
    `choice` of a call to the user's channel when `choice` is False: `action` is no word said)."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, dict) and not choice and fn.get("name") in USER_CHANNEL_TOOLS:
            args = {k: v for k, v in args.items() if k != "choice"}
        parts.append(args if isinstance(args, str) else " ".join(map(str, (args or {}).values())))
    return " ".join(parts)


def _unasked(text: str, said: str, secrets: list[Secret], skip: set[int]) -> list[int]:
    """The secrets `text` states that the agent's `said` did not, in the order `text` says them
    (words that answer an asked detail, "no preference", reveal no other detail they answer)."""
    public = {norm(s.text) for s in secrets if asked(said, s)}
    hits = [
        k
        for k, s in enumerate(secrets)
        if k not in skip and norm(s.text) not in public and stated(text, s)
    ]
    padded = f" {norm(text)} "
    return sorted(hits, key=lambda k: padded.find(f" {norm(secrets[k].text)} ") % (len(padded) + 1))


def _leaks(messages: list[dict], secrets: list[Secret]) -> list[Finding]:
    found, said, last, answered = [], "", None, set()
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            last = agent_text(m, choice=False)
            said += " " + last
            continue
        if not user_channel(m) or last is None:  # the task's own prompt is public
            continue
        hits = _unasked(str(m.get("content") or ""), said, secrets, answered)
        if (
            hits
            and secrets[hits[0]].answer
            and not any(asked(last, s) for s in secrets if s.answer)
        ):
            answered.add(hits.pop(0))  # the answer to a question put in other words
        if hits:
            text = secrets[hits[0]].text
            found.append(Finding("leak", i, f"the user revealed {text[:80]!r} unasked"))
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
