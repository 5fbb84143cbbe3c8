"""`mua serve`: SGLang's native HTTP protocol and an OpenAI chat endpoint over any RolloutEngine.

Emulates one SGLang release (`--sglang-release`) so the client code that drives SGLang on GPU
runs in CI against mua's transformers engine (docs/sglang.md, "`mua serve`"). The engine and the
HTTP listener share one asyncio loop in a background thread; weight, memory and cache calls run
in a small thread pool. This module holds the life cycle, generation, pause/abort and routing.
Not here: weights and memory (`weight_routes`), chat (`chat_route`), LoRA (`lora_routes`),
error bodies (`refusals`).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import mua
from mua.engines.sglang import protocol
from mua.engines.sglang.protocol import ProtocolError
from mua.engines.sglang.releases import DEFAULT_WEIGHT_VERSION, NEWEST_COVERED, ReleaseTraits
from mua.serve.chat_route import ChatRoute
from mua.serve.http_front import BadBody, Listener, start_listener
from mua.serve.lora_routes import LoraRoutes
from mua.serve.refusals import HTTPError, Refused, error_body
from mua.serve.weight_routes import WeightRoutes


class MuaServer(WeightRoutes, ChatRoute):
    """An HTTP front for one RolloutEngine. `start()` runs it on an event loop in a background
    thread."""

    def __init__(
        self,
        engine,
        tokenizer=None,
        *,
        model_path: str = "",
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        request_timeout_s: float = 600.0,
        sglang_release: str = NEWEST_COVERED,
        eos_token_ids: list[int] | None = None,
    ):
        self.engine = engine
        # SGLang stops every request at the model's end-of-sequence ids (its config's
        # eos_token_id) besides the request's own stop ids, unless sampling_params.ignore_eos
        self.eos_token_ids = [int(t) for t in eos_token_ids or ()]
        self.traits = ReleaseTraits.of(sglang_release)
        self.weight_session_open = False
        self._running: dict[str, int] = {}  # rid -> requests running under it
        self._running_lock = threading.Lock()
        self.call_log: list[dict] = []  # weight and memory calls, in order (tests read it)
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.model_name = model_name or model_path or "mua"
        self.host, self.port = host, port
        self.request_timeout_s = request_timeout_s
        self.released_tags: set[str] = set()
        self.weight_version = DEFAULT_WEIGHT_VERSION  # moved only by a push that carries one
        self.counts = {"generate": 0, "chat": 0, "weight_requests": 0, "flushes": 0}
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._listener: Listener | None = None
        self._calls = ThreadPoolExecutor(max_workers=8, thread_name_prefix="mua-serve-call")
        self._unpaused = asyncio.Event()  # cleared by /pause_generation
        self._unpaused.set()
        self.lora = LoraRoutes(self)

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> MuaServer:
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="mua-serve-engine", daemon=True
        )
        self._thread.start()
        try:
            self._listener = self._run(start_listener(self._dispatch, self.host, self.port), 30)
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise
        self.port = self._listener.port
        return self

    def stop(self) -> None:
        if self._loop.is_running():
            if self._listener is not None:
                try:
                    self._run(self._listener.close(), timeout_s=30)
                except Exception:
                    pass
            close = getattr(self.engine, "close", None)
            if close is not None:
                try:
                    self._run(close(), timeout_s=30)
                except Exception:
                    pass
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()
        self._calls.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> MuaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self, coro, timeout_s: float | None = None):
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=timeout_s or self.request_timeout_s)

    # ---- SGLang-native endpoints ----------------------------------------------------------

    def info(self) -> dict:
        return {
            "version": self.traits.version,
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            **self._version_field(),
            "served_by": "mua",
        }

    def server_info(self) -> dict:
        return {
            "version": self.traits.version,  # the SGLang release emulated
            "mua_version": mua.__version__,
            "mua_serve": True,
            "enable_deterministic_inference": self.traits.sampling_seed,  # seeds are honoured
            "model_path": self.model_path,
            "released_tags": sorted(self.released_tags),
            **self._version_field(),
            "counts": dict(self.counts),
            "call_log": list(self.call_log),
        }

    def _require_awake(self) -> None:
        if self.released_tags:
            raise HTTPError(
                503,
                f"memory released ({', '.join(sorted(self.released_tags))}); "
                "POST /resume_memory_occupation first",
            )

    async def generate(self, body: Any) -> Any:
        from mua.engines.engine_contract import GenerationRequest

        await self._unpaused.wait()  # as SGLang, a paused server holds new requests
        self._require_awake()
        self._check_sampling_fields(body)
        prompts = protocol.parse_generate_body(body)
        if self.eos_token_ids:
            params = body.get("sampling_params")
            ignore = [
                bool(isinstance(sp, dict) and sp.get("ignore_eos"))
                for sp in (params if isinstance(params, list) else [params] * len(prompts))
            ]
            for (_, sp, _), skip in zip(prompts, ignore, strict=False):
                if not skip:
                    sp.stop_token_ids = sorted(set(sp.stop_token_ids) | set(self.eos_token_ids))
        requests = [
            GenerationRequest(prompt_ids=ids, sampling=sp, request_id=rid or uuid.uuid4().hex)
            for ids, sp, rid in prompts
        ]
        rids = [r.request_id for r in requests]
        self._start_running(rids)
        try:
            lora = await self.lora.begin(body, len(requests))
        except BaseException:
            self._stop_running(rids)
            raise
        try:
            results = await asyncio.wait_for(
                asyncio.gather(*(self.engine.generate(r) for r in requests)),
                self.request_timeout_s,
            )
        finally:
            await self.lora.end(lora, len(requests))
            self._stop_running(rids)
        self.counts["generate"] += len(requests)
        version = self.weight_version if self.traits.weight_version else None
        out = [
            protocol.generate_response(
                res, len(req.prompt_ids), req.request_id, self._decode(res.token_ids), version
            )
            for req, res in zip(requests, results, strict=True)
        ]
        single = not isinstance(body["input_ids"][0], list)
        return out[0] if single else out

    def _check_sampling_fields(self, body: Any) -> None:
        params = body.get("sampling_params") if isinstance(body, dict) else None
        for sp in params if isinstance(params, list) else [params]:
            if isinstance(sp, dict) and "sampling_seed" in sp and not self.traits.sampling_seed:
                raise ProtocolError(
                    "SamplingParams.__init__() got an unexpected keyword argument 'sampling_seed' "
                    f"(SGLang {self.traits.version})"
                )

    def _start_running(self, rids: list[str]) -> None:
        with self._running_lock:
            taken = [r for r in rids if r in self._running] or (
                [r for r in rids if rids.count(r) > 1]
            )
            if taken:
                raise ProtocolError(f"Duplicate request ID detected: {taken[0]}")
            for rid in rids:
                self._running[rid] = 1

    def _stop_running(self, rids: list[str]) -> None:
        with self._running_lock:
            for rid in rids:
                self._running.pop(rid, None)

    def abort(self, body: Any) -> dict:
        self._log("abort_request", body)
        return {}

    def pause_generation(self, body: Any) -> dict:
        """SGLang's pause: new /generate requests wait for /continue_generation. Generations
        already running finish (mua serve does not stop a running generation, see above)."""
        self._log("pause_generation", body)
        mode = (body or {}).get("mode", "abort") if isinstance(body, dict) else "abort"
        if self.traits.pause_modes and mode not in ("abort", "retract", "in_place"):
            raise ProtocolError(f"pause mode must be abort, retract or in_place, not {mode!r}")
        self._loop.call_soon_threadsafe(self._unpaused.clear)
        return {"message": "Generation paused successfully.", "status": "ok"}

    def continue_generation(self, body: Any) -> dict:
        self._log("continue_generation", body)
        self._loop.call_soon_threadsafe(self._unpaused.set)
        return {"message": "Generation continued successfully.", "status": "ok"}

    def _log(self, call: str, body: Any, **extra) -> None:
        entry = {"call": call, **extra}
        if isinstance(body, dict) and "tags" in body:
            entry["tags"] = body.get("tags")
        self.call_log.append(entry)

    # ---- OpenAI-compatible chat -----------------------------------------------------------
    def _decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids) if self.tokenizer is not None else ""

    # ---- routing --------------------------------------------------------------------------

    async def _dispatch(self, method: str, target: str, body: Any) -> tuple[int, Any]:
        """(status, JSON payload) of one HTTP request; errors become their status codes.
        Generation and chat are awaited on this loop; every other call, which waits on the
        engine itself, runs in the call pool."""
        path = target.split("?", 1)[0].rstrip("/") or "/"
        try:
            if isinstance(body, BadBody):
                raise ProtocolError(str(body))
            awaited = self._awaited_posts().get(path) if method == "POST" else None
            if awaited is not None:
                payload = await awaited(body)
            else:
                loop = asyncio.get_running_loop()
                payload = await loop.run_in_executor(self._calls, self.route, method, path, body)
            return 200, payload
        except HTTPError as err:
            return err.status, error_body(str(err), path)
        except Refused as err:
            return 400, {"success": False, "message": str(err)}
        except (ProtocolError, ValueError) as err:
            return 400, error_body(str(err), path)
        except TimeoutError:
            return 504, error_body("the engine did not answer in time", path)
        except Exception as err:  # the engine failed: tell the client, keep serving
            return 500, error_body(f"{type(err).__name__}: {err}", path)

    def _awaited_posts(self) -> dict:
        """The POST calls served on the event loop itself."""
        return {"/generate": self.generate, "/v1/chat/completions": self.chat}

    def route(self, method: str, path: str, body: Any) -> Any:
        """The answer to a call other than `_awaited_posts` (`path` without its query)."""
        gets = {
            "/health": lambda: {},
            "/health_generate": lambda: {},
            "/get_model_info": self.info,
            "/get_server_info": self.server_info,
            "/server_info": self.server_info,
            "/flush_cache": self.flush_cache,
            "/v1/models": lambda: {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "owned_by": "mua"}],
            },
        }
        posts = {
            "/update_weights_from_tensor": self.update_from_tensor,
            "/update_weights_from_disk": self.update_from_disk,
            "/abort_request": self.abort,
            "/pause_generation": self.pause_generation,
            "/continue_generation": self.continue_generation,
            "/release_memory_occupation": self.release,
            "/resume_memory_occupation": self.resume,
            "/flush_cache": lambda _b: self.flush_cache(),
        }
        posts.update(self.lora.posts())
        if self.traits.weight_sessions:
            posts["/begin_weight_update"] = self.begin_weight_update
            posts["/end_weight_update"] = self.end_weight_update
        if method == "GET" and path in gets:
            return gets[path]()
        if method == "POST" and path in posts:
            return posts[path](body)
        if path in gets or path in posts or path in self._awaited_posts():
            raise HTTPError(405, f"{method} is not allowed on {path}")
        raise HTTPError(404, f"no endpoint {path}")
