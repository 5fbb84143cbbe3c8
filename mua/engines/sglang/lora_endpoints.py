"""SGLang's LoRA endpoints as mua uses them for `rollout.lora_sync: adapter`.

The base stays resident; after each update only the adapter travels, to
`/load_lora_adapter_from_tensors` (config dict and tensors under peft's file names, in the
release's payload field; docs/sglang_releases.md), and `/generate` names the live one in
`lora_path`. Releases before 0.5.8 are refused before the run starts (`colocated.check_launch`); a
launched server gets `--enable-lora` with room for the adapter (`launch_args`).
Not here: the HTTP calls (`sglang_engine`), the server side (`mua.serve`).
"""

from __future__ import annotations

from typing import Any

from mua.engines import weight_buckets
from mua.engines.sglang import weight_sync
from mua.engines.sglang.releases import ReleaseTraits
from mua.errors import UsageError

LOAD_PATH = "/load_lora_adapter_from_tensors"
UNLOAD_PATH = "/unload_lora_adapter"


def load_body(
    name: str,
    named_tensors: weight_buckets.Bucket,
    config: dict,
    traits: ReleaseTraits,
    tp_size: int,
) -> dict[str, Any]:
    """The `/load_lora_adapter_from_tensors` body for the server's release."""
    body: dict[str, Any] = {"lora_name": name, "config_dict": config, "pinned": False}
    if traits.lora_per_rank_payloads:
        body["serialized_named_tensors"] = [
            weight_sync.encode_tensors(named_tensors, as_dict=True)
            for _ in range(max(1, int(tp_size)))
        ]
    else:
        body["serialized_tensors"] = weight_sync.encode_tensors(named_tensors, as_dict=True)
    return body


def payload_of(body: dict) -> str:
    """The payload a server of rank 0 reads from a load body (either release's form)."""
    per_rank = body.get("serialized_named_tensors")
    if isinstance(per_rank, list) and per_rank:
        return per_rank[0]
    single = body.get("serialized_tensors")
    if isinstance(single, str) and single:
        return single
    raise ValueError("load_lora_adapter_from_tensors needs serialized tensors")


def unload_body(name: str) -> dict[str, Any]:
    return {"lora_name": name}


def launch_args(lora_cfg) -> list[str]:
    """The launch flags a server needs to take pushed adapters of `model.lora`'s shape."""
    target = lora_cfg.target_modules
    modules = ["all"] if isinstance(target, str) else list(target)
    return [
        "--enable-lora",
        "--max-lora-rank",
        str(int(lora_cfg.rank)),
        "--lora-target-modules",
        *modules,
    ]


def refuse_release(version: str | None, where: str) -> None:
    """UsageError (one line) when SGLang `version` cannot take an adapter push."""
    if not ReleaseTraits.of(version).lora_tensors:
        raise UsageError(
            f"rollout.lora_sync=adapter needs SGLang >= 0.5.8 (/load_lora_adapter_from_tensors); "
            f"{where} runs {version}; upgrade SGLang or set rollout.lora_sync=merged"
        )
