"""The model RL starts from, stage by stage: the configured model (a `tiny:<game>` one is built), its rules
pretraining when `pretrain.enabled`, then its warm start when `warm_start.enabled`. Each stage is cached under
`$STRAT_CACHE_DIR` and trained on first use, so `strat pretrain`, `strat sft` and `strat train` share the results."""

from __future__ import annotations

import logging
from pathlib import Path

from strat.config import ExperimentConfig
from strat.train.pretrain import ensure_pretrained
from strat.train.settings import base_model_path, pretrain_settings, warm_start_settings
from strat.train.warmstart import ensure_warm

log = logging.getLogger(__name__)


def warm_start_base(config: ExperimentConfig) -> Path:
    """The model the warm start fine-tunes: the configured one, rules-pretrained when `pretrain.enabled`."""
    if config.model.tiny_game is not None:
        log.info("tiny model for %s: built on first use, then cached", config.model.tiny_game)
    base = base_model_path(config)
    if config.pretrain.enabled:
        log.info("rules pretraining (perception, not strategy): trained on first use, then cached")
        base = ensure_pretrained(base, config.game.name, pretrain_settings(config))
    return base


def initial_model_path(config: ExperimentConfig) -> Path:
    """The model RL starts from: `warm_start_base`, warm-started when `warm_start.enabled`."""
    base = warm_start_base(config)
    if not config.warm_start.enabled:
        return base
    log.info("warm start (format, not strategy): trained on first use (with its progress below), then cached")
    return ensure_warm(base, config.game.name, warm_start_settings(config))
