"""`mua rollout`: expert and model policies write JSONL trajectories, the resolved recipe, a
terminal view and an HTML page; bad input is one line and exit code 2."""

from __future__ import annotations

import json

from mua.rollout.transcript import Trajectory


def write_recipe(tmp_path, **extra) -> str:
    lines = [
        "verb: rollout",
        "gym: {name: guess}",
        "rollout: {n: 2, max_turns: 6, max_new_tokens_per_turn: 8}",
        "data: {max_tasks: 3}",
        f"run_dir: {tmp_path / 'run'}",
    ]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    path = tmp_path / "rollout.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def read_jsonl(path) -> list[Trajectory]:
    return [Trajectory.from_json(line) for line in path.read_text().splitlines()]


def test_expert_rollout_writes_trajectories_view_and_html(tmp_path, mua_cli):
    recipe = write_recipe(tmp_path, policy="expert")
    code, out, err = mua_cli(
        "rollout", recipe, "--show", "1", "--html", str(tmp_path / "view.html")
    )
    assert code == 0, err
    trajs = read_jsonl(tmp_path / "run" / "trajectories.jsonl")
    assert len(trajs) == 6 and all(t.termination == "done" and t.reward == 1.0 for t in trajs)
    assert [t.group_id for t in trajs][::2] == [t.group_id for t in trajs][1::2]
    assert (tmp_path / "run" / "recipe.resolved.yaml").exists()
    assert "assistant[0]" in out and "[answer] 8" in out and "mean reward 1.000" in out
    page = (tmp_path / "view.html").read_text()
    assert page.count("class='traj'") == 6 and "Correct!" in page


def test_model_rollout_with_overrides(tmp_path, mua_cli):
    recipe = write_recipe(tmp_path, policy="model")
    code, out, err = mua_cli(
        "rollout",
        recipe,
        "model.path=tiny:qwen3-1m",
        "data.max_tasks=2",
        f"output={tmp_path / 'out.jsonl'}",
    )
    assert code == 0, err
    trajs = read_jsonl(tmp_path / "out.jsonl")
    assert len(trajs) == 4
    for t in trajs:
        assert t.termination in {"done", "max_turns", "length"}
        assert len(t.token_ids) == len(t.loss_mask) == len(t.logprobs)
        if not t.metrics["drift"]:
            assert any(lp < 0 for lp, m in zip(t.logprobs, t.loss_mask, strict=False) if m)
    assert (
        json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])["messages"][0]["role"]
        == "system"
    )


def test_unknown_split_is_one_line_usage_error(tmp_path, mua_cli):
    recipe = write_recipe(tmp_path, policy="expert", split="validation")
    code, out, err = mua_cli("rollout", recipe)
    assert code == 2
    assert "no split 'validation'" in err and "Traceback" not in err
