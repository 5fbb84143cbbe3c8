"""The deadline on an env call holds while a synchronous tool runs: the tool runs off the event
loop (`mua.gym.tools.run_sync`), so a tool that spins or sleeps past `rollout.call_timeout_s`
ends its trajectory with `timeout` at the deadline, and other coroutines keep running."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mua.config.rollout import RolloutConfig
from mua.gym.api import GymContext, GymSpec, ResetResult, Task, ToolCall
from mua.gym.tools import ToolEnv, run_sync, tool
from mua.rollout.policies import MessagePolicy

pytestmark = pytest.mark.timeout(60, method="thread")
RELEASE = threading.Event()  # set at the end of each test: no tool thread outlives it


@pytest.fixture(autouse=True)
def _release_tool_threads():
    RELEASE.clear()
    yield
    RELEASE.set()


class SlowEnv(ToolEnv):
    def __init__(self, ctx: GymContext) -> None:
        pass

    @tool
    def spin(self, seconds: float) -> str:
        """Busy-loop for a while.

        Args:
            seconds: how long
        """
        end = time.monotonic() + seconds
        while time.monotonic() < end and not RELEASE.is_set():
            pass
        return "spun"

    @tool
    def nap(self, seconds: float) -> str:
        """Sleep for a while.

        Args:
            seconds: how long
        """
        RELEASE.wait(seconds)
        return "napped"

    async def reset(self, task: Task) -> ResetResult:
        return ResetResult(messages=list(task.prompt), tools=self.tool_schemas())

    async def step(self, action):
        return await self.step_tools(action)

    async def close(self) -> None:
        pass


def _calling(name: str, seconds: float) -> MessagePolicy:
    async def act(messages, task):
        call = {"id": "c1", "function": {"name": name, "arguments": {"seconds": seconds}}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    return MessagePolicy(act)


@pytest.mark.parametrize("name", ["spin", "nap"])
def test_a_tool_past_the_deadline_ends_the_trajectory_with_timeout(name):
    from mua.models import load_tokenizer
    from mua.rollout.collect import run_rollouts_sync

    spec = GymSpec(name="slow", description="test", make_env=SlowEnv, build_tasks=lambda *a: {})
    task = Task("t0", "slow", "test", [{"role": "user", "content": "go"}], {})
    tokenizer = load_tokenizer("tiny:qwen2-1m")
    start = time.monotonic()
    (traj,) = run_rollouts_sync(
        [task],
        n=1,
        policy=_calling(name, 8.0),
        gym_spec=spec,
        gym_ctx=GymContext(),
        tokenizer=tokenizer,
        rollout_cfg=RolloutConfig(max_turns=2, max_total_tokens=4096, call_timeout_s=0.5),
    )
    assert time.monotonic() - start < 3.0
    assert traj.termination == "timeout"
    assert traj.detail.startswith("env.step took longer than 0.5s")


def test_the_event_loop_runs_while_a_tool_spins():
    async def main() -> tuple[int, bool]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        beat = asyncio.ensure_future(ticker())
        env = SlowEnv(GymContext())
        try:
            await asyncio.wait_for(env.call_tool(ToolCall("spin", {"seconds": 8.0})), 0.5)
            cut = False
        except asyncio.TimeoutError:
            cut = True
        beat.cancel()
        return ticks, cut

    ticks, cut = asyncio.run(main())
    assert cut and ticks >= 10


def test_run_sync_returns_and_raises_as_the_call_does():
    def divide(a: int, b: int) -> float:
        return a / b

    assert asyncio.run(run_sync(divide, 6, b=3)) == 2.0
    with pytest.raises(ZeroDivisionError):
        asyncio.run(run_sync(divide, 1, 0))
