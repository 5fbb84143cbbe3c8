"""Recipe sections with one way to say each thing: the gym of `mua prep` and `mua eval`, and the
settings of an OpenAI-compatible endpoint (the LLM user's and the API agent's are one model)."""

from __future__ import annotations

import pytest

from mua.config import load_recipe
from mua.config.endpoint import EndpointConfig
from mua.config.rollout import RolloutConfig
from mua.config.users import LLMUserConfig
from mua.errors import UsageError


def _write(tmp_path, text: str):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def _one_line_error(path, overrides=(), verb=None) -> str:
    with pytest.raises(UsageError) as exc:
        load_recipe(path, list(overrides), verb=verb)
    message = str(exc.value)
    assert len(message.splitlines()) == 1, message
    return message


# -- mua prep: `gym` is a section ---------------------------------------------------------------


def test_prep_gym_is_a_section_with_its_options(tmp_path):
    path = _write(tmp_path, "verb: prep\ngym:\n  name: travel\n  options: {num_train: 5}\n")
    recipe = load_recipe(path, ["gym.options.num_test=2"])
    assert recipe.gym.name == "travel"
    assert recipe.gym.options == {"num_train": 5, "num_test": 2}


def test_prep_gym_as_a_string_is_refused_saying_what_to_write(tmp_path):
    message = _one_line_error(_write(tmp_path, "verb: prep\ngym: travel\n"))
    assert "gym: write the gym as a section, `gym: {name: travel}`" in message
    assert "gym.options" in message


def test_prep_top_level_options_point_to_gym_options(tmp_path):
    message = _one_line_error(_write(tmp_path, "verb: prep\noptions: {num_train: 5}\n"))
    assert "options: unknown key; write gym.options instead" in message
    with pytest.raises(UsageError, match="write gym.options instead"):
        load_recipe(None, ["options.num_train=5"], verb="prep")


def test_prep_cli_takes_the_recipe_gym_section(mua_cli, tmp_path):
    from mua.gym.taskfile import read_tasks

    path = _write(
        tmp_path,
        f"verb: prep\ngym:\n  name: guess\n  options: {{num_train: 3, num_test: 2}}\n"
        f"out: {tmp_path}/g\n",
    )
    code, _, err = mua_cli("prep", str(path), "gym.options.num_test=4")
    assert code == 0, err
    assert len(read_tasks(tmp_path / "g" / "train.parquet")) == 3
    assert len(read_tasks(tmp_path / "g" / "test.parquet")) == 4
    code, _, err = mua_cli("prep", str(_write(tmp_path, "verb: prep\ngym: guess\n")))
    assert code == 2 and "`gym: {name: guess}`" in err and len(err.strip().splitlines()) == 1


# -- mua eval: `gym` for one gym, `gyms` for several ----------------------------------------------


def test_eval_one_gym_or_several_each_with_its_options(tmp_path):
    one = load_recipe(_write(tmp_path, "verb: eval\ngym: {name: travel}\n"))
    assert [g.name for g in one.gym_sections()] == ["travel"]
    several = load_recipe(
        _write(
            tmp_path,
            "verb: eval\ngyms:\n  - {name: guess, options: {num_test: 3}}\n"
            "  - {name: travel, reward_weights: {aspects: 2.0}}\n",
        )
    )
    assert [g.name for g in several.gym_sections()] == ["guess", "travel"]
    assert several.gym_section("guess").options == {"num_test": 3}
    assert several.gym_section("travel").reward_weights == {"aspects": 2.0}
    assert several.gym_section("tau").options == {}  # a gym without a section: no options
    assert [g.name for g in load_recipe(None, [], verb="eval").gym_sections()] == ["guess"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("gym: {name: guess}\ngyms: [{name: travel}]\n", "gym and gyms both set"),
        ("gyms: [guess, travel]\n", "`gyms: [{name: guess}, {name: travel}]`"),
        ("gyms: [all]\n", "write each gym as a section, `gyms: [{name: all}]`"),
        ("gyms: [{name: guess}, {name: guess}]\n", "label 'guess' is also gyms[0]'s"),
    ],
)
def test_eval_gym_choice_errors_are_one_line(tmp_path, text, expected):
    message = _one_line_error(_write(tmp_path, "verb: eval\n" + text))
    assert expected in message, message


def test_eval_tasks_use_each_gyms_own_options(tmp_path):
    from mua.eval.tasks import load_eval_tasks

    recipe = load_recipe(
        _write(
            tmp_path,
            "verb: eval\ngyms:\n  - {name: guess, options: {num_test: 3}}\n"
            "  - {name: travel, options: {num_test: 2}}\n",
        )
    )
    names = [g.name for g in recipe.gym_sections()]
    tasks = load_eval_tasks(recipe, names)
    assert {name: len(ts) for name, ts in tasks.items()} == {"guess": 3, "travel": 2}


def test_eval_gym_flag_replaces_the_recipe_choice_and_keeps_known_sections(tmp_path):
    from mua.cli.eval_cmd import build_recipe

    path = _write(
        tmp_path,
        "verb: eval\nmodel: {path: expert}\ngyms:\n  - {name: guess, options: {num_test: 3}}\n"
        "  - {name: travel}\n",
    )
    flags = dict(model=None, user=None, n=None, max_tasks=None, temperature=1.0)
    recipe, _ = build_recipe([str(path)], gyms=["guess"], **flags)
    assert len(recipe.gyms) == 1 and recipe.gyms[0].name == "guess"
    assert recipe.gyms[0].options == {"num_test": 3}
    assert recipe.eval.temperature == 1.0
    recipe, _ = build_recipe([str(path)], gyms=["tau,guess", "tau"], **flags)
    assert [(g.name, g.options) for g in recipe.gym_sections()] == [
        ("tau", {}),
        ("guess", {"num_test": 3}),
    ]
    with pytest.raises(UsageError, match="no gym named"):
        build_recipe([str(path)], gyms=[","], **flags)


def test_eval_folder_takes_another_gym_and_refuses_changed_gym_options(tmp_path):
    """Results are kept per gym: a second gym joins the folder; other options for a gym do not."""
    from mua.eval.session import run_evaluation

    def evaluate(gym: str, *overrides: str):
        recipe = load_recipe(None, ["eval.max_tasks=1", f"gym.name={gym}", *overrides], "eval")
        return run_evaluation(recipe, model="expert", gyms=[gym], out_dir=tmp_path, track=False)

    evaluate("guess")
    summaries, _ = evaluate("travel")
    assert summaries["travel"]["num_trajectories"] == 1
    with pytest.raises(UsageError, match="different evaluation.*gym_options"):
        evaluate("guess", "gym.options.max_number=4")


def test_eval_temperature_alone_is_not_taken_for_a_rollout_temperature():
    """The eval recipe's own rollout defaults (greedy) are defaults, not a set rollout.temperature."""
    recipe = load_recipe(None, ["eval.temperature=1.0"], verb="eval")
    assert recipe.eval.temperature == 1.0 and recipe.rollout.n == 1
    with pytest.raises(UsageError, match="set eval.temperature"):
        load_recipe(None, ["eval.temperature=1.0", "rollout.temperature=0.5"], verb="eval")


# -- endpoints: one model for the LLM user and the API agent -------------------------------------


def test_user_and_agent_endpoints_are_one_model():
    assert issubclass(LLMUserConfig, EndpointConfig)
    assert RolloutConfig.model_fields["openai"].annotation is EndpointConfig
    assert "base_url" not in RolloutConfig.model_fields  # no second place for the agent's URL
    assert "api_key_env" not in RolloutConfig.model_fields


def test_agent_endpoint_takes_its_settings_from_rollout_openai(monkeypatch):
    from mua.rollout.openai_policy import OpenAIPolicy

    monkeypatch.setenv("MUA_TEST_AGENT_KEY", "k")
    recipe = load_recipe(
        None,
        [
            "rollout.openai.base_url=http://127.0.0.1:9/v1",
            "rollout.openai.api_key_env=MUA_TEST_AGENT_KEY",
            "rollout.openai.timeout_s=7",
            "rollout.openai.max_retries=1",
            "rollout.openai.backoff_s=0.25",
            "rollout.openai.max_concurrency=3",
            "rollout.call_timeout_s=99",
        ],
        verb="eval",
    )
    endpoint = OpenAIPolicy.from_config(recipe.rollout, model="m").endpoint
    assert endpoint.base_url == "http://127.0.0.1:9/v1"
    assert endpoint.api_key_env == "MUA_TEST_AGENT_KEY"
    assert (endpoint.timeout_s, endpoint.max_retries, endpoint.backoff_s) == (7.0, 1, 0.25)
    assert endpoint.max_concurrency == 3


@pytest.mark.parametrize("key", ["base_url", "api_key_env"])
def test_old_agent_endpoint_keys_name_their_new_place(tmp_path, key):
    message = _one_line_error(_write(tmp_path, f"verb: eval\nrollout:\n  {key}: X_Y\n"))
    assert f"rollout.{key}: unknown key; write rollout.openai.{key} instead" in message
    with pytest.raises(UsageError, match=f"write rollout.openai.{key} instead"):
        load_recipe(None, [f"rollout.{key}=X_Y"], verb="eval")


def test_agent_api_key_env_must_name_a_variable():
    message = _one_line_error(None, ["rollout.openai.api_key_env=my key"], "eval")
    assert "rollout.openai.api_key_env: must name an environment variable" in message
