"""Two-sided tau2 environments and the registry of tau2 domains.

A `Tau2Environment` owns the agent's toolkit and, where the domain has one, the user's
toolkit (telecom's phone). It routes tool calls by requestor, runs environment functions
and assertions by name (initialization actions, ENV_ASSERTION checks), applies a task's
`initial_state` (initialization data, initialization actions, message history) and calls
`sync()` after every successful tool call and environment function, as tau2 does; a domain
whose two sides are coupled (telecom) overrides `sync()`.

A `Tau2Domain` names a domain, carries its policy text and builds fresh environments from
the data folder the user pointed at. Domains are found by name through `load_domain`,
which imports the domain's package only when asked (telecom lives in `gyms.tau2.telecom`).
This module holds no conversation logic and no reward; see `gyms/tau2/env.py` and
`gyms/tau2/reward.py`.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gyms.tau2.dbcache import check_db, fresh_db
from gyms.tau2.toolkit import Toolkit

AGENT, USER = "assistant", "user"


class Tau2Environment:
    """The agent's toolkit, the user's toolkit (or None) and the rule that keeps them in step."""

    def __init__(
        self,
        domain_name: str,
        policy: str,
        agent: Toolkit,
        user: Toolkit | None = None,
        solo: bool = False,
    ):
        self.domain_name = domain_name
        self.policy = policy
        self.agent = agent
        self.user = user
        self.solo = False
        if solo:
            self.set_solo(True)
        self.sync()

    # ---- coupling ---------------------------------------------------------------------------
    def sync(self) -> None:
        """Bring the two sides into agreement; a no-op unless the domain couples them."""

    def set_solo(self, solo: bool) -> None:
        """Solo mode: the agent holds the user's tools too (names must not overlap)."""
        if solo and self.user is not None:
            overlap = set(self.agent.tool_names()) & set(self.user.tool_names())
            if overlap:
                raise ValueError(f"Tool names overlap: {overlap}")
        self.solo = solo

    # ---- what each side sees ----------------------------------------------------------------
    def toolkit(self, env_type: str) -> Toolkit:
        if env_type == AGENT:
            return self.agent
        if env_type == USER:
            if self.user is None:
                raise ValueError(f"domain {self.domain_name!r} has no user tools")
            return self.user
        raise ValueError(f"Invalid environment type: {env_type}")

    def agent_schemas(self) -> list[dict]:
        """Tool schemas offered to the agent (in solo mode the user's tools follow its own)."""
        schemas = self.agent.schemas()
        if self.solo and self.user is not None:
            schemas = schemas + self.user.schemas()
        return schemas

    def user_schemas(self) -> list[dict]:
        """Tool schemas offered to the simulated user (none without user tools or in solo)."""
        if self.user is None or self.solo:
            return []
        return self.user.schemas()

    def has_tool(self, name: str) -> bool:
        return self.agent.has_tool(name) or (self.user is not None and self.user.has_tool(name))

    def is_mutating(self, name: str) -> bool:
        for kit in (self.agent, self.user):
            if kit is not None and kit.has_tool(name):
                return kit.tool_mutates(name)
        return True

    # ---- tool calls -------------------------------------------------------------------------
    def tool_call(self, requestor: str, name: str, arguments: dict) -> tuple[str, bool]:
        """Run one tool call for `requestor`; (tool-message text, error flag), synced after.

        In solo mode the agent's calls to user tools go to the user toolkit; a user tool call
        in solo mode is an error message, as in tau2.
        """
        if requestor == USER:
            if self.solo:
                return "Error: User tool calls are not allowed in solo mode", True
            if self.user is None:
                return "Error: User tools not available", True
            kit = self.user
        elif requestor == AGENT:
            kit = self.agent
            if self.solo and self.user is not None and self.user.has_tool(name):
                kit = self.user
        else:
            return f"Error: Invalid requestor: {requestor}", True
        content, error = kit.call(name, arguments)
        if not error:
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - tau2 reports a failed sync as the call's error
                return f"Error: {exc}", True
        return content, error

    # ---- environment functions and assertions ----------------------------------------------
    def run_env_function(self, env_type: str, name: str, arguments: dict | None = None) -> Any:
        """Call any toolkit method by name (not only tools), then sync; exceptions propagate."""
        kit = self.toolkit(env_type)
        if not kit.has_function(name):
            raise ValueError(f"Function {name} not found in {env_type} tools")
        result = kit.run_function(name, arguments or {})
        self.sync()
        return result

    def run_assertion(
        self,
        env_type: str,
        name: str,
        arguments: dict | None = None,
        assert_value: bool = True,
    ) -> bool:
        """Whether function `name` returns `assert_value`; a non-bool result is an error."""
        result = self.run_env_function(env_type, name, arguments)
        if not isinstance(result, bool):
            raise ValueError(f"Function {name} returned {type(result)} instead of bool")
        return result == assert_value

    def run_action(self, action: dict) -> Any:
        """One initialization action (`env_type`, `func_name`, `arguments`) as tau2 runs it."""
        return self.run_env_function(
            action.get("env_type", AGENT), action["func_name"], action.get("arguments") or {}
        )

    # ---- task state -------------------------------------------------------------------------
    def apply_initial_state(self, initial_state: dict | None) -> None:
        """Initialization data (both sides), initialization actions, then the mutating tool
        calls found in the message history, in that order; then sync.

        A failing initialization action raises `InitialStateError` naming the action.
        """
        state = initial_state or {}
        data = state.get("initialization_data") or {}
        if data.get("agent_data") is not None:
            self.agent.update_db(data["agent_data"])
        if data.get("user_data") is not None:
            self.toolkit(USER).update_db(data["user_data"])
        for index, action in enumerate(state.get("initialization_actions") or []):
            try:
                self.run_action(action)
            except Exception as exc:  # noqa: BLE001 - reported with the action that failed
                raise InitialStateError(
                    f"initialization action {index} ({action.get('env_type')}."
                    f"{action.get('func_name')}) failed: {exc}"
                ) from exc
        for call in history_tool_calls(state.get("message_history") or []):
            if self.has_tool(call["name"]) and self.is_mutating(call["name"]):
                self.tool_call(call["requestor"], call["name"], call["arguments"])
        self.sync()

    def replay(self, actions: list[dict]) -> list[tuple[str, bool]]:
        """Run gold actions (`requestor`, `name`, `arguments`) in list order; their results."""
        return [
            self.tool_call(a.get("requestor", AGENT), a["name"], a.get("arguments") or {})
            for a in actions
        ]

    def db_hash(self) -> str | None:
        return self.agent.db_hash()

    def user_db_hash(self) -> str | None:
        return None if self.user is None else self.user.db_hash()


class InitialStateError(RuntimeError):
    """A task's initial state could not be applied (its data or an action failed)."""


def history_tool_calls(messages: list[dict]) -> list[dict]:
    """Tool calls of assistant/user messages in a task's message history, in order."""
    calls = []
    for message in messages:
        if message.get("role") not in ("assistant", "user"):
            continue
        for tc in message.get("tool_calls") or []:
            args = tc.get("arguments") or {}
            if isinstance(args, str):
                args = json.loads(args)
            calls.append(
                {
                    "requestor": tc.get("requestor", message["role"]),
                    "name": tc["name"],
                    "arguments": args,
                }
            )
    return calls


@dataclass
class Tau2Domain:
    """A tau2 domain built from a data folder.

    `factory(solo)` returns a fresh environment with the domain's database(s) loaded and its
    policy (the solo policy in solo mode). `data_name` is the folder under `tau2/domains/`
    holding `tasks.json` and `split_tasks.json` (telecom-workflow shares telecom's).
    """

    name: str
    data_dir: Path
    policy: str
    factory: Callable[[bool], Tau2Environment]
    data_name: str = ""
    has_user_tools: bool = False
    supports_solo: bool = False
    required_files: tuple[str, ...] = field(default_factory=tuple)
    check: Callable[[], None] | None = None  # raises as `factory` would on bad data, cheaper

    def __post_init__(self) -> None:
        self.data_name = self.data_name or self.name

    def new_environment(self, solo: bool = False) -> Tau2Environment:
        if solo and not self.supports_solo:
            raise ValueError(f"{self.name.capitalize()} domain does not support solo mode")
        return self.factory(solo)

    def check_loads(self) -> None:
        """Raise what `new_environment` would on data that does not load (ValueError,
        TypeError or KeyError), building no environment where the domain knows how."""
        if self.check is not None:
            self.check()
        else:
            self.new_environment()

    @property
    def domain_dir(self) -> Path:
        return domains_dir(self.data_dir) / self.data_name


DOMAINS: dict[str, str] = {
    "retail": "gyms.tau2.retail:make_domain",
    "airline": "gyms.tau2.airline:make_domain",
    "telecom": "gyms.tau2.telecom:make_domain",
    "telecom-workflow": "gyms.tau2.telecom:make_workflow_domain",
}


def domains_dir(data_dir: Path | str) -> Path:
    """`<data_dir>/tau2/domains` (a folder laid out like tau2-bench's `data/`), or
    `<data_dir>/domains` when the user pointed at the inner `tau2` folder."""
    root = Path(data_dir)
    return root / "domains" if (root / "domains").is_dir() else root / "tau2" / "domains"


DB_DOMAIN_FILES = ("db.json", "policy.md", "tasks.json", "split_tasks.json")


def db_domain(name: str, data_dir: Path | str, tools: type, db_model: type) -> Tau2Domain:
    """A domain of one database (`db.json`, validated as `db_model`) that the agent's `tools`
    act on, under the folder's `policy.md`; no user tools, no solo mode (retail, airline)."""
    folder = domains_dir(data_dir) / name
    policy = (folder / "policy.md").read_text(encoding="utf-8")

    def factory(solo: bool) -> Tau2Environment:
        return Tau2Environment(name, policy, tools(fresh_db(folder / "db.json", db_model)))

    def check() -> None:  # the toolkit only holds the database: validating it is the check
        check_db(folder / "db.json", db_model)

    return Tau2Domain(
        name, Path(data_dir), policy, factory, required_files=DB_DOMAIN_FILES, check=check
    )


def load_domain(name: str, data_dir: Path | str) -> Tau2Domain:
    """The domain `name` built from `data_dir`; an unknown name raises `ValueError`."""
    target = DOMAINS.get(name)
    if target is None:
        raise ValueError(f"unknown tau2 domain {name!r}; one of {', '.join(DOMAINS)}")
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr)(Path(data_dir))
