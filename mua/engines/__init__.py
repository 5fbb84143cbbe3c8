"""Rollout engines: the contracts (`mua.engines.engine_contract`: `RolloutEngine` for rollouts,
`ColocatedEngine` for the trainer), the `EngineSpec` each engine folder exports as `SPEC`
(`mua.engines.engine_spec`), the registry `rollout.engine` names (`mua.engines.registry`), the
in-process transformers engine (`mua.engines.hf`), the client of an SGLang server with its launch,
weight push and protocol tables (`mua.engines.sglang`) and that of vLLM servers
(`mua.engines.vllm`). Heavy modules are imported lazily by their users."""
