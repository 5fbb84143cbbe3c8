"""The trained model of a run: the policy built and sharded (FSDP2) with the trainer's attention
and norms, its checkpoint side files, and its Hugging Face exports.

Every rank builds identical fp32 master weights (`mua.models.model_loading`) that
`mua.distributed.fsdp.shard_model` shards; attention is `mua_varlen` unless flash-attn is
configured, norms as docs/training.md says. With `model.lora` only adapters train, and the
reference is the policy with them disabled (`AdaptersDisabled`). `engine_params` is what engines
and exports receive: full tensors under HF names, adapters merged. Exports gather tensor by
tensor to rank 0. Not here: forward passes for losses (`mua.train.packed_forward`), the critic.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from torch import nn

from mua.distributed.fsdp import iter_full_params, shard_model


def load_policy(recipe, mesh, trainable: bool = True) -> nn.Module:
    """The policy (or, with `trainable=False`, a frozen copy), sharded; with `model.lora` and
    `trainable`, a peft model with fresh adapters (only they require gradients)."""
    p = recipe.parallel
    model = load_trained_lm(recipe, mesh.device_type)
    if trainable and recipe.model.lora is not None:
        from mua.models.lora import add_adapters

        model = add_adapters(model, recipe.model.lora)
    return shard_model(
        model,
        mesh,
        mixed_precision=p.mixed_precision,
        activation_checkpointing=p.activation_checkpointing and trainable,
        cpu_offload=p.cpu_offload,
        trainable=trainable,
    )


class AdaptersDisabled:
    """The KL reference of a LoRA run: the policy's forward with its adapters disabled (the
    base weights, no second copy). Other attributes are the policy's."""

    def __init__(self, policy, device):
        """Collective (every rank builds it at once): one adapted forward of two tokens first.
        FSDP2 fixes each block's gradient reduce dtype at its first forward from the parameters
        that require gradients then, and peft's `disable_adapter` turns that flag off on the
        adapters while they are disabled: were the reference's forward the first, the adapters'
        gradients would later be reduced in bf16 under mixed precision."""
        import torch

        from mua.train.packed_batch import pack
        from mua.train.packed_forward import packed_logits

        self.policy = policy
        with torch.no_grad():
            packed_logits(policy, pack([[0, 0]], [0], device))
        if hasattr(policy, "reshard"):
            policy.reshard()
        self._root_adapters = hasattr(policy, "reshard") and _root_holds_adapters(policy)

    def __call__(self, *args, **kwargs):
        """peft's `disable_adapter` turns `requires_grad` off on the adapters and back on after,
        on the Parameters registered then. FSDP2 keeps the root's parameters gathered after its
        forward, so adapters held by the root (an adapted embedding or head) would be turned
        back on in their gathered form only, leaving the shards without `requires_grad`, and
        FSDP2 drops gradients of such shards. The root is resharded around the reference's
        forward, so both switches reach the shards."""
        import torch

        with torch.no_grad():
            self._reshard_root()
            with self.policy.disable_adapter():
                try:
                    return self.policy(*args, **kwargs)
                finally:
                    self._reshard_root()

    def _reshard_root(self) -> None:
        if self._root_adapters:
            self.policy.reshard()

    def __getattr__(self, name):
        return getattr(self.policy, name)


def _root_holds_adapters(model: nn.Module) -> bool:
    """Whether a trainable parameter sits outside the decoder blocks (FSDP2's root unit)."""
    from mua.distributed.fsdp import decoder_blocks

    in_blocks = {id(p) for block in decoder_blocks(model) for p in block.parameters()}
    return any(p.requires_grad and id(p) not in in_blocks for p in model.parameters())


def engine_params(model: nn.Module) -> Iterator:
    """(HF name, full CPU tensor) of the policy as a plain model, one tensor at a time
    (collective: every rank iterates in lock-step); a peft policy's adapters are merged in."""
    from mua.models.lora import is_peft, lora_scalings, merged_params

    named = iter_full_params(model)
    if is_peft(model):
        return merged_params(named, lora_scalings(model))
    return named


def gather_to_main(model: nn.Module, is_main: bool) -> dict:
    """`engine_params` as a dict on rank 0; every other rank takes part in each gather and
    keeps nothing, so one full copy of the model exists in host memory, not one per rank."""
    full = {}
    for name, tensor in engine_params(model):
        if is_main:
            full[name] = tensor
    return full


def load_trained_lm(recipe, device_type: str | None = None) -> nn.Module:
    """The recipe's model as the trainer runs it (policy, reference, the critic's LM), unsharded:
    fp32 master weights, packed-row attention (`mua.kernels.packed_attention`; flash-attn, when
    chosen, stays) and the norms of `device_type` ("cpu" or "cuda"; default: cuda when available)."""
    import torch

    from mua.kernels.packed_attention import enable_varlen
    from mua.models import load_model

    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(
        recipe.model.path,
        dtype="float32",
        seed=recipe.model.seed,
        attn_implementation=trainer_attention(recipe),
    )
    enable_varlen(model)
    use_trainer_norms(model, device_type)
    return model


def use_trainer_norms(model: nn.Module, device_type: str) -> str:
    """Swap the model's RMSNorms for the trainer's: the hand-written backward of
    `mua.kernels.rms_norm` on CPU, Liger's kernel on a GPU when liger-kernel is installed, else
    transformers' own. Returns which ("mua", "liger" or "transformers")."""
    if device_type == "cpu":
        from mua.kernels.rms_norm import use_fast_rms_norm

        use_fast_rms_norm(model)
        return "mua"
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:
        return "transformers"
    from mua.kernels.rms_norm import use_liger_rms_norm

    return "liger" if use_liger_rms_norm(model) else "transformers"


def trainer_attention(recipe) -> str:
    """The attention kernel of the trained models: the recipe's choice; with `auto`, flash-attn
    on a GPU when it is installed and compute runs in bf16 (the master weights stay fp32), else
    sdpa (which `mua.kernels.packed_attention` then runs per packed sequence)."""
    import torch

    from mua.models.model_loading import flash_attention_2_version

    choice = recipe.model.attn_implementation
    if choice != "auto":
        return choice
    bf16 = recipe.parallel.mixed_precision in ("auto", "bf16")
    if torch.cuda.is_available() and bf16 and flash_attention_2_version():
        return "flash_attention_2"
    return "sdpa"


def load_tokenizer_for(recipe):
    from mua.models import load_tokenizer

    return load_tokenizer(recipe.model.tokenizer or recipe.model.path)


def hf_side_files(model: nn.Module, tokenizer, model_cfg=None):
    """A callback writing config.json (+ generation config) and tokenizer files into a folder;
    with LoRA (`model_cfg.lora`), also `lora_adapter.json` naming the base and the settings."""

    def write(folder: Path) -> None:
        if model_cfg is not None and model_cfg.lora is not None:
            from mua.models.lora import write_adapter_info

            write_adapter_info(folder, model_cfg)
        model.config.save_pretrained(folder)
        if getattr(model, "generation_config", None) is not None:
            try:
                model.generation_config.save_pretrained(folder)
            except (ValueError, OSError):
                pass
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)

    return write


EXPORT_TMP_PREFIX = ".tmp-"  # `hf/.tmp-<name>`: an export being written; never read as a model


def export_hf(
    model: nn.Module,
    tokenizer,
    out_dir: str | Path,
    dtype: str,
    is_main: bool,
    info: dict | None = None,
) -> Path | None:
    """Gather full weights (collective) and, on rank 0, write a Hugging Face folder at `out_dir`.

    The writer is `mua merge`'s (`mua.models.merge.export_full_state`: same files, `merge_info.json`
    with `info` last), so `mua merge` later skips a step exported here. The folder is written as
    `.tmp-<name>` beside `out_dir` and renamed, so `out_dir` only ever holds a complete export.
    """
    import copy
    import os
    import shutil

    full = gather_to_main(model, is_main)
    if not is_main:
        return None
    from mua.models.merge import export_full_state
    from mua.models.model_loading import EAGER_ONLY

    config = copy.deepcopy(model.config)
    # The trainer's own attention kernel (mua.kernels.packed_attention) stays out of the export.
    config._attn_implementation = "eager" if config.model_type in EAGER_ONLY else "sdpa"
    out = Path(out_dir)
    tmp = out.parent / f"{EXPORT_TMP_PREFIX}{out.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    export_full_state(
        full,
        config,
        tmp,
        dtype,
        tokenizer=tokenizer,
        generation_config=getattr(model, "generation_config", None),
        info={"source": "mua train", **(info or {})},
    )
    old = out.parent / f"{EXPORT_TMP_PREFIX}old-{out.name}"
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    return out
