"""A small Okapi BM25 index over an in-memory list of documents.

Tokens are lower-cased words with the shared light stemmer; stop words are kept (BM25's idf
already discounts them). Scores use the classic k1/b form with the non-negative idf variant
log(1 + (N − df + 0.5) / (df + 0.5)). Meant for corpora of up to tens of thousands of short
documents; no persistence, no phrase queries.
"""

from __future__ import annotations

import math
from collections import Counter

from gyms.common.text import stem, tokens


def analyse(text: str) -> list[str]:
    return [stem(w) for w in tokens(text)]


class BM25:
    def __init__(self, documents: list[str], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.term_counts = [Counter(analyse(d)) for d in documents]
        self.lengths = [sum(c.values()) for c in self.term_counts]
        self.avg_length = sum(self.lengths) / max(1, len(self.lengths)) or 1.0
        df: Counter = Counter()
        for counts in self.term_counts:
            df.update(counts.keys())
        n = len(documents)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[float]:
        terms = [t for t in set(analyse(query)) if t in self.idf]
        out = []
        for counts, length in zip(self.term_counts, self.lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_length)
            out.append(
                sum(
                    self.idf[t] * counts[t] * (self.k1 + 1) / (counts[t] + norm)
                    for t in terms
                    if t in counts
                )
            )
        return out

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Indices and scores of the `k` best documents with a positive score, best first."""
        ranked = sorted(((s, -i) for i, s in enumerate(self.scores(query)) if s > 0), reverse=True)[
            :k
        ]
        return [(-neg_i, s) for s, neg_i in ranked]
