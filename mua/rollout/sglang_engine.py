"""The `sglang` RolloutEngine: a client of SGLang's native HTTP protocol, plus a server launcher.

`SGLangEngine` speaks to one server: a real SGLang server on GPU (launched here with
`launch_sglang_server`, or started elsewhere) or `mua serve` (mua's transformers engine behind the
same protocol, which is how CI runs this exact code). It generates from token ids with log-probs,
pushes weights bucket by bucket (tensor path: `/update_weights_from_tensor`; disk path:
safetensors shards in shared memory, then `/update_weights_from_disk`), releases and resumes
memory by tag (`weights`, `kv_cache`) for co-location with the trainer, and flushes the cache.
`EnginePool` spreads trajectories over several engines and keeps all turns of one trajectory (one
`route_key`) on the same engine, where its prefix is cached.

Tensor payloads: real SGLang unpickles `serialized_named_tensors` (tensors shared by CUDA-IPC
handle, so the trainer must be on the same host); `mua serve` reads base64 safetensors. With
`tensor_format="auto"` the engine asks `/get_server_info` once which one the server is.

HTTP goes through the standard library in a thread pool (no extra dependency); the event loop
never blocks. Not here: SGLang's in-process `Engine` API (the HTTP server is the one interface),
NCCL weight broadcast, multi-node servers, router/load-balancer processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import count
from pathlib import Path
from typing import Any, Literal

from mua.errors import RunFailure
from mua.rollout import weight_sync
from mua.rollout.engine import GenerationRequest, GenerationResult
from mua.serve import protocol

TensorFormat = Literal["auto", "sglang", "portable"]
WeightPath = Literal["tensor", "disk"]


class SGLangEngine:
    """A RolloutEngine backed by one server speaking SGLang's native protocol."""

    def __init__(
        self,
        base_url: str,
        *,
        tensor_format: TensorFormat = "auto",
        weight_path: WeightPath = "tensor",
        bucket_mb: float = 256.0,
        tp_size: int = 1,
        timeout_s: float = 600.0,
        max_concurrency: int = 64,
        weights_dir: str | None = None,
        hf_config: Any = None,
        process: subprocess.Popen | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.tensor_format = tensor_format
        self.weight_path = weight_path
        self.bucket_mb = bucket_mb
        self.tp_size = tp_size
        self.timeout_s = timeout_s
        self.weights_dir = weights_dir
        self.hf_config = hf_config
        self.process = process
        self.asleep = False
        self.stats = {"requests": 0, "tokens": 0, "weight_buckets": 0, "weight_bytes": 0}
        self._pool = ThreadPoolExecutor(
            max_workers=max_concurrency, thread_name_prefix="mua-sglang"
        )

    # ---- HTTP -----------------------------------------------------------------------------

    def _call_sync(
        self, method: str, path: str, body: Any = None, timeout_s: float | None = None
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise RunFailure(
                f"SGLang server {self.base_url}{path} answered HTTP {err.code}: "
                f"{_server_message(err.read())}"
            ) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise RunFailure(
                f"cannot reach the SGLang server at {self.base_url} ({reason}); start "
                "it (or `mua serve`) or fix rollout.sglang.base_urls"
            ) from None
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return {"text": raw.decode(errors="replace")}  # /flush_cache answers plain text

    async def _call(
        self, method: str, path: str, body: Any = None, timeout_s: float | None = None
    ) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._pool, self._call_sync, method, path, body, timeout_s
        )

    # ---- RolloutEngine ---------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.asleep:
            raise RuntimeError("the sglang engine is asleep; call wake() before generate()")
        body = await self._call("POST", "/generate", protocol.generate_body(request))
        try:
            result = protocol.parse_generate_response(body)
        except protocol.ProtocolError as err:
            raise RunFailure(f"SGLang server {self.base_url}: {err}") from None
        self.stats["requests"] += 1
        self.stats["tokens"] += len(result.token_ids)
        return result

    async def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Push full weights, bucket by bucket, by the configured path (tensor or disk)."""
        if self.weight_path == "disk":
            await self.update_weights_from_disk(named_tensors)
            return
        buckets = weight_sync.iter_buckets(named_tensors, self.bucket_mb)
        current = next(buckets, None)
        while current is not None:
            following = next(buckets, None)
            await self.push_tensor_bucket(current, flush_cache=following is None)
            current = following

    async def push_tensor_bucket(self, bucket: weight_sync.Bucket, flush_cache: bool) -> None:
        """Send one bucket to `/update_weights_from_tensor`; flush the cache after the last one."""
        fmt = await self.resolved_tensor_format()
        if fmt == "portable":
            payload = await asyncio.to_thread(weight_sync.encode_portable, bucket)
            load_format = protocol.PORTABLE_TENSOR_FORMAT
        else:
            payload, load_format = weight_sync.encode_sglang(bucket), None
        body = weight_sync.tensor_push_body(
            payload, load_format=load_format, tp_size=self.tp_size, flush_cache=flush_cache
        )
        _check_success(await self._call("POST", "/update_weights_from_tensor", body), self.base_url)
        self.stats["weight_buckets"] += 1
        self.stats["weight_bytes"] += weight_sync.bucket_bytes(bucket)

    async def update_weights_from_disk(self, named_tensors: Iterable[tuple[str, Any]]) -> Path:
        """Write shards into a fresh shared-memory folder, have the server load it, remove it."""
        folder = weight_sync.new_weights_dir(self.weights_dir)
        try:
            await asyncio.to_thread(
                weight_sync.write_shards, named_tensors, folder, self.bucket_mb, self.hf_config
            )
            await self.load_weights_from_folder(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return folder

    async def load_weights_from_folder(self, folder: str | Path) -> None:
        body = {"model_path": str(folder), "load_format": None}
        _check_success(await self._call("POST", "/update_weights_from_disk", body), self.base_url)
        self.stats["weight_buckets"] += 1

    async def sleep(self, tags: Sequence[str] | None = None) -> None:
        """Release GPU memory (all tags by default) so the trainer can use it.

        SGLang frees released weights rather than offloading them: after `wake`, push weights
        (`update_weights`) before generating. `mua serve` keeps them, which is harmless.
        """
        body = {"tags": list(tags or protocol.DEFAULT_RELEASE_TAGS)}
        _check_success(await self._call("POST", "/release_memory_occupation", body), self.base_url)
        self.asleep = True

    async def wake(self, tags: Sequence[str] | None = None) -> None:
        body = {"tags": list(tags or protocol.DEFAULT_RELEASE_TAGS)}
        _check_success(await self._call("POST", "/resume_memory_occupation", body), self.base_url)
        self.asleep = False

    async def flush_cache(self) -> None:
        await self._call("POST", "/flush_cache")

    async def health(self, timeout_s: float = 10.0) -> bool:
        try:
            await self._call("GET", "/health", timeout_s=timeout_s)
            return True
        except RunFailure:
            return False

    async def model_info(self) -> dict:
        return await self._call("GET", "/get_model_info")

    async def resolved_tensor_format(self) -> str:
        if self.tensor_format == "auto":
            info = await self._call("GET", "/get_server_info")
            self.tensor_format = "portable" if info.get("mua_serve") else "sglang"
        return self.tensor_format

    async def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def _server_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return raw.decode(errors="replace")[:300]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message", err))[:300]
        return str(err or body.get("message") or body)[:300]
    return str(body)[:300]


def _check_success(body: Any, base_url: str) -> None:
    if isinstance(body, dict) and body.get("success") is False:
        raise RunFailure(
            f"SGLang server {base_url} refused the request: {body.get('message', body)}"
        )


class EnginePool:
    """Several engines behind one RolloutEngine; one trajectory's turns stay on one engine."""

    def __init__(self, engines: Sequence[SGLangEngine]):
        if not engines:
            raise ValueError("EnginePool needs at least one engine")
        self.engines = list(engines)
        self._round_robin = count()

    def pick(self, route_key: str) -> SGLangEngine:
        if route_key:
            return self.engines[zlib.crc32(route_key.encode()) % len(self.engines)]
        return self.engines[next(self._round_robin) % len(self.engines)]

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        return await self.pick(request.route_key).generate(request)

    async def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Gather each bucket once and send it to every engine concurrently."""
        if all(e.weight_path == "disk" for e in self.engines):
            folder = weight_sync.new_weights_dir(self.engines[0].weights_dir)
            try:
                await asyncio.to_thread(
                    weight_sync.write_shards,
                    named_tensors,
                    folder,
                    self.engines[0].bucket_mb,
                    self.engines[0].hf_config,
                )
                await asyncio.gather(*(e.load_weights_from_folder(folder) for e in self.engines))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
        buckets = weight_sync.iter_buckets(named_tensors, self.engines[0].bucket_mb)
        current = next(buckets, None)
        while current is not None:
            following = next(buckets, None)
            await asyncio.gather(
                *(
                    e.push_tensor_bucket(current, flush_cache=following is None)
                    for e in self.engines
                )
            )
            current = following

    async def sleep(self, tags: Sequence[str] | None = None) -> None:
        await asyncio.gather(*(e.sleep(tags) for e in self.engines))

    async def wake(self, tags: Sequence[str] | None = None) -> None:
        await asyncio.gather(*(e.wake(tags) for e in self.engines))

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.engines))


# ---- launching a real SGLang server ------------------------------------------------------------


def sglang_version() -> str | None:
    """The installed SGLang version, or None; never imports sglang itself."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def launch_command(
    model_path: str,
    *,
    port: int,
    mem_fraction: float,
    tp_size: int,
    dtype: str = "bfloat16",
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The `python -m sglang.launch_server` command line for a co-located rollout server."""
    return [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--mem-fraction-static",
        str(mem_fraction),
        "--tp-size",
        str(tp_size),
        "--dtype",
        dtype,
        # release/resume_memory_occupation only work with the memory saver enabled
        "--enable-memory-saver",
        *extra_args,
    ]


def launch_sglang_server(
    model_path: str,
    *,
    port: int = 30000,
    mem_fraction: float = 0.5,
    tp_size: int = 1,
    dtype: str = "bfloat16",
    extra_args: Sequence[str] = (),
    launch_timeout_s: float = 900.0,
    log_path: str | None = None,
    **engine_kwargs,
) -> SGLangEngine:
    """Start SGLang as a subprocess, wait until it answers, and return an engine driving it."""
    if sglang_version() is None:
        raise RunFailure(
            "rollout.engine=sglang needs SGLang, which is not installed; on a CUDA "
            "machine run `pip install 'mua[gpu]'`, or use rollout.engine=hf"
        )
    cmd = launch_command(
        model_path,
        port=port,
        mem_fraction=mem_fraction,
        tp_size=tp_size,
        dtype=dtype,
        extra_args=extra_args,
    )
    log_file = Path(log_path or f"sglang-{port}.log")
    log = open(log_file, "ab")
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_RETURN_ORIGINAL_LOGPROB"}
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    log.close()
    engine = SGLangEngine(
        f"http://127.0.0.1:{port}", tp_size=tp_size, process=process, **engine_kwargs
    )
    deadline = time.monotonic() + launch_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_file.read_text(errors="replace").splitlines()[-5:]
            raise RunFailure(
                f"SGLang exited with code {process.returncode} while starting "
                f"(log {log_file}): {' | '.join(tail)}"
            )
        try:
            engine._call_sync("GET", "/get_model_info", timeout_s=5)
            return engine
        except RunFailure:
            time.sleep(2)
    process.kill()
    raise RunFailure(
        f"SGLang did not answer on port {port} within {launch_timeout_s:.0f}s "
        f"(log {log_file}); raise rollout.sglang.launch_timeout_s or read the log"
    )


def engine_from_config(
    sglang_cfg,
    model_path: str,
    *,
    bucket_mb: float = 256.0,
    hf_config: Any = None,
    max_concurrency: int = 64,
):
    """The rollout engine a recipe's `rollout.sglang` section describes.

    `bucket_mb` is the recipe's `parallel.weight_push_bucket_mb`.
    With `base_urls` set, connect to those servers (a pool when there are several); otherwise
    launch one SGLang server for `model_path` on this node.
    """
    common = dict(
        tensor_format=sglang_cfg.tensor_format,
        weight_path=sglang_cfg.weight_path,
        bucket_mb=bucket_mb,
        timeout_s=sglang_cfg.request_timeout_s,
        max_concurrency=max_concurrency,
        weights_dir=sglang_cfg.weights_dir,
        hf_config=hf_config,
    )
    if sglang_cfg.base_urls:
        engines = [
            SGLangEngine(url, tp_size=sglang_cfg.tp_size, **common) for url in sglang_cfg.base_urls
        ]
        return engines[0] if len(engines) == 1 else EnginePool(engines)
    return launch_sglang_server(
        model_path,
        port=sglang_cfg.port,
        mem_fraction=sglang_cfg.mem_fraction,
        tp_size=sglang_cfg.tp_size,
        dtype=sglang_cfg.dtype,
        extra_args=sglang_cfg.extra_args,
        launch_timeout_s=sglang_cfg.launch_timeout_s,
        **common,
    )
