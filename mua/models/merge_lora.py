"""`mua merge` of a LoRA checkpoint (adapters + their optimizer state, `lora_adapter.json` naming
the base): a merged Hugging Face folder (default) or a PEFT adapter folder (`adapter=True`).

The base is rebuilt from `lora_adapter.json` (`base` overrides its path) and the adapters loaded
after a shape check (another base's adapters are refused in one line before anything is written).
Merged: W + B @ A · alpha / r, written by `mua merge`'s writer; adapter: peft's `save_pretrained`
(float32, loadable by `PeftModel.from_pretrained`). `verify` compares logits with the trainer's
forward; both forms end with `merge_info.json`. Not here: optimizer state.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

from mua.errors import UsageError
from mua.models.merge import (
    MERGE_INFO,
    MergeResult,
    already_merged,
    export_full_state,
    probe_batch,
    verify_merged,
)
from mua.models.merge_steps import (
    MergeOptions,
    merge_lock,
    open_merge,
    read_checkpoint,
    record_verification,
)
from mua.output_folders import mark_dir


def adapter_model(step_dir: Path, info: dict, state: dict, base: str | None):
    """The base of `info` (or `base`) wrapped with its LoRA settings and `state`'s adapters."""
    from mua.models import load_model
    from mua.models.lora import add_adapters

    base_path = base or info["base_model"]
    model = load_model(base_path, dtype="float32", seed=int(info.get("seed", 0)))
    peft_model = add_adapters(model, SimpleNamespace(**info))
    own = peft_model.state_dict()
    for name, tensor in state.items():
        if name not in own or own[name].shape != tensor.shape:
            got = "absent" if name not in own else tuple(own[name].shape)
            raise UsageError(
                f"{step_dir}: the adapter does not fit the base {base_path!r} ({name} is "
                f"{tuple(tensor.shape)} in the checkpoint, {got} on the base); give the base it "
                "was trained on with --base"
            )
    missing = [n for n in own if ".lora_" in n and n not in state]
    if missing:
        raise UsageError(
            f"{step_dir}: the checkpoint lacks adapter tensors the settings of "
            f"lora_adapter.json create ({missing[0]}); was lora_adapter.json edited?"
        )
    peft_model.load_state_dict(state, strict=False)
    return peft_model.eval()


def _trainer_logits(peft_model, vocab_size: int):
    import torch

    with torch.no_grad():
        return peft_model(input_ids=probe_batch(vocab_size)).logits


def merge_lora_checkpoint(
    step: int,
    step_dir: Path,
    out_dir: Path,
    info: dict,
    options: MergeOptions = MergeOptions(),
) -> MergeResult:
    """Merge (or export the adapter of) one LoRA checkpoint; skipped when done already."""
    dtype, verify, adapter, base = options.dtype, options.verify, options.adapter, options.base
    form = "adapter" if adapter else "merged"
    result = open_merge(
        step, step_dir, out_dir, options.force, lambda: _done(out_dir, dtype, step_dir, form)
    )
    if result.skipped:
        return result
    t0 = time.perf_counter()
    read = read_checkpoint(step_dir, verify)
    peft_model = adapter_model(step_dir, info, read.state, base)
    record = {
        "checkpoint": str(step_dir.resolve()),
        "step": step,
        "checkpoint_signature": read.signature,
        "form": form,
        "base_model": base or info["base_model"],
    }
    config = peft_model.get_base_model().config
    with merge_lock(out_dir):
        if adapter:
            _write_adapter_folder(peft_model, read.tokenizer, out_dir, dtype, record)
        else:
            export_full_state(
                _merged_state(peft_model),
                config,
                out_dir,
                dtype,
                tokenizer=read.tokenizer,
                generation_config=read.generation,
                info=record,
            )
    if verify:
        diff = _verify(peft_model, config, out_dir, dtype, adapter, record["base_model"], info)
        record_verification(
            result, out_dir, record, diff, "exported logits differ from the trainer's"
        )
    result.seconds = time.perf_counter() - t0
    result.info = record
    return result


def _done(out_dir: Path, dtype: str, step_dir: Path, form: str) -> bool:
    if not already_merged(out_dir, dtype, step_dir):
        return False
    try:
        return json.loads((out_dir / MERGE_INFO).read_text()).get("form", "merged") == form
    except (OSError, ValueError):
        return False


def _merged_state(peft_model) -> dict:
    from mua.models.lora import lora_scalings, merged_params

    named = ((n, p.detach()) for n, p in peft_model.named_parameters())
    return dict(merged_params(named, lora_scalings(peft_model)))


def _write_adapter_folder(peft_model, tokenizer, out_dir: Path, dtype: str, record: dict) -> None:
    """peft's adapter folder, written beside `out_dir` and renamed into place."""
    import os

    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    peft_model.save_pretrained(tmp, save_embedding_layers=False)  # the base stays out
    _add_tied_head_factors(peft_model, tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    mark_dir(tmp, "merge")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    full = {"dtype": dtype, "adapter_dtype": "float32", "merged_at": stamp, **record}
    (tmp / MERGE_INFO).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out_dir)


def _add_tied_head_factors(peft_model, folder: Path) -> None:
    """With an adapted embedding tied to the output head, the head's factors are the
    embedding's (`mua.models.lora_embeddings`), so peft's state dict lacks them; its files hold
    them (as a head's own factors), and a peft loader expects them: write the full set."""
    from safetensors.torch import save_file

    from mua.models.lora import adapter_file_names
    from mua.models.lora_embeddings import tied_heads

    heads = tied_heads(peft_model)
    if not heads:
        return
    named = ((n, p.detach()) for n, p in peft_model.named_parameters())
    tensors = {n: t.contiguous() for n, t in adapter_file_names(named, heads)}
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})


def _verify(
    peft_model, config, out_dir: Path, dtype: str, adapter: bool, base_path: str, info: dict
) -> float:
    """Max |logit difference| of the exported model against the trainer's forward."""
    import torch

    if adapter:
        from peft import PeftModel

        from mua.models import load_model

        fresh = load_model(base_path, dtype="float32", seed=int(info.get("seed", 0)))
        loaded = PeftModel.from_pretrained(fresh, out_dir).eval()
        want = _trainer_logits(peft_model, config.vocab_size)
        with torch.no_grad():
            got = loaded(input_ids=probe_batch(config.vocab_size)).logits
        return float((want - got).abs().max())
    if dtype != "float32":  # the merged weights rounded to dtype on both sides
        return verify_merged(_merged_state(peft_model), config, out_dir, dtype)
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    want = _trainer_logits(peft_model, config.vocab_size)
    with torch.no_grad():
        got = merged(input_ids=probe_batch(config.vocab_size)).logits
    return float((want - got).abs().max())
