"""Moving trainer weights into rollout engines: buckets, wire encodings, a disk path, a probe check.

- `iter_buckets` gathers full tensors one at a time from an iterator of (name, tensor) (a sharded
  DTensor is gathered with `full_tensor()`) and groups them into buckets of at most `bucket_mb`,
  so at most one bucket of full tensors exists at once: never a full-model copy.
- Tensor path: `encode_tensors` is SGLang's `MultiprocessingSerializer` form (base64 pickle of
  [(name, tensor)]: CUDA tensors by CUDA-IPC handle, same host only; CPU tensors inline);
  `tensor_push_body` serializes it once per tensor-parallel rank.
  `decode_tensors` is the receiving side `mua serve` uses. Every server gets this one encoding.
- Disk path: `write_shards` writes each bucket as one safetensors shard (plus an index) into a
  folder, by default in shared memory, for `/update_weights_from_disk`; `read_shards` is the reverse.
- Probe: `probe_logprob_diff` has the engine greedily continue a fixed prompt and compares the
  log-probs it reports with the trainer model's log-probs of the same tokens; `check_probe` raises
  `RunFailure` beyond a tolerance, so a stale or corrupted engine never trains silently.

Not here: NCCL broadcast of weights (SGLang's update_weights_from_distributed), resharding for
tensor parallelism (SGLang's loader does that from full tensors), HTTP (see sglang_engine).
"""

from __future__ import annotations

import base64
import importlib
import itertools
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mua.errors import RunFailure

Bucket = list[tuple[str, Any]]
SHARD_INDEX = "model.safetensors.index.json"
DEFAULT_PROBE_TOLERANCE = 0.05


def full_tensor(tensor):
    """The whole tensor on this rank: gathers a DTensor, detaches anything else."""
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach()


def iter_buckets(named_tensors: Iterable[tuple[str, Any]], bucket_mb: float) -> Iterator[Bucket]:
    """Yield lists of (name, full tensor) whose sizes add up to at most `bucket_mb` MiB.

    A single tensor larger than the limit forms a bucket of its own. Tensors are gathered lazily,
    as the bucket they belong to is filled.
    """
    if bucket_mb <= 0:
        raise ValueError("bucket_mb must be positive")
    limit_bytes = int(bucket_mb * 1024 * 1024)
    bucket: Bucket = []
    size_bytes = 0
    for name, tensor in named_tensors:
        tensor = full_tensor(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size_bytes + nbytes > limit_bytes:
            yield bucket
            bucket, size_bytes = [], 0
        bucket.append((name, tensor))
        size_bytes += nbytes
    if bucket:
        yield bucket


def bucket_bytes(bucket: Bucket) -> int:
    return sum(t.numel() * t.element_size() for _, t in bucket)


# ---- tensor-path encoding -------------------------------------------------------------------


def _cuda_reductions_patched() -> None:
    """Apply SGLang's CUDA-IPC reductions (device by UUID, so a server that sees the GPUs under
    other indices maps them right); imported from the installed release, whose location moved."""
    for name in ("sglang.srt.utils.patch_torch", "sglang.srt.patch_torch"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.monkey_patch_torch_reductions()
        return
    raise RunFailure(
        "pushing CUDA tensors to SGLang needs sglang installed in the trainer's environment "
        "(its monkey_patch_torch_reductions); install mua[gpu] or use rollout.sglang.weight_path=disk"
    )


def encode_tensors(bucket: Bucket, as_dict: bool = False) -> str:
    """One `serialized_named_tensors` entry, in SGLang's `MultiprocessingSerializer` form: base64
    of a pickle of [(name, tensor)] (`as_dict`: {name: tensor}, the form of a LoRA adapter
    push) that its deserializer (and its safe unpickler) loads.

    CUDA tensors travel as CUDA-IPC handles (ForkingPickler with SGLang's device-UUID
    reductions): same host, and the tensors must stay alive until the server has answered. CPU
    tensors travel inline, their bytes in the payload (the standard pickle of a tensor). Sharing
    them by handle does not work here: torch's default file-descriptor sharing hands the receiver
    a connection back to this process that only a child of it may open (SGLang's scheduler is no
    child of the trainer), and its file-system sharing starts a shared-memory manager daemon that
    outlives the trainer, holding its output open while the server runs.
    """
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    pairs = [(name, tensor.detach()) for name, tensor in bucket]
    on_cuda = [t.is_cuda for _, t in pairs]
    buffer = io.BytesIO()
    if any(on_cuda):
        if not all(on_cuda):
            raise ValueError("a tensor bucket must be all on CUDA or all on CPU")
        _cuda_reductions_patched()
        ForkingPickler(buffer).dump(dict(pairs) if as_dict else pairs)
    else:
        pairs = [(name, t.contiguous()) for name, t in pairs]
        pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(
            dict(pairs) if as_dict else pairs
        )
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def tensor_push_body(
    bucket: Bucket, *, tp_size: int, flush_cache: bool, weight_version: str | None = None
) -> dict:
    """The `/update_weights_from_tensor` body: one payload per tensor-parallel rank, each
    serialized on its own (every TP worker opens and refcounts its own handles; one blob shared
    by all of them breaks CUDA-IPC refcounting). `weight_version`, when given, becomes the
    server's version once the push succeeded (SGLang >= 0.5.1; older releases have no field)."""
    body = {
        "serialized_named_tensors": [encode_tensors(bucket) for _ in range(max(1, int(tp_size)))],
        "load_format": None,
        "flush_cache": bool(flush_cache),
    }
    if weight_version is not None:
        body["weight_version"] = str(weight_version)
    return body


def is_cuda_bucket(bucket: Bucket) -> bool:
    """Whether a bucket's tensors travel as CUDA-IPC handles (see `encode_tensors`)."""
    return any(getattr(t, "is_cuda", False) for _, t in bucket)


# Globals a tensor payload may name: torch's rebuild functions, storages, dtypes and sizes. What
# SGLang's own safe unpickler allows for these payloads; anything else is refused.
_PAYLOAD_GLOBALS = {
    ("torch.multiprocessing.reductions", name)
    for name in (
        "rebuild_tensor",
        "rebuild_typed_storage",
        "rebuild_storage_filename",
        "rebuild_storage_fd",
        "rebuild_storage_empty",
        "rebuild_cuda_tensor",
    )
} | {
    ("torch", "Tensor"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch", "UntypedStorage"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch.nn.parameter", "Parameter"),
    ("multiprocessing.resource_sharer", "DupFd"),
    ("builtins", "list"),
    ("builtins", "tuple"),
    ("collections", "OrderedDict"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._tensor", "_rebuild_from_type_v2"),
}


def decode_tensors(payload: str, as_dict: bool = False) -> Bucket:
    """The server side of `encode_tensors` (what `mua serve` does with a push): a restricted
    unpickle that only rebuilds tensors (as SGLang's safe unpickler), then copies them.
    `as_dict`: the payload holds {name: tensor} (a LoRA adapter push); pairs come back."""
    import io
    import pickle

    import torch

    def load_storage(data: bytes):  # torch's own storage bytes, loaded without running code
        return torch.load(io.BytesIO(data), weights_only=True)

    class TensorUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str):
            if (module, name) == ("torch.storage", "_load_from_bytes"):
                return load_storage
            value = getattr(torch, name, None) if module == "torch" else None
            if (module, name) in _PAYLOAD_GLOBALS or isinstance(value, torch.dtype):
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"a tensor payload may not name {module}.{name}")

    try:
        raw = base64.b64decode(payload, validate=True)
        pairs = TensorUnpickler(io.BytesIO(raw)).load()
    except Exception as err:
        raise ValueError(
            f"serialized_named_tensors entry is not a serialized tensor list: {err}"
        ) from err
    if as_dict:
        if not isinstance(pairs, dict) or not all(
            isinstance(t, torch.Tensor) for t in pairs.values()
        ):
            raise ValueError("serialized tensors of an adapter must hold a {name: tensor} dict")
        pairs = list(pairs.items())
    if not isinstance(pairs, list) or not all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[1], torch.Tensor) for p in pairs
    ):
        raise ValueError("serialized_named_tensors entry must hold a list of (name, tensor)")
    return [(str(name), tensor.clone()) for name, tensor in pairs]


# ---- disk path ------------------------------------------------------------------------------


def default_shm_root() -> Path:
    """/dev/shm when it exists (RAM-backed, no disk I/O), else the temp folder."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def new_weights_dir(root: str | Path | None = None) -> Path:
    base = Path(root) if root else default_shm_root()
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="mua-weights-", dir=base))


def write_shards(
    named_tensors: Iterable[tuple[str, Any]],
    folder: str | Path,
    bucket_mb: float,
    hf_config: Any = None,
) -> list[Path]:
    """Write the weights bucket by bucket as safetensors shards plus an HF-style index.

    `hf_config` (a transformers config) is saved as config.json when given, which loaders that
    expect a full model folder need. Returns the shard paths.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shards: list[Path] = []
    weight_map: dict[str, str] = {}
    for index, bucket in enumerate(iter_buckets(named_tensors, bucket_mb), start=1):
        path = folder / f"model-{index:05d}.safetensors"
        save_file(
            {n: t.to("cpu").contiguous() for n, t in bucket}, str(path), metadata={"format": "pt"}
        )
        shards.append(path)
        weight_map.update({name: path.name for name, _ in bucket})
    (folder / SHARD_INDEX).write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map}, indent=1)
    )
    if hf_config is not None:
        hf_config.to_json_file(str(folder / "config.json"))
    return shards


def read_shards(folder: str | Path) -> Iterator[Bucket]:
    """Yield the weights of every *.safetensors file in `folder`, one file (bucket) at a time."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"weights folder {folder} does not exist")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"weights folder {folder} holds no .safetensors files")
    for path in files:
        yield list(load_file(str(path)).items())


# ---- probe check ----------------------------------------------------------------------------


def default_probe_ids(vocab_size: int, length: int = 16) -> list[int]:
    """A fixed, model-independent prompt: spread-out ids below the vocabulary size."""
    return [(7 + 97 * i) % max(2, vocab_size - 1) + 1 for i in range(length)]


def trainer_logprobs(model, prompt_ids: list[int], token_ids: list[int]) -> list[float]:
    """log_softmax of the model's logits at each continuation token (teacher-forced).

    For a sharded (FSDP) model every rank must call this together, as for any forward.
    """
    import torch

    device = next(model.parameters()).device
    ids = torch.tensor(
        [list(prompt_ids) + list(token_ids)], dtype=torch.long, device=device
    )  # [1, T]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # [T, V]
    start = len(prompt_ids) - 1
    logp = torch.log_softmax(logits[start : start + len(token_ids)], dim=-1)  # [N, V]
    picked = logp[
        torch.arange(len(token_ids), device=device), torch.tensor(token_ids, device=device)
    ]
    return picked.tolist()


_PROBE_IDS = itertools.count()
_PROBE_PROCESS = uuid.uuid4().hex[:12]


def probe_request_id() -> str:
    """A rid no other rank or probe uses: several ranks probe one shared server at once, and
    SGLang refuses (>= 0.5.12) or overwrites (older) a second in-flight request with the same rid."""
    return f"mua-weight-probe-{_PROBE_PROCESS}-{next(_PROBE_IDS)}"


async def probe_logprob_diff(engine, model, prompt_ids: list[int], num_tokens: int = 8) -> float:
    """Mean |engine log-prob - trainer log-prob| over a greedy continuation of `prompt_ids`.

    Greedy and unseeded: the probe must not depend on a server honouring seeds."""
    from mua.engines.engine_contract import GenerationRequest, SamplingParams

    request = GenerationRequest(
        prompt_ids=list(prompt_ids),
        request_id=probe_request_id(),
        sampling=SamplingParams(temperature=0.0, max_new_tokens=num_tokens),
    )
    result = await engine.generate(request)
    if not result.token_ids:
        raise RunFailure("weight probe: the engine returned no tokens for the probe prompt")
    reference = trainer_logprobs(model, prompt_ids, result.token_ids)
    diffs = [abs(a - b) for a, b in zip(result.logprobs, reference, strict=True)]
    return sum(diffs) / len(diffs)


async def check_probe(
    engine,
    model,
    prompt_ids: list[int],
    tolerance: float = DEFAULT_PROBE_TOLERANCE,
    num_tokens: int = 8,
) -> float:
    """Probe the engine after a weight push; raise RunFailure when it disagrees with the trainer."""
    return check_probe_diff(
        await probe_logprob_diff(engine, model, prompt_ids, num_tokens), tolerance
    )


def check_probe_diff(diff: float, tolerance: float = DEFAULT_PROBE_TOLERANCE) -> float:
    """Return `diff`, or raise RunFailure when it is past `tolerance` (or NaN)."""
    if diff != diff or diff > tolerance:  # NaN counts as a failure
        raise RunFailure(
            f"weight sync check failed: the rollout engine's log-probs differ from the trainer's by "
            f"{diff:.4g} on average (tolerance {tolerance:g}); the engine holds stale or corrupted "
            "weights. Check the weight push (names, dtype) or raise rollout.sglang.probe_tolerance"
        )
    return diff
