"""Broken recipes each give one clear line naming the field, and exit 2; shipped recipes validate."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from mua.config import load_recipe
from mua.config.recipe_loading import apply_overrides
from mua.config.recipes import TrainRecipe
from mua.errors import UsageError

REPO = Path(__file__).resolve().parents[2]

BROKEN = {
    "unknown_key": (
        "optim:\n  lr: 1e-4\n  learning_rate: 3\n",
        [],
        "optim.learning_rate: unknown key",
    ),
    "wrong_type": ("optim:\n  lr: fast\n", [], "optim.lr"),
    "bad_kind": ("algo:\n  kind: dpo\n", [], "algo"),
    "negative_size": ("rollout:\n  n: -4\n", [], "rollout.n"),
    "secret_inline": (
        "user:\n  kind: llm\n  api_key: sk-abcdefghijklmnop1234\n",
        [],
        "user.api_key: looks like a secret",
    ),
    "secret_value_anywhere": (
        "gym:\n  options:\n    key: sk-abcdefghijklmnop1234\n",
        [],
        "gym.options.key: looks like a secret",
    ),
    "contradictory_sizes": (
        "data:\n  tasks_per_step: 3\nrollout:\n  n: 3\nalgo:\n  kind: grpo\n  mini_batches: 2\n",
        [],
        "algo.mini_batches (2) must divide",
    ),
    "turn_budget_over_total": (
        "rollout:\n  max_new_tokens_per_turn: 512\n  max_total_tokens: 100\n",
        [],
        "rollout.max_total_tokens: must be at least",
    ),
    "bad_override_path": ("", ["optim.lrr=1"], "did you mean optim.lr?"),
    "bad_override_value": ("", ["rollout.temperature=hot"], "rollout.temperature"),
    "override_without_equals": ("", ["optim.lr"], "expected key=value"),
    "unknown_kind_field": ("algo:\n  kind: sft\n  credit: r2g\n", [], "algo.credit: unknown key"),
    "weights_mismatch": (
        "data:\n  train_files: [a.parquet, b.parquet]\n  weights: [1.0]\n",
        [],
        "data.weights has 1 entries",
    ),
    "wrong_verb": ("verb: eval\n", [], "this recipe is for `mua eval`"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_recipe_gives_one_clear_line(tmp_path, name):
    text, overrides, expected = BROKEN[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with pytest.raises(UsageError) as exc:
        load_recipe(path, overrides, verb="train")
    message = str(exc.value)
    assert expected in message, message
    assert len(message.splitlines()) == 1, message
    assert "Traceback" not in message


def test_invalid_yaml_names_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("optim:\n  lr: [1, 2\n")
    with pytest.raises(UsageError, match=r"invalid YAML at line \d+"):
        load_recipe(path, [], verb="train")


def test_missing_file():
    with pytest.raises(UsageError, match="recipe file not found"):
        load_recipe("does/not/exist.yaml", [], verb="train")


def test_override_applies_yaml_scalars(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("optim:\n  lr: 1e-4\n")
    recipe = load_recipe(
        path,
        ["optim.lr=3e-4", "rollout.n=8", "algo.kind=ppo", "algo.lam=0.95", "gym.options.size=32"],
        verb="train",
    )
    assert recipe.optim.lr == pytest.approx(3e-4)
    assert recipe.rollout.n == 8
    assert recipe.algo.kind == "ppo" and recipe.algo.lam == pytest.approx(0.95)
    assert recipe.gyms[0].options == {"size": 32}


def test_override_path_follows_union_arm():
    raw = {"algo": {"kind": "sft"}}
    with pytest.raises(UsageError, match="unknown key 'credit'"):
        apply_overrides(raw, ["algo.credit=r2g"], TrainRecipe)


def _shipped_recipes():
    return sorted(glob.glob(str(REPO / "recipes" / "**" / "*.yaml"), recursive=True))


def test_recipes_exist():
    assert len(_shipped_recipes()) >= 1


@pytest.mark.parametrize("path", _shipped_recipes(), ids=lambda p: Path(p).name)
def test_every_shipped_recipe_validates(path):
    from mua.config.recipe_loading import infer_verb, read_yaml

    load_recipe(path, [], verb=infer_verb(path, read_yaml(path)))


SEEDS = {  # one recipe per published training setup (docs/seed_recipes.md traces every value)
    "mua_rl_tau.yaml": "tau",
    "mutis_math.yaml": "math",
    "userrl_all.yaml": ["travel", "turtle", "persuade", "tau", "function"],
    **{f"userrl_{g}.yaml": g for g in ("function", "telepathy", "turtle", "intention", "persuade")},
    "userrl_travel.yaml": "travel",
}
EVAL_SEEDS = ("mua_rl_tau2_eval.yaml",)  # published evaluation setups (verb eval)


def test_seed_recipes_are_all_there_and_validate(mua_cli):
    seeds = REPO / "recipes" / "seeds"
    assert sorted(p.name for p in seeds.glob("*.yaml")) == sorted([*SEEDS, *EVAL_SEEDS])
    assert all(str(seeds / name) in _shipped_recipes() for name in [*SEEDS, *EVAL_SEEDS])
    code, out, err = mua_cli("recipe", "validate", "recipes/seeds/*.yaml")
    assert code == 0, err
    assert out.count("ok ") == len(SEEDS) + len(EVAL_SEEDS)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_recipe_gym_and_rules(name, tmp_path):
    """Each seed runs its gym with the upstream rules, and the gym accepts its options."""
    from mua.gym import GymContext, get_gym

    recipe = load_recipe(str(REPO / "recipes" / "seeds" / name), [], verb="train")
    expected = SEEDS[name] if isinstance(SEEDS[name], list) else [SEEDS[name]]
    assert [g.name for g in recipe.gyms] == expected
    for gym in recipe.gyms:
        assert gym.options.get("rules") == "upstream"
        options = dict(gym.options)
        if "data_dir" in options:  # a folder the user provides; any existing one passes the check
            options["data_dir"] = str(tmp_path)
        get_gym(gym.name).make_env(GymContext(options=options))


def test_seed_recipes_carry_the_upstream_numbers():
    def seed(name):
        return load_recipe(str(REPO / "recipes" / "seeds" / name), [], verb="train")

    mua_rl = seed("mua_rl_tau.yaml")
    assert (mua_rl.algo.kl.coef, mua_rl.algo.kl.estimator, mua_rl.algo.kl.placement) == (
        0.001,
        "k3",
        "loss",
    )
    assert (mua_rl.data.tasks_per_step, mua_rl.rollout.n, mua_rl.rollout.max_turns) == (32, 8, 30)
    assert mua_rl.algo.mask_truncated is False  # cut-short episodes are scored and trained on
    mutis = seed("mutis_math.yaml")
    assert (mutis.algo.kind, mutis.algo.gamma, mutis.algo.lam, mutis.algo.critic_lr) == (
        "ppo",
        1.0,
        1.0,
        1e-5,
    )
    assert (mutis.algo.kl.coef, mutis.algo.kl.placement, mutis.algo.loss.entropy_coef) == (
        0.001,
        "reward",
        0.001,
    )
    for name in ("userrl_all.yaml", "userrl_function.yaml", "userrl_travel.yaml"):
        userrl = seed(name)
        assert (userrl.algo.score, userrl.algo.credit, userrl.algo.gamma) == (
            "mean",
            "equalized",
            0.8,
        )
        assert (userrl.data.tasks_per_step, userrl.rollout.n, userrl.rollout.max_turns) == (
            128,
            8,
            16,
        )
        assert userrl.algo.kl.coef == 0.0
    mix = seed("userrl_all.yaml")  # UserRL's mix: no weights (rows decide), its user per gym
    assert all(g.weight is None for g in mix.gyms)
    users = {g.name: (g.user.model if g.user else None) for g in mix.gyms}
    assert users == {
        "travel": "gpt-4o",
        "turtle": "gpt-4o-mini",
        "persuade": "gpt-4o-mini",
        "tau": "gpt-4o",
        "function": None,
    }
    assert mix.total_steps == 2426 // 128 * 15


def test_tau_grpo_uses_mua_rls_kl():
    recipe = load_recipe(str(REPO / "recipes" / "tau_grpo.yaml"), [], verb="train")
    assert recipe.algo.kl.coef == 0.001 and recipe.algo.kl.placement == "loss"


def test_cli_broken_recipe_exit_2(tmp_path, mua_cli):
    path = tmp_path / "r.yaml"
    path.write_text("optim:\n  learning_rate: 3\n")
    code, out, err = mua_cli("recipe", "validate", str(path))
    assert code == 2
    assert "r.yaml: optim.learning_rate: unknown key; valid keys here:" in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_cli_schema_lists_documented_fields(mua_cli):
    code, out, err = mua_cli("recipe", "schema", "train")
    assert code == 0, err
    for field in (
        "model.path",
        "rollout.max_new_tokens_per_turn",
        "optim.lr",
        "checkpoint.save_freq",
    ):
        assert field in out
    assert "Peak learning rate" in out
    assert "mua recipe schema alternate" in out  # where the alternating recipe's fields are
    code, out, err = mua_cli("recipe", "schema", "alternate")
    assert code == 0, err
    for field in (
        "alternate.rounds",
        "alternate.steps",
        "alternate.user.recipe",
        "alternate.first",
    ):
        assert field in out


def test_cli_no_args_prints_help(mua_cli):
    code, out, err = mua_cli()
    assert "Usage" in out + err


def test_kind_override_drops_the_other_arms_keys_with_a_note(tmp_path, capsys):
    from mua.config.recipe_loading import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(
        "verb: train\nuser: {kind: llm, base_url: 'http://127.0.0.1:9/v1', max_tokens: 64}\n"
    )
    recipe = load_recipe(str(path), ["user.kind=scripted"])
    assert recipe.user.kind == "scripted"
    err = capsys.readouterr().err
    assert "user.base_url" in err and "user.max_tokens" in err and "dropped" in err


def test_eval_recipe_refuses_a_rollout_temperature_it_would_ignore(tmp_path):
    from mua.config.recipe_loading import load_recipe
    from mua.errors import UsageError

    path = tmp_path / "e.yaml"
    path.write_text("verb: eval\nrollout: {temperature: 0.7}\n")
    with pytest.raises(UsageError, match="eval.temperature"):
        load_recipe(str(path), [])
