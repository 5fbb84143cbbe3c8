"""The settings of a simulated user (`LLMUserConfig`) that talks to a `FakeOpenAIServer`.

Only the config: the server is `tests/fakes/fake_openai.py`, the client `mua.llm.llm_client`.
"""

from __future__ import annotations

from mua.config.users import LLMUserConfig


def fake_user_config(server, **settings) -> LLMUserConfig:
    """An `llm` user at `server`'s URL, model `sim-user`, two retries 10 ms apart; `settings`
    override any field."""
    defaults = {
        "base_url": server.base_url,
        "model": "sim-user",
        "max_retries": 2,
        "backoff_s": 0.01,
    }
    return LLMUserConfig(**{"kind": "llm", **defaults, **settings})
