"""The scheduler process behind SGLang's real HTTP server in the contract tests (never imported by mua).

`real_sglang_server.py` starts a release's own `launch_server` (FastAPI app, TokenizerManager,
warm-up) and passes `run_standin_scheduler` where the release starts its scheduler process. This
process then does what SGLang's scheduler does at its sockets, on CPU:

- binds the scheduler's ZMQ sockets from the release's PortArgs and reports "ready" on the pipe;
- answers generate requests with the release's own output class (BatchTokenIDOutput) and finish
  reason classes: the tokens and log-probs come from the served model itself, a small HF causal
  LM loaded from `server_args.model_path` and run by transformers (greedy = top_k 1; otherwise a
  seeded draw after temperature/top-k/top-p; each token's log-prob is log_softmax(logits / T),
  T = 1 when greedy, as SGLang reports it);
- runs weight-update, memory release/resume and flush requests through the release's own
  scheduler-side methods (0.5.23: SchedulerWeightUpdaterManager; 0.5.5: the scheduler's
  update-weights mixin and TpModelWorker.update_weights_from_tensor), so the session rules, the
  idle assertion and the released-tag state are SGLang's. Pushed tensors are decoded by the
  release's MultiprocessingSerializer and loaded into the model only when every name and shape
  matches it; releasing the "weights" tag fills the weights with NaN (SGLang frees them), so
  generating after a wake without a push shows up as NaN log-probs.

What it does not do: batching, streaming, chunked prefill, KV cache reuse between requests,
tensor parallelism (rank 0's payload only), aborts of running requests (each request runs to its
end before the next message is read, so the server is always idle between messages).
"""

from __future__ import annotations

import importlib
import logging
import socket
import sys
import traceback
import types

import torch

log = logging.getLogger("standin_scheduler")


def _first(*candidates: tuple[str, str]):
    for module, name in candidates:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {candidates} in this release")


class _MemorySaver:
    """The memory saver the scheduler pauses/resumes tags on; pausing "weights" poisons them."""

    def __init__(self, runner: TinyModelRunner):
        self.runner = runner
        self.paused: set[str] = set()

    def pause(self, tag: str) -> None:
        if tag in self.paused:
            raise RuntimeError(f"memory tag {tag!r} paused twice")
        self.paused.add(tag)
        if tag == "weights":
            with torch.no_grad():
                for param in self.runner.model.parameters():
                    param.fill_(float("nan"))

    def resume(self, tag: str) -> None:
        if tag not in self.paused:
            raise RuntimeError(f"memory tag {tag!r} resumed without being paused")
        self.paused.discard(tag)

    def configure_subprocess(self):  # pragma: no cover - the adapter's interface
        import contextlib

        return contextlib.nullcontext()


class TinyModelRunner:
    """The model SGLang's model runner would hold, here a transformers model on CPU."""

    def __init__(self, model_path: str):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.eval()
        self.eos = self.model.config.eos_token_id
        self.loads = 0
        self.weight_updater = self  # 0.5.23 reaches load methods through runner.weight_updater

    # ---- weight loading (the runner half of the release's update path) ----------------------
    def update_weights_from_tensor(self, named_tensors, load_format=None):
        params = self.model.state_dict()  # tied weights under every name, as checkpoints have them
        problems = [n for n, _ in named_tensors if n not in params]
        problems += [
            f"{n}: shape {tuple(t.shape)} != {tuple(params[n].shape)}"
            for n, t in named_tensors
            if n in params and tuple(t.shape) != tuple(params[n].shape)
        ]
        if problems:
            return False, f"stand-in model runner refused the push: {problems[:5]}"
        with torch.no_grad():
            for name, tensor in named_tensors:
                params[name].copy_(tensor.to(params[name].dtype))
        self.loads += 1
        return True, "Success"

    def update_weights_from_disk(self, model_path, load_format=None, *args, **kwargs):
        from transformers import AutoModelForCausalLM

        loaded = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        return self.update_weights_from_tensor(list(loaded.named_parameters()))

    def begin_weight_update(self) -> None:
        pass

    def end_weight_update(self, *, run_post_load: bool) -> None:
        pass

    # ---- generation ------------------------------------------------------------------------
    @torch.no_grad()
    def generate(self, input_ids: list[int], params, seed: int) -> tuple[list[int], list, bool]:
        """(new token ids, their log-probs, stopped by a stop token)."""
        greedy = params.top_k == 1
        temperature = 1.0 if greedy else float(params.temperature)
        stop = set(params.stop_token_ids or ())
        if not getattr(params, "ignore_eos", False) and self.eos is not None:
            stop |= set(self.eos if isinstance(self.eos, list) else [self.eos])
        generator = torch.Generator().manual_seed(seed)
        ids, logps, cache = list(input_ids), [], None
        feed = torch.tensor([ids])
        for _ in range(int(params.max_new_tokens)):
            out = self.model(input_ids=feed, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits = out.logits[0, -1].float() / temperature
            logprobs = torch.log_softmax(logits, dim=-1)
            token = int(logits.argmax()) if greedy else _draw(logits, params, generator)
            ids.append(token)
            logps.append(float(logprobs[token]))
            if token in stop:
                return ids[len(input_ids) :], logps, True
            feed = torch.tensor([[token]])
        return ids[len(input_ids) :], logps, False


def _draw(logits: torch.Tensor, params, generator: torch.Generator) -> int:
    probs = torch.softmax(logits, dim=-1)
    if 0 < params.top_k < probs.numel():
        kth = torch.topk(probs, params.top_k).values[-1]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if params.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(ordered, 0) - ordered < params.top_p * ordered.sum()
        mask = torch.zeros_like(probs, dtype=torch.bool)
        mask[order[keep]] = True
        probs = torch.where(mask, probs, torch.zeros_like(probs))
    return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


class _Updater(types.SimpleNamespace):
    """`self` for the release's scheduler-side weight/memory methods: attributes set here, any
    other method looked up on the release's class and bound to this object."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return types.MethodType(getattr(self._cls, name), self)


def _updater(runner: TinyModelRunner, io_struct) -> _Updater:
    cls = _first(
        (
            "sglang.srt.managers.scheduler_components.weight_updater",
            "SchedulerWeightUpdaterManager",
        ),
        ("sglang.srt.managers.scheduler_update_weights_mixin", "SchedulerUpdateWeightsMixin"),
    )
    serializer = _first(
        ("sglang.srt.utils.common", "MultiprocessingSerializer"),
        ("sglang.srt.utils", "MultiprocessingSerializer"),
    )
    worker_cls = _first(("sglang.srt.managers.tp_worker", "TpModelWorker"))
    worker = types.SimpleNamespace(model_runner=runner, tp_rank=0)
    # 0.5.5: TpModelWorker.update_weights_from_tensor (deserializes payload [tp_rank], loads)
    if hasattr(worker_cls, "update_weights_from_tensor"):
        worker.update_weights_from_tensor = types.MethodType(
            worker_cls.update_weights_from_tensor, worker
        )
    # 0.5.23: the worker deserializes its rank's payload; runners load it
    worker.deserialize_own_rank = lambda payloads: serializer.deserialize(payloads[0])
    worker.weight_update_runners = lambda: [("target", runner)]
    worker.update_weights_from_disk = lambda req: runner.update_weights_from_disk(req.model_path)
    worker.worker = worker
    scheduler = types.SimpleNamespace(
        _engine_paused=False,
        disaggregation_mode=_first(("sglang.srt.disaggregation.utils", "DisaggregationMode")).NULL,
        record_weight_version_change=lambda new_version=None: None,
    )
    return _Updater(
        _cls=cls,
        tp_worker=worker,
        draft_worker=None,
        memory_saver_adapter=_MemorySaver(runner),
        flush_cache=lambda **_: True,
        is_fully_idle=lambda **_: True,
        _is_no_request=lambda: True,
        scheduler=scheduler,
        metrics_collector=None,
        offload_tags=set(),
        stashed_model_static_state=None,
        _session=None,
        tp_cpu_group=None,
        _assert_weight_cache_inactive=lambda op: None,
    )


# ---- the process ------------------------------------------------------------------------------

WEIGHT_AND_MEMORY = {
    "UpdateWeightsFromTensorReqInput": "update_weights_from_tensor",
    "UpdateWeightFromDiskReqInput": "update_weights_from_disk",
    "BeginWeightUpdateReqInput": "begin_weight_update",
    "EndWeightUpdateReqInput": "end_weight_update",
    "ReleaseMemoryOccupationReqInput": "release_memory_occupation",
    "ResumeMemoryOccupationReqInput": "resume_memory_occupation",
}


class StandInScheduler:
    def __init__(self, server_args, port_args):
        import zmq

        self.io = importlib.import_module("sglang.srt.managers.io_struct")
        self.batch = importlib.import_module("sglang.srt.managers.schedule_batch")
        self.server_args = server_args
        self.runner = TinyModelRunner(server_args.model_path)
        self.updater = _updater(self.runner, self.io)
        get_zmq_socket = _first(
            ("sglang.srt.utils.network", "get_zmq_socket"),
            ("sglang.srt.utils.common", "get_zmq_socket"),
        )
        context = zmq.Context(2)
        self.recv_from_tokenizer = get_zmq_socket(
            context, zmq.PULL, port_args.scheduler_input_ipc_name, False
        )
        self.send_to_tokenizer = get_zmq_socket(
            context, zmq.PUSH, port_args.tokenizer_ipc_name, False
        )
        self.sock_send = getattr(self.io, "sock_send", lambda s, obj: s.send_pyobj(obj))
        self.sock_recv = getattr(self.io, "sock_recv", lambda s: s.recv_pyobj())
        self.draws = 0

    def init_info(self) -> dict:
        return {
            "status": "ready",
            "max_total_num_tokens": 65536,
            "max_req_input_len": 8192,
            "startup_time": 0.0,
        }

    def serve_forever(self) -> None:
        while True:
            message = self.sock_recv(self.recv_from_tokenizer)
            for request in getattr(message, "batch", None) or [message]:
                reply = self.handle(request)
                if reply is not None:
                    self.sock_send(self.send_to_tokenizer, reply)

    def handle(self, request):
        kind = type(request).__name__
        if kind == "TokenizedGenerateReqInput":
            return self.generate(request)
        if kind in WEIGHT_AND_MEMORY:
            return getattr(self.updater, WEIGHT_AND_MEMORY[kind])(request)
        if kind == "FlushCacheReqInput":
            return self.io.FlushCacheReqOutput(success=True)
        if kind == "GetInternalStateReq":
            state = {k: v for k, v in vars(self.server_args).items() if _plain(v)}
            return self.io.GetInternalStateReqOutput(internal_state=state)
        if kind in ("AbortReq", "FreezeGCReq"):
            return None  # every request already ran to its end; no garbage collector to freeze
        print(f"stand-in scheduler: no handler for {kind}", file=sys.stderr, flush=True)
        return None

    def generate(self, req):
        params = req.sampling_params
        seed = getattr(params, "sampling_seed", None)
        if seed is None:
            seed, self.draws = self.draws, self.draws + 1
        tokens, logps, stopped = self.runner.generate(list(req.input_ids), params, int(seed))
        if stopped:
            finish = self.batch.FINISH_MATCHED_TOKEN(matched=tokens[-1]).to_json()
        else:
            finish = self.batch.FINISH_LENGTH(length=len(tokens)).to_json()
        return _token_output(self.io.BatchTokenIDOutput, req, tokens, logps, finish)


def _plain(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, list, dict))


def _token_output(cls, req, tokens: list[int], logps: list[float], finish: dict):
    """The release's BatchTokenIDOutput for one finished request, every field it declares set."""
    import dataclasses

    want_logprob = bool(req.return_logprob)
    known = {
        "rids": [req.rid],
        "finished_reasons": [finish],
        "decoded_texts": [""],
        "decode_ids": [list(tokens)],
        "read_offsets": [0],
        "output_ids": [list(tokens)],
        "skip_special_tokens": [False],
        "spaces_between_special_tokens": [True],
        "no_stop_trim": [True],
        "prompt_tokens": [len(req.input_ids)],
        "reasoning_tokens": [0],
        "completion_tokens": [len(tokens)],
        "cached_tokens": [0],
        "retraction_counts": [0],
        "input_token_logprobs_val": [[]],
        "input_token_logprobs_idx": [[]],
        "output_token_logprobs_val": [list(logps) if want_logprob else []],
        "output_token_logprobs_idx": [list(tokens) if want_logprob else []],
        "input_top_logprobs_val": [[]],
        "input_top_logprobs_idx": [[]],
        "output_top_logprobs_val": [[]],
        "output_top_logprobs_idx": [[]],
        "input_token_ids_logprobs_val": [[]],
        "input_token_ids_logprobs_idx": [[]],
        "output_token_ids_logprobs_val": [[]],
        "output_token_ids_logprobs_idx": [[]],
        "output_token_entropy_val": None,
        "output_hidden_states": None,
        "placeholder_tokens_idx": None,
        "placeholder_tokens_val": None,
        "routed_experts": None,
        "indexer_topk": None,
        "output_token_sampling_mask": None,
    }
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.init
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        }
    else:
        import msgspec

        fields = msgspec.structs.fields(cls)
        names = [f.name for f in fields]
        required = {f.name for f in fields if f.required}
    values = {k: v for k, v in known.items() if k in names}
    for name in required - set(values):
        values[name] = None  # a field this harness does not know: left empty, and reported
        print(f"stand-in scheduler: {cls.__name__}.{name} left None", file=sys.stderr)
    return cls(**values)


def _init_cpu_group() -> None:
    """The scheduler's methods barrier on the TP CPU group: one gloo rank here."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0)


def run_standin_scheduler(server_args, port_args, *ranks_and_pipe):
    """The scheduler process target: `(server_args, port_args, gpu_id, tp_rank, ..., pipe_writer)`
    as each release passes it (the pipe writer comes last in every covered release)."""
    pipe_writer = ranks_and_pipe[-1]
    logging.basicConfig(level=logging.INFO)
    try:
        torch.set_num_threads(1)
        _init_cpu_group()
        scheduler = StandInScheduler(server_args, port_args)
        pipe_writer.send(scheduler.init_info())
    except Exception:
        traceback.print_exc()
        pipe_writer.send({"status": "error"})
        raise
    scheduler.serve_forever()
