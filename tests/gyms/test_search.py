"""Search gym: BM25 retrieval, exact-match reward, baselines, adversarial input, LLM judge, public data."""

from __future__ import annotations

import asyncio
import json

import pytest

from gyms.common.actions import parse_bracket_text
from gyms.common.checks import last_user_text, llm_context
from gyms.search import GYM
from gyms.search.index import BM25Index
from gyms.search.reward import exact_match
from mua.errors import UsageError
from mua.gym import GymContext, UserFailure
from tests.fakes.fake_openai import FakeOpenAIServer


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def tasks():
    return GYM.build_tasks()


def step(env, text):
    return run(env.step(parse_bracket_text(text)))


def test_bm25_ranks_by_term_rarity_and_frequency():
    texts = ["the cat sat", "the dog sat on the dog mat", "a bird", "the the the", "a fish swam"]
    index = BM25Index([{"title": "", "text": t} for t in texts])
    assert index.ranked("dog", 2)[0][0] == 1
    assert {i for i, _ in index.ranked("cat bird", 3)} == {0, 2}
    assert index.ranked("zebra", 3) == [] and index.ranked("!!", 3) == []
    scores = dict(index.ranked("sat dog", 5))
    assert scores[1] > scores[0] > 0 and 2 not in scores


def test_exact_match_normalisation():
    assert exact_match("The Drae Highlands.", ["Drae Highlands"])
    assert not exact_match("Drae", ["Drae Highlands"]) and not exact_match("", ["x"])


def test_search_then_answer(tasks):
    task = tasks["train"][0]
    env = GYM.make_env(GymContext(options={"rules": "mua"}))
    run(env.reset(task))
    hits = step(env, "[search] who founded the Royal Observatory of Brisa").messages[0]["content"]
    assert "Tilde Okafor" in hits and hits.count("\n") == 2
    assert "No results" in step(env, "[search] zzzz qqqq").messages[0]["content"]
    assert "not available" in step(env, "[action] hello").messages[0]["content"]
    wrong = step(env, "[answer] Brisa")
    assert wrong.reward == 0.0 and not wrong.done
    right = step(env, "[answer] varnholt")
    assert right.reward == 1.0 and right.done


def test_llm_judge_only_after_a_miss(tasks):
    task = next(t for t in tasks["test"] if t.payload["answers"][0] == "54 metres")
    with FakeOpenAIServer(
        lambda r: json.dumps({"correct": "54" in last_user_text(r)}), faults=["malformed"]
    ) as server:
        env = GYM.make_env(llm_context(server.base_url))
        run(env.reset(task))
        assert step(env, "[answer] 60 metres").reward == 0.0
        assert step(env, "[answer] fifty-four metres (54)").reward == 1.0
        assert server.total_requests == 3  # one malformed reply re-asked, then the second answer
    with FakeOpenAIServer(lambda r: "not json") as server:
        env = GYM.make_env(llm_context(server.base_url, max_retries=1))
        run(env.reset(task))
        assert step(env, "[answer] 54 metres").reward == 1.0  # exact match never asks the judge
        assert server.total_requests == 0
        run(env.reset(task))
        with pytest.raises(UserFailure):
            step(env, "[answer] 55")


def test_custom_corpus_and_bad_corpus(tmp_path, tasks):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps({"title": "Zed", "text": "Zed is a quiet planet."}) + "\n")
    env = GYM.make_env(GymContext(options={"corpus_path": str(corpus)}))
    run(env.reset(tasks["test"][0]))
    assert "Zed" in step(env, "[search] quiet planet").messages[0]["content"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    with pytest.raises(UsageError, match="line 1 is not valid JSON"):
        GYM.make_env(GymContext(options={"corpus_path": str(bad)}))
    table = tmp_path / "docs.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"contents": ["Quoll is a marsupial of Tasmania.", "Unrelated."]}), table
    )
    env = GYM.make_env(GymContext(options={"corpus_path": str(table), "rules": "mua"}))
    run(env.reset(tasks["test"][0]))
    hits = step(env, "[search] Tasmanian marsupial quoll").messages[0]["content"]
    assert hits.startswith("[1] : Quoll is a marsupial")
    pq.write_table(pa.table({"body": ["x"]}), table)
    with pytest.raises(UsageError, match="row 0 needs a string field 'text'"):
        GYM.make_env(GymContext(options={"corpus_path": str(table)}))


def test_public_bamboogle_loads(shared_data):
    splits = GYM.build_tasks(source=shared_data / "userrl")
    assert len(splits["test"]) == 125 and not splits["train"]
    assert all(t.payload["answers"][0] for t in splits["test"])


def test_bad_public_file(tmp_path):
    (tmp_path / "questions.json").write_text(json.dumps({"q": 1}))
    with pytest.raises(UsageError, match="expected a JSON list"):
        GYM.build_tasks(source=tmp_path)


def test_upstream_top_5_and_5_searches(tasks):
    env = GYM.make_env(GymContext())  # upstream rules: UserRL's top 5 and 5 searches
    run(env.reset(tasks["train"][0]))
    first = step(env, "[search] Brisa").messages[0]["content"]
    assert first.count("\n[") == 4 and first.endswith("\nReward: 0.0")
    for _ in range(4):
        assert "[1]" in step(env, "[search] Brisa").messages[0]["content"]
    capped = step(env, "[search] Brisa").messages[0]["content"]
    assert capped.startswith("You have reached the maximum number of search steps.")
    right = step(env, "[answer] Varnholt")
    assert right.reward == 1.0 and right.done


def test_public_questions_refuse_the_builtin_corpus(shared_data, tmp_path):
    task = GYM.build_tasks(source=shared_data / "userrl")["test"][0]
    with pytest.raises(UsageError, match="cannot be answered from the built-in corpus"):
        run(GYM.make_env(GymContext(options={"llm_judge": False})).reset(task))
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text(json.dumps({"title": "Note", "text": task.payload["question"]}) + "\n")
    env = GYM.make_env(GymContext(options={"llm_judge": False, "corpus_path": str(corpus)}))
    run(env.reset(task))
    assert "[1] Note" in step(env, f"[search] {task.payload['question']}").messages[0]["content"]


class _Retriever:
    """A dense-retriever-protocol server on 127.0.0.1 that records its requests."""

    def __init__(self, reply):
        import http.server
        import threading

        self.requests, outer = [], self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                status, payload = reply(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/retrieve"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_http_retriever_backend(tasks):
    docs = [{"document": {"contents": '"Quessa"\nQuessa is a mountain village.'}, "score": 0.9}]
    with _Retriever(lambda body: (200, {"result": [docs * body["topk"]]})) as server:
        env = GYM.make_env(GymContext(options={"retriever_url": server.url}))
        run(env.reset(tasks["train"][0]))
        hits = step(env, "[search] Quessa").messages[0]["content"]
    assert server.requests == [{"queries": ["Quessa"], "topk": 5, "return_scores": True}]
    assert hits.startswith("[1] Quessa: Quessa is a mountain village.") and hits.count("\n[") == 4
    with _Retriever(lambda body: (500, {"error": "down"})) as server:
        env = GYM.make_env(GymContext(options={"retriever_url": server.url}))
        run(env.reset(tasks["train"][0]))
        with pytest.raises(UserFailure, match="failed after 3 tries"):
            step(env, "[search] Quessa")
    assert len(server.requests) == 3
    with pytest.raises(UsageError, match="not both"):
        GYM.make_env(GymContext(options={"retriever_url": "http://x", "corpus_path": "y"}))
