"""Turn training checkpoints (DCP, any world size) into Hugging Face folders: the core of `mua merge`.

Reads a run dir, its `checkpoints/` or one `global_step_N/`, writes `<run>/hf/global_step_N/`
(weights in the chosen dtype, config, tokenizer, and `merge_info.json` last, so its presence
means complete; a step already merged from the same files is skipped unless `force`). `verify`
compares logits with the checkpoint's and refuses NaN or infinite weights (docs/training.md,
"Merging checkpoints"). `export_full_state` is the same writer for full tensors a trainer holds.
Not here: optimizer state, printing.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from mua.errors import RunFailure, UsageError
from mua.output_folders import mark_dir

STEP_DIR = re.compile(r"^global_step_(\d+)$")
MERGE_INFO = "merge_info.json"
PROBE_SHAPE = (2, 32)  # [B, T] of the verification batch
VERIFY_TOLERANCE = 1e-4  # max |logit difference| between checkpoint and merged folder


@dataclass
class MergeResult:
    step: int
    checkpoint: Path
    out_dir: Path
    skipped: bool = False
    seconds: float = 0.0
    max_logit_diff: float | None = None
    info: dict = field(default_factory=dict)


def _is_step_dir(path: Path) -> bool:
    return STEP_DIR.match(path.name) is not None and (path / ".metadata").is_file()


def find_checkpoints(path: str | Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint at `path` (a run, its checkpoints/, or one step)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise UsageError(
            f"{path}: no such folder; give a run dir, its checkpoints/ folder or one global_step_N"
        )
    if STEP_DIR.match(root.name):
        if not (root / ".metadata").is_file():
            raise UsageError(
                f"{path}: not a complete checkpoint (no .metadata); it may be a killed write"
            )
        return [(int(STEP_DIR.match(root.name).group(1)), root)]
    if (root / "checkpoints").is_dir():
        root = root / "checkpoints"
    found = sorted(
        (int(STEP_DIR.match(p.name).group(1)), p)
        for p in root.iterdir()
        if p.is_dir() and _is_step_dir(p)
    )
    if not found:
        raise UsageError(
            f"{path}: no global_step_* checkpoints found; train first (`mua train`) or point at a run dir"
        )
    return found


def default_out_dir(step_dir: Path, out_root: str | Path | None) -> Path:
    """`out_root/global_step_N`, or `<run>/hf/global_step_N` beside the run's checkpoints/."""
    if out_root is not None:
        return Path(out_root).expanduser() / step_dir.name
    parent = step_dir.parent
    run = parent.parent if parent.name == "checkpoints" else parent
    return run / "hf" / step_dir.name


def checkpoint_signature(step_dir: Path) -> list[list]:
    """[name, size, mtime_ns, ctime_ns, inode] of every file of a checkpoint: a rewrite changes it."""
    rows = []
    for path in sorted(p for p in Path(step_dir).rglob("*") if p.is_file()):
        stat = path.stat()
        rows.append(
            [
                path.relative_to(step_dir).as_posix(),
                stat.st_size,
                stat.st_mtime_ns,
                stat.st_ctime_ns,
                stat.st_ino,
            ]
        )
    return rows


def already_merged(out_dir: Path, dtype: str, step_dir: Path | None = None) -> bool:
    """A finished merge of `dtype`; with `step_dir`, also from that checkpoint's current files.

    An export written by the trainer itself (`source: mua train`) records no signature: the run
    that rewrites a checkpoint rewrites its export too.
    """
    info_file = out_dir / MERGE_INFO
    if not info_file.is_file():
        return False
    try:
        info = json.loads(info_file.read_text())
    except (OSError, ValueError):
        return False
    if info.get("dtype") != dtype:
        return False
    if step_dir is None or info.get("source") == "mua train":
        return True
    return info.get("checkpoint_signature") == checkpoint_signature(step_dir)


def _checked_state(state: dict, config, source: str) -> dict:
    """The state to load: for tied embeddings, lm_head equal to the embedding and then dropped."""
    state = dict(state)
    if getattr(config, "tie_word_embeddings", False) and "lm_head.weight" in state:
        head = state.pop("lm_head.weight")
        embed = next((v for k, v in state.items() if k.endswith("embed_tokens.weight")), None)
        if embed is not None and not bool((head == embed).all()):
            raise RunFailure(
                f"{source}: config ties the embeddings but lm_head.weight differs from embed_tokens.weight; "
                "set tie_word_embeddings=false in its config.json if the head was trained separately"
            )
    return state


def _load_into(model, state: dict, config, source: str, assign: bool):
    missing, unexpected = model.load_state_dict(
        _checked_state(state, config, source), strict=False, assign=assign
    )
    tied = getattr(config, "tie_word_embeddings", False)
    missing = [k for k in missing if not (tied and k == "lm_head.weight")]
    if missing or unexpected:
        raise RunFailure(
            f"{source}: checkpoint tensors do not fit its config.json (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}); was config.json replaced?"
        )
    if tied:
        model.tie_weights()
    return model


def model_from_state(state: dict, config, *, on_meta: bool, source: str = "checkpoint"):
    """A causal LM with `state`'s weights (fp32). `on_meta`: skip random init (for saving only)."""
    import torch
    from transformers import AutoModelForCausalLM

    if on_meta:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return _load_into(model, state, config, source, assign=on_meta).eval()


def export_full_state(
    state: dict,
    config,
    out_dir: str | Path,
    dtype: str,
    *,
    tokenizer=None,
    generation_config=None,
    info: dict | None = None,
) -> Path:
    """Write full tensors `state` (HF names) as a Hugging Face folder; `merge_info.json` last."""
    from mua.models.saving import save_hf

    model = model_from_state(
        state, config, on_meta=True, source=str(info.get("checkpoint") if info else "state")
    )
    if generation_config is not None:
        model.generation_config = generation_config
    out = save_hf(model, tokenizer, out_dir, dtype)
    mark_dir(out, "merge")
    record = {"dtype": dtype, "merged_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **(info or {})}
    (out / MERGE_INFO).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return out


def checkpoint_side_files(step_dir: Path):
    """(config, generation config or None, tokenizer or None) saved beside the checkpoint."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    if not (step_dir / "config.json").is_file():
        raise UsageError(
            f"{step_dir}: no config.json beside the checkpoint; it was not written by `mua train`"
        )
    config = AutoConfig.from_pretrained(step_dir)
    generation = (
        GenerationConfig.from_pretrained(step_dir)
        if (step_dir / "generation_config.json").is_file()
        else None
    )
    tokenizer = None
    if (step_dir / "tokenizer_config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(step_dir)
    return config, generation, tokenizer


def probe_batch(vocab_size: int):
    """A fixed [2, 32] batch of token ids (seeded, independent of the global RNG)."""
    import torch

    generator = torch.Generator().manual_seed(1234)
    return torch.randint(0, vocab_size, PROBE_SHAPE, generator=generator)


def _rounded(state: dict, dtype: str) -> dict:
    import torch

    target = getattr(torch, dtype)
    return {k: v.to(target).to(v.dtype) if v.is_floating_point() else v for k, v in state.items()}


def non_finite_tensor(state: dict) -> str | None:
    """The name of the first floating-point tensor holding NaN or an infinity, else None."""
    import torch

    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return name
    return None


def verify_merged(state: dict, config, out_dir: Path, dtype: str) -> float:
    """Max |logit difference| between the checkpoint's weights and the merged folder on the probe batch."""
    import torch
    from transformers import AutoModelForCausalLM

    reference = model_from_state(_rounded(state, dtype), config, on_meta=False)
    merged = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    ids = probe_batch(config.vocab_size)
    with torch.no_grad():
        want = reference(input_ids=ids).logits
        got = merged(input_ids=ids).logits
    return float((want - got).abs().max())
