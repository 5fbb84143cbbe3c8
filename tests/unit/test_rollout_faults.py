"""Faults on the rollout side, against a real HTTP server on 127.0.0.1 (the fake OpenAI server):
a refused key or unknown model stops the run (preflight and mid-run), a hung or rate-limiting user
ends its trajectory `user_failure` after its retries whatever the runner's own budgets, time queued
behind the user's concurrency limit is not a timeout, an env that misbehaves in any way ends only
its trajectory, and unencodable text (lone surrogates) from any source never crashes the run.

No assertion depends on how fast the machine is: hung requests hang until the server stops,
and where a latency matters the ratios are generous and a slower machine only makes the old
behaviour fail more surely."""

from __future__ import annotations

import asyncio
import json

import pytest

from mua.config.rollout import RolloutConfig
from mua.config.users import LLMUserConfig
from mua.errors import RunFailure
from mua.gym import GymContext, GymSpec, ResetResult, StepResult, Task
from mua.gym.tools import ToolEnv, tool
from mua.llm.llm_client import LLMClient, preflight_user
from mua.models import load_tokenizer
from mua.rollout.collect import run_rollouts_sync
from mua.rollout.policies import MessagePolicy
from tests.fakes.fake_openai import FakeOpenAIServer, Fault
from tests.fakes.fake_user import fake_user_config

pytestmark = pytest.mark.timeout(120)
SECRET = "sk-test-abcdef123456"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("tiny:qwen3-1m")


def user_cfg(server, **kw) -> LLMUserConfig:
    settings = {"model": "user-model", "api_key_env": "MUA_TEST_FAULTS_KEY", "timeout_s": 30.0}
    return fake_user_config(server, **{**settings, **kw})


def chat_tasks(n: int) -> list[Task]:
    return [
        Task(f"task{i}", "chat", "test", [{"role": "user", "content": f"task{i}: hello"}], {})
        for i in range(n)
    ]


class ChatEnv:
    """Every agent turn is answered by the LLM user; done after two user replies."""

    def __init__(self, ctx: GymContext) -> None:
        self.ctx, self.turns = ctx, 0

    async def reset(self, task: Task) -> ResetResult:
        self.task = task
        return ResetResult(messages=list(task.prompt))

    async def step(self, action) -> StepResult:
        self.turns += 1
        text = await self.ctx.llm.complete(
            [{"role": "user", "content": f"{self.task.task_id}: {action.text}"}]
        )
        return StepResult(
            messages=[{"role": "user", "content": text}], reward=1.0, done=self.turns >= 2
        )

    async def close(self) -> None:
        pass


class AskTool(ToolEnv):
    """The user is reached through a tool (as judges and user-asking tools are)."""

    def __init__(self, ctx: GymContext) -> None:
        self.ctx = ctx

    @tool
    async def ask(self, question: str) -> str:
        """Ask the user.

        Args:
            question: what to ask
        """
        return await self.ctx.llm.complete([{"role": "user", "content": question}])

    async def reset(self, task: Task) -> ResetResult:
        return ResetResult(messages=list(task.prompt), tools=self.tool_schemas())

    async def step(self, action) -> StepResult:
        messages, errors = await self.call_tools(action)
        return StepResult(messages=messages, done=True, info={"errors": errors})

    async def close(self) -> None:
        pass


def says(text: str) -> MessagePolicy:
    async def act(messages, task):
        return {"role": "assistant", "content": text}

    return MessagePolicy(act)


def rollout(tok, tasks, env_cls, llm, policy=None, **cfg):
    spec = GymSpec(name="chat", description="test", make_env=env_cls, build_tasks=lambda *a: {})
    base = dict(max_turns=4, max_total_tokens=2048, call_timeout_s=30, max_concurrency=8)
    base.update(cfg)
    return run_rollouts_sync(
        tasks,
        n=1,
        policy=policy or says("How can I help?"),
        gym_spec=spec,
        gym_ctx=GymContext(user_kind="llm", llm=llm),
        tokenizer=tok,
        rollout_cfg=RolloutConfig(**base),
    )


# -- item: a refused key or unknown model stops the run -----------------------------------------


@pytest.mark.parametrize("status", [401, 403, 404])
def test_refusal_mid_run_stops_the_run_instead_of_env_errors(tok, monkeypatch, status):
    monkeypatch.setenv("MUA_TEST_FAULTS_KEY", SECRET)
    message = f"bad key {SECRET}" if status != 404 else "model user-model does not exist"
    fault = Fault("status", status=status, message=message)
    with FakeOpenAIServer(faults=lambda i, body: fault) as server:
        llm = LLMClient(user_cfg(server))
        with pytest.raises(RunFailure) as err:
            rollout(tok, chat_tasks(12), ChatEnv, llm, max_concurrency=2)
        requests = server.total_requests
    line = str(err.value)
    assert f"HTTP {status}" in line and "127.0.0.1" in line and "\n" not in line
    assert SECRET not in line
    # not retried, and the trajectories still waiting were cancelled (each would have sent one)
    assert requests <= 4


def test_refusal_inside_a_tool_is_not_swallowed_as_a_tool_error(tok):
    fault = Fault("status", status=401, message="invalid key")
    call = '<tool_call>{"name": "ask", "arguments": {"question": "size?"}}</tool_call>'
    with FakeOpenAIServer(faults=lambda i, body: fault) as server:
        with pytest.raises(RunFailure, match="HTTP 401"):
            rollout(tok, chat_tasks(1), AskTool, LLMClient(user_cfg(server)), policy=says(call))


def test_preflight_names_the_endpoint_without_credentials(monkeypatch):
    monkeypatch.setenv("MUA_TEST_FAULTS_KEY", SECRET)
    fault = Fault("status", status=401, message=f"Incorrect API key provided: {SECRET}")
    with FakeOpenAIServer(faults=lambda i, body: fault) as server:
        url = server.base_url.replace("http://", "http://alice:hunter2@")
        with pytest.raises(RunFailure) as err:
            preflight_user(user_cfg(server, base_url=url))
        assert server.total_requests == 1
    line = str(err.value)
    assert f"http://127.0.0.1:{server.port}/v1" in line and "HTTP 401" in line
    assert "hunter2" not in line and "alice" not in line and SECRET not in line
    assert "$MUA_TEST_FAULTS_KEY" in line


def test_preflight_404_an_unreachable_endpoint_and_a_healthy_one(tmp_path):
    fault = Fault("status", status=404, message="The model `user-model` does not exist")
    with FakeOpenAIServer(faults=lambda i, body: fault) as server:
        with pytest.raises(RunFailure, match="HTTP 404.*model name"):
            preflight_user(user_cfg(server))
    with FakeOpenAIServer() as server:
        preflight_user(user_cfg(server))
        assert server.total_requests == 1
        body = server.requests[0]["json"]
        assert body["model"] == "user-model" and body["max_tokens"] <= 16
    down = server.base_url  # stopped: nothing listens there any more
    with pytest.raises(RunFailure, match="3 attempt"):
        preflight_user(LLMUserConfig(base_url=down, max_retries=2, backoff_s=0.01))
    # with a reply cache the endpoint may be offline on purpose: a warning, not a failure
    preflight_user(LLMUserConfig(base_url=down, max_retries=0, cache_dir=str(tmp_path)))


def test_scripted_user_needs_no_preflight():
    from mua.config.users import ScriptedUserConfig

    preflight_user(ScriptedUserConfig())  # no endpoint, nothing to do


# -- item: timeouts --------------------------------------------------------------------------


def test_hung_user_is_retried_and_ends_user_failure_not_timeout(tok):
    # The runner's call budget (1 s) is far below what the user may take (3 attempts of 2 s):
    # time waiting on the user is the user's own budget, not the env call's.
    with FakeOpenAIServer(faults=lambda i, body: "hang", hang_cap_s=None) as server:
        llm = LLMClient(user_cfg(server, timeout_s=2.0))
        (traj,) = rollout(tok, chat_tasks(1), ChatEnv, llm, call_timeout_s=1.0)
        requests = server.total_requests
    assert traj.termination == "user_failure", traj.detail
    assert "timed out" in traj.detail and "3 attempt(s)" in traj.detail
    assert requests == 3
    counts = llm.counters
    assert counts["timeouts"] == 3 and counts["retries"] == 2 and counts["failures"] == 1


def test_rate_limited_user_ends_user_failure_and_is_counted(tok):
    with FakeOpenAIServer(faults=lambda i, body: Fault("http429", retry_after_s=0.01)) as server:
        llm = LLMClient(user_cfg(server))
        trajs = rollout(tok, chat_tasks(2), ChatEnv, llm)
    assert [t.termination for t in trajs] == ["user_failure", "user_failure"]
    assert "HTTP 429" in trajs[0].detail
    assert llm.counters["rate_limited"] == 6 and llm.counters["retries"] == 4


def test_time_queued_behind_the_user_limit_is_not_a_timeout(tok):
    # One request at a time, 0.5 s each, 6 conversations of 2 user turns: the last one waits
    # about 5 s in the queue, 10 times the runner's call budget of 0.5 s. None may time out.
    with FakeOpenAIServer(latency_ms=500) as server:
        llm = LLMClient(user_cfg(server, max_concurrency=1))
        trajs = rollout(tok, chat_tasks(6), ChatEnv, llm, call_timeout_s=0.5)
        assert server.max_in_flight == 1
    assert [t.termination for t in trajs] == ["done"] * 6
    assert llm.counters["timeouts"] == 0 and llm.counters["requests"] == 12


def test_a_slow_env_still_times_out(tok):
    class SlowEnv(ChatEnv):
        async def step(self, action):
            await asyncio.sleep(3600)

    with FakeOpenAIServer() as server:
        (traj,) = rollout(
            tok, chat_tasks(1), SlowEnv, LLMClient(user_cfg(server)), call_timeout_s=0.2
        )
    assert traj.termination == "timeout" and "env.step" in traj.detail


# -- item: one misbehaving trajectory never kills the run ------------------------------------


class OddEnv:
    """Each task's payload picks a way for the env to misbehave."""

    def __init__(self, ctx: GymContext) -> None:
        pass

    async def reset(self, task: Task):
        self.kind = task.payload["kind"]
        if self.kind == "reset_none":
            return None
        if self.kind == "recursion":
            raise RecursionError("maximum recursion depth exceeded")
        return ResetResult(messages=list(task.prompt))

    async def step(self, action):
        kind = self.kind
        if kind == "step_none":
            return None
        if kind == "bad_reward":
            return StepResult(messages=[], reward="lots")
        if kind == "bad_messages":
            return StepResult(messages="not a list")
        if kind == "bad_errors":
            return StepResult(info={"errors": {"x": "many"}})
        if kind == "value_error":
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        return StepResult(messages=[{"role": "user", "content": "fine"}], reward=1.0, done=True)

    async def close(self) -> None:
        pass


def test_any_env_misbehaviour_ends_only_its_trajectory(tok):
    kinds = [
        "ok",
        "reset_none",
        "recursion",
        "step_none",
        "bad_reward",
        "bad_messages",
        "bad_errors",
        "value_error",
        "ok",
    ]
    tasks = [
        Task(f"t{i}", "odd", "test", [{"role": "user", "content": "hi"}], {"kind": k})
        for i, k in enumerate(kinds)
    ]
    trajs = rollout(tok, tasks, OddEnv, llm=None)
    ends = [t.termination for t in trajs]
    assert ends == ["done"] + ["env_error"] * 7 + ["done"], list(zip(kinds, ends, strict=True))
    for traj in trajs:
        json.loads(traj.to_json())


# -- item: unencodable text ------------------------------------------------------------------


class ToolEchoEnv(ChatEnv):
    """A tool output, a user reply and a prompt that all carry lone surrogates."""

    async def reset(self, task: Task) -> ResetResult:
        self.task = task
        return ResetResult(
            messages=[{"role": "system", "content": "sys \udfff"}, *task.prompt],
            tools=[{"type": "function", "function": {"name": "f\ud800", "parameters": {}}}],
        )

    async def step(self, action) -> StepResult:
        self.turns += 1
        user = await self.ctx.llm.complete([{"role": "user", "content": action.text}])
        tool = {"role": "tool", "name": "f", "content": "out \ud800 put"}
        return StepResult(messages=[tool, {"role": "user", "content": user}], done=self.turns >= 2)


def test_lone_surrogates_from_user_agent_tools_and_prompts_do_not_crash(tok, tmp_path):
    from mua.eval.summary import result_row

    def reply(request):
        return "user says \ud800 then \ud83d\ude00"  # JSON-escaped on the wire

    async def agent(messages, task):
        return {"role": "assistant", "content": "agent says \udc00"}

    with FakeOpenAIServer(reply) as server:
        llm = LLMClient(user_cfg(server, cache_dir=str(tmp_path / "cache")))
        task = Task("s", "chat", "test", [{"role": "user", "content": "hi \ud800"}], {})
        (traj,) = rollout(tok, [task], ToolEchoEnv, llm, policy=MessagePolicy(agent))
    assert traj.termination == "done", traj.detail
    text = json.dumps(traj.messages, ensure_ascii=False)
    text.encode("utf-8")  # every string is encodable
    assert "user says \ufffd then \U0001f600" in text and "agent says \ufffd" in text
    assert "out \ufffd put" in text and "hi \ufffd" in text and "sys \ufffd" in text
    json.dumps(result_row(traj, "chat"), ensure_ascii=False).encode("utf-8")
    # the reply went into the cache without error and served the repeated question
    assert llm.counters["requests"] == 1 and llm.counters["cache_hits"] == 1


def test_engine_policy_turn_with_escaped_surrogates_in_a_tool_call(tok):
    from mua.engines.engine_contract import GenerationResult

    class Scripted:
        kind = "tokens"
        tool_parser = "hermes"

        def __init__(self):
            text = '<tool_call>{"name": "ask", "arguments": {"question": "\\ud800?"}}</tool_call>'
            self.ids = tok.encode(text, add_special_tokens=False)

        async def generate(self, prompt_ids, max_new_tokens, stop_token_ids, **kw):
            ids = [*self.ids, stop_token_ids[0]]
            return GenerationResult(token_ids=ids, logprobs=[-0.1] * len(ids), finish_reason="stop")

    with FakeOpenAIServer(lambda req: req["messages"][-1]["content"]) as server:
        (traj,) = rollout(
            tok, chat_tasks(1), AskTool, LLMClient(user_cfg(server)), policy=Scripted()
        )
    assert traj.termination == "done", traj.detail
    tool_reply = next(m for m in traj.messages if m["role"] == "tool")
    assert tool_reply["content"] == "\ufffd?"


def test_public_url_leaves_credentials_out():
    from mua.llm.llm_client import public_url

    assert public_url("http://u:sk-123@host:8000/v1?key=sk-123") == "http://host:8000/v1"
    assert public_url("https://api.example.com/v1") == "https://api.example.com/v1"
    assert public_url("http://[::1]:9/v1") == "http://[::1]:9/v1"
    assert "sk" not in public_url("http://sk-123@host:notaport/v1")


def test_user_call_report_gives_the_counts_since_the_last_report():
    from mua.llm.llm_client import user_call_report

    faults = ["http429", None, None]
    with FakeOpenAIServer(faults=faults) as server:
        llm = LLMClient(user_cfg(server, backoff_s=0.01))
        asyncio.run(llm.complete([{"role": "user", "content": "a"}]))
        first = user_call_report(llm)
        asyncio.run(llm.complete([{"role": "user", "content": "b"}]))
        second = user_call_report(llm)
    assert first == {
        "user_requests": 2,
        "user_retries": 1,
        "user_rate_limited": 1,
        "user_timeouts": 0,
        "user_failures": 0,
    }
    assert second["user_requests"] == 1 and second["user_retries"] == 0
    assert user_call_report(None) == {}


def test_an_env_that_cannot_be_made_ends_its_trajectory_unless_the_recipe_is_wrong(tok):
    from mua.errors import UsageError

    made = []

    def flaky(ctx):
        made.append(1)
        if len(made) == 2:
            raise OSError("no file descriptors left")
        return OddEnv(ctx)

    tasks = [
        Task(f"t{i}", "odd", "test", [{"role": "user", "content": "hi"}], {"kind": "ok"})
        for i in range(3)
    ]
    ends = [t.termination for t in rollout(tok, tasks, flaky, llm=None, max_concurrency=1)]
    assert ends == ["done", "env_error", "done"]

    def misconfigured(ctx):
        raise UsageError("gym x: user.kind is llm but no LLM client was given")

    with pytest.raises(UsageError):
        rollout(tok, tasks, misconfigured, llm=None)


def test_wait_clock_stops_only_inside_outside_budgets():
    from mua.llm.wait_clock import WaitClock, outside_budgets, wait_within

    async def waits_on_endpoint(release: asyncio.Event) -> str:
        with outside_budgets():  # as ChatEndpoint.chat does
            await release.wait()
        return "answered"

    async def main():
        release = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, release.set)  # 20 times the budget
        answered = await wait_within(waits_on_endpoint(release), WaitClock(), 0.05)
        with pytest.raises(asyncio.TimeoutError):
            await wait_within(asyncio.sleep(3600), WaitClock(), 0.05)
        outer = WaitClock()  # a trajectory's clock stops too while its env call waits
        inner_release = asyncio.Event()
        asyncio.get_running_loop().call_later(1.0, inner_release.set)

        async def env_call():
            return await wait_within(waits_on_endpoint(inner_release), WaitClock(), 0.05)

        nested = await wait_within(env_call(), outer, 0.2)  # the 1 s wait is not counted
        return answered, nested

    assert asyncio.run(main()) == ("answered", "answered")


def test_wait_clock_budget_counts_running_time_before_and_after_a_stop():
    """A budget spent partly before and partly after a stopped stretch times out once the two
    running stretches add up to it, neither at the stretch before the stop nor never."""
    from mua.llm.wait_clock import WaitClock, outside_budgets, wait_within

    reached: list[str] = []

    async def works_waits_works() -> None:
        await asyncio.sleep(0.2)  # running
        with outside_budgets():
            await asyncio.sleep(0.6)  # stopped: longer than the whole budget
        reached.append("resumed")
        await asyncio.sleep(0.1)  # running: 0.3 s in all, under the 0.6 s budget
        reached.append("under budget")
        await asyncio.sleep(1.0)  # running past the budget
        reached.append("past budget")

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(wait_within(works_waits_works(), WaitClock(), 0.6))
    assert reached == ["resumed", "under budget"]
