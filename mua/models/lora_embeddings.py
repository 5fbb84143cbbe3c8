"""LoRA on the token embedding and the output head (`model.lora.embeddings: true`), with peft.

On a tied model peft gives the head factors of its own that alias the embedding's (two optimizer
steps for one tensor, refused by FSDP2); `tie_head_adapters` replaces them with `TiedFactor`s that
read the embedding's Parameters transposed at every call, so each factor is one Parameter with one
gradient (docs/lora.md). An untied head gets its own peft adapter. Also: `embedding_targets`,
`tied_heads`, `add_tied_head_adapter`, `with_tied_head_tensors` (peft's file order).
Not here: building models or configs (`mua.models.lora`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from torch import nn

EMBED_A = "lora_embedding_A"
EMBED_B = "lora_embedding_B"


def embedding_targets(model, target_modules) -> list[str]:
    """Module names for peft's `target_modules`: the recipe's (`all-linear` resolved: every
    linear layer except the output head), the input embedding, and the head when it is untied."""
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    names = dict((id(m), n) for n, m in model.named_modules())
    if isinstance(target_modules, str):  # all-linear
        out = {
            name.rsplit(".", 1)[-1]
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and module is not head
        }
    else:
        out = set(target_modules)
    out.add(names[id(embed)].rsplit(".", 1)[-1])
    if head is not None and head.weight is not embed.weight:
        out.add(names[id(head)].rsplit(".", 1)[-1])
    return sorted(out)


class TiedFactor(nn.Module):
    """One LoRA factor of the tied output head: the embedding adapter's Parameter `attr`
    (`lora_embedding_A` or `_B`, adapter `key`), transposed, read at each call. The embedding
    module is held outside the module tree, so no Parameter is listed twice."""

    def __init__(self, embedding: nn.Module, attr: str, key: str) -> None:
        super().__init__()
        self._source = (embedding, attr, key)  # a tuple: not registered as a submodule

    @property
    def weight(self):
        embedding, attr, key = self._source
        return getattr(embedding, attr)[key].T

    def forward(self, x):
        return nn.functional.linear(x, self.weight)

    def extra_repr(self) -> str:
        return f"tied to {self._source[1]}[{self._source[2]!r}].T"


def tie_head_adapters(peft_model) -> dict[str, str]:
    """Make the tied head's LoRA factors read the embedding's (see the module docstring);
    {head module name: embedding module name} of what was tied ({} on an untied model)."""
    from peft.tuners.lora import Linear

    embed_name, embed = _lora_embedding(peft_model)
    if embed is None:
        return {}
    tied = {}
    for name, module in peft_model.named_modules():
        if not isinstance(module, Linear) or module.get_base_layer().weight is not _base(embed):
            continue
        for key in list(module.lora_A.keys()):
            if key in embed.lora_embedding_A:
                module.lora_A[key] = TiedFactor(embed, EMBED_B, key)
                module.lora_B[key] = TiedFactor(embed, EMBED_A, key)
        tied[name] = embed_name
    return tied


def add_tied_head_adapter(peft_model, adapter: str) -> bool:
    """Give a tied head adapter `adapter` of the embedding, as `get_peft_model` does for the
    first adapter (peft's `update_layer` with the embedding's factors, transposed, aliased).
    peft 0.21's `add_adapter` misses the tie once the head is wrapped, leaving the head
    unadapted. For an engine (nothing trains there); True when a head was given one."""
    from peft.tuners.lora import Linear

    _, embed = _lora_embedding(peft_model)
    config = peft_model.peft_config.get(adapter)
    if embed is None or adapter not in embed.lora_embedding_A:
        return False
    if not getattr(config, "ensure_weight_tying", False):
        return False
    added = False
    for module in peft_model.modules():
        if not isinstance(module, Linear) or adapter in module.lora_A:
            continue
        if module.get_base_layer().weight is not _base(embed):
            continue
        factors = {
            "lora_A": embed.lora_embedding_B[adapter].t(),
            "lora_B": embed.lora_embedding_A[adapter].t(),
        }
        module.update_layer(
            adapter, embed.r[adapter], embed.lora_alpha[adapter], config, tied_adapter=factors
        )
        added = True
    return added


def tied_heads(peft_model) -> dict[str, str]:
    """{head module name: embedding module name} of the heads `tie_head_adapters` tied."""
    from peft.tuners.lora import Linear

    out = {}
    for name, module in peft_model.named_modules():
        if isinstance(module, Linear):
            factors = list(module.lora_A.values())
            if factors and isinstance(factors[0], TiedFactor):
                embedding = factors[0]._source[0]
                out[name] = next(n for n, m in peft_model.named_modules() if m is embedding)
    return out


def with_tied_head_tensors(named: Iterable, heads: dict[str, str]) -> Iterator:
    """(peft name, tensor) of an adapter stream, each embedding factor followed by the tied
    head's factor it stands for (head A = embedding B.T, head B = embedding A.T, contiguous),
    under the head's peft parameter name (`<head>.lora_A.<adapter>.weight`)."""
    by_embedding = {}
    for head, embedding in heads.items():
        by_embedding.setdefault(embedding, []).append(head)
    for name, tensor in named:
        yield name, tensor
        for factor, head_factor in ((EMBED_A, "lora_B"), (EMBED_B, "lora_A")):
            owner, sep, key = name.partition(f".{factor}.")
            if sep and owner in by_embedding:
                for head in by_embedding[owner]:
                    yield f"{head}.{head_factor}.{key}.weight", tensor.T.contiguous()


def _lora_embedding(peft_model):
    from peft.tuners.lora import Embedding

    for name, module in peft_model.named_modules():
        if isinstance(module, Embedding):
            return name, module
    return None, None


def _base(embedding):
    return embedding.get_base_layer().weight
