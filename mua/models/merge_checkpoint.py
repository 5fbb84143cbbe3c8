"""`merge_checkpoint`: merge one checkpoint step folder into a Hugging Face folder, the full
weights (`mua.models.merge`) or a LoRA checkpoint (`mua.models.merge_lora`).

Not here: finding the step folders of a run (`mua.models.merge.find_checkpoints`), progress (the
CLI shows it).
"""

from __future__ import annotations

import time
from pathlib import Path

from mua.errors import UsageError
from mua.models.lora import read_adapter_info
from mua.models.merge import MergeResult, already_merged, export_full_state, verify_merged
from mua.models.merge_lora import merge_lora_checkpoint
from mua.models.merge_steps import (
    MergeOptions,
    merge_lock,
    open_merge,
    read_checkpoint,
    record_verification,
)


def merge_checkpoint(
    step: int,
    step_dir: Path,
    out_dir: Path,
    *,
    dtype: str = "float32",
    force: bool = False,
    verify: bool = False,
    adapter: bool = False,
    base: str | None = None,
) -> MergeResult:
    """Merge one checkpoint; skipped when `out_dir` holds a finished merge of the same dtype.
    A LoRA checkpoint goes to `mua.models.merge_lora` (`adapter`: a PEFT folder; `base`: the
    base model's path when it moved)."""
    lora = read_adapter_info(step_dir)
    if lora is not None:
        options = MergeOptions(dtype, force, verify, adapter, base)
        return merge_lora_checkpoint(step, step_dir, out_dir, lora, options)
    if adapter or base:
        flag = "--adapter" if adapter else "--base"
        raise UsageError(
            f"{step_dir}: {flag} applies to LoRA checkpoints (model.lora); this one holds full "
            "weights, merge it without the flag"
        )

    result = open_merge(
        step, step_dir, out_dir, force, lambda: already_merged(out_dir, dtype, step_dir)
    )
    if result.skipped:
        return result
    t0 = time.perf_counter()
    read = read_checkpoint(step_dir, verify)
    info = {
        "checkpoint": str(step_dir.resolve()),
        "step": step,
        "checkpoint_signature": read.signature,
    }
    with merge_lock(out_dir):
        export_full_state(
            read.state,
            read.config,
            out_dir,
            dtype,
            tokenizer=read.tokenizer,
            generation_config=read.generation,
            info=info,
        )
    if verify:
        diff = verify_merged(read.state, read.config, out_dir, dtype)
        record_verification(
            result, out_dir, info, diff, "merged logits differ from the checkpoint's"
        )
    result.seconds = time.perf_counter() - t0
    result.info = info
    return result
