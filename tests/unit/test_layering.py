"""No module imports from a layer above its own (docs/architecture.md, "Where things live"), and
no files import each other in a loop.

Every `import` and `from ... import` of mua/, gyms/ and data_prep/ is read with `ast` (imports
inside functions too), each module is placed in its layer, and an import of a higher layer fails
here naming the file, the line and both layers; there are no exceptions. Every import of a file
of the tree, relative ones and those under `if TYPE_CHECKING:` included, is an arrow between two
files; a loop of arrows fails here naming its files.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Lowest first; a unit may import its own layer and the layers below it.
LAYERS = (
    ("mua",),  # the package root and its small modules: errors, text, redact, http_session, ...
    ("mua.algo", "mua.distributed", "mua.kernels"),
    ("mua.models",),
    ("mua.engines",),  # each engine declares its own recipe section (settings.py)
    ("mua.config",),  # the recipe, which takes the engines' sections from their registry
    ("mua.llm",),
    ("mua.gym",),
    ("data_prep",),  # readers of public data
    ("gyms",),  # the gyms: plugins found by name, never imported by mua
    ("mua.rollout", "mua.families", "mua.gateway"),  # the turn loop, call formats, the gateway
    ("mua.track", "mua.serve"),
    ("mua.users",),
    ("mua.run",),  # each gyms: entry made ready to run: the seat, a program's driver
    ("mua.eval", "mua.view"),
    ("mua.train",),
    ("mua.cli", "mua.demo"),
)
LAYER = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}
PLUGINS = ("gyms", "data_prep")  # mua reaches these through the gym registry only


def unit_of(module: str) -> str:
    """The layer unit of a dotted module name: `mua.<package>`, `mua` for the root's own modules
    (`mua.demo` excepted), or the top-level package (`gyms`, `data_prep`)."""
    parts = module.split(".")
    if parts[0] != "mua":
        return parts[0]
    if len(parts) == 1:
        return "mua"
    if (REPO / "mua" / parts[1]).is_dir() or parts[1] == "demo":
        return f"mua.{parts[1]}"
    return "mua"


def module_name(rel: str) -> str:
    """The dotted module of a path relative to the repository (a package is its __init__.py)."""
    name = ".".join(Path(rel).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imported_modules(rel: str, source: str):
    """Every name `rel` imports, dotted in full (`from p import x` gives `p.x`: x may be a
    module or a name defined in p), relative imports resolved."""
    package = (
        module_name(rel) if rel.endswith("__init__.py") else module_name(rel).rpartition(".")[0]
    )
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield from (f"{base}.{alias.name}" for alias in node.names)


def file_cycles(modules) -> list[list[str]]:
    """Groups of files (sorted paths) that import each other in a loop, from (path, source)."""
    path_of = {module_name(rel): rel for rel, _ in modules}
    arrows: dict[str, set[str]] = {rel: set() for rel, _ in modules}
    for rel, source in modules:
        for name in imported_modules(rel, source):
            while name and name not in path_of:  # a name defined in a module: that module
                name = name.rpartition(".")[0]
            if name and path_of[name] != rel:
                arrows[rel].add(path_of[name])
    order, low, stack, on_stack, loops = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        order[node] = low[node] = len(order)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(arrows[node]):
            if nxt not in order:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], order[nxt])
        if low[node] == order[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                loops.append(sorted(group))

    for rel in sorted(arrows):
        if rel not in order:
            visit(rel)
    return loops


def imports(source: str):
    """(line, imported module) of every absolute import in a module's source."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def upward_imports(modules) -> list[str]:
    """What each (path relative to the repository, source) imports against the layering."""
    found = []
    for rel, source in modules:
        here = unit_of(".".join(Path(rel).with_suffix("").parts))
        for line, module in imports(source):
            there = unit_of(module)
            if there not in LAYER or there == here:
                continue
            upward = LAYER[there] > LAYER[here]
            plugin = here.startswith("mua") and there in PLUGINS
            if upward or plugin:
                found.append(f"{rel}:{line} ({here}) imports {module} ({there})")
    return found


def _sources():
    for top in ("mua", "gyms", "data_prep"):
        for path in sorted((REPO / top).rglob("*.py")):
            yield path.relative_to(REPO).as_posix(), path.read_text()


def test_every_package_has_a_layer():
    units = {unit_of(".".join(Path(rel).with_suffix("").parts)) for rel, _ in _sources()}
    assert units <= set(LAYER), f"give these a layer here and in docs: {units - set(LAYER)}"


def test_no_module_imports_a_higher_layer():
    found = upward_imports(_sources())
    assert not found, "upward imports:\n" + "\n".join(found)


def test_the_check_finds_upward_imports_and_mua_importing_a_gym():
    lazy = "def f():\n    from mua.train.rl import rl_step\n"
    assert upward_imports([("mua/llm/probe.py", lazy)]) == [
        "mua/llm/probe.py:2 (mua.llm) imports mua.train.rl (mua.train)"
    ]
    assert upward_imports([("mua/cli/probe.py", "import gyms.tau.env\n")]) == [
        "mua/cli/probe.py:1 (mua.cli) imports gyms.tau.env (gyms)"
    ]
    assert upward_imports([("data_prep/probe.py", "from gyms.math import problems\n")]) == [
        "data_prep/probe.py:1 (data_prep) imports gyms.math (gyms)"
    ]
    downward = "from mua.errors import UsageError\nfrom mua.gym.api import Task\n"
    assert upward_imports([("gyms/x/probe.py", downward)]) == []
    # an engine declares its section below the recipe: it never reads the recipe's models
    assert upward_imports([("mua/engines/x/probe.py", "from mua.config import rollout\n")])
    # the SGLang client reads no table from `mua serve`
    assert upward_imports([("mua/engines/sglang/probe.py", "from mua.serve import protocol\n")])


def test_no_files_import_each_other_in_a_loop():
    loops = file_cycles(list(_sources()))
    assert not loops, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in loops)


def test_the_check_finds_a_loop_through_relative_and_type_only_imports():
    pair = [
        ("mua/x/a.py", "from mua.x.b import f\n"),
        (
            "mua/x/b.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import g\n",
        ),
        ("mua/x/c.py", "from mua.x import a\n"),
    ]
    assert file_cycles(pair) == [["mua/x/a.py", "mua/x/b.py"]]
    assert file_cycles(pair[:1] + pair[2:]) == []
