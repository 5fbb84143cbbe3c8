"""The figures the README's set-up section quotes about `make demo` come from where they are made:
the B8 benchmark's result file (`bench/results/B8.json`, written by `make bench B=B8`), the demo's
recipes and settings, and pyproject. Every number in that section's prose is one of the figures
listed here, and each equals its source rounded as the README shows it: a re-run of B8 that moves a
figure fails here until the README says the new value, and a new figure needs a source here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
B8_FILE = REPO / "bench" / "results" / "B8.json"


def _b8() -> dict:
    assert B8_FILE.is_file(), f"{B8_FILE} is missing: run `make bench B=B8` and commit it"
    return json.loads(B8_FILE.read_text())


def _recipe(name: str) -> dict:
    return yaml.safe_load((REPO / "recipes" / name).read_text())


def _demo_model_millions() -> float:
    from mua.models.tiny import TINY_PRESETS

    preset = _recipe("quickstart_sft.yaml")["model"]["path"].removeprefix("tiny:")
    return TINY_PRESETS[preset].approx_params / 1e6


def _game_range() -> str:
    from mua.demo import MAX_NUMBER

    return f"1..{MAX_NUMBER}"


def _python_floor() -> float:
    import tomllib

    spec = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    return float(spec.removeprefix(">="))


# (the figure in its words, its number as the one group; where its value comes from)
FIGURES = (
    (r"Python ≥ (\d+\.\d+)", _python_floor),
    (r"guess a number in (1\.\.\d+)", _game_range),
    (r"model \((\d+)M parameters\)", _demo_model_millions),
    (r"runs (\d+) GRPO steps", lambda: _recipe("quickstart.yaml")["total_steps"]),
    (
        r"sampled at temperature (\d+)",
        lambda: _recipe("quickstart_eval.yaml")["eval"]["temperature"],
    ),
    (r"(\d+) games per held-out task", lambda: _recipe("quickstart_eval.yaml")["eval"]["n"]),
    (r"B=B8\` \((\d+) seeds", lambda: _b8()["metrics"]["seeds"]),
    (r"held-out reward (\d\.\d+) after SFT", lambda: _b8()["metrics"]["reward_after_sft"]),
    (r"and (\d\.\d+) after GRPO", lambda: _b8()["metrics"]["reward_after_rl"]),
    (r"a gain of ([+-]\d\.\d+)", lambda: _b8()["metrics"]["reward_gain"]),
    (r"gains differ by at most (\d\.\d+)", lambda: _b8()["metrics"]["reward_gain_spread"]),
    (r"slowest seed took (\d+(?:\.\d+)?) minutes", lambda: _b8()["metrics"]["demo_minutes"]),
    (
        r"on (\d+) CPU cores",
        lambda: int(re.search(r"cores=(\d+)", _b8()["machine"]).group(1)),
    ),
)
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\.?\d+)*")  # 50, 0.255, 3.10, 1..8; not Qwen3, B8


def _setup_prose() -> str:
    """The README's set-up section without its code blocks, on one line."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    section = re.sub(r"```.*?```", " ", section, flags=re.S)
    return " ".join(section.split())


def _shown(value, text: str) -> str:
    """`value` rounded as `text` shows it (its decimals, its explicit sign)."""
    if isinstance(value, str):
        return value
    decimals = len(text.split(".", 1)[1]) if "." in text else 0
    sign = "+" if text[0] in "+-" else ""
    return f"{float(value):{sign}.{decimals}f}"


@pytest.mark.parametrize("pattern,source", FIGURES, ids=[p for p, _ in FIGURES])
def test_each_quoted_figure_equals_its_source(pattern, source):
    match = re.search(pattern, _setup_prose())
    assert match, f"the README's set-up section no longer says {pattern!r}"
    quoted = match.group(1)
    assert quoted == _shown(source(), quoted), f"README says {quoted}, its source {source()}"


def test_every_number_in_the_setup_prose_is_a_listed_figure():
    prose = _setup_prose()
    spans = []
    for pattern, _ in FIGURES:
        match = re.search(pattern, prose)
        if match:
            spans.append(match.span(1))
    unlisted = [
        m.group()
        for m in NUMBER.finditer(prose)
        if not any(a <= m.start() and m.end() <= b for a, b in spans)
    ]
    assert not unlisted, f"figures without a source in {__name__}: {unlisted}"


def test_b8_result_is_the_benchmark_s_own_file():
    doc = _b8()
    assert doc["id"] == "B8"
    from bench.b8_demo import BAR

    assert doc["bar"] == BAR
    m = doc["metrics"]
    assert m["reward_gain"] == pytest.approx(m["reward_after_rl"] - m["reward_after_sft"])
