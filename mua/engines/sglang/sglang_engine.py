"""The `sglang` RolloutEngine: a client of SGLang's native HTTP protocol (docs/sglang.md).

`SGLangEngine` speaks to one server, a real SGLang server or `mua serve`, with the same bodies
and calls: generation from token ids with log-probs, weight pushes, memory release/resume by tag,
cache flushes, LoRA adapters by versioned name. Release differences are read from the server's
`version`; `drain()` aborts and waits for this client's requests before memory is released.
Every call goes over aiohttp on the caller's loop. Not here: launching (`sglang_launch`), push
calls (`weight_push`), bodies (`http_bodies`), several servers (`engine_pool`), NCCL, routers.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from itertools import count
from typing import Any, Literal

import aiohttp

from mua.engines.adapter_versions import AdapterVersions
from mua.engines.engine_contract import GenerationRequest, GenerationResult
from mua.engines.sglang import protocol
from mua.engines.sglang.http_bodies import (
    JSON_HEADERS,
    PromptJSON,
    check_success,
    encode_body,
    read_body,
    routed_experts,
    server_message,
)
from mua.engines.sglang.releases import ReleaseTraits
from mua.engines.sglang.weight_push import WeightPushes, check_same_release, sglang_version
from mua.errors import RunFailure
from mua.http_session import LoopSessions

__all__ = [
    "SGLangEngine",
    "ServerHTTPError",
    "WeightPath",
    "check_same_release",
    "sglang_version",
]

WeightPath = Literal["tensor", "disk"]


class ServerHTTPError(RunFailure):
    """The server answered with an HTTP error status (kept, so callers can tell 404 from 400)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class SGLangEngine(WeightPushes):
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
        api_key: str | None = None,
        routed_experts: bool = False,
    ):
        self.base_url, self.process = base_url.rstrip("/"), process
        # a mixture of experts: ask for every fed token's experts (needs `hf_config`)
        self.routed_experts = routed_experts
        self.api_key = api_key  # a launched server's key (sglang_launch), sent with every request
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._headers = {**JSON_HEADERS, **auth}
        self.weight_path, self.weights_dir, self.bucket_mb = weight_path, weights_dir, bucket_mb
        self.tp_size, self.timeout_s, self.hf_config = tp_size, timeout_s, hf_config
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
        self._prompts = PromptJSON()
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
        data = None if body is None else await asyncio.to_thread(encode_body, body)
        return await self._send(method, path, data, timeout_s or self.timeout_s, rid)

    async def _send(
        self, method: str, path: str, data: bytes | None, timeout_s: float, rid: str | None
    ) -> Any:
        if rid is not None:
            self._track(rid, 1)
        try:
            status, raw, location = await self._sessions.fetch(
                method, self.base_url + path, data=data, headers=self._headers, timeout_s=timeout_s
            )
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
                f"{server_message(raw)}",
                status,
            )
        return read_body(raw)

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

    async def server_info(self) -> dict:
        """The server's `/get_server_info` answer ({} when it is not a JSON object)."""
        info = await self._call("GET", "/get_server_info")
        return info if isinstance(info, dict) else {}

    async def server_traits(self) -> ReleaseTraits:
        """The release facts of this server, read once from `/get_server_info`."""
        if self.traits is None:
            info = await self.server_info()
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
        traits = await self.server_traits()
        # a release without the field is refused before launch when replay needs them
        routes = self.routed_experts and traits.routed_experts
        rid = self.request_id(request)
        ids_json = self._prompts.json_of(request.route_key, request.prompt_ids, request.keep_prefix)
        lora = self.adapters.begin()  # the live adapter, counted in flight until answered
        adapter_version = self.adapters.version_of(lora)
        try:
            data = protocol.generate_body_json(
                request, ids_json, rid, self.seeds_honoured, lora, routes
            )
            body = await self._post_generate(data, rid)
        finally:
            await self._unload_adapters(self.adapters.end(lora))
        try:
            result = protocol.parse_generate_response(body)
            if routes:
                fed = len(request.prompt_ids) + len(result.token_ids) - 1
                record = routed_experts(body["meta_info"], fed, self.hf_config)
                if record is not None:
                    result.meta["routed_experts"] = record
        except (protocol.ProtocolError, ValueError) as err:
            raise RunFailure(f"SGLang server {self.base_url}: {err}") from None
        # sampled by an adapter: its version, not the base's (the base's is in the server's meta)
        return result.counted(self.stats, lora, adapter_version if lora is not None else None)

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
        check_success(await self._call("POST", "/release_memory_occupation", body), self.base_url)
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
        check_success(await self._call("POST", "/resume_memory_occupation", body), self.base_url)
        self.released -= set(released)

    async def flush_cache(self) -> None:
        await self._call("POST", "/flush_cache")

    async def health(self, timeout_s: float = 10.0) -> bool:
        try:
            await self._call("GET", "/health", timeout_s=timeout_s)
            return True
        except RunFailure:
            return False

    async def close_connections(self) -> None:
        """Close this event loop's connections to the server (other loops' close with them)."""
        await self._sessions.aclose()

    async def close(self) -> None:
        """Close this loop's connections and stop the server process this engine launched."""
        await self._sessions.aclose()
        stop_process(self.process)


def stop_process(process: subprocess.Popen | None) -> None:
    """Stop a launched server: terminate, then kill after 30 s (nothing when None or ended)."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
