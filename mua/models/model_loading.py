"""Load tokenizers and causal-LM models from `tiny:<preset>`, a local folder, or (online) the hub.

`load_tokenizer` and `load_model` accept the same location strings as the recipe's
`model.path`. Every problem a user can cause (unknown preset, missing folder, folder without a
config, a hub id that is not cached while offline, a hub out of reach, unknown dtype) becomes one
`UsageError` (or `RunFailure`) line naming the fix. `resolve` makes those checks alone, quickly
and without loading anything, so launchers can run them before any process starts.

Devices, sharding and checkpoint formats other than Hugging Face folders are not handled here:
callers move the model, and `mua merge` turns training checkpoints into HF folders first.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from mua.errors import RunFailure, UsageError
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


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
HUB_PROBE_TIMEOUT_S = 2.0  # an unreachable hub fails in this time instead of minutes of retries


def _offline() -> bool:
    return any(
        os.environ.get(var, "0").lower() in ("1", "true", "yes", "on")
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def resolve(path: str, what: str = "model") -> str:
    """Check now that `path` can be loaded as a `what` ("model" or "tokenizer"); return it.

    `tiny:<preset>` must name a preset; a local folder must hold a config.json (models) or
    tokenizer files (tokenizers); a hub id must be in the local Hugging Face cache, or, when
    downloads are allowed (no HF_HUB_OFFLINE), the hub must answer for it within
    HUB_PROBE_TIMEOUT_S. Anything else is one UsageError (exit 2) or RunFailure (exit 1) line
    naming the fix. Downloads nothing.
    """
    if path.startswith(TINY_PREFIX):
        tiny_preset(path)
        return path
    local = Path(path).expanduser()
    if local.is_dir():
        if what == "model":
            _check_hf_folder(local, path)
        elif not any((local / name).is_file() for name in _TOKENIZER_FILES):
            raise UsageError(
                f"tokenizer folder {path!r} has no tokenizer files ({', '.join(_TOKENIZER_FILES)}); "
                "give a Hugging Face model or tokenizer folder"
            )
        return path
    if local.exists():
        raise UsageError(f"{what} path {path!r} is a file; give the folder that holds config.json")
    if not _HUB_ID.match(path) or path.startswith((".", "~")):
        raise UsageError(
            f"{what} folder {path!r} does not exist; give an existing Hugging Face folder, "
            f"or a tiny preset such as tiny:qwen3-1m"
        )
    if _in_hub_cache(path, what):
        return path
    if _offline():
        raise UsageError(
            f"{what} {path!r} is a hub id that is not in the local Hugging Face cache and "
            "HF_HUB_OFFLINE=1 forbids downloading it; download it first "
            f"(`huggingface-cli download {path}`) or point model.path to a local folder"
        )
    _probe_hub(path, what)
    return path


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (huggingface_hub reads it once, at
    import, so a cache set later would be missed)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _in_hub_cache(repo_id: str, what: str) -> bool:
    """The cache's snapshot of the repo's main revision holds config.json (a model) or tokenizer
    files (a tokenizer), as huggingface_hub's `try_to_load_from_cache` finds them."""
    from huggingface_hub import try_to_load_from_cache

    wanted = ("config.json",) if what == "model" else _TOKENIZER_FILES
    return any(
        isinstance(try_to_load_from_cache(repo_id, name, cache_dir=hub_cache_dir()), str)
        for name in wanted
    )


def _probe_hub(repo_id: str, what: str) -> None:
    """Ask the hub about `repo_id` once (huggingface_hub's `model_info`, with its proxies and
    token), waiting at most HUB_PROBE_TIMEOUT_S."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    fix = f"download it first (`huggingface-cli download {repo_id}`) or point model.path to a local folder"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        HfApi(endpoint=endpoint).model_info(repo_id, timeout=HUB_PROBE_TIMEOUT_S)
        return
    except HfHubHTTPError as err:
        status = getattr(err.response, "status_code", None)
        if isinstance(err, GatedRepoError) or status in (401, 403):
            raise RunFailure(
                f"{what} {repo_id!r} is private or gated on the hub (HTTP {status}); accept its "
                f"terms and set HF_TOKEN, or {fix}"
            ) from err
        if isinstance(err, RepositoryNotFoundError) or status == 404:
            raise UsageError(
                f"{what} {repo_id!r}: no such model on the hub; check the id, or point "
                "model.path to a local folder"
            ) from err
        reason = f"HTTP {status}" if status else type(err).__name__
    except Exception as err:  # refused, DNS, timeout, proxy, bad endpoint, offline mode
        reason = type(err).__name__
    raise RunFailure(
        f"{what} {repo_id!r} is not in the local Hugging Face cache and the hub "
        f"({endpoint}) did not answer ({reason}); {fix}"
    )


def resolve_model(path: str, tokenizer: str | None = None) -> None:
    """`resolve` a recipe's model and its tokenizer (`model.tokenizer`, else the model's)."""
    resolve(path, "model")
    if tokenizer and tokenizer != path:
        resolve(tokenizer, "tokenizer")


def _resolve_location(path: str, what: str) -> str:
    """A local folder (as a string) or a hub id that can be loaded now (see `resolve`)."""
    resolve(path, what)
    local = Path(path).expanduser()
    return str(local) if local.is_dir() else path


def load_tokenizer(path: str):
    """Tokenizer for `tiny:*` (the committed tiny tokenizer), a local folder or a hub id."""
    from transformers import AutoTokenizer

    if path.startswith(TINY_PREFIX):
        tiny_preset(path)
        return AutoTokenizer.from_pretrained(str(TINY_TOKENIZER_DIR))
    location = _resolve_location(path, "tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load a tokenizer from {path!r}: {_first_line(err)}") from err
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def flash_attention_2_version() -> str | None:
    """The installed FlashAttention-2's version when it is usable, else None.

    Usable means the `flash-attn` distribution at 2.x whose `flash_attn_varlen_func` imports.
    An importable `flash_attn` package is not enough: flash-attn-4 (which SGLang 0.5.23 pulls)
    installs `flash_attn/cute` without FlashAttention-2, and transformers' flash_attention_2
    then fails to load the model."""
    from importlib import metadata

    try:
        version = metadata.version("flash-attn")
    except metadata.PackageNotFoundError:
        return None
    if not version.split(".")[0] == "2":
        return None
    try:
        from flash_attn import flash_attn_varlen_func  # noqa: F401
    except Exception:  # a broken build raises anything from ImportError to OSError
        return None
    return version


def _auto_attention(dtype: str) -> str:
    """FlashAttention-2 on a GPU when it is usable and the dtype allows it, else sdpa."""
    import torch

    if dtype != "float32" and torch.cuda.is_available() and flash_attention_2_version():
        return "flash_attention_2"
    return "sdpa"


# architectures transformers runs with eager attention only (no sdpa): gpt-oss's attention sinks
EAGER_ONLY = ("gpt_oss",)


def _model_type(location) -> str | None:
    import json
    from pathlib import Path

    config = Path(location) / "config.json"
    try:
        return json.loads(config.read_text()).get("model_type") if config.is_file() else None
    except (OSError, ValueError):
        return None


def load_model(path: str, dtype: str = "float32", seed: int = 0, attn_implementation: str = "auto"):
    """A causal LM from `tiny:<preset>` (built from its config with `seed`) or a folder/hub id.

    Tiny models are built in float32 and then cast, so every dtype holds the same weights
    rounded. The generation config gets the tokenizer's stop (<|im_end|>) and pad ids.
    """
    torch_dtype = _torch_dtype(dtype)
    attn = _auto_attention(dtype) if attn_implementation in (None, "auto") else attn_implementation
    if path.startswith(TINY_PREFIX):
        preset = tiny_preset(path)
        if preset.family in EAGER_ONLY and attn == "sdpa":
            attn = "eager"
        model = build_tiny_model(preset, seed=seed, attn_implementation=attn)
        model.to(torch_dtype)
        _set_generation_ids(model, eos_token_id=EOS_TOKEN_ID, pad_token_id=PAD_TOKEN_ID)
        model.name_or_path = path
        return model
    from transformers import AutoModelForCausalLM

    location = _resolve_location(path, "model")
    if attn == "sdpa" and _model_type(location) in EAGER_ONLY:
        attn = "eager"
    try:
        return AutoModelForCausalLM.from_pretrained(
            location, dtype=torch_dtype, attn_implementation=attn
        )
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load a model from {path!r}: {_first_line(err)}") from err


def meta_model(path: str):
    """The causal LM of `path` built from its config on the meta device (no weights read, no
    memory used): for counting and naming its parameters."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if path.startswith(TINY_PREFIX):
        from mua.models.tiny import tiny_config

        config = tiny_config(tiny_preset(path))
    else:
        config = AutoConfig.from_pretrained(_resolve_location(path, "model"))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def accepts_logits_to_keep(model) -> bool:
    """True when the model's forward takes `logits_to_keep` (the LM head on chosen positions only)."""
    import inspect

    if callable(getattr(model, "get_base_model", None)):  # peft passes it on to the base model
        model = model.get_base_model()
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
