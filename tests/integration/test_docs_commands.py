"""Every command the README shows and every example in `mua ... --help` runs as a user types it.

The README's command blocks (```bash lines, and `$ ` lines of ```text blocks) run first, in the
README's order, in one fresh checkout (a scratch folder linking each of the repository's entries),
so each command finds what the ones before it wrote, as a reader's would; then every help example.
They run as a user's shell runs them: a bash line (globs expanded) with `.venv/bin` first on the
PATH, so `mua` is the installed executable and `python` the virtualenv's, and no PYTHONPATH.
Sizes are cut by overrides appended to the command (a couple of training steps, a few tasks),
never by editing it. Commands that need what a test machine lacks (a GPU, an endpoint, public
data, a second machine, an install) are skipped with the reason shown; an example that works on
another run's output (a LoRA run for `mua merge --adapter`) gets that run first (`BEFORE`). A doc
naming a missing recipe, option or file fails here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import fresh_checkout, installed_mua, user_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]

SKIPS = (  # (pattern in the command, why it does not run here)
    (
        r"^make (test|bench|lint|fmt)|make lint",
        "a make target: `make test` is this suite; bench/lint are not tests",
    ),
    (r"^make demo", "runs as tests/integration/test_demo.py (its --quick form)"),
    (r"^make gpu-check", "needs a GPU (tests/unit/test_gpu_check.py checks its refusal here)"),
    (r"^MUA_B2_ENGINE=|make bench", "a benchmark"),
    (r"^(pip|python -m venv)|pip install", "installs packages"),
    (r"^source ", "shell activation: every command here runs with .venv/bin first on the PATH"),
    (r"^mlflow ui", "starts a server; tests/unit/test_first_hour.py checks the printed command"),
    (r"openai:|--user llm", "needs an OpenAI-compatible endpoint"),
    (r"path/to/|--source", "needs public data"),
    (r"Qwen/|\./Qwen|\./my_model|--device cuda", "needs a real model on a GPU host"),
    (r"--nnodes 2", "needs a second machine"),
    (r"^mua serve", "starts a server (tests/unit/test_serve.py)"),
    (
        r"eval_user_matrix|tests\.fakes\.fake_users",
        "needs the scripted users on 127.0.0.1:8011 (tests/unit/test_user_matrix.py runs them)",
    ),
)
# (pattern in the command, what a reader runs first, the folder it writes): an example that
# works on what another command wrote, which the README names in prose rather than a block
BEFORE = (
    (r"runs/quickstart_lora\b", "mua train recipes/quickstart_lora.yaml", "runs/quickstart_lora"),
)
RL_CUT = ["total_steps=2", "checkpoint.save_freq=1", "data.tasks_per_step=2", "rollout.n=2"]


def _cut(argv: list[str]) -> list[str]:
    """Overrides that shrink a command to a smoke test."""
    verb = argv[1] if len(argv) > 1 else ""
    if verb == "train":
        return ["total_steps=2"] if any("sft" in a for a in argv) else RL_CUT
    if verb == "eval":
        return [
            "--max-tasks",
            "1",
            "-n",
            "2",
            "rollout.max_turns=2",
            "rollout.max_new_tokens_per_turn=16",
        ]
    if verb == "rollout" and not any(a.startswith("data.max_tasks=") for a in argv):
        return ["data.max_tasks=16"]
    return []


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    out = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        for line in body.splitlines():
            if lang == "text" and line.startswith("$ "):
                out.append(line[2:])
            elif lang == "bash" and line.strip() and not line.lstrip().startswith("#"):
                out.append(line)
    return [re.sub(r"\s+#.*$", "", c).strip() for c in out]


def _help_examples() -> list[str]:
    import typer

    from mua.cli.main import app

    examples = []

    def walk(cmd):
        for line in (cmd.help or "").splitlines():
            line = re.sub(r"^\[cyan\](.*)\[/cyan\]$", r"\1", line)  # examples are coloured
            line = re.sub(r"^\s*(Example:\s*)?", "", line)
            line = re.sub(r"\s+\(.*\)$", "", line)  # a trailing remark in parentheses
            if (
                line.startswith("mua ")
                and "[" not in line
                and not re.search(r"\b[A-Z][A-Z_]{2,}\b", line)
            ):
                examples.append(line.strip())
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return examples


def _unique(pairs):
    seen: set[str] = set()
    return [(w, c) for w, c in pairs if not (c in seen or seen.add(c))]


COMMANDS = _unique(
    [("readme", c) for c in _readme_commands()] + [("help", c) for c in _help_examples()]
)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    return fresh_checkout(tmp_path_factory.mktemp("docs"))


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[f"{w}:{c}" for w, c in COMMANDS])
def test_documented_command_runs(where, command, sandbox):
    for pattern, reason in SKIPS:
        if re.search(pattern, command):
            pytest.skip(f"{reason}: {command}")
    for pattern, first, writes in BEFORE:
        if re.search(pattern, command) and not (sandbox / writes).exists():
            _run(where, first, sandbox)
    _run(where, command, sandbox)


def _run(where: str, command: str, sandbox: Path) -> None:
    """`command` (plus `_cut`'s overrides) as a shell line, in a shell whose PATH starts with the
    virtualenv's bin folder, as `source .venv/bin/activate` leaves it."""
    line = command + "".join(f" {shlex.quote(a)}" for a in _cut(shlex.split(command)))
    path = f"{Path(installed_mua()).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    res = subprocess.run(
        ["bash", "-c", line],
        cwd=sandbox,
        env=user_env(PATH=path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, (
        f"{where}: `{command}` exited {res.returncode}\n{res.stdout[-1500:]}\n{res.stderr[-2500:]}"
    )
    assert "Traceback" not in res.stderr
