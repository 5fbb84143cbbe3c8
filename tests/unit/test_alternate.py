"""`alternate:` recipes: the phases' order, whom each phase faces, each phase's recipe, and the
sides refused before anything runs (the run itself: tests/integration/test_train_alternate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mua.config import load_recipe
from mua.errors import UsageError
from mua.train.alternate import check_sides, opponent_of, phases, round_export, side_recipe

REPO = Path(__file__).resolve().parents[2]


def _alt(tmp_path, agent_extra: str = "", user_extra: str = "", **alt) -> object:
    data = tmp_path / "train.parquet"
    data.write_bytes(b"")
    (tmp_path / "agent.yaml").write_text(
        "verb: train\nmodel: {path: starts/agent, tool_parser: bracket}\n"
        "gym: {name: guess, options: {llm_user: true}}\n" + agent_extra
    )
    (tmp_path / "user.yaml").write_text(
        "verb: train\nmodel: {path: starts/user}\ngym: {name: guess, seat: user}\n" + user_extra
    )
    keys = {"rounds": 2, "steps": 3, **alt}
    text = "verb: train\nrun_dir: " + str(tmp_path / "run") + "\nalternate:\n"
    text += "".join(f"  {k}: {v}\n" for k, v in keys.items())
    text += f"  agent: {{recipe: {tmp_path / 'agent.yaml'}}}\n"
    text += f"  user: {{recipe: {tmp_path / 'user.yaml'}}}\n"
    (tmp_path / "alt.yaml").write_text(text)
    return load_recipe(tmp_path / "alt.yaml", verb="train")


def test_phases_alternate_from_the_first_side(tmp_path):
    recipe = _alt(tmp_path)
    assert phases(recipe.alternate) == [(1, "agent"), (1, "user"), (2, "agent"), (2, "user")]
    recipe = _alt(tmp_path, first="user")
    assert phases(recipe.alternate)[:2] == [(1, "user"), (1, "agent")]


def test_each_phase_faces_the_other_sides_latest_export(tmp_path):
    recipe = _alt(tmp_path)
    sides = check_sides(recipe)
    starts = {side: sides[side].model.path for side in ("agent", "user")}
    assert starts == {"agent": "starts/agent", "user": "starts/user"}
    run = Path(recipe.run_dir)
    assert opponent_of(recipe, starts, 1, "agent") == "starts/user"
    assert opponent_of(recipe, starts, 1, "user") == "starts/agent"
    round_export(run, "agent", 1).mkdir(parents=True)
    assert opponent_of(recipe, starts, 1, "user") == str(round_export(run, "agent", 1))
    assert opponent_of(recipe, starts, 2, "agent") == "starts/user"
    round_export(run, "user", 1).mkdir(parents=True)
    assert opponent_of(recipe, starts, 2, "agent") == str(round_export(run, "user", 1))


def test_a_phase_recipe_extends_its_side_and_serves_the_opponent(tmp_path):
    recipe = _alt(tmp_path)
    agent = side_recipe(recipe, "agent", 2, "runs/u/hf/round_1")
    assert agent.total_steps == 6 and agent.run_dir == str(tmp_path / "run" / "agent")
    assert (agent.user.kind, agent.user.checkpoint) == ("llm", "runs/u/hf/round_1")
    assert agent.track.run_name == "run-agent"
    user = side_recipe(recipe, "user", 1, "runs/a/hf/round_1", tool_parser="bracket")
    (entry,) = user.gyms
    assert (entry.seat, entry.agent.kind, entry.agent.checkpoint) == (
        "user",
        "llm",
        "runs/a/hf/round_1",
    )
    assert entry.agent.tool_parser == "bracket" and user.total_steps == 3


@pytest.mark.parametrize(
    ("agent_extra", "user_extra", "message"),
    [
        ("algo: {kind: sft}\n", "", "is SFT"),
        ("optim: {schedule: cosine}\n", "", "use optim.schedule=constant"),
        ("", "optim: {schedule: linear}\n", "use optim.schedule=constant"),
    ],
)
def test_sides_that_cannot_alternate_are_refused(tmp_path, agent_extra, user_extra, message):
    recipe = _alt(tmp_path, agent_extra, user_extra)
    with pytest.raises(UsageError, match=message):
        check_sides(recipe)


def test_a_missing_side_recipe_is_named(tmp_path):
    recipe = _alt(tmp_path)
    recipe.alternate.agent.recipe = "nowhere/agent.yaml"
    with pytest.raises(UsageError, match=r"alternate.agent.recipe \(nowhere/agent.yaml\): no such"):
        check_sides(recipe)


def test_a_side_in_the_wrong_seat_is_refused(tmp_path):
    recipe = _alt(tmp_path)
    recipe.alternate.user.recipe = recipe.alternate.agent.recipe
    with pytest.raises(UsageError, match="seat: agent; this side needs user"):
        check_sides(recipe)


def test_the_shipped_recipe_validates_and_resume_flags_are_refused(mua_cli):
    recipe = load_recipe(REPO / "recipes" / "train_agent_and_user.yaml", verb="train")
    assert recipe.alternate.rounds * recipe.alternate.steps == 50
    code, out, err = mua_cli("train", "recipes/train_agent_and_user.yaml", "--no-resume")
    assert code == 2 and "resumes each side itself" in out + err


def _fake_launches(monkeypatch, export_as_node0: bool) -> list[tuple[str, int]]:
    """Replace each phase's training with a record of (side, total_steps); as node 0's copy
    would, make the phase's round export appear when `export_as_node0`."""
    import mua.train.launcher as launcher

    calls = []

    def launch(phase, **options):
        side = Path(phase.run_dir).name
        calls.append((side, phase.total_steps, options["node_rank"]))
        if export_as_node0:
            round_ = phase.total_steps // 3
            round_export(Path(phase.run_dir).parent, side, round_).mkdir(parents=True)

    monkeypatch.setattr(launcher, "launch", launch)
    return calls


def test_only_node_0_locks_and_keeps_the_exports(tmp_path, monkeypatch):
    """Node 1 trains every phase with node 0, takes no lock and copies nothing (node 0, which
    holds the run dir's lock here, does); each next phase waits for node 0's export."""
    from mua.output_folders import FolderLock, claim_dir
    from mua.train.alternate import ROUNDS_FILE, run_alternation

    recipe = _alt(tmp_path)
    run = claim_dir(recipe.run_dir, what="run_dir")
    calls = _fake_launches(monkeypatch, export_as_node0=True)
    with FolderLock(run, what="alternating run_dir", verb="mua train"):  # node 0's
        run_alternation(recipe, nnodes=2, node_rank=1, rdzv_endpoint="h:1")
    assert calls == [("agent", 3, 1), ("user", 3, 1), ("agent", 6, 1), ("user", 6, 1)]
    assert not (run / ROUNDS_FILE).exists()
    assert not (run / "agent" / "hf" / "final").exists()


def test_a_node_waits_for_node_0s_export_and_names_it_when_it_never_comes(tmp_path, monkeypatch):
    import mua.train.alternate as alternate
    from mua.errors import RunFailure

    recipe = _alt(tmp_path)
    calls = _fake_launches(monkeypatch, export_as_node0=False)
    monkeypatch.setattr(alternate, "EXPORT_WAIT_S", 0.2)
    expected = str(round_export(Path(recipe.run_dir), "agent", 1))
    with pytest.raises(RunFailure, match=f"node 1: node 0 kept no {expected} within 0.2 s"):
        alternate.run_alternation(recipe, nnodes=2, node_rank=1, rdzv_endpoint="h:1")
    assert calls == [("agent", 3, 1)]
