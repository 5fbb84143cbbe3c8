"""A new user's first hour: hub ids resolved before anything starts, gym budgets, eval naming its
model, usage errors with exit 2 and a did-you-mean, `--version`, quiet libraries, progress with an
ETA and the right header after a resume, collapsed system prompts, one span per token run, and
the `mlflow ui` command that works for the install."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mua.errors import RunFailure, UsageError
from mua.models.model_loading import resolve
from tests.conftest import installed_mua, user_env

REPO = Path(__file__).resolve().parents[2]


def _cli(*args, env=None):
    res = subprocess.run(
        [sys.executable, "-m", "mua.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=300,
    )
    return res.returncode, res.stdout, res.stderr


# ---- 1: model and tokenizer locations -------------------------------------------------------


def test_unknown_tiny_preset_is_a_usage_error():
    with pytest.raises(UsageError, match="did you mean tiny:qwen3-1m"):
        resolve("tiny:qwen3-1n", "tokenizer")


def test_doctor_fails_an_unknown_model():
    from mua.cli.doctor_cmd import check_template

    check = check_template("tiny:nope")
    assert check.status == "fail" and "unknown tiny model" in check.detail


def test_offline_hub_id_not_in_cache_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    t0 = time.perf_counter()
    with pytest.raises(UsageError) as err:
        resolve("someorg/some-model", "model")
    assert time.perf_counter() - t0 < 2.0  # no retries
    message = str(err.value)
    assert "\n" not in message and "someorg/some-model" in message
    assert "huggingface-cli download someorg/some-model" in message and "model.path" in message


def test_offline_hub_id_in_the_cache_resolves(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--someorg--some-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "tokenizer.json").write_text("{}")
    assert resolve("someorg/some-model", "tokenizer") == "someorg/some-model"
    with pytest.raises(UsageError, match="not in the local Hugging Face cache"):
        resolve("someorg/some-model", "model")  # no config.json cached
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    assert resolve("someorg/some-model", "model") == "someorg/some-model"


def test_unreachable_hub_fails_fast_at_run_time(tmp_path, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    _online(monkeypatch)
    with pytest.raises(RunFailure, match=r"did not answer \(Connect"):
        resolve("someorg/some-model", "model")


def _online(monkeypatch):
    """Downloads allowed, also for a huggingface_hub imported while HF_HUB_OFFLINE=1 was set (it
    reads the variable once, at import)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.mark.parametrize(
    ("status", "delay_s", "error", "message"),
    [
        (200, 0.0, None, None),
        (404, 0.0, UsageError, "no such model on the hub"),
        (403, 0.0, RunFailure, r"private or gated on the hub \(HTTP 403\)"),
        (500, 0.0, RunFailure, r"did not answer \(HTTP 500\)"),
        (200, 6.0, RunFailure, "did not answer"),
    ],
)
def test_the_hub_is_asked_once_and_must_answer_within_its_timeout(
    tmp_path, monkeypatch, status, delay_s, error, message
):
    import http.server
    import threading

    paths = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            paths.append(self.path)
            time.sleep(delay_s)
            body = b'{"id": "someorg/some-model", "sha": "abc123"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    _online(monkeypatch)
    t0 = time.perf_counter()
    try:
        if error is None:
            assert resolve("someorg/some-model", "model") == "someorg/some-model"
        else:
            with pytest.raises(error, match=message) as err:
                resolve("someorg/some-model", "model")
            assert "\n" not in str(err.value)
    finally:
        server.shutdown()
        server.server_close()
    assert time.perf_counter() - t0 < 5.0  # the probe waits 2 s, not the slow hub's 6 s
    assert len(paths) == 1 and paths[0].startswith("/api/models/someorg/some-model")


def test_train_launcher_refuses_an_uncached_hub_model_before_any_rank(tmp_path, monkeypatch):
    from mua.config import load_recipe
    from mua.gym import get_gym
    from mua.gym.taskfile import write_tasks
    from mua.train.launcher import check_inputs

    tasks = get_gym("guess").build_tasks(None, seed=0, options={})["train"][:4]
    write_tasks(tasks, tmp_path / "train.parquet")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    recipe = load_recipe(
        None,
        [f"data.train_files=[{tmp_path / 'train.parquet'}]", "model.path=someorg/some-model"],
        verb="train",
    )
    with pytest.raises(UsageError, match="someorg/some-model"):
        check_inputs(recipe)


# ---- 2: budgets and eval's model --------------------------------------------------------------


def test_gym_budgets_fill_only_what_the_recipe_left_unset():
    from mua.config import load_recipe
    from mua.gym import get_gym
    from mua.gym.budgets import with_gym_budgets

    travel = get_gym("travel")
    recipe = load_recipe(None, [], verb="eval")
    rollout = with_gym_budgets(recipe.rollout, travel)
    assert (rollout.max_turns, rollout.max_total_tokens) == (16, 8192)
    recipe = load_recipe(None, ["rollout.max_turns=3"], verb="eval")
    rollout = with_gym_budgets(recipe.rollout, travel)
    assert rollout.max_turns == 3 and rollout.max_total_tokens == 8192


def test_every_gym_declares_budgets():
    from mua.gym import get_gym
    from mua.gym.registry import list_gyms

    for name in list_gyms():
        assert {"max_turns", "max_total_tokens"} <= set(get_gym(name).budgets), name


def test_eval_without_a_model_or_a_finished_run_lists_the_choices(tmp_path):
    res = subprocess.run(
        [installed_mua(), "eval", "--gym", "travel"],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # no ./runs here
        env=user_env(),
        timeout=300,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no finished training run under ./runs" in res.stderr and "--model" in res.stderr


def test_eval_without_a_model_takes_the_newest_finished_run(tmp_path):
    from mua.models.model_loading import load_model, load_tokenizer
    from mua.models.saving import save_hf

    model, tokenizer = load_model("tiny:qwen3-1m"), load_tokenizer("tiny:qwen3-1m")
    for i, name in enumerate(["older", "newer", "unfinished"]):
        final = save_hf(model, tokenizer, tmp_path / "runs" / name / "hf" / "final")
        if name != "unfinished":  # merge_info.json is what a finished export writes last
            (final / "merge_info.json").write_text("{}")
            os.utime(final / "merge_info.json", (1_000_000 + i, 1_000_000 + i))
    res = subprocess.run(
        [
            installed_mua(),
            "eval",
            "--gym",
            "guess",
            "--max-tasks",
            "1",
            "-n",
            "1",
            "--no-mlflow",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=user_env(COLUMNS="400"),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    first = res.stdout.splitlines()[0]
    assert "runs/newer/hf/final" in first and "--model" in first, first


# ---- 6: usage errors and --version ------------------------------------------------------------


def test_mistyped_option_exits_2_with_a_did_you_mean():
    code, out, err = _cli("eval", "--gyms", "travel")
    assert code == 2
    assert "--gyms" in err and "did you mean --gym" in err and len(err.strip().splitlines()) == 1


def test_mistyped_verb_exits_2():
    code, out, err = _cli("evl")
    assert code == 2 and "eval" in err


def test_version():
    from mua import __version__

    code, out, err = _cli("--version")
    assert code == 0 and out.strip() == f"mua {__version__}"


# ---- 7: quiet by default ----------------------------------------------------------------------


def test_quiet_libraries_sets_the_variables_children_inherit(monkeypatch):
    from mua.track import console

    for key in [*console.QUIET_ENV, "MUA_VERBOSE"]:
        monkeypatch.delenv(key, raising=False)
    console.quiet_libraries()
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert os.environ["MLFLOW_LOGGING_LEVEL"] == "WARNING"
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "error"
    for key in console.QUIET_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MUA_VERBOSE", "1")
    console.quiet_libraries()
    assert "MLFLOW_LOGGING_LEVEL" not in os.environ


def test_loading_and_saving_a_model_prints_no_bars_or_warnings(tmp_path):
    script = (
        "from mua.track.console import quiet_libraries; quiet_libraries()\n"
        "from mua.models import load_model, load_tokenizer, save_hf\n"
        f"save_hf(load_model('tiny:qwen3-1m'), load_tokenizer('tiny:qwen3-1m'), r'{tmp_path / 'm'}')\n"
        f"load_model(r'{tmp_path / 'm'}')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MUA_VERBOSE"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert res.returncode == 0, res.stderr
    noise = res.stdout + res.stderr
    assert "it/s" not in noise and "Warning" not in noise and "Loading weights" not in noise


# ---- 5: progress ------------------------------------------------------------------------------


def test_eta_counts_only_this_process_steps():
    from mua.track.console import StepEta, format_duration

    now = [100.0]
    eta = StepEta(total_steps=50, clock=lambda: now[0])
    assert eta.seconds_left() is None
    now[0] += 20.0  # resumed at step 25: steps 26 and 27 take 10 s each
    eta.mark(26)
    eta.mark(27)
    assert eta.seconds_left() == pytest.approx(23 * 10.0)
    assert format_duration(230) == "3m50s" and format_duration(42) == "42s"


def test_step_line_has_an_eta_and_the_live_header_counts_steps_not_rows(capsys):
    from mua.track.console import StepConsole

    plain = StepConsole(total_steps=50, live=False)
    plain.step(26, {"loss": 1.0, "reward/mean": 0.5})
    assert "step 26/50" in capsys.readouterr().out
    live = StepConsole(total_steps=50, live=True)
    live._rows = [(49, {"loss": 1.0}), (50, {"loss": 0.9})]  # a run resumed at step 48
    assert live._table().title == "mua train (step 50/50)"


def test_step_line_off_a_terminal_ends_with_the_eta(capsys):
    from mua.track.console import StepConsole

    con = StepConsole(total_steps=10, live=False)
    con.step(1, {"loss": 1.0})
    con.step(2, {"loss": 1.0})
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("step 2/10 ") and " eta=" in lines[-1]


def test_rollout_progress_has_an_eta_column():
    from rich.progress import TimeRemainingColumn

    from mua.rollout.progress import progress_columns

    assert any(isinstance(c, TimeRemainingColumn) for c in progress_columns())


# ---- 4: the MLflow UI command -----------------------------------------------------------------


def _fake_mlflow(tmp_path, monkeypatch, *, with_ui: bool) -> None:
    """Make `importlib.util.find_spec` see an mlflow package at tmp_path (and flask): with the
    UI's built pages (full mlflow) or without them (mlflow-skinny)."""
    import importlib.machinery
    import importlib.util

    fake = tmp_path / "mlflow"
    (fake / "server" / "js" / "build").mkdir(parents=True, exist_ok=True)
    if with_ui:
        (fake / "server" / "js" / "build" / "index.html").write_text("<html>")
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        if name == "mlflow":
            return importlib.machinery.ModuleSpec("mlflow", None, origin=str(fake / "__init__.py"))
        if name == "flask":
            return importlib.machinery.ModuleSpec("flask", None)
        return real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _runs_this_env(command: str, executable: str) -> bool:
    """The command's program is this environment's `executable` (by name when PATH finds it)."""
    import shutil

    program = command.split()[0]
    here = Path(sys.executable).parent / executable
    return program == str(here) or (program == executable and shutil.which(executable) == str(here))


def test_mlflow_ui_command_without_the_ui_installs_the_extra_into_this_environment(
    tmp_path, monkeypatch
):
    import shlex

    import tomllib

    from mua.track.console import mlflow_ui_command

    _fake_mlflow(tmp_path, monkeypatch, with_ui=False)  # mlflow-skinny: no UI server
    line = mlflow_ui_command("sqlite:///x.db")
    install, _, then = line.partition(" (full mlflow, for its UI), then ")
    argv = shlex.split(install)
    assert _runs_this_env(install, "python") and argv[1:5] == ["-m", "pip", "install", "-e"]
    assert argv[5] == f"{REPO}[ui]"  # this checkout, wherever the user runs it from
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.startswith("mlflow>=") for req in extras["ui"])  # the extra brings the UI
    assert _runs_this_env(then, "mlflow")  # the one the extra installs here
    assert then.split()[1:] == ["ui", "--backend-store-uri", "sqlite:///x.db"]


def test_mlflow_ui_command_with_the_ui_is_the_command_alone(tmp_path, monkeypatch):
    from mua.track.console import mlflow_ui_command

    _fake_mlflow(tmp_path, monkeypatch, with_ui=True)
    command = mlflow_ui_command("sqlite:///x.db")
    assert "pip" not in command and command.split()[1:] == [
        "ui",
        "--backend-store-uri",
        "sqlite:///x.db",
    ]
    assert command.split()[0] in ("mlflow", str(Path(sys.executable).parent / "mlflow"))
    # a tracking server serves its own UI: nothing to start
    assert mlflow_ui_command("http://127.0.0.1:5000").startswith("open http://127.0.0.1:5000 ")


# ---- 8: transcripts ---------------------------------------------------------------------------


def _trajectory(system: str = "Be brief."):
    from mua.rollout.transcript import TokenRecord, Trajectory

    return Trajectory(
        task_id="t0",
        group_id="g",
        sample_index=0,
        record=TokenRecord(
            token_ids=[10, 11, 12, 13, 14, 15, 16],
            sources=["prompt"] * 2 + ["assistant"] * 2 + ["user"] + ["assistant"] * 2,
            loss_mask=[0, 0, 1, 1, 0, 1, 1],
        ),
        turn_rewards=[0.0, 1.0],
        reward=1.0,
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ],
        num_turns=2,
    )


def test_show_collapses_a_long_system_prompt():
    from rich.console import Console

    from mua.rollout.render import print_conversations

    policy = "\n".join(f"Policy rule {i}: " + "x" * 80 for i in range(60))
    con = Console(record=True, width=200)
    print_conversations([_trajectory(policy)], 1, con)
    text = con.export_text()
    assert "Policy rule 0" in text and "Policy rule 59" not in text and "more characters" in text
    con = Console(record=True, width=200)
    print_conversations([_trajectory(policy)], 1, con, full=True)
    assert "Policy rule 59" in con.export_text()


def test_html_has_one_span_per_run_of_same_kind_tokens(tmp_path):
    from mua.models import load_tokenizer
    from mua.rollout.render import token_runs, write_html

    tok = load_tokenizer("tiny:qwen3-1m")
    runs = token_runs(_trajectory(), tok)
    assert [kind for kind, _ in runs] == ["prompt", "trained", "user", "trained"]
    page = write_html([_trajectory()], tmp_path / "p.html", tok).read_text()
    assert page.count("<span") == 4 and page.count("k-trained") >= 2


@pytest.mark.parametrize(
    ("version", "cuda", "needle"),
    [(None, False, "which is not installed"), ("0.5.23", False, "needs a CUDA GPU")],
)
def test_a_launched_sglang_server_without_sglang_or_gpu_is_one_line(
    monkeypatch, version, cuda, needle
):
    import torch

    import mua.engines.sglang.colocated as colocated
    from mua.config import load_recipe
    from mua.train.launcher import _check_rl_inputs

    monkeypatch.setattr(colocated, "sglang_version", lambda: version)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    recipe = load_recipe(None, ["rollout.engine=sglang"], verb="train")
    with pytest.raises(UsageError, match=needle):
        _check_rl_inputs(recipe)


def test_help_prose_wraps_at_the_terminal_and_examples_keep_their_indent():
    code, out, _ = _cli("merge", "--help", env={"COLUMNS": "100"})
    lines = [line.rstrip() for line in out.splitlines()]
    assert code == 0
    assert "one;" not in [line.strip() for line in lines]  # no hard break inside the prose
    assert "   mua merge runs/quickstart" in lines  # the border's space, then the 2-space indent
