"""scripts/lora_learns.py: the learning bar it judges by, and the embedding swap's mixed models."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tests.conftest import load_script


def test_bar_needs_every_seed_to_gain_and_a_mean_above_two_std_and_the_spread():
    learns = load_script("lora_learns").learns
    assert learns([0.10, 0.064, 0.041, 0.107, 0.107, 0.113])  # full fine-tuning, seeds 0-5
    # the LoRA recipe over seeds 0-5: 2 std = 0.041 < mean 0.045 < spread 0.047
    assert not learns([0.055, 0.064, 0.029, 0.023, 0.027, 0.070])
    assert not learns([0.05, 0.06, -0.001])  # a seed that loses reward
    assert not learns([0.05, 0.05, 0.0])  # a collapsed seed counts as no gain
    assert not learns([0.1])  # one seed has no spread to judge by


def _model(folder: Path, value: float) -> Path:
    folder.mkdir(parents=True)
    tensors = {
        "model.embed_tokens.weight": torch.full((4, 2), value),
        "model.layers.0.mlp.up_proj.weight": torch.full((3, 2), value),
        "model.norm.weight": torch.full((2,), value),
    }
    save_file(tensors, folder / "model.safetensors")
    (folder / "config.json").write_text("{}")
    return folder


def test_swapped_models_take_blocks_or_embedding_from_the_trained_model(tmp_path):
    swapped = load_script("lora_learns")._swapped_model
    sft, rl = _model(tmp_path / "sft", 1.0), _model(tmp_path / "rl", 2.0)
    blocks = load_file(swapped(sft, rl, tmp_path / "blocks", False) / "model.safetensors")
    embedding = load_file(swapped(sft, rl, tmp_path / "emb", True) / "model.safetensors")
    assert float(blocks["model.embed_tokens.weight"].max()) == 1.0
    assert float(blocks["model.layers.0.mlp.up_proj.weight"].min()) == 2.0
    assert float(blocks["model.norm.weight"].min()) == 2.0
    assert float(embedding["model.embed_tokens.weight"].min()) == 2.0
    assert float(embedding["model.layers.0.mlp.up_proj.weight"].max()) == 1.0
    assert (tmp_path / "blocks" / "config.json").is_file()
    assert float(load_file(rl / "model.safetensors")["model.embed_tokens.weight"].min()) == 2.0
