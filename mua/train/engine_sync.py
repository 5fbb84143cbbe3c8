"""How the trainer co-operates with its rollout engine: building it, pushing weights, sleep/wake.

The RL step runs its rollouts (and in-training validation) through `EngineSync.run(job)`, which
wakes the engine before the job and puts it to sleep after it, and ends with `push_weights()`
after its update. Weights are pushed only when stale (the trainer's weights changed, or SGLang
released them): the hf engine gets them at once, SGLang at its next wake, because its sleep
releases weight memory and a push before it would be thrown away.

Two engines:
- `hf`: every rank owns a private transformers engine. wake: (move to GPU), push if stale;
  sleep: (move to CPU). Both moves are no-ops on CPU. No probe: the push is an in-process copy.
- `sglang`: a server speaking SGLang's protocol (a real SGLang server, or `mua serve` on CPU),
  shared by several ranks. One rank, the leader, drives it: with `rollout.sglang.base_urls` the
  servers serve the whole job and global rank 0 leads; otherwise each node's local rank 0
  launches one server and leads it, and the node's other ranks connect to the URL it shares.
  The cycle, every time the engine is used:
      leader resumes weights memory if it released it -> push (every rank gathers the full
      parameters, a collective; only the leader sends) -> leader resumes the other released tags
      (KV cache, CUDA graphs) -> barrier -> every rank probes the engine (greedy, unseeded
      log-probs vs the trainer's, one collective forward, a rid unique to the rank; the worst
      rank's difference decides, so all ranks stop together) -> rollouts from every rank ->
      every rank drains its own requests still running on the server -> barrier -> leader
      releases every memory tag the server's release knows.
  A fresh server has released nothing, so the first wake resumes nothing (SGLang's scheduler dies
  resuming a tag that is not released). SGLang frees released weights, so after a release the
  weights are stale again. The probe runs after the KV cache is back because generating needs it.

A LoRA policy (`model.lora`) is pushed merged (`rollout.lora_sync: merged`): the gathered
weights come through `mua.train.trained_model.engine_params`, which merges each adapter into its
base weight under the base model's names, so either engine receives a plain model in the same
buckets as a full push. With `rollout.lora_sync: adapter` the engine keeps its base and each push
gathers and sends the adapter tensors only (`adapter_tensors`, peft's file names) under a new
versioned name (`mua.engines.adapter_versions`): the hf engine applies it in place, the SGLang
leader loads it (`/load_lora_adapter_from_tensors`) and every rank's requests name it. Sleeping
then keeps the server's weights (the base stays resident); the adapter is pushed again at each
wake, being small.

Every push carries `weight_version` (the number of updates so far, "0" for the initial
weights). The sglang client reads the server's version back and fails when it did not move. An
adapter push carries it too: the client keeps it with the adapter's name (SGLang's adapter load
has no version field) and reports it in each result the adapter sampled. The hf engine keeps the
version of its last full push and of each adapter, and reports it in its results the same way.

Timing: `run` and `push_weights` take the step's `StepTimer` (`mua.train.step_timer`); every push
is timed as its `weight_push` phase, wherever it happens (after the update for hf, inside the
wake for sglang). `take_metrics` returns, for sglang, `engine/probe_logp_diff` (the largest probe
difference since the last call).
Not here: the HTTP protocol and server launching (`mua.engines.sglang.sglang_engine`), bucketing and
encodings (`mua.engines.sglang.weight_sync`), the hf engine's internals.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from mua.distributed import all_gather_objects, all_reduce_max, barrier
from mua.engines.adapter_versions import adapter_name
from mua.engines.sglang.weight_sync import (
    check_probe_diff,
    default_probe_ids,
    iter_buckets,
    probe_logprob_diff,
)
from mua.train.step_timer import StepTimer, timed
from mua.train.trained_model import engine_params

T = TypeVar("T")


@dataclass
class EngineSync:
    """The rollout engine of this rank and the bookkeeping that keeps it in step with the trainer."""

    engine: object  # the RolloutEngine this rank generates with
    kind: str  # "hf" | "sglang"
    model: object  # the trainer's (FSDP-sharded) policy
    bucket_mb: float
    is_leader: bool = True  # drives the engine's memory and receives the weights
    probe_ids: list[int] = field(default_factory=list)
    probe_tolerance: float = 0.05
    stale: bool = True
    updates: int = 0  # weight updates pushed so far: the pushes' weight_version
    timer: StepTimer | None = None  # the current step's (set by `run` / `push_weights`)
    lora_sync: str = "merged"  # "adapter": push the LoRA adapter alone (a peft policy)
    pushes: int = 0  # adapter pushes so far: the next adapter's version number
    push_bytes: int = 0  # bytes of the tensors pushed so far (full or adapter)
    _probe_diffs: list[float] = field(default_factory=list)

    def run(self, job: Callable[[], Awaitable[T]], timer: StepTimer | None = None) -> T:
        """wake -> `await job()` (rollouts, validation) -> sleep; returns the job's result.
        A push on the way (stale weights) is timed as `timer`'s `weight_push` phase.

        With the `hf` engine the calling thread serves the engine's batches while the job's event
        loop runs in a helper thread (`HFEngine.serve_while`), so the trainer's thread is the only
        one in the process doing parallel torch work: on CPU a second thread doing it makes
        OpenMP's workers sleep between operations and decoding slower. Stale weights (the first
        use, a resume) are pushed on the calling thread before the job starts."""
        self.timer = timer
        if self.kind == "hf":
            asyncio.run(self.engine.wake())
            try:
                self._push_hf()
                return self.engine.serve_while(lambda: asyncio.run(job()))
            finally:
                asyncio.run(self.sleep())

        async def whole() -> T:
            await self.wake()
            try:
                return await job()
            finally:
                await self.sleep()

        return asyncio.run(whole())

    def push_weights(self, timer: StepTimer | None = None) -> None:
        """The trainer's weights changed (an update): the hf engine copies them now; an sglang
        server gets them in its next `wake`, between resuming weight memory and the KV cache."""
        self.timer = timer
        self.stale = True
        self.updates += 1
        if self.kind == "hf":
            self._push_hf()

    def mark_stale(self) -> None:
        """The trainer's weights changed outside a step (a resume): push before the next use."""
        self.stale = True

    async def wake(self) -> None:
        """Make the sglang engine ready to generate with the trainer's current weights (`run`
        wakes the hf engine itself)."""
        if self.is_leader:
            await self.engine.wake(tags=["weights"])  # only when released
        if self.stale:
            await self.push()
        if self.is_leader:
            await self.engine.wake()  # every other tag it released
        barrier()  # followers generate only once the leader's push and resume are done
        await self.probe()

    @property
    def pushes_adapter(self) -> bool:
        return self.lora_sync == "adapter"

    async def sleep(self) -> None:
        """Give the engine's memory back to the trainer (sglang: once every rank is done)."""
        if self.kind == "hf":
            await self.engine.sleep()
            return
        await self.engine.drain()  # SGLang 0.5.x asserts it is idle when memory is released
        barrier()
        if self.is_leader:
            # every tag of the server's release (cuda_graph included); with adapter pushes the
            # base weights stay resident
            await self.engine.sleep(tags=await self._released_tags())
        self.stale = True  # SGLang frees released weights; an adapter is pushed again

    async def _released_tags(self) -> list[str] | None:
        if not self.pushes_adapter:
            return None
        engines = getattr(self.engine, "engines", [self.engine])
        traits = await engines[0].server_traits()
        return [t for t in traits.memory_tags if t != "weights"]

    async def push(self) -> None:
        """Gather the full parameters (every rank, collective) and send them to the sglang engine
        from the leader (the hf engine's push is `_push_hf`, run by `run`)."""
        with timed(self.timer, "weight_push"):
            if self.pushes_adapter:
                await self._push_adapter_sglang()
                return
            params = engine_params(self.model)
            if not self.is_leader:
                for _ in params:  # take part in each gather; the leader sends
                    pass
            else:  # the sglang client buckets (or writes shards) itself
                await self.engine.update_weights(params, weight_version=self.weight_version)
        self.stale = False

    def _next_adapter(self) -> tuple[str, list, dict]:
        """(versioned name, adapter tensors, adapter config) of the next adapter push; gathers
        the adapter tensors (collective: every rank calls it in the same order)."""
        from mua.models.lora import adapter_config_dict

        name = adapter_name(self.pushes)
        self.pushes += 1
        tensors = list(adapter_tensors(self.model))
        self.push_bytes += sum(t.numel() * t.element_size() for _, t in tensors)
        return name, tensors, adapter_config_dict(self.model)

    async def _push_adapter_sglang(self) -> None:
        name, tensors, config = self._next_adapter()
        if self.is_leader:
            await self.engine.load_adapter(name, tensors, config, self.weight_version)
        else:  # the leader loaded it (the barrier in `wake` orders it before any request)
            self.engine.use_adapter(name, self.weight_version)
        self.stale = False

    @property
    def weight_version(self) -> str:
        """What every push says it carries (SGLang's `weight_version`): the number of updates
        pushed so far, the same string for a re-push of unchanged weights after a release."""
        return str(self.updates)

    def _push_hf(self) -> None:
        """The hf engine's push when stale, in buckets, copied on the calling thread: a worker
        thread's copy would start an OpenMP pool of its own."""
        if not self.stale:
            return
        with timed(self.timer, "weight_push"):
            if self.pushes_adapter:
                self.engine.load_adapter(*self._next_adapter(), self.weight_version)
            else:
                for bucket in iter_buckets(engine_params(self.model), self.bucket_mb):
                    self.push_bytes += sum(t.numel() * t.element_size() for _, t in bucket)
                    self.engine.load_weights(bucket)
                # the version moves once every bucket is in (an empty push that carries it)
                self.engine.load_weights([], self.weight_version)
        self.stale = False

    async def probe(self) -> float:
        """Every rank probes the engine together; RunFailure on all ranks past the tolerance."""
        local = await probe_logprob_diff(self.engine, self.model, self.probe_ids)
        worst = float(all_reduce_max([local])[0])
        self._probe_diffs.append(worst)
        check_probe_diff(worst, self.probe_tolerance)
        return worst

    def take_metrics(self) -> dict[str, float]:
        """The worst probe difference since the last call (then reset); {} without a probe."""
        out = {}
        if self._probe_diffs:
            out["engine/probe_logp_diff"] = max(self._probe_diffs)
        self._probe_diffs = []
        return out

    async def close(self) -> None:
        """Leave a shared server as a fresh one is: the leader resumes what it released, so the
        next trainer that attaches (whose first wake resumes nothing) finds its memory there."""
        if self.kind == "sglang" and self.is_leader:
            try:
                await self.engine.wake()
            except Exception:  # the server is gone (or was launched here and stops below)
                pass
        await self.engine.close()


def adapter_tensors(model):
    """(peft file name, full CPU tensor) of a peft policy's adapter tensors only, one at a time
    (collective: every rank iterates in lock-step; the frozen base is not gathered)."""
    from mua.distributed.fsdp import iter_full_params
    from mua.models.lora import adapter_file_names, is_adapter_name
    from mua.models.lora_embeddings import tied_heads

    # a head tied to the embedding travels as peft's files hold it: its factors, transposed
    yield from adapter_file_names(iter_full_params(model, keep=is_adapter_name), tied_heads(model))


# ---- building --------------------------------------------------------------------------------


def build_engine_sync(rollout, model_cfg, parallel, dist, policy, tokenizer) -> EngineSync:
    """The rollout engine of a `rollout` section for `policy` (the trainer's sharded model),
    wrapped for the trainer (collective for sglang)."""
    if rollout.engine == "sglang":
        return _build_sglang(rollout, model_cfg, parallel, dist, policy, tokenizer)
    from mua.determinism import engine_batch_size
    from mua.engines.hf.hf_engine import HFEngine
    from mua.models import load_model

    dtype = model_cfg.dtype if dist.device.type == "cuda" else "float32"
    engine = HFEngine(
        load_model(model_cfg.path, dtype=dtype, seed=model_cfg.seed),
        device=str(dist.device),
        copy_model=False,
        pad_token_id=tokenizer.pad_token_id or 0,
        max_batch_size=engine_batch_size(64),
    )
    return EngineSync(
        engine,
        "hf",
        policy,
        parallel.weight_push_bucket_mb,
        lora_sync=_lora_sync(rollout, model_cfg),
    )


def _lora_sync(rollout, model_cfg) -> str:
    return rollout.lora_sync if model_cfg.lora is not None else "merged"


def _build_sglang(rollout, model_cfg, parallel, dist, policy, tokenizer) -> EngineSync:
    from mua.engines.sglang.engine_pool import engine_from_config

    cfg = rollout.sglang
    hf_config = getattr(policy, "config", None)
    options = dict(
        bucket_mb=parallel.weight_push_bucket_mb,
        hf_config=hf_config,
        max_concurrency=rollout.max_concurrency,
    )
    lora_sync = _lora_sync(rollout, model_cfg)
    if lora_sync == "adapter":  # a launched server must take adapters of this shape
        from mua.engines.sglang.lora_endpoints import launch_args

        options["lora_args"] = launch_args(model_cfg.lora)
    if cfg.base_urls:  # servers of the whole job: global rank 0 drives them
        engine = engine_from_config(cfg, model_cfg.path, **options)
        is_leader = dist.rank == 0
    else:  # one launched server per node, driven by the node's local rank 0
        is_leader = dist.local_rank == 0
        engine = engine_from_config(cfg, model_cfg.path, **options) if is_leader else None
        node = _node_id()
        shared = all_gather_objects((node, engine.base_url if engine is not None else None))
        if engine is None:
            url = next(u for n, u in shared if n == node and u)
            engine = engine_from_config(
                cfg.model_copy(update={"base_urls": [url]}), model_cfg.path, **options
            )
    vocab_size = int(getattr(hf_config, "vocab_size", 0) or len(tokenizer))
    return EngineSync(
        engine,
        "sglang",
        policy,
        parallel.weight_push_bucket_mb,
        is_leader=is_leader,
        probe_ids=default_probe_ids(vocab_size),
        probe_tolerance=cfg.probe_tolerance,
        lora_sync=lora_sync,
    )


def _node_id() -> str:
    """Which node this process runs on: torchrun's node rank, else the host name."""
    return os.environ.get("GROUP_RANK") or socket.gethostname()


def memory_preflight(recipe, model, world_size: int, gpu_bytes: int, show: bool = True) -> str:
    """Estimate per-GPU memory of trainer + co-located engine; print it, RunFailure if it cannot fit."""
    from mua.train.memory_estimate import (
        ModelShape,
        check_fits,
        estimate_memory,
        format_table,
        run_shape_from_recipe,
    )

    num_params = sum(p.numel() for p in model.parameters())  # DTensor numel is the full size
    shape = ModelShape.from_hf_config(model.config, num_params=num_params)
    est = estimate_memory(shape, run_shape_from_recipe(recipe, world_size), gpu_bytes)
    table = format_table(est)
    if show:
        print(f"memory estimate (per GPU):\n{table}", flush=True)
    check_fits(est)
    return table
