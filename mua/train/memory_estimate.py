"""Pre-flight GPU memory estimate for a co-located run: trainer (FSDP2) and rollout engine per GPU.

The rollout phase (engine share via `memory_share(rollout)`, sharded trainer state resident, a KV
budget for at least one full trajectory) and the train phase (engine asleep, trainer peak) must
both fit. `estimate_memory` is a pure function of sizes; `format_table` prints it; `check_fits`
raises `RunFailure` naming the cheapest fix; `moe_sizes` counts a mixture of experts' total, expert
and active parameters; `lora_params` a LoRA run's adapter parameters (the only ones with gradients
and optimizer state then). Estimates within tens of percent (the model: docs/training.md).
Not modelled: pipeline/tensor/sequence/expert parallelism, LoRA on the embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mua.errors import RunFailure

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Bytes of saved activations per token per layer, in units of hidden_size, for a block with fused
# attention and a gated MLP in 16-bit (the 34·h rule for attention+MLP, plus the gate).
ACTIVATION_BYTES_PER_HIDDEN = 40
CUDA_OVERHEAD_BYTES = int(1.5 * GIB)  # CUDA context, NCCL buffers, allocator fragmentation
ENGINE_ASLEEP_BYTES = 1 * GIB  # what a released engine still holds (its own CUDA context)


@dataclass(frozen=True)
class ModelShape:
    num_params: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    num_kv_heads: int
    head_dim: int
    moe: MoeSizes | None = None  # a mixture of experts
    # LoRA: the adapters' parameters (in num_params too), the only trained ones; None: all are
    trainable: int | None = None

    @classmethod
    def from_hf_config(
        cls,
        config,
        num_params: int | None = None,
        moe: MoeSizes | None = None,
        trainable: int | None = None,
    ) -> ModelShape:
        """Read the shape from a transformers config; counts parameters when not given."""
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        if num_params is None:
            num_params = _count_params(config, head_dim)
        return cls(
            num_params=num_params,
            num_layers=config.num_hidden_layers,
            hidden_size=config.hidden_size,
            vocab_size=config.vocab_size,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim,
            moe=moe,
            trainable=trainable,
        )


@dataclass(frozen=True)
class MoeSizes:
    """A mixture of experts' parameter counts: all of them, those of the experts, the ones one
    token uses (all but the experts, plus top_k of each layer's), and the largest expert tensor
    (one layer's fused experts: what the weight push gathers at once)."""

    total: int
    experts: int
    active: int
    largest_expert_tensor: int
    num_experts: int
    top_k: int

    def describe(self) -> str:
        return (
            f"mixture of experts: {self.total / 1e6:,.1f}M parameters, {self.active / 1e6:,.1f}M "
            f"active per token ({self.num_experts} experts per layer, {self.top_k} per token); "
            f"experts {self.experts / self.total:.0%} of the weights, the largest fused expert "
            f"tensor {self.largest_expert_tensor * 4 / 2**20:,.1f} MiB in fp32 (one push bucket "
            "holds it whole)"
        )


def moe_sizes(model) -> MoeSizes | None:
    """`MoeSizes` of a model (its parameters may live on the meta device), None when dense."""
    config = model.config
    num_experts = getattr(config, "num_experts", None) or getattr(config, "num_local_experts", 0)
    top_k = getattr(config, "num_experts_per_tok", 0)
    if not num_experts or not top_k:
        return None
    total = experts = largest = 0
    for name, param in model.named_parameters():
        total += param.numel()
        if ".experts." in name:
            experts += param.numel()
            largest = max(largest, param.numel())
    active = total - experts + experts * top_k // num_experts
    return MoeSizes(total, experts, active, largest, int(num_experts), int(top_k))


def lora_params(model, rank: int, target_modules="all-linear", experts: bool = False) -> int:
    """The adapter parameters `model.lora` adds to `model` (its weights may be on the meta
    device): rank x (in + out) per targeted linear layer (`all-linear`: every one but the LM
    head; a mixture of experts' routers are not linear layers), and with `experts` rank x experts
    x (2 hidden + 3 expert width) per MoE layer (A and B of the fused gate/up and down tensors).
    `model` may already carry its adapters (peft)."""
    import torch

    from mua.models.moe_replay import routers

    names = None if target_modules == "all-linear" else set(target_modules)
    count = 0
    for name, module in model.named_modules():
        if ".lora_" in name:  # a model with its adapters already: count the wrapped layers
            continue
        leaf = name.removesuffix(".base_layer").rsplit(".", 1)[-1]
        if not isinstance(module, torch.nn.Linear) or leaf == "lm_head":
            continue
        if names is None or leaf in names:
            count += rank * (module.in_features + module.out_features)
    if experts:
        config = model.config
        width = getattr(config, "moe_intermediate_size", None) or config.intermediate_size
        num_experts = getattr(config, "num_experts", None) or config.num_local_experts
        per_layer = rank * num_experts * (2 * config.hidden_size + 3 * width)
        count += per_layer * len(routers(model))
    return count


def _count_params(config, head_dim: int) -> int:
    h, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    inter = getattr(config, "intermediate_size", 4 * h)
    attention = h * head_dim * (heads + 2 * kv) + heads * head_dim * h
    per_layer = attention + 3 * h * inter + 2 * h
    embeddings = config.vocab_size * h * (1 if getattr(config, "tie_word_embeddings", False) else 2)
    return layers * per_layer + embeddings + h


# the engine's memory setting when no engine named one (the recipe's comes from its spec)
UNNAMED_SETTING = "the engine's GPU memory share"


@dataclass
class RunShape:
    """What the recipe asks for, per GPU."""

    world_size: int = 1
    micro_batch_tokens: int = 8192
    train_dtype: str = "bfloat16"  # compute dtype; fp32 master weights are kept either way
    activation_checkpointing: bool = False
    cpu_offload: bool = False
    reference_model: bool = False  # KL against a frozen copy
    engine: str = "server"
    # "fraction": the engine reserves `engine_mem_fraction` of the GPU (named by the recipe's
    # `engine_setting`, from the engine's `memory_share`); "copy": a copy of the weights plus one
    # trajectory's KV cache
    engine_memory: Literal["fraction", "copy"] = "fraction"
    engine_mem_fraction: float = 0.5
    engine_setting: str = UNNAMED_SETTING
    engine_kv_fix: str = UNNAMED_SETTING
    engine_tp_size: int = 1
    engine_dtype: str = "bfloat16"
    max_total_tokens: int = 4096  # one trajectory


@dataclass
class MemoryEstimate:
    gpu_bytes: int
    rollout_rows: list[tuple[str, int]] = field(default_factory=list)
    train_rows: list[tuple[str, int]] = field(default_factory=list)
    kv_budget_bytes: int = 0
    kv_bytes_per_token: int = 0
    max_total_tokens: int = 0
    engine_setting: str = UNNAMED_SETTING
    engine_kv_fix: str = UNNAMED_SETTING

    @property
    def rollout_bytes(self) -> int:
        return sum(b for _, b in self.rollout_rows)

    @property
    def train_bytes(self) -> int:
        return sum(b for _, b in self.train_rows)

    @property
    def kv_tokens(self) -> int:
        return max(0, self.kv_budget_bytes) // max(1, self.kv_bytes_per_token)

    def problems(self) -> list[str]:
        out = []
        gib = self.gpu_bytes / GIB
        if self.train_bytes > self.gpu_bytes:
            out.append(
                f"the train phase needs {self.train_bytes / GIB:.1f} GiB per GPU of {gib:.1f}: "
                "lower parallel.micro_batch_tokens, set parallel.activation_checkpointing=true, "
                "use more GPUs, or parallel.cpu_offload=true"
            )
        if self.rollout_bytes > self.gpu_bytes:
            out.append(
                f"the rollout phase needs {self.rollout_bytes / GIB:.1f} GiB per GPU of {gib:.1f}: "
                f"lower {self.engine_setting} or set parallel.cpu_offload=true"
            )
        if self.kv_tokens < self.max_total_tokens:
            out.append(
                f"the engine's KV cache holds {self.kv_tokens} tokens, less than one trajectory "
                f"(rollout.max_total_tokens={self.max_total_tokens}): raise "
                f"{self.engine_kv_fix}"
            )
        return out


def estimate_memory(model: ModelShape, run: RunShape, gpu_bytes: int) -> MemoryEstimate:
    """Per-GPU bytes of each component in the rollout and train phases."""
    n, world = model.num_params, max(1, run.world_size)
    on_gpu = 0 if run.cpu_offload else 1
    compute_bytes = DTYPE_BYTES[run.train_dtype]
    trained = n if model.trainable is None else model.trainable  # LoRA: the adapters only
    master = on_gpu * n * 4 // world  # fp32 sharded parameters (a frozen LoRA base too)
    optimizer = on_gpu * trained * 8 // world  # AdamW exp_avg + exp_avg_sq in fp32
    grads = on_gpu * trained * 4 // world
    gathered = 2 * n * compute_bytes // model.num_layers  # the block in use + the one prefetched
    reference = n * compute_bytes // world if run.reference_model else 0
    tokens = run.micro_batch_tokens
    per_layer_act = tokens * model.hidden_size * ACTIVATION_BYTES_PER_HIDDEN
    if run.activation_checkpointing:  # block inputs kept, one block recomputed at a time
        activations = tokens * model.hidden_size * compute_bytes * model.num_layers + per_layer_act
    else:
        activations = per_layer_act * model.num_layers
    head = head_scoring_bytes(model, tokens, compute_bytes)
    push_gather = 4 * model.moe.largest_expert_tensor if model.moe else 0

    engine_weights = n * DTYPE_BYTES[run.engine_dtype] // max(1, run.engine_tp_size)
    kv_per_token = (
        2 * model.num_layers * model.num_kv_heads * model.head_dim * DTYPE_BYTES[run.engine_dtype]
    )
    kv_per_token //= max(1, run.engine_tp_size)
    if run.engine_memory == "fraction":
        engine_share = int(run.engine_mem_fraction * gpu_bytes)
    else:  # a model copy plus the cache of one trajectory (the hf engine)
        engine_share = engine_weights + kv_per_token * run.max_total_tokens

    est = MemoryEstimate(
        gpu_bytes=gpu_bytes,
        kv_budget_bytes=engine_share - engine_weights,
        kv_bytes_per_token=kv_per_token,
        max_total_tokens=run.max_total_tokens,
        engine_setting=run.engine_setting,
        engine_kv_fix=run.engine_kv_fix,
    )
    of = "" if model.trainable is None else f", {trained / 1e6:,.2f}M LoRA parameters"
    est.rollout_rows = [
        ("trainer weights (fp32, sharded)", master),
        (f"optimizer state (AdamW, sharded{of})", optimizer),
        ("reference model (sharded)", reference),
        (f"engine ({run.engine}): weights + KV cache", engine_share),
        ("CUDA context and fragmentation", CUDA_OVERHEAD_BYTES),
    ]
    est.train_rows = [
        ("trainer weights (fp32, sharded)", master),
        (f"optimizer state (AdamW, sharded{of})", optimizer),
        (f"gradients (fp32, sharded{of})", grads),
        ("gathered layers (compute dtype)", gathered),
        ("reference model (sharded)", reference),
        (f"activations ({tokens} tokens/micro-batch)", activations),
        ("log-probs through the LM head in chunks", head),
        ("weight push: one layer's fused experts gathered (fp32)", push_gather),
        ("released engine", ENGINE_ASLEEP_BYTES),
        ("CUDA context and fragmentation", CUDA_OVERHEAD_BYTES),
    ]
    return est


IMPORT_BYTES = GIB // 4  # a rank's Python with torch, transformers and mua imported (measured)


def cpu_rank_bytes(est: MemoryEstimate, run: RunShape) -> int:
    """Peak bytes of one CPU rank: the train phase without what only a GPU holds (the CUDA
    context, a released engine), plus the hf engine's own copy of the weights and its cache,
    which stay resident on CPU (no sleep), plus the process's imports."""
    gpu_only = ("released engine", "CUDA context and fragmentation")
    train = sum(b for name, b in est.train_rows if name not in gpu_only)
    engine = dict(est.rollout_rows).get(f"engine ({run.engine}): weights + KV cache", 0)
    return train + engine + IMPORT_BYTES


def head_scoring_bytes(model: ModelShape, tokens: int, compute_bytes: int) -> int:
    """What the scored tokens' log-probs and entropies hold (`mua.train.head_scores`): the
    hidden states they are computed from (every token of the micro-batch at most), the LM head's
    gradient (summed over chunks in fp32, plus one chunk's in the compute dtype), and up to six
    fp32 [chunk, V] buffers of one chunk in the backward (with an entropy bonus). Never
    [tokens, V]: that would be tokens x V x 4 bytes per tensor."""
    from mua.train.head_scores import CHUNK_BYTES

    hidden = tokens * model.hidden_size * compute_bytes
    head_grad = model.vocab_size * model.hidden_size * (4 + compute_bytes)
    return hidden + head_grad + 6 * CHUNK_BYTES


def format_table(est: MemoryEstimate) -> str:
    """A plain-text table of both phases, the KV budget and the verdict."""
    lines = [f"{'component':<52}{'GiB/GPU':>10}"]
    for title, rows, total in (
        ("rollout phase", est.rollout_rows, est.rollout_bytes),
        ("train phase", est.train_rows, est.train_bytes),
    ):
        lines.append(f"-- {title}")
        lines += [f"  {name:<50}{b / GIB:>10.2f}" for name, b in rows if b]
        lines.append(f"  {'total':<50}{total / GIB:>10.2f}")
    lines.append(
        f"-- GPU memory {est.gpu_bytes / GIB:.2f} GiB; engine KV budget "
        f"{max(0, est.kv_budget_bytes) / GIB:.2f} GiB = {est.kv_tokens} tokens "
        f"({est.kv_bytes_per_token} bytes/token)"
    )
    problems = est.problems()
    lines.append("fits" if not problems else "does not fit: " + "; ".join(problems))
    return "\n".join(lines)


def check_fits(est: MemoryEstimate) -> None:
    problems = est.problems()
    if problems:
        raise RunFailure(
            "not enough GPU memory: "
            + problems[0]
            + (
                f" (and {len(problems) - 1} more; see the memory table)"
                if len(problems) > 1
                else ""
            )
        )


def run_shape_from_recipe(recipe, world_size: int) -> RunShape:
    """The RunShape of a TrainRecipe (its parallel, rollout, algo and model sections); the
    engine's share, and the settings that hold it, come from its spec's `memory_share`."""
    from mua.engines.registry import engine_memory_share

    kl = getattr(getattr(recipe.algo, "kl", None), "coef", 0.0) or 0.0
    mixed = recipe.parallel.mixed_precision
    train_dtype = "float32" if mixed == "fp32" else "bfloat16"
    share = engine_memory_share(recipe.rollout.engine, recipe.rollout)
    engine = (
        dict(engine_memory="copy")
        if share is None
        else dict(
            engine_memory="fraction",
            engine_mem_fraction=share.fraction,
            engine_setting=share.setting,
            engine_kv_fix=share.kv_fix or share.setting,
            engine_tp_size=share.tp_size,
            engine_dtype=share.dtype,
        )
    )
    return RunShape(
        world_size=world_size,
        micro_batch_tokens=recipe.parallel.micro_batch_tokens,
        train_dtype=train_dtype,
        activation_checkpointing=recipe.parallel.activation_checkpointing,
        cpu_offload=recipe.parallel.cpu_offload,
        reference_model=kl > 0,
        engine=recipe.rollout.engine,
        **engine,
        max_total_tokens=recipe.rollout.max_total_tokens,
    )
