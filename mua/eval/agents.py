"""Who is evaluated: `--model` resolved into a policy factory, a tokenizer and a close function.

Forms: `tiny:<preset>` or a local folder (the `hf` engine, or a vLLM server of its own with
`rollout.engine: vllm`); a training checkpoint (run dir, `checkpoints/` or `global_step_N`),
merged first into `<run>/hf/global_step_N`; `openai:<model>` behind an OpenAI-compatible endpoint;
`expert`, each gym's scripted expert. Message-level agents are tokenized with `model.tokenizer`
only to count tokens. Not here: running rollouts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mua.errors import UsageError

OPENAI_PREFIX = "openai:"
EXPERT = "expert"
COUNTING_TOKENIZER = "tiny:qwen3-1m"


@dataclass
class Agent:
    label: str
    tokenizer: Any
    make_policy: Callable[[Any, Any], Any]  # (gym_spec, gym_ctx) -> policy
    close: Callable[[], Any] | None = None  # async
    model_dir: str | None = None  # the HF folder actually loaded, when there is one


def checkpoint_step_dir(path: str) -> Path | None:
    """The latest complete `global_step_N` under `path`, or None if `path` holds no checkpoint."""
    from mua.models.merge import find_checkpoints

    root = Path(path).expanduser()
    if not root.is_dir():
        return None
    looks_like = (
        root.name.startswith("global_step_")
        or (root / "checkpoints").is_dir()
        or any(p.name.startswith("global_step_") for p in root.iterdir())
    )
    is_hf_folder = (root / "config.json").is_file() and any(root.glob("*.safetensors"))
    if not looks_like or is_hf_folder:
        return None
    return find_checkpoints(root)[-1][1]


def _merged_folder(step_dir: Path) -> str:
    from mua.models.merge import STEP_DIR, default_out_dir
    from mua.models.merge_checkpoint import merge_checkpoint

    out = default_out_dir(step_dir, None)
    merge_checkpoint(int(STEP_DIR.match(step_dir.name).group(1)), step_dir, out)
    return str(out)


def _engine_agent(path: str, recipe, label: str) -> Agent:
    from mua.engines.registry import standalone_engine
    from mua.models import load_tokenizer
    from mua.rollout.policies import SeededPolicy

    tokenizer = load_tokenizer(recipe.model.tokenizer or path)
    ro = recipe.rollout
    engine = standalone_engine(recipe, path, tokenizer)  # hf in process, a vLLM server, ...

    def make_policy(gym_spec, gym_ctx):
        return SeededPolicy(
            engine,
            seed=recipe.data.seed,
            temperature=recipe.eval.temperature,
            top_p=ro.top_p,
            top_k=ro.top_k,
            tool_parser=recipe.model.tool_parser,
        )

    return Agent(
        label=label,
        tokenizer=tokenizer,
        make_policy=make_policy,
        close=engine.close,
        model_dir=path,
    )


def _openai_agent(name: str, recipe) -> Agent:
    from mua.models import load_tokenizer
    from mua.rollout.openai_policy import OpenAIPolicy

    if not name:
        raise UsageError("--model openai:NAME needs the served model's name, e.g. openai:gpt-4o")
    cfg = recipe.rollout.model_copy(update={"temperature": recipe.eval.temperature})
    agent = OpenAIPolicy.from_config(cfg, model=name, tool_parser=recipe.model.tool_parser)
    tokenizer = load_tokenizer(recipe.model.tokenizer or COUNTING_TOKENIZER)
    return Agent(
        label=f"{OPENAI_PREFIX}{name}",
        tokenizer=tokenizer,
        make_policy=lambda gym_spec, gym_ctx: agent.as_message_policy(),
        close=agent.aclose,
    )


def _expert_agent(recipe) -> Agent:
    from mua.models import load_tokenizer
    from mua.rollout.policies import expert_policy

    tokenizer = load_tokenizer(recipe.model.tokenizer or COUNTING_TOKENIZER)
    return Agent(label=EXPERT, tokenizer=tokenizer, make_policy=expert_policy)


def _is_message_agent(model: str, recipe) -> bool:
    return model == EXPERT or model.startswith(OPENAI_PREFIX) or recipe.rollout.engine == "openai"


def model_source(model: str, recipe) -> tuple[str, str]:
    """(what the engine loads: an HF folder or a name, label); a checkpoint is merged first.

    For message-level agents (expert, openai) both are `model` itself; nothing is loaded.
    """
    if _is_message_agent(model, recipe):
        return model, model
    step_dir = checkpoint_step_dir(model)
    if step_dir is not None:
        return _merged_folder(step_dir), f"{model} ({step_dir.name})"
    return model, model


def load_agent(model: str, recipe, source: tuple[str, str] | None = None) -> Agent:
    """The agent named by `model` (see the module docstring); `source` from `model_source`."""
    if model == EXPERT:
        return _expert_agent(recipe)
    if _is_message_agent(model, recipe):
        return _openai_agent(model.removeprefix(OPENAI_PREFIX), recipe)
    path, label = source or model_source(model, recipe)
    return _engine_agent(path, recipe, label=label)
