"""The configuration reference (docs/configuration.md), generated from the schema in `strat.config`: every key
with its type, its default and its description (the field's docstring)."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from strat.config import ExperimentConfig

_BOUNDS = ((Ge, "ge", ">="), (Gt, "gt", ">"), (Le, "le", "<="), (Lt, "lt", "<"))


@dataclass(frozen=True)
class Key:
    """One configuration key as the reference shows it."""

    path: str
    """Dotted key, as on the command line (`algorithm.lam`)."""
    type: str
    default: str
    description: str | None


@dataclass(frozen=True)
class Section:
    """A section of keys (`algorithm`, or a nested one such as `model.tiny`) and what it is for."""

    path: str
    description: str | None
    keys: tuple[Key, ...]


def _section_model(annotation: object) -> type[BaseModel] | None:
    """The section class behind a field: `X`, `list[X]` or `X | None` for a section X, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return _section_model(item)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return _section_model(inner[0]) if len(inner) == 1 else None
    return None


def _type_name(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(value) for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if arg is type(None) else _type_name(arg) for arg in typing.get_args(annotation))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_name(arg) for arg in typing.get_args(annotation))}]"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info: FieldInfo) -> str:
    found = [f"{symbol} {getattr(item, name)}" for item in info.metadata
             for kind, name, symbol in _BOUNDS if isinstance(item, kind)]
    return f", {', '.join(found)}" if found else ""


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "(required)"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [item.model_dump(exclude_defaults=False) for item in value]
    return f"`{json.dumps(value)}`"


def sections(model: type[BaseModel] = ExperimentConfig, prefix: str = "") -> Iterator[Section]:
    """Every section of `model`, depth first, in the schema's order."""
    keys = []
    nested = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        inner = _section_model(info.annotation)
        if inner is not None and typing.get_origin(info.annotation) is list:
            path_items = f"{path}[]"
            keys.append(Key(path, f"list of `{path_items}`", _default(info), info.description or inner.__doc__))
            nested.append((inner, f"{path_items}."))
        elif inner is not None:
            if not info.is_required() and info.get_default() is None:
                # An optional section (unset: off) is a key of its own as well.
                keys.append(Key(path, "section | null", _default(info), info.description))
            nested.append((inner, f"{path}."))
        else:
            keys.append(Key(path, _type_name(info.annotation) + _bounds(info), _default(info), info.description))
    if prefix:
        yield Section(prefix.rstrip("."), model.__doc__, tuple(keys))
    for inner, inner_prefix in nested:
        yield from sections(inner, inner_prefix)


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def reference_markdown() -> str:
    """docs/configuration.md: one table per section."""
    lines = [
        "# Configuration reference",
        "",
        "Generated from the schema in `strat/config.py` by `strat config-reference --out docs/configuration.md`;",
        "a test fails when this file is stale. Every key is optional. Set keys in a YAML file under `configs/`",
        "or on the command line as `section.key=value`; `strat check CONFIG` prints every key of a config resolved.",
        "",
    ]
    for section in sections():
        lines += [f"## `{section.path}`", "", _cell(section.description), ""]
        if not section.keys:
            continue
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for key in section.keys:
            lines.append(f"| `{key.path}` | {_cell(key.type)} | {_cell(key.default)} | {_cell(key.description)} |")
        lines.append("")
    return "\n".join(lines)


def undocumented() -> list[str]:
    """Keys and sections that have no description."""
    missing = []
    for section in sections():
        if not section.description:
            missing.append(section.path)
        missing += [key.path for key in section.keys if not key.description]
    return missing
