"""Credentials in URLs never reach files, MLflow or messages."""

from __future__ import annotations

import pytest

from mua.config.redact import redact_text, redact_urls


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("http://u:sk-abc123@host:8000/v1", "http://***@host:8000/v1"),
        ("https://sk-abc123@api.example.com/v1", "https://***@api.example.com/v1"),
        ("http://host/v1?key=sk-abc&model=m", "http://host/v1?key=***&model=m"),
        ("http://host/v1?model=m&api_key=sk-abc", "http://host/v1?model=m&api_key=***"),
        ("http://host/v1?access_token=t1#frag", "http://host/v1?access_token=***#frag"),
        ("http://host/v1?X-Amz-Signature=abc&a=1", "http://host/v1?X-Amz-Signature=***&a=1"),
        ("http://127.0.0.1:30000/v1", "http://127.0.0.1:30000/v1"),
        ("http://host/v1?monkey=1", "http://host/v1?monkey=***"),  # errs on the safe side
    ],
)
def test_url_credentials_are_masked(url, want):
    assert redact_text(url) == want


def test_urls_inside_text_and_structures():
    text = "user at http://u:sk-1@h/v1 (model m) gave no reply; see https://h2/?token=zz."
    out = redact_text(text)
    assert "sk-1" not in out and "zz" not in out
    assert out.startswith("user at http://***@h/v1 (model m)")
    tree = {"user": {"base_url": "http://a:b@h/v1", "n": 3}, "l": ["x", ("http://h/?key=k",)]}
    assert redact_urls(tree) == {
        "user": {"base_url": "http://***@h/v1", "n": 3},
        "l": ["x", ("http://h/?key=***",)],
    }
    assert redact_text("no url: user:pass@host") == "no url: user:pass@host"
