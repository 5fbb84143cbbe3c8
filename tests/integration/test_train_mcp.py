"""`mua prep`, `mua train` (torchrun, CPU, tiny model, two GRPO steps) and `mua eval` of one
`gyms:` entry whose tools come from an MCP server written with the mcp SDK
(tests/gyms/mcp_guess_server.py), over stdio and over streamable HTTP; and kill -9 of `mua train`
leaves no server running, even one that does not exit when its stdin closes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import free_port
from tests.integration.byo_helpers import gone_within, kill_9_while, train_and_eval, write_recipe
from tests.integration.train_helpers import REPO

pytestmark = pytest.mark.integration

SERVER = "python tests/gyms/mcp_guess_server.py"


def options(**server) -> dict:
    return {
        "servers": [{"name": "guess", "tools": ["interact_with_env", "judge"], **server}],
        "reward": {"kind": "tool", "name": "judge"},
        "task_args": ["target"],
    }


def test_train_and_eval_with_a_stdio_mcp_server(tmp_path):
    train_and_eval(tmp_path, "mcp", options(command=SERVER))


def test_train_and_eval_with_a_streamable_http_mcp_server(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "tests/gyms/mcp_guess_server.py", "--http", str(port)], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        train_and_eval(tmp_path, "mcp", options(url=url, start_timeout_s=20))
    finally:
        proc.kill()
        proc.wait()


def test_kill_9_of_mua_train_leaves_no_server_running(tmp_path):
    pids = tmp_path / "pids"
    env = {"MCP_PID_FILE": str(pids), "MCP_LINGER": "1"}
    recipe = write_recipe(tmp_path, "mcp", options(command=SERVER, env=env), steps=200)

    def started():
        text = pids.read_text().strip() if pids.exists() else ""
        return int(text) if text else None

    pid = kill_9_while(recipe, started)
    assert gone_within(pid), "the MCP server outlived kill -9 of mua train"
