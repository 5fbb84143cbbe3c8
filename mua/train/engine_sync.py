"""How the trainer co-operates with its rollout engine: building it, pushing weights, each use.

`EngineSync.run(job)` wraps every use (begin, stale push, probe, job, end) and `push_weights()`
follows each update (docs/architecture.md, "The engine cycle"); it keeps what every engine
shares: staleness, `weight_version`, what travels (full weights or a versioned LoRA adapter) and
the probe, where the worst rank's difference stops all ranks together. Pushes are timed as the
`weight_push` phase; `take_metrics` returns `engine/probe_logp_diff`.
Not here: any engine's own calls (its folder under `mua.engines`, behind `ColocatedEngine`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from mua.distributed import all_reduce_max
from mua.engines.adapter_versions import adapter_name
from mua.engines.engine_contract import ColocatedEngine
from mua.engines.weight_probe import check_probe_diff, probe_logprob_diff
from mua.train.step_timer import StepTimer, timed
from mua.train.trained_model import engine_params

T = TypeVar("T")


@dataclass
class EngineSync:
    """The rollout engine of this rank and the bookkeeping that keeps it in step with the trainer."""

    session: ColocatedEngine  # this rank's engine, as the trainer drives it
    model: object  # the trainer's (FSDP-sharded) policy
    lora_sync: str = "merged"  # "adapter": push the LoRA adapter alone (a peft policy)
    stale: bool = True
    updates: int = 0  # weight updates pushed so far: the pushes' weight_version
    pushes: int = 0  # adapter pushes so far: the next adapter's version number
    timer: StepTimer | None = None  # the current step's (set by `run` / `push_weights`)
    _probe_diffs: list[float] = field(default_factory=list)

    @property
    def engine(self):
        """What rollouts generate with (`RolloutEngine`)."""
        return self.session.engine

    @property
    def pushes_adapter(self) -> bool:
        return self.lora_sync == "adapter"

    @property
    def weight_version(self) -> str:
        """What every push says it carries (SGLang's `weight_version`): the number of updates
        pushed so far, the same string for a re-push of unchanged weights after a release."""
        return str(self.updates)

    def run(self, job: Callable[[], Awaitable[T]], timer: StepTimer | None = None) -> T:
        """begin of use -> `await job()` (rollouts, validation) -> end of use; returns the job's
        result. A push on the way (stale weights) is timed as `timer`'s `weight_push` phase."""
        self.timer = timer
        return self.session.run(job, self.begin, self.end)

    def push_weights(self, timer: StepTimer | None = None) -> None:
        """The trainer's weights changed (an update): pushed now to an engine that takes it,
        else at its next begin of use."""
        self.timer = timer
        self.stale = True
        self.updates += 1
        if self.session.push_on_update:
            asyncio.run(self.push())

    def mark_stale(self) -> None:
        """The trainer's weights changed outside a step (a resume): push before the next use."""
        self.stale = True

    async def begin(self) -> None:
        """Make the engine ready to generate with the trainer's current weights, then probe."""
        await self.session.begin_use(self.push if self.stale else None)
        if self.session.probe_ids:
            await self.probe()

    async def end(self) -> None:
        """Give the engine's memory back to the trainer (once every rank is done)."""
        if await self.session.end_use(keep_base=self.pushes_adapter):
            self.stale = True

    async def push(self) -> None:
        """Gather the trainer's weights (every rank, collective) and push them: the full
        weights, or the adapter alone under its next versioned name."""
        with timed(self.timer, "weight_push"):
            if self.pushes_adapter:
                from mua.models.lora import adapter_config_dict

                name = adapter_name(self.pushes)
                self.pushes += 1
                tensors = list(adapter_tensors(self.model))
                config = adapter_config_dict(self.model)
                await self.session.push_adapter(name, tensors, config, self.weight_version)
            else:
                await self.session.push_full(engine_params(self.model), self.weight_version)
        self.stale = False

    async def probe(self) -> float:
        """Every rank probes the engine together; RunFailure on all ranks past the tolerance."""
        local = await probe_logprob_diff(self.engine, self.model, self.session.probe_ids)
        worst = float(all_reduce_max([local])[0])
        self._probe_diffs.append(worst)
        check_probe_diff(worst, self.session.probe_tolerance)
        return worst

    def take_metrics(self) -> dict[str, float]:
        """The worst probe difference since the last call (then reset); {} without a probe."""
        out = {}
        if self._probe_diffs:
            out["engine/probe_logp_diff"] = max(self._probe_diffs)
        self._probe_diffs = []
        return out

    async def close(self) -> None:
        await self.session.close()


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
    """The rollout engine `rollout.engine` names (its builder from `mua.engines.registry`), for
    `policy` (the trainer's sharded model), wrapped for the trainer (collective for sglang)."""
    from mua.engines.registry import engine_builder

    build = engine_builder(rollout.engine)
    session = build(rollout, model_cfg, parallel, dist, policy, tokenizer)
    lora_sync = rollout.lora_sync if model_cfg.lora is not None else "merged"
    return EngineSync(session, policy, lora_sync=lora_sync)


def memory_preflight(recipe, model, world_size: int, gpu_bytes: int, show: bool = True) -> str:
    """Estimate per-GPU memory of trainer + co-located engine; print it, RunFailure if it cannot fit."""
    from mua.train.memory_estimate import (
        ModelShape,
        check_fits,
        estimate_memory,
        format_table,
        lora_params,
        moe_sizes,
        run_shape_from_recipe,
    )

    num_params = sum(p.numel() for p in model.parameters())  # DTensor numel is the full size
    moe = moe_sizes(model)
    lora = recipe.model.lora
    trainable = (
        None if lora is None else lora_params(model, lora.rank, lora.target_modules, lora.experts)
    )
    shape = ModelShape.from_hf_config(model.config, num_params, moe, trainable)
    est = estimate_memory(shape, run_shape_from_recipe(recipe, world_size), gpu_bytes)
    table = format_table(est) + (f"\n{moe.describe()}" if moe else "")
    if show:
        print(f"memory estimate (per GPU):\n{table}", flush=True)
    check_fits(est)
    return table
