"""Flatten a recipe model into (field, type, default, description) rows for `mua recipe schema`."""

from __future__ import annotations

import typing

from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def _type_name(annotation) -> str:
    text = getattr(annotation, "__name__", None) or str(annotation)
    return text.replace("typing.", "").replace("Annotated[", "").replace("NoneType", "None")


def _submodels(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out = []
    for a in typing.get_args(annotation):
        out.extend(_submodels(a))
    return out


def schema_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    rows = []
    for name, info in model.model_fields.items():
        subs = _submodels(info.annotation)
        path = f"{prefix}{name}"
        if subs:
            for sub in subs:
                kind = sub.model_fields.get("kind")
                label = (
                    f"{path}[kind={kind.default}]."
                    if kind is not None and len(subs) > 1
                    else f"{path}."
                )
                rows.extend(schema_rows(sub, label))
            continue
        default = info.default
        if default is PydanticUndefined:
            default_text = (
                "(required)" if info.default_factory is None else repr(info.default_factory())
            )
        else:
            default_text = repr(default)
        rows.append((path, _type_name(info.annotation), default_text, info.description or ""))
    return rows
