"""A sampled turn read as the caller will see it: `read_turn` cuts the template's stop text and
any `stop` string (keeping the ids up to the one that completes the stop string) and reads tool
calls with the model family's reader.

The `stop` cut decodes in time linear in the reply: the text is searched once, and the token
that completes the stop string is found by decoding each token after a few tokens of context,
then checked with a decode of the prefix, so it is the smallest `k` whose `decode(ids[:k])`
holds a stop string, as a scan of every prefix would find. Pure (it records nothing and
touches no session), so the gateway runs it off the event loop.
Not here: sampling, the session's record (`mua.gateway.server`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mua.families.tool_calls import parse_action, prompt_opens_reasoning

CONTEXT_TOKENS = 4  # tokens decoded before each token, so its text reads as in the whole reply
MAX_PENDING = 4  # tokens one character may span (a UTF-8 character is at most 4 bytes)


@dataclass
class ReadTurn:
    """One sampled turn as returned: the ids and log-probs kept, the reply, how it ended."""

    ids: list[int]
    logprobs: list[float]
    content: str
    calls: list[dict]  # OpenAI shape, arguments as JSON text
    finish: str  # stop, length, tool_calls
    stopped: bool  # the engine's stop token ended it (the record keeps it)
    dropped: int  # ids sampled after a `stop` string
    malformed: bool  # markup that could not be read, or a call of a tool not offered
    stop_string: str = ""  # the `stop` string that ended it, if one did


def first_stop(text: str, stops: list[str]) -> int | None:
    """Where the earliest of `stops` starts in `text` (None: none occurs)."""
    found = [text.index(s) for s in stops if s in text]
    return min(found) if found else None


def settled_ends(decode: Callable[[list[int]], str], ids: list[int]) -> Iterator[int]:
    """For k = 1, 2, ...: the length of `decode(ids[:k])` without a character still incomplete
    at its end (a trailing U+FFFD), each token decoded after at most CONTEXT_TOKENS before it."""
    settled, start, anchor, head = 0, 0, 0, ""
    for k in range(1, len(ids) + 1):
        piece = decode(ids[anchor:k])
        if piece.endswith("\ufffd") and k - start < MAX_PENDING:
            yield settled
            continue
        settled += len(piece) - len(head)
        start, anchor = k, max(0, k - CONTEXT_TOKENS)
        head = decode(ids[anchor:k])
        yield settled


def stop_cut(decode: Callable[[list[int]], str], ids: list[int], text: str, stops: list[str]):
    """(k, at) when a stop string occurs in `text` (the decoded reply): `at` where the text is
    cut, `k` the smallest count of ids whose decode holds a stop string; None otherwise."""
    at = first_stop(text, stops)
    if at is None:
        return None
    end = min(text.index(s) + len(s) for s in stops if s in text)
    k = next((k for k, e in enumerate(settled_ends(decode, ids), 1) if e >= end), len(ids))

    def holds(n: int) -> bool:
        return first_stop(decode(ids[:n]), stops) is not None

    while k < len(ids) and not holds(k):  # both walks are a check: at most a step in practice
        k += 1
    while k > 1 and holds(k - 1):
        k -= 1
    return k, at


def _calls(
    text: str, tools: list[dict], tool_parser: str, template, reasoning_open: bool
) -> tuple[str, list, bool]:
    """(content, OpenAI tool calls, malformed) of a reply that was offered `tools`."""
    action = parse_action(text, tool_parser, tools, template, reasoning_open=reasoning_open)
    offered = {t["function"]["name"] for t in tools}
    readable = not action.parse_errors and all(c.name in offered for c in action.tool_calls)
    if not (action.tool_calls and readable):
        return text, [], not readable
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
        }
        for c in action.tool_calls
    ]
    return action.text, calls, False


def read_turn(renderer, result, req, tool_parser: str, template, prompt_tail: str = "") -> ReadTurn:
    """The engine's `result` for the chat request `req` as the caller sees it (module docstring).

    `prompt_tail`: the end of the rendered prompt; one that opens `<think>` makes the reply
    reasoning up to its `</think>`. A reply cut by the token budget returns no calls: its text
    comes back as written with `finish_reason: length`, counted malformed when it held any."""
    ids, logprobs = list(result.token_ids), list(result.logprobs)
    stopped = result.finish_reason == "stop"
    text = renderer.decode(ids)
    stop_text = renderer.stop_text
    if stop_text and text.endswith(stop_text):
        text = text[: -len(stop_text)]
    finish, dropped, stop_string = ("stop" if stopped else "length"), 0, ""
    cut = stop_cut(renderer.decode, ids, text, req.stop) if req.stop else None
    if cut is not None:  # keep the ids up to the one that completes the stop string
        k, at = cut
        stop_string = next(s for s in req.stop if text.startswith(s, at))
        dropped, ids, logprobs = len(ids) - k, ids[:k], logprobs[:k]
        text, finish, stopped = text[:at], "stop", False
    content, calls, malformed = text, [], False
    if req.tools and req.parse_tools:
        opened = prompt_opens_reasoning(prompt_tail)
        content, calls, malformed = _calls(text, req.tools, tool_parser, template, opened)
        if finish == "length" and (calls or malformed):  # the last call cannot be known whole
            content, calls, malformed = text, [], True
        finish = "tool_calls" if calls else finish
    return ReadTurn(ids, logprobs, content, calls, finish, stopped, dropped, malformed, stop_string)
