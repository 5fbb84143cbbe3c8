"""Readable views of trajectories: Rich panels for the terminal and a self-contained HTML page.

Both show every message with its role, the per-turn rewards, the total and the termination
reason. System prompts (a tau policy is several kilobytes) are collapsed to their first lines in
the terminal (`full=True` prints them whole) and folded in a `<details>` in HTML. The HTML page
can also show the token stream with trained tokens (loss mask 1) marked: one span per run of
tokens of the same kind (trained, or the source of untrained ones), each run decoded at once.
`token_runs` is shared with `mua view`. Nothing here changes a trajectory or needs torch.
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
COLLAPSED_LINES = 2  # lines of a system prompt the terminal view keeps
COLLAPSED_CHARS = 200


def message_text(msg: dict) -> str:
    text = msg.get("content") or ""
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", call)
        text += f"\n→ {fn.get('name')}({fn.get('arguments')})"
    return text


def collapse(text: str, lines: int = COLLAPSED_LINES, chars: int = COLLAPSED_CHARS) -> str:
    """The first `lines` lines (at most `chars` characters) and how much was left out."""
    head = "\n".join(text.splitlines()[:lines])[:chars]
    hidden = len(text) - len(head)
    if hidden <= 0:
        return text
    return f"{head.rstrip()} … [{hidden:,} more characters]"


def summary_line(traj) -> str:
    rewards = ", ".join(f"{r:g}" for r in traj.turn_rewards)
    extra = f" ({traj.detail})" if traj.detail else ""
    drift = " · drift" if traj.metrics.get("drift") else ""
    return (
        f"task {traj.task_id} · sample {traj.sample_index} · reward {traj.reward:g} [{rewards}] · "
        f"{traj.num_turns} turns · {traj.termination}{extra}{drift}"
    )


def conversation_panel(traj, full: bool = False):
    """A Rich renderable of one trajectory (system prompts collapsed unless `full`)."""
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
        text = message_text(msg)
        if role == "system" and not full:
            text = collapse(text)
        table.add_row(Text(label, style=ROLE_STYLES.get(role, "")), Text(text))
    return Panel(table, title=summary_line(traj), title_align="left")


def print_conversations(trajectories, count: int, console, full: bool = False) -> None:
    for traj in list(trajectories)[:count]:
        console.print(conversation_panel(traj, full=full))


def token_runs(traj, tokenizer) -> list[tuple[str, str]]:
    """[(kind, text)]: maximal runs of consecutive tokens of one kind, each decoded at once.

    kind is `trained` for loss-mask-1 tokens, else the token's source (`prompt`, `user`, ...).
    Decoding a run at once also keeps multi-byte characters split over tokens whole.
    """
    runs: list[tuple[str, list[int]]] = []
    for tok, mask, src in zip(traj.token_ids, traj.loss_mask, traj.sources, strict=False):
        kind = "trained" if mask else str(src)
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(int(tok))
        else:
            runs.append((kind, [int(tok)]))
    return [(kind, tokenizer.decode(ids)) for kind, ids in runs]


def token_html(traj, tokenizer) -> str:
    spans = "".join(
        f'<span class="k-{html.escape(kind)}">{html.escape(text)}</span>'
        for kind, text in token_runs(traj, tokenizer)
    )
    return f'<pre class="tokens">{spans}</pre>'


def message_html(msg: dict) -> str:
    role = html.escape(str(msg.get("role", "?")))
    text = message_text(msg)
    body = html.escape(text)
    if role == "system" and collapse(text) != text:
        body = f"<details><summary>{html.escape(collapse(text))}</summary>{body}</details>"
    return f"<div class='msg {role}'><b>{role}</b>: {body}</div>"


CSS = """body{font-family:sans-serif;max-width:60em;margin:auto}.traj{border:1px solid #ccc;margin:1em 0;padding:.5em}
.msg{white-space:pre-wrap;margin:.3em 0;padding:.3em;border-left:4px solid #999}.system{border-color:#aaa;color:#666}
.user{border-color:#2a9}.assistant{border-color:#3a3}.tool{border-color:#a3a}.env{border-color:#cc0}
.tokens{white-space:pre-wrap}.k-trained{background:#cfc}.k-env{background:#ffc}.k-tool{background:#fcf}.k-user{background:#cef}"""


def write_html(trajectories, path: str | Path, tokenizer=None) -> Path:
    """One page with every trajectory; token streams too when a tokenizer is given."""
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>mua rollouts</title><style>{CSS}</style>"
    ]
    for traj in trajectories:
        parts.append(f"<div class='traj'><h3>{html.escape(summary_line(traj))}</h3>")
        parts.extend(message_html(msg) for msg in traj.messages)
        if tokenizer is not None:
            parts.append("<details><summary>tokens (green: trained)</summary>")
            parts.append(token_html(traj, tokenizer) + "</details>")
        parts.append("</div>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
