"""Models and tokenizers: load, build tiny offline ones, save as Hugging Face folders, render chats.

Importing this package is cheap: torch and transformers are imported inside the functions.
"""

from __future__ import annotations

from mua.models.chat import check_prefix_stability, render_delta_ids, render_ids, render_text
from mua.models.model_loading import load_model, load_tokenizer, resolve, resolve_model
from mua.models.saving import save_hf
from mua.models.tiny import TINY_PRESETS, TinyPreset

__all__ = [
    "TINY_PRESETS",
    "TinyPreset",
    "check_prefix_stability",
    "load_model",
    "load_tokenizer",
    "render_delta_ids",
    "render_ids",
    "render_text",
    "resolve",
    "resolve_model",
    "save_hf",
]
