"""tau2's NL-assertion judge under `profile: leaderboard`: its prompts, read from the checkout.

tau2-bench builds the judge's two messages inside
`NLAssertionsEvaluator.evaluate_nl_assertions` (`evaluator/evaluator_nl_assertions.py`): a
system prompt (a string literal, indentation and all) and a user prompt (an f-string of the
conversation, one `role: content` line per message, and the Python list of assertions). They
are read from that function's source with ast and filled the way the f-string fills them.

The reply is read as tau2 reads it: `json.loads` of the whole text (no fence stripping), then
`metExpectation` of each entry of `results`; the component is 1 when every entry is met
(tau2 does not check the count, so an empty `results` passes). A reply that is not such JSON
is retried by the client and, when retries are spent, masks the conversation (tau2 would
stop with an exception).
"""

from __future__ import annotations

import ast
import json

from gyms.tau2.leaderboard.pysource import module_tree
from gyms.tau2.leaderboard.source import SourceError, Tau2Source

EVALUATOR = "evaluator/evaluator_nl_assertions.py"
CLASS, METHOD = "NLAssertionsEvaluator", "evaluate_nl_assertions"


def _method(source: Tau2Source) -> ast.FunctionDef:
    path = source.pkg / EVALUATOR
    if not path.is_file():
        raise SourceError(f"{path} is missing; is this a tau2-bench v1.0.1 checkout?")
    for node in module_tree(path).body:
        if isinstance(node, ast.ClassDef) and node.name == CLASS:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == METHOD:
                    return item
    raise SourceError(f"{path} has no {CLASS}.{METHOD}")


def _assigned(method: ast.FunctionDef, name: str) -> ast.AST:
    for node in ast.walk(method):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
        ):
            return node.value
    raise SourceError(f"tau2's {METHOD} assigns no {name}")


def _render(node: ast.AST, values: dict) -> str:
    """A string literal, or an f-string whose fields are plain names in `values`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        raise SourceError(f"tau2's {METHOD}: a prompt is not a string literal or f-string")
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(part.value)
        elif (
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Name)
            and part.value.id in values
            and part.conversion == -1
            and part.format_spec is None
        ):
            out.append(str(values[part.value.id]))
        else:
            raise SourceError(f"tau2's {METHOD}: an f-string field mua cannot fill")
    return "".join(out)


def judge_messages(source: Tau2Source, transcript: list[dict], assertions: list[str]) -> list:
    """The judge's request messages, as tau2 sends them."""
    method = source._once(("judge",), lambda: _method(source))
    conversation = "\n".join(f"{m['role']}: {m.get('content')}" for m in transcript)
    values = {"trajectory_str": conversation, "nl_assertions": list(assertions)}
    return [
        {"role": "system", "content": _render(_assigned(method, "system_prompt"), values)},
        {"role": "user", "content": _render(_assigned(method, "user_prompt"), values)},
    ]


def read_verdicts(text: str) -> list[bool]:
    """tau2's reading of a judge reply: ValueError when it is not tau2's JSON shape."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the judge's reply is not a JSON object")
    results = data.get("results", [])
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and "metExpectation" in r for r in results
    ):
        raise ValueError("each result needs metExpectation")
    return [bool(r["metExpectation"]) for r in results]


async def judge(client, source: Tau2Source, transcript: list[dict], assertions: list[str]):
    """One verdict per entry of the judge's `results` (tau2 scores 1 when all are met)."""
    messages = judge_messages(source, transcript, assertions)
    endpoint = getattr(client, "endpoint", None)
    if endpoint is None:
        return await client.complete_json(messages, validate=lambda v: read_verdicts(json.dumps(v)))
    cfg = getattr(client, "cfg", None)
    kwargs = {"temperature": cfg.temperature, "max_tokens": cfg.max_tokens} if cfg else {}
    _, verdicts = await endpoint.chat(
        messages, parse=lambda m: read_verdicts(m.content or ""), **kwargs
    )
    return verdicts
