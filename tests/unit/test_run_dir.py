"""mua writes only into folders it created (marker file) or empty ones."""

from __future__ import annotations

import pytest

from mua.errors import UsageError
from mua.output_folders import MARKER, claim_dir, is_claimed


def test_new_folder_is_created_and_marked(tmp_path):
    out = claim_dir(tmp_path / "a" / "b", what="eval output")
    assert out.is_dir() and is_claimed(out)


def test_empty_folder_is_marked(tmp_path):
    (tmp_path / "empty").mkdir()
    assert is_claimed(claim_dir(tmp_path / "empty", what="eval output"))


def test_marked_folder_is_accepted_again(tmp_path):
    out = claim_dir(tmp_path / "x", what="eval output")
    (out / "results.jsonl").write_text("{}\n")
    assert claim_dir(out, what="eval output") == out


def test_foreign_folder_is_refused_and_left_alone(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("precious")
    with pytest.raises(UsageError) as err:
        claim_dir(folder, what="eval output")
    message = str(err.value)
    assert str(folder) in message and "notes.txt" in message and MARKER in message
    assert "\n" not in message
    assert not is_claimed(folder)
    assert (folder / "notes.txt").read_text() == "precious"


def test_legacy_proof_adopts_an_older_mua_folder(tmp_path):
    folder = tmp_path / "global_step_3"
    folder.mkdir()
    (folder / "merge_info.json").write_text("{}")
    (folder / "model.safetensors").write_text("x")
    claim_dir(folder, what="merged model", legacy_proof=("merge_info.json",))
    assert is_claimed(folder)


def test_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="not a folder"):
        claim_dir(tmp_path / "f", what="eval output")
