"""Running the framework agents (examples/gateway_agents/frameworks/) in the side environment
`tests/.agents/venv` (`make agents-side`) against a gateway over a scripted engine."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from mua.gateway.server import Gateway
from tests.fakes.scripted_engine import ScriptedEngine

REPO = Path(__file__).resolve().parents[2]
AGENTS_PYTHON = REPO / "tests" / ".agents" / "venv" / "bin" / "python"
FRAMEWORKS = REPO / "examples" / "gateway_agents" / "frameworks"
TARGET = 5


def needs_agents_side():
    """Skip (naming how to build it) when the frameworks' side venv is missing."""
    built = (AGENTS_PYTHON.parents[2] / ".installed").is_file() and AGENTS_PYTHON.is_file()
    return pytest.mark.skipif(
        not built, reason=f"agent frameworks' side venv missing at {AGENTS_PYTHON.parents[1]}: "
        "run `make agents-side`",
    )  # fmt: skip


def call(name: str, **arguments) -> str:
    """A hermes tool call as the model writes it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@dataclass
class Played:
    reward: float | None
    returncode: int
    stderr: str
    engine: ScriptedEngine
    session: object


async def _play(tokenizer, script: str, replies, env: dict[str, str]) -> Played:
    engine = ScriptedEngine(tokenizer, list(replies))
    gateway = await Gateway(tokenizer, engine=engine, tool_parser="hermes").start()
    session = gateway.open_session()
    task = {
        "task_id": "t0",
        "gym": "guess",
        "prompt": [],
        "payload": {"target": TARGET, "max_number": 8},
    }
    root = f"http://{gateway.host}:{gateway.port}"
    variables = {
        "OPENAI_BASE_URL": gateway.base_url(),
        "OPENAI_API_KEY": session.key,
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_API_KEY": session.key,
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "MUA_TASK": json.dumps(task),
        "MUA_MODEL": gateway.model_name,
    }
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    try:
        proc = await asyncio.create_subprocess_exec(
            str(AGENTS_PYTHON), str(FRAMEWORKS / script),
            env={**keep, **variables, **env},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await gateway.close()
    lines = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    reward = lines[-1]["reward"] if lines else None
    return Played(reward, proc.returncode, err.decode()[-3000:], engine, session)


def play(tokenizer, script: str, replies, **env: str) -> Played:
    """Run `script` once (its stdout's reward, exit status, stderr) against a gateway whose
    engine answers with `replies` in order."""
    return asyncio.run(_play(tokenizer, script, replies, env))
