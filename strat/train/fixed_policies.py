"""The job's fixed LLM opponents (`policies` entries with `train: false`): where each one's model is and how it plays,
resolved once on the driver before any actor starts. Each gets its own engine (an agent actor loaded from its own
directory, never synced) and plays its seats with its own tokenizer, chat template and reasoning format."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from strat.config import ExperimentConfig
from strat.errors import ConfigError
from strat.eval.policies import checkpoint_play_config
from strat.model import hub
from strat.play.rollout import RolloutSettings, policy_seat
from strat.play.settings import rollout_settings


@dataclass(frozen=True)
class FixedPolicy:
    """One fixed opponent: its name, the model directory its engine and tokenizer load, how it plays, and where it
    came from (for the run log)."""

    name: str
    model_dir: Path
    settings: RolloutSettings
    """The run's rollout settings with this policy's reasoning format (depth, token limit, sampling)."""
    source: str

    @property
    def seat(self) -> str:
        """Its seats' name in episodes (`Episode.seats`) and its player's key in the game loop."""
        return policy_seat(self.name)


def resolve_fixed_policies(config: ExperimentConfig) -> tuple[FixedPolicy, ...]:
    """Every fixed policy of `config`, resolved: a run directory to its latest complete checkpoint (verified), a Hub
    name to its cached snapshot. A policy trained on another game, a missing or damaged checkpoint is a ConfigError
    naming its `policies` entry."""
    run_settings = rollout_settings(config)
    out = []
    for index, policy in enumerate(config.policies):
        if policy.train:
            continue
        key = f"policies.{index}.model"
        path = hub.local_dir(policy.model, key) if hub.parse(policy.model) is not None else Path(policy.model)
        try:
            found = checkpoint_play_config(path.expanduser(), config.game.name, dict(config.game.options), key=key)
        except ConfigError as err:
            raise ConfigError(str(err).replace("--game=", f"{key}: game ")) from None
        settings = run_settings
        if found.carries_format:
            own = rollout_settings(found.config)
            settings = dataclasses.replace(run_settings, depth=own.depth, max_tokens=own.max_tokens,
                                           temperature=own.temperature, top_p=own.top_p)
        source = f"{found.name} ({found.checkpoint})" + ("" if found.carries_format else ", in this run's format")
        out.append(FixedPolicy(policy.name, found.checkpoint, settings, source))
    return tuple(out)
