"""The `sglang` RolloutEngine: a client of SGLang's native HTTP protocol.

`SGLangEngine` speaks to one server: a real SGLang server on GPU (launched by
`mua.engines.sglang.sglang_launch`, or started elsewhere) or `mua serve` (mua's transformers engine
behind the same protocol, which is how CI runs this exact code). It generates from token ids with log-probs,
pushes weights bucket by bucket (tensor path: `/update_weights_from_tensor`; disk path:
safetensors shards in shared memory, then `/update_weights_from_disk`), releases and resumes
memory by tag (`weights`, `kv_cache`, `cuda_graph`) for co-location with the trainer, and flushes the cache.
Several servers, and building the engine a recipe names: `mua.engines.sglang.engine_pool`.

One client path for every server: the same bodies, tensor encoding (SGLang's
MultiprocessingSerializer form, see `weight_sync.encode_tensors`) and call sequence go to a real
SGLang server and to `mua serve`. What differs between SGLang releases (memory tags, weight-update
sessions, `sampling_seed`) is read once from the `version` the server reports in
`/get_server_info` (`mua.serve.releases`); `mua serve` reports the release it emulates.
Memory: the client remembers which tags it released, so it never resumes a tag that is not
released (a fresh server holds everything), and `drain()` aborts and waits for this client's
requests still running on the server, so memory is never released under a running request.
Request ids carry a per-client tag and a counter: unique across the ranks sharing a server.
Every push may carry a `weight_version` (sent with the request that completes it, where the
release has the field); the server's version is read back into `weight_version` and a push it did
not adopt fails. A CUDA tensor push goes only to a server of the trainer's own sglang release.
Launching a server is `mua.engines.sglang.sglang_launch`.
With `rollout.lora_sync: adapter`, `load_adapter` sends a LoRA adapter alone under a versioned
name (`mua.engines.sglang.lora_endpoints`), every `/generate` names the live one in `lora_path`,
and an older version this client loaded is unloaded once none of its requests names it. The
adapter's `weight_version` is kept by the client (no covered release takes one with an adapter
load) and reported in the results it sampled.

Every call goes over aiohttp on the caller's event loop (`mua.llm.http_session`, one session
per loop, connections kept alive); bodies of weight pushes are encoded on a worker thread, so
the loop never blocks. A `/generate` whose caller gives up (a trajectory timeout) runs on to its
answer: the request counts as in flight until the server answered it, and `drain()` aborts it
and waits for that. Not here: SGLang's in-process `Engine` API (the HTTP server is the one interface),
NCCL weight broadcast, multi-node servers, router/load-balancer processes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from itertools import count
from pathlib import Path
from typing import Any, Literal

import aiohttp

from mua.engines.adapter_versions import AdapterVersions
from mua.engines.engine_contract import GenerationRequest, GenerationResult
from mua.engines.sglang import lora_endpoints, weight_sync
from mua.errors import RunFailure, UsageError
from mua.llm.http_session import LoopSessions
from mua.serve import protocol
from mua.serve.releases import ReleaseTraits

WeightPath = Literal["tensor", "disk"]


class ServerHTTPError(RunFailure):
    """The server answered with an HTTP error status (kept, so callers can tell 404 from 400)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class SGLangEngine:
    """A RolloutEngine backed by one server speaking SGLang's native protocol."""

    def __init__(
        self,
        base_url: str,
        *,
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
        self.weight_path = weight_path
        self.bucket_mb = bucket_mb
        self.tp_size = tp_size
        self.timeout_s = timeout_s
        self.weights_dir = weights_dir
        self.hf_config = hf_config
        self.process = process
        self.released: set[str] = set()  # memory tags this client released and not yet resumed
        self.traits: ReleaseTraits | None = None
        self.weight_version: str | None = None  # the server's, read back after each push
        self.seeds_honoured = False
        self.stats = {"requests": 0, "tokens": 0, "weight_buckets": 0, "weight_bytes": 0}
        self._client_tag = uuid.uuid4().hex[:12]
        self._rid_counter = count()
        self._inflight: dict[str, int] = {}  # rid -> HTTP calls still open
        self._inflight_lock = threading.Lock()
        # connections at once per loop: the runner's requests in flight, plus control calls
        self._sessions = LoopSessions(self.base_url, max_connections=max_concurrency + 4)
        self._given_up: set[asyncio.Task] = set()  # /generate calls whose caller gave up
        self._prompts = _PromptJSON()
        self.adapters = AdapterVersions()  # rollout.lora_sync=adapter: the live LoRA adapter

    @property
    def asleep(self) -> bool:
        return bool(self.released)

    # ---- HTTP -----------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout_s: float | None = None,
        rid: str | None = None,
    ) -> Any:
        """One call with a JSON body (encoded on a worker thread: weight pushes are large);
        the answer's JSON (`{"text": ...}` for a plain-text answer, `{}` for none)."""
        data = None if body is None else await asyncio.to_thread(_encode, body)
        return await self._send(method, path, data, timeout_s or self.timeout_s, rid)

    async def _send(
        self, method: str, path: str, data: bytes | None, timeout_s: float, rid: str | None
    ) -> Any:
        session = await self._sessions.get()
        if rid is not None:
            self._track(rid, 1)
        try:
            async with session.request(
                method,
                self.base_url + path,
                data=data,
                headers=_JSON,
                allow_redirects=False,
                proxy=self._sessions.proxy,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                raw, status = await response.read(), response.status
                location = response.headers.get("Location")
        except asyncio.TimeoutError:
            raise self._unreachable(f"no answer to {path} within {timeout_s:g} s") from None
        except (aiohttp.ClientConnectionError, OSError) as err:
            raise self._unreachable(f"{type(err).__name__}: {err}") from None
        except aiohttp.ClientError as err:
            raise RunFailure(f"SGLang server {self.base_url}{path}: {err}") from None
        finally:
            if rid is not None:
                self._track(rid, -1)
        if 300 <= status < 400:
            raise ServerHTTPError(
                f"SGLang server {self.base_url}{path} answered a redirect (HTTP {status}) to "
                f"{location}; fix rollout.sglang.base_urls",
                status,
            )
        if status >= 400:
            raise ServerHTTPError(
                f"SGLang server {self.base_url}{path} answered HTTP {status}: "
                f"{_server_message(raw)}",
                status,
            )
        return _read_body(raw)

    def _track(self, rid: str, delta: int) -> None:
        """Count `rid`'s HTTP calls still open."""
        with self._inflight_lock:
            left = self._inflight.get(rid, 0) + delta
            if left > 0:
                self._inflight[rid] = left
            else:
                self._inflight.pop(rid, None)

    @property
    def connections_opened(self) -> int:
        """Connections opened to the server so far (kept alive, they serve many calls)."""
        return self._sessions.opened

    async def _post_generate(self, data: bytes, rid: str) -> Any:
        """POST /generate. The request counts as in flight until its answer is read: a caller
        that gives up (a trajectory timeout) leaves the call to run to its answer, so `drain()`
        sees the request for as long as the server runs it."""
        call = asyncio.ensure_future(self._send("POST", "/generate", data, self.timeout_s, rid))
        try:
            return await asyncio.shield(call)
        except asyncio.CancelledError:
            if not call.done():
                self._given_up.add(call)
                call.add_done_callback(self._forget)
            raise

    def _forget(self, call: asyncio.Task) -> None:
        """A given-up /generate ended: its answer (or failure) has nobody to go to."""
        self._given_up.discard(call)
        if not call.cancelled():
            call.exception()

    def _unreachable(self, reason: Any) -> RunFailure:
        return RunFailure(
            f"cannot reach the SGLang server at {self.base_url} ({reason}); start "
            "it (or `mua serve`) or fix rollout.sglang.base_urls"
        )

    async def server_traits(self) -> ReleaseTraits:
        """The release facts of this server, read once from `/get_server_info`."""
        if self.traits is None:
            info = await self._call("GET", "/get_server_info")
            info = info if isinstance(info, dict) else {}
            self.traits = ReleaseTraits.of(info.get("version"))
            self.seeds_honoured = self.traits.sampling_seed and bool(
                info.get("enable_deterministic_inference")
            )
        return self.traits

    def request_id(self, request: GenerationRequest) -> str:
        """The rid sent for `request`: its own id plus this client's tag and a counter."""
        base = request.request_id or "mua"
        return f"{base}-{self._client_tag}-{next(self._rid_counter)}"

    # ---- RolloutEngine ---------------------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if self.asleep:
            raise RuntimeError("the sglang engine is asleep; call wake() before generate()")
        await self.server_traits()
        rid = self.request_id(request)
        ids_json = self._prompts.json_of(request.route_key, request.prompt_ids, request.keep_prefix)
        lora = self.adapters.begin()  # the live adapter, counted in flight until answered
        adapter_version = self.adapters.version_of(lora)
        try:
            data = protocol.generate_body_json(request, ids_json, rid, self.seeds_honoured, lora)
            body = await self._post_generate(data, rid)
        finally:
            await self._unload_adapters(self.adapters.end(lora))
        try:
            result = protocol.parse_generate_response(body)
        except protocol.ProtocolError as err:
            raise RunFailure(f"SGLang server {self.base_url}: {err}") from None
        if lora is not None:  # sampled by the adapter: its version, not the base's
            result.meta["lora_path"] = lora
            if adapter_version is not None:
                result.meta["weight_version"] = adapter_version
        self.stats["requests"] += 1
        self.stats["tokens"] += len(result.token_ids)
        return result

    async def drain(self, timeout_s: float | None = None) -> None:
        """Abort this client's requests still running on the server (their callers gave up, e.g.
        a trajectory timeout) and wait until their HTTP calls returned: SGLang 0.5.x's scheduler
        asserts it is idle when memory is released."""
        with self._inflight_lock:
            rids = list(self._inflight)
        for rid in rids:
            try:
                await self._call("POST", "/abort_request", {"rid": rid}, timeout_s=30)
            except RunFailure:
                pass  # finished meanwhile, or a server without the endpoint: wait below
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while self._inflight:
            if time.monotonic() > deadline:
                raise RunFailure(
                    f"SGLang server {self.base_url} still runs {len(self._inflight)} aborted "
                    "request(s); memory cannot be released under them"
                )
            await asyncio.sleep(0.02)

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, Any]], weight_version: str | None = None
    ) -> None:
        """Push full weights, bucket by bucket, by the configured path (tensor or disk).

        `weight_version` goes with the request that completes the push (the last bucket, or the
        disk load), so the server never reports it for half-loaded weights; then the server's
        version is read back into `self.weight_version`."""
        if self.weight_path == "disk":
            await self.update_weights_from_disk(named_tensors, weight_version)
            return
        await self.begin_weight_update()
        try:
            buckets = weight_sync.iter_buckets(named_tensors, self.bucket_mb)
            current = next(buckets, None)
            while current is not None:
                following = next(buckets, None)
                last = following is None
                await self.push_tensor_bucket(
                    current, flush_cache=last, weight_version=weight_version if last else None
                )
                current = following
        finally:
            await self.end_weight_update()
        await self.read_weight_version(weight_version)

    async def load_adapter(
        self,
        name: str,
        named_tensors: Iterable[tuple[str, Any]],
        config: dict,
        weight_version: str | None = None,
    ):
        """Push a LoRA adapter (peft file names, `adapter_config.json` content) under `name`
        and make it live; older versions this client loaded are unloaded once no request of
        this client names them (SGLang itself waits for its running requests).

        `weight_version` is the trainer's version of the adapter. No covered release takes it
        with the load (the server's version stays the base's), so this client keeps it: it
        becomes `self.weight_version`, and each result sampled with the adapter reports it in
        `meta["weight_version"]` (with the adapter's name in `meta["lora_path"]`)."""
        traits = await self.server_traits()
        lora_endpoints.refuse_release(traits.version, f"the SGLang server at {self.base_url}")
        named = [(n, weight_sync.full_tensor(t)) for n, t in named_tensors]
        body = await asyncio.to_thread(
            lora_endpoints.load_body, name, named, config, traits, self.tp_size
        )
        _check_success(await self._call("POST", lora_endpoints.LOAD_PATH, body), self.base_url)
        self.stats["weight_buckets"] += 1
        self.stats["weight_bytes"] += weight_sync.bucket_bytes(named)
        await self._unload_adapters(self.adapters.adopt(name, weight_version=weight_version))
        if weight_version is not None:
            self.weight_version = str(weight_version)

    def use_adapter(self, name: str, weight_version: str | None = None) -> None:
        """Name `name` (loaded by another client of this server, carrying `weight_version`) in
        this client's requests."""
        self.adapters.adopt(name, loaded=False, weight_version=weight_version)
        if weight_version is not None:
            self.weight_version = str(weight_version)

    async def _unload_adapters(self, names: list[str]) -> None:
        for name in names:
            body = lora_endpoints.unload_body(name)
            _check_success(
                await self._call("POST", lora_endpoints.UNLOAD_PATH, body), self.base_url
            )

    async def read_weight_version(self, expected: str | None = None) -> str | None:
        """The server's weight version (`/get_model_info`), kept in `self.weight_version`;
        RunFailure when a release that takes versions did not adopt `expected`."""
        traits = await self.server_traits()
        if not traits.weight_version:
            self.weight_version = None
            return None
        info = await self._call("GET", "/get_model_info")
        got = info.get("weight_version") if isinstance(info, dict) else None
        self.weight_version = None if got is None else str(got)
        if expected is not None and self.weight_version != str(expected):
            raise RunFailure(
                f"SGLang server {self.base_url} reports weight_version {got!r} after a push "
                f"that carried {expected!r}; the push did not take effect"
            )
        return self.weight_version

    async def begin_weight_update(self) -> None:
        """Open a weight-update session where the release has them (>= 0.5.21)."""
        if (await self.server_traits()).weight_sessions:
            _check_success(await self._call("POST", "/begin_weight_update", {}), self.base_url)

    async def end_weight_update(self) -> None:
        if (await self.server_traits()).weight_sessions:
            _check_success(await self._call("POST", "/end_weight_update", {}), self.base_url)

    async def push_tensor_bucket(
        self, bucket: weight_sync.Bucket, flush_cache: bool, weight_version: str | None = None
    ) -> None:
        """Send one bucket to `/update_weights_from_tensor`; flush the cache after the last one.

        CUDA tensors go only to a server of the trainer's own sglang release: their payload names
        the trainer's rebuild functions, which another release may not have."""
        traits = await self.server_traits()
        if weight_sync.is_cuda_bucket(bucket):
            check_same_release(sglang_version(), traits.version, self.base_url)
        body = await asyncio.to_thread(
            weight_sync.tensor_push_body,
            bucket,
            tp_size=self.tp_size,
            flush_cache=flush_cache,
            weight_version=weight_version if traits.weight_version else None,
        )
        _check_success(await self._call("POST", "/update_weights_from_tensor", body), self.base_url)
        self.stats["weight_buckets"] += 1
        self.stats["weight_bytes"] += weight_sync.bucket_bytes(bucket)

    async def update_weights_from_disk(
        self, named_tensors: Iterable[tuple[str, Any]], weight_version: str | None = None
    ) -> Path:
        """Write shards into a fresh shared-memory folder, have the server load it, remove it."""
        folder = weight_sync.new_weights_dir(self.weights_dir)
        try:
            await asyncio.to_thread(
                weight_sync.write_shards, named_tensors, folder, self.bucket_mb, self.hf_config
            )
            await self.load_weights_from_folder(folder, weight_version)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return folder

    async def load_weights_from_folder(
        self, folder: str | Path, weight_version: str | None = None
    ) -> None:
        body = {"model_path": str(folder), "load_format": None}
        if weight_version is not None and (await self.server_traits()).weight_version:
            body["weight_version"] = str(weight_version)
        _check_success(await self._call("POST", "/update_weights_from_disk", body), self.base_url)
        self.stats["weight_buckets"] += 1
        await self.read_weight_version(weight_version)

    async def sleep(self, tags: Sequence[str] | None = None) -> None:
        """Release GPU memory so the trainer can use it: by default every tag the server's release
        knows (0.5.x: weights, kv_cache and cuda_graph). Call `drain()` first.

        SGLang frees released weights rather than offloading them: after `wake`, push weights
        (`update_weights`) before generating. `mua serve` keeps them, which is harmless.
        """
        traits = await self.server_traits()
        wanted = [t for t in (tags or traits.memory_tags) if t not in self.released]
        if not wanted:
            return
        body = {"tags": wanted}
        _check_success(await self._call("POST", "/release_memory_occupation", body), self.base_url)
        self.released |= set(wanted)

    async def wake(self, tags: Sequence[str] | None = None) -> None:
        """Resume the released tags among `tags` (all released ones by default). A tag this client
        did not release is never resumed: SGLang's scheduler dies resuming an unreleased tag."""
        released = (
            sorted(self.released) if tags is None else [t for t in tags if t in self.released]
        )
        if not released:
            return
        body = {"tags": released}
        _check_success(await self._call("POST", "/resume_memory_occupation", body), self.base_url)
        self.released -= set(released)

    async def flush_cache(self) -> None:
        await self._call("POST", "/flush_cache")

    async def pause_generation(self, mode: str = "abort") -> None:
        """Hold new requests until `continue_generation` (SGLang's /pause_generation). `mode`
        (`abort`, `retract`, `in_place`) needs a release that takes it (`pause_modes`); every
        covered release aborts running requests by default."""
        body = pause_request_body(await self.server_traits(), mode)
        await self._call("POST", "/pause_generation", body)

    async def continue_generation(self) -> None:
        """Let a paused server take requests again (SGLang's /continue_generation)."""
        await self._call("POST", "/continue_generation", {})

    async def abort_all(self) -> None:
        """Abort every request running on the server (SGLang's /abort_request, abort_all)."""
        await self._call("POST", "/abort_request", {"abort_all": True})

    async def health(self, timeout_s: float = 10.0) -> bool:
        try:
            await self._call("GET", "/health", timeout_s=timeout_s)
            return True
        except RunFailure:
            return False

    async def model_info(self) -> dict:
        return await self._call("GET", "/get_model_info")

    async def close_connections(self) -> None:
        """Close this event loop's connections to the server (other loops' close with them)."""
        await self._sessions.aclose()

    async def close(self) -> None:
        """Close this loop's connections and stop the server process this engine launched."""
        await self._sessions.aclose()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


_JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def pause_request_body(traits: ReleaseTraits, mode: str = "abort") -> dict:
    """The /pause_generation body a release takes: PauseGenerationReqInput's `mode` where it has
    one, else none (a pause then aborts what runs); UsageError for a mode it cannot honour."""
    if traits.pause_modes:
        return {"mode": mode}
    if mode != "abort":
        raise UsageError(
            f"SGLang {traits.version} pauses by aborting only; pause mode {mode!r} needs a "
            "newer release"
        )
    return {}


def _encode(body: Any) -> bytes:
    return json.dumps(body).encode()


class _PromptJSON:
    """The JSON text of each conversation's prompt ids, extended turn by turn: a turn's prompt is
    the previous one plus what came since, so only that tail is serialized again."""

    KEEP = 4096  # conversations remembered (the oldest go first)

    def __init__(self) -> None:
        self._last: dict[str, tuple[list[int], str]] = {}

    def json_of(self, route_key: str, prompt_ids: Sequence[int], keep: bool = True) -> str:
        known = self._last.pop(route_key, None) if route_key else None
        if known is not None and prompt_ids[: len(known[0])] == known[0] and known[0]:
            ids, text = known
            tail = list(map(int, prompt_ids[len(ids) :]))
            if tail:
                ids = ids + tail
                text = text[:-1] + ", " + ", ".join(map(str, tail)) + "]"
        else:
            ids = list(map(int, prompt_ids))
            text = json.dumps(ids)
        if route_key and keep:
            self._last[route_key] = (ids, text)
            if len(self._last) > self.KEEP:
                del self._last[next(iter(self._last))]
        return text


def _read_body(raw: bytes) -> Any:
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"text": raw.decode(errors="replace")}  # /flush_cache answers plain text


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


# ---- launching a real SGLang server ------------------------------------------------------------


def sglang_version() -> str | None:
    """The installed SGLang version, or None; never imports sglang itself."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def check_same_release(trainer: str | None, server: str, base_url: str) -> None:
    """RunFailure (one line) unless the trainer's sglang release is the server's: a CUDA tensor
    push pickles the trainer's rebuild functions, which the server must have under those names."""
    if trainer != server:
        raise RunFailure(
            f"cannot push CUDA tensors to the SGLang server at {base_url}: it runs sglang {server} "
            f"and this trainer has {trainer or 'no sglang'} installed; install sglang=={server} "
            "in the trainer's environment or use rollout.sglang.weight_path=disk"
        )
