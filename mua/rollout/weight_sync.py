"""Moving trainer weights into rollout engines: buckets, wire encodings, a disk path, a probe check.

- `iter_buckets` gathers full tensors one at a time from an iterator of (name, tensor) (a sharded
  DTensor is gathered with `full_tensor()`) and groups them into buckets of at most `bucket_mb`,
  so at most one bucket of full tensors exists at once: never a full-model copy.
- Tensor path encodings: `encode_portable` (base64 safetensors bytes, load_format
  `mua_safetensors`; works across processes and machines, what `mua serve` reads) and
  `encode_sglang` (SGLang's own form: a base64 pickle of [(name, tensor)] per tensor-parallel rank,
  tensors shared by handle, so only valid on the same host as the server, on GPU in practice).
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
import json
import os
import tempfile
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


# ---- tensor-path encodings ------------------------------------------------------------------


def encode_portable(bucket: Bucket) -> str:
    """Base64 of the safetensors serialization of the bucket (CPU copies, contiguous)."""
    from safetensors.torch import save

    tensors = {name: t.to("cpu").contiguous() for name, t in bucket}
    return base64.b64encode(save(tensors)).decode("ascii")


def decode_portable(payload: str) -> Bucket:
    from safetensors.torch import load

    try:
        tensors = load(base64.b64decode(payload, validate=True))
    except Exception as err:  # corrupted payload: report it as a protocol error
        raise ValueError(f"tensor payload is not base64 safetensors: {err}") from err
    return list(tensors.items())


def encode_sglang(bucket: Bucket) -> str:
    """SGLang's `MultiprocessingSerializer` form: base64 of a ForkingPickler dump of the list.

    Tensors travel as shared-memory/CUDA-IPC handles, so the receiving server must run on the
    same host and the tensors must stay alive until it answers.
    """
    import io
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401  (registers torch's tensor reductions)

    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(list(bucket))
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def tensor_push_body(
    payload: str, *, load_format: str | None, tp_size: int, flush_cache: bool
) -> dict:
    """The `/update_weights_from_tensor` body: one payload per tensor-parallel rank."""
    return {
        "serialized_named_tensors": [payload] * max(1, int(tp_size)),
        "load_format": load_format,
        "flush_cache": bool(flush_cache),
    }


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


async def probe_logprob_diff(engine, model, prompt_ids: list[int], num_tokens: int = 8) -> float:
    """Mean |engine log-prob - trainer log-prob| over a greedy continuation of `prompt_ids`."""
    from mua.rollout.engine import GenerationRequest, SamplingParams

    request = GenerationRequest(
        prompt_ids=list(prompt_ids),
        request_id="mua-weight-probe",
        sampling=SamplingParams(temperature=0.0, max_new_tokens=num_tokens, seed=0),
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
