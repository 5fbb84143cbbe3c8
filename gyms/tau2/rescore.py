"""Re-grade saved tau2 results with the current task definitions (tau2's `--fresh-tasks`).

    python -m gyms.tau2.report --rescore <eval out dir> [--data <tau2 checkout or data folder>]

Each saved conversation (a results row's `messages`) is scored again by `reward.score` against
the task as the data folder defines it now: the agent's tool calls (the first of each turn, as
the episode ran them) are replayed for the DB and environment-assertion checks, its messages
checked for the communicate info, the gold actions matched. The data folder is `--data`, else
the eval's `gym.options.data_dir`.

What the rows do not hold is not invented: NL_ASSERTION keeps the saved verdict (the judge is
not asked again); the user's own tool calls (telecom) are not saved, so a row whose task gives
the user tools or user actions is left as it was and counted as not rescored. Rescored rows go
to `results_rescored.jsonl` beside `results.jsonl`, which is not touched.
"""

from __future__ import annotations

import json
from pathlib import Path

from gyms.tau2 import reward
from gyms.tau2.domain import AGENT
from gyms.tau2.users import STOP_TOKENS
from mua.errors import UsageError

RESCORED = "results_rescored.jsonl"


def termination_of(row: dict) -> str:
    messages = row.get("messages") or []
    last = messages[-1] if messages else {}
    text = last.get("content") or ""
    if last.get("role") == "user" and any(t in text for t in STOP_TOKENS):
        return "user_stop"
    if last.get("role") == "assistant" and ("###STOP###" in text or _called_done(last)):
        return "agent_stop"
    if row.get("termination") == "done":
        return "too_many_errors" if last.get("role") == "tool" else "ended"
    return str(row.get("termination"))


def _called_done(message: dict) -> bool:
    calls = message.get("tool_calls") or []
    return any((c.get("function") or {}).get("name") == "done" for c in calls)


def domain_of(task_id: str) -> str:
    parts = task_id.split("-")
    if len(parts) > 2 and parts[1] == "telecom" and parts[2] == "workflow":
        return "telecom-workflow"
    return parts[1] if len(parts) > 1 else "?"


def _arguments(value):
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


def conversation(messages: list[dict]) -> tuple[list[dict], list[str]]:
    """(agent tool calls, agent texts) of a saved conversation, as the episode recorded them."""
    calls, texts, seen_user = [], [], False
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            seen_user = True
        if role != "assistant" or not seen_user:  # the greeting precedes the first user turn
            continue
        tool_calls = message.get("tool_calls") or []
        if tool_calls:
            reply = messages[i + 1] if i + 1 < len(messages) else {}
            if reply.get("role") == "tool" and reply.get("name") == "parser":
                continue  # the call did not parse; nothing ran
            function = tool_calls[0].get("function") or {}
            calls.append(
                {
                    "requestor": AGENT,
                    "name": function.get("name"),
                    "arguments": _arguments(function.get("arguments")),
                }
            )
        else:
            texts.append(message.get("content") or "")
    return calls, texts


def rescore_rows(rows: list[dict], data_dir) -> tuple[list[dict], dict]:
    """(rows with rewards re-graded, counts {rescored, changed, kept})."""
    from gyms.tau2.env import domain_for
    from gyms.tau2.leaderboard.comparable import is_tau2_row
    from gyms.tau2.tasks import read_tasks

    tasks: dict[str, dict] = {}
    counts = {"rescored": 0, "changed": 0, "kept": 0}
    out = []
    for row in rows:
        if not is_tau2_row(row) or row.get("excluded"):
            out.append(row)
            continue
        name = domain_of(str(row["task_id"]))
        if name not in tasks:
            tasks[name] = {f"tau2-{name}-{t['id']}": t for t in read_tasks(Path(data_dir), name)[0]}
        task = tasks[name].get(str(row["task_id"]))
        if task is None:
            raise UsageError(
                f"tau2: {row['task_id']} is not a task of {data_dir} any more; rescore with the "
                "data folder the evaluation used (--data)"
            )
        domain = domain_for(name, data_dir)
        criteria = task.get("evaluation_criteria") or {}
        user_side = domain.new_environment().user_schemas() or any(
            a.get("requestor") == "user" for a in criteria.get("actions") or []
        )
        if user_side:
            counts["kept"] += 1
            out.append({**row, "rescored": False})
            continue
        calls, texts = conversation(row.get("messages") or [])
        saved = (row.get("reward_components") or {}).get("nl_assertion")
        nl = None if saved is None else [bool(saved >= 1.0)]
        skip = ("NL_ASSERTION",) if nl is None and criteria.get("nl_assertions") else ()
        value, components, _ = reward.score(
            domain, task, calls, texts, termination_of(row), nl_results=nl, skip=skip
        )
        counts["rescored"] += 1
        counts["changed"] += int(abs(value - float(row["reward"])) > 1e-9)
        out.append({**row, "reward": value, "reward_components": components, "rescored": True})
    return out, counts


def rescore(out_dir: Path, data_dir=None) -> dict:
    """Rescore `out_dir`'s results into RESCORED; the counts."""
    from gyms.tau2.leaderboard.checkout import data_folder

    config = json.loads((out_dir / "eval_config.json").read_text())
    data_dir = data_dir or ((config.get("gym_options") or {}).get("tau2") or {}).get("data_dir")
    if data_dir is None:
        raise UsageError("tau2 --rescore: give --data <tau2-bench checkout or its data folder>")
    rows = [
        json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines() if x.strip()
    ]
    rescored, counts = rescore_rows(rows, data_folder(data_dir))
    (out_dir / RESCORED).write_text("".join(json.dumps(r) + "\n" for r in rescored))
    return counts
