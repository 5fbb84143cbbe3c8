"""Tiny presets, load_model/load_tokenizer errors, and save_hf round trips."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from mua.errors import UsageError
from mua.models import TINY_PRESETS, load_model, load_tokenizer, render_ids, save_hf

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


@pytest.fixture(scope="module")
def prompt_ids(tok):
    messages = [{"role": "user", "content": "What is 2+3?"}]
    return torch.tensor([render_ids(tok, messages, add_generation_prompt=True)])  # [1, T]


def _num_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", sorted(TINY_PRESETS))
def test_preset_size_and_forward(name, prompt_ids):
    model = load_model(f"tiny:{name}")
    preset = TINY_PRESETS[name]
    assert 0.9 * preset.approx_params <= _num_params(model) <= 1.1 * preset.approx_params
    assert model.config.vocab_size == 2000
    assert model.config.model_type == preset.family
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == preset.tie_word_embeddings
    with torch.no_grad():
        logits = model(prompt_ids).logits
    assert logits.shape == (1, prompt_ids.shape[1], 2000)
    assert torch.isfinite(logits).all() and logits.std() > 0


def test_qwen2_1m_has_the_promised_shape():
    config = load_model("tiny:qwen2-1m").config
    assert (config.model_type, config.hidden_size, config.num_hidden_layers) == ("qwen2", 128, 4)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert TINY_PRESETS["qwen2-1m"].approx_params == 1_500_000


def test_small_qwen_presets_tie_embeddings_and_llama_presets_do_not():
    for name, preset in TINY_PRESETS.items():
        assert preset.tie_word_embeddings == name.startswith("qwen"), name


def test_same_seed_same_weights_other_seed_other_weights_global_rng_untouched():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = load_model("tiny:qwen3-1m", seed=0).state_dict()
    assert torch.equal(torch.rand(1), expected_next)
    b = load_model("tiny:qwen3-1m", seed=0).state_dict()
    c = load_model("tiny:qwen3-1m", seed=1).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    key = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(a[key], c[key])


def test_dtype_cast_keeps_the_same_weights():
    fp32 = load_model("tiny:qwen3-1m").state_dict()
    bf16 = load_model("tiny:qwen3-1m", dtype="bfloat16").state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"
    assert bf16[key].dtype == torch.bfloat16
    assert torch.equal(bf16[key], fp32[key].to(torch.bfloat16))


def test_generation_config_stops_on_im_end_and_pads_with_endoftext(tok):
    gen = load_model("tiny:qwen2-1m").generation_config
    assert gen.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id
    assert gen.pad_token_id == tok.pad_token_id == 0


@pytest.mark.parametrize("name", ["qwen3-1m", "llama-1m"])  # tied and untied embeddings
def test_save_hf_round_trip_gives_identical_logits(name, tok, prompt_ids, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = load_model(f"tiny:{name}")
    out = save_hf(model, tok, tmp_path / "hf")
    assert sorted(os.listdir(tmp_path)) == ["hf"]  # no temporary folder left behind
    for file in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json"):
        assert (out / file).is_file(), file
    loaded = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        assert torch.equal(model(prompt_ids).logits, loaded(prompt_ids).logits)
    assert loaded.generation_config.eos_token_id == tok.eos_token_id
    reloaded_tok = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "1"}]
    assert render_ids(reloaded_tok, messages) == render_ids(tok, messages)


def test_save_hf_bfloat16_replaces_an_existing_folder(tok, prompt_ids, tmp_path):
    model = load_model("tiny:qwen3-1m")
    save_hf(model, tok, tmp_path / "hf")
    (tmp_path / "hf" / "stale.txt").write_text("old")
    save_hf(model, tok, tmp_path / "hf", dtype="bfloat16")
    assert not (tmp_path / "hf" / "stale.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["hf"]
    loaded = load_model(str(tmp_path / "hf"), dtype="bfloat16")
    assert loaded.model.embed_tokens.weight.dtype == torch.bfloat16
    assert torch.equal(loaded.model.embed_tokens.weight, model.model.embed_tokens.weight.bfloat16())
    assert model.model.embed_tokens.weight.dtype == torch.float32  # caller's model left alone
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["dtype"] == "bfloat16"


def test_unknown_preset_suggests_the_closest_and_lists_all():
    with pytest.raises(UsageError) as err:
        load_model("tiny:qwen3-1n")
    message = str(err.value)
    assert "did you mean tiny:qwen3-1m?" in message and "tiny:llama-30m" in message
    assert "\n" not in message


def test_missing_folder_and_folder_without_config_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(UsageError, match="does not exist"):
        load_tokenizer("./missing/model/dir")
    with pytest.raises(UsageError, match="no config.json"):
        load_model(str(tmp_path))
    with pytest.raises(UsageError, match="has no tokenizer files"):
        load_tokenizer(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="no weights"):
        load_model(str(tmp_path))


def test_hub_id_is_refused_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="HF_HUB_OFFLINE=1"):
        load_model("Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(UsageError, match="HF_HUB_OFFLINE=1"):
        load_tokenizer("Qwen/Qwen2.5-0.5B-Instruct")


def test_unknown_dtype_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown dtype 'fp8'"):
        load_model("tiny:qwen3-1m", dtype="fp8")


def test_importing_mua_models_does_not_import_torch_or_transformers():
    code = "import sys, mua.models; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_sized_config_builds_each_family_with_its_sizes():
    from mua.models.tiny import sized_config

    config = sized_config("llama", 500, 64, 3, 4, 2, 96, tie=False, max_position_embeddings=256)
    got = (config.model_type, config.vocab_size, config.hidden_size, config.num_hidden_layers)
    assert got == ("llama", 500, 64, 3)
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    assert (config.intermediate_size, config.max_position_embeddings) == (96, 256)
    assert config.tie_word_embeddings is False
    qwen = sized_config("qwen3", 500, 64, 3, 4, 2, 96, head_dim=16)
    assert (qwen.model_type, qwen.head_dim, qwen.tie_word_embeddings) == ("qwen3", 16, True)
