"""verifiers in its own environment: `SIDE_PYTHON gyms/verifiers/bridge.py ENV_ID ENV_ARGS_JSON`.

Run with the Python of a venv that has `verifiers` 0.4.0 and the environment package (their
pins are not mua's). It loads the environment by id (its taskset, its `Env`, its harness) with
every seat on the local `subprocess` runtime and the interception server on loopback, unless
the arguments say otherwise, and serves one JSON request a line on stdin, answering one JSON
line on stdout with the request's `id`:
  {"op": "tasks"}                         -> {"rows": [{"id", "prompt", "data"}]}
  {"op": "reset", "session": S, "data"}   -> {"messages", "tools", "done": false}
  {"op": "step", "session": S, "reply"}   -> {"messages", "done"} or, at the end,
                                             {"messages": [], "done": true, "reward", "components"}
  {"op": "close", "session": S}           -> {}
or {"id", "error"}. An episode is the environment's own `run_episode`: its model calls reach an
OpenAI-compatible endpoint of this bridge (one path per session), whose answer is the reply
mua sends with the next `step`; the reward is the task's own rewards on the model's trace.
`--prepare` (with network, once) prepares the chat harness's script environment and locks it,
under the venv's folder, so episodes need no network. Imports nothing of mua.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path

SIDE = Path(sys.prefix).parent  # the side folder holding the venv (tests/.verifiers)


def use_side_folder() -> None:
    """uv (from the venv), its cache and the harness scripts under the side folder; offline
    (frozen to the lock `--prepare` wrote) once prepared."""
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    os.environ["UV_CACHE_DIR"] = str(SIDE / "uv-cache")
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    SubprocessRuntime.scripts_dir = str(SIDE / "scripts")
    if any((SIDE / "scripts").glob("*.py.lock")):
        os.environ["UV_FROZEN"] = "1"


def local_config(env_id: str, env_args: dict):
    """The environment's config: `env_args` over {taskset: {id}}, each seat on the local
    subprocess runtime and the interception server on loopback unless `env_args` names them."""
    import verifiers.v1 as vf
    from verifiers.v1.configs.agent import agent_config_fields

    raw = dict(env_args)
    raw["taskset"] = {**(raw.get("taskset") or {}), "id": env_id}
    raw.setdefault("interception", {"type": "server"})
    for seat in agent_config_fields(vf.resolve_env_config(raw)):
        spec = raw[seat] = dict(raw.get(seat) or {})
        spec.setdefault("runtime", {"type": "subprocess"})
    return vf.resolve_env_config(raw)


def text_of(content) -> str:
    if isinstance(content, str) or content is None:
        return content or ""
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def for_mua(message: dict, names: dict) -> dict:
    """An OpenAI-style message of the environment's conversation, as mua keeps it."""
    out = {"role": message["role"], "content": text_of(message.get("content"))}
    if message["role"] == "tool":
        out["name"] = names.get(message.get("tool_call_id"), "")
        out["tool_call_id"] = message.get("tool_call_id", "")
    return out


def task_rows(env) -> list[dict]:
    if not env.taskset.bounded:
        raise ValueError("the taskset is infinite; bound it in env_args (e.g. its size option)")
    rows = []
    for task in env.taskset:
        data = task.data
        prompt = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
        if isinstance(data.prompt, str):
            prompt.append({"role": "user", "content": data.prompt})
        elif data.prompt:
            prompt += [for_mua(m.model_dump(exclude_none=True), {}) for m in data.prompt]
        rows.append(
            {"id": data.id or str(data.idx), "prompt": prompt,
             "data": data.model_dump(mode="json", exclude_none=True)}
        )  # fmt: skip
    return rows


class Session:
    """One episode: the environment's `run_episode` on a task, and the model turn it awaits."""

    def __init__(self, env, task, base_url: str):
        from verifiers.v1.clients import EvalClientConfig, ModelContext

        self.events: asyncio.Queue = asyncio.Queue()
        self.shown: list[dict] | None = None  # the conversation the model has seen
        self.reply: asyncio.Future | None = None
        self.names: dict[str, str] = {}
        self.run_id = None
        client = EvalClientConfig(base_url=base_url, api_key_var="MUA_VERIFIERS_KEY")
        ctx = ModelContext(model="mua", client=client)
        self.runner = asyncio.ensure_future(self._run(env, task, ctx))

    async def _run(self, env, task, ctx) -> None:
        try:
            await self.events.put(("end", await env.run_episode(task, ctx)))
        except Exception as e:  # noqa: BLE001 - reported to mua, which ends the episode
            await self.events.put(("error", f"{type(e).__name__}: {e}"))

    async def next(self) -> dict:
        """What follows: the model's next turn (the messages new to it) or the episode's end."""
        event = await self.events.get()
        if event[0] == "error":
            raise RuntimeError(f"the episode failed: {event[1]}")
        if event[0] == "end":
            return self._end(event[1])
        _, body, run_id, self.reply = event
        if self.run_id not in (None, run_id):
            raise RuntimeError(
                "a second agent run asked the model; mua plays one seat: name the other "
                "seats' model and client in env_args"
            )
        self.run_id = run_id
        messages = [for_mua(m, self.names) for m in body.get("messages") or []]
        first = self.shown is None
        seen = 0 if first else len(self.shown)
        if not first and [m["role"] for m in messages[:seen]] != [m["role"] for m in self.shown]:
            raise RuntimeError("the model's next request does not continue its conversation")
        self.shown = messages
        answer = {"messages": messages[seen:], "done": False}
        return {**answer, "tools": body.get("tools") or []} if first else answer

    def _end(self, episode) -> dict:
        if self.shown is None:
            raise RuntimeError(f"the episode ended before the model's first turn{errors(episode)}")
        traces = [t for t in episode.traces if t.id == self.run_id]
        if not episode.ok or len(traces) != 1 or not traces[0].ok:
            raise RuntimeError(f"the episode failed{errors(episode)}")
        rewards = traces[0].rewards
        components = {k: r.value if r is not None else None for k, r in rewards.items()}
        bad = {k: v for k, v in components.items() if v is None or not math.isfinite(v)}
        if bad:
            raise RuntimeError(f"the rewards {bad} are not finite numbers")
        return {"messages": [], "done": True, "reward": sum(components.values()),
                "components": components}  # fmt: skip

    def answer(self, reply: dict) -> None:
        if self.reply is None or self.reply.done():
            raise RuntimeError("no model turn is waiting for a reply")
        calls = reply.get("tool_calls") or []
        self.names.update({c["id"]: c["name"] for c in calls})
        self.shown.append({"role": "assistant", "content": reply.get("text", "")})
        self.reply.set_result(reply)

    async def close(self) -> None:
        if self.reply is not None and not self.reply.done():
            self.reply.cancel()
        self.runner.cancel()
        await asyncio.gather(self.runner, return_exceptions=True)


def errors(episode) -> str:
    found = [*episode.errors, *(e for t in episode.traces for e in t.errors)]
    text = "; ".join(f"{e.type}: {e.message}" for e in found)
    return f": {text[:3000]}" if text else ""


def sse(reply: dict) -> bytes:
    """The reply as an OpenAI chat-completion stream."""
    base = {"id": "mua", "object": "chat.completion.chunk", "created": 0, "model": "mua"}
    calls = [
        {"index": i, "id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})}}
        for i, c in enumerate(reply.get("tool_calls") or [])
    ]  # fmt: skip
    delta = {"role": "assistant", "content": reply.get("text", "")}
    if calls:
        delta["tool_calls"] = calls
    chunks = [
        [{"index": 0, "delta": delta, "finish_reason": None}],
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}],
    ]
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    events = [{**base, "choices": c} for c in chunks] + [{**base, "choices": [], "usage": usage}]
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


class Bridge:
    """The loaded environment, its sessions and the endpoint their model calls reach."""

    def __init__(self, env):
        self.env, self.sessions = env, {}
        self.base = ""

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=1 << 26)
        app.router.add_post("/s/{session}/v1/chat/completions", self.completion)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"

    async def completion(self, request):
        from aiohttp import web

        session = self.sessions.get(request.match_info["session"])
        if session is None:
            return web.json_response({"error": {"message": "no such session"}}, status=404)
        future = asyncio.get_running_loop().create_future()
        run_id = request.headers.get("X-Session-ID")
        await session.events.put(("turn", await request.json(), run_id, future))
        try:
            reply = await future
        except asyncio.CancelledError:
            return web.json_response({"error": {"message": "the episode closed"}}, status=503)
        return web.Response(body=sse(reply), content_type="text/event-stream")

    async def answer(self, request: dict) -> dict:
        op, name = request.get("op"), str(request.get("session"))
        if op == "tasks":
            return {"rows": task_rows(self.env)}
        if op == "close":
            session = self.sessions.pop(name, None)
            if session is not None:
                await session.close()
            return {}
        if op == "reset":
            cls = type(self.env.taskset).task_type()
            task = cls(
                cls.data_type().model_validate(request["data"]), self.env.taskset.config.task
            )
            self.sessions[name] = Session(self.env, task, f"{self.base}/s/{name}/v1")
        elif op == "step":
            self.sessions[name].answer(request.get("reply") or {})
        else:
            raise ValueError(f"unknown op {op!r}")
        return await self.sessions[name].next()


def protocol_out():
    """The protocol's own stdout; what the environment prints goes to stderr instead."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


async def serve(env_id: str, env_args: dict) -> None:
    out = protocol_out()
    os.environ.setdefault("MUA_VERIFIERS_KEY", "local")
    use_side_folder()
    import verifiers.v1 as vf

    try:
        bridge = Bridge(vf.load_environment(local_config(env_id, env_args)))
    except Exception as e:  # noqa: BLE001 - one line for mua's fault, not a traceback
        sys.exit(f"cannot load the verifiers environment {env_id!r}: {type(e).__name__}: {e}")
    await bridge.start()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def one(request: dict) -> None:
        try:
            answer = await bridge.answer(request)
        except Exception as e:  # noqa: BLE001 - reported to mua, which ends that episode
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps({"id": request.get("id"), **answer}, default=str), file=out, flush=True)

    async with bridge.env.serving():
        print(json.dumps({"ready": True}), file=out, flush=True)
        tasks = set()
        while line := await reader.readline():
            task = asyncio.ensure_future(one(json.loads(line)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        for session in list(bridge.sessions.values()):
            await session.close()


def prepare() -> None:
    """Prepare and lock the chat harness's script environment (needs the package index)."""
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime

    use_side_folder()
    os.environ.pop("UV_FROZEN", None)

    async def run() -> None:
        runtime = SubprocessRuntime(SubprocessConfig())
        await runtime.start()
        argv = await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, activate=False)
        subprocess.run(["uv", "lock", "--script", argv[1], "-q", "--no-config"], check=True)

    asyncio.run(run())


if __name__ == "__main__":
    if sys.argv[1:] == ["--prepare"]:
        prepare()
    else:
        asyncio.run(serve(sys.argv[1], json.loads(sys.argv[2])))
