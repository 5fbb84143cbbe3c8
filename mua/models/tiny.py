"""Tiny offline models: named presets built from a config with a fixed seed.

A preset names an architecture family (Qwen3, Qwen2, Llama, Qwen3-MoE, gpt-oss) and its sizes;
`build_tiny_model` makes a randomly initialised model, identical for the same preset and seed,
over the tiny tokenizer's 2000-token vocabulary. Qwen presets tie input and output embeddings,
Llama and gpt-oss presets do not, so tests cover both. `sized_config` is the one place a config of given sizes
is built (presets and benchmarks). For tests, demos and debugging: untrained, they produce noise.
Not here: loading real checkpoints (`mua.models.model_loading`).
"""

from __future__ import annotations

from dataclasses import dataclass

TINY_VOCAB_SIZE = 2000
PAD_TOKEN_ID = 0  # <|endoftext|>
EOS_TOKEN_ID = 2  # <|im_end|>


@dataclass(frozen=True)
class TinyPreset:
    family: str  # "qwen3" | "qwen2" | "llama" | "qwen3_moe" | "gpt_oss"
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    tie_word_embeddings: bool
    approx_params: int  # what the name promises; tests check the count is close to it
    max_position_embeddings: int = 8192
    # mixture of experts (qwen3_moe, gpt_oss): experts per layer and experts each token goes to;
    # `intermediate_size` is then each expert's
    num_experts: int = 0
    experts_per_token: int = 0

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
    # 2.0M parameters, 0.9M active per token: 8 experts per layer, 2 per token
    "qwen3moe-2m": TinyPreset("qwen3_moe", 128, 4, 4, 2, 128, True, 2_030_000, 8192, 8, 2),
    # 0.31B parameters, 16 experts per layer, 2 per token (the memory check of docs/moe.md)
    "qwen3moe-310m": TinyPreset("qwen3_moe", 512, 8, 8, 4, 1536, True, 310_000_000, 8192, 16, 2),
    # gpt-oss: 2.3M parameters, 8 experts per layer, 2 per token; sliding-window (128 tokens)
    # and full attention alternate, attention sinks, untied head
    "gptoss-2m": TinyPreset("gpt_oss", 128, 4, 4, 2, 128, False, 2_300_000, 8192, 8, 2),
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
    """A transformers config of `family` ("qwen3", "qwen2", "llama" or "qwen3_moe", whose
    `intermediate` is each expert's) with these sizes, its
    embedding tied to the output head unless `tie` is false; `extra` (e.g. `head_dim`,
    `max_position_embeddings`, special token ids) on top. The presets and the benchmarks' models
    are all built from it."""
    import transformers

    config_class = getattr(transformers, _CONFIG_CLASSES[family])
    if family == "qwen3_moe":
        extra = {"moe_intermediate_size": intermediate, "decoder_sparse_step": 1, **extra}
    if family == "gpt_oss":
        extra = {**_GPT_OSS, **extra}
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


_CONFIG_CLASSES = {
    "qwen3": "Qwen3Config",
    "qwen2": "Qwen2Config",
    "llama": "LlamaConfig",
    "qwen3_moe": "Qwen3MoeConfig",
    "gpt_oss": "GptOssConfig",
}
# gpt-oss's own settings at a tiny scale: a 128-token window, YaRN over 4096 positions
_GPT_OSS = {
    "sliding_window": 128,
    "rope_parameters": {"rope_type": "yarn", "factor": 2.0, "beta_fast": 32.0, "beta_slow": 1.0,
                        "truncate": False, "original_max_position_embeddings": 4096,
                        "rope_theta": 150000.0},
}  # fmt: skip


def tiny_config(preset: TinyPreset):
    """A transformers config for the preset, with the tiny tokenizer's special ids."""
    p = preset
    extra = {"head_dim": p.head_dim} if p.family != "qwen2" else {}
    sizes = (p.hidden_size, p.num_layers, p.num_heads, p.num_kv_heads, p.intermediate_size)
    special = {"bos_token_id": None, "eos_token_id": EOS_TOKEN_ID, "pad_token_id": PAD_TOKEN_ID}
    if p.num_experts and p.family == "gpt_oss":
        extra["num_local_experts"] = p.num_experts
        extra["num_experts_per_tok"] = p.experts_per_token
    elif p.num_experts:
        extra["num_experts"] = p.num_experts
        extra["num_experts_per_tok"] = p.experts_per_token
        extra["norm_topk_prob"] = True
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
