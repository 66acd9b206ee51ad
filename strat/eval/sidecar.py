"""`strat.json`, the sidecar of an exported model: what it was trained to play and how, beyond the sampling
settings `generation_config.json` holds (`max_new_tokens`, `temperature`, `top_p`), so that `strat eval` of the
directory plays as the run's own evaluation did."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from strat.config import ExperimentConfig
from strat.errors import ConfigError

SIDECAR = "strat.json"
"""The sidecar's file name, next to the weights."""

GENERATION_KEYS = ("max_new_tokens", "temperature", "top_p")
"""The sampling settings of `generation_config.json` that are `reasoning.*` keys of the same name."""


@dataclass(frozen=True)
class PlaySettings:
    """The Strat-specific settings of an exported policy: its game, reasoning format, format penalty and how
    its run evaluated it."""

    game: str
    """`game.name` the policy was trained on."""
    depth: int
    """`reasoning.depth`: the prompt and response format."""
    format_penalty: float
    """`algorithm.format_penalty`, recorded on a move whose action is unreadable."""
    samples_per_infoset: int
    """`eval.samples_per_infoset`, the default of a sampled exploitability."""
    dtype: str
    """`engine.dtype`, the precision the policy was sampled in."""
    max_model_len: int
    """`engine.max_model_len`, the longest prompt plus response it was sampled with."""
    step: int
    """The training step of the weights."""
    game_options: dict[str, Any] = field(default_factory=dict)
    """`game.options`."""

    @classmethod
    def from_config(cls, config: ExperimentConfig, step: int) -> PlaySettings:
        return cls(
            game=config.game.name,
            depth=config.reasoning.depth,
            format_penalty=config.algorithm.format_penalty,
            samples_per_infoset=config.eval.samples_per_infoset,
            dtype=config.engine.dtype,
            max_model_len=config.engine.max_model_len,
            step=step,
            game_options=dict(config.game.options),
        )

    def config_tree(self) -> dict[str, Any]:
        """The config keys these settings stand for, as a nested tree for `strat.config_loading.from_dict`."""
        return {
            "game": {"name": self.game, "options": dict(self.game_options)},
            "reasoning": {"depth": self.depth},
            "algorithm": {"format_penalty": self.format_penalty},
            "eval": {"samples_per_infoset": self.samples_per_infoset},
            "engine": {"dtype": self.dtype, "max_model_len": self.max_model_len},
        }


def write(settings: PlaySettings, folder: Path) -> Path:
    path = folder / SIDECAR
    path.write_text(json.dumps(asdict(settings), indent=2, sort_keys=True) + "\n")
    return path


def read(folder: Path) -> PlaySettings | None:
    """The sidecar in `folder`, or None where there is none; a malformed one is refused in one line."""
    path = folder / SIDECAR
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return PlaySettings(**data)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{path}: not a Strat sidecar ({err}); fix or remove it") from None


def generation_defaults(folder: Path) -> dict[str, Any]:
    """`reasoning.*` keys from `folder`'s `generation_config.json` (those it sets), for a model with a sidecar."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return {key: data[key] for key in GENERATION_KEYS if data.get(key) is not None}
