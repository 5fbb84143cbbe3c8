"""Rollout engines: the contracts (`mua.engines.engine_contract`: `RolloutEngine` for rollouts,
`ColocatedEngine` for the trainer), the registry `rollout.engine` names (`mua.engines.registry`),
the in-process transformers engine (`mua.engines.hf`) and the client of an SGLang server with its
launch, weight push and protocol tables (`mua.engines.sglang`). Heavy modules are imported lazily
by their users."""
