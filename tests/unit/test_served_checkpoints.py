"""`checkpoint:` on an LLM endpoint: the keys, how overrides merge, and `serving`, which runs a
real `mua serve` per folder for as long as a verb runs, names it in the environment and stops it;
then `mua eval` with a user of the matrix that is a local checkpoint."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest
from pydantic import ValidationError

from mua.config.endpoint import SERVED_CHECKPOINTS_ENV
from mua.config.gyms import GymConfig, GymUserConfig, LLMAgentConfig
from mua.config.users import LLMUserConfig
from mua.errors import UsageError
from mua.gym.mix import entry_user

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    from mua.models import load_model, load_tokenizer

    folder = tmp_path_factory.mktemp("ckpt") / "hf"
    load_model("tiny:qwen3-1m").save_pretrained(folder)
    load_tokenizer("tiny:qwen3-1m").save_pretrained(folder)
    return folder


def test_checkpoint_and_base_url_are_one_address():
    with pytest.raises(ValidationError, match="base_url and checkpoint both set"):
        LLMUserConfig(base_url="http://x/v1", checkpoint="runs/a/hf/final")
    with pytest.raises(ValidationError, match="base_url and checkpoint both set"):
        GymUserConfig(base_url="http://x/v1", checkpoint="runs/a/hf/final")
    with pytest.raises(ValidationError, match="agent.model is required"):
        LLMAgentConfig()
    agent = LLMAgentConfig(checkpoint="runs/a/hf/final")
    assert agent.resolved_model() == "runs/a/hf/final"
    assert LLMUserConfig(checkpoint="runs/u").resolved_model() == "runs/u"


def test_an_entry_checkpoint_replaces_the_top_level_address_and_back():
    top = LLMUserConfig(base_url="http://api/v1", model="gpt", temperature=0.5)
    entry = GymConfig(name="guess", user={"checkpoint": "runs/u/hf/final"})
    user = entry_user(top, entry)
    assert (user.base_url, user.checkpoint, user.model) == (None, "runs/u/hf/final", None)
    assert user.temperature == 0.5  # keys other than the address are kept
    top = LLMUserConfig(checkpoint="runs/u/hf/final")
    user = entry_user(top, GymConfig(name="guess", user={"base_url": "http://x/v1"}))
    assert (user.base_url, user.checkpoint) == ("http://x/v1", None)


def test_an_unserved_checkpoint_names_the_fix(monkeypatch):
    monkeypatch.delenv(SERVED_CHECKPOINTS_ENV, raising=False)
    with pytest.raises(UsageError, match="is not being served"):
        LLMUserConfig(checkpoint="runs/u/hf/final").resolved_base_url()


def _recipe(tmp_path, folder):
    from mua.config import load_recipe

    path = tmp_path / "eval.yaml"
    path.write_text(
        "verb: eval\nmodel: {path: 'tiny:qwen3-1m'}\ngym: {name: guess}\n"
        f"eval: {{users: [{{label: frozen, kind: llm, checkpoint: '{folder}'}}]}}\n"
    )
    return load_recipe(path, verb="eval")


def test_serving_runs_a_server_per_folder_and_stops_it(tmp_path, hf_folder):
    from mua.serve.checkpoints import checkpoints_in, serving

    recipe = _recipe(tmp_path, hf_folder)
    assert checkpoints_in(recipe) == [str(hf_folder)]
    with serving(checkpoints_in(recipe)) as served:
        url = served[os.path.abspath(hf_folder)]
        assert json.loads(os.environ[SERVED_CHECKPOINTS_ENV]) == served
        assert LLMUserConfig(checkpoint=str(hf_folder)).resolved_base_url() == url
        body = json.dumps(
            {
                "model": str(hf_folder),
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "temperature": 0,
            }
        ).encode()
        request = urllib.request.Request(
            f"{url}/chat/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            answer = json.load(reply)
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["usage"]["completion_tokens"] > 0
    assert SERVED_CHECKPOINTS_ENV not in os.environ
    with pytest.raises(OSError):  # the server is gone
        urllib.request.urlopen(f"{url}/models", timeout=5)


def test_every_section_with_a_checkpoint_is_served_whatever_its_other_keys(tmp_path):
    """A judge given as a checkpoint is served though its section has no `api_key_env`; the
    recipe's own `checkpoint:` settings (a section, not a folder) are not an endpoint."""
    from pydantic import BaseModel

    from mua.config import load_recipe
    from mua.serve.checkpoints import checkpoints_in

    class Judge(BaseModel):
        model: str | None = None
        checkpoint: str | None = None

    class Recipe(BaseModel):
        judge: Judge
        users: list[Judge] = []

    recipe = Recipe(judge=Judge(checkpoint="runs/j/hf/final"), users=[Judge(checkpoint="u")])
    assert checkpoints_in(recipe) == ["runs/j/hf/final", "u"]
    path = tmp_path / "train.yaml"
    path.write_text(
        "verb: train\nmodel: {path: 'tiny:qwen3-1m'}\ncheckpoint: {save_freq: 1}\n"
        "gym: {name: guess, seat: user, fidelity_judge: {checkpoint: runs/j/hf/final}}\n"
    )
    assert checkpoints_in(load_recipe(path, verb="train")) == ["runs/j/hf/final"]


def test_a_missing_folder_is_refused_before_anything_starts(tmp_path):
    from mua.serve.checkpoints import checkpoints_in, serving

    recipe = _recipe(tmp_path, tmp_path / "nothing")
    with pytest.raises(UsageError, match="no model folder there"), serving(checkpoints_in(recipe)):
        pass


def test_mua_eval_measures_the_agent_against_a_checkpoint_user(tmp_path, hf_folder, mua_cli):
    """The user matrix's row `frozen` is the served checkpoint playing guess's LLM user."""
    out = tmp_path / "out"
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(
        "verb: eval\nmodel: {path: expert}\n"
        "gym: {name: guess, options: {max_number: 8, llm_user: true}}\n"
        "rollout: {max_turns: 3}\n"
        f"eval: {{max_tasks: 2, users: [{{label: frozen, kind: llm, checkpoint: '{hf_folder}', "
        "max_tokens: 4}]}\n"
    )
    code, stdout, stderr = mua_cli("eval", str(recipe), "--out", str(out))
    assert code == 0, stdout + stderr
    summary = json.loads((out / "summary.json").read_text())
    frozen = next(v for k, v in summary["gyms"].items() if "frozen" in k)
    # every guess was answered by the served (untrained) checkpoint: 3 turns, 2 tasks
    assert frozen["num_trajectories"] == 2 and frozen["user_failures"] == 0, frozen
    assert frozen["user_requests"] == 6, frozen


def _prompt_tokens(tok, messages) -> int:
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return len(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


@pytest.mark.parametrize("template", ["qwen3_5.jinja", "gpt_oss.jinja"])
def test_a_checkpoint_is_served_with_its_own_familys_chat_template(tmp_path, template):
    """A user checkpoint of another family (its tokenizer's chat template and special tokens)
    is rendered by the server with that template: the prompt's token count is the template's."""
    from mua.models import load_model, load_tokenizer
    from mua.serve.checkpoints import checkpoints_in, serving
    from tests.unit.family_templates import family_tokenizer

    tok = family_tokenizer(template)
    folder = tmp_path / "hf"
    model = load_model("tiny:qwen3-1m")
    model.resize_token_embeddings(len(tok))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    messages = [
        {"role": "system", "content": "You picked the number 6."},
        {"role": "user", "content": "[answer] 4"},
    ]
    rendered = _prompt_tokens(tok, messages)
    assert rendered != _prompt_tokens(load_tokenizer("tiny:qwen3-1m"), messages)
    with serving(checkpoints_in(_recipe(tmp_path, folder))) as served:
        body = json.dumps(
            {"model": str(folder), "messages": messages, "max_tokens": 4, "temperature": 0}
        ).encode()
        request = urllib.request.Request(
            f"{served[os.path.abspath(folder)]}/chat/completions",
            body,
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            answer = json.load(reply)
    assert answer["usage"]["prompt_tokens"] == rendered
    assert answer["choices"][0]["message"]["role"] == "assistant"
