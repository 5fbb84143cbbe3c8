"""B10: LoRA against full fine-tuning: peak memory and time of one GRPO update, weight-push bytes (CPU).

Model: Qwen3 architecture, 6 layers, hidden 1024, intermediate 2816, 16/8 heads, vocabulary
32,000, tied embeddings, fp32, random weights: 103.6M parameters (414 MB), so on a short batch
(4 sequences of 64 tokens, 32 scored each) the weights, gradients and AdamW state dominate the
memory, not activations. LoRA: rank 16, alpha 32, every linear layer of the blocks (peft, through
`mua.models.lora.add_adapters`), 1.8M trainable parameters. Each mode runs in a process of its own
(`bench._b10_worker`), both in one B10 run: the trainer's optimizer and its packed forward,
one update (clipped policy loss, token-mean, backward, AdamW step).

`lora_peak_mem_vs_full`: (peak resident size during LoRA's update − the process's size after
imports) / the same for full fine-tuning; the peak is Linux's VmHWM, reset just before the update.
`adapter_push_bytes_vs_full`: bytes of the HTTP body an adapter push sends to SGLang
(`rollout.lora_sync: adapter`, `/load_lora_adapter_from_tensors`) / bytes of the bodies a full push
sends (`/update_weights_from_tensor`, every bucket; the merged push, `rollout.lora_sync: merged`,
sends as much), both built by the client's own functions. `lora_update_s_vs_full`: the two update times (shared CPU: noisy).
"""

from __future__ import annotations

from bench.common import require_same_work, require_work, worker_results

ID = "B10"
BAR = {"lora_peak_mem_vs_full": "<= 0.5", "adapter_push_bytes_vs_full": "<= 0.02"}


def run():
    full, lora = worker_results(ID, "bench._b10_worker", "full", "lora", timeout_s=1200)
    for mode, seen in (("full", full), ("lora", lora)):
        require_work(
            ID,
            f"the {mode} update",
            nonzero_grads=seen["nonzero_grads"],
            push_bytes=seen["push_bytes"],
        )
    require_same_work(ID, "scored tokens", full=full["scored_tokens"], lora=lora["scored_tokens"])
    full_mem = full["peak_rss_gb"] - full["base_rss_gb"]
    lora_mem = lora["peak_rss_gb"] - lora["base_rss_gb"]
    metrics = {
        "lora_peak_mem_vs_full": lora_mem / full_mem,
        "adapter_push_bytes_vs_full": lora["push_bytes"] / lora["full_push_bytes"],
        "lora_update_s_vs_full": lora["update_s"] / full["update_s"],
        "full_peak_train_gb": full_mem,
        "lora_peak_train_gb": lora_mem,
        "full_update_s": full["update_s"],
        "lora_update_s": lora["update_s"],
        "adapter_push_bytes": float(lora["push_bytes"]),
        "full_push_bytes": float(lora["full_push_bytes"]),
        "adapter_tensor_bytes": float(lora["push_tensor_bytes"]),
        "params": float(full["params"]),
        "lora_trainable": float(lora["trainable"]),
    }
    notes = (
        "one process per mode; memory = peak RSS during the update minus RSS after imports; "
        "push bytes = the HTTP bodies the SGLang client sends (adapter push vs full push)"
    )
    return metrics, notes
