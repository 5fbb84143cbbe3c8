"""Tools from MCP servers: a gym whose tools are those of one or more MCP servers.

Bring your own environment: the servers (started from a command over stdio, or reached at a URL
over streamable HTTP) give the tools, task rows give the prompt and a payload, mua's users
answer plain-text turns, and the episode is scored by a judge tool, a gym's scorer or a program
(`gyms.mcp.config`). Tasks come from a JSONL file (`mua prep --gym mcp --source tasks.jsonl`, or the gym option `tasks`);
there is no built-in dataset, expert or random policy. See docs/gyms.md, "MCP servers".
"""

from __future__ import annotations

from gyms.common.jsonl_tasks import byo_build_tasks
from gyms.common.spec import package_gym
from gyms.mcp.env import McpEnv

build_tasks = byo_build_tasks("mcp")


GYM = package_gym(
    __name__,
    __doc__,
    McpEnv,
    build_tasks,
    None,
    None,
    tool_format="hermes",
    needs_data=True,
    budgets={"max_turns": 8, "max_total_tokens": 4096},
)
