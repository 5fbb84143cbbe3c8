"""A resumed evaluation never serves stale results, and never rewrites files mua did not write."""

from __future__ import annotations

import json
import os

import pytest

from mua.errors import UsageError

SMALL = ["rollout.max_new_tokens_per_turn=6", "rollout.max_turns=3", "rollout.max_total_tokens=256"]


def _recipe(*overrides):
    from mua.config import load_recipe

    return load_recipe(None, [*SMALL, "rollout.max_concurrency=1", *overrides], verb="eval")


def _prep_guess(mua_cli, out, max_number: int) -> None:
    code, _, err = mua_cli(
        "prep", "--gym", "guess", "--out", str(out),
        "--option", f"max_number={max_number}", "--option", "num_train=0", "--option", "num_test=6",
    )  # fmt: skip
    assert code == 0, err


def test_re_prepared_tasks_are_refused_on_resume_with_one_line(tmp_path, mua_cli):
    data, out = tmp_path / "data", tmp_path / "eval"
    _prep_guess(mua_cli, data, 8)
    command = (
        "eval", "--gym", "guess", "--model", "expert", "--out", str(out), "--no-mlflow",
        f"data.test_files=[{data / 'test.parquet'}]", "rollout.max_turns=12",
    )  # fmt: skip
    code, first, err = mua_cli(*command)
    assert code == 0, err
    before = (out / "results.jsonl").read_text()
    _prep_guess(mua_cli, data, 1000)  # same ids, other targets and prompt
    code, _, err = mua_cli(*command)
    assert code == 2, err
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and "changed since" in lines[0] and "--fresh" in lines[0]
    assert "Traceback" not in err
    assert (out / "results.jsonl").read_text() == before
    code, again, err = mua_cli(*command, "--fresh")
    assert code == 0, err and "resumed" not in again


def test_changed_model_weights_are_refused_and_an_unchanged_folder_resumes(tmp_path):
    import torch

    from mua.eval.session import run_evaluation
    from mua.models import load_model, load_tokenizer, save_hf

    folder = tmp_path / "model"
    model = load_model("tiny:qwen3-1m")
    save_hf(model, load_tokenizer("tiny:qwen3-1m"), folder)
    recipe = _recipe("eval.max_tasks=2")
    run = dict(model=str(folder), gyms=["guess"], out_dir=tmp_path / "eval", track=False)
    run_evaluation(recipe, **run)
    _, meta = run_evaluation(recipe, **run)  # same content: resumes
    assert meta["resumed_rows"] == 2
    with torch.no_grad():  # "retrained": same architecture, file names and sizes
        next(model.parameters()).add_(0.01)
    save_hf(model, load_tokenizer("tiny:qwen3-1m"), folder)
    with pytest.raises(
        UsageError, match=r"different evaluation \(changed: model_content\).*--fresh"
    ):
        run_evaluation(recipe, **run)
    _, meta = run_evaluation(recipe, **run, fresh=True)
    assert meta["resumed_rows"] == 0


def test_hash_cache_rereads_nothing_unchanged_and_sees_a_same_size_same_mtime_rewrite(
    tmp_path, monkeypatch
):
    from mua.eval import fingerprint

    folder = tmp_path / "m"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"a" * 1000)
    (folder / "config.json").write_text("{}")
    (folder / "merge_info.json").write_text('{"merged_at": "now"}')  # bookkeeping, not content
    reads: list[str] = []
    real = fingerprint.file_sha256
    monkeypatch.setattr(fingerprint, "file_sha256", lambda p: reads.append(p.name) or real(p))
    # the files were written just now; hash as if later, so the racy rule lets entries be trusted
    later = os.stat(weights).st_ctime_ns + 10 * fingerprint.RACY_MARGIN_NS
    monkeypatch.setattr(fingerprint.time, "time_ns", lambda: later)
    cache_file = tmp_path / "cache.json"
    cache = fingerprint.HashCache(cache_file)
    first = fingerprint.folder_digest(folder, cache)
    cache.save()
    assert sorted(first) == ["config.json", "model.safetensors"] and len(reads) == 2
    reads.clear()
    assert fingerprint.folder_digest(folder, fingerprint.HashCache(cache_file)) == first
    assert reads == []
    stat = os.stat(weights)
    weights.write_bytes(b"b" * 1000)  # same size; mtime put back as `cp -p` or rsync would
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = fingerprint.folder_digest(folder, fingerprint.HashCache(cache_file))
    assert (
        reads == ["model.safetensors"] and second["model.safetensors"] != first["model.safetensors"]
    )


def test_a_racily_fresh_entry_is_not_trusted(tmp_path):
    from mua.eval import fingerprint

    path = tmp_path / "w.bin"
    path.write_bytes(b"x" * 10)
    cache = fingerprint.HashCache(tmp_path / "c.json")
    cache.digest(path)
    calls = []
    real = fingerprint.file_sha256
    fingerprint.file_sha256 = lambda p: calls.append(p) or real(p)
    try:
        cache.digest(path)  # hashed within the margin of its ctime: hashed again
    finally:
        fingerprint.file_sha256 = real
    assert len(calls) == 1


def test_eval_out_holding_someone_elses_results_is_refused_and_kept(tmp_path, mua_cli):
    out = tmp_path / "theirs"
    out.mkdir()
    theirs = '{"gym": "guess", "task_id": "guess-test-0000", "sample_index": 0, "mine": 1}\n'
    (out / "results.jsonl").write_text(theirs + "not json at all\n")
    for extra in ((), ("--fresh",)):
        code, _, err = mua_cli(
            "eval", "--gym", "guess", "--model", "expert", "--max-tasks", "1",
            "--out", str(out), "--no-mlflow", *extra,
        )  # fmt: skip
        assert code == 2, err
        assert "mua did not write" in err and "results.jsonl" in err and "Traceback" not in err
    assert (out / "results.jsonl").read_text() == theirs + "not json at all\n"
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]


def test_an_unreadable_line_inside_results_is_refused_not_dropped(tmp_path):
    from mua.eval.session import run_evaluation

    recipe = _recipe("eval.max_tasks=2", "rollout.max_turns=6")
    run = dict(model="expert", gyms=["guess"], out_dir=tmp_path, track=False)
    run_evaluation(recipe, **run)
    path = tmp_path / "results.jsonl"
    rows = path.read_text().splitlines()
    path.write_text("\n".join([rows[0], "something else", rows[1]]) + "\n")
    with pytest.raises(UsageError, match="line 2 is not a result row"):
        run_evaluation(recipe, **run)
    assert path.read_text().splitlines()[1] == "something else"
    path.write_text("\n".join(rows) + '\n{"gym": "gu')  # a torn last line is dropped
    _, meta = run_evaluation(recipe, **run)
    assert meta["resumed_rows"] == 2
    assert [json.loads(x)["task_id"] for x in path.read_text().splitlines()] == [
        json.loads(x)["task_id"] for x in rows
    ]


# -- every setting of a `gyms:` entry is part of what a resume must match ------------------------

SEAT = ["gym.seat=user", "gym.agent.kind=llm", "gym.agent.base_url=http://127.0.0.1:9/v1"]
ENTRY_CHANGES = {  # name in the refusal: (the first evaluation's overrides, the resumed one's)
    "gyms.guess.max_turns": ([], ["gym.max_turns=2"]),
    "gyms.guess.user": (
        [],
        ["gym.user.kind=llm", "gym.user.base_url=http://127.0.0.1:9/v1", "gym.user.model=u"],
    ),
    "gyms.guess.program": ([], ["gym.program.command=python agent.py"]),
    "gyms.guess.agent": ([*SEAT, "gym.agent.model=a"], [*SEAT, "gym.agent.model=b"]),
    "gyms.guess.fidelity_judge": (
        [*SEAT, "gym.agent.model=a", "gym.fidelity_judge.base_url=http://127.0.0.1:9/v1"],
        [
            *SEAT,
            "gym.agent.model=a",
            "gym.fidelity_judge.base_url=http://127.0.0.1:9/v1",
            "gym.fidelity_judge.weight=1.0",
        ],
    ),
}


def _settings_store(out, *overrides, fresh=False):
    """The result store `mua eval` opens for a guess evaluation of `expert` with `overrides`."""
    from mua.eval.fingerprint import eval_fingerprint
    from mua.eval.store import ResultStore
    from mua.run.spec import run_spec

    recipe = _recipe(*overrides)
    entries = {entry.key: run_spec(recipe, entry) for entry in recipe.gym_sections()}
    return ResultStore(
        out, eval_fingerprint(recipe, "expert", "expert", None, entries), fresh=fresh
    )


def _one_row(out, label: str, *overrides) -> None:
    store = _settings_store(out, *overrides)
    store.append({"gym": label, "task_id": "t0", "sample_index": 0, "excluded": False})
    store.close()


@pytest.mark.parametrize("changed", ENTRY_CHANGES)
def test_a_resume_with_other_entry_settings_is_refused_naming_them(tmp_path, changed):
    first, resumed = ENTRY_CHANGES[changed]
    _one_row(tmp_path, "guess", *first)
    with pytest.raises(
        UsageError, match=rf"different evaluation \(changed: {changed}\); use --fresh"
    ):
        _settings_store(tmp_path, *resumed)
    same = _settings_store(tmp_path, *first)  # unchanged settings resume
    assert same.has(("guess", "t0", 0))
    same.close()
    fresh = _settings_store(tmp_path, *resumed, fresh=True)  # asked for: starts afresh
    assert fresh.rows == {}
    fresh.close()


def test_how_requests_are_sent_does_not_block_a_resume(tmp_path):
    user = ["user.kind=llm", "user.base_url=http://127.0.0.1:9/v1", "user.model=u"]
    _one_row(tmp_path, "guess", *user)
    store = _settings_store(tmp_path, *user, "user.timeout_s=5", "user.max_concurrency=2")
    assert store.has(("guess", "t0", 0))
    store.close()


def test_a_matrix_users_timeout_and_retries_do_not_block_a_resume(tmp_path):
    user = ["user.kind=llm", "user.base_url=http://127.0.0.1:9/v1", "user.model=u"]
    _one_row(tmp_path, "guess", *user, "eval.users=[{label: slow, timeout_s: 5}]")
    store = _settings_store(
        tmp_path, *user, "eval.users=[{label: slow, timeout_s: 30, max_retries: 0}]"
    )
    assert store.has(("guess", "t0", 0))
    store.close()
    with pytest.raises(UsageError, match=r"changed: users\)"):
        _settings_store(tmp_path, *user, "eval.users=[{label: slow, prompt: be terse}]")


def test_another_gym_joins_and_the_first_gyms_settings_stay_guarded(tmp_path):
    _one_row(tmp_path, "guess")
    _settings_store(tmp_path, "gym.name=travel").close()  # a gym new to the folder joins
    with pytest.raises(UsageError, match=r"changed: gyms\.guess\.max_turns\)"):
        _settings_store(tmp_path, "gym.max_turns=2")


def test_a_folder_whose_config_has_no_entry_settings_is_refused(tmp_path):
    from mua.eval.store import CONFIG_FILE

    _one_row(tmp_path, "guess")
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    del config["gyms"]  # as written before entries were fingerprinted: their settings unknown
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(UsageError, match=r"changed: gyms\.guess\).*--fresh"):
        _settings_store(tmp_path)


def test_an_evaluation_resumed_with_another_max_turns_appends_nothing(tmp_path):
    from mua.eval.session import run_evaluation

    run = dict(model="expert", gyms=["guess"], out_dir=tmp_path, track=False)
    run_evaluation(_recipe("eval.max_tasks=1", "rollout.max_turns=6"), **run)
    before = (tmp_path / "results.jsonl").read_text()
    changed = _recipe("eval.max_tasks=2", "rollout.max_turns=6", "gym.max_turns=2")
    with pytest.raises(UsageError, match=r"changed: gyms\.guess\.max_turns\)"):
        run_evaluation(changed, **run)
    assert (tmp_path / "results.jsonl").read_text() == before
    _, meta = run_evaluation(_recipe("eval.max_tasks=1", "rollout.max_turns=6"), **run)
    assert meta["resumed_rows"] == 1


def test_an_edited_program_is_refused_on_resume(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text("print('{\"reward\": 1}')\n")
    program = f"gym.program.command=python {agent}"
    _one_row(tmp_path / "eval", "guess", program)
    agent.write_text("print('{\"reward\": 0}')\n")
    with pytest.raises(UsageError, match=r"changed: gyms\.guess\.program_content\)"):
        _settings_store(tmp_path / "eval", program)
