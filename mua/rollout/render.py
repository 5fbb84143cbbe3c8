"""Readable views of trajectories: Rich panels for the terminal and a self-contained HTML page.

Both show every message with its role, the per-turn rewards, the total and the termination
reason; the HTML page can also show the token stream with trained tokens (loss mask 1) marked.
Nothing here changes a trajectory or needs torch.
"""

from __future__ import annotations

import html
from pathlib import Path

ROLE_STYLES = {
    "system": "dim",
    "user": "cyan",
    "assistant": "green",
    "tool": "magenta",
    "env": "yellow",
}


def _message_text(msg: dict) -> str:
    text = msg.get("content") or ""
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", call)
        text += f"\n→ {fn.get('name')}({fn.get('arguments')})"
    return text


def _summary(traj) -> str:
    rewards = ", ".join(f"{r:g}" for r in traj.turn_rewards)
    extra = f" ({traj.detail})" if traj.detail else ""
    drift = " · drift" if traj.metrics.get("drift") else ""
    return (
        f"task {traj.task_id} · sample {traj.sample_index} · reward {traj.reward:g} [{rewards}] · "
        f"{traj.num_turns} turns · {traj.termination}{extra}{drift}"
    )


def conversation_panel(traj):
    """A Rich renderable of one trajectory."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    assistant_turn = 0
    for msg in traj.messages:
        role = msg.get("role", "?")
        label = role
        if role == "assistant":
            reward = (
                traj.turn_rewards[assistant_turn]
                if assistant_turn < len(traj.turn_rewards)
                else None
            )
            label = f"assistant[{assistant_turn}]" + (
                f" r={reward:g}" if reward is not None else ""
            )
            assistant_turn += 1
        table.add_row(Text(label, style=ROLE_STYLES.get(role, "")), Text(_message_text(msg)))
    return Panel(table, title=_summary(traj), title_align="left")


def print_conversations(trajectories, count: int, console) -> None:
    for traj in list(trajectories)[:count]:
        console.print(conversation_panel(traj))


def _token_html(traj, tokenizer) -> str:
    spans = []
    for tok, mask, src in zip(traj.token_ids, traj.loss_mask, traj.sources, strict=False):
        piece = html.escape(tokenizer.decode([tok]))
        cls = "t" if mask else f"s-{src}"
        spans.append(f'<span class="{cls}">{piece}</span>')
    return f'<pre class="tokens">{"".join(spans)}</pre>'


_CSS = """body{font-family:sans-serif;max-width:60em;margin:auto}.traj{border:1px solid #ccc;margin:1em 0;padding:.5em}
.msg{white-space:pre-wrap;margin:.3em 0;padding:.3em;border-left:4px solid #999}.system{border-color:#aaa;color:#666}
.user{border-color:#2a9}.assistant{border-color:#3a3}.tool{border-color:#a3a}.env{border-color:#cc0}
.tokens{white-space:pre-wrap}.t{background:#cfc}.s-env{background:#ffc}.s-tool{background:#fcf}.s-user{background:#cef}"""


def write_html(trajectories, path: str | Path, tokenizer=None) -> Path:
    """One page with every trajectory; token streams too when a tokenizer is given."""
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>mua rollouts</title><style>{_CSS}</style>"
    ]
    for traj in trajectories:
        parts.append(f"<div class='traj'><h3>{html.escape(_summary(traj))}</h3>")
        for msg in traj.messages:
            role = html.escape(str(msg.get("role", "?")))
            parts.append(
                f"<div class='msg {role}'><b>{role}</b>: {html.escape(_message_text(msg))}</div>"
            )
        if tokenizer is not None:
            parts.append("<details><summary>tokens (green: trained)</summary>")
            parts.append(_token_html(traj, tokenizer) + "</details>")
        parts.append("</div>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
