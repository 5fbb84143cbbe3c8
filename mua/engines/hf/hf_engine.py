"""The `hf` RolloutEngine: transformers generation with continuous batching, on CPU or CUDA.

Callers `await generate(request)` from many coroutines; a serving thread (started when work
arrives) keeps one running batch, admitting pending requests a burst at a time between decode
steps (up to `max_batch_size` rows): `hf_slots.SlotBatch` for Llama, Qwen2 and Qwen3, else
`hf_batch.RunningBatch`. Log-probs are log_softmax(logits / T) before top-k/top-p. Turns sharing
a `route_key` reuse kept KV (`hf_prefix`); `update_weights`, `load_adapter` (`hf_adapters`) and
`sleep` wait for running rows and drop it. Results carry `meta["weight_version"]`. Design:
docs/training.md. Not here: tensor parallelism, tokenization, a radix tree of prefixes.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from mua.engines.engine_contract import GenerationRequest, GenerationResult
from mua.engines.hf.hf_adapters import PeftAdapters
from mua.engines.hf.hf_batch import RunningBatch
from mua.engines.hf.hf_handoff import Drive, deliver, deliver_all
from mua.engines.hf.hf_prefix import PrefixStore
from mua.engines.hf.hf_sampling import Row
from mua.engines.hf.hf_slots import SlotBatch
from mua.engines.hf.hf_slots import supports as supports_slots
from mua.engines.hf.hf_weight_load import copy_named_weights, flatten_named


class HFEngine:
    """A private copy of a causal LM that samples many requests in one continuously running batch.

    With `copy_model=False` the model given becomes the engine's: with slot batching its
    attention is switched to `mua_engine` (which is plain sdpa for any call outside the engine).
    `slot_batching=False` forces the left-padded batch."""

    def __init__(
        self,
        model,
        *,
        device: str | None = None,
        max_batch_size: int = 64,
        copy_model: bool = True,
        pad_token_id: int = 0,
        prefix_cache_mb: float = 256,
        slot_batching: bool = True,
    ):
        import torch

        self.model = copy.deepcopy(model) if copy_model else model
        self.model.eval().requires_grad_(False)
        self.device = torch.device(device) if device else next(self.model.parameters()).device
        self.model.to(self.device)
        self.max_batch_size = max_batch_size
        self.pad_token_id = pad_token_id
        self.asleep = False
        # the version the last push of full weights carried (None: the weights as loaded)
        self.weight_version: str | None = None
        # batches: groups of requests admitted together (one prefill each, run just before a
        # decode step); steps: decode steps; prefix_*: turns that reused a stored prefix, and its
        # tokens; shared_prompts: requests whose prompt was prefilled once for several of them;
        # busy_s: seconds the serving thread spent admitting and decoding
        self.stats = {
            "batches": 0,
            "steps": 0,
            "requests": 0,
            "tokens": 0,
            "largest_batch": 0,
            "prefix_hits": 0,
            "prefix_tokens_reused": 0,
            "shared_prompts": 0,
            "busy_s": 0.0,
        }
        self._queue: list[Row] = []  # admissible requests, oldest first
        self._arriving: list[Row] = []  # queued, their burst not complete yet
        self._queue_lock = threading.Lock()  # guards the two lists, _serving, _holds, _closing
        self._model_lock = threading.Lock()  # held by the serving thread while it has rows
        self._serving = False
        self._holds = 0  # weight loads / sleeps waiting: admit nothing new meanwhile
        self._closing = False
        self._drive: Drive | None = None  # set while a caller's thread serves (`serve_while`)
        self.prefixes = PrefixStore(int(prefix_cache_mb * 2**20))
        self.lora = PeftAdapters(self.model)  # LoRA adapters pushed alone, by name
        if slot_batching and supports_slots(self.model):
            self._batch = SlotBatch(self.model, self.device, self.prefixes)
        else:
            self._batch = RunningBatch(self.model, self.device, pad_token_id, self.prefixes)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        *,
        dtype: str = "float32",
        device: str | None = None,
        seed: int = 0,
        **kwargs,
    ) -> HFEngine:
        from mua.models import load_model

        return cls(
            load_model(path, dtype=dtype, seed=seed), device=device, copy_model=False, **kwargs
        )

    # ---- asyncio side -------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.asleep:
            raise RuntimeError("the hf engine is asleep; call wake() before generate()")
        if request.sampling.max_new_tokens <= 0:
            return GenerationResult(token_ids=[], logprobs=[], finish_reason="length")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._queue_lock:
            self._arriving.append(Row(request=request, handle=future))
        # Admit after the coroutines already scheduled have queued their requests too, so a
        # burst (asyncio.gather) is prefilled as one group, whenever the serving thread looks.
        loop.call_soon(self._release_arrivals)
        return await future

    def _release_arrivals(self) -> None:
        """Make the requests queued so far (a whole burst) admissible, and serve them."""
        with self._queue_lock:
            self._queue += self._arriving
            self._arriving = []
        self._start_serving()

    async def update_weights(
        self, named_tensors: Iterable[Any], weight_version: str | None = None
    ) -> None:
        """Copy named full tensors into this engine's model; accepts pairs, dicts or buckets of
        them. `weight_version`, when given, becomes the engine's once the copy is done."""
        await asyncio.to_thread(self.load_weights, named_tensors, weight_version)

    def load_weights(self, named_tensors: Iterable[Any], weight_version: str | None = None) -> None:
        """`update_weights` on the calling thread: for a caller that serves this engine itself
        (`serve_while`), where a worker thread's copy would start torch threads of its own."""
        self._while_held(self._load_weights, named_tensors, weight_version)

    def load_adapter(
        self,
        name: str,
        named_tensors: Iterable[Any],
        config: dict,
        weight_version: str | None = None,
    ) -> None:
        """Apply a LoRA adapter (tensors named as in `adapter_model.safetensors`, `config` as
        in `adapter_config.json`) under `name` and make it live, deleting the older versions;
        on the calling thread. Results it samples report its `weight_version`, when given."""
        named = list(flatten_named(named_tensors))
        self._while_held(
            self._on_adapters, self.lora.load_live, name, named, config, weight_version
        )

    def add_adapter(self, name: str, named_tensors: Iterable[Any], config: dict) -> None:
        """Apply a LoRA adapter under `name` beside the others; what generates does not change."""
        named = list(flatten_named(named_tensors))
        self._while_held(self._on_adapters, self.lora.add, name, named, config)

    def use_adapter(self, name: str | None) -> None:
        """Generate every request from now on with adapter `name` (None: the base model)."""
        if name != self.lora.active:
            self._while_held(self._on_adapters, self.lora.activate, name)

    def delete_adapter(self, name: str) -> None:
        self._while_held(self._on_adapters, self.lora.delete, name)

    async def sleep(self) -> None:
        """Move the model to CPU and free cached GPU memory; a no-op on CPU."""
        if self.device.type == "cuda":
            await asyncio.to_thread(self._while_held, self._offload)
        self.asleep = True

    async def wake(self) -> None:
        if self.device.type == "cuda":
            await asyncio.to_thread(self._while_held, self.model.to, self.device)
        self.asleep = False

    async def flush_cache(self) -> None:
        """Drop the stored prefixes (KV kept for later turns and by content); rows in flight
        finish first."""
        await asyncio.to_thread(self._while_held, self.prefixes.clear)

    async def close(self) -> None:
        """Fail queued and running requests; the engine can be used again afterwards."""
        with self._queue_lock:
            queued, self._queue = self._queue + self._arriving, []
            self._arriving = []
            self._closing = self._serving
        for row in queued:
            deliver(row, RuntimeError("the hf engine was closed"))
        await asyncio.to_thread(self._while_held, self.prefixes.clear)

    def serve_while(self, fn: Callable[[], Any], first: Callable[[], Any] | None = None) -> Any:
        """Call `fn()` in a helper thread while the calling thread serves this engine's batches;
        returns what `fn` returns (or raises what it raised) once it is done.

        `first()`, when given, runs on the calling thread right after the helper starts and
        before any request is served (typically the weight push): it overlaps with the helper
        preparing its first requests, and no request can start before it returns, because only
        this thread serves while `serve_while` runs.

        `fn` is typically `lambda: asyncio.run(rollouts())`. For a process whose own thread also
        runs parallel torch work (the trainer on CPU): OpenMP keeps one pool of worker threads
        per thread that starts parallel work, and once the pools outnumber the cores its workers
        sleep between operations instead of spinning, which made every decode step far slower.
        Serving from the thread that trains keeps one pool in the process."""
        drive = Drive()
        with self._queue_lock:
            if self._drive is not None:
                raise RuntimeError("serve_while is already running on this engine")
            self._drive = drive
        self._start_serving()  # requests queued before this call
        thread, outcome = drive.start_caller(fn)
        try:
            if first is not None:
                first()
            while drive.next_task():
                self._serve()
        except BaseException:  # interrupted: leave the helper (a daemon) rather than wait on it
            with self._queue_lock:
                self._drive = None
            raise
        with self._queue_lock:
            self._drive = None
        thread.join()
        self._start_serving()  # anything still queued goes to a serving thread
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    # ---- serving thread -----------------------------------------------------------------

    def _start_serving(self) -> None:
        with self._queue_lock:
            if self._serving or not self._queue or self._holds:
                return
            self._serving = True
            drive = self._drive
        if drive is not None:  # the thread in `serve_while` serves
            with drive.cond:
                drive.work = True
                drive.cond.notify()
            return
        threading.Thread(target=self._serve, name="mua-hf-engine", daemon=True).start()

    def _take(self) -> list[Row] | None:
        """Requests to admit now ([] for none); None when the thread should stop serving."""
        batch = self._batch
        with self._queue_lock:
            if self._closing:
                self._closing = False
                for row in batch.clear():
                    deliver(row, RuntimeError("the hf engine was closed"))
            self._queue = [r for r in self._queue if not r.handle.done()]  # drop cancelled callers
            room = self.max_batch_size - len(batch)
            if self._holds or (len(batch) and not batch.can_merge):
                room = 0
            taken, self._queue = self._queue[:room], self._queue[room:]
            if not taken and not len(batch):
                self._serving = False
                return None
            return taken

    def _serve(self) -> None:
        import torch

        with self._model_lock, torch.inference_mode():
            while (taken := self._take()) is not None:
                started_s = time.perf_counter()
                try:
                    self._advance(taken)
                except Exception as e:  # hand the failure to every caller in the batch
                    for row in [*taken, *self._batch.clear()]:
                        deliver(row, e)
                self.stats["busy_s"] += time.perf_counter() - started_s
        self._start_serving()  # a request may have been queued while a hold ended

    def _advance(self, taken: list[Row]) -> None:
        """One forward: the live rows' next token, with `taken` joining; deliver whatever finished."""
        batch = self._batch
        abandoned = {i for i, row in enumerate(batch.rows) if row.handle.done()}
        if abandoned:
            batch.keep([i for i in range(len(batch)) if i not in abandoned])
        if not taken and not len(batch):
            return
        if taken:
            self.stats["batches"] += 1
            self.stats["requests"] += len(taken)
        self.stats["steps"] += 1
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(batch) + len(taken))
        finished = batch.step(taken)
        taken.clear()  # admitted: failures from here on are the batch's
        self.stats["prefix_hits"] = self.prefixes.hits
        self.stats["prefix_tokens_reused"] = self.prefixes.reused_tokens
        self.stats["shared_prompts"] = batch.shared_prompts
        self._finish(finished)

    def _finish(self, rows: list[Row]) -> None:
        # No push or adapter change happens while rows are in flight, so the weights now are
        # the weights that sampled them.
        version = self.lora.active_version() or self.weight_version
        results = []
        for row in rows:
            self.stats["tokens"] += len(row.token_ids)
            result = row.result()
            if version is not None:
                result.meta["weight_version"] = version
            results.append((row, result))
        deliver_all(results)

    def _while_held(self, fn, *args) -> Any:
        """Run fn with no rows in flight: admission pauses, running rows finish first."""
        with self._queue_lock:
            self._holds += 1
        try:
            with self._model_lock:
                return fn(*args)
        finally:
            with self._queue_lock:
                self._holds -= 1
            self._start_serving()

    def _offload(self) -> None:
        import torch

        self.prefixes.clear()
        self._batch.clear()  # empty while held; frees the slot batch's KV buffers
        self.model.to("cpu")
        torch.cuda.empty_cache()

    def _on_adapters(self, change, *args) -> None:
        """An adapter change, held: the KV kept so far was computed with other weights."""
        self.prefixes.clear()
        change(*args)

    def _load_weights(self, named_tensors: Iterable[Any], weight_version: str | None) -> None:
        self.prefixes.clear()  # KV computed with the old weights
        copy_named_weights(self.model, named_tensors)
        if weight_version is not None:
            self.weight_version = str(weight_version)
