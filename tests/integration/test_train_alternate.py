"""`mua train recipes/train_agent_and_user.yaml`: the guess agent and its user trained in turns
(torchrun, CPU), each against the other's export served by `mua serve`, from small warm starts
made by the shipped SFT recipes. One run goes through; another is SIGKILLed while its user phase
runs (after that phase's first checkpoint) and the same command is run again: both sides'
exports equal the uninterrupted run's, and both sides really trained."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.conftest import installed_mua, user_env
from tests.integration.train_helpers import REPO, run_mua_in

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RECIPES = REPO / "recipes"
SMALL = "[data.tasks_per_step=2, rollout.n=4, checkpoint.save_freq=1]"


def _args(run_dir: str) -> list[str]:
    return [
        "train",
        str(RECIPES / "train_agent_and_user.yaml"),
        f"run_dir={run_dir}",
        "alternate.rounds=1",
        "alternate.steps=2",
        f"alternate.agent.recipe={RECIPES / 'quickstart.yaml'}",
        f"alternate.agent.overrides=[gym.options.llm_user=true, {SMALL[1:]}",
        f"alternate.user.recipe={RECIPES / 'train_user_quickstart.yaml'}",
        f"alternate.user.overrides={SMALL}",
    ]


@pytest.fixture(scope="module")
def warm_started(tmp_path_factory) -> Path:
    """A folder with data/guess and both sides' SFT warm starts (as shipped: the agent must guess
    and the user answer, or neither side has anything to learn)."""
    folder = tmp_path_factory.mktemp("alternate")
    run_mua_in(folder, "prep", "--gym", "guess", "--option", "max_number=8", "--out", "data/guess")
    for prefix in ("quickstart", "train_user_quickstart"):
        run_mua_in(folder, "rollout", str(RECIPES / f"{prefix}_rollout.yaml"))
        run_mua_in(folder, "train", str(RECIPES / f"{prefix}_sft.yaml"))
    return folder


def _weights(folder: Path) -> dict:
    return load_file(str(folder / "model.safetensors"))


def _kill_during_user_phase(folder: Path, run_dir: str) -> None:
    proc = subprocess.Popen(
        [installed_mua(), *_args(run_dir)],
        cwd=folder,
        env=user_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: torchrun and the servers join it
    )
    first = folder / run_dir / "user" / "checkpoints" / "global_step_1" / "trainer_state.pt"
    deadline = time.monotonic() + 600
    while not first.exists():
        assert proc.poll() is None, "the alternating run ended before its user phase checkpointed"
        assert time.monotonic() < deadline, "no user checkpoint after 600 s"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (folder / run_dir / "user" / "hf" / "round_1").exists()


def test_alternating_run_resumed_after_a_kill_equals_an_uninterrupted_one(warm_started):
    folder = warm_started
    run_mua_in(folder, *_args("runs/straight"))
    _kill_during_user_phase(folder, "runs/killed")
    time.sleep(1.0)  # the killed run's ranks and servers die with their parents
    run_mua_in(folder, *_args("runs/killed"))

    starts = {
        "agent": folder / "runs/quickstart_sft/hf/final",
        "user": folder / "runs/train_user_quickstart_sft/hf/final",
    }
    for side in ("agent", "user"):
        straight = _weights(folder / "runs/straight" / side / "hf" / "round_1")
        resumed = _weights(folder / "runs/killed" / side / "hf" / "round_1")
        start = _weights(starts[side])
        assert straight.keys() == resumed.keys()
        for name in straight:
            assert (straight[name] - resumed[name]).abs().max().item() <= 1e-6, (side, name)
        moved = max((straight[n] - start[n]).abs().max().item() for n in straight)
        assert moved > 1e-4, f"the {side} did not train"

    rounds = [json.loads(line) for line in (folder / "runs/killed/rounds.jsonl").open()]
    assert [(r["round"], r["side"]) for r in rounds] == [(1, "agent"), (1, "user")]
    assert rounds[0]["opponent"] == "runs/train_user_quickstart_sft/hf/final"
    assert rounds[1]["opponent"] == "runs/killed/agent/hf/round_1"
    # the user side faced an agent that asked: its steps had user turns to score and train
    user_rows = [json.loads(line) for line in (folder / "runs/killed/user/metrics.jsonl").open()]
    assert [r["step"] for r in user_rows] == [1, 2]
    assert all(r.get("reward/scored", 0) > 0 for r in user_rows), user_rows
    # and the agent's guesses were answered by the served user checkpoint
    agent_rows = [json.loads(line) for line in (folder / "runs/killed/agent/metrics.jsonl").open()]
    assert all(r.get("user/requests", 0) > 0 for r in agent_rows), agent_rows
