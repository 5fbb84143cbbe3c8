"""What differs between SGLang releases, in the parts of the protocol mua uses (docs/sglang_releases.md).

One table, read by both sides: the client adapts to the `version` a server reports in
`/get_server_info`, and `mua serve --sglang-release X` accepts and refuses what release X does
(memory tags, idle release, `sampling_seed`, duplicate rids, weight sessions, `weight_version`,
pause/continue, LoRA from tensors, routed experts). The contract tests under tests/contract check it against
each covered release's own code. Not here: the HTTP shapes (`protocol`), acting on these facts.
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
    routed_experts: bool = False  # GenerateReqInput.return_routed_experts

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
            routed_experts=key >= (0, 5, 23, 0),  # the covered release that has them
        )


def is_covered(version: str | None) -> bool:
    return version is not None and version in COVERED_RELEASES
