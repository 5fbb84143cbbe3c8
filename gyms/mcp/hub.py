"""The MCP servers of one process (a rank, or `mua eval`): opened on first use, shared by its
episodes, closed when the process exits.

Each server is one MCP client session held by a task of a private event loop
(`mua.background_loop.BackgroundLoop`), so episodes on any loop share it. A server given
by `command` is started over stdio through `gyms.mcp.guard` (it dies with this process, even under
kill -9) with its stderr kept in a file whose tail goes into every failure; one given by `url` is
reached over streamable HTTP. Its tool list is read once and checked (every input schema a valid
JSON Schema of an object, tool names unique across servers).

A server that cannot start, a bad schema, a call that fails at the protocol level (the server
crashed, the connection closed) or overruns `call_timeout_s`, and a result over
`max_result_chars` raise `McpFault`: the runner ends that trajectory as `env_error`, masked. A
server that crashed or hung is closed and started afresh for the next episode. A tool's own
error (`isError`) is not a fault: it is the model's feedback. Not here: episodes, rewards.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from gyms.mcp.config import ServerConfig
from mua.background_loop import BackgroundLoop
from mua.gym.program_io import command_line
from mua.text import clean_text

log = logging.getLogger("mua.gyms.mcp")
TAIL_CHARS = 2000
GUARD = Path(__file__).with_name("guard.py")  # run as a script: it imports nothing of gyms.mcp
_CLOSING: set[asyncio.Task] = set()  # closes of failed servers, run beside the episodes


class McpFault(Exception):
    """A server failed (start, schema, crash, hang, oversized result): the trajectory's env_error."""


@dataclass
class McpTool:
    server: str
    name: str
    description: str
    schema: dict


def check_schema(server: str, tool) -> dict:
    """A tool's input schema, checked to be a valid JSON Schema of an object."""
    import jsonschema

    schema = tool.input_schema
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise McpFault(
            f"MCP server {server}: tool {tool.name!r} has a bad input schema (not a JSON Schema "
            f"of type object): {str(schema)[:200]}"
        )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        raise McpFault(
            f"MCP server {server}: tool {tool.name!r} has a bad input schema: {e.message[:300]}"
        ) from None
    return schema


class Connection:
    """One server's session, held open by `_hold` until `close`."""

    def __init__(self, cfg: ServerConfig):
        self.cfg = cfg
        self.client = None
        self.tools: dict[str, McpTool] = {}
        self.alive = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._errlog = None
        if cfg.command is not None:
            fd, path = tempfile.mkstemp(prefix=f"mua-mcp-{cfg.name}-", suffix=".stderr")
            os.close(fd)
            self.errlog_path = Path(path)
        else:
            self.errlog_path = None

    def stderr_tail(self) -> str:
        """`; its stderr ends: …` with the server's last stderr lines, or '' when there are none."""
        if self.errlog_path is None or not self.errlog_path.exists():
            return ""
        with open(self.errlog_path, "rb") as f:
            f.seek(max(0, self.errlog_path.stat().st_size - TAIL_CHARS))
            tail = clean_text(f.read().decode("utf-8", "replace")).strip()
        return f"; its stderr ends: {tail}" if tail else "; its stderr is empty"

    def _transport(self):
        from mcp import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if self.cfg.url is not None:
            return streamable_http_client(self.cfg.url)
        cmd = [sys.executable, str(GUARD), *command_line(self.cfg.command)]
        self._errlog = open(self.errlog_path, "w")  # noqa: SIM115 - the server writes it
        params = StdioServerParameters(
            command=cmd[0], args=cmd[1:], env={**os.environ, **self.cfg.env}, cwd=os.getcwd()
        )
        return stdio_client(params, errlog=self._errlog)

    async def _hold(self, opened: asyncio.Future) -> None:
        from mcp import Client

        try:
            async with Client(self._transport(), cache=None) as client:
                listed, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    listed += page.tools
                    if not (cursor := page.next_cursor):
                        break
                opened.set_result((client, listed))
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - handed to the opener, or the session ended
            if not opened.done():
                opened.set_exception(e)
            elif not isinstance(e, asyncio.CancelledError):
                log.info("MCP server %s closed: %s", self.cfg.name, e)
        finally:
            self.alive = False
            if self._errlog is not None:
                self._errlog.close()

    async def open(self) -> None:
        opened = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._hold(opened))
        where = self.cfg.url or " ".join(self.cfg.command)
        try:
            client, listed = await asyncio.wait_for(opened, self.cfg.start_timeout_s)
        except asyncio.TimeoutError:
            tail = self.stderr_tail()
            await self.close()
            raise McpFault(
                f"MCP server {self.cfg.name} ({where}) did not start within "
                f"{self.cfg.start_timeout_s:g}s{tail}"
            ) from None
        except Exception as e:
            await asyncio.sleep(0.05)  # its last stderr lines
            tail = self.stderr_tail()
            await self.close()
            raise McpFault(
                f"MCP server {self.cfg.name} ({where}) could not be opened: "
                f"{type(e).__name__}: {e}{tail}"
            ) from None
        self.client, self.alive = client, True
        wanted = self.cfg.tools
        try:
            self.tools = {
                t.name: McpTool(
                    self.cfg.name, t.name, t.description or "", check_schema(self.cfg.name, t)
                )
                for t in listed
                if wanted is None or t.name in wanted
            }
        except McpFault as e:
            tail = self.stderr_tail()
            await self.close()
            raise McpFault(f"{e}{tail}") from None
        missing = sorted(set(wanted or ()) - set(self.tools))
        if missing:
            await self.close()
            raise McpFault(
                f"MCP server {self.cfg.name} has no tool {missing[0]!r} (tools: "
                f"{', '.join(t.name for t in listed)})"
            )

    async def call(self, name: str, arguments: dict):
        """The tool's `CallToolResult`; a protocol failure, hang or oversized result: McpFault."""
        what = f"MCP server {self.cfg.name}: tool {name}"
        try:
            result = await asyncio.wait_for(
                self.client.call_tool(name, arguments), self.cfg.call_timeout_s
            )
        except asyncio.TimeoutError:
            tail = self.stderr_tail()
            self.close_soon()
            raise McpFault(
                f"{what} gave no answer within call_timeout_s={self.cfg.call_timeout_s:g}s "
                f"(the server is restarted){tail}"
            ) from None
        except Exception as e:
            await asyncio.sleep(0.05)  # the crashed server's last stderr lines
            tail = self.stderr_tail()
            self.close_soon()
            raise McpFault(f"{what} failed: {type(e).__name__}: {e}{tail}") from None
        size = sum(len(getattr(block, "text", "") or "") for block in result.content)
        if size > self.cfg.max_result_chars:
            raise McpFault(
                f"{what} returned {size} characters, over max_result_chars="
                f"{self.cfg.max_result_chars}; raise it in the server's options or make the tool "
                "answer shorter"
            )
        return result

    def close_soon(self) -> None:
        """Close in the background (the failed episode does not wait for the server to stop)."""
        self.alive = False
        task = asyncio.ensure_future(self.close())
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    async def close(self) -> None:
        """Stop the session (a started server: stdin closed, then terminated, then killed)."""
        self.alive = False
        self._stop.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10.0)
            except (asyncio.TimeoutError, Exception):
                self._task.cancel()
        if self.errlog_path is not None:
            self.errlog_path.unlink(missing_ok=True)


class Hub:
    """The process's connections, on a loop of their own."""

    def __init__(self):
        self.loop = BackgroundLoop(name="mua-mcp")
        self.conns: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _connection(self, cfg: ServerConfig) -> Connection:
        key = cfg.model_dump_json()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            conn = self.conns.get(key)
            if conn is None or not conn.alive:
                if conn is not None:
                    await conn.close()
                conn = Connection(cfg)
                await conn.open()
                self.conns[key] = conn
            return conn

    async def connections(self, servers: list[ServerConfig]) -> list[Connection]:
        """Every server's live connection (opened or restarted as needed), on the caller's loop."""

        async def open_all():
            return [await self._connection(cfg) for cfg in servers]

        return await self.loop.run(open_all())

    async def call(self, conn: Connection, name: str, arguments: dict):
        return await self.loop.run(conn.call(name, arguments))

    def close(self) -> None:
        """Close every session (and the closes already under way) before the loop stops: a
        holder cancelled in the middle of stopping its server could leave the server behind."""
        if self.loop.closed:
            return

        async def close_all():
            closes = [c.close() for c in self.conns.values()]
            await asyncio.gather(*closes, *list(_CLOSING), return_exceptions=True)

        try:
            self.loop.call(close_all(), timeout_s=30.0)
        except Exception as e:  # the loop is stopped below whatever happened
            log.warning("closing the MCP servers: %s: %s", type(e).__name__, e)
        finally:
            self.loop.close(timeout_s=20.0)


_HUB: Hub | None = None
_HUB_LOCK = threading.Lock()


def hub() -> Hub:
    """This process's hub, made on first use and closed at exit."""
    global _HUB
    with _HUB_LOCK:
        if _HUB is None or _HUB.loop.closed:
            _HUB = Hub()
            atexit.register(_HUB.close)
        return _HUB


def close_hub() -> None:
    """Close every server of this process now (the next use opens them again)."""
    global _HUB
    with _HUB_LOCK:
        held, _HUB = _HUB, None
    if held is not None:
        held.close()
