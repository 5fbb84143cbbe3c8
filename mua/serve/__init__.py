"""`mua serve`: SGLang's native protocol (and an OpenAI chat endpoint) over mua's transformers engine.

`serve_model(path)` loads a model and tokenizer and starts a `MuaServer` in background threads
(what tests and `mua serve` use); `MuaServer(engine, tokenizer)` serves any RolloutEngine.
Importing this package is cheap: torch and transformers load when a model is served.
"""

from __future__ import annotations

from mua.serve.server import MuaServer


def serve_model(
    model_path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    dtype: str = "float32",
    device: str | None = None,
    seed: int = 0,
    max_batch_size: int = 64,
    sglang_release: str | None = None,
) -> MuaServer:
    """Load `model_path` into an HFEngine and start serving it; returns the started server."""
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_tokenizer

    tokenizer = load_tokenizer(model_path)
    engine = HFEngine.from_pretrained(
        model_path,
        dtype=dtype,
        device=device,
        seed=seed,
        max_batch_size=max_batch_size,
        pad_token_id=tokenizer.pad_token_id or 0,
    )
    from mua.engines.sglang.releases import NEWEST_COVERED

    eos = getattr(getattr(engine, "model", None), "config", None)
    eos = getattr(eos, "eos_token_id", None)
    return MuaServer(
        engine,
        tokenizer,
        eos_token_ids=[eos] if isinstance(eos, int) else list(eos or []),
        model_path=model_path,
        host=host,
        port=port,
        sglang_release=sglang_release or NEWEST_COVERED,
    ).start()


__all__ = ["MuaServer", "serve_model"]
