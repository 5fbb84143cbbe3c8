"""The `hf` RolloutEngine: transformers generation with dynamic batching, on CPU or CUDA.

Callers `await generate(request)` from many coroutines. A scheduler task collects whatever is
pending and runs one left-padded batch with a KV cache in a worker thread (the event loop stays
free); requests that arrive while a batch runs form the next batch. Rows that finish early are
dropped from the batch and its cache. Each sampled token comes with log_softmax(logits / T) of
that token, T the request's temperature (T = 1 when greedy), computed before top-k/top-p
filtering, which is what the trainer recomputes.

Deliberately not here: per-step continuous batching (a new request waits for the running batch to
end), prefix caching across requests, tensor parallelism, tokenization. SGLang covers speed on GPU.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Iterable
from typing import Any

from mua.rollout.engine import GenerationRequest, GenerationResult, SamplingParams

_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


class HFEngine:
    """A private copy of a causal LM that samples batches of requests."""

    def __init__(self, model, *, device: str | None = None, max_batch_size: int = 64,
                 copy_model: bool = True, pad_token_id: int = 0):
        import torch

        self.model = copy.deepcopy(model) if copy_model else model
        self.model.eval().requires_grad_(False)
        self.device = torch.device(device) if device else next(self.model.parameters()).device
        self.model.to(self.device)
        self.max_batch_size = max_batch_size
        self.pad_token_id = pad_token_id
        self.asleep = False
        self.stats = {"batches": 0, "requests": 0, "tokens": 0, "largest_batch": 0}
        self._pending: list[tuple[GenerationRequest, asyncio.Future]] = []
        self._model_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._scheduler: asyncio.Task | None = None

    @classmethod
    def from_pretrained(cls, path: str, *, dtype: str = "float32", device: str | None = None,
                        seed: int = 0, **kwargs) -> HFEngine:
        from mua.models import load_model

        return cls(load_model(path, dtype=dtype, seed=seed), device=device, copy_model=False, **kwargs)

    # ---- asyncio side -------------------------------------------------------------------

    def _ensure_scheduler(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._scheduler is None or self._scheduler.done():
            self._loop = loop
            self._wakeup = asyncio.Event()
            self._scheduler = loop.create_task(self._schedule())

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.asleep:
            raise RuntimeError("the hf engine is asleep; call wake() before generate()")
        if request.sampling.max_new_tokens <= 0:
            return GenerationResult(token_ids=[], logprobs=[], finish_reason="length")
        self._ensure_scheduler()
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._wakeup.set()
        return await future

    async def _schedule(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch = [(r, f) for r, f in self._pending[: self.max_batch_size] if not f.done()]
                del self._pending[: self.max_batch_size]
                if not batch:
                    continue
                try:
                    results = await asyncio.to_thread(self._run_batch, [r for r, _ in batch])
                except Exception as e:  # hand the failure to every caller of this batch
                    for _, f in batch:
                        if not f.done():
                            f.set_exception(e)
                    continue
                for (_, f), res in zip(batch, results, strict=False):
                    if not f.done():
                        f.set_result(res)

    async def update_weights(self, named_tensors: Iterable[Any]) -> None:
        """Copy named full tensors into this engine's model; accepts pairs, dicts or buckets of them."""
        await asyncio.to_thread(self._load_weights, named_tensors)

    async def sleep(self) -> None:
        """Move the model to CPU and free cached GPU memory; a no-op on CPU."""
        if self.device.type == "cuda":
            import torch

            with self._model_lock:
                self.model.to("cpu")
                torch.cuda.empty_cache()
        self.asleep = True

    async def wake(self) -> None:
        if self.device.type == "cuda":
            with self._model_lock:
                self.model.to(self.device)
        self.asleep = False

    async def close(self) -> None:
        if self._scheduler is not None and not self._scheduler.done():
            self._scheduler.cancel()
        for _, f in self._pending:
            if not f.done():
                f.set_exception(RuntimeError("the hf engine was closed"))
        self._pending.clear()

    # ---- worker-thread side -------------------------------------------------------------

    def _load_weights(self, named_tensors: Iterable[Any]) -> None:
        import torch

        targets = dict(self.model.named_parameters(remove_duplicate=False))
        targets.update(dict(self.model.named_buffers(remove_duplicate=False)))
        with self._model_lock, torch.no_grad():
            for name, tensor in _flatten_named(named_tensors):
                key = name
                for prefix in _PREFIXES:
                    key = key.replace(prefix, "")
                target = targets.get(key)
                if target is None:
                    raise ValueError(f"update_weights: the engine's model has no weight named {name!r}")
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ValueError(f"update_weights: {name!r} has shape {tuple(tensor.shape)}, "
                                     f"the engine expects {tuple(target.shape)}")
                target.copy_(tensor.detach().to(device=target.device, dtype=target.dtype))

    def _run_batch(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        import torch

        with self._model_lock, torch.inference_mode():
            results = _generate_batch(self.model, self.device, requests, self.pad_token_id)
        self.stats["batches"] += 1
        self.stats["requests"] += len(requests)
        self.stats["tokens"] += sum(len(r.token_ids) for r in results)
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(requests))
        return results


def _flatten_named(items: Any):
    """Yield (name, tensor) from a dict, an iterable of pairs, or an iterable of such buckets."""
    if isinstance(items, dict):
        yield from items.items()
        return
    for item in items:
        if isinstance(item, dict):
            yield from item.items()
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            yield item
        else:
            yield from _flatten_named(item)


def _left_pad(requests, pad_id: int, device):
    import torch

    lengths = [len(r.prompt_ids) for r in requests]
    width = max(lengths)
    input_ids = torch.full((len(requests), width), pad_id, dtype=torch.long)  # [B, T]
    mask = torch.zeros((len(requests), width), dtype=torch.long)  # [B, T]
    for i, r in enumerate(requests):
        input_ids[i, width - lengths[i] :] = torch.tensor(r.prompt_ids, dtype=torch.long)
        mask[i, width - lengths[i] :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, T]
    return input_ids.to(device), mask.to(device), positions.to(device)


def _sample(logits, params: list[SamplingParams], generators) -> tuple[list[int], list[float]]:
    """One token per row and its log_softmax(logits / T); logits [B, V] float32."""
    import torch

    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params],
                         dtype=logits.dtype, device=logits.device)
    scaled = logits / temps[:, None]  # [B, V]
    logp = torch.log_softmax(scaled, dim=-1)  # [B, V]
    tokens = []
    for i, p in enumerate(params):
        if p.temperature <= 0:
            tokens.append(int(torch.argmax(scaled[i])))
            continue
        row = scaled[i]
        if p.top_k and p.top_k < row.numel():
            kth = torch.topk(row, p.top_k).values[-1]
            row = row.masked_fill(row < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_logits, order = torch.sort(row, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            outside = probs.cumsum(-1) - probs > p.top_p  # keep the token that crosses top_p
            row = row.clone()
            row[order[outside]] = float("-inf")
        probs = torch.softmax(row, dim=-1)
        tokens.append(int(torch.multinomial(probs, 1, generator=generators[i])))
    picked = logp[torch.arange(len(params), device=logits.device), torch.tensor(tokens, device=logits.device)]
    return tokens, picked.tolist()


def _generators(requests, device):
    import torch

    out = []
    for r in requests:
        if r.sampling.seed is None:
            out.append(None)
        else:
            g = torch.Generator(device=device)
            g.manual_seed(int(r.sampling.seed))
            out.append(g)
    return out


def _generate_batch(model, device, requests: list[GenerationRequest], pad_id: int) -> list[GenerationResult]:
    """Prefill a left-padded batch, then decode step by step, dropping rows as they finish."""
    import torch

    input_ids, mask, positions = _left_pad(requests, pad_id, device)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1, :].float()  # [B, V]
    next_pos = positions[:, -1] + 1  # [B]
    gens = _generators(requests, device)
    stops = [set(r.sampling.stop_token_ids) for r in requests]
    token_ids: list[list[int]] = [[] for _ in requests]
    logprobs: list[list[float]] = [[] for _ in requests]
    reasons: list[str] = ["length"] * len(requests)
    live = list(range(len(requests)))  # request index of each batch row
    while live:
        tokens, lps = _sample(logits, [requests[i].sampling for i in live], [gens[i] for i in live])
        keep_rows = []
        for row, i in enumerate(live):
            token_ids[i].append(tokens[row])
            logprobs[i].append(lps[row])
            if tokens[row] in stops[i]:
                reasons[i] = "stop"
            elif len(token_ids[i]) < requests[i].sampling.max_new_tokens:
                keep_rows.append(row)
        if not keep_rows:
            break
        if len(keep_rows) < len(live):
            index = torch.tensor(keep_rows, device=device)
            cache.batch_select_indices(index)
            mask, next_pos = mask[index], next_pos[index]
            tokens = [tokens[r] for r in keep_rows]
            live = [live[r] for r in keep_rows]
        mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=device)], dim=1)
        step_ids = torch.tensor(tokens, dtype=torch.long, device=device)[:, None]  # [B, 1]
        out = model(input_ids=step_ids, attention_mask=mask, position_ids=next_pos[:, None],
                    past_key_values=cache, use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1, :].float()
        next_pos = next_pos + 1
    return [
        GenerationResult(token_ids=t, logprobs=lp, finish_reason=reason)
        for t, lp, reason in zip(token_ids, logprobs, reasons, strict=False)
    ]
