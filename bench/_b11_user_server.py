"""B11's scripted user: an HTTP server on 127.0.0.1 answering each turn after a log-normal delay.

POST /reply {"key": str, "turn": int} -> {"content": str}, answered after exp(N(ln median, σ))
seconds, the draw seeded by (key, turn) so a conversation's waits are the same in every run.
Run as `python -m bench._b11_user_server PORT MEDIAN_S SIGMA`; prints `ready` once listening.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import sys

from aiohttp import web


def delay_s(key: str, turn: int, median_s: float, sigma: float) -> float:
    seed = int.from_bytes(hashlib.sha256(f"{key}/{turn}".encode()).digest()[:8], "little")
    return math.exp(random.Random(seed).gauss(math.log(median_s), sigma))


def app(median_s: float, sigma: float) -> web.Application:
    async def reply(request: web.Request) -> web.Response:
        body = await request.json()
        turn = int(body["turn"])
        await asyncio.sleep(delay_s(str(body["key"]), turn, median_s, sigma))
        hint = "higher" if turn % 2 else "lower"
        return web.json_response({"content": f"No, try {hint}."})

    application = web.Application()
    application.router.add_post("/reply", reply)
    return application


async def main(port: int, median_s: float, sigma: float) -> None:
    runner = web.AppRunner(app(median_s, sigma), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])))
