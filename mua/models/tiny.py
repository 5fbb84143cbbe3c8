"""Tiny offline models: named presets built from a config with a fixed seed.

A preset names an architecture family (Qwen3, Qwen2, Llama) and its sizes; `build_tiny_model`
creates a randomly initialised model that is identical for the same preset and seed, using the
tiny tokenizer's 2000-token vocabulary. Small Qwen models tie the input and output embeddings,
as the real small Qwen2/Qwen3 checkpoints do; the Llama presets keep them separate, as Llama 2
and TinyLlama do, so both layouts are covered by tests.

`sized_config` is the one place a config of given sizes is built: the presets' and the
benchmarks' models come from it.

These models are for tests, demos and debugging; they are not trained and produce noise.
Loading real checkpoints is in `mua.models.model_loading`.
"""

from __future__ import annotations

from dataclasses import dataclass

TINY_VOCAB_SIZE = 2000
PAD_TOKEN_ID = 0  # <|endoftext|>
EOS_TOKEN_ID = 2  # <|im_end|>


@dataclass(frozen=True)
class TinyPreset:
    family: str  # "qwen3" | "qwen2" | "llama"
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tie_word_embeddings: bool
    approx_params: int  # what the name promises; tests check the count is close to it
    max_position_embeddings: int = 8192

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


TINY_PRESETS: dict[str, TinyPreset] = {
    "qwen3-1m": TinyPreset("qwen3", 128, 4, 4, 2, 384, True, 1_040_000),
    "qwen2-1m": TinyPreset("qwen2", 128, 4, 4, 2, 688, True, 1_500_000),
    "llama-1m": TinyPreset("llama", 128, 4, 4, 2, 512, False, 1_500_000),
    "qwen3-10m": TinyPreset("qwen3", 256, 12, 4, 2, 768, True, 10_000_000),
    "qwen2-10m": TinyPreset("qwen2", 256, 12, 4, 2, 768, True, 10_000_000),
    "llama-10m": TinyPreset("llama", 256, 10, 4, 2, 896, False, 10_000_000),
    "qwen3-30m": TinyPreset("qwen3", 512, 10, 8, 4, 1408, True, 30_000_000),
    "llama-30m": TinyPreset("llama", 512, 10, 8, 4, 1344, False, 30_000_000),
}


def sized_config(
    family: str,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    intermediate: int,
    *,
    tie: bool = True,
    **extra,
):
    """A transformers config of `family` ("qwen3", "qwen2" or "llama") with these sizes, its
    embedding tied to the output head unless `tie` is false; `extra` (e.g. `head_dim`,
    `max_position_embeddings`, special token ids) on top. The presets and the benchmarks' models
    are all built from it."""
    import transformers

    config_class = getattr(transformers, _CONFIG_CLASSES[family])
    return config_class(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=tie,
        **extra,
    )


_CONFIG_CLASSES = {"qwen3": "Qwen3Config", "qwen2": "Qwen2Config", "llama": "LlamaConfig"}


def tiny_config(preset: TinyPreset):
    """A transformers config for the preset, with the tiny tokenizer's special ids."""
    p = preset
    extra = {"head_dim": p.head_dim} if p.family != "qwen2" else {}
    sizes = (p.hidden_size, p.num_layers, p.num_heads, p.num_kv_heads, p.intermediate_size)
    special = {"bos_token_id": None, "eos_token_id": EOS_TOKEN_ID, "pad_token_id": PAD_TOKEN_ID}
    return sized_config(
        p.family,
        TINY_VOCAB_SIZE,
        *sizes,
        tie=p.tie_word_embeddings,
        max_position_embeddings=p.max_position_embeddings,
        **special,
        **extra,
    )


def build_tiny_model(preset: TinyPreset, seed: int = 0, attn_implementation: str | None = None):
    """The preset's model in float32, initialised from `seed` without touching the global RNG."""
    import torch
    from transformers import AutoModelForCausalLM

    config = tiny_config(preset)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, **kwargs)
    return model
