"""`Gateway`: the aiohttp app agent programs call, one session per program run.

Routes (docs/gateway.md) need a session key (bearer, `x-api-key` or the `/s/<key>` prefix, which
wins); the three chat APIs are read into one `ChatRequest` and answered by one `answer` under the
session's lock: prompt by the prefix rule, sampled, read by `mua.gateway.reply_reader`. Making the
prompt and reading the reply run in a worker thread. Every error is JSON; an engine failure is a
500 kept on the session (`failure`) so a training run stops. Binds 127.0.0.1 unless told otherwise.
Not here: the prefix rule, the wire checks (`mua.gateway.openai_wire`), running programs.
"""

from __future__ import annotations

import asyncio
import secrets

from aiohttp import web

from mua.engines.engine_contract import GenerationRequest, SamplingParams
from mua.families.json_calls import deeper_than
from mua.gateway.env_routes import env_reset, env_step
from mua.gateway.messages_wire import message_events, message_object, read_messages
from mua.gateway.openai_wire import (
    ChatRequest,
    Reply,
    WireError,
    completion,
    read_request,
    stream_events,
)
from mua.gateway.reply_reader import ReadTurn, read_turn
from mua.gateway.responses_wire import (
    output_items,
    read_responses,
    remember,
    response_events,
    response_object,
)
from mua.gateway.session import BudgetSpent, Segment, Session, SessionLimits, normal_message
from mua.gateway.structured import unmet

MAX_BODY_BYTES = 64 << 20
MAX_JSON_DEPTH = 64  # containers in a request body; tool schemas need a handful
ROUTES = (
    "POST /v1/chat/completions",
    "POST /v1/responses",
    "POST /v1/messages",
    "GET /v1/models",
    "GET /v1/session",
    "POST /v1/env/reset",
    "POST /v1/env/step",
)


class Gateway:
    """Sessions by key and the HTTP app that serves them (see the module docstring)."""

    def __init__(
        self,
        tokenizer,
        *,
        engine=None,
        model_name: str = "mua-policy",
        tool_parser: str = "auto",
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.tokenizer, self.engine = tokenizer, engine
        self.model_name, self.tool_parser = model_name, tool_parser
        self.host, self.port = host, port
        self.sessions: dict[str, Session] = {}
        self._runner: web.AppRunner | None = None

    # sessions ---------------------------------------------------------------------------------
    def open_session(
        self, key: str | None = None, limits: SessionLimits | None = None, **context
    ) -> Session:
        """A new session (a fresh random key unless given); `context` may hold `policy` (its
        `generate` samples, at its own temperature) and `seed_key`."""
        key = key or f"mua-{secrets.token_urlsafe(18)}"
        if key in self.sessions:
            raise ValueError(f"session key {key!r} is taken")
        session = self.sessions[key] = Session(key, self.tokenizer, limits, **context)
        return session

    def close_session(self, key: str) -> Session | None:
        return self.sessions.pop(key, None)

    # serving ----------------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_errors])
        for prefix in ("", "/s/{key}"):
            app.router.add_post(f"{prefix}/v1/chat/completions", self._chat)
            app.router.add_post(f"{prefix}/v1/responses", self._responses)
            app.router.add_post(f"{prefix}/v1/messages", self._messages)
            app.router.add_get(f"{prefix}/v1/models", self._models)
            app.router.add_get(f"{prefix}/v1/session", self._session_info)
            app.router.add_post(f"{prefix}/v1/env/reset", self._env_reset)
            app.router.add_post(f"{prefix}/v1/env/step", self._env_step)
        return app

    async def start(self) -> Gateway:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def base_url(self, key: str | None = None) -> str:
        root = f"http://{self.host}:{self.port}"
        return f"{root}/s/{key}/v1" if key else f"{root}/v1"

    def _session(self, request: web.Request) -> Session:
        key = request.match_info.get("key")
        if not key:
            auth = request.headers.get("Authorization", "")
            key = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            key = key or request.headers.get("x-api-key", "").strip()
        session = self.sessions.get(key) if key else None
        if session is None:
            raise WireError(
                401,
                "unknown or missing session key; send the OPENAI_API_KEY (or ANTHROPIC_API_KEY) "
                "the program was started with as the bearer key or x-api-key",
                code="invalid_api_key",
            )
        return session

    async def _models(self, request: web.Request) -> web.Response:
        self._session(request)
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": self.model_name, "object": "model", "owned_by": "mua"}],
            }
        )

    async def _session_info(self, request: web.Request) -> web.Response:
        session = self._session(request)
        return web.json_response(
            {
                "turns": session.turns,
                "samples": len(session.segments),
                "apis": dict(session.apis),
                **session.metrics(),
            }
        )

    async def _env_reset(self, request: web.Request) -> web.Response:
        session = self._session(request)
        async with session.lock:
            return web.json_response(await env_reset(session.context.get("env")))

    async def _env_step(self, request: web.Request) -> web.Response:
        session = self._session(request)
        body = await _json_body(request)
        async with session.lock:
            return web.json_response(await env_step(session.context.get("env"), body))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        session.apis["chat"] += 1
        req = read_request(await _json_body(request))
        reply = await self.answer(session, req)
        model = req.model or self.model_name
        if not req.stream:
            return web.json_response(completion(reply, model))
        return await _stream(request, stream_events(reply, model, req.include_usage))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        session.apis["responses"] += 1
        body = await _json_body(request)
        req, conversation = read_responses(body, session.responses)
        req.model = req.model or self.model_name
        reply = await self.answer(session, req)
        rid = f"resp_{secrets.token_hex(12)}"
        response = response_object(reply, req, body, rid, output_items(reply))
        if body.get("store", True) is not False:
            said = {"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls}
            remember(session.responses, rid, [*conversation, normal_message(said)])
        if not req.stream:
            return web.json_response(response)
        return await _stream(request, response_events(response))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        session.apis["messages"] += 1
        req = read_messages(await _json_body(request))
        reply = await self.answer(session, req)
        message = message_object(reply, req.model or self.model_name)
        if not req.stream:
            return web.json_response(message)
        return await _stream(request, message_events(message))

    # one turn ---------------------------------------------------------------------------------
    async def answer(self, session: Session, req: ChatRequest) -> Reply:
        """Sample and record one turn of `session` for `req` (see the module docstring)."""
        async with session.lock:
            session.requests += 1
            policy = session.context.get("policy")
            if policy is not None and req.temperature is not None:
                if abs(req.temperature - policy.temperature) > 1e-6:
                    raise WireError(
                        400,
                        f"temperature {req.temperature:g}: this run samples and trains at "
                        f"{policy.temperature:g}; leave temperature out or send "
                        f"{policy.temperature:g}",
                        "temperature",
                    )
            plan = await asyncio.to_thread(session.plan, req.messages, req.tools)
            try:
                room = session.check_budget(plan)
            except BudgetSpent as e:
                raise WireError(400, f"{e}; the episode is over", code=e.reason) from None
            seg = session.commit(plan)
            try:
                result = await self._sample(
                    session, seg, plan.ids, min(room, req.max_tokens or room), req
                )
            except Exception as e:
                session.failure = e
                raise
            template = getattr(self.tokenizer, "chat_template", None)
            renderer = seg.builder.renderer
            tail = renderer.decode(plan.ids[-8:])
            turn = await asyncio.to_thread(
                read_turn, renderer, result, req, self.tool_parser, template, tail
            )
            routes = (getattr(result, "meta", None) or {}).get("routed_experts")
            return self._record(session, seg, turn, len(plan.ids), req, routes)

    async def _sample(self, session: Session, seg: Segment, prompt: list[int], max_new: int, req):
        stop_ids = seg.builder.renderer.stop_token_ids()
        policy = session.context.get("policy")
        if policy is not None:
            return await policy.generate(
                prompt,
                max_new,
                stop_ids,
                route_key=session.key,
                seed_key=session.context.get("seed_key"),
                turn=session.turns,
            )
        temperature = 1.0 if req.temperature is None else req.temperature
        sampling = SamplingParams(
            temperature=temperature, max_new_tokens=max_new, stop_token_ids=stop_ids
        )
        return await self.engine.generate(
            GenerationRequest(prompt_ids=list(prompt), sampling=sampling, route_key=session.key)
        )

    def _record(
        self, session: Session, seg: Segment, turn: ReadTurn, prompt_len: int, req: ChatRequest,
        routes=None,
    ) -> Reply:  # fmt: skip
        session.sampled_tokens += len(turn.ids) + turn.dropped
        session.dropped_tokens += turn.dropped
        session.malformed += int(turn.malformed)
        bad_format, bad_choice = unmet(req, turn.content, turn.calls)
        session.structured_invalid += int(bad_format)
        session.tool_choice_unmet += int(bad_choice)
        message = {"role": "assistant", "content": turn.content}
        if turn.calls:
            message["tool_calls"] = turn.calls
        message = normal_message(message)
        session.record_turn(seg, turn.ids, turn.logprobs, turn.stopped, message, routes)
        return Reply(
            turn.content, turn.calls, turn.finish, prompt_len, len(turn.ids), turn.stop_string
        )


async def _json_body(request: web.Request):
    """The request's JSON body; a 400 when it is not JSON or nests deeper than MAX_JSON_DEPTH
    (the standard library would exhaust the recursion limit reading or writing it)."""
    try:
        body = await request.json()
        too_deep = deeper_than(body, MAX_JSON_DEPTH)
    except RecursionError:
        too_deep = True
    except ValueError as e:
        raise WireError(400, f"the body is not JSON: {e}") from None
    if too_deep:
        raise WireError(
            400,
            f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep; the gateway reads "
            "at most that many: flatten it",
        )
    return body


async def _stream(request: web.Request, events: list[str]) -> web.StreamResponse:
    out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await out.prepare(request)
    for event in events:
        await out.write(event.encode())
    await out.write_eof()
    return out


def _route_error(request: web.Request, e: web.HTTPException) -> WireError:
    """An unknown route or method as a JSON error naming the routes served."""
    served = f"the gateway serves {', '.join(ROUTES)} (each also under /s/<key>)"
    if e.status == 405:
        return WireError(405, f"{request.method} {request.path} is not served; {served}")
    if e.status == 404:
        return WireError(404, f"{request.method} {request.path} is not served; {served}")
    return WireError(e.status, f"{request.method} {request.path}: {e.reason}")


@web.middleware
async def _errors(request: web.Request, handler):
    anthropic = "/v1/messages" in request.path
    try:
        return await handler(request)
    except WireError as e:
        err = e
    except web.HTTPException as e:
        if e.status < 400:
            raise
        err = _route_error(request, e)
    except Exception as e:  # an engine failure: the caller sees it, the session keeps it
        err = WireError(500, f"the gateway failed: {type(e).__name__}: {e}", code="server_error")
    return web.json_response(err.body(anthropic), status=err.status)
