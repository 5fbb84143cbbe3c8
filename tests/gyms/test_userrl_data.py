"""data_prep.userrl readers: expected public counts, and one-line UsageErrors on bad paths and rows."""

from __future__ import annotations

import json

import pytest

from data_prep import userrl
from mua.errors import UsageError


def test_public_counts(shared_data):
    root = shared_data / "userrl"
    assert len(userrl.read_function_rules(root)) == 538
    assert len(userrl.read_telepathy_entities(root)) == 401
    assert len(userrl.read_turtle_stories(root)) == 471
    assert len(userrl.read_intentions(root, "train")) == 1012
    assert len(userrl.read_intentions(root, "test")) == 95
    assert len(userrl.read_search_questions(root)) == 125


def test_missing_paths_name_the_file(tmp_path):
    with pytest.raises(UsageError, match="no functions.json found under this folder"):
        userrl.read_function_rules(tmp_path)
    with pytest.raises(UsageError, match="not found; pass questions.json"):
        userrl.read_search_questions(tmp_path / "nope")


def test_bad_rows_are_one_line(tmp_path):
    f = tmp_path / "functions.json"
    f.write_text(
        json.dumps(
            [{"id": "a", "rule": "a+b", "test_case": [1, 2, "x", 4], "expected_result": 1.0}]
        )
    )
    with pytest.raises(UsageError, match="test_case must be four numbers") as err:
        userrl.read_function_rules(f)
    assert "\n" not in str(err.value)
    f.write_text(json.dumps([{"id": "a", "question": "q", "answer": 5}]))
    with pytest.raises(UsageError, match="field 'answer' has type int"):
        userrl.read_search_questions(f)
