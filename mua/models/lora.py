"""LoRA adapters on a causal LM, built with `peft`: wrapping, names, merged weights, adapter files.

`add_adapters` wraps a model with the recipe's `model.lora` (`check_targets` refuses targets that
match nothing, on the meta device); on a mixture of experts `experts` adds per-expert adapters
on the fused expert tensors (peft's parameter LoRA), else the experts and routers stay frozen;
`hf_name` maps peft names back to the base's; `merged_params` streams the base's names with
every adapter merged (W + B @ A · alpha / r, per expert for the experts); `adapter_params`,
`adapter_file_names` and `adapter_config_dict` give an adapter as peft writes it; `ADAPTER_INFO`
names the file beside an adapter checkpoint. Not here: sharding, training, pushing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mua.errors import UsageError

ADAPTER_INFO = "lora_adapter.json"  # beside an adapter-only checkpoint: base + LoRA settings
ADAPTER_NAME = "default"  # peft's adapter name
_PEFT_PREFIX = "base_model.model."
# a mixture of experts' fused expert tensors (Qwen2/3-MoE, OLMoE, gpt-oss: `mlp.experts`)
EXPERT_PARAMETERS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


@dataclass(frozen=True)
class ExpertLora:
    """The adapter of one fused expert tensor [E, ...] (peft's ParamWrapper): its scaling, the
    wrapped parameter's name, the number of experts and whether the tensor is [E, out, in]."""

    scaling: float
    parameter: str
    num_experts: int
    out_first: bool


def peft_config(cfg, model=None):
    """peft's LoraConfig for a `model.lora` section (or a dict with the same keys); with
    `embeddings`, `model` (meta weights do) resolves the targets (`mua.models.lora_embeddings`)."""
    from peft import LoraConfig

    def get(key):
        return _get(cfg, key)

    target = get("target_modules")
    target = target if isinstance(target, str) else list(target)
    experts: dict = {}
    if model is not None and _is_moe(model):
        # peft maps all-linear (and gate/up/down_proj names) on a transformers-5 MoE onto the
        # experts and the router: name the linear layers here, the experts only when asked
        target = _linear_names(model) if target == "all-linear" else target
        if get("experts"):
            experts["target_parameters"] = list(EXPERT_PARAMETERS)
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
        **experts,
    )


def _is_moe(model) -> bool:
    from mua.models.moe_replay import is_moe

    return is_moe(model)


def _linear_names(model) -> list[str]:
    """The names of the decoder's linear layers (what `all-linear` means: not the head)."""
    import torch

    out_names = {"lm_head"}
    return sorted(
        {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] not in out_names
        }
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
    while ".base_layer." in name:  # nested wrappers (two adapted tensors of one module)
        name = name.replace(".base_layer.", ".")
    return name


def lora_scalings(model) -> dict[str, float | ExpertLora]:
    """{peft module name: alpha / r} of every LoRA layer of `model` (an `ExpertLora` for the
    adapter of a fused expert tensor)."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora.layer import ParamWrapper

    out: dict[str, float | ExpertLora] = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or ADAPTER_NAME not in module.scaling:
            continue
        scaling = float(module.scaling[ADAPTER_NAME])
        if isinstance(module, ParamWrapper):
            out[name] = ExpertLora(scaling, module.parameter_name, int(module.num_experts),
                                   bool(module._did_swap_in_out_features))  # fmt: skip
        else:
            out[name] = scaling
    return out


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
            w, a, b, scale = parts["W"], parts["A"], parts["B"], scalings[owner]
            if isinstance(scale, ExpertLora):
                delta = expert_delta(a, b, scale)
            else:
                delta = (b.float() @ a.float()) * scale
            if parts["embedding"]:
                delta = delta.T
            yield parts["name"], (w.float() + delta).to(w.dtype)
    if pending:
        raise RuntimeError(f"LoRA layers without their weights or adapters: {sorted(pending)[:3]}")


def expert_delta(a, b, lora: ExpertLora):
    """The per-expert update of a fused expert tensor from peft's factors: A [E·r, in] holds
    expert e's A in rows e·r..(e+1)·r, B [out, r·E] its B in columns e, e+E, ... (peft's
    layout); [E, out, in] or [E, in, out] as the tensor is."""
    import torch

    e = lora.num_experts
    a = a.float().reshape(e, -1, a.shape[-1])  # [E, r, in]
    b = b.float().reshape(b.shape[0], -1, e)  # [out, r, E]
    form = "o r e, e r i -> e o i" if lora.out_first else "o r e, e r i -> e i o"
    return torch.einsum(form, b, a) * lora.scaling


def _lora_owner(name: str, scalings: dict) -> str | None:
    """The LoRA module a peft parameter belongs to (None: not adapted). A base tensor under
    nested wrappers belongs to the wrapper of its own parameter name."""
    for marker in (".lora_A.", ".lora_B.", ".lora_embedding_A.", ".lora_embedding_B."):
        if marker in name:
            owner = name.split(marker, 1)[0]
            return owner if owner in scalings else None
    module, _, leaf = name.rpartition(".")
    while module.endswith(".base_layer"):
        module = module[: -len(".base_layer")]
        scale = scalings.get(module)
        if scale is not None and (not isinstance(scale, ExpertLora) or scale.parameter == leaf):
            return module
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
        "experts": lora.experts,
    }
    (Path(folder) / ADAPTER_INFO).write_text(json.dumps(info, indent=2) + "\n")


def read_adapter_info(folder: Path) -> dict | None:
    file = Path(folder) / ADAPTER_INFO
    return json.loads(file.read_text()) if file.is_file() else None
