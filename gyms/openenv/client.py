"""OpenEnv's client, run in its side environment (`gyms/openenv/bridge.py`), one per process.

`bridges()` gives this process's bridges (`gyms.common.side_bridge`), one per side Python and
server URL, each started on first use; its sessions are the episodes. A bridge that cannot
start, a server that cannot be reached, an answer past `timeout_s`, an error the client reports
and a bridge that died raise `OpenEnvFault` (the trajectory's env_error) with the bridge's
stderr tail. Not here: episodes (`gyms.openenv.env`).
"""

from __future__ import annotations

from pathlib import Path

from gyms.common.side_bridge import BridgePool, Bridges, SideBridge


class OpenEnvFault(Exception):
    """The OpenEnv server or its client failed: the trajectory's env_error."""


class OpenEnvBridge(SideBridge):
    """`SIDE_PYTHON gyms/openenv/bridge.py URL`."""

    script = Path(__file__).with_name("bridge.py")
    fault = OpenEnvFault
    label = "the OpenEnv client"

    def __init__(self, python: str, url: str):
        super().__init__(python, [url])
        self.url = url

    def describe(self, request: dict) -> str:
        return f"OpenEnv {request['op']} at {self.url}"


_POOL = BridgePool(OpenEnvBridge, "mua-openenv")


def bridges() -> Bridges:
    return _POOL.get()


def close_bridges() -> None:
    _POOL.close()
