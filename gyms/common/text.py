"""Small text utilities for the scripted users and judges: normalising, content words, matching.

Deliberately simple (lower-casing, a stop-word list, a crude suffix stemmer): the scripted
users must be deterministic and dependency-free, not clever. They do not handle negation,
paraphrase or synonyms; each gym's README says what that means for its judging.
"""

from __future__ import annotations

import re
import string

STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with from into onto about as is are was were be been
    being do does did doing have has had having it its it's this that these those there here i you he she
    we they me him her us them my your his our their what which who whom whose when where why how
    can could would should will shall may might must not no yes any some all each every other such
    than then so very too just only also more most less much many one ones thing something someone
    please tell know think guess ask question really kind sort story""".split()
)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation})


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and articles, squeeze spaces (exact-match normalisation)."""
    text = (text or "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def stem(word: str) -> str:
    """A crude suffix stripper so that 'killed', 'kills' and 'killing' meet."""
    for suffix in ("ing", "edly", "ed", "ies", "es", "s", "ly"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word


def tokens(text: str) -> list[str]:
    """Lower-cased alphanumeric words."""
    return re.findall(r"[a-z0-9]+", (text or "").lower())


def content_words(text: str) -> set[str]:
    """Stemmed words of `text` that carry meaning (no stop words, no one-letter words)."""
    return {stem(w) for w in tokens(text) if w not in STOPWORDS and len(w) > 1}


def mentions(text: str, phrase: str) -> bool:
    """Whether the normalised `phrase` occurs in `text` as whole words."""
    phrase_n = normalize_answer(phrase)
    return bool(phrase_n) and f" {phrase_n} " in f" {normalize_answer(text)} "


def keyword_hit(text: str, keyword: str) -> bool:
    """A keyword (one word or a phrase) matches `text` by stemmed words, all of them present."""
    wanted = content_words(keyword) or {stem(w) for w in tokens(keyword)}
    return bool(wanted) and wanted <= {stem(w) for w in tokens(text)}
