"""Load tokenizers and causal-LM models from `tiny:<preset>`, a local folder, or (online) the hub.

`load_tokenizer` and `load_model` accept the same location strings as the recipe's
`model.path`. Every problem a user can cause (unknown preset, missing folder, folder without a
config, hub id while offline, unknown dtype) becomes one `UsageError` line naming the fix.

Devices, sharding and checkpoint formats other than Hugging Face folders are not handled here:
callers move the model, and `mua merge` turns training checkpoints into HF folders first.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from mua.errors import UsageError
from mua.models.tiny import EOS_TOKEN_ID, PAD_TOKEN_ID, TINY_PRESETS, TinyPreset, build_tiny_model

TINY_PREFIX = "tiny:"
TINY_TOKENIZER_DIR = Path(__file__).resolve().parent / "assets" / "tiny_tokenizer"
DTYPES = ("float32", "bfloat16", "float16")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _torch_dtype(dtype: str):
    import torch

    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; use one of: {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def tiny_preset(path: str) -> TinyPreset:
    """The preset named by `tiny:<name>`, or a UsageError listing the presets."""
    name = path[len(TINY_PREFIX) :]
    if name in TINY_PRESETS:
        return TINY_PRESETS[name]
    close = difflib.get_close_matches(name, list(TINY_PRESETS), n=1)
    hint = f"did you mean tiny:{close[0]}? " if close else ""
    known = ", ".join(f"tiny:{n}" for n in TINY_PRESETS)
    raise UsageError(f"unknown tiny model {path!r}; {hint}known presets: {known}")


def _resolve_location(path: str, what: str) -> str:
    """A local folder (as a string) or a hub id allowed by the offline setting."""
    local = Path(path).expanduser()
    if local.is_dir():
        return str(local)
    if local.exists():
        raise UsageError(f"{what} path {path!r} is a file; give the folder that holds config.json")
    if not _HUB_ID.match(path) or path.startswith((".", "~")):
        raise UsageError(
            f"{what} folder {path!r} does not exist; give an existing Hugging Face folder, "
            f"or a tiny preset such as tiny:qwen3-1m"
        )
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        raise UsageError(
            f"{what} {path!r} is not a local folder and HF_HUB_OFFLINE=1 forbids downloading it; "
            "download it first (huggingface-cli download) and give the folder, or unset "
            "HF_HUB_OFFLINE"
        )
    return path


def load_tokenizer(path: str):
    """Tokenizer for `tiny:*` (the committed tiny tokenizer), a local folder or a hub id."""
    from transformers import AutoTokenizer

    if path.startswith(TINY_PREFIX):
        return AutoTokenizer.from_pretrained(str(TINY_TOKENIZER_DIR))
    location = _resolve_location(path, "tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load a tokenizer from {path!r}: {_first_line(err)}") from err
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _auto_attention(dtype: str) -> str:
    """flash-attn on a GPU when it is installed and the dtype allows it, else sdpa."""
    import importlib.util

    import torch

    if dtype != "float32" and torch.cuda.is_available():
        if importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
    return "sdpa"


def load_model(path: str, dtype: str = "float32", seed: int = 0, attn_implementation: str = "auto"):
    """A causal LM from `tiny:<preset>` (built from its config with `seed`) or a folder/hub id.

    Tiny models are built in float32 and then cast, so every dtype holds the same weights
    rounded. The generation config gets the tokenizer's stop (<|im_end|>) and pad ids.
    """
    torch_dtype = _torch_dtype(dtype)
    attn = _auto_attention(dtype) if attn_implementation in (None, "auto") else attn_implementation
    if path.startswith(TINY_PREFIX):
        model = build_tiny_model(tiny_preset(path), seed=seed, attn_implementation=attn)
        model.to(torch_dtype)
        _set_generation_ids(model, eos_token_id=EOS_TOKEN_ID, pad_token_id=PAD_TOKEN_ID)
        model.name_or_path = path
        return model
    from transformers import AutoModelForCausalLM

    location = _resolve_location(path, "model")
    if Path(location).is_dir():
        _check_hf_folder(Path(location), path)
    try:
        return AutoModelForCausalLM.from_pretrained(
            location, dtype=torch_dtype, attn_implementation=attn
        )
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load a model from {path!r}: {_first_line(err)}") from err


def accepts_logits_to_keep(model) -> bool:
    """True when the model's forward takes `logits_to_keep` (the LM head on chosen positions only)."""
    import inspect

    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _check_hf_folder(folder: Path, path: str) -> None:
    if not (folder / "config.json").is_file():
        raise UsageError(
            f"model folder {path!r} has no config.json; give a Hugging Face model folder "
            "(for a training checkpoint, run `mua merge` first)"
        )
    weights = [*folder.glob("*.safetensors"), *folder.glob("*.bin"), *folder.glob("*.index.json")]
    if not weights:
        raise UsageError(
            f"model folder {path!r} has a config.json but no weights (*.safetensors); if it is a "
            "training checkpoint, run `mua merge` on it first and load the merged folder"
        )


def _set_generation_ids(model, eos_token_id: int, pad_token_id: int) -> None:
    from transformers import GenerationConfig

    config = model.generation_config or GenerationConfig()
    config.eos_token_id = eos_token_id
    config.pad_token_id = pad_token_id
    config.bos_token_id = None
    model.generation_config = config


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
