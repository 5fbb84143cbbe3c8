"""`python -m mua.demo --out DIR` claims DIR the way the verbs claim theirs: a folder holding
files a demo did not write is refused in one line (exit 2) and left as it was; a previous demo's
folder is emptied and reused. The phases themselves are stubbed out (the whole demo:
tests/integration/test_demo.py)."""

from __future__ import annotations

import pytest

from mua import demo


@pytest.fixture
def no_phases(monkeypatch):
    """run_demo with no phases and nothing to summarise: it stops right after claiming `out`."""
    monkeypatch.setattr(demo, "_phases", lambda *a, **k: [])
    monkeypatch.setattr(demo, "_guess_summary", lambda folder: {})
    monkeypatch.setattr(demo, "_write_view", lambda out: None)
    monkeypatch.setattr(demo, "print_report", lambda result: None)


def test_a_folder_with_a_user_file_is_refused_and_kept(tmp_path, no_phases, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert demo.main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: demo output {tmp_path} already holds files a demo did not write (notes.txt); "
        "give --out a new or empty folder, or a previous demo's folder"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_another_verbs_output_is_not_a_demo_output(tmp_path, no_phases, capsys):
    from mua.output_folders import claim_dir

    run = claim_dir(tmp_path / "run", what="run_dir")
    (run / "metrics.jsonl").write_text("{}\n")
    assert demo.main(["--out", str(run)]) == 2
    assert "already holds files a demo did not write (metrics.jsonl)" in capsys.readouterr().err
    assert (run / "metrics.jsonl").is_file()


def test_a_previous_demo_output_is_emptied_and_reused(tmp_path, no_phases):
    out = tmp_path / "demo"
    assert demo.main(["--out", str(out)]) == 0
    (out / "sft").mkdir()
    (out / "sft" / "old.txt").write_text("from the last demo")
    assert demo.main(["--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [".mua-dir", "logs"]
