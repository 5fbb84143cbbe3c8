"""`mua view`: what training writes to the run dir reads back into one self-contained page with
steps, filters, trained tokens, side-by-side checkpoints and reward curves. The page is parsed;
where Chromium is installed it is also opened headless in a given state (filters, comparison)."""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mua.rollout.transcript import TokenRecord, Trajectory
from mua.track.run_files import append_metrics, read_metrics, write_transcripts


def _traj(task: str, sample: int, reward: float, termination: str) -> Trajectory:
    return Trajectory(
        task_id=task,
        group_id=task,
        sample_index=sample,
        record=TokenRecord(
            token_ids=[10, 11, 12, 13, 14],
            sources=["prompt", "prompt", "assistant", "user", "assistant"],
            loss_mask=[0, 0, 1, 0, 1],
        ),
        turn_rewards=[reward],
        reward=reward,
        termination=termination,
        messages=[
            {"role": "system", "content": "Guess my number."},
            {"role": "assistant", "content": f"[answer] {sample}"},
        ],
        num_turns=1,
    )


@pytest.fixture
def runs(tmp_path):
    from mua.models import load_tokenizer

    tok = load_tokenizer("tiny:qwen3-1m")
    run = tmp_path / "rl"
    run.mkdir()
    (run / "recipe.resolved.yaml").write_text("verb: train\n")
    write_transcripts(
        run, 1, [_traj("t0", 0, 0.0, "max_turns"), _traj("t1", 0, 1.0, "done")], "guess", tok
    )
    write_transcripts(
        run, 2, [_traj("t0", 0, 1.0, "done"), _traj("t2", 0, 0.0, "done")], "guess", tok
    )
    for step, reward in ((1, 0.25), (2, 0.5), (2, 0.75)):  # step 2 logged twice (a resume)
        append_metrics(run, step, {"reward/mean": reward, "loss": 1.0, "bad": float("nan")})
    ev = tmp_path / "eval_x"
    ev.mkdir()
    row = {
        "gym": "travel",
        "task_id": "v0",
        "sample_index": 0,
        "reward": 0.5,
        "termination": "done",
        "num_turns": 2,
        "messages": [{"role": "user", "content": "hi"}],
    }
    (ev / "results.jsonl").write_text(json.dumps(row) + "\n")
    (ev / "eval_config.json").write_text(json.dumps({"model": "some/model"}))
    return tmp_path


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.articles, self.trained, self.polylines, self.options = [], 0, [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "article":
            self.articles.append(a)
        if tag == "span" and a.get("class") == "k-trained":
            self.trained += 1
        if tag == "polyline":
            self.polylines.append(a)
        if tag == "option":
            self.options.append(a.get("value"))


def test_run_files_read_back_the_last_record_of_each_step(runs):
    metrics = read_metrics(runs / "rl")
    assert [m["step"] for m in metrics] == [1, 2] and metrics[1]["reward/mean"] == 0.75
    assert "bad" not in metrics[0]


def test_page_holds_every_transcript_with_filters_tokens_and_curves(runs):
    from mua.view.page import write_page
    from mua.view.sources import load_view_data

    path = write_page(load_view_data([runs]), runs / "view.html", "t")
    page = _Page()
    page.feed(path.read_text())
    assert len(page.articles) == 5
    assert {a["data-ckpt"] for a in page.articles} == {"rl@1", "rl@2", "eval_x"}
    assert {a["data-termination"] for a in page.articles} == {"done", "max_turns"}
    assert {a["data-gym"] for a in page.articles} == {"guess", "travel"}
    assert page.trained == 4 * 2  # two runs of trained tokens in each training transcript
    (curve,) = page.polylines
    assert curve["data-series"] == "reward/mean" and len(curve["points"].split()) == 2
    assert {"rl@1", "rl@2", "eval_x"} <= set(page.options)
    assert "http" not in path.read_text().split("<script>")[1]  # nothing fetched from anywhere


def test_validation_transcripts_are_their_own_checkpoint_after_their_step(runs):
    from mua.models import load_tokenizer
    from mua.view.page import write_page
    from mua.view.sources import load_view_data

    tok = load_tokenizer("tiny:qwen3-1m")
    held_out = [_traj("v0", 0, 1.0, "done"), _traj("v1", 0, 0.0, "max_turns")]
    write_transcripts(runs / "rl", 1, held_out, "guess", tok, kind="val")
    data = load_view_data([runs])
    keys = [c.key for c in data.checkpoints]
    assert keys == ["eval_x", "rl@1", "rl:val@1", "rl@2"]
    assert "val@1" in data.checkpoints[2].label
    page = _Page()
    page.feed(write_page(data, runs / "view.html", "t").read_text())
    val = [a for a in page.articles if a["data-ckpt"] == "rl:val@1"]
    assert sorted(a["data-task"] for a in val) == ["v0", "v1"]
    assert "rl:val@1" in page.options
    assert page.trained == 6 * 2  # validation transcripts keep their token stream too


def test_view_cli_writes_the_page_and_refuses_an_empty_folder(runs, tmp_path, mua_cli):
    code, out, err = mua_cli("view", str(runs))
    assert code == 0, err
    assert (runs / "view.html").exists() and "5 transcripts" in out
    (tmp_path / "empty").mkdir()
    code, out, err = mua_cli("view", str(tmp_path / "empty"))
    assert code == 2 and "no training run or evaluation" in err


def test_view_writes_over_its_own_page_only(runs, tmp_path, mua_cli):
    notes = tmp_path / "notes.html"
    notes.write_text("my notes")
    code, out, err = mua_cli("view", str(runs), "--out", str(notes))
    assert code == 2 and "mua did not write" in err and str(notes) in err
    assert notes.read_text() == "my notes"  # nothing lost
    pages = tmp_path / "pages"
    for _ in range(2):  # a new folder (made and marked), then its own page again
        code, out, err = mua_cli("view", str(runs), "-o", str(pages / "p.html"))
        assert code == 0 and "5 transcripts" in out, err
    assert (pages / ".mua-dir").is_file() and '"transcripts": 5' in (pages / "p.html").read_text()
    code, out, err = mua_cli("view", str(runs), "--out", str(pages))  # a folder: view.html in it
    assert code == 0 and (pages / "view.html").is_file(), err


def _chromium() -> str | None:
    return next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )


def _dom(browser: str, page: Path, fragment: str) -> str:
    res = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=3000",
            "--dump-dom",
            f"{page.resolve().as_uri()}#{fragment}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-1000:]
    return res.stdout


def test_page_in_a_headless_browser_filters_and_compares(runs):
    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium installed (apt-get install -y chromium) to drive the page")
    from mua.view.page import write_page
    from mua.view.sources import load_view_data

    path = write_page(load_view_data([runs]), runs / "view.html", "t")
    dom = _dom(browser, path, "term=done&min=0.5")
    shown = [a for a in _articles(dom) if "hidden" not in a]
    assert len(shown) == 3 and all(a["data-termination"] == "done" for a in shown)
    assert all(float(a["data-reward"]) >= 0.5 for a in shown)
    dom = _dom(browser, path, "a=rl%401&b=rl%402")
    assert dom.count('class="pair"') == 1 and 'data-key="guess/t0/0"' in dom  # t0 in both steps


def _articles(dom: str) -> list[dict]:
    page = _Page()
    page.feed(dom.split('id="compare"')[1] if 'id="compare"' in dom else dom)
    return page.articles
