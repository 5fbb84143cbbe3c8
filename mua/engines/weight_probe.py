"""The probe of pushed weights: does the engine sample with the trainer's weights?

`probe_logprob_diff` has the engine greedily continue a fixed prompt and compares the log-probs it
reports with the trainer model's log-probs of the same tokens; `check_probe` raises `RunFailure`
beyond a tolerance, so a stale or corrupted engine never trains silently. Any engine whose
weights travel to another process can use it (`ColocatedEngine.probe_ids`).
Not here: the push itself (each engine's folder).
"""

from __future__ import annotations

import itertools
import uuid

from mua.errors import RunFailure

DEFAULT_PROBE_TOLERANCE = 0.05


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
