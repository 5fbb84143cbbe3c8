"""Where the vLLM side venvs the vllm tests serve with are (built by `make vllm-releases`), and
tiny model folders for them. Keep RELEASES equal to the Makefile's VLLM_RELEASES."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIDE = REPO / "tests" / ".vllm"
RELEASES = ("0.32.0", "0.31.0")


def side_python(release: str) -> str:
    """The release's venv Python, or a skip naming how to build it."""
    python = SIDE / release / "venv" / "bin" / "python"
    if not (SIDE / release / ".installed").is_file() or not python.is_file():
        pytest.skip(
            f"vLLM {release} side venv missing at {python.parent.parent}: run `make vllm-releases`"
        )
    return str(python)


def tiny_folder(out: Path, seed: int) -> Path:
    """A qwen3-1m model folder (tied embeddings, the tiny tokenizer) from `seed`."""
    from mua.models import load_tokenizer
    from mua.models.saving import save_hf
    from mua.models.tiny import TINY_PRESETS, build_tiny_model

    model = build_tiny_model(TINY_PRESETS["qwen3-1m"], seed=seed)
    return save_hf(model, load_tokenizer("tiny:qwen3-1m"), out)


def tiny_folders(tmp_path_factory) -> dict[int, Path]:
    """Two model folders (seeds 0 and 1) in a fresh temporary folder: one to serve, one to push."""
    root = tmp_path_factory.mktemp("vllm-models")
    return {seed: tiny_folder(root / f"m{seed}", seed) for seed in (0, 1)}
