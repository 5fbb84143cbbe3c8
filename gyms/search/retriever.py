"""An HTTP retriever backend: `POST <url>` with `{"queries": [q], "topk": k, "return_scores": true}`.

This is the protocol of the dense-retrieval servers used for search agents (e.g. an E5 index
over Wikipedia): the answer is `{"result": [[{"document": {"contents": ...}, "score": ...}]]}`,
one list per query. `contents` is `"Title"\\ntext` by convention; a `title`/`text` pair is read
too. A failure after two retries raises `UserFailure`, so the trajectory is masked and counted
rather than scored 0. Requests go through the standard library in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from mua.gym import UserFailure

MAX_TRIES = 3


def _document(item) -> dict:
    doc = item.get("document", item) if isinstance(item, dict) else {}
    if not isinstance(doc, dict):
        raise ValueError("a result item has no document object")
    if isinstance(doc.get("text"), str):
        return {"title": str(doc.get("title") or ""), "text": doc["text"]}
    contents = doc.get("contents")
    if not isinstance(contents, str):
        raise ValueError("a result document has neither 'contents' nor 'text'")
    title, sep, text = contents.partition("\n")
    if not sep:
        return {"title": "", "text": contents}
    return {"title": title.strip().strip('"'), "text": text.strip()}


class HTTPRetriever:
    def __init__(self, url: str, timeout_s: float = 30.0):
        self.url, self.timeout_s = url, timeout_s

    def _post(self, query: str, k: int) -> dict:
        body = json.dumps({"queries": [query], "topk": k, "return_scores": True}).encode()
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read().decode("utf-8"))

    async def search(self, query: str, k: int) -> list[dict]:
        error = ""
        for attempt in range(MAX_TRIES):
            try:
                answer = await asyncio.to_thread(self._post, query, k)
                results = answer["result"][0] if answer.get("result") else []
                return [_document(item) for item in results][:k]
            except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
                error = f"{type(e).__name__}: {e}"
                await asyncio.sleep(0.05 * 2**attempt)
        raise UserFailure(f"retriever {self.url} failed after {MAX_TRIES} tries ({error})")
