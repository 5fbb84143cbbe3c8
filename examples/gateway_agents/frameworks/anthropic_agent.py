"""A number-guessing agent written with the `anthropic` SDK's Messages API: its own loop over
`client.messages.create` with a `guess` tool (tool_use / tool_result blocks; AGENT_MODE=tool),
one answer in a JSON schema (`output_config.format`; AGENT_MODE=structured), or both in turn
(AGENT_MODE=both). The client reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY; AGENT_STREAM=1
streams each reply (`client.messages.stream`). It prints {"reward": 1.0} when the number was
found, else 0.0 (an answer that does not parse ends that game)."""

from __future__ import annotations

import os

from _guess import Answer, Game
from anthropic import Anthropic
from pydantic import ValidationError

game = Game()
TOOLS = [
    {
        "name": "guess",
        "description": "Guess the secret number.",
        "input_schema": {
            "type": "object",
            "properties": {"number": {"type": "integer"}},
            "required": ["number"],
        },
    }
]


def ask(client, **args):
    if os.environ.get("AGENT_STREAM") == "1":
        with client.messages.stream(model=game.model, max_tokens=256, **args) as stream:
            return stream.get_final_message()
    return client.messages.create(model=game.model, max_tokens=256, **args)


def play_tool(client) -> None:
    messages: list[dict] = [{"role": "user", "content": "Your guess?"}]
    for _ in range(3):
        reply = ask(client, system=game.prompt("tool"), messages=messages, tools=TOOLS)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        results = [
            {
                "type": "tool_result",
                "tool_use_id": b.id,
                "content": game.guess(b.input.get("number")),
            }
            for b in reply.content
            if b.type == "tool_use"
        ]
        if not results or game.found:
            break
        messages.append({"role": "user", "content": results})


def play_structured(client) -> None:
    schema = Answer.model_json_schema() | {"additionalProperties": False}
    reply = ask(
        client,
        system=game.prompt("structured"),
        messages=[{"role": "user", "content": "Your guess?"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    text = "".join(b.text for b in reply.content if b.type == "text")
    try:
        game.answer(Answer.model_validate_json(text).number)
    except ValidationError:
        pass


def main() -> None:
    client = Anthropic(max_retries=0)
    for mode in game.modes():
        if mode == "tool":
            play_tool(client)
        else:
            play_structured(client)
    game.report()


if __name__ == "__main__":
    main()
