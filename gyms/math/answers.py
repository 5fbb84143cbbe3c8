"""Final-answer detection and answer equivalence for the math gym.

Two readings of a response, one per rule set (`gym.options.rules`):

- upstream (MuTIS's generation loop): `upstream_cut(text)` is where MuTIS cuts a response: after
  the first `</answer>`; else, after a case-sensitive `Answer:`/`Final Answer:`, at the first
  blank line following it (no blank line: no cut); else after the first complete `\\boxed{...}`.
  `upstream_answer(text)`, applied to the cut text, takes the first `<answer>...</answer>`, else
  what follows the first `Answer:`/`Final Answer:` (any case) up to a blank line or the end,
  else the first `\\boxed{...}` (balanced braces; MuTIS's pattern stops at the first `}`). An
  empty answer still counts as an answer, as there.
- mua: `extract_final_answer(text)` finds the answer a response commits to: the last
  `\\boxed{...}` (balanced braces), else the last `<answer>...</answer>`, else what follows the
  last `Answer:` on its line; None when there is none (which triggers an intervention).

Both read only the text they are given, i.e. the response, never the prompt.

`answers_match(gold, predicted)` asks Math-Verify (`verify(gold, pred)`, gold first). Only when
Math-Verify raises does it fall back to a normalised string comparison, and it says so, so the
caller can count fallbacks. Math-Verify's timeouts use SIGALRM, which works only in the main
thread; elsewhere they are switched off.
"""

from __future__ import annotations

import re
import threading

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]*)", re.I)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def _last_boxed(text: str) -> str | None:
    found = None
    for m in _BOXED.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = text[m.end() : i - 1]
    return found


def extract_final_answer(text: str) -> str | None:
    text = text or ""
    for candidate in (
        _last_boxed(text),
        (_ANSWER_TAG.findall(text) or [None])[-1],
        (_ANSWER_LINE.findall(text) or [None])[-1],
    ):
        if candidate is not None and candidate.strip():
            return candidate.strip().rstrip(".").strip()
    return None


_CUT_ANSWER_LINE = re.compile(r"(?:Answer|Final Answer)\s*:")
_UPSTREAM_ANSWER_LINE = re.compile(r"(?:Answer|Final Answer)\s*:(.*?)(?=$|\n\n)", re.S | re.I)
_UPSTREAM_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def _first_boxed_end(text: str) -> tuple[int, int] | None:
    """(content start, closing brace) of the first `\\boxed{` whose braces balance, else None."""
    start = text.find("\\boxed{")
    if start < 0:
        return None
    depth, i = 1, start + len("\\boxed{")
    while i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return start + len("\\boxed{"), i
        i += 1
    return None


def upstream_cut(text: str) -> int | None:
    """Characters of `text` MuTIS keeps (None: it keeps everything)."""
    end = text.find("</answer>")
    if end >= 0:
        return end + len("</answer>")
    line = _CUT_ANSWER_LINE.search(text)
    if line:
        blank = text.find("\n\n", line.start())
        return blank if blank >= 0 else None
    boxed = _first_boxed_end(text)
    return boxed[1] + 1 if boxed else None


def upstream_answer(text: str) -> str | None:
    """The answer MuTIS's loop reads from (already cut) `text`; None: no answer, intervene."""
    for pattern in (_UPSTREAM_TAG, _UPSTREAM_ANSWER_LINE):
        found = pattern.search(text)
        if found:
            return found.group(1).strip()
    boxed = _first_boxed_end(text)
    return text[boxed[0] : boxed[1]].strip() if boxed else None


def normalise(answer: str) -> str:
    s = re.sub(r"\\(left|right|displaystyle|,|!|;)", "", answer)
    s = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"\1/\2", s)
    s = s.replace("$", "").replace(" ", "").replace("{", "").replace("}", "").lower()
    return s.rstrip(".").removeprefix("x=")


def answers_match(gold: str, predicted: str) -> tuple[bool, bool]:
    """(equal, used_fallback)."""
    from math_verify import parse, verify

    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout, raise_on_error=True)
        pred_parsed = parse(f"\\boxed{{{predicted}}}", parsing_timeout=timeout, raise_on_error=True)
        return bool(
            verify(gold_parsed, pred_parsed, timeout_seconds=timeout, raise_on_error=True)
        ), False
    except (
        Exception
    ):  # Math-Verify failed on this pair: compare normalised text instead, and report it
        return normalise(gold) == normalise(predicted), True
