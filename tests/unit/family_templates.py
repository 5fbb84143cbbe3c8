"""Tokenizers of each model family, built offline for tests: mua's tiny tokenizer with the
family's special tokens added and its chat template (read from ../shared/data/chat_templates at
test time, never copied into the project) set. Also the conversation the render/parse matrix
uses: two tool calls and their results, then an answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import shared_dir

# template file -> (family, bos, eos, one call per assistant message)
TEMPLATES = {
    "qwen3.jinja": ("hermes", None, "<|im_end|>", False),
    "qwen3_5.jinja": ("qwen3_coder", None, "<|im_end|>", False),
    "qwen3_coder.jinja": ("qwen3_coder", None, "<|im_end|>", False),
    "llama3_1.jinja": ("llama3_json", "<|begin_of_text|>", "<|eot_id|>", True),
    "llama3_2.jinja": ("llama3_json", "<|begin_of_text|>", "<|eot_id|>", True),
    "mistral.jinja": ("mistral", "<s>", "</s>", False),
    "gpt_oss.jinja": ("gpt_oss", None, "<|return|>", True),
    "glm4_6.jinja": ("glm4_5", None, "<|endoftext|>", False),
    "kimi_k2.jinja": ("kimi_k2", None, "<|im_end|>", False),
    "deepseek_v3_1.jinja": (
        "deepseek_v3_1",
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        False,
    ),
}
_SPECIAL = re.compile(
    r"<\|[a-z_]+\|>|<｜[^｜<>]+｜>|\[/?[A-Z_]{3,}\]|\[gMASK\]|<sop>"
    r"|</?(?:think|tool_call|tool_response|arg_key|arg_value|tools)>"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "track_parcel",
            "description": "Track a parcel.",
            "parameters": {
                "type": "object",
                "properties": {
                    "tracking_no": {"type": "string"},
                    "carrier": {"type": "string"},
                    "attempts": {"type": "integer"},
                    "express": {"type": "boolean"},
                    "legs": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["tracking_no"],
            },
        },
    },
]
CALLS = [
    ("lookup_order", {"order_id": "A-1042"}),
    (
        "track_parcel",
        {
            "tracking_no": "ZX99",
            "carrier": "dhl",
            "attempts": 2,
            "express": True,
            "legs": ["a", "b"],
        },
    ),
]
RESULTS = ['{"status": "shipped"}', '{"eta": "2026-03-16"}']


def template_dir() -> Path:
    folder = shared_dir() / "data" / "chat_templates"
    if not folder.is_dir():
        pytest.skip(f"chat templates not found at {folder} (set MUA_SHARED to the shared/ folder)")
    return folder


def family_tokenizer(file: str):
    """mua's tiny tokenizer with `file`'s template and its special tokens (no download)."""
    from transformers import PreTrainedTokenizerFast

    from mua.models.model_loading import TINY_TOKENIZER_DIR

    template = (template_dir() / file).read_text(encoding="utf-8")
    _, bos, eos, _ = TEMPLATES[file]
    tok = PreTrainedTokenizerFast.from_pretrained(str(TINY_TOKENIZER_DIR))
    specials = sorted(set(_SPECIAL.findall(template)) | {t for t in (bos, eos) if t})
    tok.add_special_tokens({"additional_special_tokens": specials})
    tok.bos_token = bos
    tok.eos_token = eos
    tok.chat_template = template
    return tok


def _call(i: int) -> dict:
    name, args = CALLS[i]
    return {
        "id": f"x7Kp2Qz{i:02d}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def _result(i: int) -> dict:
    name = CALLS[i][0]
    return {"role": "tool", "tool_call_id": f"x7Kp2Qz{i:02d}", "name": name, "content": RESULTS[i]}


def conversation(file: str) -> list[dict]:
    """User, two calls (one message, or one per message where the template allows only one),
    their results, and a final answer."""
    one_per_message = TEMPLATES[file][3]
    msgs: list[dict] = [{"role": "user", "content": "Where is my order A-1042?"}]
    if one_per_message:
        for i in range(2):
            msgs += [{"role": "assistant", "content": "", "tool_calls": [_call(i)]}, _result(i)]
    else:
        msgs += [{"role": "assistant", "content": "", "tool_calls": [_call(0), _call(1)]}]
        msgs += [_result(0), _result(1)]
    msgs.append({"role": "assistant", "content": "It ships today and arrives on 2026-03-16."})
    return msgs
