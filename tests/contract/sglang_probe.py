"""Runs SGLang's own code on what mua sends; executed in a subprocess, never imported by pytest.

Usage: python sglang_probe.py SIDE_FOLDER JOB.json  -> one JSON object on stdout.

SIDE_FOLDER holds one sglang release installed with --no-deps plus the small packages its request,
sampling and serialization modules import. SGLang's modules are written for a GPU server: their
import chains reach CUDA-only packages (triton, sgl_kernel, flashinfer, ...) and vision packages
that have nothing to do with the classes checked here. So a module is loaded statement by
statement: an import that cannot be satisfied binds placeholders (as SGLang's own platform stubs
do for triton on macOS), every other statement is the release's real code, and the classes and
functions checked (GenerateReqInput, SamplingParams, the weight/memory request classes,
MultiprocessingSerializer, the scheduler's release/resume) run unmodified. The JSON names every
placeholder used, so a check that leaned on one would show it.

Checks (the job's "checks" list, each {"kind": ..., ...}):
  generate      GenerateReqInput(**body).normalize_batch_and_arguments() and
                SamplingParams(**sampling_params).verify(vocab_size) for each body
  request       the request class `cls` of io_struct built from `body`
  deserialize   MultiprocessingSerializer.deserialize(payload) -> names, shapes, sums
  memory        a sequence of release/resume calls run through the scheduler's own methods on a
                stand-in scheduler; reports the first call that raises and the tags left released
  server_args   the arguments of a launch command parsed by ServerArgs' own CLI parser
  finish        the finish_reason objects of meta_info, built by the release's own classes
  routed_experts  a request's routed experts through the release's own capture buffer, get_topk
                and the detokenizer's meta_info encoding (0.5.23 on)
  facts         source facts of the release (routes, duplicate-rid check, weight_version,
                the /generate response keys the tokenizer manager writes)
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import json
import sys
import traceback
import types
from pathlib import Path

PLACEHOLDERS: set[str] = set()


class _AutoMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return name


class _Placeholder(types.ModuleType):
    """A stand-in for a module the side folder does not hold: attributes are placeholders too."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__path__ = []
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].isupper():
            value = _AutoMeta(name, (), {"__module__": self.__name__})
        else:
            value = _Placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn


def _placeholder(name: str):
    PLACEHOLDERS.add(name)
    top = name.split(".")[0]
    return _AutoMeta(name.rsplit(".", 1)[-1], (), {}) if top[:1].isupper() else _Placeholder(name)


def _bind_import(node, namespace: dict, package: str) -> None:
    """Run one import statement; names it cannot bind become placeholders."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            try:
                module = importlib.import_module(alias.name)
                namespace[alias.asname or alias.name.split(".")[0]] = (
                    module if alias.asname else importlib.import_module(alias.name.split(".")[0])
                )
            except Exception:
                namespace[alias.asname or alias.name.split(".")[0]] = _placeholder(alias.name)
        return
    base = "." * node.level + (node.module or "")
    try:
        module = importlib.import_module(base, package) if node.level else load(node.module)
    except Exception:
        module = None
    for alias in node.names:
        if alias.name == "*":
            if module is not None:
                namespace.update({k: v for k, v in vars(module).items() if not k.startswith("_")})
            continue
        try:
            value = getattr(module, alias.name)
        except Exception:
            value = _placeholder(f"{node.module}.{alias.name}")
        namespace[alias.asname or alias.name] = value


def load(name: str) -> types.ModuleType:
    """Import `name`; a sglang module is loaded statement by statement (see the docstring)."""
    if name in sys.modules:
        return sys.modules[name]
    if not name.startswith("sglang."):
        return importlib.import_module(name)
    parent, _, leaf = name.rpartition(".")
    search = getattr(load(parent), "__path__", None)
    if search is None:  # the parent is a plain module, not a package
        raise ModuleNotFoundError(name)
    spec = importlib.machinery.PathFinder.find_spec(leaf, search)
    if spec is None:
        raise ModuleNotFoundError(name)
    module = types.ModuleType(name)
    module.__file__ = spec.origin
    module.__spec__ = spec
    if spec.submodule_search_locations is not None:
        module.__path__ = list(spec.submodule_search_locations)
        module.__package__ = name
    else:
        module.__package__ = name.rsplit(".", 1)[0]
    sys.modules[name] = module
    if spec.origin and spec.origin.endswith(".py"):
        tree = ast.parse(Path(spec.origin).read_text(), spec.origin)
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                    continue
                _bind_import(node, module.__dict__, module.__package__)
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), spec.origin, "exec")
            try:
                exec(code, module.__dict__)
            except Exception:
                pass  # a statement that needs the GPU stack; what the checks use is verified below
    return module


def _install_package_root(side: Path) -> None:
    """Register `sglang` and `sglang.srt` without running their __init__ (the frontend DSL)."""
    for name, folder in (("sglang", side / "sglang"), ("sglang.srt", side / "sglang" / "srt")):
        module = types.ModuleType(name)
        module.__path__ = [str(folder)]
        module.__package__ = name
        sys.modules[name] = module


def _version(side: Path) -> str:
    for dist in side.glob("sglang-*.dist-info"):
        return dist.name[len("sglang-") : -len(".dist-info")]
    return "unknown"


# ---- checks ---------------------------------------------------------------------------------


def check_generate(job: dict) -> dict:
    io_struct = load("sglang.srt.managers.io_struct")
    sampling = load("sglang.srt.sampling.sampling_params")
    results = []
    for body in job["bodies"]:
        try:
            req = io_struct.GenerateReqInput(**body)
            req.normalize_batch_and_arguments()
            params = sampling.SamplingParams(**body.get("sampling_params") or {})
            params.verify(job.get("vocab_size", 1000))
            results.append({"ok": True})
        except Exception as err:
            results.append({"ok": False, "error": f"{type(err).__name__}: {err}"})
    return {"results": results}


def check_request(job: dict) -> dict:
    io_struct = load("sglang.srt.managers.io_struct")
    cls = getattr(io_struct, job["cls"], None)
    if cls is None or isinstance(cls, _AutoMeta):
        return {"ok": False, "error": f"io_struct has no class {job['cls']}"}
    try:
        req = cls(**job["body"])
        return {"ok": True, "fields": {k: repr(getattr(req, k)) for k in job["body"]}}
    except Exception as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}


def _serializer():
    for name in ("sglang.srt.utils.common", "sglang.srt.utils"):
        try:
            module = load(name)
        except ModuleNotFoundError:
            continue
        if isinstance(getattr(module, "MultiprocessingSerializer", None), type):
            return module.MultiprocessingSerializer
    raise RuntimeError("no MultiprocessingSerializer in this release")


def check_deserialize(job: dict) -> dict:
    serializer = _serializer()
    try:
        named = serializer.deserialize(Path(job["payload_file"]).read_text())
    except Exception as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    return {
        "ok": True,
        "tensors": [
            {
                "name": n,
                "shape": list(t.shape),
                "dtype": str(t.dtype),
                "sum": float(t.double().sum()),
            }
            for n, t in named
        ],
    }


class _MemorySaver:
    def __init__(self):
        self.paused: set[str] = set()

    def pause(self, tag):
        self.paused.add(tag)

    def resume(self, tag):
        self.paused.discard(tag)


def _scheduler_methods(version_file_candidates):
    for name, cls_name in version_file_candidates:
        try:
            module = load(name)
        except ModuleNotFoundError:
            continue
        cls = getattr(module, cls_name, None)
        if isinstance(cls, type) and hasattr(cls, "release_memory_occupation"):
            return module, cls
    raise RuntimeError("no scheduler release/resume methods found in this release")


def check_memory(job: dict) -> dict:
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{job['port']}", world_size=1, rank=0
        )
    io_struct = load("sglang.srt.managers.io_struct")
    module, cls = _scheduler_methods(
        [
            (
                "sglang.srt.managers.scheduler_components.weight_updater",
                "SchedulerWeightUpdaterManager",
            ),
            ("sglang.srt.managers.scheduler_update_weights_mixin", "SchedulerUpdateWeightsMixin"),
            ("sglang.srt.managers.scheduler", "Scheduler"),
        ]
    )
    model = torch.nn.Linear(2, 2)
    model.register_buffer("inv_freq", torch.ones(2))
    runner = types.SimpleNamespace(model=model)
    worker = types.SimpleNamespace(
        model_runner=runner, worker=types.SimpleNamespace(model_runner=runner)
    )
    busy = {"running": 0}
    stand_in = types.SimpleNamespace(
        offload_tags=set(),
        memory_saver_adapter=_MemorySaver(),
        tp_worker=worker,
        tp_cpu_group=None,
        scheduler=None,
        flush_cache=lambda: True,
        _is_no_request=lambda: busy["running"] == 0,
        is_fully_idle=lambda **_: busy["running"] == 0,
        _assert_weight_cache_inactive=lambda op: None,
    )
    for step, call in enumerate(job["calls"]):
        if call["op"] == "busy":
            busy["running"] = int(call["running"])
            continue
        cls_name = {
            "release": "ReleaseMemoryOccupationReqInput",
            "resume": "ResumeMemoryOccupationReqInput",
        }[call["op"]]
        method = getattr(cls, f"{call['op']}_memory_occupation")
        try:
            request = getattr(io_struct, cls_name)(tags=call.get("tags"))
            method(stand_in, request)
        except BaseException as err:  # the scheduler process would die here
            return {
                "ok": False,
                "step": step,
                "call": call,
                "error": f"{type(err).__name__}: {err}",
                "released": sorted(stand_in.memory_saver_adapter.paused),
            }
    return {"ok": True, "released": sorted(stand_in.memory_saver_adapter.paused)}


def check_server_args(job: dict) -> dict:
    """Parse a launch command's arguments with the release's own ServerArgs CLI parser (the one
    `python -m sglang.launch_server` uses). Parsing only: ServerArgs' post-init probes the GPU."""
    import argparse
    import contextlib
    import io

    server_args = load("sglang.srt.server_args").ServerArgs
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    server_args.add_cli_args(parser)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parsed = parser.parse_args(job["argv"])
    except SystemExit:
        return {"ok": False, "error": errors.getvalue().strip().splitlines()[-1]}
    return {"ok": True, "args": {k: v for k, v in vars(parsed).items() if k in job["keys"]}}


def check_finish(job: dict) -> dict:
    """The finish_reason objects the release's scheduler puts in meta_info, built by its own
    classes (a length stop, a stop token, an abort)."""
    batch = load("sglang.srt.managers.schedule_batch")
    return {
        "ok": True,
        "reasons": [
            batch.FINISH_LENGTH(length=8).to_json(),
            batch.FINISH_MATCHED_TOKEN(matched=2).to_json(),
            batch.FINISH_ABORT("aborted").to_json(),
        ],
    }


def check_facts(job: dict) -> dict:
    side = Path(job["side"])
    http = (side / "sglang/srt/entrypoints/http_server.py").read_text()
    tokenizer = (side / "sglang/srt/managers/tokenizer_manager.py").read_text()
    constants = load("sglang.srt.constants")
    return {
        "routes": sorted(
            set(
                r
                for r in (
                    "/health",
                    "/abort_request",
                    "/begin_weight_update",
                    "/end_weight_update",
                    "/get_server_info",
                    "/server_info",
                    "/update_weights_from_tensor",
                    "/update_weights_from_disk",
                    "/release_memory_occupation",
                    "/resume_memory_occupation",
                    "/load_lora_adapter_from_tensors",
                    "/unload_lora_adapter",
                )
                if f'"{r}"' in http
            )
        ),
        "rejects_duplicate_rid": "Duplicate request ID" in tokenizer,
        # the /generate response keys mua reads, as the tokenizer manager writes them
        "response_keys": sorted(
            key
            for key in ("output_ids", "finish_reason", "output_token_logprobs", "weight_version")
            if f'"{key}"' in _tokenizer_sources(side)
        ),
        # a push's weight_version becomes the server's, reported by /get_model_info
        "weight_version": "weight_version" in _fields("UpdateWeightsFromTensorReqInput")
        and "weight_version" in _fields("UpdateWeightFromDiskReqInput")
        and "_update_weight_version_if_provided" in _tokenizer_sources(side)
        and '"weight_version"' in http,
        "memory_tags": sorted(
            getattr(constants, "GPU_MEMORY_ALL_TYPES", None)
            or [constants.GPU_MEMORY_TYPE_KV_CACHE, constants.GPU_MEMORY_TYPE_WEIGHTS]
        ),
        "sampling_seed": "sampling_seed"
        in (side / "sglang/srt/sampling/sampling_params.py").read_text(),
        # the server arg /get_server_info reports, which tells the client seeds are honoured
        "deterministic_flag": any(
            "enable_deterministic_inference" in path.read_text()
            for path in [
                side / "sglang/srt/server_args.py",
                *side.glob("sglang/srt/arg_groups/*.py"),
            ]
        ),
    }


def _fields(cls_name: str) -> set[str]:
    import dataclasses

    cls = getattr(load("sglang.srt.managers.io_struct"), cls_name)
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(getattr(cls, "__struct_fields__", ()) or getattr(cls, "model_fields", {}))


def _tokenizer_sources(side: Path) -> str:
    managers = side / "sglang/srt/managers"
    return "".join(p.read_text() for p in managers.glob("tokenizer*.py"))


def check_lora_payload(job: dict) -> dict:
    """A LoRA adapter push as the release's tensor-parallel worker reads it: the request class's
    payload field normalized (where the release does), deserialized by MultiprocessingSerializer
    into {name: tensor}; the adapter config read by the release's LoRAConfig; each tensor name
    given a layer by the release's get_layer_id."""
    io_struct = load("sglang.srt.managers.io_struct")
    body = job["body"]
    try:
        req = io_struct.LoadLoRAAdapterFromTensorsReqInput(**body)
        per_rank = getattr(req, "serialized_named_tensors", None)
        if per_rank is not None:
            common = load("sglang.srt.utils.common")
            per_rank = common.normalize_serialized_named_tensor_payloads(per_rank)
            payload = per_rank[job.get("tp_rank", 0)]
        else:
            payload = req.serialized_tensors
        tensors = _serializer().deserialize(payload)
        lora_config = load("sglang.srt.lora.lora_config").LoRAConfig
        config = lora_config.from_dict(body["config_dict"], None, base_vocab_size=1000)
        get_layer_id = load("sglang.srt.layers.utils").get_layer_id
    except Exception as err:
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    return {
        "ok": isinstance(tensors, dict),
        "payloads": len(per_rank) if per_rank is not None else 1,
        "rank": int(config.r),
        "target_modules": sorted(config.target_modules),
        "tensors": {
            name: {
                "shape": list(t.shape),
                "sum": float(t.double().sum()),
                "layer": get_layer_id(name),
            }
            for name, t in tensors.items()
        },
    }


def check_routed_experts(job: dict) -> dict:
    """The string a finished request's `meta_info.routed_experts` holds: each layer's experts
    written by the release's capture buffer (BaseDeviceCache, the int32 buffer the host cache
    copies), the request's rows taken by its get_topk, encoded by the detokenizer; read back with
    the release's own reader (`extract_routed_experts_from_meta_info`)."""
    import types

    import torch

    base = load("sglang.srt.state_capturer.base")
    detok = load("sglang.srt.managers.detokenizer_manager").DetokenizerManager
    reader = load("sglang.srt.state_capturer.routed_experts")
    routes = torch.tensor(job["routes"], dtype=torch.int64)  # [seqlen - 1, layers, k]
    rows, layers, top_k = routes.shape
    slots = torch.arange(rows + 1) + 5  # the request's KV slots (any, in order)
    cache = base.BaseDeviceCache(64, layers, top_k, "cpu", "routed_experts")
    for layer in range(layers):
        full = torch.zeros(64, top_k, dtype=torch.int64)
        full[slots[:rows]] = routes[:, layer]
        cache.capture(layer, full)
    capturer = types.SimpleNamespace(host_cache=cache)
    pool = types.SimpleNamespace(req_to_token=slots.unsqueeze(0))
    got = base.BaseTopkCapturer.get_topk(capturer, 0, rows + 1, pool, start_len=0)
    encoded = detok._b64_encode_per_request([got, None])
    back = reader.extract_routed_experts_from_meta_info(
        {"meta_info": {"routed_experts": encoded[0]}}
    )
    host = Path(base.__file__).read_text()
    return {
        "ok": encoded[1] is None,
        "encoded": encoded[0],
        "read_back": [int(v) for v in back],
        "host_dtype_int32": "dtype=torch.int32" in host.split("class BaseHostCache", 1)[1],
    }


CHECKS = {
    "routed_experts": check_routed_experts,
    "lora_payload": check_lora_payload,
    "server_args": check_server_args,
    "finish": check_finish,
    "generate": check_generate,
    "request": check_request,
    "deserialize": check_deserialize,
    "memory": check_memory,
    "facts": check_facts,
}


def main() -> None:
    side, job_file = Path(sys.argv[1]), Path(sys.argv[2])
    import transformers  # noqa: F401  (decides its optional backends before placeholders exist)

    _install_package_root(side)
    job = json.loads(job_file.read_text())
    out = {"version": _version(side), "results": []}
    for check in job["checks"]:
        try:
            result = CHECKS[check["kind"]](check)
        except Exception:
            result = {"ok": False, "error": traceback.format_exc(limit=-4)}
        out["results"].append(result)
    out["placeholders"] = sorted(PLACEHOLDERS)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
