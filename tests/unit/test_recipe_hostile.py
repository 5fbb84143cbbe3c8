"""Recipes as hostile input: alias bombs, huge scalars, repeated keys, deep nesting, bytes that
are not UTF-8 and infinite numbers are each refused quickly with one line naming the file (exit 2
from the CLI), while anchors, aliases and merge keys of ordinary recipes still load."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from mua.config import load_recipe
from mua.errors import UsageError


def _alias_bomb() -> str:
    """Ten levels of nine aliases each: about 500 bytes standing for 4e9 values."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "gym:\n  options:\n" + "".join(f"    {line}\n" for line in lines)


HOSTILE = {
    "alias bomb": (_alias_bomb(), "its aliases expand it to 44129615"),
    "self-referring alias": ("gym:\n  options: &a\n    x: *a\n", "an alias refers to itself"),
    "10 MB scalar": ("run_dir: '" + "x" * 10_000_000 + "'\n", "larger than 1024 KiB"),
    "repeated key": (
        "optim:\n  lr: 1.0e-4\n  lr: 1.0\n",
        "line 3, column 3: key 'lr' is given twice (first on line 2)",
    ),
    "deep flow nesting": ("gym:\n  options:\n    x: " + "[" * 5000 + "]" * 5000 + "\n", "deeper"),
    "deep block nesting": (
        "gym:\n  options:\n"
        + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(300))
        + "  " * 302
        + "v: 1\n",
        "nested deeper than 64 levels",
    ),
    "latin-1 bytes": (
        "run_dir: caf\u00e9\n".encode("latin-1"),
        "line 1: byte b'\\xe9' is not UTF-8",
    ),
    "infinite float": ("optim:\n  lr: .inf\n", "optim.lr: must be a finite number (got inf)"),
    "NaN float": ("optim:\n  lr: .nan\n", "optim.lr: must be a finite number (got nan)"),
    "infinite option": (
        "gym:\n  options:\n    budget: -.inf\n",
        "gym.options.budget: must be a finite number",
    ),
}


@contextmanager
def _within(seconds: int):
    """Fail instead of hanging when the loader does not stop (an alias bomb once took >10 min)."""

    def give_up(signum, frame):
        raise TimeoutError(f"not refused within {seconds} s")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _write(tmp_path: Path, body) -> Path:
    path = tmp_path / "train.yaml"
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_recipe_is_refused_with_one_line_naming_the_file(tmp_path, case):
    body, expected = HOSTILE[case]
    path = _write(tmp_path, body)
    with _within(5), pytest.raises(UsageError) as refused:
        load_recipe(str(path), [], verb="train")
    (line,) = str(refused.value).splitlines()
    assert line.startswith(f"{path}: ") and expected in line, line
    assert len(line) < 400


def test_an_infinite_override_is_refused():
    with pytest.raises(UsageError, match=r"optim\.lr: must be a finite number \(got inf\)"):
        load_recipe(None, ["optim.lr=.inf"], verb="train")


def test_an_alias_bomb_in_an_override_stays_a_string():
    levels = ["&a0 [1,1,1,1,1,1,1,1,1]"]
    levels += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    bomb = "[" + ",".join(levels) + "]"
    with _within(5):
        recipe = load_recipe(None, [f"run_dir={bomb}"], verb="train")
    assert recipe.run_dir == bomb  # refused as YAML, so taken as the text it is


def test_anchors_aliases_and_merge_keys_still_load(tmp_path):
    path = _write(
        tmp_path,
        "optim: &o\n  lr: 2.0e-4\n  weight_decay: 0.1\n"
        "rollout:\n  temperature: 0.7\n"
        "gym:\n  options:\n    base: &b {x: 1, y: [1, 2]}\n    more:\n      <<: *b\n      x: 3\n",
    )
    recipe = load_recipe(str(path), [], verb="train")
    assert recipe.optim.lr == 2.0e-4
    assert recipe.gyms[0].options["more"] == {"x": 3, "y": [1, 2]}


def test_the_cli_exits_2_with_one_line(tmp_path, mua_cli):
    for case in ("repeated key", "latin-1 bytes", "alias bomb"):
        path = _write(tmp_path, HOSTILE[case][0])
        code, out, err = mua_cli("recipe", "validate", str(path))
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 2, (case, err[-2000:])
        assert len(lines) == 1 and str(path) in lines[0], (case, lines)
        assert "Traceback" not in out + err
