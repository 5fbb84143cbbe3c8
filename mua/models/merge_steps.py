"""The steps `mua merge` takes for every checkpoint, full (`merge`) or LoRA (`merge_lora`) alike.

`open_merge` claims the output folder and says whether it holds the merge already;
`read_checkpoint` refuses a damaged checkpoint (and, verifying, NaN or infinite values) before
anything is written; `merge_lock` keeps a second merge out; `record_verification` records the
logit difference in merge_info.json, or removes it and fails past the tolerance.
Not here: building the merged weights or adapter folder, the verification forwards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mua.errors import RunFailure
from mua.models.merge import (
    MERGE_INFO,
    VERIFY_TOLERANCE,
    MergeResult,
    checkpoint_side_files,
    checkpoint_signature,
    non_finite_tensor,
)
from mua.output_folders import LOCK, FolderLock, claim_dir


@dataclass(frozen=True)
class MergeOptions:
    """How `mua merge` writes a checkpoint (see `mua.models.merge_checkpoint.merge_checkpoint`)."""

    dtype: str = "float32"
    force: bool = False  # merge again over a finished merge
    verify: bool = False  # compare the export's logits with the checkpoint's
    adapter: bool = False  # LoRA: a PEFT adapter folder instead of a merged model
    base: str | None = None  # LoRA: the base model's path, when it moved


@dataclass
class CheckpointRead:
    """What a merge reads from one checkpoint step folder."""

    signature: list
    config: object
    generation: object  # GenerationConfig or None
    tokenizer: object  # or None
    state: dict  # the model's full tensors


def open_merge(
    step: int, step_dir: Path, out_dir: Path, force: bool, done: Callable[[], bool]
) -> MergeResult:
    """The result of merging `step_dir` into `out_dir`, `skipped` when `done()` says the folder
    holds that merge already (and not `force`). A folder mua did not write is refused."""
    result = MergeResult(step=step, checkpoint=step_dir, out_dir=out_dir)
    if out_dir.exists():  # never replace a folder mua did not write
        claim_dir(out_dir, what="merge output folder", legacy_proof=(MERGE_INFO,))
    result.skipped = not force and done()
    return result


def read_checkpoint(step_dir: Path, verify: bool) -> CheckpointRead:
    """The checkpoint's signature, side files and tensors; RunFailure (one line) when it is
    damaged, unreadable, or (`verify`) holds NaN or infinite values."""
    from torch.distributed.checkpoint.api import CheckpointException

    from mua.distributed.checksums import checkpoint_problem
    from mua.distributed.dcp_offline import read_model_state

    problem = checkpoint_problem(step_dir)
    if problem is not None:
        raise RunFailure(f"checkpoint {step_dir} is damaged: {problem}")
    signature = checkpoint_signature(step_dir)
    config, generation, tokenizer = checkpoint_side_files(step_dir)
    try:
        state = read_model_state(step_dir)
    except (Exception, CheckpointException) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise RunFailure(f"{step_dir}: cannot read the checkpoint tensors ({first})") from None
    if verify and (bad := non_finite_tensor(state)) is not None:
        raise RunFailure(
            f"{step_dir}: tensor {bad} holds NaN or infinite values; the checkpoint is unusable, "
            "merge an earlier one"
        )
    return CheckpointRead(signature, config, generation, tokenizer, state)


def merge_lock(out_dir: Path) -> FolderLock:
    """One `mua merge` per output folder at a time. The folder is replaced whole, so its lock
    file is beside it, and it is deleted once the merge is written."""
    lock_file = out_dir.parent / f".{out_dir.name}{LOCK}"
    return FolderLock(
        out_dir,
        what="merge output folder",
        verb="mua merge",
        lock_file=lock_file,
        remove_on_release=True,
    )


def record_verification(
    result: MergeResult, out_dir: Path, info: dict, diff: float, differ: str
) -> None:
    """Keep a verification's max logit difference in the result and in merge_info.json; past
    the tolerance (or NaN) merge_info.json goes, so the folder counts as unfinished, and a
    RunFailure says `differ` ("merged logits differ from ...") by how much."""
    result.max_logit_diff = diff
    info["verify_max_logit_diff"] = diff
    update_merge_info(out_dir, info)
    if not diff <= VERIFY_TOLERANCE:  # NaN too
        (out_dir / MERGE_INFO).unlink()  # not a finished merge: the next run redoes it
        raise RunFailure(
            f"{out_dir}: {differ} by {diff:.3g} (> {VERIFY_TOLERANCE:g}); "
            "the export is wrong, do not use it"
        )


def update_merge_info(out_dir: Path, record: dict) -> None:
    file = out_dir / MERGE_INFO
    merged = {**json.loads(file.read_text()), **record}
    file.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
