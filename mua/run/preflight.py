"""The one pre-flight of every verb that runs conversations (train, `mua rollout`, `mua eval`).

`preflight(recipe, verb)` checks the recipe's gym entries for the verb, resolves each entry's
`RunSpec`, serves the checkpoint folders the specs name and asks every endpoint they call once
(each simulated user, a seat's fixed LLM agent, a fidelity judge, the endpoints a gym calls
itself such as tau2's judge): a wrong key, URL or model stops the verb with one line naming the
endpoint (`RunFailure`). It yields the specs and keeps the servers up while the verb runs.
Not here: a verb's own input checks (train's data files and model: `mua.train.launcher`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from mua.run.spec import RunSpec, run_spec


def run_specs(recipe, verb: str) -> list[RunSpec]:
    """Each `gyms:` entry's spec, once the entries are checked for `verb` (one line, exit 2)."""
    from mua.gym.mix import check_gyms

    check_gyms(recipe, verb)
    return [run_spec(recipe, entry) for entry in recipe.gyms]


def served_folders(specs: Iterable[RunSpec], *sections) -> list[str]:
    """The distinct checkpoint folders the specs and the other endpoint `sections` name."""
    from mua.serve.checkpoints import checkpoints_in

    folders: list[str] = []
    for found in [s.checkpoint_folders() for s in specs] + [checkpoints_in(x) for x in sections]:
        folders += [f for f in found if f not in folders]
    return folders


@contextlib.contextmanager
def preflight(recipe, verb: str):
    """Check, serve and ask (see the module docstring); yields the entries' specs."""
    from mua.serve.checkpoints import serving

    specs = run_specs(recipe, verb)
    with serving(served_folders(specs)):
        ask_endpoints(specs)
        yield specs


def _url_setting(what: str) -> str:
    """The recipe key of a gym endpoint's URL, from its description `judge (gym.options.judge)`."""
    inside = what.partition("(")[2].rstrip(")").strip()
    return f"{inside}.base_url" if inside else "base_url"


def _endpoint_checks(spec: RunSpec) -> list[tuple[str, str, object]]:
    """(what, its recipe key, its endpoint config) for every endpoint one spec calls."""
    from pydantic import TypeAdapter

    from mua.config.gyms import FidelityJudgeConfig, SeatAgentConfig
    from mua.config.users import LLMUserConfig
    from mua.gym import get_gym

    checks = []
    if spec.seat != "user":  # in the user seat the policy is the user
        if spec.user.get("kind") == "llm":
            checks.append(("LLM user", "user.base_url", LLMUserConfig(**spec.user)))
    elif spec.agent is not None and spec.agent.get("kind") == "llm":
        agent = TypeAdapter(SeatAgentConfig).validate_python(spec.agent)
        checks.append((f"{spec.label} fixed agent", "agent.base_url", agent.endpoint()))
    if spec.fidelity_judge is not None:
        judge = FidelityJudgeConfig(**spec.fidelity_judge).endpoint()
        checks.append((f"{spec.label} fidelity judge", "fidelity_judge.base_url", judge))
    gym = get_gym(spec.gym)
    if gym.endpoints is not None:
        checks += [
            (f"{spec.label} {what}", _url_setting(what), cfg)
            for what, cfg in gym.endpoints(spec.options)
        ]
    return checks


def ask_endpoints(specs: Iterable[RunSpec]) -> None:
    """One request to every endpoint the specs call, each distinct endpoint once."""
    from mua.llm.llm_client import preflight_user

    seen: set[str] = set()
    for spec in specs:
        for label, setting, cfg in _endpoint_checks(spec):
            key = cfg.model_dump_json()
            if key not in seen:
                seen.add(key)
                preflight_user(cfg, label, setting)
