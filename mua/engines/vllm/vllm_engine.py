"""The `vllm` RolloutEngine: a client of one vLLM OpenAI-compatible HTTP server (docs/vllm.md).

Generation is `POST /v1/completions` on token ids (log-probs are log_softmax(logits / T) of the
sampled token, server flag `--logprobs-mode processed_logprobs`), or `POST /inference/v1/generate`
with `routed_experts=True`. Full pushes go as safetensors files through the worker extension
(`POST /collective_rpc`) or, on CUDA, as IPC handles (`gpu_transfer`); LoRA through
`/v1/load_lora_adapter`. Seeds are sent only with `seeds=True`; every request carries `api_key`.
A failed IPC push marks the engine broken. Not here: launching (`vllm_launch`), the trainer's side
(`colocated`), NCCL weight transfer.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import shutil
import subprocess
import tempfile
from typing import Any

import aiohttp
import numpy as np

from mua.engines.adapter_versions import AdapterVersions
from mua.engines.engine_contract import GenerationRequest, GenerationResult
from mua.engines.sglang.http_bodies import read_body, server_message
from mua.engines.sglang.sglang_engine import stop_process
from mua.errors import RunFailure
from mua.http_session import LoopSessions
from mua.models.moe_replay import compact

FINISH = {"length": "length", "abort": "abort"}  # anything else ended on a stop token


def completion_body(request: GenerationRequest, model: str, seeds: bool = False) -> dict[str, Any]:
    """The `/v1/completions` body of `request` for the served `model` (or adapter name); the
    request's seed travels only with `seeds` (see `VLLMEngine`)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": [int(t) for t in request.prompt_ids],
        **_sampling(request.sampling, seeds),
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "include_stop_str_in_output": True,
    }
    return body


def _sampling(s, seeds: bool) -> dict[str, Any]:
    """vLLM's sampling parameters for mua's `SamplingParams` (its seed only with `seeds`)."""
    params: dict[str, Any] = {
        "max_tokens": int(s.max_new_tokens),
        "temperature": float(s.temperature),
        "top_p": float(s.top_p),
        "top_k": int(s.top_k) if s.top_k > 0 else -1,
        "stop_token_ids": [int(t) for t in s.stop_token_ids],
        "logprobs": 0,
        "skip_special_tokens": False,
    }
    if seeds and s.seed is not None:
        params["seed"] = int(s.seed)
    return params


def generate_body(request: GenerationRequest, model: str, seeds: bool = False) -> dict[str, Any]:
    """The body of vLLM's token-in/token-out route (`POST /inference/v1/generate`) for
    `request`: the same sampling as `completion_body`, token ids in and out."""
    return {"model": model, "token_ids": [int(t) for t in request.prompt_ids],
            "sampling_params": _sampling(request.sampling, seeds)}  # fmt: skip


def parse_generate(body: Any) -> GenerationResult:
    """A token-in/token-out answer -> GenerationResult, with the routed experts of every fed
    token (prompt and sampled tokens but the last; a mixture of experts on a server with
    `--enable-return-routed-experts`) in `meta["routed_experts"]` as a compact record
    (`mua.models.moe_replay.compact`). ValueError when it lacks ids or log-probs."""
    try:
        choice = body["choices"][0]
        ids = [int(t) for t in choice["token_ids"]]
        values = [float(c["logprob"]) for c in choice["logprobs"]["content"]]
        routes = choice.get("routed_experts")
        record = compact(np.load(io.BytesIO(base64.b64decode(routes)))) if routes else None
    except (KeyError, IndexError, TypeError, ValueError, OSError) as err:
        raise ValueError(f"not a generation with token ids and log-probs ({err!r})") from None
    if len(ids) != len(values):
        raise ValueError(f"{len(ids)} token ids but {len(values)} log-probs")
    finish = FINISH.get(choice.get("finish_reason"), "stop")
    result = GenerationResult(ids, values, finish)
    if record is not None:
        result.meta["routed_experts"] = record
    return result


def parse_completion(body: Any) -> GenerationResult:
    """A `/v1/completions` answer -> GenerationResult; ValueError when it lacks ids or log-probs."""
    try:
        choice = body["choices"][0]
        logprobs = choice["logprobs"]
        values = [float(v) for v in logprobs["token_logprobs"]]
        ids = choice.get("token_ids")
        if ids is None:  # "token_id:123" strings (return_tokens_as_token_ids)
            ids = [int(str(t).rpartition(":")[2]) for t in logprobs["tokens"]]
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ValueError(f"not a completion with token ids and log-probs ({err!r})") from None
    if len(ids) != len(values):
        raise ValueError(f"{len(ids)} token ids but {len(values)} log-probs")
    finish = FINISH.get(choice.get("finish_reason"), "stop")
    return GenerationResult([int(t) for t in ids], values, finish)


def write_safetensors(named_tensors, folder: str, bucket_mb: float) -> int:
    """Write (name, tensor) pairs as `part-NNNNN.safetensors` files of about `bucket_mb` each;
    returns the number of tensors. Tensors sharing storage (tied weights) are copied apart."""
    from safetensors.torch import save_file

    from mua.engines.weight_buckets import iter_buckets

    count, seen = 0, set()
    for i, bucket in enumerate(iter_buckets(named_tensors, bucket_mb)):
        part = {}
        for name, tensor in bucket:
            t = tensor.detach().to("cpu").contiguous()
            if t.data_ptr() in seen:
                t = t.clone()
            seen.add(t.data_ptr())
            part[name] = t
        save_file(part, os.path.join(folder, f"part-{i:05d}.safetensors"))
        count += len(part)
    return count


def _refused(err: RunFailure, needs: str) -> RunFailure:
    return RunFailure(
        f"vLLM did not take the pushed weights ({err}); the server needs {needs} "
        "(docs/vllm.md), and the run stops here"
    )


class VLLMEngine:
    """A RolloutEngine backed by one vLLM server (launched here, or running elsewhere)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 600.0,
        max_concurrency: int = 64,
        weights_dir: str | None = None,
        bucket_mb: float = 256.0,
        process: subprocess.Popen | None = None,
        cleanup: list[str] | None = None,
        seeds: bool = False,
        sleep_mode: bool = False,
        transfer: str = "files",
        api_key: str | None = None,
        routed_experts: bool = False,
    ):
        if transfer not in ("files", "ipc"):
            raise ValueError(f"transfer must be 'files' or 'ipc', not {transfer!r}")
        self.sleep_mode = sleep_mode  # the server runs with --enable-sleep-mode (CUDA)
        self.transfer = transfer
        self.broken: str | None = None  # why the last push failed: the engine refuses all work
        self._transfer_ready = False
        self._asleep: set[str] = set()  # what `sleep` released and no `wake` took back yet
        self.seeds = seeds  # vLLM 0.31/0.32 on CPU dies on a seeded request whose prefill is split
        # ask for each token's routed experts (the token-in/token-out route)
        self.routed_experts = routed_experts
        self.base_url = base_url.rstrip("/")
        # a launched server's key, sent with every request (vllm_launch); None: no key
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.weights_dir = weights_dir
        self.bucket_mb = bucket_mb
        self.process = process
        self.cleanup = list(cleanup or [])  # folders removed when the engine closes
        self.model: str | None = None  # the served model's name (read from /v1/models)
        self.weight_version: str | None = None
        self.adapters = AdapterVersions()
        self.stats = {"requests": 0, "tokens": 0, "pushes": 0}
        self._sessions = LoopSessions(self.base_url, max_connections=max_concurrency + 4)
        self._inflight: set[asyncio.Task] = set()

    # ---- HTTP -----------------------------------------------------------------------------

    async def call(self, method: str, path: str, body: Any = None, timeout_s: float | None = None):
        """One call with a JSON body; the answer's JSON ({} when empty). RunFailure on an HTTP
        error or an unreachable server, naming the path and the server's message."""
        timeout = timeout_s or self.timeout_s
        try:
            status, raw, _ = await self._sessions.fetch(
                method, self.base_url + path, json=body, timeout_s=timeout, headers=self._headers
            )
        except asyncio.TimeoutError:
            raise self._unreachable(f"no answer to {path} within {timeout:g} s") from None
        except (aiohttp.ClientError, OSError) as err:
            raise self._unreachable(f"{type(err).__name__}: {err}") from None
        if status >= 300:
            raise RunFailure(
                f"vLLM server {self.base_url}{path} answered HTTP {status}: {server_message(raw)}"
            )
        return read_body(raw)  # {} when empty, {"text": ...} for plain text

    def _unreachable(self, reason: str) -> RunFailure:
        return RunFailure(
            f"cannot reach the vLLM server at {self.base_url} ({reason}); start it or fix "
            "rollout.vllm.base_urls"
        )

    async def served_model(self) -> str:
        """The name the server serves its base model under (read once)."""
        if self.model is None:
            models = (await self.call("GET", "/v1/models")).get("data") or []
            if not models:
                raise RunFailure(f"vLLM server {self.base_url} serves no model")
            self.model = str(models[0]["id"])
        return self.model

    async def version(self) -> str:
        return str((await self.call("GET", "/version")).get("version", "unknown"))

    # ---- RolloutEngine ---------------------------------------------------------------------

    def _refuse_if_broken(self) -> None:
        if self.broken:
            raise RunFailure(
                f"vLLM server {self.base_url} is broken by a failed push: {self.broken}"
            )

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self._refuse_if_broken()
        base = await self.served_model()
        lora = self.adapters.begin()
        version = self.adapters.version_of(lora) if lora else self.weight_version
        if self.routed_experts:
            path, body = "/inference/v1/generate", generate_body(request, lora or base, self.seeds)
        else:
            path, body = "/v1/completions", completion_body(request, lora or base, self.seeds)
        call = asyncio.ensure_future(self.call("POST", path, body))
        self._inflight.add(call)
        try:
            body = await call  # a cancelled caller cancels the call: vLLM aborts the request
        finally:
            self._inflight.discard(call)
            await self._unload(self.adapters.end(lora))
        try:
            result = parse_generate(body) if self.routed_experts else parse_completion(body)
        except ValueError as err:
            raise RunFailure(f"vLLM server {self.base_url}: {err}") from None
        return result.counted(self.stats, lora, version)

    async def drain(self) -> int:
        """Abort this client's requests in flight (vLLM aborts a request whose connection
        closes) and wait until they ended; returns how many were aborted."""
        calls = [c for c in self._inflight if not c.done()]
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        return len(calls)

    # ---- weights ---------------------------------------------------------------------------

    def _new_folder(self, prefix: str) -> str:
        root = self.weights_dir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
        return tempfile.mkdtemp(prefix=prefix, dir=root)

    async def push_full(self, named_tensors, version: str) -> None:
        """Push the full weights: CUDA IPC handles (`transfer="ipc"`), else a folder of files."""
        self._refuse_if_broken()
        if self.transfer == "ipc":
            await self.push_ipc(named_tensors, version)
            return
        folder = self._new_folder("mua-vllm-weights-")
        try:
            # on the calling thread: the gathers inside the iterator are collectives
            count = write_safetensors(named_tensors, folder, self.bucket_mb)
            if count == 0:
                raise RunFailure("a full weight push carried no tensors")
            await self.load_folder(folder, version)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def push_ipc(self, named_tensors, version: str) -> None:
        """Send the weights through vLLM's weight-transfer routes as CUDA IPC handles."""
        from mua.engines.vllm.gpu_transfer import push_ipc

        try:
            init = not self._transfer_ready
            await push_ipc(self.call, named_tensors, version, self.bucket_mb, init=init)
            self._transfer_ready = True
        except RunFailure as err:
            self.broken = str(err)
            raise _refused(
                err,
                "VLLM_SERVER_DEV_MODE=1, VLLM_ALLOW_INSECURE_SERIALIZATION=1 and "
                '--weight-transfer-config \'{"backend": "ipc"}\'',
            ) from None
        await self._took(version)

    async def load_folder(self, folder: str, version: str) -> None:
        """The server loads the safetensors files of `folder` (on its machine) as `version`."""
        body = {"method": "mua_load_weights", "args": [folder], "timeout": self.timeout_s}
        try:
            await self.call("POST", "/collective_rpc", body)
        except RunFailure as err:  # the worker extension marks a half-loaded model broken
            raise _refused(
                err, "VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls of mua's worker extension"
            ) from None
        await self._took(version)

    async def _took(self, version: str) -> None:
        await self.call("POST", "/reset_prefix_cache")  # cached KV was computed by old weights
        self.weight_version = str(version)
        self.stats["pushes"] += 1

    async def load_adapter(self, name: str, named_tensors, config: dict, version: str) -> None:
        """Load a LoRA adapter (peft's file names and config) under `name` and generate with it."""
        from safetensors.torch import save_file

        folder = self._new_folder(f"mua-vllm-{name}-")
        self.cleanup.append(folder)  # vLLM may read the folder again: removed at close
        tensors = {n: t.detach().to("cpu").contiguous() for n, t in named_tensors}
        await asyncio.to_thread(
            save_file, tensors, os.path.join(folder, "adapter_model.safetensors")
        )
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump(config, f)
        await self.call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": folder})
        await self._unload(self.adapters.adopt(name, weight_version=version))

    async def _unload(self, names: list[str]) -> None:
        for name in names:
            try:
                await self.call("POST", "/v1/unload_lora_adapter", {"lora_name": name})
            except RunFailure:
                pass  # kept loaded: harmless, the live adapter is what requests name

    # ---- life ------------------------------------------------------------------------------

    async def sleep(self) -> None:
        """With sleep mode (CUDA): level 1, the weights offloaded to CPU memory and the KV cache
        dropped. Without: nothing (vLLM's sleep mode frees nothing on CPU)."""
        if self.sleep_mode:
            await self.call("POST", "/sleep?level=1")
            self._asleep = {"weights", "kv_cache"}

    async def wake(self, tags: tuple[str, ...] = ()) -> None:
        """With sleep mode: `POST /wake_up`, all of it or only `tags` ("weights", "kv_cache").
        Nothing for what is awake already (a fresh server is), nor without sleep mode."""
        wanted = self._asleep & set(tags or self._asleep)
        if not (self.sleep_mode and wanted):
            return
        query = "&".join(f"tags={t}" for t in sorted(wanted)) if tags else ""
        await self.call("POST", "/wake_up" + (f"?{query}" if query else ""))
        self._asleep -= wanted

    async def close_connections(self) -> None:
        """Close this event loop's connections to the server."""
        await self._sessions.aclose()

    async def close(self) -> None:
        """Close this loop's connections and stop the server process this engine launched."""
        await self._sessions.aclose()
        stop_process(self.process)
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)
