"""A bridge process in a side venv, spoken to in JSON lines over stdio (openenv, verifiers).

A gym whose library cannot share mua's venv (its pins differ) runs a bridge script with that
venv's Python: `SideBridge` starts it (through `gyms/mcp/guard.py`, so it dies with this
process, even under kill -9), waits for its `{"ready": true}` line, sends requests with an `id`
and matches the answers. A bridge that cannot start, an answer past the deadline, an answer
that is an error, a line that is not JSON and a bridge that died raise the gym's fault (the
trajectory's env_error) with the bridge's stderr tail; a dead or hung bridge is replaced for
the next episode. `BridgePool` keeps one process's bridges on a private event loop, closed at
exit. Not here: what a bridge does (each gym's `bridge.py`).
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
from collections.abc import Callable
from pathlib import Path

from gyms.mcp.hub import GUARD
from mua.background_loop import BackgroundLoop
from mua.errors import UsageError
from mua.text import clean_text

# how long a bridge whose output closed before it was ready may take to be reaped
EXIT_WAIT_S = 30.0


def check_python(python: str, needs: str) -> None:
    """`python` is an executable file, else one line naming the option and the fix."""
    if not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise UsageError(
            f"gym.options.python: {python} is not a Python; give a venv's bin/python with "
            f"{needs} installed"
        )


class SideBridge:
    """One bridge process and its pending requests; a gym subclasses it with its script,
    its fault, its label and how a request is named in a fault."""

    script: Path
    fault: type[Exception] = RuntimeError
    label = "the bridge"

    def __init__(self, python: str, args: list[str]):
        self.python, self.args = python, list(args)
        self.proc = None
        self.alive = False
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        fd, path = tempfile.mkstemp(prefix="mua-bridge-", suffix=".stderr")
        os.close(fd)
        self.errlog = Path(path)

    def describe(self, request: dict) -> str:
        return f"{self.label}'s {request['op']}"

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
                sys.executable, str(GUARD), self.python, str(self.script), *self.args,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                limit=1 << 24,
            )  # fmt: skip
        timed_out = False
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
        except asyncio.TimeoutError:
            line, timed_out = b"", True
        if not line.strip().startswith(b'{"ready"'):
            # its output closed: it is exiting (a loaded machine may take seconds to reap it)
            exited = line == b"" and not timed_out and await self._exited(EXIT_WAIT_S)
            await asyncio.sleep(0.05)
            tail = self.stderr_tail()
            how = (
                f"exited with status {self.proc.returncode}"
                if exited
                else f"did not start within {timeout_s:g}s"
            )
            await self.close()
            raise self.fault(f"{self.label} ({self.python}) {how}{tail}")
        self.alive = True
        self._reader = asyncio.ensure_future(self._read())

    async def _exited(self, wait_s: float) -> bool:
        try:
            await asyncio.wait_for(self.proc.wait(), wait_s)
        except asyncio.TimeoutError:
            return False
        return True

    async def _read(self) -> None:
        why = f"{self.label} exited"
        while line := await self.proc.stdout.readline():
            try:
                answer = json.loads(line)
                rid = answer.pop("id", None)
            except (ValueError, AttributeError):
                why = f"{self.label} wrote a line that is not a JSON object: {line[:200]!r}"
                self.proc.kill()
                break
            future = self._pending.pop(rid, None)
            if future is not None and not future.done():
                future.set_result(answer)
        self.alive = False
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self.fault(why))

    async def request(self, timeout_s: float, **request) -> dict:
        rid = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self.proc.stdin.write((json.dumps({"id": rid, **request}) + "\n").encode())
        what = self.describe(request)
        try:
            answer = await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            await asyncio.sleep(0)
            tail = self.stderr_tail()
            self.alive = False  # the next episode gets a fresh bridge; this one is killed
            self._closing = asyncio.ensure_future(self.close())
            raise self.fault(f"{what} gave no answer within {timeout_s:g}s{tail}") from None
        except self.fault as e:
            await asyncio.sleep(0.05)
            raise self.fault(f"{what}: {e}{self.stderr_tail()}") from None
        finally:
            self._pending.pop(rid, None)
        if "error" in answer:
            raise self.fault(f"{what} failed: {answer['error']}")
        return answer

    async def close(self) -> None:
        self.alive = False
        if self.proc is not None:
            if self.proc.returncode is None:
                self.proc.kill()
            self.proc.stdin.close()  # so the transport closes now, not when collected
            await self.proc.wait()
        self.errlog.unlink(missing_ok=True)


class Bridges:
    """One process's bridges, one per key (the arguments of `make`), on a loop of their own."""

    def __init__(self, make: Callable[..., SideBridge], name: str):
        self.make = make
        self.loop = BackgroundLoop(name=name)
        self.held: dict[tuple, SideBridge] = {}
        self._lock: asyncio.Lock | None = None

    async def _get(self, key: tuple, timeout_s: float) -> SideBridge:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            held = self.held.get(key)
            if held is None or not held.alive:
                held = self.make(*key)
                await held.start(timeout_s)
                self.held[key] = held
            return held

    async def request(self, key: tuple, timeout_s: float, start_s: float, **request) -> dict:
        async def ask():
            return await (await self._get(key, start_s)).request(timeout_s, **request)

        return await self.loop.run(ask())

    def close(self) -> None:
        async def close_all():
            await asyncio.gather(*(b.close() for b in self.held.values()))

        self.loop.close(close_all(), timeout_s=20.0)


class BridgePool:
    """A gym's `Bridges` for this process: made on first use, closed at exit or by `close`."""

    def __init__(self, make: Callable[..., SideBridge], name: str):
        self.make, self.name = make, name
        self._held: Bridges | None = None
        self._lock = threading.Lock()

    def get(self) -> Bridges:
        with self._lock:
            if self._held is None or self._held.loop.closed:
                self._held = Bridges(self.make, self.name)
                atexit.register(self._held.close)
            return self._held

    def close(self) -> None:
        with self._lock:
            held, self._held = self._held, None
        if held is not None:
            held.close()
