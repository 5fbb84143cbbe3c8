"""Write a model and tokenizer as a Hugging Face folder, atomically.

`save_hf` produces safetensors weights, config.json, generation_config.json and the tokenizer
files, in the requested dtype, so that `AutoModelForCausalLM.from_pretrained` gives the same
logits. Everything is written to a temporary sibling folder that is renamed into place at the
end, so a crash never leaves a half-written model where a loader would find it.

It expects a plain (unsharded) model; gathering FSDP/DCP shards is the job of `mua merge`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from mua.models.model_loading import _torch_dtype


def _cast_state_dict(model, torch_dtype) -> dict:
    """State dict in `torch_dtype`, keeping tied parameters as one shared tensor."""
    cast_by_storage: dict[int, object] = {}
    state: dict = {}
    for name, tensor in model.state_dict().items():
        key = tensor.data_ptr()
        if key not in cast_by_storage:
            cast = tensor.detach()
            if cast.is_floating_point():
                cast = cast.to(device="cpu", dtype=torch_dtype)
            cast_by_storage[key] = cast.to("cpu").contiguous()
        state[name] = cast_by_storage[key]
    return state


def save_hf(model, tokenizer, out_dir, dtype: str = "float32") -> Path:
    """Save `model` (+ `tokenizer` unless None) to `out_dir` in `dtype`; returns the folder.

    An existing `out_dir` is replaced only after the new folder is complete.
    """
    torch_dtype = _torch_dtype(dtype)
    out = Path(out_dir).expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, state_dict=_cast_state_dict(model, torch_dtype))
        _set_config_dtype(tmp / "config.json", dtype)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        _replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _set_config_dtype(config_path: Path, dtype: str) -> None:
    """Record the saved dtype; save_pretrained writes the in-memory model's dtype instead."""
    config = json.loads(config_path.read_text())
    config["dtype"] = dtype
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _replace_dir(new: Path, target: Path) -> None:
    """Move `new` to `target`; an old `target` is moved aside first and deleted after."""
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    if target.exists():
        os.replace(target, old)
    os.replace(new, target)
    shutil.rmtree(old, ignore_errors=True)
