"""Load a recipe: read YAML, apply `key=value` overrides to the raw tree, validate, explain errors.

Every problem becomes one line `file: a.b.c: message (got X)` inside a `UsageError`; unknown keys
get a did-you-mean from the fields that exist at that place. The YAML is read with the limits of
`mua.config.recipe_yaml` (size, UTF-8, depth, alias expansion, repeated keys), and infinite or
NaN numbers are refused. Nothing here runs a recipe.
"""

from __future__ import annotations

import copy
import difflib
import re
import sys
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from mua.config.gyms import gyms_from_raw
from mua.config.recipe_yaml import load_text, non_finite_path, read_recipe_text
from mua.config.recipes import RECIPE_MODELS, recipe_model_for
from mua.errors import UsageError
from mua.redact import is_secret_name

_SECRET_VALUE = re.compile(r"^(sk-|sk_|hf_|xox[bap]-|ghp_|AKIA)[A-Za-z0-9_\-]{8,}")


def _yaml_scalar(text: str) -> Any:
    try:
        return load_text(text) if text != "" else ""
    except yaml.YAMLError:
        return text


def _model_of(annotation: Any, raw: Any) -> type[BaseModel] | None:
    """The pydantic model a field's annotation points at, choosing a union arm by `kind`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    models = []
    for a in args:
        m = _model_of(a, raw)
        if m is not None:
            models.append(m)
    if not models:
        return None
    if len(models) > 1 and isinstance(raw, dict) and "kind" in raw:
        for m in models:
            kind = m.model_fields.get("kind")
            if kind is not None and kind.default == raw["kind"]:
                return m
    return models[0]


def fields_at(model: type[BaseModel], raw: dict, path: list[str]) -> list[str] | None:
    """Field names valid at `path` (a list of keys) in `model`, or None past a free-form dict."""
    current: type[BaseModel] | None = model
    node: Any = raw
    for key in path:
        if current is None:
            return None
        info = current.model_fields.get(key)
        if info is None:
            return list(current.model_fields)
        node = node.get(key, {}) if isinstance(node, dict) else {}
        current = _model_of(info.annotation, node)
    return list(current.model_fields) if current is not None else None


# Keys that moved to another place: an old recipe gets the new place named, not a guess.
MOVED_KEYS = {
    "options": "gym.options",  # prep recipes: the gym is a section
    "rollout.base_url": "rollout.openai.base_url",
    "rollout.api_key_env": "rollout.openai.api_key_env",
}


def _moved(dotted: str, model: type[BaseModel]) -> str | None:
    """`; write X instead` for a key that moved to X in `model`, else None."""
    new = MOVED_KEYS.get(dotted)
    if new is None:
        return None
    *section, key = new.split(".")
    valid = fields_at(model, {}, section)
    return f"; write {new} instead" if valid and key in valid else None


def _suggest(word: str, choices: list[str], prefix: str) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    if close:
        return f"; did you mean {prefix}{close[0]}?"
    return f"; valid keys here: {', '.join(sorted(choices))}" if choices else ""


def apply_overrides(raw: dict, overrides: list[str], model: type[BaseModel]) -> dict:
    """Apply `a.b.c=value` overrides to the raw recipe tree; unknown keys get a did-you-mean.

    A list of sections (`gyms`) is entered by naming one entry: its label (or its gym name when
    it has no label) or its position, e.g. `gyms.intention.weight=2` or `gyms.0.max_turns=4`."""
    for item in overrides:
        if "=" not in item:
            raise UsageError(f"override {item!r}: expected key=value (e.g. optim.lr=1e-5)")
        dotted, value_text = item.split("=", 1)
        dotted = dotted.strip()
        path = dotted.split(".")
        if not all(path):
            raise UsageError(f"override {item!r}: empty key in path {dotted!r}")
        node, section, where = _walk_to_parent(raw, path, model, dotted)
        node[path[-1]] = _yaml_scalar(value_text)
        if path[-1] == "kind" and section is not None:
            _drop_other_arm_keys(node, section, where)
    return raw


def _refuse_one_gym_keys(overrides: list[str], gyms: list[str]) -> None:
    """With several gyms chosen, `gym.<key>` names none of them: refused with the entry form."""
    for item in overrides:
        dotted, _, value = item.partition("=")
        if dotted.strip().startswith("gym."):
            rest = dotted.strip()[4:]
            raise UsageError(
                f"override {dotted.strip()}: {len(gyms)} gyms are chosen ({', '.join(gyms)}); "
                f"name the entry, e.g. gyms.{gyms[-1]}.{rest}={value}"
            )


def _walk_to_parent(raw: dict, path: list[str], model: type[BaseModel], dotted: str):
    """The dict that holds `path`'s last key (created on the way), the section model it is
    (None inside a free-form dict such as gym.options) and its dotted place; checks each key."""
    node: dict = raw
    current: type[BaseModel] | None = model
    annotation: Any = model  # the section's annotation: a `kind=` change picks another arm
    walked: list[str] = []
    i = 0
    while True:
        key = path[i]
        info = None
        if current is not None:
            info = current.model_fields.get(key)
            if info is None:
                prefix = ".".join(walked) + "." if walked else ""
                hint = _moved(prefix + key, model) or _suggest(
                    key, list(current.model_fields), prefix
                )
                raise UsageError(f"override {dotted}: unknown key {key!r}{hint}")
        if i == len(path) - 1:
            return node, (annotation if current is not None else None), ".".join(walked)
        child = node.get(key)
        walked.append(key)
        i += 1
        if isinstance(child, list) or (info is not None and _is_list(info.annotation)):
            child = _pick_entry(child, key, path[i] if i < len(path) else "", dotted)
            walked.append(path[i])
            i += 1
            if i == len(path):
                raise UsageError(
                    f"override {dotted}: name a key inside the entry, e.g. {dotted}.weight=2"
                )
        elif not isinstance(child, dict):
            node[key] = child = {}
        annotation = info.annotation if info is not None else None
        current = _model_of(annotation, child) if info is not None else None
        node = child


def _is_list(annotation: Any) -> bool:
    return typing.get_origin(annotation) is list or any(
        typing.get_origin(a) is list for a in typing.get_args(annotation)
    )


def _pick_entry(entries: Any, key: str, selector: str, dotted: str) -> dict:
    """The entry of the list `key` that `selector` names: a label, a gym name, or a position."""
    if not isinstance(entries, list) or not entries:
        raise UsageError(
            f"override {dotted}: the recipe has no {key}: list to pick an entry from "
            f"(a one-gym recipe's section is gym.<key>)"
        )
    names = [
        str(e.get("label") or e.get("name") or i) if isinstance(e, dict) else str(i)
        for i, e in enumerate(entries)
    ]
    if selector in names:
        index = names.index(selector)
    elif selector.isdigit() and int(selector) < len(entries):
        index = int(selector)
    else:
        raise UsageError(
            f"override {dotted}: no entry {selector!r} in {key}; name one of "
            f"{', '.join(names)} or a position 0..{len(entries) - 1}"
        )
    if not isinstance(entries[index], dict):
        raise UsageError(f"override {dotted}: {key}[{index}] is not a section")
    return entries[index]


def _drop_other_arm_keys(node: dict, section: Any, where: str) -> None:
    """After a `kind=` override, drop the section's keys that the new kind does not have (e.g.
    `user.base_url` under `user.kind=scripted`), with a note on stderr saying which."""
    arm = _model_of(section, node) if section is not None else None
    valid = list(arm.model_fields) if arm is not None else None
    if valid is None:
        return
    dropped = sorted(k for k in node if k not in valid)
    for key in dropped:
        del node[key]
    if dropped:
        names = ", ".join(f"{where}.{k}" for k in dropped)
        print(f"note: {where}.kind={node['kind']} has no {names}; dropped", file=sys.stderr)


def _find_inline_secrets(node: Any, path: str = "") -> list[str]:
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            sub = f"{path}.{k}" if path else str(k)
            if isinstance(v, str) and is_secret_name(k) and v:
                found.append(sub)
            else:
                found.extend(_find_inline_secrets(v, sub))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.extend(_find_inline_secrets(v, f"{path}[{i}]"))
    elif isinstance(node, str) and _SECRET_VALUE.match(node):
        found.append(path)
    return found


def _render_validation(source: str, err: ValidationError, model: type[BaseModel], raw: dict) -> str:
    lines = []
    for e in err.errors():
        loc = [
            str(p)
            for p in e["loc"]
            if not (isinstance(p, str) and p in ("grpo", "ppo", "sft", "scripted", "llm"))
        ]
        where = ".".join(loc) or "(top level)"
        msg = e["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if e["type"] == "extra_forbidden":
            valid = fields_at(model, raw, loc[:-1]) or []
            prefix = ".".join(loc[:-1]) + "." if len(loc) > 1 else ""
            msg = f"unknown key{_moved(where, model) or _suggest(loc[-1], valid, prefix)}"
            lines.append(f"{source}: {where}: {msg}")
            continue
        got = e.get("input")
        got_text = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{source}: {where}: {msg}{got_text}")
    return "\n".join(lines)


def parse_recipe_dict(raw: dict, verb: str, source: str = "<recipe>"):
    """Validate an already-loaded raw dict as the recipe of `verb`."""
    model = recipe_model_for(verb, raw)
    secrets = _find_inline_secrets(raw)
    if secrets:
        raise UsageError(
            f"{source}: {secrets[0]}: looks like a secret written inline; put it in an environment "
            "variable and name that variable (e.g. user.api_key_env: OPENAI_API_KEY)"
        )
    bad_number = non_finite_path(raw)
    if bad_number is not None:
        where, value = bad_number
        raise UsageError(
            f"{source}: {where}: must be a finite number (got {value}); write a finite number"
        )
    declared = raw.get("verb")
    if declared is not None and declared != verb:
        raise UsageError(f"{source}: verb: this recipe is for `mua {declared}`, not `mua {verb}`")
    try:
        recipe = model.model_validate({**raw, "verb": verb})
    except ValidationError as err:
        raise UsageError(_render_validation(source, err, model, raw)) from None
    # a string such as `1e309` (YAML reads no float there) becomes inf only in the model
    bad_number = non_finite_path(recipe.model_dump())
    if bad_number is not None:
        where, value = bad_number
        raise UsageError(
            f"{source}: {where}: must be a finite number (got {_raw_at(raw, where, value)}, "
            f"which is {value}); write a finite number"
        )
    return recipe


def _raw_at(raw: dict, dotted: str, default):
    """The value the recipe wrote at `a.b[0].c`, for an error message (default when not found;
    a one-gym `gym:` is found under `gyms[0]`)."""
    node: Any = gyms_from_raw(raw) if isinstance(raw, dict) else raw
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", dotted):
        if part.startswith("["):
            index = int(part[1:-1])
            node = node[index] if isinstance(node, list) and index < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return default
    return node


def read_yaml(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: recipe file not found; list shipped ones with `mua recipe ls`")
    if p.is_dir():
        raise UsageError(f"{path}: is a folder; give a recipe .yaml file")
    try:
        raw = load_text(read_recipe_text(p))
    except ValueError as err:
        raise UsageError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        if isinstance(err, yaml.reader.ReaderError):  # a control character: no mark, a position
            where = f"character {err.position + 1}"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UsageError(f"{path}: invalid YAML at {where}: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UsageError(
            f"{path}: a recipe must be a YAML mapping of sections (got {type(raw).__name__})"
        )
    return raw


def infer_verb(path: str | Path, raw: dict) -> str:
    if isinstance(raw.get("verb"), str) and raw["verb"] in RECIPE_MODELS:
        return raw["verb"]
    stem = Path(path).stem
    for verb in RECIPE_MODELS:
        if stem.startswith(verb) or stem.endswith("_" + verb):
            return verb
    return "train"


def select_gyms(raw: dict, names: list[str], source: str = "<recipe>") -> dict:
    """The raw recipe evaluating `names` (distinct) instead of its gyms: an entry labelled (else
    named) so keeps its section, another gym gets a bare one. One gym becomes `gym:`, several
    `gyms:`, so overrides applied afterwards reach the chosen entries (`gym.<key>` or
    `gyms.<label>.<key>`) and an override of a dropped entry is refused."""
    try:
        data = gyms_from_raw(raw)
    except ValueError as err:
        raise UsageError(f"{source}: {err}") from None
    entries = [e for e in data.pop("gyms", None) or [] if isinstance(e, dict)]

    def entry(name: str) -> dict:
        for matches in (
            lambda e: (e.get("label") or e.get("name")) == name,
            lambda e: e.get("name") == name,
        ):
            for e in entries:
                if matches(e):
                    return copy.deepcopy(e)
        return {"name": name}

    picked = [entry(name) for name in dict.fromkeys(names)]
    if len(picked) == 1:
        data["gym"] = picked[0]
    else:
        data["gyms"] = picked
    return data


def load_recipe(
    path: str | Path | None,
    overrides: list[str] | None = None,
    verb: str | None = None,
    gyms: list[str] | None = None,
):
    """Read, override and validate a recipe file (or the verb's defaults when `path` is None).
    `gyms` (e.g. from `--gym`) replaces the file's gyms before the overrides apply
    (`select_gyms`)."""
    raw = read_yaml(path) if path is not None else {}
    verb = verb or infer_verb(path or "", raw)
    if verb not in RECIPE_MODELS:
        raise UsageError(f"unknown verb {verb!r}; one of {', '.join(RECIPE_MODELS)}")
    model = recipe_model_for(verb, raw)
    if gyms:
        raw = select_gyms(raw, gyms, str(path or "<defaults>"))
        if len(gyms) > 1:
            _refuse_one_gym_keys(overrides or [], gyms)
    raw = apply_overrides(raw, list(overrides or []), model)
    recipe = parse_recipe_dict(raw, verb, str(path) if path else "<defaults>")
    name = Path(path).stem if path else verb
    if "{name}" in recipe.run_dir:
        recipe.run_dir = recipe.run_dir.replace("{name}", name)
    return recipe
