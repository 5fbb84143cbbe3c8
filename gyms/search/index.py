"""The search backends: an offline BM25 index (rank-bm25) or an HTTP retriever endpoint.

- `gym.options.corpus_path`: a passage file, JSONL (one `{"title": ..., "text": ...}` object a
  line; `contents` is read as `text`) or parquet (columns `text` or `contents`, optional
  `title`), e.g. a Wikipedia dump cut into passages. Indexed once per path and process with
  rank-bm25's Okapi BM25 over lower-cased, lightly stemmed words, with the non-negative idf
  log(1 + (N − df + 0.5) / (df + 0.5)) (Lucene's): rank-bm25's own floor for words in more than
  half of the passages gives them a negative weight on small corpora, so they would rank a
  passage that has them below one that does not.
- `gym.options.retriever_url`: a retrieval server speaking the common dense-retriever protocol
  (see `retriever.py`).
- neither: the built-in fictional corpus (`corpus.py`), which only answers the built-in tasks.

Every backend answers `await search(query, k) -> [{"title", "text"}]`, best first. Online web
search is not implemented; a retriever server over a web-scale corpus is the way to get it.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from gyms.common.text import stem, tokens
from gyms.search.corpus import DOCUMENTS
from mua.errors import UsageError

_HINT = "set gym.options.corpus_path to a JSONL or parquet file of passages with a 'text' field"


def analyse(text: str) -> list[str]:
    return [stem(w) for w in tokens(text)]


def _okapi(corpus: list[list[str]]):
    from rank_bm25 import BM25Okapi

    class LuceneIdfOkapi(BM25Okapi):
        def _calc_idf(self, nd):  # rank-bm25's hook for the idf table
            n = self.corpus_size
            self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in nd.items()}

    return LuceneIdfOkapi(corpus)


class BM25Index:
    """Okapi BM25 (k1 1.5, b 0.75) over in-memory passages; only positive-score hits return."""

    def __init__(self, documents: list[dict]):
        self.documents = documents
        self.bm25 = _okapi([analyse(f"{d['title']} {d['text']}") for d in documents])

    def ranked(self, query: str, k: int) -> list[tuple[int, float]]:
        terms = analyse(query)
        if not terms:
            return []
        scores = self.bm25.get_scores(terms)
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [(i, float(scores[i])) for i in order[:k] if scores[i] > 0]

    async def search(self, query: str, k: int) -> list[dict]:
        return [self.documents[i] for i, _ in self.ranked(query, k)]


def _passage(file: Path, where: str, row) -> dict:
    text = row.get("text", row.get("contents")) if isinstance(row, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"{file}: {where} needs a string field 'text' (or 'contents'); {_HINT}")
    return {"title": str(row.get("title") or ""), "text": text}


def read_passages(file: Path) -> list[dict]:
    """The passages of a JSONL or parquet corpus file; bad input is a one-line UsageError."""
    if not file.is_file():
        raise UsageError(f"{file}: search corpus not found; {_HINT}")
    if file.suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(file).to_pylist()
        except Exception as e:  # pyarrow raises several types for a broken file
            raise UsageError(f"{file}: not a readable parquet file ({e})") from None
        documents = [_passage(file, f"row {i}", r) for i, r in enumerate(rows)]
    else:
        documents = []
        with file.open(encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    raise UsageError(f"{file}: line {line_no} is not valid JSON") from None
                documents.append(_passage(file, f"line {line_no}", row))
    if not documents:
        raise UsageError(f"{file}: the search corpus is empty")
    return documents


@functools.lru_cache(maxsize=1)
def builtin_index() -> BM25Index:
    return BM25Index(DOCUMENTS)


@functools.lru_cache(maxsize=4)
def _file_index(path: str, version: tuple) -> BM25Index:
    """Cached per path and file version (size, mtime), so an edited corpus is read again."""
    return BM25Index(read_passages(Path(path)))


def _version(file: Path) -> tuple:
    try:
        stat = file.stat()
    except OSError:
        return ()
    return (stat.st_size, stat.st_mtime_ns)


def get_backend(options: dict):
    """The backend `options` name (retriever_url, else corpus_path, else the built-in corpus)."""
    url, path = options.get("retriever_url"), options.get("corpus_path")
    if url and path:
        raise UsageError("search: set gym.options.retriever_url or corpus_path, not both")
    if url:
        from gyms.search.retriever import HTTPRetriever

        return HTTPRetriever(str(url), float(options.get("retriever_timeout_s", 30)))
    if not path:
        return builtin_index()
    file = Path(path).expanduser().resolve()
    return _file_index(str(file), _version(file))


def is_builtin(backend) -> bool:
    return backend is builtin_index()
