"""One episode of the mcp gym: the task's prompt, the servers' tools, the user, the reward.

`reset` opens (or reuses) the process's servers and offers their tools as OpenAI-style schemas,
which the model's chat template renders in its family's format; arguments named in
`options.task_args` are filled from the task payload and hidden from the model, and the judge
tool is not offered. Each call's result text is the tool message; a tool's own error is shown
to the model as `Error: …` and counted (`tool_exception`), arguments the schema refuses as
`bad_arguments`, an unknown name as `unknown_tool`. A turn without tool calls goes to the user:
scripted, the payload's `user_replies` in order (none left ends the episode); `llm`, the
simulated user prompted with the payload's `user_instructions` (`###STOP###` ends it); with
`end_on_text` it ends the episode. A tool result whose structured content holds `"done": true`
ends it too. The episode's reward (`gyms.mcp.reward`) is paid on its last turn, however it
ended. Server failures raise `McpFault` (env_error).
"""

from __future__ import annotations

import copy
import json

from gyms.mcp.config import read_options
from gyms.mcp.hub import McpFault, McpTool, hub
from gyms.mcp.reward import episode_reward
from mua.errors import UsageError
from mua.gym import AgentAction, GymContext, ResetResult, StepResult, Task, ToolCall, ToolEnv

STOP = "###STOP###"


def visible_schema(tool: McpTool, hidden: list[str]) -> dict:
    """The tool's OpenAI-style schema with the hidden arguments left out."""
    params = copy.deepcopy(tool.schema)
    params.pop("title", None)
    props = params.get("properties") or {}
    for name in hidden:
        props.pop(name, None)
    if "required" in params:
        params["required"] = [r for r in params["required"] if r not in hidden]
    for prop in props.values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description.strip(),
            "parameters": params,
        },
    }


class McpEnv(ToolEnv):
    def __init__(self, ctx: GymContext):
        import importlib.util

        if importlib.util.find_spec("mcp") is None:
            raise UsageError(
                "the mcp gym needs the mcp package: pip install -e '.[mcp]' (mcp 2.0.0)"
            )
        self.ctx = ctx
        self.opts = read_options(ctx.options)
        if self.opts.reward.kind == "gym":
            from mua.gym import get_gym

            if get_gym(self.opts.reward.name).score_conversation is None:
                raise UsageError(
                    f"gym.options.reward: gym {self.opts.reward.name} cannot score a conversation; "
                    "use reward kind tool or program"
                )
        self.hub = hub()
        self.task: Task | None = None
        self.messages: list[dict] = []
        self.tools: dict[str, tuple] = {}  # name -> (connection, McpTool)
        self.judge = None
        self.user_turns = 0

    async def reset(self, task: Task) -> ResetResult:
        self.task = task
        conns = await self.hub.connections(self.opts.servers)
        judge = self.opts.reward.name if self.opts.reward.kind == "tool" else None
        offered_by: dict[str, str] = {}
        for conn in conns:
            for tool in conn.tools.values():
                if tool.name in offered_by:
                    raise UsageError(
                        f"gym.options.servers: tool {tool.name!r} is offered by both "
                        f"{offered_by[tool.name]} and {conn.cfg.name}; keep it on one (a "
                        "server's `tools:` list)"
                    )
                offered_by[tool.name] = conn.cfg.name
                if tool.name == judge:
                    self.judge = (conn, tool)
                else:
                    self.tools[tool.name] = (conn, tool)
        if judge is not None and self.judge is None:
            raise UsageError(f"gym.options.reward: no server offers the judge tool {judge!r}")
        self.messages = [dict(m) for m in task.prompt]
        schemas = [visible_schema(t, self.opts.task_args) for _, t in self.tools.values()]
        return ResetResult(messages=[dict(m) for m in task.prompt], tools=schemas)

    def task_arguments(self, tool: McpTool) -> dict:
        """The payload values of `task_args` that `tool` takes."""
        props = tool.schema.get("properties") or {}
        return {
            k: self.task.payload[k]
            for k in self.opts.task_args
            if k in props and k in self.task.payload
        }

    async def call_tool(self, call: ToolCall) -> tuple[dict, str | None]:
        import jsonschema

        held = self.tools.get(call.name)
        if held is None:
            names = ", ".join(sorted(self.tools)) or "none"
            msg = f"Error: unknown tool {call.name!r}. Available tools: {names}."
            return self._tool_msg(call, msg), "unknown_tool"
        conn, tool = held
        args = call.arguments
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                return self._tool_msg(call, "Error: arguments are not valid JSON."), "bad_arguments"
        shown = visible_schema(tool, self.opts.task_args)["function"]["parameters"]
        try:
            jsonschema.validate(args, shown)
        except jsonschema.ValidationError as e:
            return self._tool_msg(
                call, f"Error: bad arguments for {call.name}: {e.message}."
            ), "bad_arguments"
        result = await self.hub.call(conn, tool.name, {**args, **self.task_arguments(tool)})
        text = "\n".join(
            getattr(b, "text", None) or f"[{b.type} content left out]" for b in result.content
        )
        if result.is_error:
            return self._tool_msg(call, f"Error: {text}"), "tool_exception"
        structured = result.structured_content
        if isinstance(structured, dict) and structured.get("done") is True:
            self._done = True
        return self._tool_msg(call, text), None

    async def _user_reply(self, action: AgentAction) -> tuple[list[dict], bool]:
        payload = self.task.payload
        if self.opts.end_on_text:
            return [], True
        if self.ctx.user_kind == "llm":
            instructions = payload.get("user_instructions")
            if not isinstance(instructions, str):
                raise UsageError(
                    f"task {self.task.task_id}: the LLM user needs payload.user_instructions "
                    "(a string); add it at prep or use user.kind: scripted"
                )
            seen = [{"role": "system", "content": instructions}] + [
                {
                    "role": "assistant" if m["role"] == "user" else "user",
                    "content": m.get("content") or "",
                }
                for m in self.messages
                if m["role"] in ("user", "assistant") and (m.get("content") or "").strip()
            ]
            reply = (await self.ctx.llm.complete(seen)).strip()
            done = STOP in reply
            reply = reply.replace(STOP, "").strip()
            return ([{"role": "user", "content": reply}] if reply else []), done or not reply
        replies = payload.get("user_replies") or []
        if self.user_turns >= len(replies):
            return [], True
        self.user_turns += 1
        return [{"role": "user", "content": str(replies[self.user_turns - 1])}], False

    async def step(self, action: AgentAction) -> StepResult:
        self._done = False
        self.messages.append(action.as_message())
        info: dict = {}
        if action.tool_calls or action.parse_errors:
            replies, errors = await self.call_tools(action)
            info = {"errors": errors} if errors else {}
            done = self._done
        else:
            replies, done = await self._user_reply(action)
        self.messages += replies
        reward = await episode_reward(self) if done else 0.0
        return StepResult(
            messages=replies, reward=reward, components={"reward": reward}, done=done, info=info
        )

    async def on_truncate(self, reason: str) -> StepResult:
        reward = await episode_reward(self)
        return StepResult(reward=reward, components={"reward": reward})

    async def close(self) -> None:
        return None


__all__ = ["McpEnv", "McpFault", "visible_schema"]
