"""OpenEnv's client in its own environment: `SIDE_PYTHON gyms/openenv/bridge.py BASE_URL`.

Run with the Python of a venv that has `openenv` (its pins, `mcp<2` among them, are not mua's).
Reads one JSON request a line on stdin and answers one JSON line on stdout, with the request's
`id`: `{"op": "reset", "session": S, "kwargs": {...}}` opens session S (a `GenericEnvClient`
of its own, one environment instance on the server) and resets it; `{"op": "step", "session": S,
"action": {...}}` steps it; `{"op": "close", "session": S}` closes it. An answer is
`{"id", "observation", "reward", "done"}` or `{"id", "error"}`. Imports nothing of mua.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def _answer(clients: dict, base_url: str, request: dict) -> dict:
    from openenv.core.generic_client import GenericEnvClient

    op, session = request.get("op"), str(request.get("session"))
    if op == "close":
        client = clients.pop(session, None)
        if client is not None:
            await client.__aexit__(None, None, None)
        return {}
    if op == "reset":
        if session not in clients:
            clients[session] = await GenericEnvClient(base_url=base_url).__aenter__()
        result = await clients[session].reset(**(request.get("kwargs") or {}))
    elif op == "step":
        result = await clients[session].step(request.get("action") or {})
    else:
        raise ValueError(f"unknown op {op!r}")
    return {"observation": result.observation, "reward": result.reward, "done": result.done}


async def main(base_url: str) -> None:
    # the client's heavy import before `ready`, so a reset's deadline is the server's time only
    from openenv.core.generic_client import GenericEnvClient  # noqa: F401

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    clients: dict = {}
    print(json.dumps({"ready": True}), flush=True)

    async def serve(request: dict) -> None:
        try:
            answer = await _answer(clients, base_url, request)
        except Exception as e:  # noqa: BLE001 - reported to mua, which ends that episode
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps({"id": request.get("id"), **answer}, default=str), flush=True)

    tasks = set()
    while line := await reader.readline():
        task = asyncio.ensure_future(serve(json.loads(line)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    for client in clients.values():
        await client.__aexit__(None, None, None)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
