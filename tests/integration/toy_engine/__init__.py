"""A rollout engine defined in the test suite, to show that adding an engine is a folder plus one
registry line: registered through `MUA_ENGINES=toy=tests.integration.toy_engine:build`.

`ToyEngine` samples one token per full forward of the whole sequence (no KV cache, no batching),
with log_softmax(logits / T) of each sampled token, as the contract asks. `ToyColocated` is how
the trainer drives it: nothing to wake or release, full weights copied in process right after
each update. Every call the trainer makes is appended, as one JSON line, to the file that
`TOY_ENGINE_LOG` names (one per rank), so a test can tell that this engine ran the rollouts.
No adapters, no top-k/top-p (the test recipe uses neither).
"""

from __future__ import annotations

import json
import os

import torch

from mua.engines.engine_contract import ColocatedEngine, GenerationRequest, GenerationResult
from mua.engines.weight_buckets import full_tensor


class ToyEngine:
    def __init__(self, model):
        self.model = model.eval().requires_grad_(False)
        self.weight_version: str | None = None

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        sampling = request.sampling
        if sampling.top_k or sampling.top_p < 1.0:
            raise ValueError("the toy engine samples without top-k/top-p")
        generator = torch.Generator().manual_seed(sampling.seed or 0)
        ids, tokens, logprobs = list(request.prompt_ids), [], []
        finish = "length"
        with torch.no_grad():
            for _ in range(sampling.max_new_tokens):
                logits = self.model(input_ids=torch.tensor([ids + tokens])).logits[0, -1].float()
                temperature = sampling.temperature if sampling.temperature > 0 else 1.0
                logp = torch.log_softmax(logits / temperature, dim=-1)
                if sampling.temperature > 0:
                    token = int(torch.multinomial(logp.exp(), 1, generator=generator))
                else:
                    token = int(logp.argmax())
                tokens.append(token)
                logprobs.append(float(logp[token]))
                if token in sampling.stop_token_ids:
                    finish = "stop"
                    break
        meta = {"weight_version": self.weight_version} if self.weight_version else {}
        _log("generate", tokens=len(tokens))
        return GenerationResult(tokens, logprobs, finish, meta)

    async def close(self) -> None:
        _log("close")


class ToyColocated(ColocatedEngine):
    push_on_update = True

    def __init__(self, engine: ToyEngine):
        self.engine = engine

    async def begin_use(self, push) -> None:
        _log("begin", stale=push is not None)
        if push is not None:
            await push()

    async def end_use(self, keep_base: bool) -> bool:
        _log("end")
        return False

    async def push_full(self, named_tensors, version: str) -> None:
        params = dict(self.engine.model.named_parameters())
        copied = 0
        for name, tensor in named_tensors:
            params[name].data.copy_(full_tensor(tensor))
            copied += 1
        self.engine.weight_version = version
        _log("push", version=version, tensors=copied)

    async def push_adapter(self, name, named_tensors, config, version) -> None:
        raise NotImplementedError("the toy engine takes full weights only")


def build(rollout, model_cfg, parallel, dist, policy, tokenizer) -> ToyColocated:
    from mua.models import load_model

    _log("build", engine=rollout.engine)
    return ToyColocated(ToyEngine(load_model(model_cfg.path, dtype="float32", seed=0)))


def _log(event: str, **fields) -> None:
    path = os.environ.get("TOY_ENGINE_LOG")
    if path:
        rank = os.environ.get("RANK", "0")
        with open(f"{path}.{rank}", "a") as out:
            out.write(json.dumps({"event": event, **fields}) + "\n")
