"""OpenEnv's client, run in its side environment (`gyms/openenv/bridge.py`), one per process.

`bridge(python, url)` gives this process's bridge to the OpenEnv server at `url`: started on
first use with the side venv's `python` (through `gyms/mcp/guard.py`, so it dies with this
process, even under kill -9), on a private event loop (`BackgroundLoop`) shared by every episode;
its sessions are the episodes. A bridge that cannot start, a server that cannot be reached, an
answer past `timeout_s`, an error the client reports and a bridge that died raise
`OpenEnvFault` (the trajectory's env_error) with the bridge's stderr tail; a dead or hung bridge
is replaced for the next episode. Closed at exit. Not here: episodes (`gyms.openenv.env`).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

from gyms.mcp.hub import GUARD
from mua.background_loop import BackgroundLoop
from mua.text import clean_text

BRIDGE = Path(__file__).with_name("bridge.py")


class OpenEnvFault(Exception):
    """The OpenEnv server or its client failed: the trajectory's env_error."""


class Bridge:
    """One bridge process and its pending requests."""

    def __init__(self, python: str, url: str):
        self.python, self.url = python, url
        self.proc = None
        self.alive = False
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        fd, path = tempfile.mkstemp(prefix="mua-openenv-", suffix=".stderr")
        os.close(fd)
        self.errlog = Path(path)

    def stderr_tail(self) -> str:
        text = (
            self.errlog.read_bytes()[-2000:].decode("utf-8", "replace")
            if self.errlog.exists()
            else ""
        )
        text = clean_text(text).strip()
        return f"; the bridge's stderr ends: {text}" if text else ""

    async def start(self, timeout_s: float) -> None:
        with open(self.errlog, "w") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, str(GUARD), self.python, str(BRIDGE), self.url,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                limit=1 << 24,
            )  # fmt: skip
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except asyncio.TimeoutError:
            line = b""
        if not line.strip().startswith(b'{"ready"'):
            await asyncio.sleep(0.05)
            tail = self.stderr_tail()
            how = (
                f"exited with status {self.proc.returncode}"
                if line == b"" and (await self._exited())
                else f"did not start within {timeout_s:g}s"
            )
            await self.close()
            raise OpenEnvFault(f"the OpenEnv client ({self.python}) {how}{tail}")
        self.alive = True
        self._reader = asyncio.ensure_future(self._read())

    async def _exited(self) -> bool:
        try:
            await asyncio.wait_for(self.proc.wait(), 1.0)
        except asyncio.TimeoutError:
            return False
        return True

    async def _read(self) -> None:
        while line := await self.proc.stdout.readline():
            answer = json.loads(line)
            future = self._pending.pop(answer.pop("id", None), None)
            if future is not None and not future.done():
                future.set_result(answer)
        self.alive = False
        for future in self._pending.values():
            if not future.done():
                future.set_exception(OpenEnvFault("the OpenEnv client exited"))

    async def request(self, timeout_s: float, **request) -> dict:
        rid = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self.proc.stdin.write((json.dumps({"id": rid, **request}) + "\n").encode())
        what = f"OpenEnv {request['op']} at {self.url}"
        try:
            answer = await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            await asyncio.sleep(0)
            tail = self.stderr_tail()
            self.alive = False  # the next episode gets a fresh client; this one is killed
            self._closing = asyncio.ensure_future(self.close())
            raise OpenEnvFault(f"{what} gave no answer within {timeout_s:g}s{tail}") from None
        except OpenEnvFault as e:
            await asyncio.sleep(0.05)
            raise OpenEnvFault(f"{what}: {e}{self.stderr_tail()}") from None
        finally:
            self._pending.pop(rid, None)
        if "error" in answer:
            raise OpenEnvFault(f"{what} failed: {answer['error']}")
        return answer

    async def close(self) -> None:
        self.alive = False
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self.errlog.unlink(missing_ok=True)


class Bridges:
    """This process's bridges (one per server URL and side Python), on a loop of their own."""

    def __init__(self):
        self.loop = BackgroundLoop(name="mua-openenv")
        self.held: dict[tuple[str, str], Bridge] = {}
        self._lock: asyncio.Lock | None = None

    async def _get(self, python: str, url: str, timeout_s: float) -> Bridge:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            held = self.held.get((python, url))
            if held is None or not held.alive:
                held = Bridge(python, url)
                await held.start(timeout_s)
                self.held[(python, url)] = held
            return held

    async def request(self, python: str, url: str, timeout_s: float, start_s: float, **request):
        async def ask():
            return await (await self._get(python, url, start_s)).request(timeout_s, **request)

        return await self.loop.run(ask())

    def close(self) -> None:
        async def close_all():
            await asyncio.gather(*(b.close() for b in self.held.values()))

        self.loop.close(close_all(), timeout_s=20.0)


_BRIDGES: Bridges | None = None
_LOCK = threading.Lock()


def bridges() -> Bridges:
    global _BRIDGES
    with _LOCK:
        if _BRIDGES is None or _BRIDGES.loop.closed:
            _BRIDGES = Bridges()
            atexit.register(_BRIDGES.close)
        return _BRIDGES


def close_bridges() -> None:
    global _BRIDGES
    with _LOCK:
        held, _BRIDGES = _BRIDGES, None
    if held is not None:
        held.close()
