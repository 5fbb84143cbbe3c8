"""Test helpers that ship with mua: a local OpenAI-compatible server with fault injection.

Used by mua's own tests and benchmarks, and by anyone testing a gym's LLM user offline.
Nothing here is imported by the training or rollout code paths. Names are loaded lazily so
that `python -m mua.testing.fake_openai` runs the module only once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FakeOpenAIServer", "Fault"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mua.testing import fake_openai

        return getattr(fake_openai, name)
    raise AttributeError(f"module 'mua.testing' has no attribute {name!r}")
