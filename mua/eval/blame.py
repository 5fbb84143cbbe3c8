"""Failure blame: one label (`user`, `tool`, `budget`, `agent`) per unsuccessful scored conversation.

Deterministic rules decide first, in that order; with `eval.blame_judge` the conversations left
to the agent go to an LLM judge (`RUBRIC`, cached by request), and a failed judge gives
`unjudged` (docs/user_population.md, "Failure blame"). `blame_summary` counts labels and rules;
`without_user_failures` gives pass^k and success with user-blamed failures left out.
Not here: running conversations, printing.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from mua.eval.summary import ordered, pass_metrics, row_key
from mua.users.rules import user_findings

LABELS = ("agent", "user", "tool", "budget")
UNJUDGED = "unjudged"
BUDGET_ENDS = ("max_turns", "length")
TOOL_ENDS = ("env_error", "timeout")
ENV_ERROR_KINDS = ("tool_exception",)
NO_RULE = "no_rule"
BLAME_FILE = "blame.jsonl"
CACHE_DIR = "blame_cache"
MAX_TRANSCRIPT_CHARS = 8000

RUBRIC = """You review a failed conversation between an AI agent and a simulated user, and decide what caused the failure. Labels:
- user: the simulated user broke its instructions: it revealed what it should have kept back, invented facts its task does not give, gave up or ended the conversation early, or contradicted its task.
- tool: a tool or the environment failed (errors or wrong results the agent did not cause).
- budget: the agent was on track but the conversation ran out of turns or tokens.
- agent: anything else; the agent's own mistakes.
Reply with JSON only: {"label": "agent" | "user" | "tool" | "budget", "reason": "one sentence"}."""


@dataclass
class Verdict:
    label: str
    rule: str
    why: str


def rule_verdict(row: dict, payload: dict) -> Verdict | None:
    """The deterministic label of an unsuccessful scored row (None for the others)."""
    if row.get("excluded") or row.get("success"):
        return None
    findings = user_findings(row, payload)
    if findings:
        return Verdict("user", findings[0].rule, findings[0].why)
    ended = row.get("termination")
    if ended in TOOL_ENDS:
        return Verdict("tool", ended, str(row.get("detail") or "")[:200])
    raised = {k: v for k, v in (row.get("tool_errors") or {}).items() if k in ENV_ERROR_KINDS}
    if raised:
        return Verdict("tool", "tool_exception", f"tool errors: {raised}")
    if ended in BUDGET_ENDS:
        return Verdict("budget", ended, f"the conversation ended at the {ended} limit")
    return Verdict("agent", NO_RULE, "no rule found a user, tool or budget cause")


def transcript(row: dict) -> str:
    lines = []
    for m in row.get("messages") or []:
        from mua.users.rules import agent_text

        text = agent_text(m) if m.get("role") == "assistant" else str(m.get("content") or "")
        lines.append(f"{m.get('role')}: {text.strip()}")
    text = "\n".join(lines)
    return text if len(text) <= MAX_TRANSCRIPT_CHARS else text[-MAX_TRANSCRIPT_CHARS:]


def _validate(value) -> tuple[str, str]:
    if not isinstance(value, dict) or value.get("label") not in LABELS:
        raise ValueError(f'expected {{"label": one of {list(LABELS)}, "reason": text}}')
    return value["label"], str(value.get("reason") or "")[:300]


class BlameJudge:
    """The optional LLM judge (`eval.blame_judge`), caching its verdicts under `cache_dir`."""

    def __init__(self, cfg, out_dir: Path):
        from mua.llm.llm_client import make_llm_client

        if not cfg.cache_dir:
            cfg = cfg.model_copy(update={"cache_dir": str(Path(out_dir) / CACHE_DIR)})
        self.client = make_llm_client(cfg, "blame judge", "eval.blame_judge.base_url")

    def request(self, row: dict, payload: dict) -> list[dict]:
        task = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)[:3000]
        ask = (
            f"The user's task (hidden from the agent): {task}\n"
            f"How it ended: {row.get('termination')}, reward {row.get('reward')}\n"
            f"Conversation:\n{transcript(row)}"
        )
        return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": ask}]

    async def verdict(self, row: dict, payload: dict) -> Verdict:
        from mua.errors import UserFailure

        try:
            result = await self.client.complete_json(self.request(row, payload), validate=_validate)
            label, reason = result if isinstance(result, tuple) else _validate(result)
        except (UserFailure, ValueError) as err:
            return Verdict(UNJUDGED, "judge_failed", str(err)[:200])
        return Verdict(label, "judge", reason)

    async def aclose(self) -> None:
        await self.client.aclose()


async def blame_rows(rows: list[dict], payloads: dict[str, dict], judge=None) -> dict:
    """{row_key: Verdict} for the unsuccessful scored rows; `payloads` by task id."""
    verdicts = {}
    for row in rows:
        verdict = rule_verdict(row, payloads.get(str(row["task_id"]), {}))
        if verdict is not None:
            verdicts[row_key(row)] = verdict
    if judge is not None:
        left = [
            r for r in rows if verdicts.get(row_key(r)) and verdicts[row_key(r)].rule == NO_RULE
        ]
        judged = await asyncio.gather(
            *(judge.verdict(r, payloads.get(str(r["task_id"]), {})) for r in left)
        )
        verdicts.update({row_key(r): v for r, v in zip(left, judged)})
    return verdicts


def blame_summary(rows: list[dict], verdicts: dict) -> dict:
    """{"failures", "counts" {label}, "rates" {label: count / scored}, "rules" {rule: count}}."""
    scored = sum(1 for r in rows if not r.get("excluded"))
    counts = Counter(v.label for v in verdicts.values())
    labels = [*LABELS, *([UNJUDGED] if counts.get(UNJUDGED) else [])]
    return {
        "failures": sum(counts.values()),
        "counts": {label: counts.get(label, 0) for label in labels},
        "rates": {
            label: counts.get(label, 0) / scored if scored else float("nan") for label in labels
        },
        "rules": dict(sorted(Counter(v.rule for v in verdicts.values()).items())),
    }


def without_user_failures(rows: list[dict], verdicts: dict, k_values, task_order) -> dict:
    """pass@k / pass^k and success over the scored rows less those blamed on the user."""
    kept = [
        r
        for r in ordered(rows, task_order)
        if not r.get("excluded") and getattr(verdicts.get(row_key(r)), "label", None) != "user"
    ]
    removed = sum(1 for v in verdicts.values() if v.label == "user")
    success = [float(r["success"]) for r in kept]
    return {
        **pass_metrics(kept, list(k_values)),
        "success_rate": sum(success) / len(success) if success else float("nan"),
        "removed": removed,
    }


def write_blame(out_dir: Path, verdicts_by_cell: dict[str, dict]) -> Path:
    """`blame.jsonl`: one line per labelled conversation (gym, task_id, sample_index, label,
    rule, why), rewritten whole on each run."""
    path = Path(out_dir) / BLAME_FILE
    with open(path, "w", encoding="utf-8") as f:
        for verdicts in verdicts_by_cell.values():
            for (gym, task_id, sample), verdict in sorted(verdicts.items()):
                line = {"gym": gym, "task_id": task_id, "sample_index": sample, **asdict(verdict)}
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path
