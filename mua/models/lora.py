"""LoRA adapters on a causal LM, built with `peft`: wrapping, names, merged weights, adapter files.

`add_adapters` wraps a model with the recipe's `model.lora` (`check_targets` refuses targets that
match nothing, on the meta device); `hf_name` maps peft names back to the base's; `merged_params`
streams the base's names with every adapter merged (W + B @ A · alpha / r); `adapter_params`,
`adapter_file_names` and `adapter_config_dict` give an adapter as peft writes it; `ADAPTER_INFO`
names the file beside an adapter checkpoint. Not here: sharding, training, pushing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from mua.errors import UsageError

ADAPTER_INFO = "lora_adapter.json"  # beside an adapter-only checkpoint: base + LoRA settings
ADAPTER_NAME = "default"  # peft's adapter name
_PEFT_PREFIX = "base_model.model."


def peft_config(cfg, model=None):
    """peft's LoraConfig for a `model.lora` section (or a dict with the same keys); with
    `embeddings`, `model` (meta weights do) resolves the targets (`mua.models.lora_embeddings`)."""
    from peft import LoraConfig

    def get(key):
        return _get(cfg, key)

    target = get("target_modules")
    target = target if isinstance(target, str) else list(target)
    tie = False
    if get("embeddings"):
        from mua.models.lora_embeddings import embedding_targets

        target = embedding_targets(model, target)
        tie = bool(getattr(model.config, "tie_word_embeddings", False))
    return LoraConfig(
        r=int(get("rank")),
        lora_alpha=float(get("alpha")),
        lora_dropout=float(get("dropout")),
        target_modules=target,
        bias="none",
        task_type="CAUSAL_LM",
        ensure_weight_tying=tie,
    )


def add_adapters(model, cfg):
    """`model` wrapped in a peft model with fresh adapters (B = 0, or the embedding's A = 0: the
    output is the base's); with `embeddings`, the tied head reads the embedding's adapter."""
    from peft import get_peft_model

    try:
        peft_model = get_peft_model(model, peft_config(cfg, model))
    except ValueError as err:
        raise UsageError(_targets_message(cfg, err)) from None
    if _get(cfg, "embeddings"):
        from mua.models.lora_embeddings import tie_head_adapters

        tie_head_adapters(peft_model)
    return peft_model


def _get(cfg, key):
    return cfg.get(key) if isinstance(cfg, dict) else getattr(cfg, key, None)


def _targets_message(cfg, err: Exception) -> str:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
    return (
        f"model.lora.target_modules={_get(cfg, 'target_modules')!r} matches no layer of the model "
        f"({first}); use all-linear or names such as q_proj, v_proj, gate_proj"
    )


def check_targets(model_cfg) -> None:
    """UsageError (one line) when `model.lora.target_modules` matches nothing in the model."""
    import torch
    from peft import get_peft_model

    from mua.models.model_loading import TINY_PREFIX

    if model_cfg.path.startswith(TINY_PREFIX):
        from mua.models.model_loading import tiny_preset
        from mua.models.tiny import tiny_config

        config = tiny_config(tiny_preset(model_cfg.path))
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_cfg.path)
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # the recipe's names on their own: the embedding (every model has one) would hide a typo
    own = model_cfg.lora.model_copy(update={"embeddings": False})
    try:
        get_peft_model(model, peft_config(own, model))
    except ValueError as err:
        raise UsageError(_targets_message(model_cfg.lora, err)) from None


def is_peft(model) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


_EMBED_FACTORS = (".lora_embedding_A", ".lora_embedding_B")  # peft's lora.Embedding


def is_adapter_name(name: str) -> bool:
    """A LoRA factor, peft name or file name (`.lora_A.`/`.lora_B.`, `.lora_embedding_A`/`_B`)."""
    return ".lora_A." in name or ".lora_B." in name or any(f in name for f in _EMBED_FACTORS)


def hf_name(name: str) -> str:
    """The base model's HF name of a peft parameter name."""
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return name.replace(".base_layer.", ".")


def lora_scalings(model) -> dict[str, float]:
    """{peft module name: alpha / r} of every LoRA layer of `model`."""
    from peft.tuners.lora import LoraLayer

    return {
        name: float(module.scaling[ADAPTER_NAME])
        for name, module in model.named_modules()
        if isinstance(module, LoraLayer) and ADAPTER_NAME in module.scaling
    }


def merged_params(named: Iterable, scalings: dict[str, float]) -> Iterator:
    """(HF name, merged tensor) from (peft name, full tensor) pairs in `named_parameters` order.

    A LoRA layer's base weight is held until its A and B arrive (they follow it), then yielded
    as W + (B @ A) * scaling (a linear layer) or W + (B @ A).T * scaling (the embedding, whose
    A is r x vocab and B hidden x r); the adapter tensors themselves are not yielded. A head
    tied to the embedding has no tensors of its own here: the embedding's merged weight is
    its weight too."""
    pending: dict[str, dict] = {}
    for name, tensor in named:
        module, _, leaf = name.rpartition(".")
        owner = _lora_owner(name, scalings)
        if owner is None:
            yield hf_name(name), tensor
            continue
        if leaf == "bias":  # the base layer's bias is not changed by LoRA
            yield hf_name(name), tensor
            continue
        parts = pending.setdefault(owner, {})
        if ".lora_A." in name or ".lora_embedding_A." in name:
            parts["A"] = tensor
        elif ".lora_B." in name or ".lora_embedding_B." in name:
            parts["B"] = tensor
            parts["embedding"] = ".lora_embedding_B." in name
        else:
            parts["W"], parts["name"] = tensor, hf_name(name)
        if {"A", "B", "W"} <= parts.keys():
            del pending[owner]
            w, a, b = parts["W"], parts["A"], parts["B"]
            delta = (b.float() @ a.float()) * scalings[owner]
            if parts["embedding"]:
                delta = delta.T
            yield parts["name"], (w.float() + delta).to(w.dtype)
    if pending:
        raise RuntimeError(f"LoRA layers without their weights or adapters: {sorted(pending)[:3]}")


def _lora_owner(name: str, scalings: dict[str, float]) -> str | None:
    for marker in (
        ".base_layer.",
        ".lora_A.",
        ".lora_B.",
        ".lora_embedding_A.",
        ".lora_embedding_B.",
    ):
        if marker in name:
            owner = name.split(marker, 1)[0]
            return owner if owner in scalings else None
    return None


def adapter_params(named: Iterable) -> Iterator:
    """The adapter tensors (peft names) of a stream of (name, tensor)."""
    for name, tensor in named:
        if is_adapter_name(name):
            yield name, tensor


def adapter_file_name(name: str) -> str:
    """The name peft writes a peft parameter under in `adapter_model.safetensors`
    (`...q_proj.lora_A.weight`, `...embed_tokens.lora_embedding_A`)."""
    for factor in _EMBED_FACTORS:
        if name.endswith(f"{factor}.{ADAPTER_NAME}"):
            return name[: -len(ADAPTER_NAME) - 1]
    return name.replace(f".lora_A.{ADAPTER_NAME}.", ".lora_A.").replace(
        f".lora_B.{ADAPTER_NAME}.", ".lora_B."
    )


def adapter_file_names(named: Iterable, heads: dict[str, str] | None = None) -> Iterator:
    """(file name, tensor) of the adapter tensors of a stream of (peft name, tensor); `heads`
    ({tied head module: embedding module}, `lora_embeddings.tied_heads`) adds the tied head's
    factors, which peft's files hold too."""
    from mua.models.lora_embeddings import with_tied_head_tensors

    for name, tensor in with_tied_head_tensors(adapter_params(named), heads or {}):
        yield adapter_file_name(name), tensor


def adapter_config_dict(model) -> dict:
    """The adapter's `adapter_config.json` content: peft's LoraConfig of `model`, with the
    target modules as peft resolved them (`all-linear` becomes the layer names) and JSON types."""
    config = model.peft_config[ADAPTER_NAME].to_dict()
    out = {}
    for key, value in config.items():
        if isinstance(value, set | frozenset):
            value = sorted(value)
        elif hasattr(value, "value") and not isinstance(value, int | float | str | bool):
            value = value.value  # enums (task_type, peft_type)
        out[key] = value
    return json.loads(json.dumps(out, default=str))


def write_adapter_info(folder: Path, model_cfg) -> None:
    """`lora_adapter.json`: the base model (path, seed) and the LoRA settings of a checkpoint."""
    lora = model_cfg.lora
    info = {
        "base_model": model_cfg.path,
        "seed": model_cfg.seed,
        "rank": lora.rank,
        "alpha": lora.alpha,
        "dropout": lora.dropout,
        "target_modules": lora.target_modules,
        "embeddings": lora.embeddings,
    }
    (Path(folder) / ADAPTER_INFO).write_text(json.dumps(info, indent=2) + "\n")


def read_adapter_info(folder: Path) -> dict | None:
    file = Path(folder) / ADAPTER_INFO
    return json.loads(file.read_text()) if file.is_file() else None
