"""A config as a run uses it: a YAML file (or the defaults) with `key.sub=value` overrides, checked by the schema
(`strat.config`), with its Hugging Face Hub names pinned to their commits (`strat.model.hub`: from the cache, else
the Hub's metadata). The schema does no network access; this is where a config reaches the Hub."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import yaml

from strat.config import ExperimentConfig, cross_check, parse_override, validate_tree
from strat.errors import ConfigError
from strat.model import hub

HUB_KEYS = (("model", "path"), ("comparison", "judge_model"), ("comparison", "embedding_model"))
"""The keys that may name a Hub model: (section, key); and each `policies` entry's `model`."""


def from_dict(tree: dict[str, Any]) -> ExperimentConfig:
    """Validate a config tree, its Hub names pinned to their commits; raises ConfigError with a one-line message."""
    config = pin_hub_names(validate_tree(tree))
    cross_check(config)
    return config


def pin_hub_names(config: ExperimentConfig) -> ExperimentConfig:
    """`config` with every Hub name of `HUB_KEYS` pinned to its commit (`org/name@<hash>`, what `config.yaml` records);
    a name that cannot be resolved is a ConfigError naming its key."""
    for section, key in HUB_KEYS:
        part = getattr(config, section)
        value = getattr(part, key)
        if value is None:
            continue
        try:
            pinned = hub.pin(value)
        except ValueError as err:
            raise ConfigError(f"{section}.{key}={value!r}: {err}") from None
        if pinned != value:
            config = config.model_copy(update={section: part.model_copy(update={key: pinned})})
    policies = []
    for index, policy in enumerate(config.policies):
        try:
            pinned = hub.pin(policy.model)
        except ValueError as err:
            raise ConfigError(f"policies.{index}.model={policy.model!r}: {err}") from None
        policies.append(policy if pinned == policy.model else policy.model_copy(update={"model": pinned}))
    if policies != config.policies:
        config = config.model_copy(update={"policies": policies})
    return config


def _apply_override(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set `value` at the dotted key `parts` of `tree`; a number steps into a list by index (`policies.1.lr`,
    `game.opponents.0.weight`), so one entry of a list can be changed without restating the list."""
    node: Any = tree
    for depth, part in enumerate(parts):
        where = ".".join(parts[: depth + 1])
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit():
                raise ConfigError(f"{'.'.join(parts[:depth])} is a list: step into it by index ({where!r} is not one)")
            index = int(part)
            if index >= len(node):
                raise ConfigError(f"{where}: the list {'.'.join(parts[:depth])} has {len(node)} entries (0 to"
                                  f" {len(node) - 1}); restate the whole list to add one")
            if last:
                node[index] = value
            else:
                node = node[index]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{'.'.join(parts[:depth])} is a value, not a section")
        if last:
            node[part] = value
        elif part not in node and parts[depth + 1].isdigit():
            raise ConfigError(f"{where} is not in the config file: restate the whole list ({where}=[...])")
        else:
            node = node.setdefault(part, {})


def load_config(path: str | os.PathLike[str] | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Load a YAML experiment file (or the defaults when path is None) and apply overrides."""
    tree: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {str(file)!r} not found")
        try:
            loaded = yaml.safe_load(file.read_text())
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError(f"{file}: not valid YAML{where}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{file}: the top level must be a mapping of sections")
        tree = loaded or {}
    for text in overrides:
        parts, value = parse_override(text)
        _apply_override(tree, parts, value)
    config = from_dict(tree)
    _check_installed(config)
    return config


def _check_installed(config: ExperimentConfig) -> None:
    """Optional packages a run asks for. Checked where a run is configured (check, train, resume), not where a saved
    config is only read back (export, eval of a run directory)."""
    if config.logging.wandb is not None and importlib.util.find_spec("wandb") is None:
        raise ConfigError("logging.wandb: wandb is not installed (pip install 'strat-reasoner[wandb]', "
                          "or unset logging.wandb)")
