"""What `strat train --resume RUN_DIR key=value ...` may change, and the record of what it changed.

Allowed: the schedule, evaluation, logging, resources, engine and the learning rate. Refused in one line, before
anything starts: anything else that would change, such as another model, game, reasoning depth or group shape. A
change rewrites `config.yaml` and appends a line to `overrides.jsonl`: the step it applies after and each key's value
before and after. An override that keeps the saved value changes nothing and is not recorded."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from strat.config import ExperimentConfig, parse_override, save_resolved
from strat.config_loading import load_config
from strat.errors import ConfigError
from strat.jsonl import RecordError, read_lines
from strat.model import checkpoint

log = logging.getLogger("strat.train")

RESUMABLE_SECTIONS = ("schedule", "eval", "logging", "resources", "engine")
"""Sections whose keys a resumed run may change."""
RESUMABLE_KEYS = ("algorithm.lr",)
"""Single keys outside those sections that a resumed run may change."""
OVERRIDES_FILE = "overrides.jsonl"
"""In the run directory: one JSON line per resume that changed the config."""

_FIXED = (
    ("model", "its model"),
    ("game", "its game and the game's options"),
    ("reasoning.depth", "its reasoning depth"),
    ("algorithm.group_size", "its group shape (algorithm.group_size, algorithm.groups_per_step)"),
    ("algorithm.groups_per_step", "its group shape (algorithm.group_size, algorithm.groups_per_step)"),
)
"""Keys (and sections) a resumed run keeps, with what the refusal calls them."""


@dataclass(frozen=True)
class OverrideChange:
    """One key a resume changed: its value before and after (as config.yaml writes them)."""

    key: str
    before: Any
    after: Any


@dataclass(frozen=True)
class ResumeOverrides:
    """A line of `overrides.jsonl`: the checkpoint step the run resumed from (the new values apply from the next
    step on) and what changed."""

    step: int
    changes: tuple[OverrideChange, ...]


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def resumable(key: str) -> bool:
    """Whether a resumed run may change `key` (a dotted config key or a whole section)."""
    return key in RESUMABLE_KEYS or any(_under(key, section) for section in RESUMABLE_SECTIONS)


def _value_at(tree: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(tree, list) and part.isdigit() and int(part) < len(tree):
            tree = tree[int(part)]
        elif isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return None
    return tree


def _refusal(key: str, run_dir: Path) -> str:
    allowed = ", ".join([*(f"{section}.*" for section in RESUMABLE_SECTIONS), *RESUMABLE_KEYS])
    kept = next((what for prefix, what in _FIXED if _under(key, prefix)), None)
    if kept is not None:
        return (f"{key}: a resumed run keeps {kept}; start a new run for another (strat train CONFIG ...), or resume"
                f" {run_dir} without it")
    return f"{key}: cannot change on resume (allowed: {allowed})"


def resume_config(run_dir: Path, overrides: list[str]) -> tuple[ExperimentConfig, list[OverrideChange]]:
    """The saved config of `run_dir` with `overrides` applied, and what they change; an override of a key a resumed
    run keeps, to another value, is refused in one line naming the key (nothing is written)."""
    saved = run_dir / "config.yaml"
    tree = yaml.safe_load(saved.read_text()) or {}
    keys = []
    for text in overrides:
        parts, value = parse_override(text)
        key = ".".join(parts)
        if not resumable(key) and _value_at(tree, parts) != value:
            raise ConfigError(_refusal(key, run_dir))
        keys.append((key, parts))
    before = load_config(saved).model_dump(mode="json")
    config = load_config(saved, overrides)
    after = config.model_dump(mode="json")
    changes, seen = [], set()
    for key, parts in keys:
        old, new = _value_at(before, parts), _value_at(after, parts)
        if old != new and key not in seen:
            seen.add(key)
            changes.append(OverrideChange(key, old, new))
    return config, changes


def resume_with_overrides(run_dir: Path, overrides: list[str], step: int | None = None) -> ExperimentConfig:
    """`resume_config`, and when something changes and there is a checkpoint to resume from (of `step`, default the
    latest complete one): `config.yaml` rewritten and the change appended to `overrides.jsonl` with that step."""
    config, changes = resume_config(run_dir, overrides)
    if step is None:
        latest = checkpoint.latest(run_dir)
        step = latest.step if latest is not None else None
    if changes and step is not None:
        save_resolved(config, run_dir)
        record = ResumeOverrides(step, tuple(changes))
        with (run_dir / OVERRIDES_FILE).open("a") as handle:
            handle.write(json.dumps(asdict(record)) + "\n")
        log.info("resumed after step %d with %s", step,
                 ", ".join(f"{c.key}: {c.before!r} -> {c.after!r}" for c in changes))
    return config


def read_overrides(run_dir: Path) -> list[ResumeOverrides]:
    """Every line of a run's `overrides.jsonl`, oldest first (none when the run was never resumed with changes), read
    strictly (`strat.jsonl`)."""
    path = run_dir / OVERRIDES_FILE
    records = []
    for line in read_lines(path).lines:
        try:
            changes = tuple(OverrideChange(**change) for change in line.record["changes"])
            records.append(ResumeOverrides(int(line.record["step"]), changes))
        except (KeyError, TypeError, ValueError) as err:
            raise RecordError(f"{path}, line {line.number}: not a resume's record ({type(err).__name__}: {err})") from None
    return records
