"""The search backend: BM25 over the built-in corpus or a user-supplied JSONL corpus.

`gym.options.corpus_path` names a JSONL file of {"title": ..., "text": ...} documents (e.g. a
Wikipedia subset for Bamboogle); without it the built-in corpus is used. Indexes are built once
per path and process. Online web search is not implemented here.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from gyms.search.bm25 import BM25
from gyms.search.corpus import DOCUMENTS
from mua.errors import UsageError


class SearchIndex:
    def __init__(self, documents: list[dict]):
        self.documents = documents
        self.bm25 = BM25([f"{d['title']} {d['text']}" for d in documents])

    def search(self, query: str, k: int) -> list[dict]:
        return [self.documents[i] for i, _ in self.bm25.top(query, k)]


@functools.lru_cache(maxsize=1)
def builtin_index() -> SearchIndex:
    return SearchIndex(DOCUMENTS)


@functools.lru_cache(maxsize=4)
def _file_index(path: str) -> SearchIndex:
    file = Path(path)
    if not file.is_file():
        raise UsageError(
            f"{file}: search corpus not found; set gym.options.corpus_path to a JSONL file of {{title, text}}"
        )
    documents = []
    with file.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise UsageError(f"{file}: line {line_no} is not valid JSON") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise UsageError(
                    f"{file}: line {line_no} needs a string field 'text' (and optionally 'title')"
                )
            documents.append({"title": str(row.get("title", "")), "text": row["text"]})
    if not documents:
        raise UsageError(f"{file}: the search corpus is empty")
    return SearchIndex(documents)


def get_index(options: dict) -> SearchIndex:
    path = options.get("corpus_path")
    return _file_index(str(Path(path).expanduser().resolve())) if path else builtin_index()
