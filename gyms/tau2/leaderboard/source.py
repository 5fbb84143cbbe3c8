"""tau2-bench's own texts and tool schemas, read from a checkout's source (never imported).

From `src/tau2/` of a `Checkout`:
- `agent_system_prompt(policy)`: `agent/llm_agent.py`'s SYSTEM_PROMPT filled with its
  AGENT_INSTRUCTION and the domain policy;
- `greeting()`: the content of `orchestrator/orchestrator.py`'s DEFAULT_FIRST_AGENT_MESSAGE;
- `user_system_prompt(scenario_text, with_tools)`: `user/user_simulator.py`'s SYSTEM_PROMPT
  filled with the guidelines file it names (the tools variant when the user has tools; the
  persona placeholder emptied, as tau2's default persona config leaves it) and the scenario;
- `tool_schemas(domain, side, schemas)`: mua's schemas of a domain's tools (same names,
  parameters and types as tau2's) with every description replaced by tau2's: the tool's from
  its docstring, each parameter's from the docstring's `Args:`, each nested model's from its
  class docstring and `Field(description=...)`; parameter keys ordered as pydantic orders them.
- `defaults()`: the numbers and model names of `config.py` the leaderboard profile uses.

A file or name that is not where tau2 v1.0.1 has it raises `SourceError` naming it.
"""

from __future__ import annotations

import ast
import copy
import inspect
from pathlib import Path, PurePosixPath

from gyms.tau2.leaderboard import docstrings
from gyms.tau2.leaderboard.checkout import Checkout
from gyms.tau2.leaderboard.pysource import call_keyword, constants, module_tree
from mua.errors import UsageError

TOOL_DECORATORS = ("is_tool",)
# domain -> side -> tools module; nested models are looked up in the domain's other modules
TOOL_MODULES = {
    "retail": {"agent": "tools.py"},
    "airline": {"agent": "tools.py"},
    "telecom": {"agent": "tools.py", "user": "user_tools.py"},
    "telecom-workflow": {"agent": "tools.py", "user": "user_tools.py"},
}
DEFAULT_NAMES = (
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_ERRORS",
    "DEFAULT_LLM_USER",
    "DEFAULT_LLM_TEMPERATURE_USER",
    "DEFAULT_LLM_NL_ASSERTIONS",
    "DEFAULT_LLM_NL_ASSERTIONS_TEMPERATURE",
    "DEFAULT_LLM_TEMPERATURE_AGENT",
    "DEFAULT_SEED",
)


class SourceError(UsageError):
    """The checkout's source is not laid out as tau2-bench v1.0.1's."""


def _need(values: dict, name: str, path: Path):
    if name not in values:
        raise SourceError(f"{path} has no string constant {name}; is this tau2-bench v1.0.1?")
    return values[name]


def _pydantic_order(value, parent: str | None = None):
    """Keys sorted as pydantic's JSON-schema generator sorts them (not under properties)."""
    if isinstance(value, dict):
        keys = value if parent in ("properties", "default") else sorted(value)
        return {k: _pydantic_order(value[k], k) for k in keys}
    if isinstance(value, list):
        return [_pydantic_order(v, parent) for v in value]
    return value


class Tau2Source:
    """Texts and schemas of one checkout (parsed once, on first use)."""

    def __init__(self, checkout: Checkout):
        self.checkout = checkout
        self.pkg = checkout.package
        self._cache: dict = {}

    def _once(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _file(self, relative: str) -> Path:
        path = self.pkg / relative
        if not path.is_file():
            raise SourceError(f"{path} is missing; is {self.checkout.root} a tau2-bench checkout?")
        return path

    # ---- prompts ----------------------------------------------------------------------
    def agent_system_prompt(self, policy: str) -> str:
        path = self._file("agent/llm_agent.py")
        values = self._once(path, lambda: constants(path))
        template = _need(values, "SYSTEM_PROMPT", path)
        instruction = _need(values, "AGENT_INSTRUCTION", path)
        return template.format(domain_policy=policy, agent_instruction=instruction)

    def greeting(self) -> str:
        path = self._file("orchestrator/orchestrator.py")
        text = self._once(
            "greeting", lambda: call_keyword(path, "DEFAULT_FIRST_AGENT_MESSAGE", "content")
        )
        if text is None:
            raise SourceError(f"{path} has no DEFAULT_FIRST_AGENT_MESSAGE with a literal content")
        return text

    def guidelines_path(self, with_tools: bool) -> Path:
        path = self._file("user/user_simulator.py")
        values = constants(path, {"DATA_DIR": PurePosixPath("DATA_DIR")})
        name = "GLOBAL_USER_SIM_GUIDELINES_PATH" + ("_TOOLS" if with_tools else "")
        where = _need(values, name, path)
        parts = PurePosixPath(where).parts
        if not parts or parts[0] != "DATA_DIR":
            raise SourceError(f"{path}: {name} is not under DATA_DIR")
        return self.checkout.data_dir.joinpath(*parts[1:])

    def user_system_prompt(self, scenario: str, with_tools: bool) -> str:
        path = self._file("user/user_simulator.py")
        template = _need(self._once(path, lambda: constants(path)), "SYSTEM_PROMPT", path)
        guidelines = self._once(("guidelines", with_tools), lambda: self._guidelines(with_tools))
        return template.format(
            global_user_sim_guidelines_with_persona=guidelines, instructions=scenario
        )

    def _guidelines(self, with_tools: bool) -> str:
        path = self.guidelines_path(with_tools)
        if not path.is_file():
            raise SourceError(f"{path} is missing; the checkout's data/ is incomplete")
        # tau2's default persona config adds no guidelines: the placeholder is emptied
        return path.read_text(encoding="utf-8").replace("<PERSONA_GUIDELINES>", "")

    def defaults(self) -> dict:
        path = self._file("config.py")
        out = {}
        for node in module_tree(path).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in DEFAULT_NAMES
                and isinstance(node.value, ast.Constant)
            ):
                out[node.targets[0].id] = node.value.value
        missing = [n for n in DEFAULT_NAMES if n not in out]
        if missing:
            raise SourceError(f"{path} does not set {', '.join(missing)}")
        return out

    # ---- tool schemas -----------------------------------------------------------------
    def _domain_dir(self, domain: str) -> Path:
        return self.pkg / "domains" / ("telecom" if domain.startswith("telecom") else domain)

    def _domain_classes(self, domain: str) -> dict[str, ast.ClassDef]:
        """class name -> class of the domain's modules (its nested models are defined there)."""
        folder = self._domain_dir(domain)

        def collect() -> dict[str, ast.ClassDef]:
            found: dict[str, ast.ClassDef] = {}
            for path in sorted(folder.glob("*.py")) + [self._file("utils/pydantic_utils.py")]:
                for node in module_tree(path).body:
                    if isinstance(node, ast.ClassDef):
                        found.setdefault(node.name, node)
            return found

        return self._once(("classes", folder.name), collect)

    def tool_functions(self, domain: str, side: str) -> dict[str, ast.FunctionDef]:
        """name -> the function of each tool (methods decorated `@is_tool(...)`), in order."""
        return self._once(("tools", domain, side), lambda: self._tool_functions(domain, side))

    def _tool_functions(self, domain: str, side: str) -> dict[str, ast.FunctionDef]:
        module = TOOL_MODULES.get(domain, {}).get(side)
        if module is None:
            return {}
        path = self._domain_dir(domain) / module
        if not path.is_file():
            raise SourceError(f"{path} is missing; is this a tau2-bench v1.0.1 checkout?")
        out = {}
        for node in ast.walk(module_tree(path)):
            if isinstance(node, ast.FunctionDef) and any(
                _decorator_name(d) in TOOL_DECORATORS for d in node.decorator_list
            ):
                out[node.name] = node
        return out

    def tool_schemas(self, domain: str, side: str, schemas: list[dict]) -> list[dict]:
        """`schemas` (mua's, same structure as tau2's) with tau2's descriptions."""
        functions = self.tool_functions(domain, side)
        classes = self._domain_classes(domain)
        out = []
        for schema in schemas:
            schema = copy.deepcopy(schema)
            function = schema["function"]
            node = functions.get(function["name"])
            if node is None:
                raise SourceError(
                    f"tool {function['name']} of {domain} is not a tool in the checkout's "
                    f"{TOOL_MODULES[domain][side]}; is this tau2-bench v1.0.1?"
                )
            doc = docstrings.parse(ast.get_docstring(node, clean=False))
            function["description"] = doc.description(function["name"])
            parameters = function["parameters"]
            for name, prop in (parameters.get("properties") or {}).items():
                _set_description(prop, doc.params.get(name))
            for name, definition in (parameters.get("$defs") or {}).items():
                _describe_model(definition, classes.get(name), classes)
            function["parameters"] = _pydantic_order(parameters)
            out.append(schema)
        return out


def _decorator_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _set_description(target: dict, text: str | None) -> None:
    if text is None:
        target.pop("description", None)
    else:
        target["description"] = text


def _field_description(node: ast.AnnAssign) -> str | None:
    calls = []
    if isinstance(node.value, ast.Call):
        calls.append(node.value)
    annotation = node.annotation
    if isinstance(annotation, ast.Subscript) and _decorator_name(annotation.value) == "Annotated":
        items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else []
        calls += [item for item in items[1:] if isinstance(item, ast.Call)]
    for call in calls:
        if _decorator_name(call.func) != "Field":
            continue
        for kw in call.keywords:
            if kw.arg == "description":
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    return kw.value.value
                try:
                    return ast.literal_eval(kw.value)
                except ValueError:
                    return None
    return None


def _fields(node: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> dict[str, str | None]:
    """field -> description, base classes' fields first (as pydantic collects them)."""
    out: dict[str, str | None] = {}
    for base in node.bases:
        name = _decorator_name(base)
        if name in classes and name != node.name:
            out.update(_fields(classes[name], classes))
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out[item.target.id] = _field_description(item)
    return out


def _describe_model(definition: dict, node: ast.ClassDef | None, classes) -> None:
    if node is None:
        return  # an enum or a model tau2 defines elsewhere: left as pydantic built it
    doc = ast.get_docstring(node, clean=False)
    if "properties" in definition or "enum" not in definition:
        _set_description(definition, inspect.cleandoc(doc) if doc else None)
    fields = _fields(node, classes)
    for name, prop in (definition.get("properties") or {}).items():
        if name in fields:
            _set_description(prop, fields[name])
