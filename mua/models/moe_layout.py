"""Expert weights of Qwen-style mixtures of experts in the checkpoint's per-expert layout.

transformers (5.x) holds each MoE layer's experts fused: `mlp.experts.gate_up_proj` [E, 2I, H]
(each expert's gate rows, then its up rows) and `mlp.experts.down_proj` [E, H, I]. Checkpoints,
and the serving engines that load them (vLLM, SGLang), name them per expert:
`mlp.experts.{e}.gate_proj.weight` [I, H], `...up_proj.weight` [I, H], `...down_proj.weight`
[H, I]. `per_expert` turns a stream of (name, tensor) of the first kind into the second, for the
model types that store them so; other names and other models pass through unchanged.
`moe_layer_ids` names the decoder layers that hold a router (SGLang reports every layer's).
Not here: gpt-oss, whose checkpoints keep the fused layout (with biases): passed through as is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

# model types whose checkpoints hold one gate/up/down projection per expert
PER_EXPERT_CHECKPOINTS = ("qwen3_moe", "qwen2_moe", "olmoe")
_FUSED = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<kind>gate_up_proj|down_proj)$")


def per_expert(named: Iterable[tuple[str, Any]], model_type: str) -> Iterator[tuple[str, Any]]:
    """`named` with fused expert tensors split per expert (for `PER_EXPERT_CHECKPOINTS`)."""
    for name, tensor in named:
        match = _FUSED.match(name) if model_type in PER_EXPERT_CHECKPOINTS else None
        if match is None or tensor.dim() != 3:
            yield name, tensor
            continue
        prefix = match["prefix"]
        for e in range(tensor.shape[0]):
            if match["kind"] == "down_proj":
                yield f"{prefix}.{e}.down_proj.weight", tensor[e]
            else:
                gate, up = tensor[e].chunk(2, dim=0)
                yield f"{prefix}.{e}.gate_proj.weight", gate
                yield f"{prefix}.{e}.up_proj.weight", up


def moe_layer_ids(config: Any) -> list[int]:
    """The decoder layers of `config` that route tokens to experts, in order: Qwen-style
    `mlp_only_layers` and `decoder_sparse_step` leave some layers dense; other models route in
    every layer."""
    layers = int(config.num_hidden_layers)
    dense = set(getattr(config, "mlp_only_layers", None) or ())
    step = int(getattr(config, "decoder_sparse_step", 1) or 1)
    return [i for i in range(layers) if i not in dense and (i + 1) % step == 0]
