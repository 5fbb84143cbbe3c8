"""`encode_text` / `decode_ids` give exactly what the tokenizer's own `encode(text,
add_special_tokens=False)` / `decode(ids)` give: on the Rust backend when that is the same by
construction, through transformers whenever a setting or an override could make it differ."""

from __future__ import annotations

import random

import pytest

from mua.models import load_tokenizer
from mua.models.chat import decode_ids, encode_text

PIECES = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<tool_call>",
    "assistant\n",
    "  ",
    "\n\n",
    "\t",
    " word",
    "Word",
    "123",
    "éü",
    "中文",
    "😀",
    "'s",
    '{"a": 1}',
    "\r\n",
]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))


@pytest.fixture
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def test_the_backend_path_gives_the_tokenizers_own_ids_and_text(tok, monkeypatch):
    rng = random.Random(3)
    texts = [random_text(rng) for _ in range(400)]
    id_lists = [[rng.randrange(len(tok)) for _ in range(rng.randint(0, 40))] for _ in range(400)]
    want_ids = [list(tok.encode(t, add_special_tokens=False)) for t in texts]
    want_text = [tok.decode(ids) for ids in id_lists]

    def not_used(*args, **kwargs):
        raise AssertionError("the transformers path was taken")

    monkeypatch.setattr(tok, "encode", not_used)  # the backend path must not need these
    monkeypatch.setattr(tok, "decode", not_used)
    assert [encode_text(tok, t) for t in texts] == want_ids
    assert [decode_ids(tok, ids) for ids in id_lists] == want_text


def test_split_special_tokens_and_backend_truncation_take_the_transformers_path(tok):
    text = "<|im_start|>user\n" + "many words here " * 20 + "<|im_end|>"
    tok.backend_tokenizer.enable_truncation(4)  # transformers' encode does not truncate
    assert encode_text(tok, text) == list(tok.encode(text, add_special_tokens=False))
    assert len(encode_text(tok, text)) > 4
    tok.split_special_tokens = True
    split = encode_text(tok, "<|im_end|>")
    assert split == list(tok.encode("<|im_end|>", add_special_tokens=False))
    assert len(split) > 1  # the marker is spelled out, not its special id


def test_a_family_that_overrides_decoding_keeps_its_override(tok):
    class Shouting(type(tok)):
        def _decode(self, token_ids, skip_special_tokens=False, **kwargs):
            return super()._decode(token_ids, skip_special_tokens, **kwargs).upper()

    tok.__class__ = Shouting
    ids = encode_text(tok, "quiet words")
    assert decode_ids(tok, ids) == tok.decode(ids) == "QUIET WORDS"


def test_clean_up_of_spaces_is_applied_as_the_tokenizer_does():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "hello": 1, ",": 2, "world": 3, "!": 4}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.decoder = decoders.WordPiece(cleanup=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, clean_up_tokenization_spaces=True)
    ids = encode_text(tok, "hello, world!")
    assert ids == [1, 2, 3, 4]
    assert decode_ids(tok, ids) == tok.decode(ids) == "hello, world!"
    assert tok.backend_tokenizer.decode(ids) == "hello , world !"  # what skipping it would give
