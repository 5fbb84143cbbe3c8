"""B9: long-conversation training memory: one GRPO update on a 16k-token micro-batch, CPU.

Model: Qwen2 architecture, 2 layers, hidden 256, 4/2 heads, vocabulary 151,936 (Qwen's), tied
embeddings, fp32, random weights (`bench._b9_worker.build_model`), run as the trainer runs it
on CPU. Workload: one packed micro-batch of one 16,384-token conversation whose 64 turns end
with policy tokens, 12,000 scored; one GRPO update (clipped policy loss with the entropy term,
token-mean, AdamW step) through `mua.train.packed_forward.accumulate`. One fp32 [12,000, V]
tensor alone would be 7.3 GB; the log-probs are computed in chunks (`mua.train.head_scores`).

`peak_rss_gb`: the update process's peak resident size (model, optimizer state and the
interpreter included), from getrusage in a process of its own.
`max_abs_logp_diff_vs_unchunked`: on 1,024 tokens (750 scored) of the same model, the chunked
log-probs against those of whole logits (`mua.train.packed_forward.scored_logprobs`); the entropy's
difference and the largest relative gradient difference are reported too.
"""

from __future__ import annotations

from bench.common import require_work, worker_results

ID = "B9"
BAR = {"peak_rss_gb": "<= 3", "max_abs_logp_diff_vs_unchunked": "<= 1e-5"}


def run():
    updated, compared = worker_results(ID, "bench._b9_worker", "update", "compare", timeout_s=900)
    require_work(
        ID,
        "the update",
        scored_tokens=updated["scored_tokens"],
        nonzero_grads=updated["nonzero_grads"],
    )
    require_work(ID, "the comparison", scored_tokens=compared["scored_tokens"])
    metrics = {
        "peak_rss_gb": updated["peak_rss_gb"],
        "max_abs_logp_diff_vs_unchunked": compared["max_abs_logp_diff"],
        "max_abs_entropy_diff_vs_unchunked": compared["max_abs_entropy_diff"],
        "max_rel_grad_diff_vs_unchunked": compared["max_rel_grad_diff"],
        "update_s": updated["update_s"],
        "scored_tokens": float(updated["scored_tokens"]),
    }
    return metrics, "one process per measurement; update_s is absolute (shared CPU)"
