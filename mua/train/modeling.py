"""Build the trained policy of a run (FSDP2), write checkpoint side files and the final HF export.

Weights come from `mua.models.load_model` (full fp32 master weights on every rank, built with
the recipe's seed, so every rank starts identical), then `mua.dist.fsdp.shard_model` shards them.
The RL reference model is another `load_policy(..., trainable=False)`; the PPO critic lives in `mua.train.critic`.
Also writes the HF side files of a checkpoint and the final Hugging Face export.
Does not run forward passes for losses (see `mua.train.sft`).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from mua.dist.fsdp import full_state_dict, shard_model


def load_policy(recipe, mesh, trainable: bool = True) -> nn.Module:
    from mua.models import load_model

    model = load_model(recipe.model.path, dtype="float32", seed=recipe.model.seed)
    p = recipe.parallel
    return shard_model(
        model,
        mesh,
        mixed_precision=p.mixed_precision,
        activation_checkpointing=p.activation_checkpointing and trainable,
        cpu_offload=p.cpu_offload,
        trainable=trainable,
    )


def load_tokenizer_for(recipe):
    from mua.models import load_tokenizer

    return load_tokenizer(recipe.model.tokenizer or recipe.model.path)


def hf_side_files(model: nn.Module, tokenizer):
    """A callback writing config.json (+ generation config) and tokenizer files into a folder."""

    def write(folder: Path) -> None:
        model.config.save_pretrained(folder)
        if getattr(model, "generation_config", None) is not None:
            try:
                model.generation_config.save_pretrained(folder)
            except (ValueError, OSError):
                pass
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)

    return write


def export_hf(
    model: nn.Module, tokenizer, out_dir: str | Path, dtype: str, is_main: bool
) -> Path | None:
    """Gather full weights (collective) and, on rank 0, save a Hugging Face folder."""
    from transformers import AutoModelForCausalLM

    full = full_state_dict(model)
    if not is_main:
        return None
    from mua.models import save_hf

    plain = AutoModelForCausalLM.from_config(model.config)
    missing, unexpected = plain.load_state_dict(full, strict=False)
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(
            f"export: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    if getattr(plain.config, "tie_word_embeddings", False):
        plain.tie_weights()
    save_hf(plain, tokenizer, out_dir, dtype)
    return Path(out_dir)
