"""An MCP server (mcp SDK) that plays the guess game: the tools a `gyms: [{name: mcp}]` entry offers.

`interact_with_env(choice, content, target)` answers a guess with higher, lower or Correct! (and
`"done": true` in its structured content, which ends the episode); `judge(target, messages)`
scores a finished conversation, 1 when an assistant turn named the target. `target` comes from
each task's payload (the recipe's `task_args`), so the model never sees it. Run as
`python examples/mcp/guess_server.py` (stdio) or with `--http PORT` (streamable HTTP at
http://127.0.0.1:PORT/mcp).
"""

from __future__ import annotations

import json
import re
import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

app = MCPServer("guess")
_ANSWER = re.compile(r"\[\s*answer\s*\]\s*([-+]?\d+)", re.I)


@app.tool()
def interact_with_env(choice: str, content: str = "", target: int = 0) -> CallToolResult:
    """Act in the game: `answer` with a number as content to guess it."""
    if choice.strip().lower() != "answer":
        text, done = "Guess with [answer] N.", False
    elif not content.strip().lstrip("-").isdigit():
        text, done = "Give a number.", False
    else:
        guess = int(content.strip())
        done = guess == target
        text = "Correct!" if done else ("higher" if guess < target else "lower")
    print(f"guess {content!r} target {target}: {text}", file=sys.stderr, flush=True)
    structured = {"done": done}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


@app.tool()
def judge(target: int, messages: str) -> str:
    """1 when an assistant turn of the conversation (JSON) guessed the target, else 0."""
    for msg in json.loads(messages):
        if msg.get("role") != "assistant":
            continue
        match = _ANSWER.search(msg.get("content") or "")
        said = [match.group(1)] if match else []
        for call in msg.get("tool_calls") or []:
            args = call.get("function", {}).get("arguments")
            if isinstance(args, dict):
                said.append(str(args.get("content", "")).strip())
        if str(target) in said:
            return "1"
    return "0"


def main(argv: list[str]) -> None:
    if "--http" in argv:
        port = int(argv[argv.index("--http") + 1])
        app.run(transport="streamable-http", host="127.0.0.1", port=port)
    else:
        app.run()


if __name__ == "__main__":
    main(sys.argv[1:])
