"""Regenerate the committed tiny tokenizer: `python -m mua.models.build_tokenizer [--out DIR]`.

Trains a byte-level BPE of exactly 2000 entries on `mua.models.tokenizer_corpus` (Qwen2-style
pre-tokenization) and writes tokenizer.json, tokenizer_config.json (with the chat template) and
special_tokens_map.json; the same corpus gives byte-identical files, so the committed assets can
be rebuilt and compared. Not here: loading the result (`mua.models.load_tokenizer`).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
TOKENIZER_DIR = ASSETS_DIR / "tiny_tokenizer"
CHAT_TEMPLATE_PATH = ASSETS_DIR / "chat_template.jinja"

VOCAB_SIZE = 2000
PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
# Control tokens: stripped by decode(skip_special_tokens=True).
CONTROL_TOKENS = [PAD_TOKEN, "<|im_start|>", EOS_TOKEN]
# Markup tokens: single ids, but kept by decode(skip_special_tokens=True) so tool calls and
# reasoning survive decoding (as in the Qwen2.5 tokenizers).
MARKUP_TOKENS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
ASSET_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def train_tokenizer():
    """Train the BPE and return a `tokenizers.Tokenizer` with all special tokens registered."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from mua.models.tokenizer_corpus import corpus_lines

    tokenizer = Tokenizer(models.BPE(byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=CONTROL_TOKENS + MARKUP_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_without_special_tokens(corpus_lines()), trainer=trainer)
    return tokenizer


def _without_special_tokens(docs: list[str]) -> list[str]:
    """Text between special tokens: encoding never merges across them, so training should not."""
    pattern = re.compile("|".join(re.escape(t) for t in CONTROL_TOKENS + MARKUP_TOKENS))
    return [piece for doc in docs for piece in pattern.split(doc) if piece]


def tokenizer_json(tokenizer) -> dict:
    """Serialized tokenizer with markup tokens flagged as non-special."""
    data = json.loads(tokenizer.to_str())
    for entry in data["added_tokens"]:
        entry["special"] = entry["content"] in CONTROL_TOKENS
        entry["normalized"] = False
    return data


def tokenizer_config(chat_template: str) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "additional_special_tokens": [],
        "model_max_length": 32768,
        "padding_side": "right",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "chat_template": chat_template,
    }


def write_assets(out_dir: Path) -> None:
    """Train and write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
    tokenizer = train_tokenizer()
    if tokenizer.get_vocab_size(with_added_tokens=True) != VOCAB_SIZE:
        raise RuntimeError(
            f"trained vocabulary has {tokenizer.get_vocab_size(with_added_tokens=True)} entries, "
            f"expected {VOCAB_SIZE}; the corpus is too small"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    chat_template = CHAT_TEMPLATE_PATH.read_text()
    files = {
        "tokenizer.json": tokenizer_json(tokenizer),
        "tokenizer_config.json": tokenizer_config(chat_template),
        "special_tokens_map.json": {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN},
    }
    for name, payload in files.items():
        text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
        (out_dir / name).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=TOKENIZER_DIR, help="output folder")
    parser.add_argument(
        "--check",
        action="store_true",
        help="rebuild in a temporary folder and exit 1 if it differs from the committed files",
    )
    args = parser.parse_args(argv)
    if args.check:
        raise SystemExit(0 if check_assets() else 1)
    write_assets(args.out)
    print(f"wrote tiny tokenizer ({VOCAB_SIZE} tokens) to {args.out}")


def check_assets(committed: Path = TOKENIZER_DIR) -> bool:
    """True when a fresh build equals the committed files; prints the names that differ."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_assets(Path(tmp))
        differing = [
            name
            for name in ASSET_FILES
            if not (committed / name).is_file()
            or (committed / name).read_bytes() != (Path(tmp) / name).read_bytes()
        ]
    for name in differing:
        print(
            f"{committed / name} differs from a fresh build; "
            "run python -m mua.models.build_tokenizer"
        )
    return not differing


if __name__ == "__main__":
    main()
