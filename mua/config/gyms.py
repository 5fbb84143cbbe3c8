"""The `gyms:` list: which gyms a recipe runs, and what differs between them.

Every verb that runs conversations takes `gyms:` (a single `gym: {...}` is a one-entry list). An
entry names its gym and may carry its own task files, its batch share (`weight`) and overrides of
per-gym settings (user, budgets, temperature, group size, scoring, reward standardisation,
curriculum); an unset override means the top-level value. `label` (default: the gym's name) tells
entries apart and names their metrics; `seat: user` puts the policy in the user seat
(docs/user_seat.md). Only the shape is checked here; checks needing the registry or task files
are in `mua.gym.mix` (docs/multi_gym.md).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import Field, PositiveInt, field_validator, model_validator

from mua.algo_names import GRPO_CREDIT_KINDS, SCORE_KINDS
from mua.config.endpoint import EndpointConfig
from mua.config.users import GymUserConfig, LLMUserConfig
from mua.recipe_section import Section

GYM_NAME_HELP = "Registered gym name (see `mua prep --list`)."
# what a label may hold: it names MLflow metrics (`train/<label>/reward`) and overrides
LABEL_PATTERN = re.compile(r"[A-Za-z0-9_-]+")


class ExpertAgentConfig(Section):
    """The fixed agent of the user seat: the gym's scripted expert (`GymSpec.expert`)."""

    kind: Literal["expert"] = "expert"


class LLMAgentConfig(EndpointConfig):
    """The fixed agent of the user seat: a model behind an OpenAI-compatible endpoint (a frozen
    checkpoint is served as one by `mua serve <hf folder>`)."""

    kind: Literal["llm"] = "llm"
    model: str | None = Field(
        None, description="The served model's name (required unless `checkpoint` is set)."
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="The agent's sampling temperature.")
    max_tokens: PositiveInt = Field(256, description="Most tokens per agent turn.")
    tool_parser: str = Field(
        "auto",
        description="How tool calls written as text in the agent's replies are read (one of "
        "`model.tool_parser`'s names); native tool calls are always read.",
    )

    @model_validator(mode="after")
    def _model_named(self):
        if self.model is None and self.checkpoint is None:
            raise ValueError(
                "agent.model is required with agent.kind=llm (or agent.checkpoint: a local "
                "model folder mua serves)"
            )
        return self

    def resolved_model(self) -> str:
        return self.model or self.checkpoint

    def endpoint(self):
        """These settings as the `LLMUserConfig` a preflight request is made with."""
        keys = self.model_dump(exclude={"kind", "model", "tool_parser"})
        return LLMUserConfig(**keys, model=self.resolved_model(), kind="llm")


SeatAgentConfig = Annotated[ExpertAgentConfig | LLMAgentConfig, Field(discriminator="kind")]


class FidelityJudgeConfig(EndpointConfig):
    """An LLM judge of the user seat's fidelity: it rates the user's conversation against a
    rubric (mua.users.seat_judge), blended with the deterministic checks."""

    model: str | None = Field(None, description="The judge's model (or checkpoint:).")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="The judge's temperature.")
    max_tokens: PositiveInt = Field(256, description="Most tokens of a verdict.")
    cache_dir: str | None = Field(
        None, description="Optional on-disk cache of verdicts keyed by the request."
    )
    weight: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="reward = (1 - weight) × checks + weight × rubric score (1: the rubric only).",
    )

    def endpoint(self):
        """These settings as the `LLMUserConfig` an LLM client is made from."""
        return LLMUserConfig(**self.model_dump(exclude={"weight"}), kind="llm")


class CurriculumConfig(Section):
    """Draw a gym's tasks by difficulty: a task whose latest group-mean reward says it is too easy
    or too hard is drawn with a smaller weight; tasks not seen yet keep weight 1."""

    easy_above: float = Field(
        0.9, description="A task whose latest group-mean reward is at least this is too easy."
    )
    hard_below: float = Field(
        0.1, description="A task whose latest group-mean reward is at most this is too hard."
    )
    weight: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="Sampling weight of a too-easy or too-hard task (others weigh 1).",
    )

    @model_validator(mode="after")
    def _band(self):
        if self.hard_below >= self.easy_above:
            raise ValueError(
                f"curriculum.hard_below ({self.hard_below:g}) must be below curriculum.easy_above "
                f"({self.easy_above:g})"
            )
        return self


class ProgramConfig(Section):
    """An agent program that plays the entry's tasks through the training gateway instead of the
    built-in turn loop (docs/gateway.md): started once per task sample with `OPENAI_BASE_URL`,
    `OPENAI_API_KEY` (its session key) and `MUA_TASK` (the task as JSON)."""

    command: list[str] | None = Field(
        None,
        description="The program to run, as a list of arguments or one shell-style string "
        "(e.g. `python examples/gateway_agents/guess_agent.py`; a leading `python` is the "
        "interpreter mua runs in).",
    )
    entry_point: str | None = Field(
        None,
        description="Instead of a command: `module:function`, called in the training process "
        "as `function(base_url, api_key, task)` (async or not); returns the reward (a number or "
        "`{reward: x}`).",
    )
    timeout_s: float = Field(
        300.0, gt=0, description="Per-episode deadline; a program still running is killed."
    )
    reward: Literal["stdout", "gym", "env"] = Field(
        "stdout",
        description='stdout: the last line the program prints, `{"reward": x}`; gym: the gym '
        "scores the recorded conversation; env: the sum of the rewards of the gym env's steps "
        "the program took through the gateway (POST /v1/env/step).",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the program."
    )

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value):
        if isinstance(value, str):
            import shlex

            return shlex.split(value)
        return value

    @model_validator(mode="after")
    def _one_way_to_run(self):
        if (self.command is None) == (self.entry_point is None):
            raise ValueError(
                "program: give exactly one of command (a program to start) or entry_point "
                "(`module:function`)"
            )
        if self.command is not None and not self.command:
            raise ValueError("program.command is empty; give the program to run")
        if self.entry_point is not None and ":" not in self.entry_point:
            raise ValueError(
                f"program.entry_point {self.entry_point!r} must be `module:function`, e.g. "
                "examples.gateway_agents.guess_agent:play"
            )
        return self


class GymConfig(Section):
    name: str = Field("guess", description=GYM_NAME_HELP)
    label: str | None = Field(
        None,
        description="Name of this entry in metrics and tables (default: the gym's name); tells "
        "two entries of one gym apart.",
    )
    options: dict = Field(
        default_factory=dict, description="Gym-specific options passed to the environment."
    )
    reward_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Weights of named reward components; unnamed components keep the gym default.",
    )
    train_files: list[str] = Field(
        default_factory=list,
        description="This gym's task files for training (default: the rows of data.train_files "
        "that name this gym, else the gym's built-in train split).",
    )
    test_files: list[str] = Field(
        default_factory=list,
        description="This gym's held-out task files (default: the rows of data.test_files that "
        "name this gym).",
    )
    weight: float | None = Field(
        None,
        description="Share of each training batch's tasks (relative to the other entries; give "
        "every entry one, or none); default: proportional to the entry's training rows, as if "
        "the files were concatenated.",
    )
    user: GymUserConfig | None = Field(
        None, description="This gym's simulated user: keys that replace the top-level user's."
    )
    max_turns: PositiveInt | None = Field(None, description="Most assistant turns (this gym).")
    max_new_tokens_per_turn: PositiveInt | None = Field(
        None, description="Most new tokens per assistant turn (this gym)."
    )
    max_total_tokens: PositiveInt | None = Field(
        None, description="Most tokens in one trajectory (this gym)."
    )
    temperature: float | None = Field(
        None, ge=0.0, description="Policy sampling temperature (rollout and eval only)."
    )
    n: PositiveInt | None = Field(None, description="Samples per task (group size) for this gym.")
    score: Literal[SCORE_KINDS] | None = Field(
        None, description="GRPO trajectory score (this gym)."
    )
    credit: Literal[GRPO_CREDIT_KINDS] | None = Field(
        None, description="GRPO turn-level credit (this gym)."
    )
    gamma: float | None = Field(None, ge=0.0, le=1.0, description="Discount γ (this gym).")
    standardize_rewards: bool = Field(
        False,
        description="Divide this gym's rewards by the running standard deviation of its "
        "trajectory scores (for gyms whose reward scale differs); training only.",
    )
    curriculum: CurriculumConfig | None = Field(
        None, description="Draw this gym's tasks by difficulty (training only); null: uniformly."
    )
    program: ProgramConfig | None = Field(
        None,
        description="Run an agent program through the training gateway on this gym's tasks "
        "instead of the built-in turn loop (docs/gateway.md).",
    )
    seat: Literal["agent", "user"] = Field(
        "agent",
        description="Which party the policy plays: agent (the default), or user: the policy is "
        "the gym's simulated user, facing the fixed `agent:` (docs/user_seat.md).",
    )
    agent: SeatAgentConfig | None = Field(
        None,
        description="With seat: user, the fixed agent: {kind: expert} (the gym's scripted "
        "expert; the default) or {kind: llm, base_url, model, ...} (an OpenAI-compatible "
        "endpoint).",
    )

    fidelity_judge: FidelityJudgeConfig | None = Field(
        None,
        description="With seat: user, an LLM judge that rates the user against the fidelity "
        "rubric ({base_url or checkpoint, model, weight, ...}); unset: the checks alone.",
    )

    @model_validator(mode="after")
    def _agent_needs_user_seat(self):
        for key in ("agent", "fidelity_judge"):
            if getattr(self, key) is not None and self.seat != "user":
                raise ValueError(
                    f"{key}: belongs to the user seat; add `seat: user` to the entry or remove "
                    f"{key}:"
                )
        return self

    def seat_agent(self):
        """The fixed agent of the user seat (the gym's expert unless `agent:` says otherwise)."""
        return self.agent if self.agent is not None else ExpertAgentConfig()

    @field_validator("label")
    @classmethod
    def _label_is_a_name(cls, label: str | None) -> str | None:
        if label is not None and not LABEL_PATTERN.fullmatch(label):
            raise ValueError(
                f"label {label!r}: use letters, digits, `_` and `-` only (it names metrics, "
                "`train/<label>/reward`, and overrides, `gyms.<label>.<key>`), e.g. guess_1_8"
            )
        return label

    @property
    def key(self) -> str:
        """The entry's label: `label`, else the gym's name."""
        return self.label or self.name


class PrepGymConfig(Section):
    """`mua prep`'s gym: which one, and the options its task builder takes."""

    name: str = Field("guess", description=GYM_NAME_HELP)
    options: dict = Field(
        default_factory=dict, description="Gym-specific prep options (sizes, domains, ...)."
    )


def gyms_from_raw(data):
    """Before validation: `gym: {...}` becomes `gyms: [{...}]` (the one shape every verb reads)."""
    if not isinstance(data, dict):
        return data
    gym, gyms = data.get("gym"), data.get("gyms")
    if isinstance(gyms, (str, dict)):
        raise ValueError("gyms must be a list of sections, e.g. `gyms: [{name: guess}]`")
    if isinstance(gyms, list) and any(isinstance(item, str) for item in gyms):
        listed = ", ".join(f"{{name: {item}}}" for item in gyms)
        raise ValueError(f"write each gym as a section, `gyms: [{listed}]`")
    if isinstance(gym, str):
        raise ValueError(f"write the gym as a section, `gym: {{name: {gym}}}`")
    if gym is not None and gyms:
        if isinstance(gyms, list) and len(gyms) == 1 and gyms[0] == gym:
            return {k: v for k, v in data.items() if k != "gym"}  # re-validation of a recipe
        raise ValueError(
            "gym and gyms both set; give one gym as `gym: {name: ...}` or several as "
            "`gyms: [{name: ...}, ...]`"
        )
    out = {k: v for k, v in data.items() if k != "gym"}
    if gym is not None:
        out["gyms"] = [gym]
    return out


def check_entries(gyms: list[GymConfig]) -> None:
    """Shape rules across entries: labels unique, weights positive with a finite sum, and given
    for every entry or for none (rows and chosen weights are not on one scale)."""
    weighted = [e.weight is not None for e in gyms]
    if any(weighted) and not all(weighted):
        i = weighted.index(False)
        raise ValueError(
            f"gyms[{i}] ({gyms[i].key}): no weight while other entries have one; give every entry "
            "a weight, or none (shares then follow the rows)"
        )
    if all(weighted) and not math.isfinite(sum(e.weight for e in gyms)):
        raise ValueError(
            "gyms: the weights sum to more than a finite number can hold; use small weights "
            "(only their ratios matter, e.g. 1 and 3)"
        )
    seen: dict[str, int] = {}
    for i, entry in enumerate(gyms):
        if entry.weight is not None and not entry.weight > 0:
            raise ValueError(
                f"gyms[{i}] ({entry.key}): weight {entry.weight:g} must be > 0; drop the entry "
                "to leave the gym out, or leave weight unset for a share proportional to its rows"
            )
        if entry.key in seen:
            hint = (
                "give each a distinct label (e.g. `label: tau_retail`)"
                if gyms[seen[entry.key]].name == entry.name
                else "give them distinct labels"
            )
            raise ValueError(
                f"gyms[{i}] ({entry.name}): label {entry.key!r} is also gyms[{seen[entry.key]}]'s; "
                f"{hint}"
            )
        seen[entry.key] = i
