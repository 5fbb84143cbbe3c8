"""The transformers engine: continuous batching over a KV-cache slot pool in the trainer's own
process, on CPU or GPU. Weights arrive as an in-process copy; no server, no HTTP."""
