"""Regenerate `leaderboard.json` with tau2-bench's own code (not used by the tests themselves).

Usage (a tau2-bench checkout: `src/`, `pyproject.toml`, `data/tau2/`):

    python make_leaderboard_reference.py <checkout> [--stub] > leaderboard.json

tau2 needs Python >= 3.12 and its full dependency set to import as a package; this script only
needs pydantic, docstring_parser, loguru, toml and PyYAML: it loads `tau2` as a bare namespace
from `<checkout>/src/tau2` (skipping the package `__init__`, which imports the runner, voice and
API layers) and, with `--stub`, answers any other missing third-party import with an inert
module (none of them takes part in building prompts, schemas or judge requests). The stored
file was computed on Python 3.11 with `--stub` and docstring_parser 0.18.0, loguru 0.7.3 and
toml 0.10.2 on the path. What it computes, per task, with
tau2's classes (`LLMAgent`, `UserSimulator`, `to_litellm_messages`, `Tool.openai_schema`):

  - `agent`: what the agent model is first sent: `to_litellm_messages([system, greeting])` and
    the tool schemas, as `generate()` passes them (the user's first reply is not included);
  - `user`: what the user model is first sent: the system message, the greeting with roles
    flipped, and the user's tool schemas (telecom) or none;
  - `judge`: for every task with NL assertions, the judge's request for `JUDGED_CONVERSATION`
    (a fixed conversation: greeting, a user message, a tool call, its result, a closing
    message) through `NLAssertionsEvaluator.evaluate_nl_assertions` with `generate` replaced by
    a recorder that answers `results` meeting every other assertion, and the verdicts tau2
    reads from that answer.

Stored: the sha256 (16 hex digits) of `json.dumps({"messages", "tools"})` (keys as sent) per
side and task, and per domain the sha256 of all its tasks' records, so the file carries no text.
`--full` prints the payloads themselves instead (for debugging a mismatch; never stored).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import sys
import types

SHORT = 16
KEEP = {"tau2", "pydantic", "pydantic_core", "docstring_parser", "loguru", "toml", "yaml"}
KEEP |= {"typing_extensions"}


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert

    def __getitem__(cls, item):
        return _Inert

    def __or__(cls, other):
        return _Inert

    __ror__ = __or__


class _Inert(metaclass=_Meta):
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Inert()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __iter__(self):
        return iter(())

    def __deepcopy__(self, memo):
        return self


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Inert modules for third-party imports that are not installed."""

    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in KEEP or top in sys.stdlib_module_names:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            try:
                if finder.find_spec(name, path, target) is not None:
                    return None
            except Exception:  # noqa: BLE001
                continue
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _short(value) -> str:
    text = json.dumps(value)  # keys in the order they are sent: byte order counts
    return hashlib.sha256(text.encode()).hexdigest()[:SHORT]


JUDGED_CONVERSATION = [
    ("assistant", "Hi! How can I help you today?"),
    ("user", "I want to exchange an item. ###STOP###"),
    ("assistant", None),
    ("tool", "Error: User not found"),
    ("assistant", "Your exchange is done."),
]


def canned_verdicts(assertions: list[str]) -> str:
    """The judge answer both sides are given: every other assertion met."""
    results = [
        {"expectedOutcome": a, "reasoning": "r", "metExpectation": i % 2 == 0}
        for i, a in enumerate(assertions)
    ]
    return json.dumps({"results": results})


def judge_records(tasks) -> list[dict]:
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
    from tau2.evaluator import evaluator_nl_assertions as nl
    from tau2.utils.llm_utils import to_litellm_messages

    trajectory = []
    for role, content in JUDGED_CONVERSATION:
        if role == "user":
            trajectory.append(UserMessage(role="user", content=content))
        elif role == "tool":
            trajectory.append(ToolMessage(id="c1", role="tool", content=content))
        elif content is None:
            call = ToolCall(id="c1", name="find_user_id_by_email", arguments={"email": "x"})
            trajectory.append(AssistantMessage(role="assistant", content=None, tool_calls=[call]))
        else:
            trajectory.append(AssistantMessage(role="assistant", content=content))
    out = []
    for task in tasks:
        assertions = (
            (task.evaluation_criteria.nl_assertions or []) if task.evaluation_criteria else []
        )
        if not assertions:
            continue
        sent = []

        def recorder(model, messages, sent=sent, assertions=assertions, **kwargs):
            sent.append(to_litellm_messages(messages))
            return AssistantMessage(role="assistant", content=canned_verdicts(assertions))

        nl.generate = recorder
        checks = nl.NLAssertionsEvaluator.evaluate_nl_assertions(trajectory, assertions)
        out.append({"id": str(task.id), "judge": _short(sent[0]), "met": [c.met for c in checks]})
    return out


def main(argv: list[str]) -> None:
    checkout = argv[0]
    full = {} if "--full" in argv else None
    if "--stub" in argv:
        sys.meta_path.insert(0, _StubFinder())
    package = types.ModuleType("tau2")
    package.__path__ = [f"{checkout}/src/tau2"]
    sys.modules["tau2"] = package

    from copy import deepcopy

    from tau2.agent.llm_agent import LLMAgent
    from tau2.domains.airline import environment as airline
    from tau2.domains.retail import environment as retail
    from tau2.domains.telecom import environment as telecom
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.user.user_simulator import UserSimulator
    from tau2.utils.llm_utils import to_litellm_messages

    domains = {"retail": retail, "airline": airline, "telecom": telecom}
    out = {"tau2_version": None, "tasks": {}, "digests": {}}
    for name, module in domains.items():
        env = module.get_environment()
        agent_tools = [t.openai_schema for t in env.get_tools()]
        records = []
        for task in module.get_tasks(None):
            env = module.get_environment()
            agent = LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy(), llm="x")
            greeting = deepcopy(DEFAULT_FIRST_AGENT_MESSAGE)
            state = agent.get_init_state(message_history=[greeting])
            agent_sent = {
                "messages": to_litellm_messages(state.system_messages + state.messages),
                "tools": agent_tools,
            }
            try:
                user_tools = env.get_user_tools(include=task.user_tools) or None
            except Exception:  # noqa: BLE001 - tau2's build_user does the same
                user_tools = None
            user = UserSimulator(llm="x", instructions=str(task.user_scenario), tools=user_tools)
            user_state = user.get_init_state()
            user_state.messages.append(deepcopy(DEFAULT_FIRST_AGENT_MESSAGE))
            user_sent = {
                "messages": to_litellm_messages(
                    user_state.system_messages + user_state.flip_roles()
                ),
                "tools": [t.openai_schema for t in user_tools] if user_tools else None,
            }
            if full is not None:
                full.setdefault(name, {})[str(task.id)] = {"agent": agent_sent, "user": user_sent}
            record = {"id": str(task.id), "agent": _short(agent_sent), "user": _short(user_sent)}
            records.append(record)
        out["digests"][name] = hashlib.sha256(
            json.dumps(records, sort_keys=True).encode()
        ).hexdigest()
        out["tasks"][name] = len(records)
        if name != "telecom":
            out.setdefault("records", {})[name] = records
        judged = judge_records(module.get_tasks(None))
        if judged:
            out.setdefault("judge", {})[name] = judged
    import tomllib

    with open(f"{checkout}/pyproject.toml", "rb") as handle:
        out["tau2_version"] = tomllib.load(handle)["project"]["version"]
    json.dump(out if full is None else full, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
