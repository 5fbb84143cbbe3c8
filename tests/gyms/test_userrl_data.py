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


PUBLISHED = {
    "function": (460, 78),
    "telepathy": (360, 41),
    "turtle": (423, 48),
    "intention": (380, 40),
    "persuade": (378, 42),
}


@pytest.mark.parametrize("gym", sorted(PUBLISHED))
def test_prep_keeps_userrl_published_splits(shared_data, gym, tmp_path):
    """`mua prep --gym X --source <UserRL folder>` writes UserRL's own train/test rows."""
    import pyarrow.parquet as pq

    from data_prep.userrl_splits import FOLDERS, KEYS
    from mua.gym.prep import build_and_write
    from mua.gym.taskfile import read_tasks

    root = shared_data / "userrl"
    written = build_and_write(gym, tmp_path, source=str(root))
    assert (written["train"][1], written["test"][1]) == PUBLISHED[gym]
    # the same tasks as UserRL's test parquet, not just the same count
    test_rows = pq.read_table(root / "data" / FOLDERS[gym] / "test.parquet").to_pylist()
    want = {r["reward_model"][KEYS[gym]] for r in test_rows}
    got = read_tasks(tmp_path / "test.parquet")
    field = {"function": None, "telepathy": "name", "turtle": "title", "intention": None}.get(gym)
    if field is None:  # id-keyed gyms: the task id ends with the UserRL id
        assert {t.task_id.split("-", 1)[1] for t in got} == want
    else:
        assert {t.payload[field] for t in got} == want


def test_parquets_that_name_missing_tasks_are_one_line(shared_data, tmp_path):
    import shutil

    from gyms.function.data import build_tasks

    root = tmp_path / "userrl"
    (root / "data").mkdir(parents=True)
    shutil.copytree(
        shared_data / "userrl" / "data" / "function_multiturn", root / "data" / "function_multiturn"
    )
    rules = json.loads(
        (
            shared_data
            / "userrl"
            / "gyms"
            / "FunctionGym"
            / "functiongym"
            / "data"
            / "functions.json"
        ).read_text()
    )
    (root / "functions.json").write_text(json.dumps(rules[:100]))
    with pytest.raises(UsageError, match="task\\(s\\) of the published splits are not in the data"):
        build_tasks(source=root)
