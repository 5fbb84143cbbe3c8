"""tau2 Toolkit: tool discovery, schemas, tool-message texts and errors, DB merge and hash;
the shipped tau2 recipes; the report's pass^k."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gyms.tau2.report import pass_hat_k
from gyms.tau2.toolkit import READ, WRITE, DBModel, Toolkit, deep_merge, parse_docstring, tool

REPO = Path(__file__).resolve().parents[2]


class Box(DBModel):
    count: int = 0
    tags: dict[str, str] = {}


class BoxTools(Toolkit):
    @tool(WRITE)
    def add(self, n: int, note: str = "") -> Box:
        """Add to the count.

        More words here.

        Args:
            n: How many to add.
            note: A note that goes
                on two lines.
        """
        self.db.count += n
        return self.db

    @tool(READ)
    def peek(self) -> int:
        """The count."""
        return self.db.count

    def count_is(self, n: int) -> bool:
        return self.db.count == n

    def _hidden(self) -> str:
        return "h"


def test_tools_schemas_and_functions():
    kit = BoxTools(Box())
    assert kit.tool_names() == ["add", "peek"]
    assert kit.tool_mutates("add") and not kit.tool_mutates("peek")
    add = kit.schemas()[0]["function"]
    assert add["description"] == "Add to the count.\n\nMore words here."
    assert add["parameters"]["required"] == ["n"]
    assert add["parameters"]["properties"]["n"] == {
        "description": "How many to add.",
        "title": "N",
        "type": "integer",
    }
    assert (
        add["parameters"]["properties"]["note"]["description"] == "A note that goes\non two lines."
    )
    assert kit.run_function("count_is", {"n": 0}) is True
    assert kit.run_function("_hidden") == "h"  # tau2 lets tasks call any helper by name
    assert not kit.has_tool("count_is")


def test_call_texts_and_errors_as_tau2_writes_them():
    kit = BoxTools(Box())
    assert kit.call("add", {"n": 2}) == ('{"count": 2, "tags": {}}', False)
    assert kit.call("peek", {}) == ('"2"', False)  # tau2 quotes a bare number
    assert kit.call("count_is", {"n": 2}) == ("Error: Tool 'count_is' not found.", True)
    text, error = kit.call("add", {"m": 1})
    assert error and text == "Error: BoxTools.add() got an unexpected keyword argument 'm'"
    assert kit.call("add", [1]) == ("Error: arguments must be a JSON object, got list", True)


def test_update_db_merges_nested_and_hash_is_tau2s():
    kit = BoxTools(Box(count=1, tags={"a": "x"}))
    kit.update_db({"tags": {"b": "y"}})
    assert kit.db.tags == {"a": "x", "b": "y"} and kit.db.count == 1
    dump = {"count": 1, "tags": {"a": "x", "b": "y"}}
    want = hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()
    assert kit.db_hash() == want
    assert deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}, "d": [1]}) == {
        "a": {"b": 3, "c": 2},
        "d": [1],
    }


def test_parse_docstring_sections():
    short, long, args = parse_docstring(
        """Do it.

        Details.

        Args:
            x (int): The x.
        Returns:
            Nothing.
        """
    )
    assert (short, long, args) == ("Do it.", "Details.", {"x": "The x."})


def test_pass_hat_k_is_taus_estimator():
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 2, 1) == 0.5
    assert pass_hat_k(4, 2, 2) == 1 / 6
    assert pass_hat_k(4, 1, 2) == 0.0


def test_seed_eval_recipe_covers_three_domains_with_four_trials(tmp_path):
    from mua.config.recipe_loading import load_recipe
    from mua.gym import GymContext, get_gym

    recipe = load_recipe(str(REPO / "recipes/seeds/mua_rl_tau2_eval.yaml"), [], verb="eval")
    assert [g.name for g in recipe.gyms] == ["tau2"] * 3
    labels = ["tau2_retail", "tau2_airline", "tau2_telecom"]
    assert [g.label for g in recipe.gyms] == labels  # a table row per domain
    assert [Path(g.test_files[0]).parent.name for g in recipe.gyms] == labels
    assert recipe.eval.n >= 4 and recipe.eval.k == [1, 2, 3, 4]
    options = {**recipe.gyms[0].options, "data_dir": str(tmp_path)}
    get_gym("tau2").make_env(GymContext(options=options))
    train = load_recipe(str(REPO / "recipes/tau2_grpo.yaml"), [], verb="train")
    assert train.data.train_files == ["data/tau2_all/train.parquet"]


def test_report_per_domain_components_terminations_and_comparability(tmp_path):
    from gyms.tau2.report import summarize

    def row(task, reward, comps, last):
        return {
            "gym": "tau2",
            "task_id": task,
            "reward": reward,
            "excluded": False,
            "termination": "done",
            "reward_components": comps,
            "messages": [last],
        }

    stop = {"role": "user", "content": "bye ###STOP###"}
    rows = [
        row("tau2-airline-1", 1.0, {"db": 1.0, "communicate": 1.0}, stop),
        row("tau2-airline-1", 0.0, {"db": 1.0, "communicate": 0.0}, stop),
        row("tau2-retail-7", 0.0, {}, {"role": "tool", "content": "Error: x"}),
        row("tau2-retail-7", 0.0, {}, {"role": "tool", "content": "Error: x"}),
    ]
    (tmp_path / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = {"gym_options": {"tau2": {"basis": "no_nl"}}, "user": {"kind": "scripted"}}
    (tmp_path / "eval_config.json").write_text(json.dumps(config))
    out = summarize(tmp_path)
    assert out["comparable_with_tau2"] is False and out["user_model"] == "scripted"
    airline = out["domains"]["airline"]
    assert airline["pass^1"] == 0.5 and airline["pass^2"] == 0.0
    assert airline["component_pass_rate"] == {"db": 1.0, "communicate": 0.5}
    assert airline["terminations"] == {"user_stop": 2}
    assert out["domains"]["retail"]["terminations"] == {"too_many_errors": 2}
