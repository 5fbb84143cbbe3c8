"""Rollout engines: the contract every engine implements (`mua.engines.engine_contract`), the in-process
transformers engine (`mua.engines.hf`) and the client of an SGLang server with its launch and
weight push (`mua.engines.sglang`). Heavy modules are imported lazily by their users."""
