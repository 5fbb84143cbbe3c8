"""An OpenEnv environment as a gym: reset and step over OpenEnv's own client.

The client runs in a side venv with `openenv` 0.10.0 (whose `mcp<2` pin mua's mcp 2.0.0 cannot
share), one bridge process per rank (`gyms.openenv.client`); the server is reached at a URL.
Tasks come from a JSONL (`mua prep --gym openenv --source`, or the gym option `tasks`); the
payload is passed to `reset`. See docs/gyms.md, "OpenEnv environments".
"""

from __future__ import annotations

from gyms.common.jsonl_tasks import byo_build_tasks
from gyms.common.spec import package_gym
from gyms.openenv.env import OpenEnvEnv

build_tasks = byo_build_tasks("openenv")

GYM = package_gym(
    __name__,
    __doc__,
    OpenEnvEnv,
    build_tasks,
    None,
    None,
    needs_data=True,
    budgets={"max_turns": 8, "max_total_tokens": 4096},
)
