"""The user matrix of `mua eval`: every gym against the recipe's own user and each `eval.users` one.

A matrix user is the recipe's `user:` (row `train`) or an `eval.users` entry, whose keys replace
the recipe's user keys and whose persona (YAML in `mua/users/personas/`, or a path) adds gym
options and prompt text (`PersonaClient`); each `<gym>@<user>` cell runs through the plain
evaluation runner (docs/user_population.md). `matrix_summary` gives per-gym pass^k per user, the
spread and the training user's gap. Not here: running cells, failure labels, printing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from mua.config.track import TRAIN_USER
from mua.errors import UsageError

PERSONA_DIR = Path(__file__).with_name("personas")
CELL_SEP = "@"
PERSONA_KEYS = {"name", "description", "prompt", "gym_options"}


@dataclass
class Persona:
    name: str
    description: str = ""
    prompt: str = ""
    gym_options: dict = field(default_factory=dict)


def builtin_personas() -> list[str]:
    return sorted(p.stem for p in PERSONA_DIR.glob("*.yaml"))


def load_persona(ref: str) -> Persona:
    """A built-in persona by name, else a persona YAML file by path; one-line UsageError if neither."""
    import yaml

    path = PERSONA_DIR / f"{ref}.yaml"
    if not path.is_file():
        path = Path(ref).expanduser()
    if not path.is_file():
        raise UsageError(
            f"persona {ref!r}: no built-in persona of that name and no such file; use one of "
            f"{', '.join(builtin_personas())} or the path of a YAML file (copy one from {PERSONA_DIR})"
        )
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise UsageError(f"persona file {path}: not valid YAML ({err}); fix the file") from None
    if not isinstance(data, dict) or set(data) - PERSONA_KEYS:
        extra = sorted(set(data) - PERSONA_KEYS) if isinstance(data, dict) else []
        raise UsageError(
            f"persona file {path}: expected a mapping with keys {sorted(PERSONA_KEYS)}"
            + (f", got unknown key(s) {extra}" if extra else "")
            + "; copy mua/users/personas/cooperative.yaml and edit it"
        )
    options = data.get("gym_options") or {}
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise UsageError(
            f"persona file {path}: gym_options must map gym names to option mappings, "
            "e.g. `gym_options: {tau2: {persona: non_cooperative}}`"
        )
    return Persona(
        name=str(data.get("name") or path.stem),
        description=str(data.get("description") or ""),
        prompt=str(data.get("prompt") or "").strip(),
        gym_options={str(k): dict(v) for k, v in options.items()},
    )


@dataclass
class MatrixUser:
    """One row-group of the matrix: `config` is None for the recipe's own user."""

    label: str
    config: object = None  # EvalUserConfig
    persona: Persona | None = None

    @property
    def trained(self) -> bool:
        return self.config is None

    def instructions(self) -> str:
        """What is appended to the LLM user's system message (persona prompt, then `prompt`)."""
        if self.config is None:
            return ""
        parts = [self.persona.prompt if self.persona else "", (self.config.prompt or "").strip()]
        return "\n\n".join(p for p in parts if p)


def matrix_users(recipe) -> list[MatrixUser]:
    """The recipe's own user then each `eval.users` entry; [] when `eval.users` is empty."""
    if not recipe.eval.users:
        return []
    users = [MatrixUser(TRAIN_USER)]
    for cfg in recipe.eval.users:
        persona = load_persona(cfg.persona) if cfg.persona else None
        users.append(MatrixUser(cfg.label, cfg, persona))
    return users


def cell_label(gym: str, user: str) -> str:
    return f"{gym}{CELL_SEP}{user}"


def split_cell(label: str) -> tuple[str, str | None]:
    """(gym label, user label or None) of a summary key."""
    gym, sep, user = label.partition(CELL_SEP)
    return gym, (user if sep else None)


USER_KEYS = (
    "kind",
    "model",
    "temperature",
    "max_tokens",
    "base_url",
    "api_key_env",
    "checkpoint",
    "timeout_s",
    "max_retries",
)


def cell_entry(entry, user: MatrixUser):
    """The gym entry as this user's cell runs it: the user's keys over the entry's own `user:`
    (its timeout and retries included: they reach the cell's LLM user client), the persona's
    options for this gym over the entry's options."""
    from mua.config.track import MatrixUserKeys

    if user.config is None:
        return entry
    from mua.gym.mix import over_address

    keys = entry.user.model_dump() if entry.user is not None else {}
    given = {k: getattr(user.config, k) for k in USER_KEYS if getattr(user.config, k) is not None}
    keys = over_address(keys, given)
    options = dict(entry.options)
    if user.persona is not None:
        options.update(user.persona.gym_options.get(entry.name, {}))
    return entry.model_copy(update={"user": MatrixUserKeys(**keys), "options": options})


class PersonaClient:
    """A gym's LLM user client whose every request carries extra system instructions.

    The text is appended to the first system message (or sent as one when there is none);
    everything else (retries, caching, counters) is the wrapped client's."""

    def __init__(self, inner, instructions: str):
        self.inner = inner
        self.instructions = instructions

    def _with(self, messages: list[dict]) -> list[dict]:
        out = [dict(m) for m in messages]
        for m in out:
            if m.get("role") == "system":
                m["content"] = f"{m.get('content') or ''}\n\n{self.instructions}"
                return out
        return [{"role": "system", "content": self.instructions}, *out]

    async def complete(self, messages: list[dict]) -> str:
        return await self.inner.complete(self._with(messages))

    async def complete_json(self, messages: list[dict], validate=None):
        return await self.inner.complete_json(self._with(messages), validate=validate)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def with_persona(run, user: MatrixUser):
    """`run` (a GymRun) with its LLM user speaking as `user` (unchanged without instructions)."""
    text = user.instructions()
    if text and run.ctx.llm is not None:
        run.ctx.llm = PersonaClient(run.ctx.llm, text)
    return run


def inner_client(client):
    """The LLM client under a PersonaClient (for its call counters)."""
    return client.inner if isinstance(client, PersonaClient) else client


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def matrix_summary(summaries: dict[str, dict], pass_key: str = "pass^1") -> dict[str, dict]:
    """Per gym label: each user's `pass_key` (and its value without user-blamed failures when
    reported), the spread across users (max − min) and the gap training user − mean of the
    held-out users (positive: the agent does better against the user it trained with)."""
    out: dict[str, dict] = {}
    for label, summary in summaries.items():
        gym, user = split_cell(label)
        if user is None:
            continue
        cell = {pass_key: summary.get(pass_key)}
        if "without_user_failures" in summary:
            cell[f"{pass_key} without user failures"] = summary["without_user_failures"].get(
                pass_key
            )
        out.setdefault(gym, {"users": {}, "pass_key": pass_key})["users"][user] = cell
    for entry in out.values():
        values = {u: c[pass_key] for u, c in entry["users"].items() if _finite(c[pass_key])}
        entry["spread"] = max(values.values()) - min(values.values()) if len(values) > 1 else None
        held = [v for u, v in values.items() if u != TRAIN_USER]
        entry["train_gap"] = (
            values[TRAIN_USER] - sum(held) / len(held) if TRAIN_USER in values and held else None
        )
    return out


@dataclass
class Cell:
    """One gym × user evaluation: `label` keys its rows and summary, `gym` is the gym entry's
    label, `entry` the entry as this user runs it, `user` None without a matrix."""

    label: str
    gym: str
    entry: object
    user: MatrixUser | None = None


def eval_cells(recipe, gym_labels) -> list[Cell]:
    """Each gym entry once (no `eval.users`), else once per matrix user, gym by gym."""
    users = matrix_users(recipe)
    cells = []
    for gym in gym_labels:
        entry = recipe.gym_section(gym)
        if not users:
            cells.append(Cell(gym, gym, entry))
        for user in users:
            cells.append(Cell(cell_label(gym, user.label), gym, cell_entry(entry, user), user))
    return cells
