"""`mua eval`'s tables read whole on a 100-column terminal: every header and every cell appears
in full (a long cell wraps), and nothing is cut with an ellipsis."""

from __future__ import annotations

from rich.console import Console

from mua.eval.report import summary_table


def _summary(reward: float) -> dict:
    passes = {f"pass{sign}{k}": reward / k for sign in "@^" for k in (1, 2, 4, 8)}
    return {
        "num_tasks": 50,
        "num_trajectories": 400,
        "reward_mean": reward,
        "success_rate": reward / 2,
        **passes,
        "turns_mean": 4.5,
        "tokens_mean": 1234.0,
        "parse_failures": 3,
        "tool_errors": 12,
        "excluded": 2,
        "trivial_baseline": 0.125,
        "terminations": {"done": 300, "max_turns": 50, "length": 20, "user_failure": 2},
        "user_requests": 100,
        "user_retries": 3,
        "user_rate_limited": 0,
        "user_timeouts": 4,
        "components": {"db": 0.5, "communicate": 0.25, "nl_assertions": 0.75},
    }


def test_the_whole_table_reads_at_100_columns():
    summaries = {"tau2-telecom": _summary(0.5), "intention": _summary(0.25), "guess": _summary(1.0)}
    console = Console(width=100, record=True, color_system=None)
    console.print(summary_table(summaries, "mua eval · runs/quickstart/hf/final · n=8 · T=1"))
    text = console.export_text()
    lines = text.splitlines()
    assert "…" not in text
    assert max(len(line) for line in lines) <= 100
    flat = " ".join(text.split())
    for header in ("gym", "tasks×n", "reward", "success", "turns", "tokens", "baseline", "parse"):
        assert f" {header} " in flat, header
    for header in ("tool", "excl", "user", "ended", "components", "pass@8", "pass^8"):
        assert f" {header} " in flat, header
    for gym in summaries:
        assert f"│ {gym} " in text, gym
    for cell in ("50×8", "0.500", "0.125", "1234", "3/0/4", "macro avg", "3 gyms"):
        assert cell in text, cell
    for cell in ("done 300", "max_turns 50", "user_failure 2", "nl_assertions 0.75"):
        assert cell in flat, cell
