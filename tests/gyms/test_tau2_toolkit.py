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
    from mua.config.loading import load_recipe
    from mua.gym import GymContext, get_gym

    recipe = load_recipe(str(REPO / "recipes/seeds/mua_rl_tau2_eval.yaml"), [], verb="eval")
    assert [g.name for g in recipe.gyms] == ["tau2"]
    assert [Path(f).parent.name for f in recipe.data.test_files] == [
        "tau2_retail",
        "tau2_airline",
        "tau2_telecom",
    ]
    assert recipe.eval.n >= 4 and recipe.eval.k == [1, 2, 3, 4]
    options = {**recipe.gyms[0].options, "data_dir": str(tmp_path)}
    get_gym("tau2").make_env(GymContext(options=options))
    train = load_recipe(str(REPO / "recipes/tau2_grpo.yaml"), [], verb="train")
    assert train.data.train_files == ["data/tau2_all/train.parquet"]
