"""The `vllm` rollout engine: a client of vLLM's HTTP server (`vllm_engine`), its launch
(`vllm_launch`), the trainer's side (`colocated`) and the worker extension vLLM imports in its own
process to take pushed weights exactly (`worker_extension`). Nothing here imports vLLM: it runs in
its own Python (`rollout.vllm.python`), so mua's dependencies never meet vLLM's."""
