"""What differs between SGLang releases, in the parts of the protocol mua uses.

One table, read by both sides: the client (`mua.engines.sglang.sglang_engine`) adapts to the release a
server reports in `/get_server_info` (`version`), and `mua serve --sglang-release X` accepts and
refuses what release X accepts and refuses. The facts come from reading each release's code
(tokenizer manager, scheduler, sampling params, HTTP server); the contract tests under
tests/contract run the covered releases' own classes on what mua sends.

  memory tags           0.4.x: weights, kv_cache; 0.5.x adds cuda_graph. A release without tags
                        releases all of them; resuming a tag that is not released kills 0.5.x's
                        scheduler (`offload_tags.remove`) and 0.4.x's (`stashed_model_static_state`).
  idle release          0.5.x asserts the scheduler has no request when memory is released.
  sampling_seed         a SamplingParams argument from 0.5.3 (a TypeError before), honoured only
                        when the server runs with --enable-deterministic-inference.
  duplicate rid         from 0.5.12 a second in-flight request with the same rid is refused (400);
                        before, it overwrote the first one's state (that request never finished).
  weight sessions       from 0.5.21 /update_weights_from_tensor is refused (400) outside
                        /begin_weight_update ... /end_weight_update.
  weight_version        from 0.5.1 every weight-update request takes a `weight_version` string;
                        the server's version (`/get_model_info`, each /generate's meta_info)
                        changes only when a successful push carries one, else stays "default".
                        0.4.x has no weight_version at all.
  pause / continue      /pause_generation, /continue_generation and /abort_request ({rid} or
                        {abort_all}) in every covered release. 0.4.9 and 0.5.5 take no body: a
                        pause aborts what runs and holds new requests until continue. 0.5.23
                        takes PauseGenerationReqInput {mode: abort | retract | in_place}
                        (abort by default) and ContinueGenerationReqInput.
  LoRA from tensors     from 0.5.8 /load_lora_adapter_from_tensors (and /unload_lora_adapter, older)
                        load an adapter pushed as tensors; through 0.5.16 one payload in
                        `serialized_tensors`, from 0.5.17 one per TP rank in
                        `serialized_named_tensors`. /generate names it in `lora_path`.

Not here: the HTTP shapes (`mua.engines.sglang.protocol`), how the client or server act on these facts.
"""

from __future__ import annotations

from dataclasses import dataclass

# The releases the contract tests install and check (oldest, middle, newest). pyproject's `gpu`
# extra and `mua doctor` read this tuple.
COVERED_RELEASES = ("0.4.9.post6", "0.5.5.post3", "0.5.23")
NEWEST_COVERED = COVERED_RELEASES[-1]
DEFAULT_WEIGHT_VERSION = "default"  # SGLang's ServerArgs.weight_version before any versioned push

TAG_WEIGHTS, TAG_KV_CACHE, TAG_CUDA_GRAPH = "weights", "kv_cache", "cuda_graph"


def release_key(version: str) -> tuple[int, ...]:
    """(major, minor, patch, post) of a release string such as "0.5.5.post3" or "0.5.23"."""
    main, _, post = str(version).strip().lstrip("v").partition(".post")
    parts = []
    for piece in main.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    parts += [0] * (3 - len(parts))
    parts.append(int(post) if post.isdigit() else 0)
    return tuple(parts)


@dataclass(frozen=True)
class ReleaseTraits:
    """The protocol facts of one SGLang release (see the module docstring)."""

    version: str
    memory_tags: tuple[str, ...]
    release_needs_idle: bool
    sampling_seed: bool
    rejects_duplicate_rid: bool
    weight_sessions: bool
    weight_version: bool
    pause_modes: bool = False
    lora_tensors: bool = False
    lora_per_rank_payloads: bool = False

    @classmethod
    def of(cls, version: str | None) -> ReleaseTraits:
        """The traits of `version`; an unknown or missing version counts as the newest covered."""
        key = release_key(version or NEWEST_COVERED)
        if key < (0, 4, 9, 0):
            key = release_key(NEWEST_COVERED)
        v05 = key >= (0, 5, 0, 0)
        return cls(
            version=str(version or NEWEST_COVERED),
            memory_tags=(TAG_KV_CACHE, TAG_WEIGHTS, TAG_CUDA_GRAPH)
            if v05
            else (TAG_KV_CACHE, TAG_WEIGHTS),
            release_needs_idle=v05,
            sampling_seed=key >= (0, 5, 3, 0),
            rejects_duplicate_rid=key >= (0, 5, 12, 0),
            weight_sessions=key >= (0, 5, 21, 0),
            weight_version=key >= (0, 5, 1, 0),
            pause_modes=key >= (0, 5, 23, 0),  # the covered release that has them (see above)
            lora_tensors=key >= (0, 5, 8, 0),
            lora_per_rank_payloads=key >= (0, 5, 17, 0),
        )


def is_covered(version: str | None) -> bool:
    return version is not None and version in COVERED_RELEASES
