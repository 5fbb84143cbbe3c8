"""YAML for recipes, which are shared and may be hostile: PyYAML's safe loader with limits.

`RecipeLoader` is a `yaml.SafeLoader` that refuses, as a `yaml.YAMLError` with the position, a key
given twice in one mapping (`<<` merges may still be overridden), nesting past `MAX_DEPTH`, and
aliases expanding past `MAX_VALUES` or referring to themselves (counted on the node graph, never
expanded). `read_recipe_text` refuses files over `MAX_BYTES` and non-UTF-8 bytes before parsing;
`non_finite_path` finds infinite or NaN numbers. Why: docs/training.md.
Does not validate fields (`mua.config.recipe_loading`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000
_MERGE_TAG = "tag:yaml.org,2002:merge"


class RecipeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` with the limits of the module docstring."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node):
        values, depth = expanded_shape(node)
        if values > MAX_VALUES or depth > MAX_DEPTH:
            problem = (
                f"its aliases expand it to {values} values"
                if values > MAX_VALUES
                else f"its aliases nest it {depth} levels deep"
            )
            limits = f"a recipe holds at most {MAX_VALUES} values, {MAX_DEPTH} levels deep"
            raise ConstructorError(None, None, f"{problem}; {limits}", node.start_mark)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in first:
                    raise ConstructorError(
                        None,
                        None,
                        f"key {key!r} is given twice (first on line {first[key].line + 1}); "
                        "keep one",
                        key_node.start_mark,
                    )
                first[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def _children(node) -> list:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_shape(root) -> tuple[int, int]:
    """(values, depth) of the document under `root` once its aliases are expanded, counted
    without expanding: a post-order walk of the node graph that visits each node once."""
    shape: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            kids = [shape[id(c)] for c in _children(node)]
            shape[key] = (1 + sum(v for v, _ in kids), 1 + max((d for _, d in kids), default=0))
            open_nodes.discard(key)
            continue
        if key in shape:
            continue
        if key in open_nodes:
            raise ConstructorError(None, None, "an alias refers to itself", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in shape)
    return shape[id(root)]


def read_recipe_text(path: Path) -> str:
    """The file's text; ValueError with the problem when it is too large or not UTF-8."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES // 1024} KiB; a recipe is a short YAML file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ValueError(
            f"line {line}: byte {data[e.start : e.start + 1]!r} is not UTF-8; save the file as "
            "UTF-8"
        ) from None


def load_text(text: str) -> Any:
    return yaml.load(text, Loader=RecipeLoader)  # noqa: S506 (a SafeLoader subclass)


def non_finite_path(tree: Any, prefix: str = "") -> tuple[str, float] | None:
    """(dotted path, value) of the first infinite or NaN number in `tree`, else None."""
    if isinstance(tree, float) and not math.isfinite(tree):
        return prefix or "(top level)", tree
    if isinstance(tree, dict):
        items = ((f"{prefix}.{k}" if prefix else str(k), v) for k, v in tree.items())
    elif isinstance(tree, list):
        items = ((f"{prefix}[{i}]", v) for i, v in enumerate(tree))
    else:
        return None
    for path, value in items:
        found = non_finite_path(value, path)
        if found is not None:
            return found
    return None
